"""Metric definitions and their bootstrap intervals.

Every metric is computed from the column totals of a tally table (:mod:`diageval.scoring.tallies`), so
the point estimate (every case once) and each bootstrap resample (cases drawn with replacement, i.e. a
vector of per-case multiplicities) go through the same formula, and micro-averaged metrics are recomputed
from each resample's pooled counts.

Definitions (denominators made explicit; ``n`` in the output is the denominator's size at the point):

==========================  ===================================================  ============================
metric                      value                                                n counts
==========================  ===================================================  ============================
precision                   credited claims / claims                             non-duplicate cause claims
recall                      found causes / labeled causes                        labeled causes
f1                          2PR / (P + R)                                        scored cases
misleading_rate             misleading claims / claims                           claims
misleading_rate_weighted    sum conf(misleading claims) / sum conf(claims)       claims
false_alarm_rate            healthy controls with >= 1 claim / healthy controls  healthy controls
abstention_accuracy         abstain cases where it abstained / abstain cases     ``expect: abstain`` cases
top1_accuracy               top claim is a labeled cause / positive cases        ``expect: diagnose`` cases
localization_accuracy       localised / found causes whose label names ranks     those found causes
impact_mae                  mean |claimed - measured impact|                     cases with both
brier                       mean (confidence - credited)^2 over claims           claims
ece                         sum over bins |sum conf - sum credited| / claims     claims
seconds_per_case            mean diagnoser wall time                             cases with a time
==========================  ===================================================  ============================

"claims" are non-duplicate cause claims; "credited" means judged ``correct`` or ``mislocated``
(calibration treats a credited claim as right). Misleading = symptom_as_cause + wrong_cause +
false_alarm, so ``misleading_rate = 1 - precision`` whenever both are defined; the confidence-weighted
rate is the one that tells them apart (a diagnoser that is wrong only when unsure scores low on it).
Precision counts claims on every scored case (false alarms on healthy controls and guesses on abstain
cases included). Failed cases (error, timeout, invalid output) count their causes as missed for recall
and top-1, but raise no false alarm. A metric whose denominator is zero is undefined: ``None``, never 0
or 1. F1 is undefined when precision or recall is, and 0 when both are 0.

Intervals: percentile bootstrap (2.5th and 97.5th percentiles), ``n_boot`` resamples of cases with a
fixed seed, the same resamples for every metric. Resamples where a metric is undefined (no claim drawn,
no healthy control drawn) are left out of that metric's interval; if none is defined the interval is
``None``. The Brier point estimate is scikit-learn's ``brier_score_loss`` over the claims; resamples use
the equal per-case sum form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field
from sklearn.metrics import brier_score_loss

from diageval.scoring.tallies import ECE_BINS, category_column

CONFIDENCE_LEVEL = 0.95

Totals = Mapping[str, np.ndarray]
"""Column name -> totals, one per weighting (1 for the point estimate, ``n_boot`` for the bootstrap)."""


class MetricValue(BaseModel):
    value: float | None = Field(description="Point estimate; null when undefined (its denominator is 0)")
    ci: tuple[float, float] | None = Field(description="Bootstrap 95% interval over cases; null when undefined")
    n: int = Field(description="Size of the denominator at the point estimate (see the metric's definition)")


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den is 0."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def f1_of(precision: np.ndarray, recall: np.ndarray) -> np.ndarray:
    total = precision + recall  # NaN if either is NaN
    out = ratio(2 * precision * recall, total)
    return np.where(total == 0, 0.0, out)


def ece_of(t: Totals) -> np.ndarray:
    gap = sum(np.abs(t[f"ece_conf_{b}"] - t[f"ece_hit_{b}"]) for b in range(ECE_BINS))
    return ratio(gap, t["claims"])


@dataclass(frozen=True)
class MetricDef:
    formula: Callable[[Totals], np.ndarray]
    n_column: str


def _r(num: str, den: str) -> MetricDef:
    return MetricDef(lambda t: ratio(t[num], t[den]), den)


METRICS: dict[str, MetricDef] = {
    "precision": _r("credited", "claims"),
    "recall": _r("found", "causes"),
    "f1": MetricDef(lambda t: f1_of(ratio(t["credited"], t["claims"]), ratio(t["found"], t["causes"])), "cases"),
    "misleading_rate": _r("misleading", "claims"),
    "misleading_rate_weighted": MetricDef(lambda t: ratio(t["misleading_conf"], t["claims_conf"]), "claims"),
    "false_alarm_rate": _r("alarmed", "healthy"),
    "abstention_accuracy": _r("abstain_correct", "abstain_cases"),
    "top1_accuracy": _r("top1_hit", "positive"),
    "localization_accuracy": _r("localized", "localizable"),
    "impact_mae": _r("impact_abs_err", "impact_n"),
    "brier": _r("sq_err", "claims"),
    "ece": MetricDef(ece_of, "claims"),
    "seconds_per_case": _r("seconds_sum", "seconds_n"),
}


def category_metrics(category: str) -> dict[str, MetricDef]:
    """Recall, precision, F1 and localisation restricted to one labeled cause's columns."""
    c = lambda field: category_column(field, category)  # noqa: E731
    precision = lambda t: ratio(t[c("credited")], t[c("claims")])  # noqa: E731
    recall = lambda t: ratio(t[c("found")], t[c("causes")])  # noqa: E731
    return {
        "recall": MetricDef(recall, c("causes")),
        "precision": MetricDef(precision, c("claims")),
        "f1": MetricDef(lambda t: f1_of(precision(t), recall(t)), "cases"),
        "localization_accuracy": MetricDef(lambda t: ratio(t[c("localized")], t[c("localizable")]), c("localizable")),
    }


