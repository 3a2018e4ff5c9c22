"""One pass over a rank's Kineto trace, reduced to the per-step aggregates the rules reason about.

``summarize_trace(path)`` streams the trace once (``trace_stream``) and keeps only compact columns:
start/duration pairs per host thread (no names), the few named events the rules need (data waits,
collectives, synchronisations, step markers), and device activity. It then cuts everything into step
windows and returns a ``TraceSummary``: per step, how long it took and where the time went.

Memory is bounded whatever the trace's size (``MAX_COLUMN_ENTRIES``). The columns are needed because a
step's events are not together in the file: Kineto writes a step's marker after thousands of its ops
(5 of the 10 real traces), torch 1.9 writes every host op before any kernel, and a kernel's launch call
may sit anywhere before it. So no step is complete before the file ends, and a step-by-step reduction
in one pass would be exact only for files in time order. When the columns outgrow the budget, the first
pass drops them and from there gathers only what the slicing needs, O(steps, threads, names): step markers,
flags, threads, kernel classes, collectives by name, and the largest gap between a runtime call and the
device work it queued (``trace_stats``'s join, for the margin) and, per window of the reader, the time span
its events cover; the observers stop there and see the rest in the next read (each event once), but for a
``SlicedObserver`` (the time attribution of a GPU trace), which measures the steps in that read a slice at a time
too (it sees every event that can reach a slice's steps, in its slice). The trace is then read
once more, cut into slices of consecutive steps, each keeping only events that can change its steps
(``trace_stats.TimeRange``), and every step is computed from exactly the events a single pass would
have used: the result is the same. The slices fill together in that second pass, each built and freed
once the pass is past the last window that can reach it, so a trace written in time order is read
twice at a bounded memory whatever its size; a trace whose order keeps more than ``OPEN_SLICES`` slices
open at once (torch 1.9 writes every host op before any kernel) takes one more pass per such group
(``benchmarks/big_trace.py`` and ``benchmarks/trace_reader.py --side-by-side`` measure them). A trace that
is sure to outgrow the budget at the rate of its first ``EARLY_DROP_BYTES`` stops filling columns there.

Size: the collector, the per-step build and the slicing driver are one unit: a slice re-runs the same
collector and build over a ``TimeRange``, and the exactness of slices rests on both reading the same
columns the same way; apart, that contract would be spread over two modules.

Decisions where the design is silent:

* A step is a ``ProfilerStep#N`` window on the thread that carries the step markers (the training
  thread). Traces without step markers get no steps; rules that need steps then say so.
* Timestamps are converted to epoch microseconds with ``baseTimeNanoseconds`` when the trace has it
  (torch >= 2.x writes relative ``ts``), so ranks on one host can be compared directly.
* Starts and durations are read as float64 once per window (the columns always held them so): the masks that
  keep a slice's events compare float64 values, the same as Python's comparisons for any integer time under
  2**53 us (285 years). A value that is no number, or an integer beyond float range, is no time (skipped).
* Collectives are gloo's ``gloo:*`` annotations (the wait happens on gloo's runloop thread, see
  ``notes/measured.md``) and communication kernels on the device (``kineto.is_comm_kernel``: NCCL's
  ``ncclKernel*`` / ``ncclDevKernel*``, RCCL, DeepEP...), whose duration includes the time spent
  waiting for peers.
* The same pass feeds ``trace_stats.StatsCollector``, so each step of a GPU trace also carries the
  device measurements of ``diageval trace stats`` (``StepSummary.gpu``); ``rules`` reads each trace once.
* Host work is every host thread's: the backward pass runs on autograd's own thread, and time the
  training thread spends waiting for it is work, not waiting. ``host_busy_us`` is the union of recorded
  activity that starts in the step, over all threads; op counts stay the training thread's.
* The data wait is any ``enumerate(DataLoader)...`` annotation: PyTorch wraps every ``__next__`` of a
  DataLoader iterator in one.
* "Unexplained" host time is the part of a step where the training thread runs no recorded op and is
  neither waiting for data nor inside a collective: python work the profiler does not see (a
  synchronous file write, a sleep, a slow pure-python transform).
* "Short" ops are host ops whose *self* time (duration minus nested ops) is under ``SHORT_OP_US``
  microseconds: ops so small that per-op dispatch cost is most of them. Self time, because a tiny op's
  cost sits as much in its wrappers (``aten::linear`` around ``aten::addmm``...) as in the leaf, while a
  real matmul's sits in one op with a large self time.
"""

from __future__ import annotations

import math
import time
from array import array
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field

from diageval.bundle import kineto as k
from diageval.bundle.trace_stats import (IdTable, Names, StatsCollector, StepStats, TimedWindow, TimeRange,
                                         merge_sorted, sorted_doubles, step_markers, timed_window)
from diageval.bundle.trace_stream import StreamState, TraceEvent, TraceFormatError, iter_trace_windows

