"""``diageval trace stats``: the per-step measurements an expert labels a GPU trace from.

One streaming pass over a Kineto trace (``trace_stream.iter_trace_windows``) keeps compact columns, then
every figure is computed per profiler step (``ProfilerStep#N`` on the host, any torch version; a trace
without markers is measured as one window from its first to its last event):

* device busy share (union of kernels, copies and fills) and the idle gaps between device activity,
  counted by length (over 10 us, 50 us, 1 ms);
* launches and the launch-to-start delay of each kernel (kernel start minus the start of the runtime
  call that queued it, matched by ``correlation``): a few microseconds means the device was waiting
  for the host (the queue was empty), milliseconds mean the host ran ahead of a busy device;
* device time by kernel class (``kineto.kernel_class``: GEMM, convolution, communication, elementwise,
  reductions/norms, memcpy, memset, other);
* host blocking calls (device/stream/event synchronize, synchronous copies, async copies that touch
  pageable memory, ``cudaFree``/``hipFree``), their host time and the device idle time while they block;
  raw allocations (``cudaMalloc``/``hipMalloc``) are counted too;
* the DataLoader wait (``enumerate(DataLoader)...`` ranges);
* communication kernels' time, split into exposed (no other kernel runs meanwhile) and overlapped;
* per host thread: ops started in the step and the time the thread is inside an op (the autograd
  thread shows up here as work).

Size: the collector (one pass, compact columns) and the per-step measurement that reads those columns
are one unit: every column exists for a figure below, and splitting them would spread one data layout
over two modules. The table for people is apart (:mod:`diageval.bundle.trace_stats_table`).

Decisions: events are attributed to a step by their start for counts (launches, ops, calls) and by
clipped overlap for times (busy, idle, waits), so times add up inside a step. Device activity from every
device in the file counts (a Kineto trace holds one rank, whose device is the one it drives).
"""

from __future__ import annotations

import math
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from diageval.bundle import kineto as K
from diageval.bundle.trace_defects import DefectObserver, clock_disagreement
from diageval.bundle.attribution import AttributionCollector, TimeShare, share_rows
from diageval.bundle.trace_ids import (GAP_BINS_US, NO_CORR, SHORT_GAP_US, CorrelationColumn, IdTable, int_column,
                                       int_values, latest_match, merge_sorted, step_markers, tid_strings)
from diageval.bundle.trace_stream import StreamState, TraceEvent, TraceFormatError, correlations, iter_trace_windows


BLOCKING_KINDS = ("sync", "sync_copy", "pageable_copy", "free")
_KIND_OF_CALL: dict[str, str] = {
    **{n: "sync" for n in K.SYNC_NAMES},
    **{n: "sync_copy" for n in K.SYNC_COPY_NAMES},
    **{n: "free" for n in K.FREE_NAMES},
}




def _doubles(values: np.ndarray) -> array:
    """``values`` (float64) as an ``array("d")``: indexing it gives the same Python floats as ``values.tolist()``."""
    out = array("d")
    out.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return out


class Coverage:
    """Disjoint, sorted intervals (the union of the input) with prefix sums: covered length in a window.

    Held as ``array("d")`` (8 bytes a value, where a list of floats takes 32): a trace's device activity is held
    by three of these at once while its steps are measured, the peak of a read's memory."""

    def __init__(self, starts: list[float] | array | np.ndarray, durs: list[float] | array | np.ndarray):
        st = np.asarray(starts, dtype=np.float64)
        du = np.asarray(durs, dtype=np.float64)
        order = np.argsort(st, kind="stable")
        s = st[order]
        s, e = merge_sorted(s, s + np.where(du[order] > 0.0, du[order], 0.0))
        self.starts = _doubles(s)
        self.ends = _doubles(e)
        # prefix[k + 1] = (prefix[k] + ends[k]) - starts[k], summed left to right (an accumulate is sequential, and
        # adding -a is subtracting a): the same sums as a running total in Python
        steps = np.empty(2 * len(s), dtype=np.float64)
        steps[0::2] = e
        np.negative(s, out=steps[1::2])
        self.prefix = _doubles(np.concatenate([np.zeros(1), np.add.accumulate(steps)[1::2]]))

    def __len__(self) -> int:
        return len(self.starts)

    def covered(self, lo: float, hi: float) -> float:
        """Length of the union inside [lo, hi)."""
        if hi <= lo or not self.starts:
            return 0.0
        i = bisect_right(self.ends, lo)  # first interval ending after lo
        j = bisect_left(self.starts, hi)  # intervals starting before hi
        if i >= j:
            return 0.0
        total = self.prefix[j] - self.prefix[i]
        total -= max(0.0, lo - self.starts[i])
        total -= max(0.0, self.ends[j - 1] - hi)
        return max(0.0, total)

    def gaps(self, lo: float, hi: float) -> np.ndarray:
        """Idle gaps between consecutive intervals that both touch [lo, hi), in order."""
        i = bisect_right(self.ends, lo)
        j = bisect_left(self.starts, hi)
        if j - 1 <= i:
            return np.zeros(0)
        return np.frombuffer(self.starts)[i + 1 : j] - np.frombuffer(self.ends)[i : j - 1]


class BlockingStats(BaseModel):
    calls: int = 0
    host_us: float = Field(0.0, description="Time the host spent inside these calls")
    device_idle_us: float = Field(0.0, description="Of that, time the device had nothing running")


class ThreadStats(BaseModel):
    tid: str
    ops: int = Field(description="CPU ops started in the window")
    busy_us: float = Field(description="Time inside any op or annotation (union)")
    autograd: bool = Field(False, description="Runs autograd::engine::evaluate_function (the backward pass)")


class StepStats(BaseModel):
    """One profiler step (or the whole trace when it has no step markers). Times in microseconds."""

    number: int | None = Field(description="N of ProfilerStep#N; None for the whole-trace window")
    start_us: float
    dur_us: float
    device_busy_us: float = 0.0
    device_busy_share: float = 0.0
    device_idle_us: float = 0.0
    device_gaps: dict[str, int] = Field(default_factory=dict, description="Gaps between device activity longer than N us")
    device_gap_us: float = Field(0.0, description="Sum of the gaps between device activity (edges excluded)")
    device_gap_short_us: float = Field(0.0, description="Of that, the gaps of at most SHORT_GAP_US (fragmented idle)")
    kernels: int = 0
    launches: int = 0
    launch_delay_median_us: float | None = None
    launch_delay_p10_us: float | None = None
    launch_delay_p90_us: float | None = None
    device_us_by_class: dict[str, float] = Field(default_factory=dict)
    blocking: dict[str, BlockingStats] = Field(default_factory=dict)
    blocking_device_idle_us: float = Field(0.0, description="Device idle while the host blocks (union over kinds)")
    allocations: int = Field(0, description="cudaMalloc/hipMalloc calls")
    dataloader_wait_us: float = 0.0
    comm_us: float = 0.0
    comm_exposed_us: float = 0.0
    comm_overlapped_us: float = 0.0
    threads: list[ThreadStats] = Field(default_factory=list)


