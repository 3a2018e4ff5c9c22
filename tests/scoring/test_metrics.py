"""summarize: every metric against values worked out by hand, undefined metrics, the bootstrap."""

from __future__ import annotations

import random

import pytest
from scoring_helpers import CHECKPOINT, LOADER, STALL, STRAGGLER, cause, diag, make_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.scoring.metrics import METRICS, compute_metrics
from diageval.scoring.results import EvidenceFacts
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.tallies import tally_table
from diageval.scoring.verdicts import score_case

TAX = load_taxonomy()
PAIRS = 8 * len(TAX.causes)  # the hand set's 8 scored cases x every cause of the taxonomy
INFO = DiagnoserInfo(spec="test", name="test", version="0")


def hand_set():
    """Ten cases; the comments give each claim's verdict. Asserted (confidence >= 0.5), non-duplicate claims
    (confidence, credited): p1 (0.9, 1); p2 (0.8, 0) (0.6, 1); p3 (0.7, 1); h1 (0.55, 0); a2 (0.6, 0) -> 6 claims,
    3 credited; p1's claim at 0.4 is a hedge (the proper score alone).
    """
    s = lambda difficulty=None, measured_impact=None, **kw: dict(  # noqa: E731
        taxonomy=TAX, evidence=EvidenceFacts(difficulty=difficulty, measured_impact=measured_impact), **kw)
    return [
        score_case(make_case("p1", [{"category": STRAGGLER, "ranks": [1]}]),
                   diag(cause(STRAGGLER, 0.9, ranks=[1], impact=0.3),  # correct, localised
                        cause(STALL, 0.4)),                             # hedge: below 0.5
                   **s(difficulty="easy", measured_impact=0.4, seconds=2.0)),
        score_case(make_case("p2", [{"category": LOADER}]),
                   diag(cause("symptom.low_utilization", 0.8),         # symptom_as_cause (top claim)
                        cause(LOADER, 0.6),                             # correct, no impact claimed
                        cause(LOADER, 0.5)),                            # duplicate: ignored everywhere
                   **s(difficulty="medium", measured_impact=0.5, seconds=4.0)),
        score_case(make_case("p3", [{"category": STRAGGLER, "ranks": [1]}]),
                   diag(cause(STRAGGLER, 0.7, ranks=[0], impact=0.2)),  # mislocated
                   **s(difficulty="hard", measured_impact=0.1, seconds=6.0)),
        score_case(make_case("p4", [{"category": CHECKPOINT}]), None,
                   **s(difficulty="hard", status="timeout", seconds=30.0, error="timed out after 30 s")),
        score_case(make_case("h1"), diag(cause(STALL, 0.55)), **s(difficulty="easy", seconds=1.0)),  # false_alarm
        score_case(make_case("h2"), diag(), **s(difficulty="easy", seconds=1.0)),
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
        # Headline loss per case (squared errors over its forecasts, hedges included):
        # p1 (.9-1)^2 + .4^2 = .17; p2 (.6-1)^2 + .8^2 (symptom) = .80; p3 (.7-1)^2 = .09; p4 timed out: 1;
        # h1 .55^2 = .3025; h2 0; a1 abstained rightly: 0; a2 .6^2 + (0-1)^2 (did not abstain) = 1.36 -> 3.7225.
        # Reference (climatology) over the 8 scored cases: straggler on 2, loader on 1, checkpoint on 1, 2 abstain:
        # R = 2 (1 - 2/8) + 1 (1 - 1/8) + 1 (1 - 1/8) + 2 = 5.25.
        "skill": (1 - 3.7225 / 5.25, 8),
        # rank events (straggler only: the others are labeled without ranks): p1 rank 1 at .9: .01; p3 rank 0 at
        # .7 (false): .49 and rank 1 unstated: 1 -> 3.7225 + .01 + 1.49 = 5.2225. Its reference adds the ranks'
        # climatology per rank position: rank 0 labeled on none of the 8 cases (0), rank 1 on 2 of 8:
        # 2 (1 - 2/8) = 1.5 -> 6.75 (one rate per cause, 2 (1 - 2/16) = 1.75, is beaten by one per position).
        "skill_ranked": (1 - 5.2225 / 6.75, 8),
        "f1": (6 / 10, 8),                         # 2*3 / (2*3 + 3 misleading + 1 missed)
        "precision": (3 / 6, 6),                   # credited p1 0.9, p2 0.6, p3 0.7 of 6 asserted claims
        "recall": (3 / 4, 4),                      # p1, p2, p3 found; p4 timed out
        "misleading_rate": (3 / 6, 6),             # p2 0.8, h1 0.55, a2 0.6 (p1's 0.4 is a hedge)
        "misleading_rate_weighted": (1.95 / 4.15, 6),  # (.8+.55+.6) / (.9+.8+.6+.7+.55+.6)
        "false_alarm_rate": (1 / 2, 2),            # h1 claimed, h2 did not
        "abstention_precision": (1 / 1, 1),        # a1 is the only abstention, and right
        "abstention_recall": (1 / 2, 2),           # a1 abstained, a2 guessed
        "top1_accuracy": (2 / 4, 4),               # p1, p3 (mislocated still names the cause); p2 symptom; p4 none
        "localization_accuracy": (1 / 2, 2),       # p1 [1] of [1], p3 [0] of [1]; p2's label has no ranks
        "rank_precision": (1 / 2, 2),              # ranks named: p1 {1} (labeled), p3 {0} (not)
        "rank_recall": (1 / 2, 2),                 # labeled ranks: p1 {1} (named), p3 {1} (not)
        "impact_mae": ((0.1 + 0.1) / 2, 2),        # p1 |0.3-0.4|, p3 |0.2-0.1|; no misleading claim states one
        # every (case, taxonomy cause) pair, 8 cases x PAIRS / 8 causes: (.9-1)^2 + .4^2 + (.6-1)^2 + (.7-1)^2
        # + (0-1)^2 (p4) + .55^2 + .6^2 = 2.0825; the symptom p2 claimed is not a pair
        "brier": (2.0825 / PAIRS, PAIRS),
        # bins: p=0 |0 - 1| (p4's missed cause); (.8,.9] .1; (.3,.4] .4; (.5,.6] |(.6+.55+.6) - 1| = .75;
        # (.6,.7] .3 -> 2.55 / PAIRS pairs
        "ece": (2.55 / PAIRS, PAIRS),
        "seconds_per_case": (48 / 8, 8),           # 2+4+6+30+1+1+2+2 over the 8 scored cases
        # one job's cases: no factor stated or labeled, no magnitude (tests/scoring/test_scoring_factors.py has them)
        "factor_precision": (None, 0), "factor_recall": (None, 0), "magnitude_error": (None, 0),
        "defect_wrong_rate": (None, 0),           # no defect case here (tests/recording/test_evidence_defects.py has them)
        # the labels checkable for grounding: p1's and p3's rank 1 of 2 (half the ranks); p1 found with no citation,
        # p3 not found: 0 of 2 grounded (tests/scoring/test_grounding.py has citations)
        "grounded_recall": (0 / 2, 2),
        # no agent here: no usage on any case (tests/run/test_repeats.py and the agent tests have them)
        **{f"{c}_per_case": (None, 0) for c in ("prompt_tokens", "completion_tokens", "cached_tokens", "dollars", "turns",
                                                "tool_calls")},
    }
    assert set(expected) == set(type(m).model_fields)
    for name, (value, n) in expected.items():
        got = getattr(m, name)
        assert got.value == (None if value is None else pytest.approx(value)), name
        assert got.n == n, name


