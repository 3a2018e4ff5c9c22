"""summarize: every metric against values worked out by hand, undefined metrics, the bootstrap."""

from __future__ import annotations

import random

import pytest
from scoring_helpers import CHECKPOINT, LOADER, STALL, STRAGGLER, cause, diag, make_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.scoring.metrics import METRICS, compute_metrics
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.tallies import tally_table
from diageval.scoring.verdicts import score_case

TAX = load_taxonomy()
INFO = DiagnoserInfo(spec="test", name="test", version="0")


def hand_set():
    """Ten cases; the comments give each claim's verdict. Non-duplicate claims (confidence, credited):
    p1 (0.9, 1) (0.4, 0); p2 (0.8, 0) (0.6, 1); p3 (0.7, 1); h1 (0.2, 0); a2 (0.6, 0)  -> 7 claims, 3 credited.
    """
    s = lambda **kw: dict(taxonomy=TAX, **kw)  # noqa: E731
    return [
        score_case(make_case("p1", [{"category": STRAGGLER, "ranks": [1]}], difficulty="easy"),
                   diag(cause(STRAGGLER, 0.9, ranks=[1], impact=0.3),  # correct, localised
                        cause(STALL, 0.4)),                             # wrong_cause
                   **s(measured_impact=0.4, seconds=2.0)),
        score_case(make_case("p2", [{"category": LOADER}], difficulty="medium"),
                   diag(cause("symptom.low_utilization", 0.8),         # symptom_as_cause (top claim)
                        cause(LOADER, 0.6),                             # correct, no impact claimed
                        cause(LOADER, 0.5)),                            # duplicate: ignored everywhere
                   **s(measured_impact=0.5, seconds=4.0)),
        score_case(make_case("p3", [{"category": STRAGGLER, "ranks": [1]}], difficulty="hard"),
                   diag(cause(STRAGGLER, 0.7, ranks=[0], impact=0.2)),  # mislocated
                   **s(measured_impact=0.1, seconds=6.0)),
        score_case(make_case("p4", [{"category": CHECKPOINT}], difficulty="hard"), None,
                   **s(status="timeout", seconds=30.0, error="timed out after 30 s")),
        score_case(make_case("h1", difficulty="easy"), diag(cause(STALL, 0.2)), **s(seconds=1.0)),  # false_alarm
        score_case(make_case("h2", difficulty="easy"), diag(), **s(seconds=1.0)),
        score_case(make_case("a1", expect="abstain"), diag(abstain="rank 1 trace missing"), **s(seconds=2.0)),
        score_case(make_case("a2", expect="abstain"), diag(cause(STRAGGLER, 0.6)), **s(seconds=2.0)),  # wrong_cause
        score_case(make_case("x1", [{"category": LOADER}]), None, **s(status="invalid")),
        score_case(make_case("x2", [{"category": LOADER}]), None, **s(status="harness_error", error="oom")),
    ]


@pytest.fixture(scope="module")
def summary() -> Summary:
    return summarize(hand_set(), diagnoser=INFO, case_set_hash="abc", taxonomy_version=TAX.version, n_boot=500)


def test_counts(summary):
    c = summary.counts
    assert (c.cases, c.scored, c.invalid) == (10, 8, 1)
    assert c.statuses == {"abstained": 1, "harness_error": 1, "invalid": 1, "ok": 6, "timeout": 1}
    assert c.expect == {"abstain": 2, "diagnose": 4, "healthy": 2}


def test_every_metric_by_hand(summary):
    m = summary.metrics
    expected = {
        # metric: (value, n)
        "precision": (3 / 7, 7),                   # credited p1 0.9, p2 0.6, p3 0.7 of 7 claims
        "recall": (3 / 4, 4),                      # p1, p2, p3 found; p4 timed out
        "f1": (6 / 11, 8),                         # 2 (3/7)(3/4) / (3/7 + 3/4) = (18/28) / (33/28); n = scored cases
        "misleading_rate": (4 / 7, 7),             # p1 0.4, p2 0.8, h1 0.2, a2 0.6
        "misleading_rate_weighted": (2.0 / 4.2, 7),  # (.4+.8+.2+.6) / (.9+.4+.8+.6+.7+.2+.6)
        "false_alarm_rate": (1 / 2, 2),            # h1 claimed, h2 did not
        "abstention_accuracy": (1 / 2, 2),         # a1 abstained, a2 guessed
        "top1_accuracy": (2 / 4, 4),               # p1, p3 (mislocated still names the cause); p2 symptom; p4 none
        "localization_accuracy": (1 / 2, 2),       # p1 overlaps, p3 wrong ranks; p2's label has no ranks
        "impact_mae": ((0.1 + 0.1) / 2, 2),        # p1 |0.3-0.4|, p3 |0.2-0.1|; p2 claimed none
        # (.9-1)^2+(.4)^2+(.8)^2+(.6-1)^2+(.7-1)^2+(.2)^2+(.6)^2 = .01+.16+.64+.16+.09+.04+.36 = 1.46
        "brier": (1.46 / 7, 7),
        # bins: 9 |.9-1|=.1; 4 .4; 8 .8; 6 |(.6+.6)-1|=.2; 7 |.7-1|=.3; 2 .2 -> 2.0 / 7 claims
        "ece": (2.0 / 7, 7),
        "seconds_per_case": (48 / 8, 8),           # 2+4+6+30+1+1+2+2 over the 8 scored cases
    }
    assert set(expected) == set(type(m).model_fields)
    for name, (value, n) in expected.items():
        got = getattr(m, name)
        assert got.value == pytest.approx(value), name
        assert got.n == n, name


