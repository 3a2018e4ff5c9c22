"""The events of the headline score (docs/scoring.md, "Events of one case"): one event per taxonomy
cause, so a category labeled twice in one case (e.g. on two ranks) is one true event, and silence loses 1
on it, not 2 (issue 21, item 6). Recall still counts each label. (Rank events, which only the
rank-credited score reads, are left out here.)"""

from __future__ import annotations

from scoring_helpers import STRAGGLER, cause, diag, make_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.scoring.verdicts import score_case

TAXONOMY = load_taxonomy()
TWICE = make_case("straggler-twice", [{"category": STRAGGLER, "ranks": [0]}, {"category": STRAGGLER, "ranks": [2]}],
                  world_size=4)


def headline_events(result) -> list:
    return [f for f in result.forecasts if f.kind != "rank"]


def brier(result) -> float:
    """The case's loss in the headline score: Σ (probability − outcome)² over its events."""
    return sum((f.probability - f.outcome) ** 2 for f in headline_events(result))


def test_a_category_labeled_twice_is_one_true_event():
    silent = score_case(TWICE, None, taxonomy=TAXONOMY, status="timeout")
    assert [(f.kind, f.event, f.outcome) for f in headline_events(silent)] == [
        ("cause", STRAGGLER, True), ("abstain", "abstain", False)]
    assert brier(silent) == 1.0  # what silence loses: one labeled category, not two labels
    assert len(silent.outcomes) == 2  # recall: each label is a cause to find


def test_claims_on_a_category_labeled_twice_are_scored_as_one_statement():
    one = score_case(TWICE, diag(cause(STRAGGLER, 0.8, ranks=[0])), taxonomy=TAXONOMY)
    assert [(f.kind, f.event, f.probability) for f in headline_events(one) if f.kind == "cause"] == [("cause", STRAGGLER, 0.8)]
    assert abs(brier(one) - 0.2 ** 2) < 1e-12
    both = score_case(TWICE, diag(cause(STRAGGLER, 1.0, ranks=[0]), cause(STRAGGLER, 0.9, ranks=[2])), taxonomy=TAXONOMY)
    assert [(f.event, f.probability) for f in headline_events(both) if f.kind == "cause"] == [(STRAGGLER, 1.0)]
    assert brier(both) == 0.0
    assert [o.outcome for o in one.outcomes] == ["found", "missed"] and [o.outcome for o in both.outcomes] == ["found"] * 2
