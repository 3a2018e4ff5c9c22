"""Small robust statistics the analysers share (plain functions over lists of floats), and
:func:`persistent_rank`, the one-rank-on-most-steps test the straggler and load-imbalance judges share."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

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


def median_standard_error(values: Sequence[float]) -> float:
    """Standard error of the median of per-step values: 1.2533 x robust sigma / sqrt(n) (the median of n
    normal draws; the robust sigma keeps one odd step from inflating it). 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    return 1.2533 * robust_sigma(values) / math.sqrt(len(values))


def normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def lower_edge(cut: float) -> float:
    """Where a fuzzy cut starts (``thresholds.CUT_SOFTNESS`` below it): a step "shows" a cause from here."""
    return (1.0 - T.CUT_SOFTNESS) * cut


def graded_confidence(value: float, cut: float, se: float = 0.0) -> float:
    """The probability that a measured ``value`` (with standard error ``se``) lies over a fuzzy ``cut``.

    ``Phi((value - cut) / sigma)`` with ``sigma = sqrt(se^2 + (CUT_SOFTNESS x cut)^2)`` (thresholds.py gives the
    reasoning), at most ``MAX_CONFIDENCE``: 0.5 at the cut, smooth on both sides of it, so a run just under a
    cut is named at a confidence just under 0.5, never dropped to nothing. Measures where lower is worse are
    passed as a ratio (``cut / value`` against 1.0).
    """
    if cut <= 0 or math.isnan(value):
        return 0.5
    sigma = math.sqrt(max(se, 0.0) ** 2 + (T.CUT_SOFTNESS * cut) ** 2)
    return round(min(T.MAX_CONFIDENCE, normal_cdf((value - cut) / sigma)), 3)


def claim_floor() -> float:
    """The least confidence a cause is claimed at: ``CLAIM_FLOOR_SIGMAS`` below a fuzzy cut (about 0.16)."""
    return normal_cdf(-T.CLAIM_FLOOR_SIGMAS)


def claimable(confidence: float) -> bool:
    return confidence >= claim_floor() - 1e-9


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


Row = TypeVar("Row")


@dataclass(frozen=True)
class PersistentRank:
    """One rank singled out on a persistent segment of steps (see :func:`persistent_rank`)."""

    rank: int
    seg: tuple[int, int]  # the steps' rows [seg[0], seg[1])
    flags: list[bool]  # per row: flagged for ``rank``
    share: float  # median share over the segment
    confidence: float


def persistent_rank(
    table: Sequence[Row],
    rank_of: Callable[[Row], int],
    flagged: Callable[[Row, int], bool],
    share_of: Callable[[Row], float],
    cut: float,
) -> PersistentRank | None:
    """The rank ``rank_of`` names on the most rows (the first seen on a tie), when ``flagged`` marks it on a
    :func:`persistent_segment` and the median ``share_of`` the segment's rows clears ``cut`` claimably
    (:func:`graded_confidence` with the median's standard error). None under 3 rows, as no segment can persist."""
    if len(table) < 3:
        return None
    counts = Counter(rank_of(row) for row in table)
    rank = max(counts, key=lambda r: counts[r])
    flags = [flagged(row, rank) for row in table]
    seg = persistent_segment(flags)
    if seg is None:
        return None
    shares = [share_of(row) for row in table[seg[0] : seg[1]]]
    share = median(shares)
    confidence = graded_confidence(share, cut, median_standard_error(shares))
    if not claimable(confidence):
        return None
    return PersistentRank(rank=rank, seg=seg, flags=flags, share=share, confidence=confidence)
