"""Is the input pipeline the bottleneck? Measures the share of run time spent waiting for the next batch.

The share is time-weighted (total wait over total step time), not a median of per-step shares: with
several loader workers a starved pipeline delivers batches in bursts, so one step waits long and the
next not at all, and a per-step median would see only the quick ones. The single step with the
longest wait is left out (a worker descheduled once, the profiler's first step), so that one stray
wait cannot carry a healthy run over the threshold.

Confidence is graded (``stats.graded_confidence``): the time-weighted share against the cut, with the spread
of the per-step shares as its uncertainty. A step "waits" from the cut's lower edge, and the wait must recur
on ``MIN_WAITING_STEPS`` steps (or windows of a step-less trace).

Where fewer profiled steps than that wait (a short profile of a loader whose workers deliver in bursts), the job's
step log can show whether the wait recurs: the profiled steps show what a wait costs a step (the quick steps' time,
the profiled steps' median time outside the wait, plus the wait), and a logged step outside the profile that is
longer than the quick time by at least the smallest profiled wait, softened as every cut is (``CUT_SOFTNESS``),
counts as one more waiting step (``logged_like``). Noise does not make such steps: a busy host's jitter moves a
step by a part of it, not by a whole wait. The log's first step (start-up: building the model, starting the
workers, the first batch) is not the loop and is not counted. The share and its error stay the profiled steps'.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from diageval.bundle.trace_summary import StepSummary
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import claimable, graded_confidence, lower_edge, median, median_standard_error
from diageval.diagnosis import Finding


class DataWaitRow(BaseModel):
    rank: int
    steps: int
    total_wait_us: float
    total_step_us: float
    share: float  # time-weighted, the longest wait left out
    se: float  # standard error of the per-step shares' median
    steps_waiting: int  # steps whose own wait reaches the cut's lower edge
    logged_like: int = 0  # logged steps outside the profile as long as a waiting step (recurrence, module doc)
    step_range: tuple[int, int] | None  # training steps from the first waiting step to the end
    unit_name: str


def measure_data_wait(ev: RunEvidence) -> list[DataWaitRow]:
    rows = []
    for rank in sorted(ev.traces):
        steps = [st for st in ev.units(rank) if st.dur_us > 0]
        if not steps:
            continue
        drop = math.ceil(0.1 * len(steps)) if len(steps) >= 5 else 0
        kept = sorted(steps, key=lambda st: st.data_wait_us)[: len(steps) - drop]
        wait = sum(st.data_wait_us for st in kept)
        total = sum(st.dur_us for st in kept)
        waiting = [st for st in steps if st.data_wait_us >= lower_edge(T.DATA_WAIT_SHARE) * st.dur_us]
        rows.append(
            DataWaitRow(
                rank=rank,
                steps=len(steps),
                total_wait_us=wait,
                total_step_us=total,
                share=wait / total if total > 0 else 0.0,
                se=median_standard_error([st.data_wait_us / st.dur_us for st in steps]),
                steps_waiting=len(waiting),
                logged_like=logged_like(ev, rank, steps, waiting),
                step_range=ev.step_range(rank, waiting[0], steps[-1]) if waiting else None,
                unit_name=ev.unit_name(rank),
            )
        )
    return rows


def logged_like(ev: RunEvidence, rank: int, steps: list[StepSummary], waiting: list[StepSummary]) -> int:
    """Logged steps outside the profiled ``steps`` (the log's first step left out) at least as long as the quick time
    plus (1 - CUT_SOFTNESS) x the smallest profiled wait; 0 where the profiled waits already recur, none wait, or the
    steps carry no training step numbers (equal-time windows)."""
    if not waiting or len(waiting) >= T.MIN_WAITING_STEPS or ev.windowed(rank):
        return 0
    profiled = {ev.training_step(rank, st.number) for st in steps}
    quick = median([st.dur_us - st.data_wait_us for st in steps])
    bar = quick + lower_edge(min(st.data_wait_us for st in waiting))
    return sum(1 for row in ev.step_log.get(rank, [])[1:]
               if row.step not in profiled and (row.t_end - row.t_start) * 1e6 >= bar)


def judge_data_wait(rows: list[DataWaitRow], ev: RunEvidence) -> list[Finding]:
    """Starved ranks: waiting for data takes about DATA_WAIT_SHARE of their run time or more, on several steps."""
    graded = {r.rank: graded_confidence(r.share, T.DATA_WAIT_SHARE, r.se) for r in rows}
    starved = [r for r in rows if r.steps_waiting + r.logged_like >= T.MIN_WAITING_STEPS and claimable(graded[r.rank])]
    if not starved:
        return []
    share = median([r.share for r in starved])
    confidence = median([graded[r.rank] for r in starved])
    ranges = [r.step_range for r in starved if r.step_range is not None]
    ranks = [r.rank for r in starved]
    evidence = [
        f"{ev.trace_file(r.rank)}: enumerate(DataLoader)...__next__ takes {r.total_wait_us / 1e3:.1f} ms of"
        f" {r.total_step_us / 1e3:.1f} ms of its {r.unit_name} ({r.share:.0%}, standard error {r.se:.0%});"
        f" {r.steps_waiting}/{r.steps} wait over {lower_edge(T.DATA_WAIT_SHARE):.0%} of their time"
        f" (cut {T.DATA_WAIT_SHARE:.0%})"
        + (f"; {r.logged_like} logged steps outside them are as long as a waiting step (steps.jsonl)"
           if r.steps_waiting < T.MIN_WAITING_STEPS else "")
        for r in starved
    ]
    return [
        Finding(
            category="input.dataloader_starvation",
            confidence=confidence,
            ranks=ranks,
            steps=(min(a for a, _ in ranges), max(b for _, b in ranges)) if ranges else None,
            impact=round(min(1.0, share), 3),
            summary=f"rank(s) {ranks} spend {share:.0%} of their steps waiting for the next batch (DataLoader __next__)",
            evidence=evidence,
        )
    ]
