"""From HolisticTraceAnalysis outputs to diageval findings: plain functions on DataFrames shaped like HTA's.

The ``hta`` adapter (:mod:`diageval.diagnosers.hta_adapter`) runs HTA's analyses and hands their outputs
here; nothing in this module imports HTA, so every rule is unit-tested on small hand-made frames.

Thresholds come from what a cause means, not from the corpus' numbers:

* A cause is named when it costs a large share of the time that matters: **a third** of the step (or of
  the critical path window) for data loading; **half** of the device's time idle, mostly waiting for the
  host, for launch overhead. Below that it may exist but is not *the* bottleneck.
* Confidence grows linearly from 0.5 at the threshold to 0.9 at the point where the signal is
  unambiguous (data loading two thirds of the step; every kernel shorter than its launch), never 1:
  HTA sees one trace window and cannot rule out a confounder.
* ``impact`` is given only where HTA's numbers measure the time lost: the data-loading time on the
  critical path, the time peers wait for a straggler. For launch overhead the device's host-wait idle
  time is only an upper bound (other host work also leaves the device waiting), so impact stays empty.
* HTA cannot tell *why* collectives are long (a slow network and a late peer look alike in its output),
  so long or exposed communication is reported as the symptom ``symptom.long_collective``, never as
  ``comm.collective_stall``; low device utilisation as ``symptom.low_utilization``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from diageval.diagnosis import Finding

# input.dataloader_starvation: data loading on the critical path, as a share of the analysed window.
DATA_LOADING_MIN_SHARE = 1 / 3
DATA_LOADING_SURE_SHARE = 2 / 3
# launch.kernel_launch_overhead: most kernels shorter than their launch, device idle half the time,
# and that idle time mostly waiting for the host.
LAUNCH_MIN_SHORT_KERNEL_FRACTION = 0.5
LAUNCH_MIN_IDLE_FRACTION = 0.5
LAUNCH_MIN_HOST_WAIT_SHARE = 0.5
# symptom.low_utilization: the device idle at least half the traced time.
LOW_UTILIZATION_MIN_IDLE = 0.5
# symptom.long_collective: communication not overlapped by computation, as a share of kernel time.
LONG_COLLECTIVE_MIN_SHARE = 1 / 3
# compute.straggler_rank: the same rank is the last to start the dominant collective in at least two thirds
# of the iterations, and its peers wait for it at least a tenth of an iteration (median).
STRAGGLER_MIN_CONSISTENCY = 2 / 3
STRAGGLER_MIN_LATENESS = 0.10
STRAGGLER_SURE_LATENESS = 0.30
# ... over at least this many iterations: HTA's metric always ranks someone last, so with one or two
# iterations "the same rank, most of the time" is a coin flip (two of two happens by chance a quarter of
# the time with two ranks); three is the fewest where a repeat is evidence (as the rules'
# MIN_PATTERN_STEPS).
STRAGGLER_MIN_ITERATIONS = 3


def _ramp(value: float, threshold: float, sure: float) -> float:
    """0.5 at the threshold, rising linearly to 0.9 at ``sure`` and staying there."""
    if sure <= threshold:
        return 0.9
    return 0.5 + 0.4 * min(1.0, max(0.0, (value - threshold) / (sure - threshold)))


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _trace(rank: int) -> str:
    return f"rank{rank}/trace.json.gz"


# --- critical path: data loading -------------------------------------------------------------------


@dataclass(frozen=True)
class CriticalPathSummary:
    """One rank's critical path from HTA, reduced to time per ``bound_by`` class (microseconds)."""

    rank: int
    window_us: float  # the analysed window: ProfilerStep spans, or the whole trace without them
    n_steps: int  # ProfilerSteps in the window (0 = whole trace)
    bound_us: dict[str, float]

    @property
    def path_us(self) -> float:
        return sum(self.bound_us.values())

    def share_of_window(self, bound: str) -> float:
        return self.bound_us.get(bound, 0.0) / self.window_us if self.window_us > 0 else 0.0

    def share_of_path(self, bound: str) -> float:
        return self.bound_us.get(bound, 0.0) / self.path_us if self.path_us > 0 else 0.0


