"""The gaming suite: strategies that try to win the board without diagnosing (tests/gaming_strategies.py),
simulated on the built-in corpus and ranked by the leaderboard's own key. ``python tests/gaming_strategies.py``
prints the table."""

from __future__ import annotations

import numpy as np
import pytest
from gaming_strategies import (
    MIN_PEERS,
    VISIBLE,
    base_rates,
    builtin_corpus,
    factor_base_rates,
    null_skill,
    part_summaries,
    rank_base_rates,
    summaries,
)

from diageval.diagnosis import Diagnosis, Finding
from diageval.reports.board_gate import label_counts, null_closed_forms, rank_counts, rank_spray_closed_form
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import blamable_values, score_case

STRATUM_CEILING = 0.02
"""What base rates per bundle-metadata stratum, counted on the stratum's other cases, may earn (issue 21): a
corpus property. Above it, some stratum (evidence kind, device, world-size bucket) predicts the label class:
the fix is in the corpus (spread the labels over the strata), not the score."""
FLEET_PART_CEILING = 0.05
"""What a label-blind strategy may earn on the regression and fleet cases alone (issue 39 item 3)."""
EXACT = 1e-9
CORPUS_LEAKS: dict[str, str] = {}
"""Label-blind strategies that beat a ceiling on the built-in corpus: a finding about the corpus, kept as a strict
expected failure (it turns into a failure the day the corpus no longer leaks, so the entry is then removed).
Empty since scoring version 5 (factor events against the climatology of their factor name, over the values a case
could blame): "a regression's changed values at their rate", which read 0.034 on the board and 0.151 on the
regression and fleet cases under version 4, read 0.016 and 0.044 (skill) under version 5 while a regression's runs
differed in exactly one factor, and reads -0.021 and -0.101 since every public regression changes two (issue 39 item 2;
its per-factor-name variant +0.010 and +0.018, base rates per value word as bundles show them -0.045 and -0.259)."""


@pytest.fixture(scope="module")
def board():
    ranked = summaries(n_boot=0)
    return {entry.name: (rank, entry, s) for rank, (entry, s) in enumerate(ranked, 1)}


def _of(board, kind):
    return [(name, rank, s) for name, (rank, entry, s) in board.items() if entry.kind == kind]


def test_label_blind_strategies_rank_below_every_honest_diagnoser(board):
    honest = _of(board, "honest")
    blind = _of(board, "label-blind")
    assert len(honest) == 2 and len(blind) >= 12
    worst_honest = max(rank for _, rank, _ in honest)
    for name, rank, s in blind:
        assert rank > worst_honest, (name, s.metrics.skill.value)


def test_stating_the_answer_badly_ranks_below_stating_it_honestly(board):
    """Padding with junk at 0.01, hedging the answer at 0.01, naming every rank: all below the honest row."""
    honest_rank = board["honest: perfect at 0.9"][0]
    gamed = _of(board, "knows the answer")
    assert {name for name, _, _ in gamed} == {"perfect plus junk at 0.01", "perfect at 0.01", "perfect, every rank named",
                                              "perfect, every factor value named", "right causes at 0.9, no factor value",
                                              "right causes at 0.9, the wrong factor value everywhere"}
    assert all(rank > honest_rank for _, rank, _ in gamed)
    padded, honest = board["perfect plus junk at 0.01"][2].metrics, board["honest: perfect at 0.9"][2].metrics
    assert padded.brier.value > honest.brier.value and padded.skill.value < honest.skill.value
    every = board["perfect, every rank named"][2].metrics
    assert every.skill.value == honest.skill.value and every.skill_ranked.value < honest.skill_ranked.value
    # naming every rank localises only where the job has one rank (recorded single-GPU cases)
    assert every.localization_accuracy.value < honest.localization_accuracy.value
    # naming every factor value of a fleet behind a cause: a lower score in both (the factor is in the headline
    # since issue 39) and a lower factor precision
    values = board["perfect, every factor value named"][2].metrics
    assert values.skill.value < honest.skill.value and values.skill_ranked.value < honest.skill_ranked.value
    assert values.factor_precision.value < honest.factor_precision.value == 1.0