SHORT_OP_US = 50.0
MAX_COLUMN_ENTRIES = 3_000_000
"""Column entries one pass may hold: a trace that needs more is summarised in slices of steps, so memory
stays bounded whatever the trace's size. From the 200 MB of issue 14 and a measurement: the A100 trace of
``benchmarks/big_trace.py`` repeated to 452 MB holds 2.40 M entries and, read once, peaked at 155 MB RSS with the
interpreter's 46 MB (its imports): 45 bytes per entry at the peak (the columns, then the sorted copies the per-step
measurement makes, held as arrays of doubles). (200 - 46) / 45 = 3.4 M; 3 M keeps a tenth of room for traces whose
entries cost more (~180 MB). Issue 43: a trace up to ~550 MB of that shape is read once, not twice; the same
trace repeated to 1 GB, read in slices at this budget, peaked at 126 MB.

Why a 1 GB trace is still read twice (issue 43, measured at 28852bc on the A100 trace repeated to 1011 MB, 5.3 M
timed events): read once (``benchmarks/trace_reader.py --side-by-side``, the unlimited budget) it takes 0.211x
``json.loads``' CPU time against 0.376x in two reads, but peaks at 265 MB against 130. Right after that one read the
process holds 197 MB (41 of interpreter), ~29 bytes of RSS per column entry, already near issue 14's 200 MB before any
step is built; the build and the device measures then add ~70 MB of sorted copies. Where the entries' bytes are: each
host op is held by both collectors (17 bytes in ``_Columns``: start, duration, a CPU-op flag; 16-24 in
``trace_stats.StatsCollector``: start, duration, and the start again for a CPU op), and the correlation-keyed columns
of ``StatsCollector`` kept Python objects from the windows (a correlation int per device event, launch and call; the
launch dict; a tuple per call). A host column the two shared and correlations held as int64 arrays would save ~40 MB
of allocations at 1 GB (tracemalloc of the 25.8 MB trace after its read, scaled), against the 65 MB by which the
one-read peak passes 200 MB: not shown to be enough. (The correlations are int64 columns since,
``trace_ids.CorrelationColumn``: 14 MB less at the 453 MB trace's peak; a tuple per call remains.) ``rules``' time
attribution (``attribution.py``, an observer of these reads) keeps columns of its own beside these in one read; past
this budget it is made in the slice read, a slice of steps at a time (``attribution.AttributionSlices``), so that
``rules`` on the 1 GB trace peaks at 153 MB, not 318, and at 174 MB at 2 GB (``--peaks`` at 618e977;
``docs/trace-reader.md``). Below the budget it holds its columns and split on top of the summary's: ``rules`` peaked
at 197 MB on the trace repeated to 536 MB, read once (``--peaks``)."""


class EventObserver(Protocol):
    """Something that sees every complete event (``ph`` X) with a numeric start and duration of the trace once
    (``summarize_trace(observers=...)``), a window of the reader at a time, in file order: in the first read, or
    past the column budget, in the slice pass from where the first read stopped feeding it. Each window comes as a
    ``trace_stats.TimedWindow`` (its events, and their (category, name) ids to decide what each pair is once)."""

    def add_window(self, window: TimedWindow) -> None: ...


@runtime_checkable
class SlicedObserver(EventObserver, Protocol):
    """An observer that, past the column budget, measures the trace's steps in the slice read too, a slice of steps at
    a time (the time attribution, ``attribution.AttributionCollector``): it drops what it holds and returns per slice
    of steps (their windows on the trace's own clock: start less ``base_time_us``, as ``TraceSummary.steps`` give them)
    a part to feed, with the range of times it keeps (``lo``, ``hi``) and ``open``, ``add`` and ``build``. After the
    read, ``slices_exact`` False asks for the whole trace once more (what it measured in slices did not hold)."""

    def slice_units(self, units: list[list[tuple[int | None, float, float]]], margin: float,
                    markers: list[tuple[Any, Any, Any, str]]) -> list[Any]: ...

    def slices_exact(self) -> bool: ...

    def add_facts(self, window: TimedWindow) -> None:
        """A window of the first read past the column budget, for the facts about the whole trace its slices need."""


class Collective(BaseModel):
    """One collective call as seen on this rank: where it started and how long this rank was inside it."""

    name: str
    start_us: float
    dur_us: float
    on_device: bool = Field(description="True for NCCL kernels (device timeline), False for host annotations")
    payload_bytes: int | None = Field(None, description="From the event's Input Dims and type, when recorded")


class StepSummary(BaseModel):
    """Where one step's time went on one rank. Times in microseconds."""

    number: int = Field(description="N of ProfilerStep#N")
    start_us: float = Field(description="Epoch microseconds when the trace has baseTimeNanoseconds")
    dur_us: float
    data_wait_us: float = 0.0
    collectives: list[Collective] = Field(default_factory=list)
    collective_us: float = Field(0.0, description="Union of collective time inside the step")
    host_busy_us: float = Field(0.0, description="Union of recorded host activity on every host thread")
    unexplained_us: float = Field(0.0, description="Neither host op, data wait nor collective")
    host_ops: int = Field(0, description="Every cpu_op on the training thread")
    top_level_ops: int = 0
    leaf_ops: int = Field(0, description="cpu_ops with no op nested inside (where the work is dispatched)")
    short_ops: int = Field(0, description="cpu_ops whose self time is under SHORT_OP_US")
    short_ops_us: float = Field(0.0, description="Their self time, summed")
    device_busy_us: float = Field(0.0, description="Union of kernels/memcpy/memset (0 on CPU traces)")
    kernels: int = 0
    launches: int = 0
    sync_us: float = 0.0
    gpu: StepStats | None = Field(None, description="The trace-stats device measurements of this step (GPU traces)")

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


class TraceSummary(BaseModel):
    """What one rank's trace says, per step; plus what the reader could not read."""

    path: str
    rank: int | None = Field(None, description="From distributedInfo; None when the trace does not say")
    world_size: int | None = None
    backend: str | None = None
    has_device: bool = Field(False, description="Kernels or memcpy present (a GPU trace)")
    has_accelerator: bool = Field(
        False, description="deviceProperties, runtime calls or device events: the job ran on an accelerator"
    )
    devices: list[str] = Field(default_factory=list, description="deviceProperties names")
    base_time_us: float = 0.0
    bytes_on_disk: int = 0
    json_bytes: int = 0
    n_events: int = 0
    parse_seconds: float = 0.0
    truncated: str | None = Field(None, description="Why the file ended early; None when complete")
    main_tid: str | None = None
    collective_names: dict[str, int] = Field(default_factory=dict)
    steps: list[StepSummary] = Field(default_factory=list)

    @property
    def bytes_per_second(self) -> float:
        return self.json_bytes / self.parse_seconds if self.parse_seconds > 0 else 0.0


