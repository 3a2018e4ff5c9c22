"""Detection limits: per cause and diagnoser, the smallest measured effect at which the cause is found half the time.

The summary holds, per labeled cause, every case with a measured effect and whether the diagnoser found
the cause there (``Summary.detection[cause].points``: the injection's measured impact, the fraction of
step time it cost against the healthy twin). From those points:

* **The found-rate curve** is the isotonic (non-decreasing) regression of found (0/1) on the measured
  impact, by pool-adjacent-violators over the distinct impacts (ties pooled). Monotone because a larger
  effect of the same cause is not harder to see, and nothing else is assumed: no curve shape to fit, no
  parameter that can fail to exist (a logistic fit has no estimate when every case is found, the common
  case for a good diagnoser, and its slope would be set by 5-10 points).
* **The detection limit** is the smallest measured impact at which that curve reaches
  :data:`FOUND_RATE` (50%: the effect the diagnoser is as likely to find as to miss, the usual definition
  of a detection threshold in psychophysics and in analytical chemistry's limit of detection).
  Two outcomes are censored and said so, never given a number they do not have: the curve is at 50% or
  more already at the smallest case (**below the smallest case**: the limit is at most that impact, the
  corpus holds nothing smaller to tell), or it never reaches 50% (**not reached**: above the largest case).
* **The interval** is a percentile bootstrap over the cause's cases (:data:`RESAMPLES` resamples with
  replacement, seeded): each resample's limit, with a censored resample taken at the end of its range
  that widens the interval (below its smallest case: 0 for the lower end, that case's impact for the
  upper; not reached: its largest impact for the lower end, no bound for the upper). An upper end with
  no bound reads "not reached".
* Fewer than :data:`~diageval.scoring.summary.DETECTION_MIN_CASES` cases with a measured impact and the
  limit is undefined, saying how many there are: a limit needs the cause at several severities.

A two-cause case lends its one measured impact to both of its causes (the recording measures the
combined effect).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from diageval.scoring.intervals import CONFIDENCE_LEVEL
from diageval.scoring.summary import DETECTION_MIN_CASES, Summary

FOUND_RATE = 0.5
RESAMPLES = 1000
SEED = 0

State = Literal["measured", "below", "not_reached", "undefined"]


class DetectionLimit(BaseModel):
    """One diagnoser's detection limit for one cause."""

    cause: str
    cases: int = Field(description="Cases of the cause with a measured impact")
    found: int = Field(description="Of those, the cases where the diagnoser found it")
    state: State = Field(description="measured; below (the smallest case); not_reached (above the largest); "
                                     "undefined (too few cases)")
    limit: float | None = Field(description="The measured impact where the found-rate curve reaches 50% (measured), "
                                            "the smallest case's impact (below), the largest's (not_reached)")
    ci: tuple[float, float | None] | None = Field(description="Percentile bootstrap interval over cases; an upper "
                                                              "end of None: not reached in 2.5% or more of resamples")
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


