"""score_case: every verdict kind, every outcome, and the status rules, on hand-built cases."""

from __future__ import annotations

import pytest
from scoring_helpers import CHECKPOINT, LOADER, STALL, STRAGGLER, cause, diag, make_case, symptom

from diageval.cases.taxonomy import load_taxonomy
from diageval.scoring.results import EvidenceFacts
from diageval.scoring.verdicts import score_case

TAX = load_taxonomy()


def verdicts(result):
    return [(v.index, v.category, v.verdict) for v in result.verdicts]


def test_correct_with_labeled_ranks_is_found_and_localized():
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}])
    r = score_case(case, diag(cause(STRAGGLER, 0.8, ranks=[1], impact=0.3)), taxonomy=TAX, evidence=EvidenceFacts(measured_impact=0.35))
    assert verdicts(r) == [(0, STRAGGLER, "correct")]
    (o,) = r.outcomes
    assert (o.outcome, o.localized, o.claim_index) == ("found", True, 0)
    assert r.top_claim == STRAGGLER and r.claimed_impact == 0.3 and r.status == "ok"
    assert all(v.reason for v in r.verdicts) and o.reason


def test_wrong_ranks_is_mislocated_found_but_not_localized():
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}])
    r = score_case(case, diag(cause(STRAGGLER, 0.8, ranks=[0])), taxonomy=TAX)
    assert verdicts(r) == [(0, STRAGGLER, "mislocated")]
    assert (r.outcomes[0].outcome, r.outcomes[0].localized) == ("found", False)
    assert "not a subset of labeled ranks [1]" in r.verdicts[0].reason


def test_naming_every_rank_is_found_but_not_localized():
    """Strict localisation: the claimed ranks must be a non-empty subset of the labeled ranks."""
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}], world_size=4)
    every = score_case(case, diag(cause(STRAGGLER, 0.8, ranks=[0, 1, 2, 3])), taxonomy=TAX)
    assert verdicts(every) == [(0, STRAGGLER, "mislocated")]
    assert (every.outcomes[0].outcome, every.outcomes[0].localized) == ("found", False)
    two = make_case("c2", [{"category": STRAGGLER, "ranks": [1, 2]}], world_size=4)
    subset = score_case(two, diag(cause(STRAGGLER, 0.8, ranks=[2])), taxonomy=TAX)
    assert verdicts(subset) == [(0, STRAGGLER, "correct")] and subset.outcomes[0].localized is True
    assert subset.outcomes[0].claimed_ranks == [2]
    empty = score_case(case, diag(cause(STRAGGLER, 0.8, ranks=[])), taxonomy=TAX)
    assert verdicts(empty) == [(0, STRAGGLER, "correct")] and empty.outcomes[0].localized is False


def forecasts(result):
    return [(f.kind, f.event, f.probability, f.ranked_probability, f.outcome) for f in result.forecasts]


def test_forecasts_cover_labeled_and_claimed_ids_and_the_abstain_decision():
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}], symptoms=["symptom.long_collective"])
    d = diag(cause(STRAGGLER, 0.3, ranks=[0]), cause(STRAGGLER, 0.7), cause(STALL, 0.4), cause(STALL, 0.2),
             cause("symptom.long_collective", 0.9), cause("gpu.thermal_throttle", 0.1))
    r = score_case(case, d, taxonomy=TAX)
    assert forecasts(r) == [
        ("cause", STALL, 0.4, 0.4, False),            # the highest confidence given to it (hedges included)
        ("cause", STRAGGLER, 0.7, 0.7, True),
        # one event per (cause, rank), in the rank-credited score only: the claim at 0.7 names no ranks
        ("rank", f"{STRAGGLER}@0", 0.0, 0.3, False),  # a rank a claim names, not labeled
        ("rank", f"{STRAGGLER}@1", 0.0, 0.0, True),   # the labeled rank, which no claim names
        ("not_a_cause", "gpu.thermal_throttle", 0.1, 0.1, False),
        ("not_a_cause", "symptom.long_collective", 0.9, 0.9, False),
        ("abstain", "abstain", 0.0, 0.0, False),
    ]
    assert r.taxonomy_causes == len(TAX.causes)