class _Columns:
    """Compact columns filled by the single pass; names are kept only for the few events that matter.

    With ``keep`` only events that start in ``[keep.lo, keep.hi)`` enter the columns (a slice of the
    trace); after ``drop`` none do. The facts about the whole trace (step markers, device events seen,
    collectives by name) are kept either way by a collector of the whole trace (a slice's are the first pass's).
    """

    def __init__(self, keep: TimeRange | None = None) -> None:
        self.host: dict[str, tuple[array, array, array]] = defaultdict(lambda: (array("d"), array("d"), array("b")))
        self.steps: list[tuple[int, float, float, str]] = []
        self.data_waits: list[tuple[float, float, str]] = []
        self.collectives: list[tuple[str, float, float, bool, int | None]] = []
        self.device: tuple[array, array] = (array("d"), array("d"))
        self.launches = array("d")
        self.syncs: list[tuple[float, float]] = []
        self.keep = keep
        self.columns = True
        self.n_device = 0
        self.n_timed = 0  # complete events with a numeric start and duration
        self.collective_names: Counter[str] = Counter()
        self.table = IdTable(_kind)
        self.dropped_at_entries = self.dropped_at_events = 0

    def size(self) -> int:
        """Entries held in the per-event columns (what grows with the trace)."""
        return (sum(len(c[0]) for c in self.host.values()) + len(self.data_waits) + len(self.collectives)
                + len(self.device[0]) + len(self.launches) + len(self.syncs))

    def drop(self, entries_held: int) -> None:
        """Free the per-event columns (``entries_held`` in all, with the other collector's); later events
        only update the facts."""
        self.dropped_at_entries, self.dropped_at_events = entries_held, self.n_timed
        self.host.clear()
        self.data_waits, self.collectives, self.syncs = [], [], []
        self.device, self.launches = (array("d"), array("d")), array("d")
        self.columns = False

    def add_window(self, w: TimedWindow) -> None:
        """Take one window (``trace_stats.timed_window``): what each event is comes from its (category, name) id
        (``_kind``, decided once per id), and every column is extended a window at a time, in file order."""
        self.n_timed += len(w)
        table = self.table
        table.update(w.names)
        ids = w.ids
        code = table.kind[ids]
        kinds = table.kinds
        keep = self.keep
        if keep is None:  # the facts about the whole trace (a slice's are the first pass's)
            self.n_device += int(np.count_nonzero(code == _DEVICE))
            # collectives by name, device kernels and gloo annotations alike, in file order (the dict keeps that order)
            is_coll = table.flag(_COLLECTIVE)[ids]
            if np.count_nonzero(is_coll):
                self.collective_names.update([kinds[i][1] for i in ids[is_coll].tolist()])
            is_step = code == _STEP
            if np.count_nonzero(is_step):
                self.steps.extend(step_markers(w, kinds, is_step))
        if not self.columns:
            return
        if keep is not None:
            w = w.select((w.ts >= keep.lo) & (w.ts < keep.hi))
            if not len(w):
                return
            ids = w.ids
            code = table.kind[ids]
            is_coll = table.flag(_COLLECTIVE)[ids]
        is_dev = code == _DEVICE
        if np.count_nonzero(is_dev):
            self.device[0].frombytes(w.ts[is_dev].tobytes())
            self.device[1].frombytes(w.dur[is_dev].tobytes())
        is_launch = code == _LAUNCH
        if np.count_nonzero(is_launch):
            self.launches.frombytes(w.ts[is_launch].tobytes())
        is_sync = code == _SYNC
        if np.count_nonzero(is_sync):
            self.syncs.extend((ev.ts, ev.dur) for ev in w.select(is_sync).events)
        if np.count_nonzero(is_coll):
            colls = w.select(is_coll)
            self.collectives.extend(
                (kinds[i][1], ev.ts, ev.dur, True, None) if kinds[i][0] == _DEVICE
                else (kinds[i][1], ev.ts, ev.dur, False, _payload_bytes(ev.decoded_args()))
                for i, ev in zip(colls.ids.tolist(), colls.events))
        is_host = code == _HOST
        if not np.count_nonzero(is_host):
            return
        host = w.select(is_host)
        waits = table.flag(2)[host.ids]
        if np.count_nonzero(waits):
            self.data_waits.extend((ev.ts, ev.dur, tid) for ev, tid in zip(host.select(waits).events,
                                                                          host.threads_where(waits)))
        is_op = table.flag(1)[host.ids].astype(np.int8)
        for tid, sel in host.by_thread():
            ts, dur, op = self.host[tid]
            ts.frombytes((host.ts if sel is None else host.ts[sel]).tobytes())
            dur.frombytes((host.dur if sel is None else host.dur[sel]).tobytes())
            op.frombytes((is_op if sel is None else is_op[sel]).tobytes())


# What one (category, name) pair is to the summary's columns (``_kind``)
_IGNORED, _DEVICE, _LAUNCH, _SYNC, _STEP, _GLOO, _HOST = range(7)
_COLLECTIVE = 3  # the item of every kind that says it is a collective (its detail, item 1, is the name)