def test_reliability_table_over_every_pair(summary):
    bins = summary.reliability
    assert [(b.lo, b.hi) for b in bins[:3]] == [(0.0, 0.0), (0.0, 0.1), (0.1, 0.2)]
    assert sum(b.pairs for b in bins) == PAIRS
    # 6 pairs were claimed (p1 x2, p2, p3, h1, a2); the other PAIRS - 6 sit at 0, p4's missed cause among them
    unclaimed = PAIRS - 6
    assert (bins[0].pairs, bins[0].mean_probability, bins[0].observed) == (unclaimed, 0.0, pytest.approx(1 / unclaimed))
    six = bins[6]  # (0.5, 0.6]: p2's labeled cause at .6, h1's alarm at .55, a2's guess at .6
    assert (six.pairs, six.mean_probability, six.observed) == (3, pytest.approx(1.75 / 3), pytest.approx(1 / 3))
    assert bins[1].pairs == 0 and bins[1].mean_probability is None and bins[1].observed is None


def test_sums_form_equals_a_direct_computation_on_random_diagnoses():
    """Skill and Brier from the tally sums equal a direct loop over (case, cause) pairs, and skill's reference
    is the loss of the climatological forecast (every cause at the share of cases labeled with it)."""
    rng = random.Random(3)
    results, loss, pair_sq, labels = [], 0.0, 0.0, []
    for i in range(40):
        label = rng.choice(TAX.causes)
        expect = rng.choice(["diagnose", "diagnose", "healthy", "abstain"])
        case = make_case(f"r{i}", [{"category": label}] if expect == "diagnose" else [], expect=expect)
        abstain = expect != "diagnose" and rng.random() < 0.5
        claims = [] if abstain else [cause(rng.choice(TAX.causes + TAX.symptoms), round(rng.random(), 3))
                                     for _ in range(rng.randrange(4))]
        results.append(score_case(case, diag(*claims, abstain="x" if abstain else None), taxonomy=TAX))
        labeled = {label} if expect == "diagnose" else set()
        for c in TAX.causes + TAX.symptoms:
            p = max((f.confidence for f in claims if f.category == c), default=0.0)
            err = (p - (c in labeled)) ** 2
            loss += err
            pair_sq += err if c in TAX.causes else 0.0
        loss += (abstain - (expect == "abstain")) ** 2
        labels.append((labeled, expect == "abstain"))
    rates = {c: sum(c in lab for lab, _ in labels) / len(labels) for c in TAX.causes}
    climatology = sum((rates[c] - (c in lab)) ** 2 for lab, _ in labels for c in TAX.causes)
    climatology += sum(abstain for _, abstain in labels)  # the abstain event: stated 0, true on abstain cases
    m = compute_metrics(tally_table(results), n_boot=0)
    assert m["skill"].value == pytest.approx(1 - loss / climatology)
    assert m["brier"].value == pytest.approx(pair_sq / (40 * len(TAX.causes)))