class TraceStats(BaseModel):
    path: str
    rank: int | None = None
    world_size: int | None = None
    devices: list[str] = Field(default_factory=list, description="deviceProperties names")
    category_style: str = Field(description="'legacy' (torch 1.8/1.9 Operator/Kernel/Runtime) or 'current'")
    has_accelerator: bool = Field(description="deviceProperties, runtime calls or device events present")
    has_device_events: bool = Field(description="Kernels, copies or fills recorded on the device timeline")
    json_bytes: int
    events: int
    seconds: float
    truncated: str | None = None
    steps: list[StepStats]
    whole_trace: bool = Field(False, description="No ProfilerStep markers: steps holds one whole-trace window")
    defects: list[str] = Field(default_factory=list, description="What the trace's own events say is wrong with it "
                               "(trace_defects.py: several ranks merged, steps recorded twice, lost timestamps)")
    time_table: list[TimeShare] = Field(default_factory=list, description="Where the steps' time went: device work and,"
                                        " for every device-idle instant, what the launching threads did (attribution.py;"
                                        " traces with device events; a host-only trace: its main thread's)")

    @property
    def mb_per_s(self) -> float:
        return self.json_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


class _Cols:
    def __init__(self) -> None:
        # columns: one entry per event (dropped by ``StatsCollector.drop_columns``)
        self.host: dict[str, tuple[array, array]] = defaultdict(lambda: (array("d"), array("d")))
        self.op_starts: dict[str, array] = defaultdict(lambda: array("d"))
        self.dev_ts = array("d")
        self.dev_dur = array("d")
        self.dev_class = array("i")  # each device event's kernel class, a code of class_code
        self.class_code: dict[str, int] = {}  # the kernel classes of the device events seen, in order of first sight
        self.dev_corr = CorrelationColumn()
        self.pageable_corr: set[Any] = set()
        # each launch's correlation and start, in file order (``launch_ts`` makes them the dict a lookup wants)
        self.launch_corr = CorrelationColumn()
        self.launch_at = array("d")
        self.launch_starts = array("d")
        self.calls: list[tuple[str, float, float, Any]] = []  # (kind or name, ts, dur, correlation)
        self.alloc_starts = array("d")
        self.waits: tuple[array, array] = (array("d"), array("d"))
        # facts about the whole trace: as many as there are steps, threads or distinct kernel names
        self.steps: list[tuple[int, float, float, str]] = []
        self.host_tids: set[str] = set()  # threads with host ops (step markers aside)
        self.autograd_tids: set[str] = set()
        self.class_of: dict[tuple[str, str], str] = {}
        self.n_device = 0
        self.legacy = False
        self.accel_cat = False
        self.lo = math.inf
        self.hi = -math.inf

    def size(self) -> int:
        """Entries held in the per-event columns (what grows with the trace)."""
        return (sum(len(ts) for ts, _ in self.host.values()) + sum(len(v) for v in self.op_starts.values())
                + len(self.dev_ts) + len(self.launch_at) + len(self.launch_starts) + len(self.calls)
                + len(self.alloc_starts) + len(self.waits[0]) + len(self.pageable_corr))

    def launch_ts(self) -> dict[Any, float]:
        """The latest launch's start per correlation: a dict updated in file order, None left out."""
        latest = dict(zip(self.launch_corr.tolist(), self.launch_at.tolist()))
        latest.pop(None, None)
        return latest


@dataclass(frozen=True)
class TimeRange:
    """The slice of a trace one pass keeps columns for: records that can change a step window in [lo, hi).

    Host activity that overlaps the range is kept; device activity and runtime calls within ``margin`` of it
    too, because a window's figures reach past it through them: a kernel's launch call (launch delay), an
    async copy's device copy (pageable or not) and the device activity under a blocking call that starts in
    the window. ``margin`` bounds all three for the trace (``StatsCollector.margin_us``).
    """

    lo: float
    hi: float
    margin: float = 0.0


class _Join:
    """The largest gap between a runtime call and the device activity it queued (matched by correlation),
    found while streaming: calls and device events wait here until their partner comes. Gives up (``None``)
    when more than ``JOIN_PENDING_LIMIT`` wait at once, so that it never holds a column itself."""

    def __init__(self) -> None:
        self.calls: dict[Any, float] = {}
        self.devices: dict[Any, float] = {}
        # matched calls: a CUDA graph launch queues many kernels under one id. An OrderedDict, because dropping the
        # oldest of a plain dict (``next(iter(d))``) walks past every slot freed since its last resize
        self.recent: OrderedDict[Any, float] = OrderedDict()
        self.max_gap: float | None = 0.0

    def feed(self, is_device: list[bool], starts: list[float], corrs: list[Any]) -> None:
        """Each event in order: a device event (``is_device``) or a runtime call, at ``starts[i]``, correlation
        ``corrs[i]`` (None: not joined). A match updates the largest gap; an unmatched event waits for its partner."""
        if self.max_gap is None:
            return
        calls, devices, recent = self.calls, self.devices, self.recent
        gap = self.max_gap
        for dev, ts, corr in zip(is_device, starts, corrs):
            if corr is None:
                continue
            if dev:
                dev_ts, call_ts = ts, calls.pop(corr, None)
                if call_ts is None:
                    call_ts = recent.get(corr)
                if call_ts is None:
                    devices[corr] = ts
            else:
                dev_ts, call_ts = devices.pop(corr, None), ts
                if dev_ts is None:
                    calls[corr] = ts
            if call_ts is None or dev_ts is None:  # waiting: give up past the limit, so that no column builds up here
                if len(calls) + len(devices) > JOIN_PENDING_LIMIT:
                    self.max_gap = None
                    self.calls, self.devices, self.recent = {}, {}, OrderedDict()
                    return
                continue
            g = abs(dev_ts - call_ts)
            if g > gap:
                gap = g
            recent[corr] = call_ts
            if len(recent) > _RECENT_LIMIT:
                recent.popitem(last=False)
        self.max_gap = gap


