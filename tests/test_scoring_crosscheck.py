"""An independent oracle for the calibration numbers: scikit-learn on pairs built straight from the labels.

``scoring`` computes Brier over every (case, taxonomy cause) pair and the confusion matrix with numpy
from its own per-case records. Here the same numbers are computed a second way, from the cases' labels
and the raw findings only (never from the scored records), with scikit-learn's ``brier_score_loss`` and
``confusion_matrix``, on random diagnoses over the built-in corpus.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, confusion_matrix

from diageval.cases.load import load_case_set
from diageval.diagnosis import Abstention, Diagnosis, Finding
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case

CASE_SET = load_case_set()
TAXONOMY = CASE_SET.taxonomy
CASES = [lc.case for lc in CASE_SET.cases]
NONE = "none"  # the confusion matrix's label for "no cause" (labeled or claimed)


def _random_diagnosis(rng: random.Random, world_size: int) -> Diagnosis:
    if rng.random() < 0.1:
        return Diagnosis(abstain=Abstention(reason="random"))
    ids = TAXONOMY.causes + TAXONOMY.symptoms
    findings = []
    for _ in range(rng.randint(0, 4)):
        ranks = rng.choice([None, [rng.randrange(world_size)]])
        findings.append(Finding(category=rng.choice(ids), kind="cause", confidence=rng.choice([0.05, 0.3, 0.5, 0.8, 1.0]),
                                ranks=ranks))
    return Diagnosis(findings=findings)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_brier_over_every_pair_and_confusion_match_scikit_learn(seed):
    rng = random.Random(seed)
    diagnoses = [_random_diagnosis(rng, c.world_size) for c in CASES]
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
        top = max(diagnosis.causes, key=lambda f: f.confidence).category if diagnosis.causes else None
        y_pred.append(top or NONE)
        y_true.append(top if top in labeled else (case.labels.causes[0].category if labeled else NONE))

    assert summary.metrics.brier.value == pytest.approx(brier_score_loss(outcomes, probabilities))
    labels = summary.confusion.labels
    expected = confusion_matrix(y_true, y_pred, labels=labels)
    assert np.array_equal(np.array(summary.confusion.matrix), expected)
