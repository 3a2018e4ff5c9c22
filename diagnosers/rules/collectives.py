"""Who waits for whom inside collectives: the cross-rank table behind the straggler and stall rules.

A long collective on one rank is a symptom. The cause shows in how ranks *arrive*:

* one rank arrives late on most steps, its peers' collectives are long and start early, and the late
  rank's own work between collectives is longer than theirs: that rank is a straggler;
* every rank arrives at about the same moment and they all still sit inside the collective together
  for a large share of the step: the collective itself is slow (a stall).

Collective calls are lined up across ranks by their order within the same profiler step (every rank
issues the same collectives in the same order). A step where the ranks' call counts differ is left out.
A step's skew is its largest per-call arrival skew, not the sum: DDP issues several bucket all_reduces
back to back, and a rank late for the first is late for the next ones by the same wait.
Timestamps are epoch microseconds, each rank's on its own host's clock. Ranks on different hosts can
disagree by milliseconds to seconds, so before comparing arrivals each rank's clock is aligned to the
first rank's by the collectives' *ends*: a collective completes on every rank at the same true moment
(each leaves when the last one's data has arrived, within a transfer's latency), whoever arrived first,
so the median over the calls of a rank's end minus the first rank's end is its clock offset
(:func:`clock_offsets`; about zero for ranks on one host).
"""

from __future__ import annotations

from pydantic import BaseModel

from diageval.bundle.trace_summary import StepSummary, union_length
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import (
    claimable,
    graded_confidence,
    lower_edge,
    median,
    median_standard_error,
    persistent_rank,
    persistent_segment,
)
from diageval.diagnosis import Finding


class StepCollectives(BaseModel):
    """One profiler step across ranks."""

    number: int
    step_us: float
    calls: int
    skew_us: float  # largest (latest arrival - earliest arrival) over the step's calls
    late_rank: int  # the latest rank at that call
    shared_us: float  # time during which every rank was inside the same call (union over calls)
    payload_bytes: int | None  # bytes the step's calls reduce (one rank's tensors), when recorded
    inside_us: dict[int, float]  # rank -> time inside collectives
    work_us: dict[int, float]  # rank -> work before reaching the most skewed call (``_pre_collective``)
    data_us: dict[int, float]


def _pre_collective(st: StepSummary, arrival_us: float) -> float:
    """How long a rank worked in a step before it reached the collective: from the start of its step to
    its arrival, less its data wait. Time spent before its step began (a save at the end of the previous
    step) does not count: a rank late for that reason is not computing slower."""
    return max(0.0, arrival_us - st.start_us - st.data_wait_us)


def measure_collectives(ev: RunEvidence) -> list[StepCollectives]:
    ranks = sorted(ev.traces)
    if len(ranks) < 2:
        return []
    by_rank = {r: {st.number: st for st in ev.traces[r].steps} for r in ranks}
    common = sorted(set.intersection(*(set(m) for m in by_rank.values())))
    offset = clock_offsets(by_rank, ranks, common)
    table = []
    for n in common:
        steps = {r: by_rank[r][n] for r in ranks}
        counts = {len(st.collectives) for st in steps.values()}
        if len(counts) != 1 or counts == {0}:
            continue
        skew = 0.0
        late_rank = ranks[0]
        arrivals = {r: steps[r].collectives[0].start_us - offset[r] for r in ranks}
        together: list[tuple[float, float]] = []
        for k in range(counts.pop()):
            calls = {r: steps[r].collectives[k] for r in ranks}
            starts = {r: c.start_us - offset[r] for r, c in calls.items()}
            ends = {r: c.start_us - offset[r] + c.dur_us for r, c in calls.items()}
            first, last = min(starts.values()), max(starts.values())
            if last - first > skew:
                skew, late_rank, arrivals = last - first, max(starts, key=starts.get), starts
            if min(ends.values()) > last:
                together.append((last, min(ends.values())))
        shared = union_length(together, float("-inf"), float("inf"))
        sizes = [c.payload_bytes for c in steps[ranks[0]].collectives]
        payload = sum(sizes) if sizes and all(sizes) else None
        table.append(
            StepCollectives(
                number=n,
                step_us=median([st.dur_us for st in steps.values()]),
                calls=len(steps[ranks[0]].collectives),
                skew_us=skew,
                late_rank=late_rank,
                shared_us=shared,
                payload_bytes=payload,
                inside_us={r: st.collective_us for r, st in steps.items()},
                work_us={r: _pre_collective(st, arrivals[r] + offset[r]) for r, st in steps.items()},
                data_us={r: st.data_wait_us for r, st in steps.items()},
            )
        )
    return table