def _joined_in_time_order(c: _Cols, block: int = 1 << 16) -> Iterator[tuple[list[bool], list[float], list[Any]]]:
    """The joined events the columns hold (launches, copies, device activity), for ``_Join.feed`` at the drop, in
    blocks of ``block``: in order of start, a call before a device event at one instant, as the pairs happen. Fed a
    column at a time, every launch would wait for its kernel at once: the 577 MB repeated A100 trace dropped its columns
    holding 143 k launches, past ``JOIN_PENDING_LIMIT``, and its join gave up (no margin: its slices then kept device
    work whole, a third read at 237 MB). In blocks, because the drop is a read's peak of memory (its columns full):
    lists of every held event's start and correlation would add ~50 MB there. Copies are those the read joins after
    the drop (``_JOINED_CALLS``), not every blocking call."""
    copies = [(ts, corr) for kind, ts, _, corr in c.calls if kind in _JOINED_KINDS]
    copy_corr = CorrelationColumn()
    copy_corr.extend([corr for _, corr in copies])
    starts = np.concatenate([np.frombuffer(c.launch_at) if len(c.launch_at) else np.zeros(0),
                             np.array([ts for ts, _ in copies], dtype=np.float64),
                             np.frombuffer(c.dev_ts) if len(c.dev_ts) else np.zeros(0)])
    del copies
    is_device = np.zeros(len(starts), dtype=bool)
    is_device[len(starts) - len(c.dev_ts):] = True
    columns = [col.column() for col in (c.launch_corr, copy_corr, c.dev_corr)]
    ints = None if any(col is None for col in columns) else np.concatenate(columns)
    values = None if ints is not None else [*c.launch_corr.tolist(), *copy_corr.tolist(), *c.dev_corr.tolist()]
    order = np.lexsort((is_device, starts))  # stable: ties in the order above
    for i in range(0, len(order), block):
        at = order[i : i + block]
        if ints is not None:
            corrs = int_values(ints[at])
        else:
            corrs = [values[j] for j in at.tolist()]  # type: ignore[index]
        yield is_device[at].tolist(), starts[at].tolist(), corrs


JOIN_PENDING_LIMIT = 1 << 17
_RECENT_LIMIT = 1 << 12
_JOINED_CALLS = K.LAUNCH_NAMES | K.ASYNC_COPY_NAMES | K.SYNC_COPY_NAMES
# the kinds a call other than a launch is kept under in ``_Cols.calls`` (``_kind_of``'s) where the read joins it: the
# copies' (kineto's name sets are disjoint, so a kind says whether its call is joined)
_JOINED_KINDS = frozenset(_KIND_OF_CALL.get(name, "async_copy") for name in _JOINED_CALLS - K.LAUNCH_NAMES)


# What one (category, name) pair is to the collector's columns (``_kind``)
_IGNORED, _DEVICE, _RUNTIME, _STEP, _HOST, _ACCEL = range(6)
_RUNTIME_OR_DEVICE = (_DEVICE, _RUNTIME)
_LAUNCH, _ALLOC, _CALL = 0, 1, 2  # runtime calls that are neither: their blocking kind (a string), or None
_LEGACY = 6  # the item of every kind that says whether its category is a torch 1.8/1.9 one


def _kind(cat: str | None, name: str | None) -> tuple:
    """What ``StatsCollector.add_window`` does with an event of this category and name:

    * device activity: (_DEVICE, kernel class, joined by correlation, unused, class_of key, pageable copy)
    * a runtime call: (_RUNTIME, _LAUNCH / _ALLOC / its blocking kind / None, joined, blocking or async copy)
    * a step marker: (_STEP, its number); host activity: (_HOST, CPU op, autograd, data wait)
    * other accelerator events: (_ACCEL,); anything else: (_IGNORED,)

    padded with None to six items, then whether the category is a torch 1.8/1.9 one (item ``_LEGACY``).
    """
    kind = _kind_of(cat, name if isinstance(name, str) else str(name))
    return (*kind, *(None,) * (_LEGACY - len(kind)), cat in _LEGACY_CATEGORIES)


def _kind_of(cat: str | None, name: str) -> tuple:
    if cat in K.DEVICE_CATEGORIES:
        return (_DEVICE, K.kernel_class(cat, name), cat in K.KERNEL_CATEGORIES or cat in K.MEMCPY_CATEGORIES,
                None, (cat, name), cat in K.MEMCPY_CATEGORIES and K.PAGEABLE_MARK in name)
    if cat in K.RUNTIME_CATEGORIES:
        if name in K.LAUNCH_NAMES:
            sub: Any = _LAUNCH
        elif name in K.ALLOC_NAMES:
            sub = _ALLOC
        elif name in _KIND_OF_CALL or name in K.ASYNC_COPY_NAMES:
            sub = _KIND_OF_CALL.get(name, "async_copy")
        else:
            sub = None
        return (_RUNTIME, sub, name in _JOINED_CALLS, name in _KIND_OF_CALL or name in K.ASYNC_COPY_NAMES)
    if cat in K.HOST_OP_CATEGORIES:
        if name.startswith(K.PROFILER_STEP_PREFIX):
            n = K.profiler_step_number(name) if cat in K.STEP_MARKER_CATEGORIES else None
            return (_IGNORED,) if n is None else (_STEP, n)
        is_op = cat in K.CPU_OP_CATEGORIES
        return (_HOST, is_op, is_op and name.startswith(K.AUTOGRAD_PREFIX), name.startswith(K.DATALOADER_NEXT_PREFIX))
    if cat in K.GPU_EVENT_CATEGORIES:
        return (_ACCEL,)
    return (_IGNORED,)


_LEGACY_CATEGORIES = ("Kernel", "Operator")  # torch 1.8/1.9 category names
_NUMBER = (int, float, bool)  # what ``isinstance(x, (int, float))`` accepts among decoded JSON values