def _kind(cat: str | None, name: str | None) -> tuple:
    """The columns an event of this category and name enters (``_Columns.add_window``), as (kind, detail, flag,
    collective): device activity (detail: the collective it is part of, or None), a launch, a synchronisation,
    a step marker (detail: its number), a gloo collective (detail: its name), host activity (detail: 1 for a
    CPU op; flag: it is a data wait), or none."""
    kind = _kind_of(cat, name if isinstance(name, str) else str(name))
    kind = (*kind, *(None,) * (3 - len(kind)))
    return (*kind, kind[0] in (_DEVICE, _GLOO) and kind[1] is not None)


def _kind_of(cat: str | None, name: str) -> tuple:
    if cat in k.DEVICE_CATEGORIES:
        return (_DEVICE, name.split("(")[0] if cat in k.KERNEL_CATEGORIES and k.is_comm_kernel(name) else None)
    if cat in k.RUNTIME_CATEGORIES:
        return (_LAUNCH,) if name in k.LAUNCH_NAMES else (_SYNC,) if name in k.SYNC_NAMES else (_IGNORED,)
    if cat == k.SYNC_CATEGORY:
        return (_SYNC,)
    if cat not in k.HOST_OP_CATEGORIES:
        return (_IGNORED,)
    if name.startswith(k.PROFILER_STEP_PREFIX):
        number = k.profiler_step_number(name) if cat in k.STEP_MARKER_CATEGORIES else None
        return (_IGNORED,) if number is None else (_STEP, number)
    if name.startswith(k.GLOO_COLLECTIVE_PREFIX):
        return (_GLOO, name)
    return (_HOST, 1 if cat in k.CPU_OP_CATEGORIES else 0, name.startswith(k.DATALOADER_NEXT_PREFIX))


_DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "int": 4, "long int": 8,
                "signed char": 1, "unsigned char": 1, "bool": 1, "short int": 2}


def _payload_bytes(args: Any) -> int | None:
    """Bytes of a collective's tensors from record_shapes' Input Dims / Input type; None when absent."""
    if not isinstance(args, dict):
        return None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    total = 0
    for shape, dtype in zip(dims, types):
        size = _DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        if size is None or not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            continue
        n = 1
        for d in shape:
            n *= d
        total += n * size
    return total or None