def bootstrap_weights(n_cases: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_cases) multiplicities of each case in each resample (a multinomial draw = sampling with
    replacement); deterministic for a given seed."""
    if n_cases == 0 or n_boot == 0:
        return np.zeros((n_boot, n_cases))
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_cases, np.full(n_cases, 1.0 / n_cases), size=n_boot).astype(float)


def weighted_totals(table: pd.DataFrame, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Column totals under each row of ``weights`` (shape (k, n_cases)) -> {column: array of k}."""
    totals = weights @ table.to_numpy(dtype=float) if len(table) else np.zeros((weights.shape[0], table.shape[1]))
    return {col: totals[:, j] for j, col in enumerate(table.columns)}


def percentile_interval(samples: np.ndarray, level: float = CONFIDENCE_LEVEL) -> tuple[float, float] | None:
    defined = samples[~np.isnan(samples)]
    if defined.size == 0:
        return None
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(defined, [tail, 100 - tail])
    return float(lo), float(hi)


def compute_metrics(
    table: pd.DataFrame,
    definitions: Mapping[str, MetricDef] = METRICS,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    point_overrides: Mapping[str, float | None] | None = None,
) -> dict[str, MetricValue]:
    """Each metric's point estimate, bootstrap interval and n over the cases of ``table``.

    ``point_overrides`` replaces a point estimate computed elsewhere from the same cases (the Brier score
    from scikit-learn); the interval still comes from the resampled totals.
    """
    point = weighted_totals(table, np.ones((1, len(table))))
    boot = weighted_totals(table, bootstrap_weights(len(table), n_boot, seed))
    out: dict[str, MetricValue] = {}
    for name, d in definitions.items():
        value = float(d.formula(point)[0])
        if point_overrides and name in point_overrides:
            value = point_overrides[name]
        if value is None or np.isnan(value):
            out[name] = MetricValue(value=None, ci=None, n=int(point[d.n_column][0]))
            continue
        ci = percentile_interval(d.formula(boot)) if n_boot else None
        out[name] = MetricValue(value=value, ci=ci, n=int(point[d.n_column][0]))
    return out


def brier_point(confidences: list[float], credited: list[bool]) -> float | None:
    """scikit-learn's Brier score of claims (confidence vs credited); None without claims."""
    if not confidences:
        return None
    return float(brier_score_loss(np.asarray(credited, dtype=int), np.asarray(confidences, dtype=float)))
