"""Is the step dispatch-bound (the host cannot issue work fast enough)?

On a GPU trace (the job ran on an accelerator): judged by the device queue, not by counts. A kernel
that starts within ``QUEUE_EMPTY_DELAY_US`` of the call that launched it found the queue empty; when
that is the median of a step, and the device idles in many short gaps between kernels for at least
``LAUNCH_GAP_SHARE`` of the step (beyond what data waits and blocking calls explain), the host is the
bottleneck (see ``thresholds``). Op or launch counts are shown as evidence, never used to decide.
A GPU trace without device events gets no judgement here (the diagnoser abstains on it), and the CPU
op-count rule is never applied to a GPU trace.

On CPU traces: a step made of thousands of host ops (``MIN_HOST_OPS_PER_STEP``) whose dispatch measurably costs a
share worth naming (``CPU_DISPATCH_SHARE``). Dispatch is what the trace measures of it, over every thread that runs
ops: the time between ops (the time table's launch row, the main thread's gaps of at most ``SHORT_GAP_US``; on the
other op threads, such as autograd's, the same gaps, ``inputs.thread_dispatch``) plus the self time of short ops
(under ``SHORT_OP_US``: on a small tensor an op's time is the framework's own). Confidence is the smaller of the
two graded confidences (the count against its cut, the share against its cut with its standard error): both must
hold, and the two rise together (more ops, more dispatch), so the smaller is the chance that both do. The impact
is the measured share; the count is shown as evidence.

Steps of a step-less trace are its windows (``RunEvidence.units``). A GPU step shows the pattern only with at
least ``MIN_KERNELS_PER_STEP`` kernels (a median of fewer delays says little). Confidence is graded: on a GPU
trace the product of the two measurements' graded confidences (both must hold), the delay taken as the ratio
``QUEUE_EMPTY_DELAY_US / delay`` against 1; a step shows a measurement from its cut's lower edge.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from diageval.bundle.attribution import ratio_standard_error, share_rows
from diageval.bundle.trace_ids import SHORT_GAP_US
from diageval.bundle.trace_summary import SHORT_OP_US, StepSummary
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import (
    best_segment,
    claimable,
    graded_confidence,
    lower_edge,
    median,
    median_standard_error,
)
from diageval.diagnosis import Finding


class LaunchRow(BaseModel):
    rank: int
    steps: int
    median_ops: float
    se_ops: float
    median_step_us: float
    median_leaf: float
    median_short: float
    median_short_share: float
    gaps_share: float  # the time table's launch row (main thread) plus the other op threads' gaps, of the units' time
    short_share: float  # every op thread's short ops' self time, of the units' time
    dispatch_se: float  # standard error of gaps_share + short_share
    threads: int  # most op threads in a unit
    flags: list[bool]
    units: list[StepSummary]

    @property
    def dispatch_share(self) -> float:
        return self.gaps_share + self.short_share


class GpuLaunchRow(BaseModel):
    rank: int
    steps: int
    median_step_us: float
    median_launches: float
    median_delay_us: float | None  # median over steps of the step's median launch-to-start delay
    delay_ratio: float  # QUEUE_EMPTY_DELAY_US / delay, median over steps
    se_delay_ratio: float
    median_gap_share: float  # idle in short device gaps, less data wait and blocking idle, / step
    se_gap_share: float
    median_gaps_50us: float
    median_busy_share: float
    flags: list[bool]
    units: list[StepSummary]
    unit_name: str


def _cpu_flag(st: StepSummary) -> bool:
    return st.dur_us > 0 and st.host_ops >= lower_edge(T.MIN_HOST_OPS_PER_STEP)


def _launch_gap_share(st: StepSummary) -> float:
    g = st.gpu
    if g is None or st.dur_us <= 0:
        return 0.0
    explained = g.blocking_device_idle_us + g.dataloader_wait_us
    return max(0.0, g.device_gap_short_us - explained) / st.dur_us


def _delay_ratio(st: StepSummary) -> float:
    d = st.gpu.launch_delay_median_us if st.gpu is not None else None
    return T.QUEUE_EMPTY_DELAY_US / max(d, 1e-3) if d is not None else 0.0


def _gpu_flag(st: StepSummary) -> bool:
    g = st.gpu
    if g is None or st.dur_us <= 0 or g.launch_delay_median_us is None or st.kernels < T.MIN_KERNELS_PER_STEP:
        return False
    return _delay_ratio(st) >= lower_edge(1.0) and _launch_gap_share(st) >= lower_edge(T.LAUNCH_GAP_SHARE)


def measure_launch(ev: RunEvidence) -> list[LaunchRow]:
    """CPU traces only (a trace that shows an accelerator is judged by ``measure_gpu_launch``)."""
    rows = []
    for rank, s in sorted(ev.traces.items()):
        all_units = ev.units(rank)
        units = [st for st in all_units if st.dur_us > 0]
        if not units or s.has_accelerator:
            continue
        gaps, short, se, threads = dispatch_shares(ev, rank, all_units)
        rows.append(
            LaunchRow(
                rank=rank,
                steps=len(units),
                median_ops=median([st.host_ops for st in units]),
                se_ops=median_standard_error([st.host_ops for st in units]),
                median_step_us=median([st.dur_us for st in units]),
                median_leaf=median([st.leaf_ops for st in units]),
                median_short=median([st.short_ops for st in units]),
                median_short_share=median([st.short_ops_us / st.dur_us for st in units]),
                gaps_share=gaps,
                short_share=short,
                dispatch_se=se,
                threads=threads,
                flags=[_cpu_flag(st) for st in units],
                units=units,
            )
        )
    return rows


def dispatch_shares(ev: RunEvidence, rank: int, units: list[StepSummary]) -> tuple[float, float, float, int]:
    """A host-only rank's dispatch over its ``units``: (time between ops, short ops' self time, the standard error of
    their sum, the most op threads in a unit). The time between ops is the time table's launch row (its share and
    error from its occurrences, ``attribution.share_rows``) plus the other op threads' short gaps; the short ops' and
    those gaps' error is the ratio estimator's over the units (one unit: none beyond the table's)."""
    table = {r.part: r for r in share_rows(ev.attribution[rank])} if rank in ev.attribution else {}
    launch = table.get("launch")
    per_unit = [(st, d) for st, d in zip(units, ev.dispatch.get(rank, [])) if st.dur_us > 0]
    durs = [st.dur_us for st, _ in per_unit]
    total = sum(durs)
    if total <= 0:
        return (launch.share if launch else 0.0), 0.0, (launch.se if launch else 0.0), 0
    off_main = [d.off_main_gaps_us for _, d in per_unit]
    short = [d.short_ops_us for _, d in per_unit]
    extra_se = ratio_standard_error([a + b for a, b in zip(off_main, short)], durs)
    gaps = (launch.share if launch else 0.0) + sum(off_main) / total
    se = math.hypot(launch.se if launch else 0.0, extra_se)
    return gaps, sum(short) / total, se, max(d.threads for _, d in per_unit)


def measure_gpu_launch(ev: RunEvidence) -> list[GpuLaunchRow]:
    rows = []
    for rank, s in sorted(ev.traces.items()):
        steps = [st for st in ev.units(rank) if st.gpu is not None and st.dur_us > 0]
        if not s.has_accelerator or not steps:
            continue
        delays = [st.gpu.launch_delay_median_us for st in steps if st.gpu.launch_delay_median_us is not None]
        judged = [st for st in steps if st.gpu.launch_delay_median_us is not None and st.kernels >= T.MIN_KERNELS_PER_STEP]
        ratios = [_delay_ratio(st) for st in judged]
        gaps = [_launch_gap_share(st) for st in judged]
        rows.append(
            GpuLaunchRow(
                rank=rank,
                steps=len(steps),
                median_step_us=median([st.dur_us for st in steps]),
                median_launches=median([st.gpu.launches for st in steps]),
                median_delay_us=median(delays) if delays else None,
                delay_ratio=median(ratios) if ratios else 0.0,
                se_delay_ratio=median_standard_error(ratios),
                median_gap_share=median(gaps) if gaps else 0.0,
                se_gap_share=median_standard_error(gaps),
                median_gaps_50us=median([st.gpu.device_gaps.get("50", 0) for st in steps]),
                median_busy_share=median([st.gpu.device_busy_share for st in steps]),
                flags=[_gpu_flag(st) for st in steps],
                units=steps,
                unit_name=ev.unit_name(rank),
            )
        )
    return rows


def judge_gpu_launch(rows: list[GpuLaunchRow], ev: RunEvidence) -> list[Finding]:
    bound = [
        r for r in rows
        if sum(r.flags) >= T.MIN_PATTERN_STEPS and sum(r.flags) >= T.PERSISTENT_SHARE * r.steps and r.median_delay_us is not None
    ]
    graded = {
        r.rank: round(graded_confidence(r.delay_ratio, 1.0, r.se_delay_ratio)
                      * graded_confidence(r.median_gap_share, T.LAUNCH_GAP_SHARE, r.se_gap_share), 3)
        for r in bound
    }
    bound = [r for r in bound if claimable(graded[r.rank])]
    if not bound:
        return []
    delay = median([r.median_delay_us for r in bound])
    share = median([r.median_gap_share for r in bound])
    ranges = [ev.step_range(r.rank, r.units[0], r.units[-1]) for r in bound]
    ranges = [x for x in ranges if x is not None]
    return [
        Finding(
            category="launch.kernel_launch_overhead",
            confidence=median([graded[r.rank] for r in bound]),
            ranks=[r.rank for r in bound],
            steps=(min(a for a, _ in ranges), max(b for _, b in ranges)) if ranges else None,
            impact=round(min(1.0, share), 3),
            summary=(
                f"the host cannot keep the device fed: kernels start a median {delay:.0f} us after their launch"
                f" (an empty queue), and the device idles {share:.0%} of the step in short gaps between them"
            ),
            evidence=[
                f"{ev.trace_file(r.rank)}: median launch-to-start delay {r.median_delay_us:.1f} us"
                f" (under {T.QUEUE_EMPTY_DELAY_US:.0f} us on {sum(r.flags)} of {r.steps} {r.unit_name});"
                f" {r.median_gaps_50us:.0f} device gaps over 50 us each; idle in short gaps {r.median_gap_share:.0%}"
                f" of the time; device busy {r.median_busy_share:.0%}; {r.median_launches:.0f} launches each"
                for r in bound
            ],
        )
    ]


def judge_launch(rows: list[LaunchRow], ev: RunEvidence) -> list[Finding]:
    """CPU traces: thousands of host ops per step whose dispatch costs at least CPU_DISPATCH_SHARE of the time."""
    bound = []
    for r in rows:
        seg = best_segment(r.flags)
        # op counts do not jitter like timings: a few steps suffice (the whole window when it is short)
        if seg and seg[1] - seg[0] >= min(r.steps, 3) and sum(r.flags[seg[0] : seg[1]]) >= T.PERSISTENT_SHARE * (seg[1] - seg[0]):
            ops = median([st.host_ops for st in r.units[seg[0] : seg[1]]])
            confidence = min(graded_confidence(ops, T.MIN_HOST_OPS_PER_STEP, r.se_ops),
                             graded_confidence(r.dispatch_share, T.CPU_DISPATCH_SHARE, r.dispatch_se))
            if claimable(confidence):
                bound.append((r, seg, confidence))
    if not bound:
        return []
    density = median([r.median_ops / (r.median_step_us / 1e3) for r, _, _ in bound])
    ranges = [ev.step_range(r.rank, r.units[seg[0]], r.units[seg[1] - 1]) for r, seg, _ in bound]
    ranges = [x for x in ranges if x is not None]
    evidence = [
        f"{ev.trace_file(r.rank)}: median {r.median_ops:.0f} cpu_ops/step, {r.median_leaf:.0f} leaf ops of which"
        f" {r.median_short:.0f} under {SHORT_OP_US:.0f} us fill {r.median_short_share:.0%} of the step;"
        f" dispatch {r.dispatch_share:.1%} of the time over {r.steps} {ev.unit_name(r.rank, plural=r.steps != 1)}"
        f" (standard error {r.dispatch_se:.1%}): {r.gaps_share:.1%} between ops at most {SHORT_GAP_US / 1e3:.0f} ms"
        f" apart (the time table's launch row, diageval trace stats) and {r.short_share:.1%} in short ops' self time,"
        f" on {r.threads} op thread{'s' if r.threads != 1 else ''}"
        for r, _, _ in bound
    ]
    ops = median([r.median_ops for r, _, _ in bound])
    # impact: the dispatch the trace measures (time between ops and in short ops), as a share of the time
    impact = min(1.0, median([r.dispatch_share for r, _, _ in bound]))
    return [
        Finding(
            category="launch.kernel_launch_overhead",
            confidence=median([c for _, _, c in bound]),
            ranks=[r.rank for r, _, _ in bound],
            steps=(min(a for a, _ in ranges), max(b for _, b in ranges)) if ranges else None,
            impact=round(impact, 3),
            summary=(f"{ops:.0f} host ops per step ({density:.0f} per ms of step): the step is made of many small ops,"
                     f" and dispatching them takes {impact:.0%} of the time"),
            evidence=evidence,
        )
    ]
