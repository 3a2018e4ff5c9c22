"""Is the input pipeline the bottleneck? Measures the share of run time spent waiting for the next batch.

The share is time-weighted (total wait over total step time), not a median of per-step shares: with
several loader workers a starved pipeline delivers batches in bursts, so one step waits long and the
next not at all, and a per-step median would see only the quick ones. The single step with the
longest wait is left out (a worker descheduled once, the profiler's first step), so that one stray
wait cannot carry a healthy run over the threshold.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import confidence_from_margin, median
from diageval.diagnosis import Finding


class DataWaitRow(BaseModel):
    rank: int
    steps: int
    total_wait_us: float
    total_step_us: float
    share: float  # time-weighted, the longest wait left out
    steps_waiting: int  # steps whose own wait is over the threshold share
    first_step: int | None  # first training step that waits over the threshold share
    stop_step: int | None


def measure_data_wait(ev: RunEvidence) -> list[DataWaitRow]:
    rows = []
    for rank, s in sorted(ev.traces.items()):
        steps = [st for st in s.steps if st.dur_us > 0]
        if not steps:
            continue
        drop = math.ceil(0.1 * len(steps)) if len(steps) >= 5 else 0
        kept = sorted(steps, key=lambda st: st.data_wait_us)[: len(steps) - drop]
        wait = sum(st.data_wait_us for st in kept)
        total = sum(st.dur_us for st in kept)
        waiting = [st for st in steps if st.data_wait_us >= T.DATA_WAIT_SHARE * st.dur_us]
        rows.append(
            DataWaitRow(
                rank=rank,
                steps=len(steps),
                total_wait_us=wait,
                total_step_us=total,
                share=wait / total if total > 0 else 0.0,
                steps_waiting=len(waiting),
                first_step=ev.training_step(rank, waiting[0].number) if waiting else None,
                stop_step=ev.training_step(rank, steps[-1].number) + 1 if waiting else None,
            )
        )
    return rows


def judge_data_wait(rows: list[DataWaitRow], ev: RunEvidence) -> list[Finding]:
    """Starved ranks: waiting for data takes >= DATA_WAIT_SHARE of their run time, on several steps."""
    starved = [r for r in rows if r.share >= T.DATA_WAIT_SHARE and r.steps_waiting >= min(r.steps, T.MIN_WAITING_STEPS)]
    if not starved:
        return []
    share = median([r.share for r in starved])
    consistency = min(1.0, median([r.steps_waiting / r.steps for r in starved]) * 2)  # bursts: every other step
    first = min(r.first_step for r in starved if r.first_step is not None)
    stop = max(r.stop_step for r in starved if r.stop_step is not None)
    ranks = [r.rank for r in starved]
    evidence = [
        f"{ev.trace_file(r.rank)}: enumerate(DataLoader)...__next__ takes {r.total_wait_us / 1e3:.1f} ms of"
        f" {r.total_step_us / 1e3:.1f} ms of ProfilerSteps ({r.share:.0%}); {r.steps_waiting}/{r.steps} steps wait"
        f" over {T.DATA_WAIT_SHARE:.0%} of their time"
        for r in starved
    ]
    return [
        Finding(
            category="input.dataloader_starvation",
            confidence=confidence_from_margin(share, T.DATA_WAIT_SHARE, consistency),
            ranks=ranks,
            steps=(first, stop),
            impact=round(min(1.0, share), 3),
            summary=f"rank(s) {ranks} spend {share:.0%} of their steps waiting for the next batch (DataLoader __next__)",
            evidence=evidence,
        )
    ]