def summarize_critical_path(rank: int, breakdown: pd.DataFrame | None, window_us: float, n_steps: int) -> CriticalPathSummary:
    """Reduce HTA's ``CPGraph.get_critical_path_breakdown()`` (columns ``bound_by``, ``duration``).

    Rows whose ``bound_by`` is empty (pure dependency edges, zero weight) are dropped.
    """
    bound: dict[str, float] = {}
    if breakdown is not None and len(breakdown):
        grouped = breakdown.groupby("bound_by")["duration"].sum()
        bound = {str(k): float(v) for k, v in grouped.items() if str(k) and float(v) > 0}
    return CriticalPathSummary(rank=rank, window_us=float(window_us), n_steps=n_steps, bound_us=bound)


def dataloader_finding(summaries: list[CriticalPathSummary]) -> Finding | None:
    """``input.dataloader_starvation`` when data loading holds a third of the window on the median rank.

    Starvation stalls every rank (they all wait for their own next batch), so the claim is not
    rank-specific and the median rank decides; impact is the median rank's data-loading share.
    """
    usable = [s for s in summaries if s.window_us > 0]
    if not usable:
        return None
    share = statistics.median(s.share_of_window("data_loading") for s in usable)
    if share < DATA_LOADING_MIN_SHARE:
        return None
    window = "ProfilerStep window" if all(s.n_steps for s in usable) else "traced window"
    return Finding(
        category="input.dataloader_starvation",
        kind="cause",
        confidence=_ramp(share, DATA_LOADING_MIN_SHARE, DATA_LOADING_SURE_SHARE),
        impact=min(1.0, share),
        summary=f"HTA critical path: data loading is {_pct(share)} of the {window} on the median rank",
        evidence=[
            f"{_trace(s.rank)}: HTA critical path, data_loading {s.bound_us.get('data_loading', 0.0) / 1e3:.1f} ms "
            f"= {_pct(s.share_of_window('data_loading'))} of the {s.window_us / 1e3:.1f} ms window "
            f"({_pct(s.share_of_path('data_loading'))} of the path; cpu_bound {_pct(s.share_of_path('cpu_bound'))})"
            for s in usable
        ],
    )


# --- GPU time: utilisation and launch overhead -----------------------------------------------------


def low_utilization_symptom(temporal: pd.DataFrame) -> Finding | None:
    """``symptom.low_utilization`` from HTA's temporal breakdown (``rank``, ``idle_time_pctg``)."""
    idle = {int(r.rank): float(r.idle_time_pctg) / 100 for r in temporal.itertuples() if pd.notna(r.idle_time_pctg)}
    low = {r: v for r, v in idle.items() if v >= LOW_UTILIZATION_MIN_IDLE}
    if not low:
        return None
    worst = max(low.values())
    return Finding(
        category="symptom.low_utilization",
        kind="symptom",
        confidence=min(0.95, worst),
        ranks=sorted(low) if len(low) < len(idle) else None,
        summary=f"HTA temporal breakdown: the GPU is idle {_pct(worst)} of the traced time"
        + (f" on rank {max(low, key=low.get)}" if len(idle) > 1 else ""),
        evidence=[f"{_trace(r)}: HTA temporal breakdown idle_time_pctg {100 * v:.1f}%" for r, v in sorted(idle.items())],
    )


@dataclass(frozen=True)
class LaunchEvidence:
    """One rank's launch-related numbers from HTA's kernel launch stats, temporal and idle breakdowns."""

    rank: int
    kernels: int
    short_kernel_fraction: float  # kernels whose GPU time is below their CPU launch time
    median_gpu_us: float
    median_cpu_us: float
    idle_fraction: float  # temporal breakdown idle share
    host_wait_share: float  # host_wait share of the idle time (idle time breakdown, all streams)


