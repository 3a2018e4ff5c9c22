"""Detection limits on the board and the HTML page: each cause's limit, its interval and n, as one cell.

The limit itself (the measured impact where the found-rate curve crosses 50%, its interval, the censored
outcomes) is defined once, in :mod:`diageval.scoring.detection`, and ``summary.json`` holds it per cause
(``detection[cause]``: ``state``, ``limit``, ``ci``). :func:`summary_limits` recomputes it from the
summary's points with that same function, so a board made from a summary written before the definition
changed shows the current limit of the same cases, and one made from a current summary shows exactly its
``summary.json`` (``tests/scoring/test_detection_limits.py`` checks both).
"""

from __future__ import annotations

from diageval.scoring.detection import DETECTION_MIN_CASES, DetectionLimit, detection_limit
from diageval.scoring.summary import Summary


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


__all__ = ["limit_text", "summary_limits"]
