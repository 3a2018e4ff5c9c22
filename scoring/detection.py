"""Detection limits: per cause, the measured impact at which a diagnoser's found-rate curve crosses 50%.

The one definition of the detection limit: ``summary.json`` (:func:`diageval.scoring.summary.detection_of`),
the board and the HTML page (:mod:`diageval.reports.detection_limits`) all take it from
:func:`detection_limit`. From a cause's cases with a measured impact (the injection's measured cost, a
fraction of step time, against its healthy twin) and whether the diagnoser found the cause on each:

* **The found-rate curve** is the isotonic (non-decreasing) regression of found (0/1) on the measured
  impact, by pool-adjacent-violators over the distinct impacts (ties pooled). Monotone because a larger
  effect of the same cause is not harder to see, and nothing else is assumed: no curve shape to fit, no
  parameter that can fail to exist (a logistic fit has no estimate when every case is found, the common
  case for a good diagnoser).
* **The limit** is where that curve crosses :data:`FOUND_RATE` (50%: the effect the diagnoser is as likely
  to find as to miss, the usual definition of a detection threshold), read between the two distinct impacts
  it crosses between by linear interpolation of the curve, so it does not snap to the next case up. Two
  outcomes are censored and said so: the curve is at 50% or more already at the smallest case
  (**below**: the limit is at most that impact), or it never reaches 50% (**not reached**: above the
  largest case).
* **The interval** is a profile-likelihood interval of the 50% point. The cases are independent Bernoulli
  draws at their impacts; a curve through candidate limit L is a logistic in ln(impact) with its 50% point
  at L and any slope of :data:`SLOPES` (a step included), and L is kept when its best curve loses at most
  c/2 of log-likelihood to the best curve of all, c the 95% quantile of F(1, n − 2): χ²₁'s likelihood-ratio
  bound with the two fitted parameters' small-sample widening, as Student's t widens z (χ²₁ alone covered
  83-90% at 8-12 cases). Its lower end is 0 when a candidate below every case is kept (the limit may lie
  below the smallest case) and it has no upper end ("not reached") when one above every case is: beyond
  the cases the logistic extrapolates and says nothing the cases do. It is hulled with the point. The logistic is only the yardstick of the interval: the point stays the
  isotonic curve's. ``python tests/coverage_simulation.py --detection`` measures its coverage at 8-12 cases
  a cause, on step, sharp and shallow curves, with impacts spread out or on a ladder of three severities;
  the percentile bootstrap it replaces collapsed onto one severity of a ladder (a resample's limit sits on
  the sample's own impacts) and covered 34-92% there.
* Fewer than :data:`DETECTION_MIN_CASES` cases and the limit is undefined, saying how many there are:
  a limit needs the cause at several severities.

A two-cause case lends its one measured impact to both of its causes (the recording measures the
combined effect).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.stats import f as f_dist

from diageval.scoring.intervals import CONFIDENCE_LEVEL

FOUND_RATE = 0.5
DETECTION_MIN_CASES = 5
"""The fewest cases of a cause with a measured impact for which a limit is given."""

State = Literal["measured", "below", "not_reached", "undefined"]


class DetectionLimit(BaseModel):
    """One diagnoser's detection limit for one cause."""

    model_config = ConfigDict(extra="forbid")

    cause: str
    cases: int = Field(description="Cases of the cause with a measured impact")
    found: int = Field(description="Of those, the cases where the diagnoser found it")
    state: State = Field(description="measured; below (the smallest case); not_reached (above the largest); "
                                     "undefined (too few cases)")
    limit: float | None = Field(description="The measured impact where the found-rate curve crosses 50% (measured), "
                                            "the smallest case's impact (below), the largest's (not_reached)")
    ci: tuple[float, float | None] | None = Field(description="95% interval from the inverted binomial test (module "
                                                              "docstring); an upper end of None: not reached")
    smallest: float | None = Field(None, description="The smallest measured impact among the cases")
    largest: float | None = Field(None, description="The largest measured impact among the cases")


