"""Does one rank get more work than its peers? Compares what each rank computes, not how fast.

In a balanced data-parallel job every rank runs the same operators on the same shapes each step, so the
arithmetic each rank does per step is the same. This analyser estimates that arithmetic from the
operators' recorded input shapes (``record_shapes``' ``Input Dims``) for the ops where the work lies:
matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``: m*k*n multiply-adds), attention
(``scaled_dot_product``'s kernels: batch*heads*L_q*L_k*d) and convolutions (output elements x input
channels per group x kernel size, stride ignored). Nested ops are not double counted: ``aten::linear``
and ``aten::matmul`` are not in the list, only the products they call.

A rank is handed more work when, on most steps (``persistent_segment``), it does the most arithmetic,
at least ``MIN_CAUSE_SHARE`` more than its peers' median (less could not cost a tenth of a step even if
the step were all compute), and its compute ops take at least ``SKEW_SHARE`` of the step longer than its
peers' (its peers wait that long for it: the same bar a straggler must clear).

A straggler computes the same shapes slower: its arithmetic equals its peers', so it never clears the
first condition. When both analysers name the same rank, :func:`explains_straggler` says whether the
extra arithmetic, done at the peers' own speed, accounts for at least ``COMPUTE_EXPLAINS_SKEW`` of the
extra compute time; then the straggler claim is a misreading of the imbalance and is dropped.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict

from pydantic import BaseModel

from diageval.bundle.trace_stream import StreamState, TraceFormatError, iter_trace_events
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import (
    claimable,
    graded_confidence,
    lower_edge,
    median,
    median_standard_error,
    persistent_segment,
)
from diageval.diagnosis import Finding


def _dims(args: dict) -> list[list[int]]:
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return []
    return [d if isinstance(d, list) and all(isinstance(x, int) for x in d) else [] for d in dims]


def _prod(xs: list[int]) -> int:
    return math.prod(xs) if xs else 0


def _matmul(a: list[int], b: list[int]) -> int:
    """Multiply-adds of a (batched) matrix product [..., m, k] x [..., k, n]."""
    if len(a) < 2 or len(b) < 2:
        return 0
    return _prod(a) * b[-1]


def _attention(q: list[int], k: list[int]) -> int:
    """Multiply-adds of softmax(q k^T) v for q [..., L_q, d], k [..., L_k, d]: two products of L_q*L_k*d."""
    if len(q) < 2 or len(k) < 2:
        return 0
    return 2 * _prod(q) * k[-2]


def _convolution(x: list[int], w: list[int]) -> int:
    """Multiply-adds of a convolution of x [N, C, ...] with w [O, C/groups, k...], stride 1 (the output
    keeps the input's spatial size): N*spatial output positions x O x (C/groups * kernel elements)."""
    if len(x) < 3 or len(w) < 3 or x[1] == 0:
        return 0
    return _prod(x) // x[1] * _prod(w)


def op_work(name: str, args: dict) -> int:
    """Multiply-adds an op does, from its input shapes; 0 for ops this analyser does not count."""
    d = _dims(args)
    if name in ("aten::mm", "aten::bmm") and len(d) >= 2:
        return _matmul(d[0], d[1])
    if name in ("aten::addmm", "aten::baddbmm") and len(d) >= 3:
        return _matmul(d[1], d[2])
    backward = name.endswith("_backward")  # backward ops take the output gradient first
    if "scaled_dot_product" in name and "attention" in name and name != "aten::scaled_dot_product_attention":
        return _attention(*d[backward:backward + 2]) if len(d) >= 2 + backward else 0
    if name in ("aten::convolution", "aten::convolution_backward") and len(d) >= 2 + backward:
        return _convolution(*d[backward:backward + 2])
    return 0


class RankStepWork(BaseModel):
    work: int  # multiply-adds of the counted ops
    compute_us: float  # their summed durations


def measure_work(ev: RunEvidence) -> dict[int, dict[int, RankStepWork]]:
    """rank -> profiler step number -> the work its counted ops do in that step (steps with none left out)."""
    out: dict[int, dict[int, RankStepWork]] = {}
    for rank, summary in sorted(ev.traces.items()):
        steps = sorted(summary.steps, key=lambda st: st.start_us)
        if not steps:
            continue
        starts = [st.start_us for st in steps]
        work: dict[int, int] = defaultdict(int)
        busy: dict[int, float] = defaultdict(float)
        try:
            for e in iter_trace_events(summary.path, StreamState()):
                if e.ph != "X" or not e.name or not isinstance(e.ts, (int, float)) or not isinstance(e.dur, (int, float)):
                    continue
                if not (e.name.startswith(("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv"))
                        or "scaled_dot_product" in e.name):
                    continue
                w = op_work(e.name, e.decoded_args())
                if w <= 0:
                    continue
                ts = e.ts + summary.base_time_us
                i = bisect_right(starts, ts) - 1
                if i < 0 or ts >= steps[i].end_us:
                    continue
                work[steps[i].number] += w
                busy[steps[i].number] += e.dur
        except (TraceFormatError, OSError):
            continue
        out[rank] = {n: RankStepWork(work=w, compute_us=busy[n]) for n, w in work.items()}
    return out


class ImbalanceRow(BaseModel):
    number: int
    step_us: float
    heavy_rank: int
    excess: float  # heavy rank's work / its peers' median work - 1
    extra_us: float  # heavy rank's compute time - its peers' median compute time
    explained_us: float  # the extra work done at the peers' own time per unit of work


def imbalance_table(ev: RunEvidence, work: dict[int, dict[int, RankStepWork]]) -> list[ImbalanceRow]:
    ranks = sorted(work)
    if len(ranks) < 2:
        return []
    step_us = {st.number: st.dur_us for st in ev.traces[ranks[0]].steps}
    common = sorted(set.intersection(*(set(work[r]) for r in ranks)) & set(step_us))
    rows = []
    for n in common:
        per = {r: work[r][n] for r in ranks}
        heavy = max(ranks, key=lambda r: per[r].work)
        peers = [per[r] for r in ranks if r != heavy]
        peer_work = median([p.work for p in peers])
        peer_us = median([p.compute_us for p in peers])
        if peer_work <= 0 or step_us[n] <= 0:
            continue
        rows.append(ImbalanceRow(
            number=n, step_us=step_us[n], heavy_rank=heavy, excess=per[heavy].work / peer_work - 1.0,
            extra_us=per[heavy].compute_us - peer_us,
            explained_us=(per[heavy].work - peer_work) * (peer_us / peer_work),
        ))
    return rows


def _flagged(row: ImbalanceRow, rank: int) -> bool:
    return (row.heavy_rank == rank and row.excess >= T.MIN_CAUSE_SHARE
            and row.extra_us >= lower_edge(T.SKEW_SHARE) * row.step_us)


def judge_load_imbalance(table: list[ImbalanceRow], ev: RunEvidence) -> list[Finding]:
    if len(table) < 3:
        return []
    counts: dict[int, int] = defaultdict(int)
    for row in table:
        counts[row.heavy_rank] += 1
    rank = max(counts, key=lambda r: counts[r])
    flags = [_flagged(row, rank) for row in table]
    seg = persistent_segment(flags)
    if seg is None:
        return []
    rows = table[seg[0]:seg[1]]
    shares = [row.extra_us / row.step_us for row in rows]
    share = median(shares)
    excess = median([row.excess for row in rows])
    confidence = graded_confidence(share, T.SKEW_SHARE, median_standard_error(shares))
    if not claimable(confidence):
        return []
    start = ev.training_step(rank, rows[0].number)
    stop = ev.training_step(rank, rows[-1].number) + 1
    extra_ms = median([row.extra_us for row in rows]) / 1e3
    peers = [r for r in sorted(ev.traces) if r != rank]
    return [Finding(
        category="compute.load_imbalance",
        confidence=confidence,
        ranks=[rank],
        steps=(start, stop),
        impact=round(min(1.0, share), 3),
        summary=(f"rank {rank} does {excess:.0%} more arithmetic per step than its peers (larger operator input"
                 f" shapes) on {sum(flags[seg[0]:seg[1]])} of {len(rows)} steps; its compute takes {extra_ms:.2f} ms longer"),
        evidence=[
            f"{ev.trace_file(rank)}: matrix-product/attention/convolution ops take larger Input Dims than on"
            f" {', '.join(ev.trace_file(r) for r in peers)}: median {excess:+.0%} multiply-adds per step",
            f"{ev.trace_file(rank)}: those ops run {extra_ms:.2f} ms/step longer than its peers' "
            f"({share:.0%} of the step), in proportion to the extra work",
        ],
    )]


def explains_straggler(table: list[ImbalanceRow], finding: Finding) -> bool:
    """True when the straggler ``finding``'s rank is the heavier rank and its extra arithmetic, done at its
    peers' speed, accounts for at least ``COMPUTE_EXPLAINS_SKEW`` of its extra compute time (median over
    the steps where it is the heavier rank)."""
    if not finding.ranks or len(finding.ranks) != 1:
        return False
    rank = finding.ranks[0]
    rows = [row for row in table if row.heavy_rank == rank and row.excess >= T.MIN_CAUSE_SHARE and row.extra_us > 0]
    if len(rows) < max(3, len(table) // 2):
        return False
    return median([row.explained_us / row.extra_us for row in rows]) >= T.COMPUTE_EXPLAINS_SKEW
