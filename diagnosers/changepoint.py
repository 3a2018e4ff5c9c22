"""``changepoint``: a baseline on ``steps.jsonl`` alone: step-time change points per rank (PELT from the
``ruptures`` library, as in the fail-slow literature), no trace read.

Per rank, the step durations (log scale, so a 2x change is the same size at any speed) are segmented by
PELT with an L2 cost. Penalty ``2 * sigma^2 * log(n)`` (the BIC-style choice of Killick et al. for a
Gaussian mean change), with ``sigma`` estimated robustly from the median absolute first difference
(``MAD / 0.6745 / sqrt(2)``), so the penalty scales with the run's own noise; ``min_size`` 1 so that a
single slow last step (a job that died in it) is its own segment.

A segment is **slow** when its median step is at least ``SLOW_RATIO`` (1.5x) the median of the run's
first segment (the baseline): measured healthy step-time CV is 10-26% within a run, so 1.5x is beyond
two standard deviations of healthy noise.

Mapping (what it sees -> taxonomy):

=============================================================  ==========================================
what the change points show                                    finding
=============================================================  ==========================================
a slow segment on every rank, lasting to the end of the run    ``symptom.slow_step``, symptom, steps =
                                                               [onset, end)
slow segments that end before the run does                     ``symptom.step_time_spikes``, symptom
a slow segment on some ranks only (the others unchanged)       ``compute.straggler_rank``, cause, ranks =
                                                               the slow ones, confidence 0.5
=============================================================  ==========================================

Step times alone cannot say why a step is slow: a cause is claimed only where ranks differ, and then at
0.5 (in data-parallel training a late rank usually makes every rank's step slow, so ranks rarely differ).

Never claims: any cause but ``compute.straggler_rank``.

Decided here: fewer than ``MIN_STEPS`` (8) steps on every rank: abstain (no baseline to compare to).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import installed_version, require_module
from diageval.diagnosis import Abstention, Diagnosis, Finding

INSTALL_HINT = "pip install 'diageval[changepoint]'"
SLOW_RATIO = 1.5
MIN_STEPS = 8
STRAGGLER_CONFIDENCE = 0.5
SYMPTOM_CONFIDENCE = 0.6



class ChangepointDiagnoser:
    """Change points in each rank's step times (see the module docstring)."""

    name = "changepoint"
    version = f"1+ruptures-{installed_version('ruptures')}"
    claims: ClassVar[tuple[str, ...]] = ("compute.straggler_rank",)

    def __init__(self) -> None:
        require_module("ruptures", self.name, "ruptures", INSTALL_HINT)

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        per_rank: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for s in bundle.steps():
            per_rank[s.rank].append((s.step, s.duration))
        per_rank = {r: sorted(v) for r, v in per_rank.items() if len(v) >= MIN_STEPS}
        if not per_rank:
            return Diagnosis(abstain=Abstention(reason=f"steps.jsonl has fewer than {MIN_STEPS} steps on every rank"))
        slow = {r: slow_segments(rows) for r, rows in sorted(per_rank.items())}
        return Diagnosis(findings=findings_from_segments(slow, {r: rows[-1][0] + 1 for r, rows in per_rank.items()}))


def slow_segments(rows: list[tuple[int, float]]) -> list[tuple[int, int, float]]:
    """(first step, stop step, ratio to the baseline) of each slow segment of one rank's step times."""
    import numpy as np
    import ruptures as rpt

    steps = [s for s, _ in rows]
    signal = np.log(np.maximum([d for _, d in rows], 1e-6)).reshape(-1, 1)
    diffs = np.abs(np.diff(signal[:, 0]))
    sigma = float(np.median(diffs)) / 0.6745 / math.sqrt(2) if len(diffs) else 0.0
    sigma = max(sigma, 1e-3)
    ends = rpt.Pelt(model="l2", min_size=1, jump=1).fit(signal).predict(pen=2 * sigma**2 * math.log(len(rows)))
    bounds = [0] + ends
    baseline = statistics.median(signal[bounds[0]:bounds[1], 0])
    out = []
    for a, b in zip(bounds[1:-1], bounds[2:]):
        ratio = math.exp(statistics.median(signal[a:b, 0]) - baseline)
        if ratio >= SLOW_RATIO:
            out.append((steps[a], steps[b - 1] + 1, ratio))
    return out


def findings_from_segments(slow: dict[int, list[tuple[int, int, float]]], stop: dict[int, int]) -> list[Finding]:
    findings = []
    slow_ranks = [r for r, segs in slow.items() if segs]
    if not slow_ranks:
        return findings
    if len(slow_ranks) < len(slow):
        first = min(seg[0] for r in slow_ranks for seg in slow[r])
        findings.append(Finding(
            category="compute.straggler_rank", kind="cause", confidence=STRAGGLER_CONFIDENCE, ranks=slow_ranks,
            steps=(first, max(stop[r] for r in slow_ranks)),
            summary=f"step times of ranks {slow_ranks} rise from step {first}; the other ranks' do not",
            evidence=[f"steps.jsonl: rank {r} steps {a}-{b - 1} {ratio:.1f}x its first segment"
                      for r in slow_ranks for a, b, ratio in slow[r]][:6]))
    lasting = [(r, seg) for r in slow_ranks for seg in slow[r] if seg[1] >= stop[r]]
    passing = [(r, seg) for r in slow_ranks for seg in slow[r] if seg[1] < stop[r]]
    if lasting:
        onset = min(seg[0] for _, seg in lasting)
        findings.append(Finding(
            category="symptom.slow_step", kind="symptom", confidence=SYMPTOM_CONFIDENCE,
            ranks=sorted({r for r, _ in lasting}), steps=(onset, max(stop.values())),
            summary=f"steps are slower from step {onset} to the end",
            evidence=[f"steps.jsonl: rank {r} steps {a}-{b - 1} {ratio:.1f}x" for r, (a, b, ratio) in lasting][:6]))
    if passing:
        findings.append(Finding(
            category="symptom.step_time_spikes", kind="symptom", confidence=SYMPTOM_CONFIDENCE,
            ranks=sorted({r for r, _ in passing}),
            summary=f"{len(passing)} slow stretch(es) that end before the run does",
            evidence=[f"steps.jsonl: rank {r} steps {a}-{b - 1} {ratio:.1f}x" for r, (a, b, ratio) in passing][:6]))
    return findings