class Names:
    """Ids of the distinct (category, name) pairs of one read (given on first sight, in file order; ``keys`` lists the
    pairs by id): a few hundred pairs repeat millions of times, so a collector decides what a pair means once per id
    and then works on whole windows of ids (numpy). Two levels of plain dicts, category then name, so that a lookup
    hashes each string once and builds no tuple (every event's strings are fresh objects, their hash not cached), and
    a window whose pairs are all known is read by plain dict reads alone (no ``__missing__`` hook on the way: a
    fifth less of ``timed_window``'s time on the A100 trace's windows)."""

    __slots__ = ("keys", "cats")

    def __init__(self) -> None:
        self.keys: list[tuple[Any, Any]] = []
        self.cats: dict[Any, dict[Any, int]] = {}

    def ids(self, events: list[TraceEvent]) -> list[int]:
        """The id of each event's (category, name) pair; pairs not met before are given the next ids."""
        cats = self.cats
        try:
            return [cats[ev.cat][ev.name] for ev in events]
        except KeyError:  # a pair first met in this window: the known pairs by lookup, then the new ones one by one
            pass  # (in file order, so ids are given as before); a step marker's name is new in every step's window
        empty: dict[Any, int] = {}
        ids = [cats.get(ev.cat, empty).get(ev.name, -1) for ev in events]
        at = 0
        while True:
            try:
                at = ids.index(-1, at)
            except ValueError:
                return ids
            ev = events[at]
            ids[at] = self._id(ev.cat, ev.name)
            at += 1

    def _id(self, cat: Any, name: Any) -> int:
        names = self.cats.get(cat)
        if names is None:
            names = self.cats[cat] = {}
        i = names.get(name)
        if i is None:
            i = names[name] = len(self.keys)
            self.keys.append((cat, name))
        return i


NAMES_LIMIT = 1 << 16  # distinct pairs one Names holds; past it (a hostile trace) a fresh one starts