def clock_offsets(by_rank: dict[int, dict[int, StepSummary]], ranks: list[int], common: list[int]) -> dict[int, float]:
    """Rank -> how far its clock runs ahead of ``ranks[0]``'s (µs): the median, over the collectives of the
    steps both hold with the same call count, of its end minus the first rank's end (0 with none)."""
    ref = ranks[0]
    out = {ref: 0.0}
    for r in ranks[1:]:
        diffs = [
            (mine.start_us + mine.dur_us) - (theirs.start_us + theirs.dur_us)
            for n in common
            if len(by_rank[r][n].collectives) == len(by_rank[ref][n].collectives)
            for mine, theirs in zip(by_rank[r][n].collectives, by_rank[ref][n].collectives)
        ]
        out[r] = median(diffs) if diffs else 0.0
    return out


def _step_range(ev: RunEvidence, table: list[StepCollectives], seg: tuple[int, int]) -> tuple[int, int]:
    rank = min(ev.traces)
    return ev.training_step(rank, table[seg[0]].number), ev.training_step(rank, table[seg[1] - 1].number) + 1


def judge_straggler(table: list[StepCollectives], ev: RunEvidence) -> list[Finding]:
    """One rank persistently late, and its own work (not its data wait) explains the lateness."""
    found = persistent_rank(
        table,
        lambda row: row.late_rank,
        lambda row, rank: row.late_rank == rank
        and row.skew_us >= max(lower_edge(T.SKEW_SHARE) * row.step_us, T.LATENCY_ALLOWANCE_US),
        lambda row: row.skew_us / row.step_us,
        T.SKEW_SHARE,
    )
    if found is None:
        return []
    rank, seg, flags, skew_share, confidence = found.rank, found.seg, found.flags, found.share, found.confidence
    rows = table[seg[0] : seg[1]]

    def extra(row: StepCollectives, of: dict[int, float]) -> float:
        """The late rank's value minus its peers' median, in one step."""
        return of[rank] - median([v for r, v in of.items() if r != rank])

    # per step, how much of the lateness the rank's own work (vs its data wait) explains; the median of
    # per-step ratios is robust to the odd step where a descheduled data worker inflates one side
    work_ratio = median([extra(row, row.work_us) / row.skew_us for row in rows if row.skew_us > 0])
    data_ratio = median([extra(row, row.data_us) / row.skew_us for row in rows if row.skew_us > 0])
    extra_work = median([extra(row, row.work_us) for row in rows])
    extra_data = median([extra(row, row.data_us) for row in rows])
    skew = median([row.skew_us for row in rows])
    if work_ratio < T.COMPUTE_EXPLAINS_SKEW or data_ratio > work_ratio:
        return []
    peers = [r for r in ev.traces if r != rank]
    peer_inside = median([median([row.inside_us[r] for r in peers]) for row in rows])
    own_inside = median([row.inside_us[rank] for row in rows])
    start, stop = _step_range(ev, table, seg)
    return [
        Finding(
            category="compute.straggler_rank",
            confidence=confidence,
            ranks=[rank],
            steps=(start, stop),
            impact=round(min(1.0, skew_share), 3),
            summary=(
                f"rank {rank} reaches the collectives {skew / 1e3:.2f} ms late on {sum(flags[seg[0]:seg[1]])} of"
                f" {len(rows)} steps; it computes {extra_work / 1e3:.2f} ms longer per step than its peers"
            ),
            evidence=[
                f"{ev.trace_file(rank)}: collectives ({', '.join(sorted(ev.traces[rank].collective_names))}) start"
                f" median {skew / 1e3:.2f} ms after the earliest rank; inside them median {own_inside / 1e3:.2f} ms/step",
                f"{', '.join(ev.trace_file(r) for r in peers)}: inside collectives median {peer_inside / 1e3:.2f} ms/step"
                f" (waiting for rank {rank})",
                f"rank{rank}: from the start of its step to the collective it works {extra_work / 1e3:+.2f} ms longer"
                f" than its peers (data wait excluded; its data wait differs by {extra_data / 1e3:+.2f} ms)",
            ],
        )
    ]


def bus_bandwidth(row: StepCollectives, world_size: int) -> float | None:
    """Bytes/s the step's collectives moved while every rank was inside them (nccl-tests' bus bandwidth:
    payload x 2(n-1)/n over the time, the traffic each rank's link carries in a ring all_reduce)."""
    if not row.payload_bytes or row.shared_us <= 0 or world_size < 2:
        return None
    return row.payload_bytes * 2 * (world_size - 1) / world_size / (row.shared_us / 1e6)


