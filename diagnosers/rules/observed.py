"""Symptoms measured from the evidence: what a run looks like, not why (taxonomy ``symptom.*`` ids).

The rules diagnoser reports these as ``kind: symptom`` observations next to its causes; the naive
``symptoms`` baseline reports the very same measurements as if they were causes.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.spikes import measure_spikes
from diageval.diagnosers.rules.stats import median
from diageval.diagnosis import Finding


class RankShares(BaseModel):
    rank: int
    steps: int
    median_step_us: float
    collective_share: float  # exposed communication on GPU traces (overlapped costs nothing), else time inside
    busy_share: float  # compute on the device (GPU traces) or ops on the training thread (CPU traces)
    waiting_share: float  # data wait + collectives + unexplained: the step minus its own work
    on_device: bool


def measure_shares(ev: RunEvidence) -> list[RankShares]:
    rows = []
    for rank, s in sorted(ev.traces.items()):
        steps = [st for st in ev.units(rank) if st.dur_us > 0]
        if not steps:
            continue
        if s.has_device:
            busy = median([st.device_busy_us / st.dur_us for st in steps])
        else:
            busy = median([max(0.0, st.host_busy_us - st.data_wait_us) / st.dur_us for st in steps])
        gpu_steps = s.has_device and all(st.gpu is not None for st in steps)
        coll = [(st.gpu.comm_exposed_us if gpu_steps else st.collective_us) / st.dur_us for st in steps]
        rows.append(
            RankShares(
                rank=rank,
                steps=len(steps),
                median_step_us=median([st.dur_us for st in steps]),
                collective_share=median(coll),
                busy_share=busy,
                waiting_share=median(
                    [min(1.0, (st.data_wait_us + c * st.dur_us + st.unexplained_us) / st.dur_us) for st, c in zip(steps, coll)]
                ),
                on_device=s.has_device,
            )
        )
    return rows


def observe_symptoms(ev: RunEvidence, kind: str = "symptom") -> list[Finding]:
    """Findings for every symptom the evidence shows, with the numbers behind each."""
    out: list[Finding] = []
    shares = measure_shares(ev)
    # Each per-rank symptom: (category, confidence, the ranks showing it, the rank the summary names,
    # impact from that rank, the summary, one evidence line a rank).
    on_ranks: list[tuple[str, float, list[RankShares], Callable, Callable, Callable, Callable]] = [
        (
            "symptom.long_collective", 0.6,
            [r for r in shares if r.collective_share >= T.LONG_COLLECTIVE_SHARE],
            lambda hit: max(hit, key=lambda r: r.collective_share),
            lambda top: top.collective_share,
            lambda top: f"collectives take {top.collective_share:.0%} of the step on rank {top.rank}",
            lambda r: f"{ev.trace_file(r.rank)}: {'exposed communication' if r.on_device else 'inside collectives'}"
            f" {r.collective_share:.0%} of the median step",
        ),
        (
            "symptom.low_utilization", 0.6,
            [r for r in shares if r.busy_share < T.LOW_UTILIZATION_BUSY],
            lambda hit: min(hit, key=lambda r: r.busy_share),
            lambda low: 1.0 - low.busy_share,
            lambda low: f"{'the device is' if low.on_device else 'the training thread runs ops'} busy only"
            f" {low.busy_share:.0%} of the step on rank {low.rank}",
            lambda r: f"{ev.trace_file(r.rank)}: busy {r.busy_share:.0%} of the median step",
        ),
        (
            "symptom.slow_step", 0.55,
            [r for r in shares if r.waiting_share >= T.SLOW_STEP_WAITING_SHARE],
            lambda hit: max(hit, key=lambda r: r.waiting_share),
            lambda worst: worst.waiting_share,
            lambda worst: f"{worst.waiting_share:.0%} of the median step is spent waiting, not working, on rank"
            f" {worst.rank}",
            lambda r: f"{ev.trace_file(r.rank)}: median step {r.median_step_us / 1e3:.2f} ms,"
            f" {r.waiting_share:.0%} of it waiting",
        ),
    ]
    for category, confidence, hit, pick, impact, summary, evidence in on_ranks:
        if hit:
            named = pick(hit)
            out.append(
                Finding(
                    category=category,
                    kind=kind,
                    confidence=confidence,
                    ranks=[r.rank for r in hit],
                    impact=round(min(1.0, impact(named)), 3),
                    summary=summary(named),
                    evidence=[evidence(r) for r in hit],
                )
            )
    spikes = measure_spikes(ev)
    if spikes and spikes.spikes:
        impact = sum(spikes.excess_us.values()) / spikes.total_us
        out.append(
            Finding(
                category="symptom.step_time_spikes",
                kind=kind,
                confidence=0.6,
                steps=(spikes.spikes[0], spikes.spikes[-1] + 1),
                impact=round(min(1.0, impact), 3),
                summary=f"{len(spikes.spikes)} steps far above the median {spikes.median_us / 1e3:.1f} ms",
                evidence=[f"{spikes.source}: steps {spikes.spikes[:10]} over {T.SPIKE_RATIO}x the median step time"],
            )
        )
    return out
