"""Is the step dispatch-bound? Counts top-level ops per step and how much of the step tiny ones fill.

On a GPU: many launches per step while the device is idle most of the step and kernels are, on
average, tiny. On CPU traces: thousands of host ops per step, densely packed (see ``thresholds``).
The row also keeps the op-size measures (ops by self time under ``SHORT_OP_US``) as evidence.
"""

from __future__ import annotations

from pydantic import BaseModel

from diageval.bundle.trace_summary import SHORT_OP_US
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import best_segment, confidence_from_margin, median
from diageval.diagnosis import Finding


class LaunchRow(BaseModel):
    rank: int
    steps: int
    median_ops: float
    median_step_us: float
    median_leaf: float
    median_short: float
    median_short_share: float
    median_launches: float
    median_device_busy: float | None
    mean_kernel_us: float | None
    flags: list[bool]


def _flag(st, has_device: bool) -> bool:
    if st.dur_us <= 0:
        return False
    if has_device and st.kernels:
        mean_kernel = st.device_busy_us / st.kernels
        return (
            st.launches >= T.MIN_LAUNCHES_PER_STEP
            and st.device_busy_us / st.dur_us < T.DEVICE_BUSY_MAX
            and mean_kernel < T.SHORT_KERNEL_US
        )
    return st.host_ops >= T.MIN_HOST_OPS_PER_STEP


def measure_launch(ev: RunEvidence) -> list[LaunchRow]:
    rows = []
    for rank, s in sorted(ev.traces.items()):
        if not s.steps:
            continue
        dev = s.has_device
        rows.append(
            LaunchRow(
                rank=rank,
                steps=len(s.steps),
                median_ops=median([st.host_ops for st in s.steps]),
                median_step_us=median([st.dur_us for st in s.steps]),
                median_leaf=median([st.leaf_ops for st in s.steps]),
                median_short=median([st.short_ops for st in s.steps]),
                median_short_share=median([st.short_ops_us / st.dur_us for st in s.steps if st.dur_us > 0]),
                median_launches=median([st.launches for st in s.steps]),
                median_device_busy=median([st.device_busy_us / st.dur_us for st in s.steps if st.dur_us > 0]) if dev else None,
                mean_kernel_us=(
                    sum(st.device_busy_us for st in s.steps) / max(1, sum(st.kernels for st in s.steps)) if dev else None
                ),
                flags=[_flag(st, dev) for st in s.steps],
            )
        )
    return rows


def judge_launch(rows: list[LaunchRow], ev: RunEvidence) -> list[Finding]:
    bound = []
    for r in rows:
        seg = best_segment(r.flags)
        # op counts do not jitter like timings: a few steps suffice (the whole window when it is short)
        if seg and seg[1] - seg[0] >= min(r.steps, 3) and sum(r.flags[seg[0] : seg[1]]) >= T.PERSISTENT_SHARE * (seg[1] - seg[0]):
            bound.append((r, seg))
    if not bound:
        return []
    density = median([r.median_ops / (r.median_step_us / 1e3) for r, _ in bound])
    share = median([r.median_short_share for r, _ in bound])
    consistency = median([sum(r.flags) / r.steps for r, _ in bound])
    steps_of = {r.rank: ev.traces[r.rank].steps for r, _ in bound}
    start = min(ev.training_step(r.rank, steps_of[r.rank][seg[0]].number) for r, seg in bound)
    stop = max(ev.training_step(r.rank, steps_of[r.rank][seg[1] - 1].number) + 1 for r, seg in bound)
    evidence = []
    for r, _ in bound:
        line = (
            f"{ev.trace_file(r.rank)}: median {r.median_ops:.0f} cpu_ops/step, {r.median_leaf:.0f} leaf ops of which"
            f" {r.median_short:.0f} under {SHORT_OP_US:.0f} us fill {r.median_short_share:.0%} of the step"
        )
        if r.median_device_busy is not None:
            line += (
                f"; {r.median_launches:.0f} kernel launches/step, device busy {r.median_device_busy:.0%},"
                f" mean kernel {r.mean_kernel_us:.1f} us"
            )
        evidence.append(line)
    ops = median([r.median_ops for r, _ in bound])
    on_device = any(r.median_device_busy is not None for r, _ in bound)
    # impact: the dispatch cost of the ops at ~5 us each, as a share of the step (a floor, not a fit)
    impact = min(1.0, ops * 5.0 / median([r.median_step_us for r, _ in bound]))
    return [
        Finding(
            category="launch.kernel_launch_overhead",
            confidence=confidence_from_margin(
                ops, T.MIN_HOST_OPS_PER_STEP if not on_device else T.MIN_LAUNCHES_PER_STEP, consistency
            ),
            ranks=[r.rank for r, _ in bound],
            steps=(start, stop),
            impact=round(max(impact, 1.0 - median([r.median_device_busy for r, _ in bound])) if on_device else round(impact, 3), 3),
            summary=(
                f"{ops:.0f} host ops per step ({density:.0f} per ms of step): the step is made of many small ops"
                + (", the device idles between tiny kernels" if on_device else "")
            ),
            evidence=evidence,
        )
    ]