def launch_evidence(rank: int, launch_stats: pd.DataFrame, temporal: pd.DataFrame, idle: pd.DataFrame) -> LaunchEvidence | None:
    """Combine, for one rank, HTA's ``get_cuda_kernel_launch_stats`` frame (``cpu_duration``,
    ``gpu_duration``), ``get_temporal_breakdown`` (``rank``, ``idle_time_pctg``) and
    ``get_idle_time_breakdown`` (``rank``, ``stream``, ``idle_category``, ``idle_time``). None when the
    rank has no kernel launches or no temporal row."""
    stats = launch_stats.dropna(subset=["cpu_duration", "gpu_duration"])
    row = temporal[temporal["rank"] == rank]
    if stats.empty or row.empty or pd.isna(row["idle_time_pctg"].iloc[0]):
        return None
    mine = idle[idle["rank"] == rank]
    idle_total = float(mine["idle_time"].sum())
    host_wait = float(mine.loc[mine["idle_category"] == "host_wait", "idle_time"].sum())
    return LaunchEvidence(
        rank=rank,
        kernels=len(stats),
        short_kernel_fraction=float((stats["gpu_duration"] < stats["cpu_duration"]).mean()),
        median_gpu_us=float(stats["gpu_duration"].median()),
        median_cpu_us=float(stats["cpu_duration"].median()),
        idle_fraction=float(row["idle_time_pctg"].iloc[0]) / 100,
        host_wait_share=host_wait / idle_total if idle_total > 0 else 0.0,
    )


def launch_overhead_finding(evidence: list[LaunchEvidence]) -> Finding | None:
    """``launch.kernel_launch_overhead`` on the ranks where all three signs agree (see module doc)."""
    firing = [
        e for e in evidence
        if e.short_kernel_fraction >= LAUNCH_MIN_SHORT_KERNEL_FRACTION
        and e.idle_fraction >= LAUNCH_MIN_IDLE_FRACTION
        and e.host_wait_share >= LAUNCH_MIN_HOST_WAIT_SHARE
    ]
    if not firing:
        return None
    strength = min(
        min(
            _ramp(e.short_kernel_fraction, LAUNCH_MIN_SHORT_KERNEL_FRACTION, 1.0),
            _ramp(e.idle_fraction, LAUNCH_MIN_IDLE_FRACTION, 1.0),
            _ramp(e.host_wait_share, LAUNCH_MIN_HOST_WAIT_SHARE, 1.0),
        )
        for e in firing
    )
    worst = max(firing, key=lambda e: e.idle_fraction * e.host_wait_share)
    return Finding(
        category="launch.kernel_launch_overhead",
        kind="cause",
        confidence=strength,
        ranks=sorted(e.rank for e in firing) if len(firing) < len(evidence) else None,
        summary=(
            f"HTA: {_pct(worst.short_kernel_fraction)} of kernels run shorter than their launch "
            f"(median {worst.median_gpu_us:.0f} us on GPU vs {worst.median_cpu_us:.0f} us to launch); "
            f"GPU idle {_pct(worst.idle_fraction)}, {_pct(worst.host_wait_share)} of it waiting for the host"
        ),
        evidence=[
            f"{_trace(e.rank)}: HTA kernel launch stats, {e.kernels} kernels, {_pct(e.short_kernel_fraction)} with "
            f"gpu_duration < cpu_duration; temporal idle {_pct(e.idle_fraction)}; idle breakdown host_wait "
            f"{_pct(e.host_wait_share)} of idle"
            for e in evidence
        ],
    )


# --- communication ---------------------------------------------------------------------------------


def exposed_communication_share(kernel_types: pd.DataFrame) -> float | None:
    """Share of kernel time spent in communication not overlapped by computation.

    Input: HTA's ``get_gpu_kernel_breakdown()[0]`` (``kernel_type``, ``sum``), whose rows include
    ``COMMUNICATION``, ``COMPUTATION overlapping COMMUNICATION``, ``COMMUNICATION overlapping MEMORY``...
    Rows whose type *starts* with ``COMMUNICATION`` have communication without computation over it.
    None when the frame is empty or has no communication rows at all.
    """
    if kernel_types.empty:
        return None
    types = kernel_types["kernel_type"].astype(str)
    if not types.str.contains("COMMUNICATION").any():
        return None
    total = float(kernel_types["sum"].sum())
    exposed = float(kernel_types.loc[types.str.startswith("COMMUNICATION"), "sum"].sum())
    return exposed / total if total > 0 else None


