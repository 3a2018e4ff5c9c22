"""An independent oracle for the calibration numbers: scikit-learn on pairs built straight from the labels.

``scoring`` computes Brier over every (case, taxonomy cause) pair, the confusion matrix and the two
skills with numpy from its own per-case records and tally columns. Here the same numbers are computed a
second way, from the cases' labels and the raw findings only (never from the scored records): Brier and
the confusion matrix with scikit-learn's ``brier_score_loss`` and ``confusion_matrix``, the skills by a
plain loop over the events docs/scoring.md defines and the climatological reference from the label
counts, on random diagnoses over the built-in corpus (findings naming factor values, abstentions naming some).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, confusion_matrix

from diageval.cases.load import load_case_set
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding
from diageval.scoring.results import FOUND_CONFIDENCE
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case

CASE_SET = load_case_set()
TAXONOMY = CASE_SET.taxonomy
CASES = [lc.case for lc in CASE_SET.cases]
NONE = "none"  # the confusion matrix's label for "no cause" (labeled or claimed)


def _values(case) -> list[FactorRef]:
    """Every (factor, value) pair of a fleet's or regression's runs (what a diagnoser may name)."""
    if case.fleet is None:
        return []
    return sorted({FactorRef(name=k, value=v) for run in case.fleet.runs for k, v in run.metadata.items()},
                  key=lambda ref: (ref.name, ref.value))


def _random_diagnosis(rng: random.Random, case) -> Diagnosis:
    values = _values(case)
    if rng.random() < 0.1:
        named = rng.sample(values, min(len(values), rng.randint(0, 2)))
        return Diagnosis(abstain=Abstention(reason="random", factors=named))
    ids = TAXONOMY.causes + TAXONOMY.symptoms
    findings = []
    for _ in range(rng.randint(0, 4)):
        ranks = rng.choice([None, [rng.randrange(case.world_size)]])
        factor = rng.choice([None, *values]) if values else None
        findings.append(Finding(category=rng.choice(ids), kind=rng.choice(["cause", "cause", "symptom"]),
                                confidence=rng.choice([0.05, 0.3, 0.5, 0.8, 1.0]), ranks=ranks, factor=factor))
    return Diagnosis(findings=findings)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_brier_over_every_pair_and_confusion_match_scikit_learn(seed):
    rng = random.Random(seed)
    diagnoses = [_random_diagnosis(rng, c) for c in CASES]
    results = [score_case(c, d, taxonomy=TAXONOMY) for c, d in zip(CASES, diagnoses)]
    summary = summarize(results, diagnoser=DiagnoserInfo(spec="random", name="random", version="1"),
                        case_set_hash=CASE_SET.hash, taxonomy_version=TAXONOMY.version, n_boot=0)

    probabilities, outcomes, y_true, y_pred = [], [], [], []
    for case, diagnosis in zip(CASES, diagnoses):
        labeled = {c.category for c in case.labels.causes}
        stated: dict[str, float] = {}
        for f in diagnosis.causes:
            stated[f.category] = max(stated.get(f.category, 0.0), f.confidence)
        for cause in TAXONOMY.causes:  # every (case, taxonomy cause) pair
            probabilities.append(stated.get(cause, 0.0))
            outcomes.append(int(cause in labeled))
        asserted = [f for f in diagnosis.causes if f.confidence >= FOUND_CONFIDENCE]  # hedges name no top claim
        top = max(asserted, key=lambda f: f.confidence).category if asserted else None
        y_pred.append(top or NONE)
        y_true.append(top if top in labeled else (case.labels.causes[0].category if labeled else NONE))

    assert summary.metrics.brier.value == pytest.approx(brier_score_loss(outcomes, probabilities))
    labels = summary.confusion.labels
    expected = confusion_matrix(y_true, y_pred, labels=labels)
    assert np.array_equal(np.array(summary.confusion.matrix), expected)


def _blamable(case) -> set[tuple[str, str]]:
    """docs/scoring.md: the values a case could blame: held by some run and not by every run, and on a
    regression by the candidate; plus every value a label blames."""
    runs = case.fleet.runs
    slow = [r for r in runs if r.role == "candidate"] or runs
    out = {(k, v) for r in slow for k, v in r.metadata.items() if any(o.metadata.get(k) != v for o in runs)}
    return out | {(c.factor.name, c.factor.value) for c in case.labels.causes if c.factor is not None}


def _skills_by_hand(diagnoses) -> tuple[float, float]:
    """skill and skill (ranks) from the labels and findings alone (docs/scoring.md)."""
    causes = set(TAXONOMY.causes)
    loss = ranked = 0.0
    labeled_cases: dict[str, int] = {}
    rank_true: dict[tuple[str, int], int] = {}
    rank_slots: dict[tuple[str, int], int] = {}
    abstain_cases = aliased = 0
    factor_true: dict[str, int] = {}
    factor_slots: dict[str, int] = {}
    for case, d in zip(CASES, diagnoses):
        labels = case.labels.causes
        labeled = {c.category for c in labels}
        stated: dict[str, float] = {}
        for f in d.findings:
            if f.kind == "cause":
                stated[f.category] = max(stated.get(f.category, 0.0), f.confidence)
        for k in causes | set(stated):
            loss += (stated.get(k, 0.0) - (k in labeled)) ** 2
        expects_abstain = case.labels.expect == "abstain"
        abstain_cases += expects_abstain
        loss += ((d.abstain is not None) - expects_abstain) ** 2
        for k in labeled:
            labeled_cases[k] = labeled_cases.get(k, 0) + 1
        # factor events (every finding naming a value, cause or symptom) and aliased events: in both scores
        behind = {(c.factor.name, c.factor.value) for c in labels if c.factor is not None}
        named_values: dict[tuple[str, str], float] = {}
        for f in d.findings:
            if f.factor is not None:
                key = (f.factor.name, f.factor.value)
                named_values[key] = max(named_values.get(key, 0.0), f.confidence)
        loss += sum((named_values.get(v, 0.0) - (v in behind)) ** 2 for v in behind | set(named_values))
        labeled_aliased = {(a.name, a.value) for a in case.labels.aliased}
        abstained_naming = {(a.name, a.value) for a in d.abstain.factors} if d.abstain is not None else set()
        loss += len(labeled_aliased ^ abstained_naming)  # probability 1 or 0: wrong ones cost 1 each
        aliased += len(labeled_aliased)
        if case.fleet is not None:
            slots = _blamable(case)
            for name, value in slots:
                factor_slots[name] = factor_slots.get(name, 0) + 1
                factor_true[name] = factor_true.get(name, 0) + ((name, value) in behind)
        for k in causes:  # rank events of every cause no label of this case names without ranks
            mine = [c for c in labels if c.category == k]
            if any(c.ranks is None for c in mine):
                continue
            truth = {r for c in mine for r in c.ranks}
            for r in set(range(case.world_size)) | truth:
                rank_slots[k, r] = rank_slots.get((k, r), 0) + 1
                rank_true[k, r] = rank_true.get((k, r), 0) + (r in truth)
            named: dict[int, float] = {}
            for f in d.causes:
                if f.category == k:
                    for r in f.ranks or ():
                        named[r] = max(named.get(r, 0.0), f.confidence)
            ranked += sum((named.get(r, 0.0) - (r in truth)) ** 2 for r in truth | set(named))
    n = len(CASES)
    reference = (sum(nk * (1 - nk / n) for nk in labeled_cases.values()) + abstain_cases
                 + sum(f * (1 - f / factor_slots[name]) for name, f in factor_true.items()) + aliased)
    reference_ranked = reference + sum(p * (1 - p / rank_slots[kr]) for kr, p in rank_true.items())
    return 1 - loss / reference, 1 - (loss + ranked) / reference_ranked


@pytest.mark.parametrize("seed", [0, 1])
def test_skills_match_a_direct_count_of_events_and_the_climatology(seed):
    rng = random.Random(seed)
    diagnoses = [_random_diagnosis(rng, c) for c in CASES]
    results = [score_case(c, d, taxonomy=TAXONOMY) for c, d in zip(CASES, diagnoses)]
    m = summarize(results, diagnoser=DiagnoserInfo(spec="random", name="random", version="1"),
                  case_set_hash=CASE_SET.hash, taxonomy_version=TAXONOMY.version, n_boot=0).metrics
    skill, skill_ranked = _skills_by_hand(diagnoses)
    assert m.skill.value == pytest.approx(skill, abs=1e-12)
    assert m.skill_ranked.value == pytest.approx(skill_ranked, abs=1e-12)