def _slower_than_link(row: StepCollectives, world_size: int) -> bool:
    """Time all ranks spend inside together, beyond what the payload needs at MIN_BUS_BYTES_PER_S, is
    longer than scheduling latency on a busy host and a real share of the step. (Small all_reduces are
    latency-bound: their "bandwidth" says nothing about the link.)"""
    if not row.payload_bytes:
        return False
    needed_us = row.payload_bytes * 2 * (world_size - 1) / world_size / T.MIN_BUS_BYTES_PER_S * 1e6
    beyond = row.shared_us - needed_us
    return beyond >= max(lower_edge(T.STALL_MIN_SHARE) * row.step_us, T.LATENCY_ALLOWANCE_US)


def judge_stall(table: list[StepCollectives], ev: RunEvidence) -> list[Finding]:
    """Every rank inside the collective together, and the collective itself slow.

    "Slow" is judged by bus bandwidth when the trace records the payload (gloo annotations with
    record_shapes): slower than ``MIN_BUS_BYTES_PER_S`` by more than a latency allowance and by a real
    share of the step (``_slower_than_link``). Arrival
    skew does not matter then: a stalled collective is slow however the ranks arrive. Without payload
    sizes (NCCL kernels), by time: all ranks inside together for a large share of the step while late
    arrivals explain less than half of it.
    """
    if len(table) < 3:
        return []
    n = len(ev.traces)
    shares = [row.shared_us / row.step_us for row in table]
    bws = [bus_bandwidth(row, n) for row in table]
    by_bandwidth = sum(b is not None for b in bws) >= len(table) / 2
    if by_bandwidth:
        flags = [_slower_than_link(row, n) for row in table]
    else:
        flags = [
            s >= lower_edge(T.SHARED_COLLECTIVE_SHARE) and row.skew_us <= T.SKEW_OVER_SHARED_MAX * row.shared_us
            for s, row in zip(shares, table)
        ]
    seg = persistent_segment(flags)
    if seg is None:
        return []
    rows = table[seg[0] : seg[1]]
    share = median(shares[seg[0] : seg[1]])
    skew = median([row.skew_us for row in rows])
    shared = median([row.shared_us for row in rows])
    start, stop = _step_range(ev, table, seg)
    names = sorted({n for s in ev.traces.values() for n in s.collective_names})
    evidence = [
        f"{ev.trace_file(r)}: {', '.join(names)} median {median([row.inside_us[r] for row in rows]) / 1e3:.2f} ms/step"
        for r in sorted(ev.traces)
    ]
    evidence.append(f"arrival skew median {skew / 1e3:.2f} ms vs time all ranks are inside together {shared / 1e3:.2f} ms per step")
    if by_bandwidth:
        bw = median([b for b in bws[seg[0] : seg[1]] if b is not None])
        payload = median([row.payload_bytes for row in rows if row.payload_bytes])
        evidence.append(
            f"payload {payload / 1e6:.2f} MB per step (Input Dims) moved at a bus bandwidth of {bw / 1e6:.1f} MB/s"
            f" while every rank was inside (below {T.MIN_BUS_BYTES_PER_S / 1e6:.0f} MB/s: slower than a 1 Gbit/s link)"
        )
        ratios = [T.MIN_BUS_BYTES_PER_S / b for b in bws[seg[0] : seg[1]] if b]
        confidence = graded_confidence(T.MIN_BUS_BYTES_PER_S / bw, 1.0, median_standard_error(ratios))
        summary = (
            f"all {n} ranks sit inside the collectives together {shared / 1e3:.2f} ms per step ({share:.0%} of it),"
            f" moving data at only {bw / 1e6:.1f} MB/s"
        )
    else:
        if skew > T.SKEW_OVER_SHARED_MAX * shared:
            return []
        confidence = graded_confidence(share, T.SHARED_COLLECTIVE_SHARE, median_standard_error(shares[seg[0] : seg[1]]))
        summary = (
            f"all {n} ranks sit inside the collectives together {shared / 1e3:.2f} ms per step"
            f" ({share:.0%} of it) although they arrive within {skew / 1e3:.2f} ms of each other"
        )
    if not claimable(confidence):
        return []
    return [
        Finding(
            category="comm.collective_stall",
            confidence=confidence,
            ranks=sorted(ev.traces),
            steps=(start, stop),
            impact=round(min(1.0, share), 3),
            summary=summary,
            evidence=evidence,
        )
    ]