def test_where_in_a_fleet_counts_in_the_headline(board):
    """Issue 39 item 1: the right cause with no factor value, and the right cause behind the wrong value
    everywhere, score below the honest diagnoser in skill, on the whole board and in its regression and fleet
    parts (before, all three were equal in skill and in every board part); the wrong value is below saying
    nothing about it (a false statement costs, silence does not)."""
    honest = board["honest: perfect at 0.9"][2].metrics
    silent = board["right causes at 0.9, no factor value"][2].metrics
    wrong = board["right causes at 0.9, the wrong factor value everywhere"][2].metrics
    assert honest.skill.value > silent.skill.value > wrong.skill.value
    assert honest.skill_ranked.value > silent.skill_ranked.value > wrong.skill_ranked.value
    assert wrong.factor_precision.value == 0.0 and silent.factor_recall.value == 0.0
    for kind in ("regression", "fleet"):  # the board's case-kind parts (Summary.by_kind)
        part = [board[name][2].by_kind[kind].metrics.skill.value for name in (
            "honest: perfect at 0.9", "right causes at 0.9, no factor value",
            "right causes at 0.9, the wrong factor value everywhere")]
        assert part[0] > part[1] > part[2], (kind, part)


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
    # claims below 0.5 are hedges: they enter the proper score alone, so no count sees them
    m = hedge[2].metrics
    assert (m.precision.value, m.misleading_rate.value, m.recall.value, m.f1.value) == (None, None, 0.0, 0.0)


def test_no_label_blind_strategy_beats_the_base_rates(board):
    """Every label-blind strategy scores skill <= 0 (0 is the corpus' base rates); those that read bundle
    metadata, counted leave-one-out, at most STRATUM_CEILING; in both scores."""
    blind = _of(board, "label-blind")
    for name, _, s in blind:
        if name in CORPUS_LEAKS:
            continue  # test_visible_strata_stay_under_their_ceilings: a strict expected failure
        ceiling = STRATUM_CEILING if name.startswith(("metadata-stratum", "visible stratum")) else EXACT
        assert s.metrics.skill.value <= ceiling, (name, s.metrics.skill.value)
        assert s.metrics.skill_ranked.value <= ceiling, (name, s.metrics.skill_ranked.value)
    assert any(name.startswith("metadata-stratum") for name, _, _ in blind)
    assert sum(name.startswith("visible stratum") for name, _, _ in blind) >= len(VISIBLE)


@pytest.fixture(scope="module")
def fleet_part():
    return part_summaries()


def _visible_names():
    cases, taxonomy = builtin_corpus()
    from gaming_strategies import strategies

    return [e.name for e in strategies(cases, taxonomy) if e.name.startswith("visible stratum")]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=CORPUS_LEAKS[n]))
                                  if n in CORPUS_LEAKS else n for n in _visible_names()])
def test_visible_strata_stay_under_their_ceilings(board, fleet_part, name):
    """Base rates per stratum of what a boxed diagnoser reads without a trace (case kind, workload shape, world
    size, trace files, fleet and regression metadata; at least MIN_PEERS other cases a stratum, leave-one-out),
    fleet values included: <= 0.02 on the board and <= 0.05 on the regression and fleet cases, in both scores."""
    board_m, part_m = board[name][2].metrics, fleet_part[name].metrics
    for label, m, ceiling in (("board", board_m, STRATUM_CEILING), ("regression and fleet", part_m, FLEET_PART_CEILING)):
        assert m.skill.value <= ceiling, (label, m.skill.value)
        assert m.skill_ranked.value <= ceiling, (label, m.skill_ranked.value)


def test_naming_the_candidates_differing_values_is_no_answer():
    """Issue 39 item 2: reading no trace, "name the candidate's differing values" (each at 1.0) was right in 0.83 of
    its statements while a regression's runs differed in exactly one factor. Now every public regression changes two
    or more, one at most at fault, so at most half of those statements are true; and the bundle's value words are
    drawn per assembly, so the case files' words name nothing a bundle shows."""
    from gaming_strategies import name_the_differing_values

    cases, taxonomy = builtin_corpus()
    regressions = [c for c in cases if c.kind == "regression" and c.fleet.changed_values()]
    results = [score_case(c, name_the_differing_values(c), taxonomy=taxonomy) for c in regressions]
    summary = summarize(results, diagnoser=DiagnoserInfo(spec="differing", name="differing"), case_set_hash="builtin",
                        taxonomy_version=taxonomy.version, n_boot=0)
    precision = summary.metrics.factor_precision.value
    assert precision is not None and precision <= 0.5, precision
    words, _ = builtin_corpus(shown=False)
    shown_words = {(r.name, r.value) for c in regressions for r in c.fleet.changed_values()}
    file_words = {(r.name, r.value) for c in words if c.kind == "regression" for r in c.fleet.changed_values()}
    assert len(shown_words) > 2 * len(file_words)  # drawn per case: few words repeat between cases


