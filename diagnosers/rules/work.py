"""The arithmetic each rank does per step, gathered in the one pass that summarises its trace.

``load_imbalance`` compares it across ranks (its module doc says which ops count and how); it is measured
here, as an observer of :func:`diageval.bundle.trace_summary.summarize_trace`'s pass, so that ``rules``
does not read every trace a second time for it (issue 26: each trace at most twice).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import compress

from pydantic import BaseModel

from diageval.bundle.trace_stats import IdTable, TimedWindow
from diageval.bundle.trace_stream import TraceEvent
from diageval.bundle.trace_summary import TraceSummary

COUNTED_PREFIXES = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv")


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


def _is_counted(name: str | None) -> bool:
    return bool(name) and (name.startswith(COUNTED_PREFIXES) or "scaled_dot_product" in name)  # type: ignore[union-attr]


def _counted_kind(cat: str | None, name: str | None) -> tuple[bool]:
    return (_is_counted(name),)


class WorkCollector:
    """Sees every event of one trace's summarising reads; keeps (start, duration, work) of the counted ops."""

    def __init__(self) -> None:
        self.ops: list[tuple[float, float, int]] = []
        self.table = IdTable(_counted_kind)  # per (category, name) id of the read: counted or not, decided once

    def add_window(self, window: TimedWindow) -> None:
        """One window of the reader (``trace_stats.timed_window``): its counted ops picked by id, no Python per event
        for the rest (most events are no counted op)."""
        table = self.table
        table.update(window.names)
        counted = table.flag(0)[window.ids]
        if counted.any():
            for e in compress(window.events, counted.tolist()):
                self.add(e)

    def add(self, e: TraceEvent) -> None:
        if e.ph != "X" or not e.name or not isinstance(e.ts, (int, float)) or not isinstance(e.dur, (int, float)):
            return
        if not _is_counted(e.name):
            return
        w = op_work(e.name, e.decoded_args())
        if w > 0:
            self.ops.append((e.ts, e.dur, w))

    def per_step(self, summary: TraceSummary) -> dict[int, RankStepWork] | None:
        """Profiler step number -> the work of the counted ops starting in it (steps with none left out);
        None for a trace without steps."""
        steps = sorted(summary.steps, key=lambda st: st.start_us)
        if not steps:
            return None
        starts = [st.start_us for st in steps]
        work: dict[int, int] = {}
        busy: dict[int, float] = {}
        for ts, dur, w in self.ops:
            ts = ts + summary.base_time_us
            i = bisect_right(starts, ts) - 1
            if i < 0 or ts >= steps[i].end_us:
                continue
            n = steps[i].number
            work[n] = work.get(n, 0) + w
            busy[n] = busy.get(n, 0.0) + dur
        return {n: RankStepWork(work=w, compute_us=busy[n]) for n, w in work.items()}


__all__ = ["RankStepWork", "WorkCollector", "op_work"]