def found_rate_curve(impacts: Sequence[float], found: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct impacts (ascending) and the isotonic found rate at each (pool-adjacent-violators)."""
    xs, inverse = np.unique(np.asarray(impacts, dtype=float), return_inverse=True)
    sums = np.bincount(inverse, weights=np.asarray(found, dtype=float), minlength=len(xs))
    counts = np.bincount(inverse, minlength=len(xs)).astype(float)
    blocks: list[list[float]] = []  # [found, cases, distinct impacts] of each pooled block
    for s, c in zip(sums, counts):
        blocks.append([s, c, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s2, c2, k2 = blocks.pop()
            blocks[-1][0] += s2
            blocks[-1][1] += c2
            blocks[-1][2] += k2
    return xs, np.concatenate([np.full(int(k), s / c) for s, c, k in blocks])


def limit_of(impacts: Sequence[float], found: Sequence[bool]) -> tuple[State, float]:
    """The limit's state and value on one sample (``impacts`` non-empty; module docstring)."""
    xs, rate = found_rate_curve(impacts, found)
    reached = np.flatnonzero(rate >= FOUND_RATE - 1e-12)
    if not len(reached):
        return "not_reached", float(xs[-1])
    j = int(reached[0])
    if j == 0:
        return "below", float(xs[0])
    f0, f1 = rate[j - 1], rate[j]
    return "measured", float(xs[j - 1] + (FOUND_RATE - f0) / (f1 - f0) * (xs[j] - xs[j - 1]))


SLOPES = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.5, 7.0, 10.0, 15.0, 25.0, 50.0, math.inf)
"""Slopes of the found-rate curve in ln(impact) the interval's likelihood maximises over (inf: a step)."""
GRID = 400
"""Candidate limits, log-spaced from a quarter of the smallest case to four times the largest (an end kept
outside the cases is censored, so the span past them only has to hold a candidate on each side)."""
PROBABILITY_FLOOR = 1e-6
"""A step's found probability below its limit (and 1 minus it above): one case on the wrong side of a step
costs ln(1e6) ≈ 14, so a step can be contradicted but the likelihood stays finite."""


def likelihood_cutoff(n: int, level: float = CONFIDENCE_LEVEL) -> float:
    """The likelihood-ratio statistic's bound: F(1, n − 2) at ``level`` (the curve's two parameters estimated from
    n cases, as Student's t widens z), χ²₁ as n grows; χ²₁ alone covered 83-90% at 8-12 cases."""
    return float(f_dist.ppf(level, 1, n - 2)) if n > 2 else math.inf


def limit_interval(impacts: Sequence[float], found: Sequence[bool],
                   level: float = CONFIDENCE_LEVEL) -> tuple[float, float | None]:
    """The profile-likelihood interval of the 50% point (module docstring): the candidate limits L whose best
    curve through L (over :data:`SLOPES`) loses at most χ²₁(level)/2 of log-likelihood to the best curve of
    all. Its lower end is 0 when the smallest candidate is kept, its upper end None when the largest is."""
    x = np.log(np.maximum(np.asarray(impacts, dtype=float), 1e-12))
    y = np.asarray(found, dtype=bool)
    grid = np.linspace(x.min() - math.log(4), x.max() + math.log(4), GRID)
    z = x[None, :] - grid[:, None]  # candidate x case
    best = np.full(GRID, -np.inf)
    for slope in SLOPES:
        if math.isinf(slope):
            p = np.where(z >= 0, 1 - PROBABILITY_FLOOR, PROBABILITY_FLOOR)
        else:
            p = np.clip(1 / (1 + np.exp(-slope * z)), PROBABILITY_FLOOR, 1 - PROBABILITY_FLOOR)
        best = np.maximum(best, np.where(y, np.log(p), np.log1p(-p)).sum(axis=1))
    kept = grid[2 * (best.max() - best) <= likelihood_cutoff(len(x), level)]
    # beyond the cases the curve is the logistic's extrapolation, not evidence: an end there is censored
    lo = 0.0 if kept[0] < x.min() else float(np.exp(kept[0]))
    hi = None if kept[-1] > x.max() else float(np.exp(kept[-1]))
    return lo, hi


def detection_limit(cause: str, impacts: Sequence[float], found: Sequence[bool]) -> DetectionLimit:
    """The detection limit of one cause from its cases' measured impacts and whether each was found."""
    if len(impacts) != len(found):
        raise ValueError(f"{cause}: {len(impacts)} impacts but {len(found)} found flags")
    bad = [v for v in impacts if not (isinstance(v, (int, float)) and math.isfinite(v))]
    if bad:
        raise ValueError(f"{cause}: measured impacts must be finite numbers, got {bad[:3]}")
    n, hits = len(impacts), int(sum(bool(f) for f in found))
    span = dict(smallest=min(impacts), largest=max(impacts)) if n else {}
    if n < DETECTION_MIN_CASES:
        return DetectionLimit(cause=cause, cases=n, found=hits, state="undefined", limit=None, ci=None, **span)
    state, value = limit_of(impacts, found)
    lo, hi = limit_interval(impacts, found)
    # the point is inside its interval: a censored point at its censored end, a measured one hulled in
    lo = min(lo, 0.0 if state == "below" else value)
    hi = None if hi is None or state == "not_reached" else max(hi, value)
    return DetectionLimit(cause=cause, cases=n, found=hits, state=state, limit=value, ci=(lo, hi), **span)


__all__ = ["DETECTION_MIN_CASES", "DetectionLimit", "FOUND_RATE", "detection_limit", "found_rate_curve", "limit_interval",
           "limit_of"]