def test_brier_from_sums_equals_scikit_learn(summary):
    table = tally_table([r for r in hand_set() if r.scored])
    sums_form = compute_metrics(table, {"brier": METRICS["brier"]}, n_boot=0)["brier"].value
    assert sums_form == pytest.approx(summary.metrics.brier.value)


def test_by_category(summary):
    assert list(summary.by_category) == [CHECKPOINT, STRAGGLER, LOADER]  # sorted ids
    st = summary.by_category[STRAGGLER]
    assert (st.causes, st.claims) == (2, 3)        # p1, p3 labeled; claims p1 0.9, p3 0.7, a2 0.6
    assert st.recall.value == 1.0
    assert st.precision.value == pytest.approx(2 / 3)
    assert st.f1.value == pytest.approx(0.8)       # 2 (2/3)(1) / (5/3)
    assert st.localization_accuracy.value == 0.5
    ld = summary.by_category[LOADER]
    assert (ld.causes, ld.claims, ld.precision.value) == (1, 1, 1.0)  # the duplicate is not a claim
    assert ld.localization_accuracy.value is None
    ck = summary.by_category[CHECKPOINT]
    assert (ck.recall.value, ck.precision.value, ck.f1.value) == (0.0, None, None)


def test_by_difficulty(summary):
    d = summary.by_difficulty
    assert {k: v.cases for k, v in d.items()} == {"easy": 3, "medium": 3, "hard": 2}
    assert d["easy"].metrics.precision.value == pytest.approx(1 / 3)  # p1 0.9 of p1 0.9, 0.4 and h1 0.2
    assert d["easy"].metrics.false_alarm_rate.value == 0.5
    assert d["easy"].metrics.abstention_accuracy.value is None        # no abstain case is easy
    assert d["hard"].metrics.recall.value == 0.5                      # p3 found, p4 timed out
    assert d["medium"].metrics.abstention_accuracy.value == 0.5


def test_confusion(summary):
    c = summary.confusion
    assert c.labels == [CHECKPOINT, STALL, STRAGGLER, LOADER, "symptom.low_utilization", "none"]
    assert c.matrix == [
        [0, 0, 0, 0, 0, 1],  # p4 timed out: no claim
        [0, 0, 0, 0, 0, 0],
        [0, 0, 2, 0, 0, 0],  # p1, p3
        [0, 0, 0, 0, 1, 0],  # p2's top claim is a symptom
        [0, 0, 0, 0, 0, 0],
        [0, 1, 1, 0, 0, 2],  # h1 -> stall, a2 -> straggler, h2 and a1 -> none
    ]


def test_undefined_metrics_are_none_not_zero():
    results = [score_case(make_case("p1", [{"category": LOADER}]), diag(), taxonomy=TAX)]
    m = summarize(results, diagnoser=INFO, case_set_hash="abc", taxonomy_version="1", n_boot=50).metrics
    for name in ("precision", "f1", "misleading_rate", "misleading_rate_weighted", "false_alarm_rate",
                 "abstention_accuracy", "localization_accuracy", "impact_mae", "brier", "ece", "seconds_per_case"):
        assert getattr(m, name).value is None and getattr(m, name).ci is None, name
    assert (m.recall.value, m.top1_accuracy.value) == (0.0, 0.0)


def test_f1_is_zero_when_precision_and_recall_are():
    results = [score_case(make_case("p1", [{"category": LOADER}]), diag(cause(STALL, 0.9)), taxonomy=TAX)]
    m = summarize(results, diagnoser=INFO, case_set_hash="abc", taxonomy_version="1", n_boot=50).metrics
    assert (m.precision.value, m.recall.value, m.f1.value) == (0.0, 0.0, 0.0)


def test_bootstrap_is_deterministic_and_ignores_result_order():
    results = hand_set()
    a = summarize(results, diagnoser=INFO, case_set_hash="abc", taxonomy_version="1", n_boot=300, seed=7)
    shuffled = results[:]
    random.Random(1).shuffle(shuffled)
    b = summarize(shuffled, diagnoser=INFO, case_set_hash="abc", taxonomy_version="1", n_boot=300, seed=7)
    assert a == b
    c = summarize(results, diagnoser=INFO, case_set_hash="abc", taxonomy_version="1", n_boot=300, seed=8)
    assert a.metrics.precision.ci != c.metrics.precision.ci


def test_interval_contains_point_estimate(summary):
    checked = 0
    for name, mv in summary.metrics:
        if mv.value is not None:
            lo, hi = mv.ci
            assert lo <= mv.value <= hi, name
            checked += 1
    assert checked == 13
    assert summary.metrics.precision.ci[0] < summary.metrics.precision.ci[1]  # not degenerate


def test_summary_json_round_trips(summary):
    assert Summary.model_validate_json(summary.model_dump_json()) == summary


def test_repeated_case_ids_are_refused():
    r = hand_set()[0]
    with pytest.raises(ValueError, match="more than once: p1"):
        summarize([r, r], diagnoser=INFO, case_set_hash="abc", taxonomy_version="1")