def _limits(xs: np.ndarray, found: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The limit of each weighted sample at once: ``xs`` the distinct impacts (ascending), ``found`` the
    found cases at each, per sample (rows of ``counts``) how many cases sit at each impact (0: none).

    The isotonic fit at the j-th impact is max over a <= j of min over b >= j of the mean found over the
    impacts a..b, so it reaches 1/2 exactly when, with S the running sum of (found - 1/2) over cases, the
    smallest S from j on is no smaller than the smallest S before j. Returns per sample the first present
    impact where it does (or -1), the smallest present impact and the largest.
    """
    present = counts > 0
    s = np.cumsum(found - FOUND_RATE * counts, axis=1)
    before = np.minimum.accumulate(np.concatenate([np.zeros((len(s), 1)), s[:, :-1]], axis=1), axis=1)
    after = np.minimum.accumulate(s[:, ::-1], axis=1)[:, ::-1]
    ok = present & (after >= before - 1e-9)
    first = np.where(ok.any(axis=1), ok.argmax(axis=1), -1)
    smallest = xs[present.argmax(axis=1)]
    largest = xs[len(xs) - 1 - present[:, ::-1].argmax(axis=1)]
    return first, smallest, largest


def _state(first: int, smallest: float, largest: float, xs: np.ndarray) -> tuple[State, float]:
    if first < 0:
        return "not_reached", float(largest)
    if xs[first] == smallest:
        return "below", float(smallest)
    return "measured", float(xs[first])


def limit_of(impacts: Sequence[float], found: Sequence[bool]) -> tuple[State, float]:
    """The limit's state and value on one sample (``impacts`` non-empty; see the module docstring)."""
    xs, inverse = np.unique(np.asarray(impacts, dtype=float), return_inverse=True)
    hits = np.bincount(inverse, weights=np.asarray(found, dtype=float), minlength=len(xs))
    counts = np.bincount(inverse, minlength=len(xs)).astype(float)
    first, smallest, largest = _limits(xs, hits[None, :], counts[None, :])
    return _state(int(first[0]), smallest[0], largest[0], xs)


def _bootstrap(impacts: np.ndarray, found: np.ndarray, resamples: int, seed: int) -> tuple[float, float | None]:
    """Percentile interval of the limit over resamples of the cases (censored resamples widen it)."""
    n = len(impacts)
    xs, inverse = np.unique(impacts, return_inverse=True)
    picks = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)  # resample x case
    to_impact = np.zeros((n, len(xs)))
    to_impact[np.arange(n), inverse] = 1.0
    counts = picks @ to_impact
    hits = (picks * found.astype(float)) @ to_impact
    first, smallest, largest = _limits(xs, hits, counts)
    value = np.where(first >= 0, xs[np.maximum(first, 0)], np.nan)
    below = (first >= 0) & (value == smallest)
    low_ends = np.where(first < 0, largest, np.where(below, 0.0, value))
    high_ends = np.where(first < 0, np.inf, np.where(below, smallest, value))
    tail = (1 - CONFIDENCE_LEVEL) / 2
    lo = float(np.quantile(low_ends, tail, method="lower"))
    hi = float(np.quantile(high_ends, 1 - tail, method="higher"))
    return lo, (hi if math.isfinite(hi) else None)


def detection_limit(cause: str, impacts: Sequence[float], found: Sequence[bool], *,
                    resamples: int = RESAMPLES, seed: int = SEED) -> DetectionLimit:
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
    ci = _bootstrap(np.asarray(impacts, dtype=float), np.asarray(found, dtype=bool), resamples, seed)
    return DetectionLimit(cause=cause, cases=n, found=hits, state=state, limit=value, ci=ci, **span)


def summary_limits(summary: Summary) -> dict[str, DetectionLimit]:
    """Cause -> detection limit, for every labeled cause of ``summary`` (undefined, with 0 cases, for a cause
    none of whose cases had its impact measured: recorded jobs, cases skipped on this device)."""
    return {cause: detection_limit(cause, [p.impact for p in d.points], [p.found for p in d.points])
            for cause, d in sorted(summary.detection.items())}


def limit_text(d: DetectionLimit) -> str:
    """One board cell: the limit, its interval and n, or why there is none."""
    if d.state == "undefined":
        return f"undefined ({d.cases} of {DETECTION_MIN_CASES} cases)"
    assert d.limit is not None and d.ci is not None
    hi = "not reached" if d.ci[1] is None else f"{d.ci[1]:.2f}"
    interval = f"[{d.ci[0]:.2f}, {hi}] n={d.cases}"
    if d.state == "below":
        return f"≤ {d.limit:.2f} (below the smallest case) {interval}"
    if d.state == "not_reached":
        return f"not reached (> {d.limit:.2f}, the largest case) {interval}"
    return f"{d.limit:.2f} {interval}"


__all__ = ["DetectionLimit", "FOUND_RATE", "RESAMPLES", "detection_limit", "found_rate_curve", "limit_of",
           "limit_text", "summary_limits"]