def union_length(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """Total length covered by ``(start, end)`` intervals, clipped to ``[lo, hi)``."""
    iv = list(intervals)
    if not iv:
        return 0.0
    both = np.array(iv, dtype=np.float64).reshape(-1, 2)
    return _union(both[:, 0], both[:, 1], lo, hi)


def _union(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """``union_length`` of the intervals ``(starts[i], ends[i])``: clipped, sorted by start, merged where one starts
    at or before the furthest end so far, and the merged lengths summed in order (as a running total would)."""
    inside = (ends > lo) & (starts < hi)
    if not inside.all():
        starts, ends = starts[inside], ends[inside]
    if not len(starts):
        return 0.0
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    order = np.lexsort((e, s))
    s, e = merge_sorted(s[order], e[order])
    return float(np.cumsum(e - s)[-1])


def _window(starts: Sequence[float], order: Sequence[int], lo: float, hi: float) -> list[int]:
    """Indices (into the original columns) of items whose start lies in [lo, hi); ``starts`` is sorted."""
    return [order[k] for k in range(bisect_left(starts, lo), bisect_left(starts, hi))]


def _by_start(ts: np.ndarray, dur: list[np.ndarray] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of intervals ``(ts, dur)``, sorted by start (ties in column order); ``dur`` may be the columns
    whose concatenation it is, joined only once the starts are sorted (the build's peak of memory: every host event's
    start and end, sorted, beside the columns)."""
    order = np.argsort(ts, kind="stable")
    s = ts[order]
    e = (np.concatenate(dur) if isinstance(dur, list) else dur)[order]
    e += s  # s + d, in place
    return s, e


def _sorted_index(values: Sequence[float]) -> tuple[array, array]:
    """``values`` sorted (stable) and the index of each in ``values``, as arrays (8 bytes an entry, not 32-36: the
    main thread's ops are most of a read's columns, and these are held while its steps are built).

    A column of doubles (the main thread's ops) is sorted by numpy's stable sort, the order of Python's ``sorted``
    for any doubles but NaN, which has no place in an order (``sorted`` leaves it where its comparisons happen to put
    it); a list (a few named events, their times as written: ints compare exactly in Python, not as doubles) and a
    column holding a NaN are sorted as before."""
    v = np.frombuffer(values) if isinstance(values, array) and values.typecode == "d" else None
    if v is None or np.isnan(v).any():
        order = array("q", sorted(range(len(values)), key=values.__getitem__))
        return array("d", [values[i] for i in order]), order
    idx = np.argsort(v, kind="stable").astype(np.int64, copy=False)
    starts, order = array("d"), array("q")
    starts.frombytes(memoryview(v[idx]).cast("B"))  # from numpy's buffer: no bytes object between
    order.frombytes(memoryview(idx).cast("B"))
    return starts, order


def _top_level(ts: np.ndarray, dur: np.ndarray) -> int:
    """How many of the intervals ``(ts[j], dur[j])`` (sorted by start) are not nested in an earlier one: one starting
    at or after the furthest end so far (an overlapping, not nested, one extends it: clock jitter)."""
    if not len(ts):
        return 0
    if np.isnan(ts).any() or np.isnan(dur).any() or (dur < 0.0).any():  # no running maximum: walk them
        return _top_level_walk(ts.tolist(), dur.tolist())
    reach = np.maximum.accumulate(ts + dur)  # with no negative length, the walk's end is the furthest end so far
    return 1 + int(np.count_nonzero(ts[1:] >= reach[:-1]))


def _top_level_walk(ts: list[float], dur: list[float]) -> int:
    n = 0
    end = float("-inf")
    for t, d in zip(ts, dur):
        if t >= end:
            n += 1
            end = t + d
        elif t + d > end:
            end = t + d
    return n


def self_times(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Self time (duration minus directly nested intervals) of each interval ``(ts[j], dur[j])``, and whether it
    is a leaf (no interval nested in it), as arrays.

    The walk this computes: intervals by start, the longer first, each nested in the top of a stack of open ones once
    those ending at or before its start are popped. That top is the nearest earlier interval (in that order) ending
    after the start (an earlier one still open is under it; every one between was popped, ending at or before a start
    no later than this one), found for all intervals at once by halving jumps over a table of running maxima of the
    ends (no Python per op: this ran once per op of the training thread). Each parent loses
    ``min(child's duration, its end - child's start)`` in the walk's order (``np.subtract.at`` applies them in order:
    the same floats). Starts or durations holding a NaN, which has no place in an order, are walked in Python."""
    n = len(ts)
    if np.isnan(ts).any() or np.isnan(dur).any():
        self_l, leaf_l = _self_times_walk(ts.tolist(), dur.tolist())
        return np.array(self_l, dtype=np.float64), np.array(leaf_l, dtype=bool)
    order = np.lexsort((-dur, ts))  # by start, the longer first (stable: ties in column order, as ``sorted``)
    t = ts[order]
    e = t + dur[order]
    # levels[k][i] = max(e[i : i + 2**k]); pos[q] ends as the smallest p with every e[p:q] <= t[q]: the parent is p - 1
    levels = [e]
    while (1 << len(levels)) <= n:
        step = 1 << (len(levels) - 1)
        levels.append(np.maximum(levels[-1][:-step], levels[-1][step:]))
    pos = np.arange(n)
    for k in range(len(levels) - 1, -1, -1):
        cand = pos - (1 << k)
        ok = cand >= 0
        jump = ok & (levels[k][np.where(ok, cand, 0)] <= t)
        pos = np.where(jump, cand, pos)
    has = pos > 0
    child = np.flatnonzero(has)
    parent = pos[has] - 1
    self_t = dur.astype(np.float64, copy=True)
    leaf = np.ones(n, dtype=bool)
    if len(child):
        a, b = dur[order[child]], e[parent] - t[child]
        np.subtract.at(self_t, order[parent], np.where(b < a, b, a))  # Python's min(a, b): b only when smaller
        leaf[order[parent]] = False
    return self_t, leaf


def _self_times_walk(ts: list[float], dur: list[float]) -> tuple[list[float], list[bool]]:
    keys = list(zip(ts, [-d for d in dur]))
    order = sorted(range(len(ts)), key=keys.__getitem__)  # by start, the longer first
    self_t = list(dur)
    leaf = [True] * len(ts)
    ends = [t + d for t, d in zip(ts, dur)]
    stack: list[int] = []
    for j in order:
        t = ts[j]
        while stack and t >= ends[stack[-1]]:
            stack.pop()
        if stack:
            p = stack[-1]
            self_t[p] -= min(dur[j], ends[p] - t)
            leaf[p] = False
        stack.append(j)
    return self_t, leaf


def _main_markers(steps: list[tuple[int, float, float, str]]) -> tuple[str | None, list[tuple[int, float, float, str]]]:
    """The training thread (the one with the most step markers) and its markers in time order."""
    if not steps:
        return None, []
    main_tid = Counter(t for _, _, _, t in steps).most_common(1)[0][0]
    return main_tid, sorted((s for s in steps if s[3] == main_tid), key=lambda s: s[1])


def _build_steps(cols: _Columns, base_us: float, main_tid: str | None,
                 markers: list[tuple[int, float, float, str]]) -> list[StepSummary]:
    """The summary of each step window in ``markers``, from columns that hold every event starting in them."""
    if not markers:
        return []
    host_ts, host_dur, host_is_op = cols.host.get(main_tid, (array("d"), array("d"), array("b")))
    h_starts, h_order = _sorted_index(host_ts)
    c_starts, c_order = _sorted_index([c[1] for c in cols.collectives])
    l_sorted = sorted_doubles(cols.launches)
    s_starts, s_order = _sorted_index([s[0] for s in cols.syncs])
    # device activity and every host thread's recorded activity (the autograd thread's backward is work), by start
    dev_s, dev_e = _by_start(np.frombuffer(cols.device[0]), np.frombuffer(cols.device[1]))
    all_s, all_e = _by_start(np.concatenate([np.frombuffer(c[0]) for c in cols.host.values()] or [np.zeros(0)]),
                             [np.frombuffer(c[1]) for c in cols.host.values()] or [np.zeros(0)])
    waits = [w for w in cols.data_waits if w[2] == main_tid]
    w_starts, w_order = _sorted_index([w[0] for w in waits])

    h_ts, h_dur = np.frombuffer(host_ts), np.frombuffer(host_dur)
    h_op, h_idx = np.frombuffer(host_is_op, dtype=np.int8).astype(bool), np.frombuffer(h_order, dtype=np.int64)

    steps: list[StepSummary] = []
    for number, ts, dur, _ in markers:
        lo, hi = ts, ts + dur
        # the training thread's ops starting in the step, by start (ties in column order)
        idx = h_idx[bisect_left(h_starts, lo) : bisect_left(h_starts, hi)]
        op_ts, op_dur, is_op = h_ts[idx], h_dur[idx], h_op[idx]
        top = _top_level(op_ts, op_dur)
        self_t, leaf = self_times(op_ts, op_dur)
        n_leaves = int(np.count_nonzero(is_op & leaf))
        short = self_t[is_op & (self_t < SHORT_OP_US)]
        wait_iv = [(waits[i][0], waits[i][0] + waits[i][1]) for i in _window(w_starts, w_order, lo, hi)]
        # device work is attributed to the step it starts in (kernels queued late may end after it)
        coll_idx = _window(c_starts, c_order, lo, hi)
        coll_iv = [(cols.collectives[i][1], cols.collectives[i][1] + cols.collectives[i][2]) for i in coll_idx]
        d0, d1 = np.searchsorted(dev_s, lo), np.searchsorted(dev_s, hi)
        sync_iv = [(cols.syncs[i][0], cols.syncs[i][0] + cols.syncs[i][1]) for i in _window(s_starts, s_order, lo, hi)]
        a0, a1 = np.searchsorted(all_s, lo), np.searchsorted(all_s, hi)
        all_iv_s, all_iv_e = all_s[a0:a1], all_e[a0:a1]
        busy = _union(all_iv_s, all_iv_e, lo, hi)
        coll_us = union_length(coll_iv, lo, hi)
        host_coll = [iv for i, iv in zip(coll_idx, coll_iv) if not cols.collectives[i][3]]
        others = np.array(wait_iv + host_coll, dtype=np.float64).reshape(-1, 2)
        explained = _union(np.concatenate([all_iv_s, others[:, 0]]), np.concatenate([all_iv_e, others[:, 1]]), lo, hi)
        steps.append(
            StepSummary(
                number=number,
                start_us=ts + base_us,
                dur_us=dur,
                data_wait_us=union_length(wait_iv, lo, hi),
                collectives=[
                    Collective(
                        name=cols.collectives[i][0],
                        start_us=cols.collectives[i][1] + base_us,
                        dur_us=cols.collectives[i][2],
                        on_device=cols.collectives[i][3],
                        payload_bytes=cols.collectives[i][4],
                    )
                    for i in sorted(coll_idx, key=lambda i: cols.collectives[i][1])
                ],
                collective_us=coll_us,
                host_busy_us=busy,
                unexplained_us=max(0.0, dur - explained),
                host_ops=int(np.count_nonzero(is_op)),
                top_level_ops=top,
                leaf_ops=n_leaves,
                short_ops=len(short),
                short_ops_us=sum(np.where(short > 0.0, short, 0.0).tolist()),  # as max(0.0, t), summed in order
                device_busy_us=_union(dev_s[d0:d1], dev_e[d0:d1], lo, hi),
                kernels=int(d1 - d0),
                launches=bisect_left(l_sorted, hi) - bisect_left(l_sorted, lo),
                sync_us=union_length(sync_iv, lo, hi),
            )
        )
    return steps


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def summarize_trace(path: Path, *, max_entries: int = MAX_COLUMN_ENTRIES,
                    observers: Sequence[EventObserver] = ()) -> TraceSummary:
    """Read ``path`` (``.json`` or ``.json.gz``) once and summarise it per step.

    Each of ``observers`` sees every complete event (``ph`` X) with a numeric start and duration once, in file order
    (``observer.add_window(window)``), for a caller that measures something else in the same reads (``rules``'
    per-step arithmetic); keep values, not events. A trace over the budget feeds them in its first read up to the
    window where the columns were dropped and in the slice pass from there (see the module notes).

    Never raises on a file that is merely cut short (``truncated`` says so); raises
    ``TraceFormatError`` on a file that is not a Chrome trace at all. Memory stays under ``max_entries``
    column entries: a trace that needs more is read once more, in slices of steps (see the module notes).
    """
    path = Path(path)
    state = StreamState()
    cols = _Columns()
    gpu = StatsCollector()
    started = time.perf_counter()
    hulls: list[tuple[float, float]] = []
    dropped_at = _stream(path, state, cols, gpu, max_entries, observers=observers, hulls=hulls)
    header = state.header
    base_ns = header.get("baseTimeNanoseconds")
    base_us = base_ns / 1000.0 if isinstance(base_ns, (int, float)) else 0.0
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    main_tid, markers = _main_markers(cols.steps)
    if cols.columns:
        steps = _build_steps(cols, base_us, main_tid, markers)
        if gpu.has_device_events and steps:
            steps = _with_gpu(steps, gpu.measure()[0])
    else:
        steps = _summarize_in_slices(path, cols, gpu, base_us, main_tid, markers, max_entries, hulls,
                                     observers, -1 if dropped_at is None else dropped_at)
    props = header.get("deviceProperties") if isinstance(header.get("deviceProperties"), list) else []
    devices = [d["name"] for d in props if isinstance(d, dict) and isinstance(d.get("name"), str)]
    return TraceSummary(
        path=str(path),
        rank=_int_or_none(dist.get("rank")),
        world_size=_int_or_none(dist.get("world_size")),
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        has_device=cols.n_device > 0,
        has_accelerator=bool(devices) or gpu.saw_accelerator_events,
        devices=devices,
        base_time_us=base_us,
        bytes_on_disk=path.stat().st_size,
        json_bytes=state.json_bytes,
        n_events=state.n_events,
        parse_seconds=time.perf_counter() - started,
        truncated=state.truncated,
        main_tid=main_tid,
        collective_names=dict(cols.collective_names),
        steps=steps,
    )


def _stream(path: Path, state: StreamState, cols: _Columns, gpu: StatsCollector, max_entries: int | None,
            observers: Sequence[EventObserver] = (), hulls: list[tuple[float, float]] | None = None) -> int | None:
    """The first pass over the trace, into both collectors; past ``max_entries`` column entries both drop theirs.
    Returns the index of the window where they did (None: never), the last window ``observers`` saw in this pass:
    past it, the collectors keep only what the slicing needs, and the observers wait for the slice pass.

    Works a window of the reader at a time: its complete events (``ph`` X) with numeric times become one
    ``trace_stats.TimedWindow`` (start and duration columns, a (category, name) id per event) that both collectors
    read with numpy masks, deciding what each distinct id means once; per event, the Python work is the few
    attribute reads that build those columns. ``hulls`` gets, per window, the earliest start and the latest end
    of its timed events (what the slice pass needs to know when a slice has seen its last event).
    """
    size = path.stat().st_size
    names = Names()
    dropped_at = None
    for w, window in enumerate(_windows(path, state)):
        timed, names = timed_window(window, names)
        if hulls is not None:
            hulls.append(_hull(timed))
        cols.add_window(timed)
        gpu.add_window(timed)
        if dropped_at is not None:
            for observer in observers:
                if isinstance(observer, SlicedObserver):
                    observer.add_facts(timed)
            continue
        for observer in observers:
            observer.add_window(timed)
        if max_entries is not None and cols.columns:
            held = cols.size() + gpu.size()
            # past the budget, or sure to pass it at the rate of the first EARLY_DROP_BYTES (a quarter of room
            # for the rate to fall): columns that will be dropped cost a full collection per event for nothing
            if held > max_entries or (state.file_bytes >= EARLY_DROP_BYTES
                                      and held * size > 1.25 * max_entries * state.file_bytes):
                cols.drop(held)
                gpu.drop_columns()
                dropped_at = w
    return dropped_at


def _hull(w: TimedWindow) -> tuple[float, float]:
    """(earliest start, latest end) of a window's timed events; an empty range when it has none."""
    if not len(w):
        return math.inf, -math.inf
    return w.span()


def _with_gpu(steps: list[StepSummary], measured: list[StepStats]) -> list[StepSummary]:
    by_number = {st.number: st for st in measured if st.number is not None}
    return [st.model_copy(update={"gpu": by_number.get(st.number)}) for st in steps]


OPEN_SLICES = 2
"""Slices one pass fills at once: each is sized to ``max_entries / OPEN_SLICES``, so that the slices a pass holds
open together stay within the budget. Two: in a trace written in time order a slice overlaps its next one only
(the events near their border), and larger slices repeat fewer events (those within the margin of two)."""
EARLY_DROP_BYTES = 16 << 20
"""Bytes of the file read before its rate of column entries is trusted to say the budget will be passed (the
first window can be all runtime calls, at three entries an event, and would size the slices too small)."""


class _Slice:
    """Consecutive step windows whose columns one pass fills; built, then freed, once past its last window."""

    def __init__(self, markers: list[tuple[int, float, float, str]], margin: float, gpu: StatsCollector,
                 hulls: list[tuple[float, float]]) -> None:
        self.markers = markers
        self.keep = TimeRange(lo=markers[0][1], hi=max(m[1] + max(0.0, m[2]) for m in markers), margin=margin)
        self.lo, self.hi = self.keep.lo - margin, self.keep.hi + margin
        self.first, self.last = _reach(hulls, self.lo, self.hi)
        self.facts = gpu
        self.parts: list[_ObserverSlice] = []  # the sliced observers' parts for the same steps
        self.cols: _Columns | None = None
        self.stats: StatsCollector | None = None

    def open(self) -> None:
        self.cols = _Columns(self.keep)
        self.stats = StatsCollector(self.keep, facts_of=self.facts)

    def add(self, w: TimedWindow) -> None:
        reach = (w.ts < self.hi) & (w.ends() > self.lo)
        if not np.count_nonzero(reach):  # the window's span reaches the slice, none of its events do
            return
        near = w.select(reach)
        self.cols.add_window(near)  # type: ignore[union-attr]
        if self.facts.has_device_events:  # the device figures of a trace without device events are never measured
            self.stats.add_window(near)  # type: ignore[union-attr]

    def build(self, base_us: float, main_tid: str | None) -> list[StepSummary]:
        built = _build_steps(self.cols, base_us, main_tid, self.markers)  # type: ignore[arg-type]
        if self.facts.has_device_events:
            windows = [(n, ts, dur) for n, ts, dur, _ in self.markers]
            built = _with_gpu(built, self.stats.measure_windows(main_tid, windows))  # type: ignore[union-attr,arg-type]
        self.cols = self.stats = None
        return built


def _reach(hulls: list[tuple[float, float]], lo: float, hi: float) -> tuple[int, int]:
    """The windows of the first pass that hold an event that can reach ``(lo, hi)``: [first, last] (first past last
    when none does)."""
    near = [i for i, (a, b) in enumerate(hulls) if a < hi and b > lo]
    return (near[0], near[-1]) if near else (len(hulls), -1)


class _ObserverSlice:
    """A ``SlicedObserver``'s part of a slice read, read from the first window that can reach its range to the last."""

    def __init__(self, part: Any, hulls: list[tuple[float, float]]) -> None:
        self.part = part
        self.first, self.last = _reach(hulls, part.lo, part.hi)

    def open(self) -> None:
        self.part.open()

    def add(self, w: TimedWindow) -> None:
        self.part.add(w)


def _passes(slices: list[_Slice]) -> list[list[_Slice]]:
    """Slices grouped into passes, in order, so that no more than ``OPEN_SLICES`` of a pass are open at once.

    A slice is open from the first window that can reach it to the last; in a trace written in time order
    only neighbours overlap, and one pass takes every slice. A trace whose host ops all come before its
    device activity (torch 1.9) keeps every slice open to the end: it takes one pass per ``OPEN_SLICES``.
    """
    groups: list[list[_Slice]] = []
    for sl in slices:
        group = groups[-1] if groups else None
        if group is not None and _most_open([*group, sl]) <= OPEN_SLICES:
            group.append(sl)
        else:
            groups.append([sl])
    return groups


def _most_open(slices: list[_Slice]) -> int:
    edges = sorted([(s.first, 0) for s in slices if s.first <= s.last] + [(s.last, 1) for s in slices if s.first <= s.last])
    most = now = 0
    for _, kind in edges:  # an opening sorts before a closing at the same window: both are open there
        now += 1 if kind == 0 else -1
        most = max(most, now)
    return most


def _summarize_in_slices(path: Path, first: _Columns, gpu: StatsCollector, base_us: float, main_tid: str | None,
                         markers: list[tuple[int, float, float, str]], max_entries: int,
                         hulls: list[tuple[float, float]], observers: Sequence[EventObserver] = (),
                         seen: int = -1) -> list[StepSummary]:
    """The steps of a trace too large to hold: slices of consecutive step windows, each keeping only the events
    that can change its windows (``TimeRange``), filled together in one more pass over the trace (more only
    when the trace's order would hold more than ``OPEN_SLICES`` open at once); a slice is built and freed as
    soon as the pass is past the last window of the first pass that can reach it (``hulls``).

    Slices are sized from the first pass (entries per event until the budget ran out, events per step);
    a GPU trace whose call-to-device join gave up (``StatsCollector.margin_us`` None) keeps its device
    activity and runtime calls whole in every slice.

    The first pass fed ``observers`` its windows up to ``seen``; this one feeds them the rest (its first group's read,
    or a read for them alone when the trace has no steps), so that they see every window once, in file order.
    """
    if not markers:
        if observers:
            _observe(path, observers, seen)
        return []
    margin = gpu.margin_us if gpu.has_device_events else 0.0
    margin = math.inf if margin is None else margin
    per_step = max(1.0, first.dropped_at_entries / max(1, first.dropped_at_events) * first.n_timed / len(markers))
    per_slice = max(1, int(max_entries / OPEN_SLICES / per_step))
    slices = [_Slice(markers[i : i + per_slice], margin, gpu, hulls) for i in range(0, len(markers), per_slice)]
    # the observers that measure steps in slices too (a GPU trace's: the time attribution) read each slice's steps,
    # as ``TraceSummary.steps`` hold them less the base time, beside the slice; not where the join gave up (each of
    # their slices would hold the whole trace: they read it whole, as observers)
    sliceable = gpu.has_device_events and math.isfinite(margin)
    sliced = [o for o in observers if isinstance(o, SlicedObserver)] if sliceable else []
    # ``ts + base_us - base_us``, not ``ts``: the start rules asks a one-read table for is a step's ``start_us``
    # (``ts + base_us``) less ``base_time_us``, and the float round trip is kept so the sliced table's units are
    # those, to the last bit (the byte-identical outputs)
    units = ([[(number, ts + base_us - base_us, dur) for number, ts, dur, _ in sl.markers] for sl in slices]
             if sliced else [])
    for observer in sliced:
        for sl, part in zip(slices, observer.slice_units(units, margin, first.steps)):
            sl.parts.append(_ObserverSlice(part, hulls))
    built: dict[int, list[StepSummary]] = {}
    for n, group in enumerate(_passes(slices)):
        waiting: list[_Slice | _ObserverSlice] = sorted([*group, *(p for sl in group for p in sl.parts)],
                                                        key=lambda s: s.first)
        open_: list[_Slice | _ObserverSlice] = []
        observing = [o for o in observers if o not in sliced] if n == 0 else []
        names = Names()
        for w, window in enumerate(_windows(path, StreamState())):
            while waiting and waiting[0].first <= w:
                waiting[0].open()
                open_.append(waiting.pop(0))
            observe = observing and w > seen
            if open_ or observe:
                timed, names = timed_window(window, names)
                for sl in open_:
                    sl.add(timed)
                if observe:
                    for observer in observing:
                        observer.add_window(timed)
            for sl in [s for s in open_ if s.last <= w]:
                _build(sl, built, base_us, main_tid)
                open_.remove(sl)
        for sl in [*open_, *waiting]:  # nothing reached it (or the trace ended early): built from what it holds
            _build(sl, built, base_us, main_tid)
    for observer in sliced:
        if not observer.slices_exact():  # a slice took a fact of the whole trace wrong: it reads the trace whole
            _observe(path, [observer], -1)
    return [st for sl in slices for st in built[id(sl)]]


def _build(sl: _Slice | _ObserverSlice, built: dict[int, list[StepSummary]], base_us: float,
           main_tid: str | None) -> None:
    """Build a slice (its steps into ``built``) or an observer's part of one, once the read is past it."""
    if isinstance(sl, _ObserverSlice):
        sl.part.build()
        return
    if sl.cols is None:
        sl.open()
    built[id(sl)] = sl.build(base_us, main_tid)


def _observe(path: Path, observers: Sequence[EventObserver], seen: int) -> None:
    """Feed ``observers`` the windows of ``path`` after window ``seen`` (a read for them alone)."""
    names = Names()
    for w, window in enumerate(_windows(path, StreamState())):
        if w > seen:
            timed, names = timed_window(window, names)
            for observer in observers:
                observer.add_window(timed)


def _windows(path: Path, state: StreamState) -> Iterator[list[TraceEvent]]:
    """The reader's windows of ``path``, a file that is not UTF-8 a ``TraceFormatError`` (every read of this module).
    Every read here goes through ``timed_window``, which keeps complete events alone: the others are decoded into their
    phase alone (``complete_only``)."""
    try:
        yield from iter_trace_windows(path, state, complete_only=True)
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: not UTF-8 JSON: {exc}") from exc


__all__ = ["Collective", "EventObserver", "StepSummary", "TraceSummary", "TraceFormatError", "summarize_trace", "union_length"]