class TimedWindow:
    """A window's complete events (``ph`` X) whose start and duration are numbers, in file order, as columns:
    ``ts`` and ``dur`` (float64) and ``ids`` (of ``names``); ``events`` for the few fields read per event.

    A selection (:meth:`select`) keeps the indices of its events in the window it came from and makes its list of
    events only when asked (most selections are read through their columns alone): a read makes several selections a
    window, per collector."""

    __slots__ = ("_events", "_base", "_idx", "ts", "dur", "ids", "names", "_span", "_corr", "_tids")

    def __init__(self, events: list[TraceEvent] | None, ts: np.ndarray, dur: np.ndarray, ids: np.ndarray,
                 names: Names, base: list[TraceEvent] | None = None, idx: np.ndarray | None = None,
                 corr: list[Any] | None = None, tids: list[Any] | None = None):
        self._events, self.ts, self.dur, self.ids, self.names = events, ts, dur, ids, names
        self._base, self._idx = base, idx  # without ``events``: they are ``base`` at ``idx``
        self._span: tuple[float, float] | None = None
        # the window's decoded correlations, shared by its selections: [int64 values, decoded?] per event of the base,
        # and the values themselves once one is not an int (``_decoded``)
        self._corr = corr if corr is not None else [None, None, None]
        # the window's threads, shared alike: [code per event of the base (-1: not read yet), thread of each code,
        # code of each thread, code of each ``tid`` as written (1 and "1" are one thread)]
        self._tids = tids if tids is not None else [None, [], {}, {}]

    @property
    def events(self) -> list[TraceEvent]:
        if self._events is None:
            self._events = _pick(self._base, self._idx)  # type: ignore[arg-type]
        return self._events

    def span(self) -> tuple[float, float]:
        """(earliest start, latest end) of a non-empty window's events, NaN times skipped; computed once (the slice
        pass's hulls and the defect observer both read it)."""
        if self._span is None:
            self._span = float(np.fmin.reduce(self.ts)), float(np.fmax.reduce(self.ends()))
        return self._span

    def __len__(self) -> int:
        return len(self.ts)

    def ends(self) -> np.ndarray:
        """Each event's end: its start plus its duration, a negative (or NaN) duration counting as none."""
        return np.where(self.dur > 0.0, self.ts + self.dur, self.ts)

    def select(self, mask: np.ndarray) -> TimedWindow:
        """The events where ``mask`` (a boolean array) is true, in order."""
        idx = mask.nonzero()[0]
        if len(idx) == len(self.ts):
            return self
        if self._events is None:  # a selection of a selection: indices into the same base list
            base, at = self._base, self._idx[idx]  # type: ignore[index]
        else:
            base, at = self._events, idx
        return TimedWindow(None, self.ts[idx], self.dur[idx], self.ids[idx], self.names, base, at, self._corr,
                           self._tids)

    def thread_codes(self) -> tuple[np.ndarray, list[str]]:
        """Each event's thread as a code (int32) into the list of thread strings (``str(ev.tid)``): read once per event
        of the window whichever collector asks first (the summary's, ``trace stats``' and the time attribution's columns
        are all kept per thread), the codes the same for every selection of the window."""
        base, at = (self._events, None) if self._base is None else (self._base, self._idx)
        holder = self._tids
        if holder[0] is None:
            holder[0] = np.full(len(base), -1, dtype=np.int32)
        codes, threads, code_of, code_of_raw = holder
        if at is None:
            at = np.arange(len(base))
        need = at[codes[at] < 0]
        if len(need):
            raw = list(map(_TID, _pick(base, need)))
            try:  # each distinct tid converted to its string once; per event, a lookup of the tid as written
                for t in dict.fromkeys(raw):  # in order of first appearance, as codes are given
                    if t not in code_of_raw:
                        code_of_raw[t] = self._code(str(t))
                lookup = code_of_raw.__getitem__
            except TypeError:  # an unhashable tid (a list...): by its string, one at a time
                raw = [self._code(str(t)) for t in raw]
                lookup = int
            codes[need] = np.fromiter(map(lookup, raw), dtype=np.int32, count=len(raw))
        return codes[at], threads

    def _code(self, thread: str) -> int:
        """The code of thread string ``thread`` in this window, given the next one when first met."""
        _, threads, code_of, _ = self._tids
        code = code_of.get(thread)
        if code is None:
            code = code_of[thread] = len(threads)
            threads.append(thread)
        return code

    def by_thread(self) -> list[tuple[str, np.ndarray | None]]:
        """``by_tid(tid_strings(self.events))``: each thread in order of first appearance, with the mask of its events
        (None: all of them), from :meth:`thread_codes`."""
        codes, threads = self.thread_codes()
        if not len(codes):
            return []
        first = codes[0]
        if not np.count_nonzero(codes != first):
            return [(threads[first], None)]
        present, at = np.unique(codes, return_index=True)
        return [(threads[c], codes == c) for c in present[np.argsort(at)].tolist()]

    def threads_where(self, mask: np.ndarray) -> list[str]:
        """``[t for t, m in zip(tid_strings(self.events), mask) if m]``."""
        codes, threads = self.thread_codes()
        return [threads[c] for c in codes[mask].tolist()]

    def correlations(self) -> list[Any]:
        """``correlations(self.events)``, each event's decoded once per window whichever collector asks first (the
        stats collector and the time attribution read the same kernels' and calls'); an event's value does not
        depend on which others are decoded with it (``trace_stream.correlations``)."""
        ints, values, at = self._decoded()
        if values is not None:
            return values[at].tolist()
        return int_values(ints[at])

    def extend_correlations(self, column: CorrelationColumn) -> None:
        """``column.extend(self.correlations())``, an int64 slice of the window's where, as in every trace seen, its
        correlations are ints (no list of Python ints between: a fifth of the collectors' correlation time)."""
        ints, values, at = self._decoded()
        if values is not None:
            column.extend(values[at].tolist())
        else:
            column.extend_ints(ints[at])

    def _decoded(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """The window's correlations decoded for this selection's events: (an int64 column of the base's, ``NO_CORR``
        for none; the values themselves, None while every decoded one is an int; this selection's indices)."""
        base, at = (self._events, None) if self._base is None else (self._base, self._idx)
        holder = self._corr
        if holder[0] is None:
            holder[0], holder[1] = np.full(len(base), NO_CORR, dtype=np.int64), np.zeros(len(base), dtype=bool)
        ints, known, values = holder
        if at is None:
            at = np.arange(len(base))
        need = at[~known[at]]
        if len(need):
            decoded = correlations(_pick(base, need))
            col = int_column(decoded) if values is None else None
            if col is not None:
                ints[need] = np.frombuffer(col, dtype=np.int64)
            else:
                if values is None:  # the first value that is not an int: the window's values as objects from here
                    values = holder[2] = np.empty(len(base), dtype=object)
                    done = np.flatnonzero(known)
                    values[done] = int_values(ints[done])
                values[need] = np.fromiter(decoded, dtype=object, count=len(decoded))
            known[need] = True
        return ints, values, at


def _pick(events: list[TraceEvent], idx: np.ndarray) -> list[TraceEvent]:
    """``[events[i] for i in idx]``: by ``itemgetter`` for a few of them, by ``compress`` of a mask for many (each the
    faster there, measured on the windows of the A100 trace)."""
    n = len(idx)
    if n > 1 and 3 * n < len(events):
        return list(itemgetter(*idx.tolist())(events))
    if n <= 1:
        return [events[i] for i in idx.tolist()]
    mask = np.zeros(len(events), dtype=bool)
    mask[idx] = True
    return list(compress(events, mask.tolist()))


def timed_window(window: list[TraceEvent], names: Names) -> tuple[TimedWindow, Names]:
    """The :class:`TimedWindow` of a window of the reader, and the ``names`` to pass with the next window (a
    fresh one once ``names`` holds ``NAMES_LIMIT`` pairs, so that memory stays bounded whatever the trace)."""
    if len(names.keys) > NAMES_LIMIT:
        names = Names()
    events = [ev for ev in window if ev.ph == "X"]
    ts_list = [ev.ts for ev in events]
    dur_list = [ev.dur for ev in events]
    try:  # array("d") takes exactly the ints, floats and bools (decoded JSON holds no other real number)
        ts = np.frombuffer(array("d", ts_list))
        dur = np.frombuffer(array("d", dur_list))
    except (TypeError, OverflowError):  # rare: a value that is no number, or an integer beyond float range
        kept = [i for i, (t, d) in enumerate(zip(ts_list, dur_list))
                if t.__class__ in _NUMBER and d.__class__ in _NUMBER and _fits_float(t) and _fits_float(d)]
        events = [events[i] for i in kept]
        ts = np.array([ts_list[i] for i in kept], dtype=np.float64)
        dur = np.array([dur_list[i] for i in kept], dtype=np.float64)
    ids = np.frombuffer(array("q", names.ids(events)), dtype=np.int64)
    return TimedWindow(events, ts, dur, ids, names), names




def _fits_float(x: Any) -> bool:
    try:
        float(x)
    except OverflowError:
        return False
    return True




def tid_set(events: Iterable[TraceEvent]) -> set[str]:
    """``set(tid_strings(events))``: each distinct thread id converted once, no list per event."""
    events = list(events)
    try:
        return {str(t) for t in set(map(_TID, events))}
    except TypeError:  # an unhashable tid (a list...): one at a time
        return {str(ev.tid) for ev in events}


_TID = attrgetter("tid")






class StatsCollector:
    """Feed it every window of one trace (``add_window``, a :func:`timed_window` each), then ask for the per-step figures
    (``measure``).

    ``trace_summary`` feeds one of these during its own pass, so ``rules`` reads each trace once. Memory:
    the columns hold one entry per event; ``drop_columns`` empties them and from then on only the facts
    about the whole trace are kept (step markers, threads, kernel classes, flags, ``margin_us``). A
    collector made with a ``TimeRange`` keeps columns only for that slice, and takes the whole trace's
    threads and kernel classes from ``facts_of`` (the first pass's collector); ``measure_windows`` then
    measures the step windows inside it exactly as ``measure`` would over the whole trace (``trace_summary``
    reads a trace too large for its budget in such slices).
    """

    def __init__(self, keep: TimeRange | None = None, facts_of: StatsCollector | None = None) -> None:
        self.cols = _Cols()
        if facts_of is not None:  # a slice pass: the whole trace's threads and kernel classes come from the first
            self.cols.host_tids = set(facts_of.cols.host_tids)
            self.cols.autograd_tids = set(facts_of.cols.autograd_tids)
            self.cols.class_of = dict(facts_of.cols.class_of)
        self.keep = keep
        self.columns = True
        self.join: _Join | None = None
        self.max_block_us = 0.0
        self.table = IdTable(_kind)
        self._coded_names: Names | None = None  # the Names whose ids _class_codes describes
        self._class_codes = np.zeros(0, dtype=np.int32)  # per id: its class's code in cols.class_code (-1: not yet)

    def drop_columns(self) -> None:
        """Free the per-event columns; later events only update the facts (and the margin's join)."""
        c = self.cols
        self.join = _Join()
        for joined in _joined_in_time_order(c):
            self.join.feed(*joined)
        self.max_block_us = max((dur for _, _, dur, _ in c.calls), default=0.0)
        fresh = _Cols()
        for name in ("steps", "host_tids", "autograd_tids", "class_of", "class_code", "n_device", "legacy", "accel_cat",
                     "lo", "hi"):
            setattr(fresh, name, getattr(c, name))
        fresh.host_tids.update(c.host)
        self.cols = fresh
        self.columns = False

    @property
    def margin_us(self) -> float | None:
        """How far past a window its figures reach (see ``TimeRange``): the longest blocking call and the
        longest call-to-device gap; None when the join gave up. Known only after ``drop_columns`` and the
        whole stream."""
        if self.join is None or self.join.max_gap is None:
            return None
        return max(self.join.max_gap, self.max_block_us)

    def size(self) -> int:
        return self.cols.size()

    def add_window(self, w: TimedWindow) -> None:
        """Take one window (:func:`timed_window`): what each event is comes from its (category, name) id
        (``_kind``, decided once per id), and every column is extended a window at a time, in file order."""
        c = self.cols
        table = self.table
        table.update(w.names)
        ids = w.ids
        code = table.kind[ids]
        if not c.legacy and np.count_nonzero(table.flag(_LEGACY)[ids]):
            c.legacy = True
        is_dev = code == _DEVICE
        is_rt = code == _RUNTIME
        if not c.accel_cat and (np.count_nonzero(is_dev) or np.count_nonzero(is_rt) or np.count_nonzero(code == _ACCEL)):
            c.accel_cat = True
        n_dev = int(np.count_nonzero(is_dev))
        if n_dev:
            self._classify(ids[is_dev], table)
            if self.keep is None:
                c.n_device += n_dev
        keep = self.keep
        ts, dur = w.ts, w.dur
        if not self.columns:
            blocking = is_rt & table.flag(3)[ids]
            if np.count_nonzero(blocking):
                self.max_block_us = max(self.max_block_us, float(np.fmax.reduce(dur[blocking])))
            join = self.join
            if join is not None:
                joined = w.select((is_dev | is_rt) & table.flag(2)[ids])
                join.feed((table.kind[joined.ids] == _DEVICE).tolist(), joined.ts.tolist(), joined.correlations())
        else:
            if n_dev:
                if keep is not None:
                    lo, hi = keep.lo - keep.margin, keep.hi + keep.margin
                    is_dev = is_dev & (ts < hi) & (w.ends() > lo)
                dev = w.select(is_dev)
                c.dev_ts.frombytes(dev.ts.tobytes())
                c.dev_dur.frombytes(dev.dur.tobytes())
                c.dev_class.frombytes(self._class_codes[dev.ids].tobytes())
                dev.extend_correlations(c.dev_corr)
                pageable = table.flag(5)[dev.ids]
                if np.count_nonzero(pageable):
                    c.pageable_corr.update(corr for corr in dev.select(pageable).correlations() if corr is not None)
            if np.count_nonzero(is_rt):
                if keep is not None:
                    lo, hi = keep.lo - keep.margin, keep.hi + keep.margin
                    is_rt = is_rt & (ts >= lo) & (ts < hi)
                rt_sub = self._runtime_sub(table)[ids]
                launch = w.select(is_rt & (rt_sub == _LAUNCH))
                if len(launch):
                    c.launch_starts.frombytes(launch.ts.tobytes())
                    launch.extend_correlations(c.launch_corr)
                    c.launch_at.frombytes(launch.ts.tobytes())
                allocs = is_rt & (rt_sub == _ALLOC)
                if np.count_nonzero(allocs):
                    c.alloc_starts.frombytes(ts[allocs].tobytes())
                calls = w.select(is_rt & (rt_sub == _CALL))
                if len(calls):
                    kinds = table.kinds
                    c.calls.extend((kinds[i][1], ev.ts, ev.dur, corr) for i, ev, corr
                                   in zip(calls.ids.tolist(), calls.events, calls.correlations()))
        is_step = code == _STEP
        if np.count_nonzero(is_step) and keep is None:  # a slice's steps are the caller's
            c.steps.extend(step_markers(w, table.kinds, is_step))
        is_host = code == _HOST
        if not np.count_nonzero(is_host):
            return
        if not self.columns:  # the facts only: the threads, autograd's threads and the host span, no list per event
            self._host_facts(w, is_host, table)
            return
        host = w.select(is_host)
        if keep is None:  # a slice's threads and autograd threads are the first pass's (``facts_of``), a superset
            autograd = table.flag(2)[host.ids]
            if np.count_nonzero(autograd):
                c.autograd_tids.update(host.threads_where(autograd))
            lo_, hi_ = float(np.fmin.reduce(host.ts)), float(np.fmax.reduce(host.ts + host.dur))  # NaN: skipped
            if lo_ < c.lo:
                c.lo = lo_
            if hi_ > c.hi:
                c.hi = hi_
        else:
            klo, khi = keep.lo, keep.hi
            hts = host.ts
            inside = (hts < khi) & ((hts >= klo) | (host.ends() > klo))
            if not inside.all():
                host = host.select(inside)
            if not len(host):
                return
        waits = table.flag(3)[host.ids]
        if np.count_nonzero(waits):
            c.waits[0].frombytes(host.ts[waits].tobytes())
            c.waits[1].frombytes(host.dur[waits].tobytes())
        is_op = table.flag(1)[host.ids]
        for tid, sel in host.by_thread():
            cols = c.host[tid]
            hts = host.ts if sel is None else host.ts[sel]
            cols[0].frombytes(hts.tobytes())
            cols[1].frombytes((host.dur if sel is None else host.dur[sel]).tobytes())
            ops = is_op if sel is None else is_op[sel]
            if np.count_nonzero(ops):
                c.op_starts[tid].frombytes(hts[ops].tobytes())

    def _classify(self, ids: np.ndarray, table: IdTable) -> None:
        """Give each device (category, name) id in ``ids`` (a window's device events) its kernel class's code in
        ``cols.class_code`` (``_class_codes``), once per id, in order of first sight; reading the whole trace, the pair
        and its class go into ``class_of`` too (a slice's are the first pass's, ``facts_of``: a superset of its own,
        so that a slice's classes are the whole trace's either way)."""
        if self._coded_names is not table.names:  # a fresh Names: its ids start again at 0
            self._coded_names, self._class_codes = table.names, np.zeros(0, dtype=np.int32)
        if len(self._class_codes) < len(table.kinds):
            grown = np.full(len(table.kinds), -1, dtype=np.int32)
            grown[:len(self._class_codes)] = self._class_codes
            self._class_codes = grown
        new = ids[self._class_codes[ids] < 0]  # device pairs this read has not met yet (most windows: none)
        if not len(new):
            return
        class_code, class_of = self.cols.class_code, self.cols.class_of
        for i in dict.fromkeys(new.tolist()):  # each pair where it first shows, in file order
            kind = table.kinds[i]
            self._class_codes[i] = class_code.setdefault(kind[1], len(class_code))
            if self.keep is None and kind[4] not in class_of:
                class_of[kind[4]] = kind[1]

    def _host_facts(self, w: TimedWindow, is_host: np.ndarray, table: IdTable) -> None:
        """What a window's host activity adds to the facts (columns dropped): the same threads, autograd threads and
        span as the branch that fills columns, read through masks."""
        c = self.cols
        autograd = is_host & table.flag(2)[w.ids]
        if np.count_nonzero(autograd):
            c.autograd_tids.update(tid_set(compress(w.events, autograd.tolist())))
        hts = w.ts[is_host]
        lo_, hi_ = float(np.fmin.reduce(hts)), float(np.fmax.reduce(hts + w.dur[is_host]))  # NaN: skipped
        if lo_ < c.lo:
            c.lo = lo_
        if hi_ > c.hi:
            c.hi = hi_
        c.host_tids.update(tid_set(compress(w.events, is_host.tolist())))

    @staticmethod
    def _runtime_sub(table: IdTable) -> np.ndarray:
        """Per id: what a runtime call is (_LAUNCH, _ALLOC, _CALL, or -1)."""
        f = table.flags.get(-1)
        if f is None:
            f = table.flags[-1] = np.array(
                [(_CALL if isinstance(k[1], str) else -1 if k[1] is None else k[1]) if k[0] == _RUNTIME else -1
                 for k in table.kinds], dtype=np.int8)
        return f

    def measure(self) -> tuple[list[StepStats], bool]:
        """Every step window of the trace (or the whole trace when it has no step markers)."""
        return _measure(self.cols)

    def measure_windows(self, main_tid: str, windows: list[tuple[int, float, float]]) -> list[StepStats]:
        """The given step windows of the main thread (``(number, start, duration)``, in time order), from
        columns that hold at least this collector's ``TimeRange`` around them."""
        return _measure(self.cols, (main_tid, windows))[0]

    @property
    def has_device_events(self) -> bool:
        return self.cols.n_device > 0

    @property
    def saw_accelerator_events(self) -> bool:
        """Runtime calls, device events or sync markers (deviceProperties is checked by the caller)."""
        return self.cols.accel_cat


def quantile(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    pos = q * (len(sorted_vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def sorted_doubles(values: array) -> array:
    """``array("d", sorted(values))`` of a column of doubles, sorted by numpy (the same order for any doubles but
    NaN, which has no place in an order: a column holding one is sorted by Python, as it always was)."""
    v = np.frombuffer(values) if len(values) else np.zeros(0)
    if np.isnan(v).any():
        return array("d", sorted(values))
    return _doubles(np.sort(v, kind="stable"))


def _sorted_pairs(firsts: np.ndarray, seconds: np.ndarray) -> tuple[array, array]:
    """The firsts and seconds of ``sorted(zip(firsts, seconds))`` (by first, then second), as two columns of doubles."""
    if np.isnan(firsts).any() or np.isnan(seconds).any():  # NaN has no place in an order: Python's sort, as it was
        pairs = sorted(zip(firsts.tolist(), seconds.tolist()))
        return array("d", [p[0] for p in pairs]), array("d", [p[1] for p in pairs])
    order = np.lexsort((seconds, firsts))
    return _doubles(firsts[order]), _doubles(seconds[order])


def _launch_delays(c: _Cols) -> tuple[np.ndarray, np.ndarray]:
    """Each device event a launch queued (its correlation a launch's, the latest such as ``launch_ts`` holds), in file
    order: its start, and its start less the launch's. Int correlations (every trace seen) are matched as int64
    columns (``latest_match``: no Python per event); any other value as a dict lookup matches it."""
    dev, calls = c.dev_corr.column(), c.launch_corr.column()
    if dev is None or calls is None:
        launch_ts = c.launch_ts()
        queued = [(ts, ts - launch_ts[corr]) for ts, corr in zip(c.dev_ts, c.dev_corr.tolist())
                  if corr is not None and corr in launch_ts]
        return np.array([q[0] for q in queued], dtype=np.float64), np.array([q[1] for q in queued], dtype=np.float64)
    ts = np.frombuffer(c.dev_ts) if len(c.dev_ts) else np.zeros(0)
    found, call_ts = latest_match(calls, np.frombuffer(c.launch_at) if len(c.launch_at) else np.zeros(0), dev)
    return ts[found], ts[found] - call_ts[found]


def _count_in(sorted_starts: list[float], lo: float, hi: float) -> int:
    return bisect_left(sorted_starts, hi) - bisect_left(sorted_starts, lo)


def _measure(c: _Cols, only: tuple[str, list[tuple[int, float, float]]] | None = None) -> tuple[list[StepStats], bool]:
    # step windows: the thread with the most markers (the training thread), in time order
    tids = defaultdict(int)
    for _, _, _, tid in c.steps:
        tids[tid] += 1
    if only is not None:  # a slice of a trace: the caller chose the windows
        main, windows = only
        whole = False
    elif tids:
        main = max(tids, key=tids.get)
        windows = sorted(((n, ts, dur) for n, ts, dur, t in c.steps if t == main), key=lambda w: w[1])
        whole = False
    else:
        lo = min(c.lo, c.dev_ts[0] if c.dev_ts else math.inf)
        hi = max(c.hi, max((t + d for t, d in zip(c.dev_ts, c.dev_dur)), default=-math.inf))
        windows = [(None, lo, hi - lo)] if hi > lo else []
        whole = True

    # Memory: this is a read's peak (its columns, and these measures of them), so what is held through the steps'
    # loop is held as arrays of doubles, and the lists that sorting needs are made and dropped one at a time, the
    # largest first
    # launch-to-start delay per device event that a launch call queued, keyed by the event's start
    delay_starts, delay_values = _sorted_pairs(*_launch_delays(c))
    kernel_starts = sorted_doubles(c.dev_ts)
    launches = sorted_doubles(c.launch_starts)
    allocs = sorted_doubles(c.alloc_starts)
    device = Coverage(c.dev_ts, c.dev_dur)
    # each class's device activity, in file order; a slice shows every class of the whole trace, as a full measurement
    classes = list(dict.fromkeys([*(c.class_of.values() if only is not None else ()), *c.class_code]))
    dev_ts, dev_dur = np.frombuffer(c.dev_ts), np.frombuffer(c.dev_dur)
    dev_class = np.frombuffer(c.dev_class, dtype=np.int32) if len(c.dev_class) else np.zeros(0, dtype=np.int32)
    code = c.class_code
    class_cov = {cls: Coverage(dev_ts[dev_class == code.get(cls, -1)], dev_dur[dev_class == code.get(cls, -1)])
                 for cls in classes}
    comm = class_cov.get("communication")
    non_comm = dev_class != code.get("communication", -1)
    non_comm = Coverage(dev_ts[non_comm], dev_dur[non_comm])
    del dev_class
    if only is not None:  # every thread of the whole trace shows, as in a full measurement
        for tid in c.host_tids:
            c.host[tid]
    # blocking calls: their kind (pageable async copies decided by the copy they queued)
    blocking = []
    for kind, ts, dur, corr in c.calls:
        if kind == "async_copy":
            if corr is None or corr not in c.pageable_corr:
                continue
            kind = "pageable_copy"
        blocking.append((ts, dur, kind))
    blocking.sort()
    block_starts = [b[0] for b in blocking]
    waits = Coverage(c.waits[0], c.waits[1])
    threads = {tid: (Coverage(*cols), sorted_doubles(c.op_starts.get(tid, array("d")))) for tid, cols in c.host.items()}

    steps = []
    for number, lo, dur in windows:
        hi = lo + dur
        busy = device.covered(lo, hi)
        gaps = device.gaps(lo, hi)
        sd = delay_values[bisect_left(delay_starts, lo) : bisect_left(delay_starts, hi)].tolist()
        sd.sort()
        block: dict[str, BlockingStats] = {}
        block_iv: list[tuple[float, float]] = []
        for ts, bdur, kind in blocking[bisect_left(block_starts, lo) : bisect_left(block_starts, hi)]:
            b = block.setdefault(kind, BlockingStats())
            b.calls += 1
            b.host_us += bdur
            b.device_idle_us += bdur - device.covered(ts, ts + bdur)
            block_iv.append((ts, bdur))
        block_cov = Coverage([b[0] for b in block_iv], [b[1] for b in block_iv])
        block_idle = sum(
            (e - s) - device.covered(s, e) for s, e in zip(block_cov.starts, block_cov.ends)
        )
        comm_us = comm.covered(lo, hi) if comm else 0.0
        overlapped = 0.0
        if comm:
            i = bisect_right(comm.ends, lo)
            j = bisect_left(comm.starts, hi)
            for k in range(i, j):
                overlapped += non_comm.covered(max(lo, comm.starts[k]), min(hi, comm.ends[k]))
        steps.append(
            StepStats(
                number=number,
                start_us=lo,
                dur_us=dur,
                device_busy_us=busy,
                device_busy_share=busy / dur if dur > 0 else 0.0,
                device_idle_us=max(0.0, dur - busy),
                device_gaps={f"{b:g}": int(np.count_nonzero(gaps > b)) for b in GAP_BINS_US},
                device_gap_us=sum(gaps.tolist()),  # Python's sums, in order, as they always were
                device_gap_short_us=sum(gaps[gaps <= SHORT_GAP_US].tolist()),
                kernels=_count_in(kernel_starts, lo, hi),
                launches=_count_in(launches, lo, hi),
                launch_delay_median_us=quantile(sd, 0.5),
                launch_delay_p10_us=quantile(sd, 0.1),
                launch_delay_p90_us=quantile(sd, 0.9),
                device_us_by_class={cls: cov.covered(lo, hi) for cls, cov in sorted(class_cov.items())},
                blocking=block,
                blocking_device_idle_us=block_idle,
                allocations=_count_in(allocs, lo, hi),
                dataloader_wait_us=waits.covered(lo, hi),
                comm_us=comm_us,
                comm_exposed_us=max(0.0, comm_us - overlapped),
                comm_overlapped_us=overlapped,
                threads=sorted(
                    (
                        ThreadStats(tid=tid, ops=_count_in(starts, lo, hi), busy_us=cov.covered(lo, hi),
                                    autograd=tid in c.autograd_tids)
                        for tid, (cov, starts) in threads.items()
                    ),
                    key=lambda t: (-t.busy_us, t.tid),
                ),
            )
        )
    return steps, whole


def trace_stats(path: Path) -> TraceStats:
    """Measure one trace file. Raises ``TraceFormatError`` when it is not a Chrome trace."""
    path = Path(path)
    state = StreamState()
    started = time.perf_counter()
    collector = StatsCollector()
    defects = DefectObserver()
    attribution = AttributionCollector()
    names = Names()
    try:
        for window in iter_trace_windows(path, state, complete_only=True):  # timed_window keeps complete events alone
            timed, names = timed_window(window, names)
            collector.add_window(timed)
            defects.add_window(timed)
            attribution.add_window(timed)
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: not UTF-8 JSON: {exc}") from exc
    steps, whole = collector.measure()
    cols = collector.cols
    header = state.header
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    props = header.get("deviceProperties") if isinstance(header.get("deviceProperties"), list) else []
    devices = [d["name"] for d in props if isinstance(d, dict) and isinstance(d.get("name"), str)]
    rank = dist.get("rank")
    world = dist.get("world_size")
    return TraceStats(
        path=str(path),
        rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        world_size=world if isinstance(world, int) and not isinstance(world, bool) else None,
        devices=devices,
        category_style="legacy" if cols.legacy else "current",
        has_accelerator=bool(devices) or collector.saw_accelerator_events,
        has_device_events=collector.has_device_events,
        json_bytes=state.json_bytes,
        events=state.n_events,
        seconds=time.perf_counter() - started,
        truncated=state.truncated,
        defects=defects.findings() + [why for why in [clock_disagreement(steps)] if why],
        steps=steps,
        whole_trace=whole,
        time_table=share_rows(attribution.attribute(
            attribution.span() if whole else [(s.number, s.start_us, s.dur_us) for s in steps]))
        # a trace that shows an accelerator but no device events has no device to split, and its host is not the device
        if collector.has_device_events or not (devices or collector.saw_accelerator_events) else [],
    )


__all__ = ["Names", "IdTable", "TimedWindow", "timed_window", "step_markers", "merge_sorted", "NAMES_LIMIT", "tid_strings", "StatsCollector", "TimeRange", "JOIN_PENDING_LIMIT", "Coverage", "StepStats", "TimeShare", "TraceStats", "ThreadStats", "BlockingStats",
           "trace_stats", "quantile", "sorted_doubles", "GAP_BINS_US", "SHORT_GAP_US", "BLOCKING_KINDS"]