def test_forecasts_of_silence_failure_and_abstention():
    ranked = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}])
    null = [("cause", STRAGGLER, 0.0, 0.0, True), ("rank", f"{STRAGGLER}@1", 0.0, 0.0, True),
            ("abstain", "abstain", 0.0, 0.0, False)]
    assert forecasts(score_case(ranked, diag(), taxonomy=TAX)) == null
    assert forecasts(score_case(ranked, None, taxonomy=TAX, status="timeout")) == null
    assert forecasts(score_case(ranked, diag(abstain="x"), taxonomy=TAX))[-1] == ("abstain", "abstain", 1.0, 1.0, False)
    right = score_case(make_case("a1", expect="abstain"), diag(abstain="x"), taxonomy=TAX)
    assert forecasts(right) == [("abstain", "abstain", 1.0, 1.0, True)]
    healthy = score_case(make_case("h1"), diag(cause("symptom.slow_step", 0.5)), taxonomy=TAX)
    assert forecasts(healthy) == [("not_a_cause", "symptom.slow_step", 0.5, 0.5, False),
                                  ("abstain", "abstain", 0.0, 0.0, False)]
    assert score_case(make_case("x"), None, taxonomy=TAX, status="invalid").forecasts == []


def test_label_without_ranks_leaves_ranks_unjudged():
    """A label without ranks means all ranks, or a cause that is not rank-specific: no rank event."""
    r = score_case(make_case("c1", [{"category": LOADER}]), diag(cause(LOADER, 0.6, ranks=[0])), taxonomy=TAX)
    assert forecasts(r) == [("cause", LOADER, 0.6, 0.6, True), ("abstain", "abstain", 0.0, 0.0, False)]
    # a cause nobody labeled: the ranks a claim names are statements about false events
    r = score_case(make_case("c2", [{"category": LOADER}]), diag(cause(STALL, 0.6, ranks=[0, 1])), taxonomy=TAX)
    assert [f for f in forecasts(r) if f[0] == "rank"] == [("rank", f"{STALL}@0", 0.0, 0.6, False),
                                                           ("rank", f"{STALL}@1", 0.0, 0.6, False)]


def test_rank_events_are_one_per_cause_and_rank():
    """Naming every rank of an 8-rank job at 0.5 is eight statements, seven of them false: it scores far
    worse than naming the right rank, and worse than naming the cause alone (issue 21: folded into one false
    event it scored 0.5)."""
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}], world_size=8)

    def ranked_loss(d):
        return sum((f.ranked_probability - f.outcome) ** 2 for f in score_case(case, d, taxonomy=TAX).forecasts)

    every = diag(*(cause(STRAGGLER, 0.5, ranks=[r]) for r in range(8)))
    assert ranked_loss(every) == pytest.approx(0.25 + 0.25 + 7 * 0.25)   # cause, rank 1, seven false ranks
    assert ranked_loss(diag(cause(STRAGGLER, 0.5))) == pytest.approx(0.25 + 1)  # the cause, no rank stated
    assert ranked_loss(diag(cause(STRAGGLER, 0.9, ranks=[1]))) == pytest.approx(0.01 + 0.01)
    assert ranked_loss(diag()) == 2.0  # null: the cause and its labeled rank
    # the unranked score is not touched by ranks: every one of these states the cause at its highest confidence
    assert score_case(case, every, taxonomy=TAX).forecasts[0].probability == 0.5


def test_every_claim_keeps_its_stated_impact():
    r = score_case(make_case("c1", [{"category": LOADER}]), diag(cause(LOADER, 0.9, impact=0.2), cause(STALL, 0.5, impact=0.6)),
                   taxonomy=TAX)
    assert [(v.category, v.impact) for v in r.verdicts] == [(LOADER, 0.2), (STALL, 0.6)]


def test_claim_without_ranks_is_correct_but_not_localized():
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}])
    r = score_case(case, diag(cause(STRAGGLER, 0.8)), taxonomy=TAX)
    assert verdicts(r) == [(0, STRAGGLER, "correct")]
    assert (r.outcomes[0].outcome, r.outcomes[0].localized) == ("found", False)


def test_label_without_ranks_has_no_localisation():
    case = make_case("c1", [{"category": LOADER}])
    r = score_case(case, diag(cause(LOADER, 0.8, ranks=[0])), taxonomy=TAX)
    assert verdicts(r) == [(0, LOADER, "correct")]
    assert r.outcomes[0].localized is None


