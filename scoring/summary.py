"""Aggregate a run's CaseResults into ``summary.json``: counts, metrics with intervals, breakdowns.

Decided here (the design is silent):

* Cases are sorted by id before resampling, so the intervals do not depend on the order results were
  appended to ``results.jsonl`` (parallel runs finish in any order). A case id that appears twice is an
  error, not something to average over.
* ``by_category`` covers every cause labeled in at least one scored case: recall and localisation over
  that cause's labels, precision over the claims naming it, F1 from those, each with its own interval
  from the same resamples as the overall metrics.
* ``by_evidence`` does the same over injected cases (reproduced on this machine, verified against their
  healthy twin) and recorded ones (real jobs' traces, labeled from measurements), so the two are seen
  apart as well as together.
* ``by_difficulty`` repeats the full metric set over the scored cases of each difficulty, in the same
  resamples as the overall metrics (each resample of the run, restricted to that difficulty's cases:
  the usual bootstrap of a sub-population, whose size varies from resample to resample as it would
  from corpus to corpus).
* ``reliability`` is the calibration table over every (case, taxonomy cause) pair: pairs stated at
  probability 0 (unclaimed) in a bin of their own, then ten equal-width bins over (0, 1]; per bin the
  pairs, their mean stated probability and the share of them that are labeled causes.
* ``detection`` is, per labeled cause, recall as a function of the measured impact (every case of that
  cause with a measured impact: its impact and whether it was found) and the detection limit: the
  smallest measured impact m such that the diagnoser found at least :data:`DETECTION_RECALL` of the
  cause's cases with impact ≥ m, over at least :data:`DETECTION_MIN_CASES` cases. Fewer cases than that
  and the limit is undefined (null) and says why: with four cases one miss moves recall by 25 points,
  so 80% cannot be told from 75% or 100%. It is defined once the corpus holds each cause at several
  severities.
* The confusion matrix has one entry per scored case: true = the labeled cause the top claim names if
  it names one, else the case's first labeled cause, or ``none`` for healthy and abstain cases;
  predicted = the top (highest-confidence) cause claim, or ``none`` when the diagnoser claimed no cause
  (abstained, failed, or said nothing). Labels are every category on either axis, sorted, then ``none``.
* ``schema_version`` 2 (this code) replaced version 1's headline (F1, then misleading rate) with skill;
  reading a version-1 summary fails with a message that says to re-score the run
  (``diageval score RUN_DIR``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from diageval.scoring.intervals import CONFIDENCE_LEVEL, jeffreys
from diageval.scoring.metrics import METRICS, MetricValue, Resampled, category_metrics, metrics_model
from diageval.scoring.results import CaseResult
from diageval.scoring.tallies import CALIBRATION_BINS, TallyTable, category_column, tally_table

SCHEMA_VERSION = 2
DETECTION_RECALL = 0.8
DETECTION_MIN_CASES = 5
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
    isolation: Literal["bwrap", "none"] | None = Field(
        None, description="bwrap: the diagnoser ran sandboxed; none: it could read every file the user can (run.json says why)"
    )
    claims: list[str] | None = Field(None, description="Taxonomy ids of the causes it can claim; None = undeclared")


class Counts(_Model):
    cases: int = Field(description="Results in the run")
    scored: int = Field(description="Cases the metrics cover (every status but harness_error and invalid)")
    invalid: int = Field(description="Injection did not manifest: never scored")
    statuses: dict[str, int]
    expect: dict[str, int] = Field(description="Scored cases by what they expect: diagnose, healthy, abstain")


Metrics = metrics_model()
"""One field per metric of :data:`~diageval.scoring.metrics.METRICS`, in its order."""


class CategoryBreakdown(_Model):
    causes: int = Field(description="Labeled causes of this category in scored cases")
    claims: int = Field(description="Non-duplicate claims naming it")
    recall: MetricValue
    precision: MetricValue
    f1: MetricValue
    localization_accuracy: MetricValue


class SubsetBreakdown(_Model):
    """The full metric set over a subset of the scored cases (one difficulty, or one kind of evidence)."""

    cases: int
    metrics: Metrics


class Confusion(_Model):
    labels: list[str] = Field(description="Row and column labels; 'none' = no cause")
    matrix: list[list[int]] = Field(description="matrix[i][j]: cases whose true cause is labels[i] and top claim labels[j]")


class ReliabilityBin(_Model):
    lo: float = Field(description="Stated probabilities in (lo, hi]; the first bin is exactly 0")
    hi: float
    pairs: int = Field(description="(case, taxonomy cause) pairs stated in this bin")
    mean_probability: float | None = Field(description="Their mean stated probability; null when empty")
    observed: float | None = Field(description="The share of them that are labeled causes; null when empty")


class ImpactPoint(_Model):
    case_id: str
    impact: float = Field(description="The case's measured impact (fraction of step time)")
    found: bool


class Detection(_Model):
    cases: int = Field(description="Cases of this cause with a measured impact")
    limit: float | None = Field(description="Smallest measured impact m with recall >= 0.8 over the >= 5 cases "
                                            "at impact >= m; null when undefined")
    recall_above: float | None = Field(description="Recall over the cases at impact >= limit")
    note: str = Field(description="How the limit was found, or why it is undefined")
    points: list[ImpactPoint] = Field(description="Recall as a function of impact: every case, by impact")


class BootstrapInfo(_Model):
    resamples: int
    seed: int
    level: float = CONFIDENCE_LEVEL
    unit: str = "case"
    intervals: str = ("Jeffreys at the effective sample size for proportions; for other ratios the hull of the BCa "
                      "bootstrap over cases and the jackknife-t interval")


class Summary(_Model):
    schema_version: Literal[2] = SCHEMA_VERSION
    diagnoser: DiagnoserInfo
    case_set_hash: str
    taxonomy_version: str
    counts: Counts
    metrics: Metrics
    by_category: dict[str, CategoryBreakdown]
    by_difficulty: dict[str, SubsetBreakdown]
    by_evidence: dict[str, SubsetBreakdown] = Field(
        default_factory=dict, description="injected (reproduced and verified) and recorded (real jobs' traces, "
        "measured) cases apart; the headline metrics are over both together")
    reliability: list[ReliabilityBin]
    detection: dict[str, Detection]
    confusion: Confusion
    bootstrap: BootstrapInfo
    recall_claimable: MetricValue | None = Field(
        None, description="Recall over the labeled causes the diagnoser declares it can claim (its field); null "
        "when it declares none. Beside recall over all causes, it judges a narrow tool on its field and "
        "keeps the gap visible")

    @model_validator(mode="before")
    @classmethod
    def _current_schema(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(f"summary schema version {data.get('schema_version')!r}, this diageval reads "
                             f"{SCHEMA_VERSION} (a new headline score): re-score the run with `diageval score RUN_DIR`")
        return data


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
    resampled = Resampled(table, n_boot, seed)
    levels = np.array([r.difficulty for r in scored])  # scored is sorted by case id, like the table
    subsets = {level: resampled.subset(levels == level) for level in DIFFICULTIES if (levels == level).any()}
    kinds = np.array([r.evidence for r in scored])
    evidence_subsets = {kind: resampled.subset(kinds == kind) for kind in ("injected", "recorded") if (kinds == kind).any()}
    per_category = {cat: category_metrics(cat) for cat in categories}
    Resampled.warm([(resampled, METRICS), *((resampled, specs) for specs in per_category.values()),
                    *((subset, METRICS) for subset in [*subsets.values(), *evidence_subsets.values()])])

    by_category = {
        cat: CategoryBreakdown(
            causes=int(resampled.point[category_column("causes", cat)][0]),
            claims=int(resampled.point[category_column("claims", cat)][0]),
            **resampled.metrics(specs),
        )
        for cat, specs in per_category.items()
    }
    by_difficulty = {level: SubsetBreakdown(cases=len(subset.table), metrics=Metrics(**subset.metrics()))
                     for level, subset in subsets.items()}
    by_evidence = {kind: SubsetBreakdown(cases=len(subset.table), metrics=Metrics(**subset.metrics()))
                   for kind, subset in evidence_subsets.items()}

    return Summary(
        diagnoser=diagnoser,
        case_set_hash=case_set_hash,
        taxonomy_version=taxonomy_version,
        counts=counts,
        metrics=Metrics(**resampled.metrics()),
        by_category=by_category,
        by_difficulty=by_difficulty,
        by_evidence=by_evidence,
        reliability=reliability_of(table),
        detection=detection_by_cause(scored),
        confusion=confusion_of(scored),
        bootstrap=BootstrapInfo(resamples=n_boot, seed=seed),
        recall_claimable=claimable_recall(resampled.point, categories, diagnoser.claims),
    )


def claimable_recall(point: dict[str, np.ndarray], categories: list[str], claims: list[str] | None) -> MetricValue | None:
    """Found / labeled over the causes in ``claims`` (the diagnoser's declared field), with a Jeffreys
    interval on those counts; None when the diagnoser declares no field."""
    if claims is None:
        return None
    own = [c for c in categories if c in set(claims)]
    found = sum(float(point[category_column("found", c)][0]) for c in own)
    labeled = sum(float(point[category_column("causes", c)][0]) for c in own)
    if labeled == 0:
        return MetricValue(value=None, ci=None, n=0)
    lo, hi = jeffreys(found, labeled)[0]
    return MetricValue(value=found / labeled, ci=(float(lo), float(hi)), n=int(labeled))


def reliability_of(table: TallyTable) -> list[ReliabilityBin]:
    """The calibration table over every (case, taxonomy cause) pair (see the module docstring)."""
    total = table.values.sum(axis=0) if len(table) else np.zeros(len(table.columns))
    at = {c: j for j, c in enumerate(table.columns)}
    out = []
    for b in range(CALIBRATION_BINS):
        n = float(total[at[f"cal_n_{b}"]])
        lo, hi = (0.0, 0.0) if b == 0 else ((b - 1) / 10, b / 10)
        out.append(ReliabilityBin(
            lo=lo, hi=hi, pairs=int(round(n)),
            mean_probability=float(total[at[f"cal_conf_{b}"]] / n) if n else None,
            observed=float(total[at[f"cal_hit_{b}"]] / n) if n else None,
        ))
    return out


def detection_by_cause(scored: list[CaseResult]) -> dict[str, Detection]:
    """Per labeled cause: recall against measured impact and the detection limit (module docstring)."""
    points: dict[str, list[tuple[float, str, bool]]] = {c: [] for r in scored for c in r.categories}
    for r in scored:
        if r.measured_impact is not None:
            for o in r.outcomes:
                points[o.category].append((r.measured_impact, r.case_id, o.outcome == "found"))
    return {cat: detection_of(cat, sorted(p)) for cat, p in sorted(points.items())}


def detection_of(category: str, measured: list[tuple[float, str, bool]]) -> Detection:
    """One cause's detection limit from its (impact, case id, found) points, sorted by impact."""
    points = [ImpactPoint(case_id=c, impact=i, found=f) for i, c, f in measured]
    if len(points) < DETECTION_MIN_CASES:
        return Detection(cases=len(points), limit=None, recall_above=None, points=points,
                         note=f"undefined: {len(points)} case(s) of {category} with a measured impact, "
                              f"{DETECTION_MIN_CASES} needed; the corpus needs this cause at several severities")
    found_above = np.cumsum([p.found for p in reversed(points)])[::-1]  # found among points[i:]
    for i, p in enumerate(points):
        size = len(points) - i
        if size < DETECTION_MIN_CASES:
            break
        if i > 0 and points[i - 1].impact == p.impact:
            continue  # a threshold is a distinct impact: equal impacts are all above it or none
        if found_above[i] / size >= DETECTION_RECALL:
            return Detection(cases=len(points), limit=p.impact, recall_above=float(found_above[i] / size),
                             points=points, note=f"found {int(found_above[i])} of the {size} cases at impact "
                                                 f">= {p.impact:.3g}")
    return Detection(cases=len(points), limit=None, recall_above=None, points=points,
                     note=f"no impact above which it finds >= {DETECTION_RECALL:.0%} of at least "
                          f"{DETECTION_MIN_CASES} cases")


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
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    cells = np.array([index[t] * k + index[p] for t, p in zip(y_true, y_pred)], dtype=np.int64)
    return Confusion(labels=labels, matrix=np.bincount(cells, minlength=k * k).reshape(k, k).tolist())