def test_by_category(summary):
    assert list(summary.by_category) == [CHECKPOINT, STRAGGLER, LOADER]  # sorted ids
    st = summary.by_category[STRAGGLER]
    assert (st.causes, st.claims) == (2, 3)        # p1, p3 labeled; claims p1 0.9, p3 0.7, a2 0.6
    assert st.recall.value == 1.0
    assert st.precision.value == pytest.approx(2 / 3)
    assert st.f1.value == pytest.approx(0.8)       # 2*2 / (2*2 + a2's wrong claim + 0 missed)
    assert st.localization_accuracy.value == 0.5
    ld = summary.by_category[LOADER]
    assert (ld.causes, ld.claims, ld.precision.value) == (1, 1, 1.0)  # the duplicate is not a claim
    assert ld.localization_accuracy.value is None
    ck = summary.by_category[CHECKPOINT]
    assert (ck.recall.value, ck.precision.value, ck.f1.value) == (0.0, None, 0.0)  # F1 reads silence as 0


def test_by_difficulty(summary):
    d = summary.by_difficulty
    # a1 and a2 have no measured difficulty (nothing injected was verified): in no bucket
    assert {k: v.cases for k, v in d.items()} == {"easy": 3, "medium": 1, "hard": 2}
    assert d["easy"].metrics.precision.value == pytest.approx(1 / 2)  # p1 0.9 of p1 0.9 and h1 0.55 (0.4: a hedge)
    assert d["easy"].metrics.false_alarm_rate.value == 0.5
    assert d["easy"].metrics.abstention_recall.value is None          # no abstain case is easy
    assert d["hard"].metrics.recall.value == 0.5                      # p3 found, p4 timed out
    # p1, h1, h2, against their own climatology: straggler on 1 of 3 cases, R = 1 (1 - 1/3)
    assert d["easy"].metrics.skill.value == pytest.approx(1 - (0.17 + 0.3025) / (2 / 3))


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
    for name in ("precision", "misleading_rate", "misleading_rate_weighted", "false_alarm_rate",
                 "abstention_precision", "abstention_recall", "localization_accuracy", "rank_precision",
                 "rank_recall", "impact_mae", "seconds_per_case"):
        assert getattr(m, name).value is None and getattr(m, name).ci is None, name
    assert (m.recall.value, m.top1_accuracy.value, m.f1.value) == (0.0, 0.0, 0.0)
    # one case: its base rates are its labels, so climatology loses nothing and skill is undefined
    assert m.skill.value is None and m.skill.ci is None


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
    # bootstrapped: some BCa end (the hull's other half, the jackknife-t interval, has no seed; nor has Jeffreys)
    assert any(getattr(a.metrics, name).ci != getattr(c.metrics, name).ci for name, spec in METRICS.items()
               if spec.proportion is None)