def test_symptom_as_cause_wrong_cause_unknown_duplicate_in_confidence_order():
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}], symptoms=["symptom.long_collective"])
    d = diag(
        cause("symptom.long_collective", 0.9),   # #0: labeled symptom
        cause(STRAGGLER, 0.55, ranks=[1]),       # #1: judged after #4, so a duplicate
        cause(STALL, 0.6),                       # #2: a cause, not labeled
        cause("gpu.thermal_throttle", 0.52),     # #3: not in the taxonomy
        cause(STRAGGLER, 0.7, ranks=[1]),        # #4: the credited one
        cause("symptom.low_utilization", 0.5),   # #5: an unlabeled symptom is still a symptom (0.5 asserts)
        symptom("symptom.slow_step"),            # #6: kind symptom: recorded, never judged
    )
    r = score_case(case, d, taxonomy=TAX)
    assert verdicts(r) == [
        (0, "symptom.long_collective", "symptom_as_cause"),
        (4, STRAGGLER, "correct"),
        (2, STALL, "wrong_cause"),
        (1, STRAGGLER, "duplicate"),
        (3, "gpu.thermal_throttle", "wrong_cause"),
        (5, "symptom.low_utilization", "symptom_as_cause"),
    ]
    assert r.outcomes[0].claim_index == 4
    assert r.top_claim == "symptom.long_collective"
    assert r.observed_symptoms == ["symptom.slow_step"]
    assert "not in taxonomy" in r.verdicts[4].reason
    assert "already credited to claim #4" in r.verdicts[3].reason


def test_healthy_control_every_cause_claim_is_a_false_alarm():
    case = make_case("h1")
    r = score_case(case, diag(cause(STALL, 0.6), cause("symptom.slow_step", 0.9), symptom("symptom.low_utilization")),
                   taxonomy=TAX)
    assert [v.verdict for v in r.verdicts] == ["false_alarm", "false_alarm"]
    assert r.outcomes == [] and r.categories == []


def test_a_claim_below_half_is_a_hedge_scored_by_the_proper_score_alone():
    """Confidence < 0.5 states that the cause is more likely absent: it finds nothing (no recall, top-1,
    localisation) and misleads nobody (no false alarm), while its probability is still an event of skill."""
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}, {"category": LOADER}])
    r = score_case(case, diag(cause(STRAGGLER, 0.45, ranks=[1]), cause(STALL, 0.2), cause(LOADER, 0.5)), taxonomy=TAX)
    assert verdicts(r) == [(2, LOADER, "correct"), (0, STRAGGLER, "hedge"), (1, STALL, "hedge")]
    assert "0.45 < 0.5" in r.verdicts[1].reason
    assert [o.outcome for o in r.outcomes] == ["missed", "found"]  # label order: straggler, loader
    assert "only a hedge names compute.straggler_rank (confidence 0.45 < 0.5)" in r.outcomes[0].reason
    assert r.top_claim == LOADER
    assert [(f.event, f.probability) for f in r.forecasts if f.kind == "cause"] == [
        (STALL, 0.2), (STRAGGLER, 0.45), (LOADER, 0.5)]
    only_hedges = score_case(make_case("h1"), diag(cause(STALL, 0.49)), taxonomy=TAX)
    assert [v.verdict for v in only_hedges.verdicts] == ["hedge"] and only_hedges.top_claim is None


def test_abstain_case_cause_claim_is_wrong_cause_and_abstaining_is_recorded():
    case = make_case("a1", expect="abstain")
    guess = score_case(case, diag(cause(STRAGGLER, 0.6, ranks=[1])), taxonomy=TAX)
    assert [v.verdict for v in guess.verdicts] == ["wrong_cause"]
    assert "insufficient by design" in guess.verdicts[0].reason
    honest = score_case(case, diag(symptom("symptom.slow_step"), abstain="rank 1 trace missing"), taxonomy=TAX)
    assert honest.status == "abstained" and honest.abstained and honest.verdicts == []


def test_two_labels_same_category_two_claims_find_both():
    case = make_case("c2", [{"category": STRAGGLER, "ranks": [1]}, {"category": STRAGGLER, "ranks": [3]}], world_size=4)
    r = score_case(case, diag(cause(STRAGGLER, 0.9, ranks=[3]), cause(STRAGGLER, 0.8, ranks=[0])), taxonomy=TAX)
    # #0 takes the label it fits (rank 3); #1 takes the remaining label with wrong ranks
    assert verdicts(r) == [(0, STRAGGLER, "correct"), (1, STRAGGLER, "mislocated")]
    assert [(o.claim_index, o.localized) for o in r.outcomes] == [(1, False), (0, True)]


