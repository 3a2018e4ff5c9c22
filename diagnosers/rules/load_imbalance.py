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

from pydantic import BaseModel

from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import lower_edge, median, persistent_rank
from diageval.diagnosers.rules.work import RankStepWork, op_work  # noqa: F401 (op_work: the analyser's measure)
from diageval.diagnosis import Finding


def measure_work(ev: RunEvidence) -> dict[int, dict[int, RankStepWork]]:
    """rank -> profiler step number -> the work its counted ops do in that step (steps with none left out),
    as gathered in the pass that summarised each trace (``work.WorkCollector``)."""
    return dict(ev.work)


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
    found = persistent_rank(
        table, lambda row: row.heavy_rank, _flagged, lambda row: row.extra_us / row.step_us, T.SKEW_SHARE
    )
    if found is None:
        return []
    rank, seg, flags, share, confidence = found.rank, found.seg, found.flags, found.share, found.confidence
    rows = table[seg[0]:seg[1]]
    excess = median([row.excess for row in rows])
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
