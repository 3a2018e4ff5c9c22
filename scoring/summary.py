"""Aggregate a run's CaseResults into ``summary.json``: counts, metrics with intervals, breakdowns.

Decided here (the design is silent):

* Cases are sorted by id before resampling, so the intervals do not depend on the order results were
  appended to ``results.jsonl`` (parallel runs finish in any order). A case id that appears twice is an
  error, not something to average over.
* ``by_category`` covers every cause labeled in at least one scored case: recall and localisation over
  that cause's labels, precision over the claims naming it, each with its own interval from the same
  resamples as the overall metrics.
* ``by_difficulty`` repeats the full metric set over the scored cases of each difficulty, resampled
  within that subset (same seed).
* The confusion matrix has one entry per scored case: true = the labeled cause the top claim names if
  it names one, else the case's first labeled cause, or ``none`` for healthy and abstain cases;
  predicted = the top (highest-confidence) cause claim, or ``none`` when the diagnoser claimed no cause
  (abstained, failed, or said nothing). Labels are every category on either axis, sorted, then ``none``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from sklearn.metrics import confusion_matrix

from diageval.scoring.metrics import (
    CONFIDENCE_LEVEL,
    METRICS,
    MetricValue,
    brier_point,
    category_metrics,
    compute_metrics,
)
from diageval.scoring.results import CaseResult
from diageval.scoring.tallies import tally_table

SCHEMA_VERSION = 1
DIFFICULTIES = ("easy", "medium", "hard")
NONE_LABEL = "none"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DiagnoserInfo(_Model):
    spec: str = Field(description="What --diagnoser was given")
    name: str
    version: str | None = None
    reference: bool = Field(False, description="A baseline (null, prior, symptoms, leak) or self-test")
    self_test: bool = Field(False, description="Reads labels (the oracle): shown, never ranked")


class Counts(_Model):
    cases: int = Field(description="Results in the run")
    scored: int = Field(description="Cases the metrics cover (every status but harness_error and invalid)")
    invalid: int = Field(description="Injection did not manifest: never scored")
    statuses: dict[str, int]
    expect: dict[str, int] = Field(description="Scored cases by what they expect: diagnose, healthy, abstain")


class Metrics(_Model):
    precision: MetricValue
    recall: MetricValue
    f1: MetricValue
    misleading_rate: MetricValue
    misleading_rate_weighted: MetricValue
    false_alarm_rate: MetricValue
    abstention_accuracy: MetricValue
    top1_accuracy: MetricValue
    localization_accuracy: MetricValue
    impact_mae: MetricValue
    brier: MetricValue
    ece: MetricValue
    seconds_per_case: MetricValue


class CategoryBreakdown(_Model):
    causes: int = Field(description="Labeled causes of this category in scored cases")
    claims: int = Field(description="Non-duplicate claims naming it")
    recall: MetricValue
    precision: MetricValue
    f1: MetricValue
    localization_accuracy: MetricValue


class DifficultyBreakdown(_Model):
    cases: int
    metrics: Metrics


class Confusion(_Model):
    labels: list[str] = Field(description="Row and column labels; 'none' = no cause")
    matrix: list[list[int]] = Field(description="matrix[i][j]: cases whose true cause is labels[i] and top claim labels[j]")


class BootstrapInfo(_Model):
    resamples: int
    seed: int
    level: float = CONFIDENCE_LEVEL
    unit: str = "case"


class Summary(_Model):
    schema_version: int = SCHEMA_VERSION
    diagnoser: DiagnoserInfo
    case_set_hash: str
    taxonomy_version: str
    counts: Counts
    metrics: Metrics
    by_category: dict[str, CategoryBreakdown]
    by_difficulty: dict[str, DifficultyBreakdown]
    confusion: Confusion
    bootstrap: BootstrapInfo


def summarize(
    results: list[CaseResult],
    *,
    diagnoser: DiagnoserInfo,
    case_set_hash: str,
    taxonomy_version: str,
    n_boot: int = 1000,
    seed: int = 0,
) -> Summary:
    """Counts, every metric with its bootstrap interval, per-category and per-difficulty breakdowns and the
    confusion matrix of a run's results (see the module docstrings for definitions)."""
    seen = Counter(r.case_id for r in results)
    repeated = sorted(cid for cid, k in seen.items() if k > 1)
    if repeated:
        raise ValueError(f"results hold case(s) more than once: {', '.join(repeated)}")
    results = sorted(results, key=lambda r: r.case_id)
    scored = [r for r in results if r.scored]

    statuses = Counter(r.status for r in results)
    counts = Counts(
        cases=len(results),
        scored=len(scored),
        invalid=statuses.get("invalid", 0),
        statuses=dict(sorted(statuses.items())),
        expect=dict(sorted(Counter(r.expect for r in scored).items())),
    )
    categories = sorted({c for r in scored for c in r.categories})
    table = tally_table(scored, categories)

    by_category = {}
    for cat in categories:
        values = compute_metrics(table, category_metrics(cat), n_boot=n_boot, seed=seed)
        by_category[cat] = CategoryBreakdown(
            causes=int(table[f"causes@{cat}"].sum()), claims=int(table[f"claims@{cat}"].sum()), **values
        )

    by_difficulty = {}
    for level in DIFFICULTIES:
        subset = [r for r in scored if r.difficulty == level]
        if subset:
            by_difficulty[level] = DifficultyBreakdown(
                cases=len(subset), metrics=_metrics(subset, tally_table(subset), n_boot, seed)
            )

    return Summary(
        diagnoser=diagnoser,
        case_set_hash=case_set_hash,
        taxonomy_version=taxonomy_version,
        counts=counts,
        metrics=_metrics(scored, table, n_boot, seed),
        by_category=by_category,
        by_difficulty=by_difficulty,
        confusion=confusion_of(scored),
        bootstrap=BootstrapInfo(resamples=n_boot, seed=seed),
    )


def _metrics(scored: list[CaseResult], table, n_boot: int, seed: int) -> Metrics:
    claims = [v for r in scored for v in r.verdicts if v.verdict != "duplicate"]
    brier = brier_point([v.confidence for v in claims], [v.credited for v in claims])
    return Metrics(**compute_metrics(table, METRICS, n_boot=n_boot, seed=seed, point_overrides={"brier": brier}))


def confusion_of(scored: list[CaseResult]) -> Confusion:
    """True cause vs top claim, one entry per scored case (see the module docstring)."""
    y_true, y_pred = [], []
    for r in scored:
        if r.top_claim is not None and r.top_claim in r.categories:
            y_true.append(r.top_claim)
        else:
            y_true.append(r.categories[0] if r.categories else NONE_LABEL)
        y_pred.append(r.top_claim or NONE_LABEL)
    labels = sorted((set(y_true) | set(y_pred)) - {NONE_LABEL}) + [NONE_LABEL]
    if not scored:
        return Confusion(labels=labels, matrix=[[0]])
    matrix = confusion_matrix(y_true, y_pred, labels=labels)
    return Confusion(labels=labels, matrix=np.asarray(matrix).tolist())