def test_the_visible_strata_read_no_label():
    """A stratum is a function of what the box shows: the same case with other labels (another cause, other
    ranks, another expectation) falls in the same stratum of every kind."""
    from diageval.cases.model import Labels

    cases, _ = builtin_corpus()
    for case in cases:
        relabeled = case.model_copy(update={"labels": Labels(expect="healthy")})
        for name, key in VISIBLE.items():
            assert key(relabeled) == key(case), (case.id, name)
    assert MIN_PEERS == 5


def test_the_closed_forms_hold(board):
    """From the live corpus' labels alone (docs/scoring.md): the base-rate spray (every cause and every blamable
    factor value at its base rate) scores exactly 0; null scores 1 − (Σ n_k + A + Σ F_f + L) / R < 0 and its
    rank-credited closed form; the spray that also states every labeled rank position at its base rate (capped at
    its cause's) scores 0 in the headline and its closed form in the rank-credited score."""
    cases, _ = builtin_corpus()
    counts = label_counts(cases)
    null_skill_forms, null_skill_ranked_forms = null_closed_forms(counts)
    spray = board["prior spray (every cause and factor value at its base rate)"][2].metrics
    assert spray.skill.value == pytest.approx(0.0, abs=EXACT)
    null = board["null: says nothing"][2].metrics
    assert null.skill.value == pytest.approx(null_skill_forms, abs=EXACT) and null.skill.value < 0
    assert null.skill_ranked.value == pytest.approx(null_skill_ranked_forms, abs=EXACT)
    ranked = board["prior spray with the ranks' base rates"][2].metrics
    assert ranked.skill.value == pytest.approx(0.0, abs=EXACT)
    assert ranked.skill_ranked.value == pytest.approx(rank_spray_closed_form(counts), abs=EXACT)
    assert -0.05 < ranked.skill_ranked.value <= EXACT
    # without the factor statements the spray is below 0 by the factors' climatology
    causes_only = board["prior spray, causes only (no factor value)"][2].metrics
    assert causes_only.skill.value < -EXACT


def test_splitting_claims_over_ranks_raises_no_label_blind_strategy(board):
    """Naming a cause on every rank, one claim per rank, is as many statements as ranks: the unranked score
    does not change (it reads each cause's highest confidence) and the rank-credited one can only fall."""
    pairs = [("spray every cause at 0.05", "spray every cause at 0.05, split over ranks"),
             ("prior spray (every cause and factor value at its base rate)", "prior spray, split over ranks"),
             ("metadata-stratum base rates (leave-one-out)",
              "metadata-stratum base rates, split over ranks (leave-one-out)")]
    for whole, split in pairs:
        a, b = board[whole][2].metrics, board[split][2].metrics
        assert b.skill.value == pytest.approx(a.skill.value, abs=EXACT), split
        assert b.skill_ranked.value <= a.skill_ranked.value + EXACT, split
        assert b.skill_ranked.value <= b.skill.value + EXACT, split


def _skills(cases, taxonomy, diagnose) -> tuple[float, float]:
    results = [score_case(case, diagnose(case), taxonomy=taxonomy) for case in cases]
    m = summarize(results, diagnoser=DiagnoserInfo(spec="constant", name="constant"), case_set_hash="x",
                  taxonomy_version=taxonomy.version, n_boot=0).metrics
    return m.skill.value, m.skill_ranked.value


def _constant(cases, causes: dict[str, float], factors: dict[str, float], ranks: dict[tuple[str, int], float] = {}):
    """Every cause k at causes[k], every blamable value of factor f at factors[f] (a symptom naming it), and
    each rank position r of cause k on every job with a rank r at ranks[k, r]: a constant forecast."""
    def diagnose(case):
        findings = [Finding(category=k, kind="cause", confidence=q) for k, q in causes.items() if q > 0]
        findings += [Finding(category="symptom.slow_step", kind="symptom", confidence=factors[ref.name], factor=ref)
                     for ref in blamable_values(case) if factors.get(ref.name, 0) > 0]
        findings += [Finding(category=k, kind="cause", confidence=q, ranks=[r]) for (k, r), q in ranks.items()
                     if q > 0 and r < case.world_size]
        return Diagnosis(findings=findings)
    return diagnose


