"""Is the step dispatch-bound? Counts top-level ops per step and how much of the step tiny ones fill.

On the host (CPU traces): many top-level ops under ``SHORT_OP_US`` that together fill most of the step
mean per-op dispatch cost dominates. On a GPU: many launches per step while the device is idle most of
the step and kernels are, on average, tiny.
"""

from __future__ import annotations

from pydantic import BaseModel

from diageval.diagnosis import Finding
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.evidence import RunEvidence
from diageval.diagnosers.rules.stats import best_segment, confidence_from_margin, median, min_block
from diageval.diagnosers.trace_summary import SHORT_OP_US


class LaunchRow(BaseModel):
    rank: int
    steps: int
    median_ops: float
    median_top_level: float
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
            st.launches >= T.MIN_OPS_PER_STEP
            and st.device_busy_us / st.dur_us < T.DEVICE_BUSY_MAX
            and mean_kernel < T.SHORT_KERNEL_US
        )
    return st.short_top_level_ops >= T.MIN_OPS_PER_STEP and st.short_top_level_us / st.dur_us >= T.SHORT_OP_SHARE


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
                median_top_level=median([st.top_level_ops for st in s.steps]),
                median_short=median([st.short_top_level_ops for st in s.steps]),
                median_short_share=median([st.short_top_level_us / st.dur_us for st in s.steps if st.dur_us > 0]),
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
        if seg and seg[1] - seg[0] >= min_block(r.steps) and sum(r.flags[seg[0] : seg[1]]) >= T.PERSISTENT_SHARE * (seg[1] - seg[0]):
            bound.append((r, seg))
    if not bound:
        return []
    share = median([r.median_short_share for r, _ in bound])
    consistency = median([sum(r.flags) / r.steps for r, _ in bound])
    steps_of = {r.rank: ev.traces[r.rank].steps for r, _ in bound}
    start = min(ev.training_step(r.rank, steps_of[r.rank][seg[0]].number) for r, seg in bound)
    stop = max(ev.training_step(r.rank, steps_of[r.rank][seg[1] - 1].number) + 1 for r, seg in bound)
    evidence = []
    for r, _ in bound:
        line = (
            f"{ev.trace_file(r.rank)}: median {r.median_ops:.0f} cpu_ops/step, {r.median_top_level:.0f} top-level of which"
            f" {r.median_short:.0f} under {SHORT_OP_US:.0f} us fill {r.median_short_share:.0%} of the step"
        )
        if r.median_device_busy is not None:
            line += (
                f"; {r.median_launches:.0f} kernel launches/step, device busy {r.median_device_busy:.0%},"
                f" mean kernel {r.mean_kernel_us:.1f} us"
            )
        evidence.append(line)
    return [
        Finding(
            category="launch.kernel_launch_overhead",
            confidence=confidence_from_margin(max(share, T.SHORT_OP_SHARE), T.SHORT_OP_SHARE * 0.8, consistency),
            ranks=[r.rank for r, _ in bound],
            steps=(start, stop),
            impact=round(min(1.0, share), 3),
            summary=(
                f"{median([r.median_short for r, _ in bound]):.0f} tiny ops per step fill {share:.0%} of it:"
                " the host spends the step dispatching work"
            ),
            evidence=evidence,
        )
    ]