def long_collective_symptom(kernel_types: pd.DataFrame, overlap: pd.DataFrame | None) -> Finding | None:
    """``symptom.long_collective`` when exposed communication is a third of kernel time.

    ``overlap`` (HTA's ``get_comm_comp_overlap``: ``rank``, ``comp_comm_overlap_pctg``) only adds evidence.
    """
    share = exposed_communication_share(kernel_types)
    if share is None or share < LONG_COLLECTIVE_MIN_SHARE:
        return None
    evidence = [f"HTA kernel breakdown: communication not overlapped by computation {_pct(share)} of kernel time"]
    if overlap is not None:
        evidence += [
            f"{_trace(int(r.rank))}: HTA comm/comp overlap {float(r.comp_comm_overlap_pctg):.1f}% of communication time"
            for r in overlap.itertuples()
            if pd.notna(r.comp_comm_overlap_pctg)
        ]
    return Finding(
        category="symptom.long_collective",
        kind="symptom",
        confidence=min(0.95, 0.5 + share / 2),
        summary=f"HTA: exposed communication is {_pct(share)} of GPU kernel time",
        evidence=evidence,
    )


# --- stragglers ------------------------------------------------------------------------------------


def straggler_finding(metric: pd.DataFrame, kernel_name: str | None = None) -> Finding | None:
    """``compute.straggler_rank`` from HTA's straggler metric.

    Input: one row per (``rank``, ``iteration``) with ``normalized_start_time``: when the rank started
    the last long communication kernel of the collective HTA picked, in units of the mean iteration time
    (HTA's ``_compute_normalized_start_time_of_significant_comm_kernels``). Collectives end together, so
    the last rank to start is the one its peers wait for; its lateness (start minus the median start of
    its peers) is the fraction of an iteration they lose.
    """
    if metric.empty or metric["rank"].nunique() < 2:
        return None
    latest: list[tuple[int, int, float]] = []  # (iteration, rank, lateness)
    for iteration, group in metric.groupby("iteration"):
        group = group.dropna(subset=["normalized_start_time"])
        if group["rank"].nunique() < 2:
            continue
        top = group.loc[group["normalized_start_time"].idxmax()]
        peers = group.loc[group["rank"] != top["rank"], "normalized_start_time"]
        latest.append((int(iteration), int(top["rank"]), float(top["normalized_start_time"] - peers.median())))
    if len(latest) < STRAGGLER_MIN_ITERATIONS:
        return None  # HTA names a latest rank in every iteration: too few iterations to call it a pattern
    counts: dict[int, int] = {}
    for _, rank, _ in latest:
        counts[rank] = counts.get(rank, 0) + 1
    rank = max(counts, key=lambda r: (counts[r], -r))
    consistency = counts[rank] / len(latest)
    lateness = statistics.median(lat for _, r, lat in latest if r == rank)
    if consistency < STRAGGLER_MIN_CONSISTENCY or lateness < STRAGGLER_MIN_LATENESS:
        return None
    iterations = sorted(it for it, r, _ in latest if r == rank)
    what = f"the last long {kernel_name}" if kernel_name else "the dominant collective"
    return Finding(
        category="compute.straggler_rank",
        kind="cause",
        confidence=min(
            _ramp(lateness, STRAGGLER_MIN_LATENESS, STRAGGLER_SURE_LATENESS),
            _ramp(consistency, STRAGGLER_MIN_CONSISTENCY, 1.0),
        ),
        ranks=[rank],
        impact=min(1.0, lateness),
        summary=(
            f"HTA straggler metric: rank {rank} starts {what} {_pct(lateness)} of an iteration after its "
            f"peers in {counts[rank]} of {len(latest)} iterations"
        ),
        evidence=[
            f"{_trace(r)}: iteration {it} starts {lat:+.2f} iterations after the median peer"
            for it, r, lat in latest
        ][:20]
        + [f"HTA: rank {rank} latest in ProfilerStep(s) {iterations[:10]}"],
    )