def test_no_constant_forecast_beats_the_base_rates_in_any_event_family():
    """Issue 39 items 1 and 6: a constant forecast loses, per family of events, at least that family's
    climatology, so it scores <= 0 in both scores: causes at one q (the others at their base rates); every
    factor value at one q, or one q per factor name; every labeled rank position at one q, one q per position
    (pooled over causes: beat the per-cause climatology by +0.006 before) or one per cause (the old climatology)."""
    cases, taxonomy = builtin_corpus()
    rates, factors = base_rates(cases), factor_base_rates(cases)
    best = {}
    for q in (0.005, 0.02, 0.05, 0.1, 0.2):  # causes: one q for every cause (the headline's family)
        best["causes"] = max(best.get("causes", -np.inf), _skills(cases, taxonomy, _constant(cases, {
            k: q for k in taxonomy.causes}, factors))[0])
    for q in (0.05, 0.1, 0.2, 0.4):  # factor values: one q for every name
        best["factor, one q"] = max(best.get("factor, one q", -np.inf), _skills(cases, taxonomy, _constant(
            cases, rates, {name: q for name in factors}))[0])
    for scale in (0.7, 1.0, 1.3):  # one q per factor name, around its base rate
        best["factor, one q per name"] = max(best.get("factor, one q per name", -np.inf), _skills(
            cases, taxonomy, _constant(cases, rates, {f: min(1.0, q * scale) for f, q in factors.items()}))[0])
    true, slots = rank_counts(cases)
    positions = [kr for kr in slots if true[kr]]
    per_position = {}  # one rate per rank position r, pooled over causes, capped at each cause's base rate
    for r in {r for _, r in positions}:
        at = [kr for kr in slots if kr[1] == r]
        per_position[r] = sum(true[kr] for kr in at) / sum(slots[kr] for kr in at)
    per_cause = {k: sum(true[kr] for kr in slots if kr[0] == k) / sum(slots[kr] for kr in slots if kr[0] == k)
                 for k in {k for k, _ in positions}}
    rank_rates = rank_base_rates(cases)
    for name, ranks in [("ranks, one q per position", {(k, r): per_position[r] for k, r in positions}),
                        ("ranks, one q per cause", {(k, r): per_cause[k] for k, r in positions}),
                        ("ranks, one q per (cause, position)", rank_rates),
                        ("ranks, 0.5 x per (cause, position)", {kr: q / 2 for kr, q in rank_rates.items()})]:
        capped = {(k, r): min(q, rates[k]) for (k, r), q in ranks.items()}
        best[name] = _skills(cases, taxonomy, _constant(cases, rates, factors, capped))[1]
    print(best)
    assert all(v <= EXACT for v in best.values()), best
    assert best["causes"] > -0.05 and best["factor, one q per name"] == pytest.approx(0.0, abs=EXACT)


def test_always_abstaining_is_judged_both_ways(board):
    m = board["always abstain"][2].metrics
    cases, _ = builtin_corpus()
    abstain_cases = sum(c.labels.expect == "abstain" for c in cases)
    assert m.abstention_recall.value == 1.0
    assert m.abstention_precision.value == pytest.approx(abstain_cases / len(cases))
    assert m.skill.value < 0


def test_f1_reads_null_as_zero_and_reference_rows_are_ordered(board):
    assert board["null: says nothing"][2].metrics.f1.value == 0.0
    assert board["null: says nothing"][2].metrics.skill.value < 0
    assert board["honest: perfect at 0.9"][0] == 1


def test_the_public_case_files_do_not_fingerprint_a_drawn_live_bundle():
    """Issue 44 item 1: a diagnoser shipping the public case files that matches a live bundle's workload family,
    world size, device and step count, and claims the label (on the labeled rank) where the matches agree, earns
    no more than null + 0.01 on recordings drawn as recording/draw.py draws them: on average over 20 draws, and in
    every one of them (no step count a drawn recording of a stratum may show is made by cases of one label only).
    The positive control: the same strategy on the evidence as the case files declare it (the
    recordings before the draw) earns well above null, so the route is closed, not the strategy broken. The cases
    whose job kind alone singles them out (one label in their stratum: no draw changes a job's world size) are
    named and left to the held-out split."""
    from gaming_strategies import claimable_counts, fingerprint_cases, fingerprint_gain

    cases, taxonomy = builtin_corpus()
    live, alone = fingerprint_cases(cases)
    assert len(live) >= 100 and len(alone) <= 2, alone
    assert claimable_counts(live) == []  # no step count a drawn recording shows names one label: 0 in every draw
    today, claimed = fingerprint_gain(live, taxonomy, None)
    assert today > 0.03 and len(claimed) >= 3, (today, claimed)  # measured: +0.053, 4 cases
    gains = [fingerprint_gain(live, taxonomy, seed) for seed in range(20)]
    print(f"fingerprint on {len(live)} live cases: +{today:.3f} over null before the draw ({len(claimed)} claims); "
          f"drawn, mean {sum(g for g, _ in gains) / len(gains):+.4f}, max {max(g for g, _ in gains):+.4f}; "
          f"singled out by the job's kind alone: {alone}")
    assert sum(g for g, _ in gains) / len(gains) <= 0.01
    assert max(g for g, _ in gains) <= 0.01, [(g, c) for g, c in gains if g > 0.01]
