"""Small robust statistics the analysers share (plain functions over lists of floats)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from diageval.diagnosers.rules import thresholds as T


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile, ``q`` in [0, 1]."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def robust_sigma(values: Sequence[float]) -> float:
    """1.4826 x median absolute deviation: the standard deviation of the quiet part of the data."""
    if not values:
        return math.nan
    m = median(values)
    return 1.4826 * median([abs(v - m) for v in values])


def best_segment(flags: Sequence[bool], miss_cost: float = 1.5) -> tuple[int, int] | None:
    """The half-open index range [i, j) that best covers the True flags (max-sum subarray, +1 / -miss_cost).

    Used to turn "this step looks affected" flags into the step range a finding claims.
    """
    best, best_range = 0.0, None
    run, start = 0.0, 0
    for k, f in enumerate(flags):
        if run <= 0:
            run, start = 0.0, k
        run += 1.0 if f else -miss_cost
        if run > best:
            best, best_range = run, (start, k + 1)
    return best_range


def clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def confidence_from_margin(value: float, threshold: float, consistency: float = 1.0) -> float:
    """Map how far a measure clears its threshold (and how consistently) to a claim confidence.

    Just over the threshold is a coin flip plus a little (0.55); twice the threshold or more, seen on
    every step, is 0.95. ``consistency`` (0..1, e.g. the share of steps that show it) scales the margin.
    """
    if threshold <= 0 or math.isnan(value):
        return 0.5
    margin = clamp(value / threshold - 1.0, 0.0, 1.0)
    return round(clamp(0.55 + 0.4 * margin * clamp(consistency, 0.0, 1.0), 0.5, 0.95), 3)


def persistent_segment(flags: Sequence[bool]) -> tuple[int, int] | None:
    """The best-covering range of flagged steps, if it is long and dense enough for a cross-rank cause.

    Long enough: at least :func:`min_block` steps; dense enough: ``T.PERSISTENT_SHARE`` of them flagged.
    """
    seg = best_segment(flags)
    if seg is None:
        return None
    length = seg[1] - seg[0]
    if length < min_block(len(flags)) or sum(flags[seg[0] : seg[1]]) / length < T.PERSISTENT_SHARE:
        return None
    return seg


def min_block(n_steps: int) -> int:
    """Fewest consecutive affected steps a cross-rank timing cause must show: 5, or 30% of a long window.

    Shorter runs of odd steps happen by chance on a busy host (descheduling moves single steps by ms,
    another process can slow one rank for a few steps); a trace of fewer than 5 steps cannot show it.
    """
    return max(5, math.ceil(0.3 * n_steps))