def test_interval_contains_point_estimate(summary):
    checked = 0
    for name, mv in summary.metrics:
        if mv.value is not None:
            lo, hi = mv.ci
            assert lo <= mv.value <= hi, name
            checked += 1
    assert checked == 19  # grounded recall (0 of 2) included
    assert summary.metrics.precision.ci[0] < summary.metrics.precision.ci[1]  # not degenerate


def test_summary_json_round_trips(summary):
    assert Summary.model_validate_json(summary.model_dump_json()) == summary


def test_repeated_case_ids_are_refused():
    r = hand_set()[0]
    with pytest.raises(ValueError, match="more than once: p1"):
        summarize([r, r], diagnoser=INFO, case_set_hash="abc", taxonomy_version="1")


def test_old_summaries_are_refused_with_the_command_that_rescores(summary):
    old = summary.model_dump(mode="json") | {"schema_version": 1}
    with pytest.raises(ValueError, match=r"schema version 1.*diageval score RUN_DIR"):
        Summary.model_validate(old)


def _ladder(found_by_impact):
    """Cases of one cause at the given measured impacts, found or not."""
    out = []
    for i, (impact, found) in enumerate(found_by_impact):
        case = make_case(f"s{i:02d}", [{"category": LOADER}])
        out.append(score_case(case, diag(cause(LOADER, 0.9)) if found else diag(), taxonomy=TAX, evidence=EvidenceFacts(measured_impact=impact)))
    return out


def test_detection_limit_is_undefined_without_enough_severities():
    s = summarize(_ladder([(0.1, True), (0.3, True), (0.5, True), (0.7, True)]), diagnoser=INFO, case_set_hash="x",
                  taxonomy_version="1", n_boot=0)
    d = s.detection[LOADER]
    assert (d.cases, d.limit) == (4, None) and "undefined: 4 case(s)" in d.note and "severities" in d.note
    assert [(p.impact, p.found) for p in d.points] == [(0.1, True), (0.3, True), (0.5, True), (0.7, True)]


def test_detection_limit_is_where_the_found_rate_curve_crosses_half():
    ladder = [(0.02, False), (0.05, False), (0.1, True), (0.2, False), (0.3, True), (0.4, True), (0.5, True),
              (0.6, True)]
    d = summarize(_ladder(ladder), diagnoser=INFO, case_set_hash="x", taxonomy_version="1", n_boot=0).detection[LOADER]
    # the isotonic curve: 0, 0, 1/2, 1/2, 1, ...: 50% at 0.1; 5 of the 6 cases from 0.1 up found
    assert (d.state, d.limit, d.recall_above) == ("measured", pytest.approx(0.1), pytest.approx(5 / 6))
    never = summarize(_ladder([(x / 10, False) for x in range(1, 9)]), diagnoser=INFO, case_set_hash="x",
                      taxonomy_version="1", n_boot=0).detection[LOADER]
    assert never.state == "not_reached" and never.ci[1] is None and "stays under 50%" in never.note
