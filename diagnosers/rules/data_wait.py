"""Is the input pipeline the bottleneck? Measures the DataLoader wait's share of each step, per rank."""

from __future__ import annotations

from pydantic import BaseModel

from diageval.diagnosis import Finding
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.evidence import RunEvidence
from diageval.diagnosers.rules.stats import best_segment, confidence_from_margin, median, min_block


class DataWaitRow(BaseModel):
    rank: int
    steps: int
    median_wait_us: float
    median_step_us: float
    median_share: float
    steps_over: int
    first_step: int | None
    stop_step: int | None
    share_in_range: float


def measure_data_wait(ev: RunEvidence) -> list[DataWaitRow]:
    rows = []
    for rank, s in sorted(ev.traces.items()):
        if not s.steps:
            continue
        shares = [st.data_wait_us / st.dur_us if st.dur_us > 0 else 0.0 for st in s.steps]
        flags = [x >= T.DATA_WAIT_SHARE for x in shares]
        seg = best_segment(flags)
        first = stop = None
        in_range = 0.0
        if seg and seg[1] - seg[0] >= min_block(len(shares)) and sum(flags[seg[0] : seg[1]]) >= T.PERSISTENT_SHARE * (seg[1] - seg[0]):
            first = ev.training_step(rank, s.steps[seg[0]].number)
            stop = ev.training_step(rank, s.steps[seg[1] - 1].number) + 1
            in_range = median(shares[seg[0] : seg[1]])
        rows.append(
            DataWaitRow(
                rank=rank,
                steps=len(s.steps),
                median_wait_us=median([st.data_wait_us for st in s.steps]),
                median_step_us=median([st.dur_us for st in s.steps]),
                median_share=median(shares),
                steps_over=sum(flags),
                first_step=first,
                stop_step=stop,
                share_in_range=in_range,
            )
        )
    return rows


def judge_data_wait(rows: list[DataWaitRow], ev: RunEvidence) -> list[Finding]:
    """Starved ranks: the wait for data fills >= DATA_WAIT_SHARE of the step on a persistent block of steps."""
    starved = [
        r for r in rows if r.first_step is not None and r.share_in_range >= T.DATA_WAIT_SHARE
    ]
    if not starved:
        return []
    share = median([r.share_in_range for r in starved])
    consistency = median([r.steps_over / r.steps for r in starved])
    first = min(r.first_step for r in starved if r.first_step is not None)
    stop = max(r.stop_step for r in starved if r.stop_step is not None)
    ranks = [r.rank for r in starved]
    evidence = [
        f"{ev.trace_file(r.rank)}: enumerate(DataLoader)...__next__ median {r.median_wait_us / 1e3:.2f} ms"
        f" of a {r.median_step_us / 1e3:.2f} ms step ({r.median_share:.0%}); over {T.DATA_WAIT_SHARE:.0%}"
        f" on {r.steps_over}/{r.steps} ProfilerSteps"
        for r in starved
    ]
    return [
        Finding(
            category="input.dataloader_starvation",
            confidence=confidence_from_margin(share, T.DATA_WAIT_SHARE, consistency),
            ranks=ranks,
            steps=(first, stop),
            impact=round(min(1.0, share), 3),
            summary=f"rank(s) {ranks} wait {share:.0%} of each step for the next batch (DataLoader __next__)",
            evidence=evidence,
        )
    ]