def test_missed_causes_have_reasons():
    case = make_case("c3", [{"category": LOADER}, {"category": CHECKPOINT}])
    r = score_case(case, diag(cause(LOADER, 0.9, impact=0.5), cause(STALL, 0.5, impact=0.4)), taxonomy=TAX)
    assert [o.outcome for o in r.outcomes] == ["found", "missed"]
    assert "no claim names checkpoint.blocking_save" in r.outcomes[1].reason
    assert r.claimed_impact == 0.5  # only credited claims' impacts count
    nothing = score_case(case, diag(), taxonomy=TAX)
    assert all("claimed no cause" in o.reason for o in nothing.outcomes)
    abstained = score_case(case, diag(abstain="truncated"), taxonomy=TAX)
    assert all("abstained (truncated)" in o.reason for o in abstained.outcomes)


@pytest.mark.parametrize("status", ["diagnoser_error", "timeout", "invalid_output"])
def test_diagnoser_failures_miss_every_cause(status):
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}])
    r = score_case(case, None, taxonomy=TAX, status=status, error="boom", seconds=30.0)
    assert r.status == status and r.scored and r.verdicts == []
    assert [o.outcome for o in r.outcomes] == ["missed"] and status in r.outcomes[0].reason


@pytest.mark.parametrize("status", ["harness_error", "invalid"])
def test_unscored_statuses_have_no_verdicts_or_outcomes(status):
    r = score_case(make_case("c1", [{"category": STRAGGLER}]), None, taxonomy=TAX, status=status)
    assert not r.scored and r.verdicts == [] and r.outcomes == []


def test_status_and_diagnosis_must_agree():
    case = make_case("c1", [{"category": STRAGGLER}])
    with pytest.raises(ValueError, match="needs a diagnosis"):
        score_case(case, None, taxonomy=TAX)
    with pytest.raises(ValueError, match="no diagnosis to score"):
        score_case(case, diag(), taxonomy=TAX, status="timeout")
    # the diagnosis, not the caller, decides between ok and abstained
    assert score_case(case, diag(abstain="x"), taxonomy=TAX, status="ok").status == "abstained"


def test_result_round_trips_through_json():
    from diageval.scoring.results import CaseResult

    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}])
    r = score_case(case, diag(cause(STRAGGLER, 0.8, ranks=[1])), taxonomy=TAX, evidence=EvidenceFacts(bundle_id="b", bundle_sha256="s"))
    assert CaseResult.model_validate_json(r.model_dump_json()) == r


def test_results_of_older_scoring_rules_are_refused_with_the_command_that_rescores():
    from diageval.scoring.results import CaseResult

    r = score_case(make_case("c1", [{"category": STRAGGLER}]), diag(), taxonomy=TAX)
    old = r.model_dump(mode="json")
    del old["scoring_version"]
    with pytest.raises(ValueError, match=r"scoring_version.*diageval score RUN_DIR"):
        CaseResult.model_validate(old)
    for version in (1, 2, 4):  # 4: factor events at probability 0 in the headline, no blamable values recorded
        with pytest.raises(ValueError, match=f"scoring_version {version}.*diageval score RUN_DIR"):
            CaseResult.model_validate({**old, "scoring_version": version})


def test_a_case_may_name_its_split():
    from pydantic import ValidationError

    from diageval.cases.model import Case

    data = make_case("c1", [{"category": STRAGGLER}]).model_dump(mode="json", exclude_none=True)
    assert Case.model_validate(data | {"split": "public"}).split == "public"
    assert Case.model_validate(data).split is None
    for bad in ("", "two words", "-leading", 3):
        with pytest.raises(ValidationError, match="split"):
            Case.model_validate(data | {"split": bad})


def test_results_carry_the_split_and_world_size():
    case = make_case("c1", [{"category": STRAGGLER}], world_size=4).model_copy(update={"split": "public"})
    r = score_case(case, diag(), taxonomy=TAX)
    assert (r.split, r.world_size) == ("public", 4)
    assert score_case(make_case("c2"), diag(), taxonomy=TAX).split is None
