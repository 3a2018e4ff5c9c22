"""How far two runs of an unchanged job drift apart, which one regression pair cannot measure, and the chance
that a pair's slowdown is beyond it: shared by the adapters that judge a pair (``otava``, ``hta-tracediff``)."""

from __future__ import annotations

import math

MIN_SLOWDOWN = 1.1
"""The smallest slowdown worth naming, a tenth of the step (the bar every built-in uses)."""
PAIR_SHIFT_SD = 0.19
"""The standard deviation of the log ratio of two runs of one unchanged job: the harness's measurement of two
back-to-back healthy recordings on a loaded shared 2-core machine (``recording/manifest_test.RECORDING_SHIFT_SD``,
measured on a CI run's twins). A noisy machine: on a quiet cluster a pair's confidence is lower than it could be,
never higher."""


def beyond_drift(ratio: float, spread: float = 0.0) -> float:
    """P(the pair's true step-time ratio exceeds MIN_SLOWDOWN) given the observed ``ratio``, with the drift's
    spread and ``spread`` (the standard error of the log ratio from the runs' own steps) as its uncertainty:
    Φ((ln ratio − ln MIN_SLOWDOWN) / sqrt(PAIR_SHIFT_SD² + spread²))."""
    z = (math.log(ratio) - math.log(MIN_SLOWDOWN)) / math.sqrt(PAIR_SHIFT_SD ** 2 + spread ** 2)
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))
