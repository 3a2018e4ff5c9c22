"""The gaming suite: strategies that try to win the board without diagnosing (tests/gaming_strategies.py),
simulated on the built-in corpus and ranked by the leaderboard's own key. ``python tests/gaming_strategies.py``
prints the table."""

from __future__ import annotations

import pytest
from gaming_strategies import base_rate_spray_skill, base_rates, builtin_corpus, summaries

from diageval.diagnosis import Diagnosis, Finding
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case

SKILL_CEILING_LABEL_BLIND = 0.1


@pytest.fixture(scope="module")
def board():
    ranked = summaries(n_boot=0)
    return {entry.name: (rank, entry, s) for rank, (entry, s) in enumerate(ranked, 1)}


def _of(board, kind):
    return [(name, rank, s) for name, (rank, entry, s) in board.items() if entry.kind == kind]


def test_label_blind_strategies_rank_below_every_honest_diagnoser(board):
    honest = _of(board, "honest")
    blind = _of(board, "label-blind")
    assert len(honest) == 2 and len(blind) >= 6
    worst_honest = max(rank for _, rank, _ in honest)
    for name, rank, s in blind:
        assert rank > worst_honest, (name, s.metrics.skill.value)


def test_stating_the_answer_badly_ranks_below_stating_it_honestly(board):
    """Padding with junk at 0.01, hedging the answer at 0.01, naming every rank: all below the honest row."""
    honest_rank = board["honest: perfect at 0.9"][0]
    gamed = _of(board, "knows the answer")
    assert {name for name, _, _ in gamed} == {"perfect plus junk at 0.01", "perfect at 0.01", "perfect, every rank named"}
    assert all(rank > honest_rank for _, rank, _ in gamed)
    padded, honest = board["perfect plus junk at 0.01"][2].metrics, board["honest: perfect at 0.9"][2].metrics
    assert padded.brier.value > honest.brier.value and padded.skill.value < honest.skill.value
    every = board["perfect, every rank named"][2].metrics
    assert every.skill.value == honest.skill.value and every.skill_ranked.value < honest.skill_ranked.value
    # naming every rank localises only where the job has one rank (recorded single-GPU cases)
    assert every.localization_accuracy.value < honest.localization_accuracy.value


def test_null_ranks_above_every_confidently_misleading_diagnoser(board):
    null_rank = board["null: says nothing"][0]
    misleading = _of(board, "misleading")
    assert len(misleading) == 4
    for name, rank, s in misleading:
        assert rank > null_rank and s.metrics.skill.value < 0, name


def test_a_calibrated_hedge_carries_information_and_beats_null(board):
    """The proper-rule property, stated as a test so that nobody mistakes it for a hole: two wrong causes
    and the right one, each at 1/3, is an honest 'one of these three' and scores above silence. A
    misleading claim at confidence p costs p²; a right one earns 2p − p²: with m wrong claims per right
    one, a diagnoser ranks below null exactly when m > (2 − p) / p (docs/scoring.md)."""
    hedge = board["2 of 3 claims wrong, at 1/3"]
    assert hedge[0] < board["null: says nothing"][0] and hedge[2].metrics.skill.value > 0
    assert hedge[2].metrics.misleading_rate.value > 0.5


def test_no_label_blind_strategy_reaches_skill_0_1(board):
    for name, _, s in _of(board, "label-blind"):
        assert s.metrics.skill.value < SKILL_CEILING_LABEL_BLIND, name


def test_the_base_rate_spray_scores_what_the_analysis_says(board):
    """skill = Σ π_k² / (λ + α) (docs/scoring.md), computed from the live corpus' labels, is what scoring
    gives the base-rate spray; it is below the bound max π · λ / (λ + α) and below the 0.1 ceiling."""
    cases, _ = builtin_corpus()
    skill, bound = base_rate_spray_skill(cases)
    simulated = board["prior spray (every cause at its base rate)"][2].metrics.skill.value
    assert simulated == pytest.approx(skill, abs=1e-9)
    assert 0 < skill <= bound < 1
    assert skill < SKILL_CEILING_LABEL_BLIND, (skill, base_rates(cases))


def test_no_constant_spray_reaches_skill_0_1_at_any_confidence():
    """The best constant is λ / K (labeled causes per case over taxonomy causes) and earns λ² / (K (λ + α)),
    the base-rate spray's skill on a corpus whose causes are equally frequent (docs/scoring.md)."""
    cases, taxonomy = builtin_corpus()
    best = -1.0
    labeled = sum(base_rates(cases).values())
    abstain = sum(c.labels.expect == "abstain" for c in cases) / len(cases)
    optimum = labeled / len(taxonomy.causes)
    optimum_skill = labeled**2 / (len(taxonomy.causes) * (labeled + abstain))
    for step in range(1, 41):
        p = step / 200  # 0.005 .. 0.2
        d = Diagnosis(findings=[Finding(category=c, kind="cause", confidence=p) for c in taxonomy.causes])
        results = [score_case(case, d, taxonomy=taxonomy) for case in cases]
        s = summarize(results, diagnoser=DiagnoserInfo(spec="spray", name="spray"), case_set_hash="x",
                      taxonomy_version=taxonomy.version, n_boot=0)
        best = max(best, s.metrics.skill.value)
    assert 0 < best < SKILL_CEILING_LABEL_BLIND
    assert 0.005 <= optimum <= 0.2  # inside the grid: the grid's best is near the true optimum
    assert optimum_skill - 0.01 < best <= optimum_skill + 1e-9
    assert best <= base_rate_spray_skill(cases)[0] + 1e-9  # knowing the base rates is worth at least as much


def test_always_abstaining_is_judged_both_ways(board):
    m = board["always abstain"][2].metrics
    cases, _ = builtin_corpus()
    abstain_cases = sum(c.labels.expect == "abstain" for c in cases)
    assert m.abstention_recall.value == 1.0
    assert m.abstention_precision.value == pytest.approx(abstain_cases / len(cases))
    assert m.skill.value < 0


def test_f1_reads_null_as_zero_and_reference_rows_are_ordered(board):
    assert board["null: says nothing"][2].metrics.f1.value == 0.0
    assert board["null: says nothing"][2].metrics.skill.value == 0.0
    assert board["honest: perfect at 0.9"][0] == 1
