"""Where a rank's time went: one table per rank that sums to its wall time (issue 38).

A trace without device events (a job run on the CPU) is split by ``_attribute_host``: the main thread is the CPU's
"device", its ops the compute, and its time outside every op the idle (input work before the unit's first op, launch
in short gaps between ops, untraced in longer ones). The rest of this note is the GPU's split.

For every unit (a profiler step, a window of a step-less trace) the wall time is split into what the device
did and, for each interval in which the device idled, what the launching threads were doing. One pass: an
observer of the streaming reader (``add_window``, beside ``trace_stats.StatsCollector`` and the summary's
columns) keeps compact columns; ``attribute`` splits any list of windows afterwards.

The parts, in the order they claim an idle instant (an instant belongs to the first that holds):

* ``compute``: some device activity other than communication kernels runs;
* ``communication``: only communication kernels run (exposed communication);
* ``sync``: a host thread is blocked in a synchronising call (device/stream/event synchronize, a synchronous
  copy, an async copy whose host side is pageable memory);
* ``memory``: a host thread is inside cudaFree/hipFree (each synchronises the device) or a raw allocation;
* ``data wait``: the loop waits for its next batch (``enumerate(DataLoader)...__next__``);
* ``collective``: a host thread is inside a host-side collective (gloo, c10d, nccl record functions);
* ``queued``: none of the host states above, and the activity that ends the gap had been queued more than
  ``QUEUE_EMPTY_DELAY_US`` before it started (launch-to-start delay, matched by correlation): the device
  waited on something other than the host (a stream or event dependency, another process, a clock offset);
* ``launch``: the host is dispatching with an empty queue: the idle falls in a short gap between device
  activities (at most ``trace_stats.SHORT_GAP_US``: launch latency and per-op dispatch, not a stall), or a
  thread is inside a CPU op that queued device work;
* ``cpu work``: a launching thread is inside a top-level CPU op of at least ``SHORT_GAP_US`` that queued no
  device work (work outside the model's device work: decoding, resizing, tokenising, CPU-side math); a
  shorter op that queues nothing (a view, an empty tensor: the model's own dispatch) counts as ``launch``.
  Before the unit's first device activity it is ``input work``: a step's input is made before the model
  consumes it (decoding, resizing, tokenising inline, with no DataLoader); after it, the CPU work sits inside
  or after the model's own work (bookkeeping, post-processing) and stays ``cpu work``;
* ``untraced``: none of the above: the host is outside every recorded op (Python between ops, code the
  profiler does not record, or a trace without host events).

Each part is a sum of occurrences: for host states the merged host intervals (each wait, each blocking call,
each CPU op), for ``launch`` and ``untraced`` the device gaps, for the device parts the merged device
intervals. ``share_rows`` turns the units of a rank into shares with a standard error taken from those
occurrences (a compound-Poisson total: the square root of the sum of squared occurrence totals) and from the
spread over units (the ratio estimator's), whichever is larger: a one-step trace of thousands of gaps is
measured tightly, one long wait in one step is not.

Memory (issue 43): the collector keeps, per event of the kinds it reads, numbers in flat columns and no Python object:
a device activity's start, duration and correlation (int64 where, as in every trace seen, correlations are ints;
``_QueueJoin``) and, if not communication, its start and duration again; a queuing call's correlation and start; a
launch's start and a CPU op's start and duration per thread; each host event's start (the units' event counts); the
host states' intervals. The host span is folded as the windows stream in (two numbers). The rest is not folded per
window because nothing about a unit is known until the read ends: the units are the caller's (steps measured after
the read, or the span), device intervals, top-level ops and host states cross windows, and a kernel's launch may come
anywhere in the file (Kineto writes host events before device ones). So within one read the columns grow with the
trace (about 16 bytes per CPU op, 40 per device activity, 8-16 per runtime call and host event); ``attribute`` then
holds per segment (an interval between two instants where any part changes) its midpoint, length and labels (21
bytes) and the tally's keys, its working arrays freed before the tally. Past ``trace_summary``'s column budget the
table of a GPU trace's steps is made in the summary's second read instead (``slice_units``, ``AttributionSlices``):
one collector per slice of steps, holding the events that overlap its steps widened by ``SLICE_PAD_US`` and the
call-to-device margin, split once the read is past it and tallied in time order, so that what is held is the slices
being read (and a split one waiting for the next to say whether the device work after its last gap was queued), not
the trace: the same table, occurrence for occurrence (``AttributionSlices`` says why, and when a slice cannot know a
fact of the whole trace, which threads launch, and the trace is read whole once more). A host-only trace, or one
without step markers, is still read whole (its units are not known before the read ends).

Size: (~1000 lines) the collector's columns, the two splits (device and host-only: one vectorised sweep each over the
instants where any part changes, summed by one ``_tally``), the split in slices of units and the shares with their
errors are one unit: the parts are defined once, here, for ``trace stats`` and ``rules`` alike, the slices run the
same split over a range of the trace and their exactness rests on reading its columns the same way; splitting them
would spread one definition of a part over several modules.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, Field

from diageval.bundle import kineto as K
from diageval.bundle.trace_ids import (SHORT_GAP_US, CorrelationColumn, IdTable, latest_match, merge_sorted,
                                       step_markers)

QUEUE_EMPTY_DELAY_US = 50.0
"""A device activity that starts within this of the call that queued it found the queue empty (launch latency is
5-20 us on CUDA and ROCm; ``rules.thresholds.QUEUE_EMPTY_DELAY_US`` gives the reasoning and reads this value)."""

PARTS = ("compute", "communication", "sync", "memory", "data wait", "collective", "queued", "launch", "input work",
         "cpu work", "untraced")
DEVICE_PARTS = PARTS[:2]
IDLE_PARTS = PARTS[2:]
WHAT = {
    "compute": "the device computes",
    "communication": "the device runs only communication kernels",
    "queued": "device idle with work queued (the next kernel was launched long before it started)",
    "sync": "device idle, host blocked in a synchronising call",
    "memory": "device idle, host freeing or allocating device memory",
    "data wait": "device idle, loop waiting for its next batch (DataLoader)",
    "collective": "device idle, host inside a host-side collective",
    "launch": "device idle, host dispatching with an empty queue",
    "input work": "device idle before the step's first device work, launching thread in CPU ops that queue none",
    "cpu work": "device idle, launching thread in CPU ops that queue no device work",
    "untraced": "device idle, host outside every recorded op",
}
OCCURRENCE = {
    "compute": "device intervals", "communication": "device intervals", "queued": "device gaps", "sync": "blocking calls",
    "memory": "free/alloc calls", "data wait": "waits", "collective": "collectives", "launch": "device gaps",
    "input work": "CPU ops", "cpu work": "CPU ops", "untraced": "device gaps",
}
# the same parts on a host-only trace (``_attribute_host``: the main thread is the CPU's "device")
HOST_WHAT = {
    **WHAT,
    "compute": "the main thread runs the model's ops",
    "sync": "the main thread is blocked in a synchronising call",
    "memory": "the main thread frees or allocates device memory",
    "data wait": "the main thread waits for its next batch (DataLoader)",
    "collective": "the main thread is inside a collective",
    "launch": "the main thread is between ops at most 1 ms apart (per-op dispatch)",
    "input work": "the main thread is outside every op before the step's first op (input made inline)",
    "untraced": "the main thread is outside every op in a longer gap inside or after the model's work",
}
HOST_OCCURRENCE = {**OCCURRENCE, "compute": "ops", "launch": "gaps", "input work": "gaps", "untraced": "gaps"}
HOST_STATES = ("sync", "memory", "data wait", "collective")
"""The host states an instant is claimed by first, in this order, on both tables (a device-idle instant on a GPU trace;
any instant on a host-only one)."""
COLLECTIVE_PREFIXES = (K.GLOO_COLLECTIVE_PREFIX, "nccl:", "c10d::", "record_param_comms")

# what one (category, name) pair is to this collector
_NONE, _DEV, _LAUNCH, _BLOCK, _ASYNC, _MEM, _STEP, _OP, _ANNOT, _SPAN = range(10)
PROFILER_SPAN_CATEGORY = "Trace"  # kineto's own event over the recording ("PyTorch Profiler (0)")


def _kind(cat: str | None, name: str | None) -> tuple:
    """(kind, detail, data wait, collective): detail is a device event's communication flag and pageable mark,
    a step marker's number."""
    name = name if isinstance(name, str) else str(name)
    if cat == PROFILER_SPAN_CATEGORY:
        return (_SPAN, None, False, False)
    if cat in K.DEVICE_CATEGORIES:
        comm = cat in K.KERNEL_CATEGORIES and K.is_comm_kernel(name)
        return (_DEV, comm, cat in K.MEMCPY_CATEGORIES and K.PAGEABLE_MARK in name, False)
    if cat in K.RUNTIME_CATEGORIES:
        if name in K.LAUNCH_NAMES:
            return (_LAUNCH, None, False, False)
        if name in K.SYNC_NAMES or name in K.SYNC_COPY_NAMES:
            return (_BLOCK, None, False, False)
        if name in K.ASYNC_COPY_NAMES:
            return (_ASYNC, None, False, False)
        if name in K.FREE_NAMES or name in K.ALLOC_NAMES:
            return (_MEM, None, False, False)
        return (_NONE, None, False, False)
    if cat in K.HOST_OP_CATEGORIES:
        if name.startswith(K.PROFILER_STEP_PREFIX):
            n = K.profiler_step_number(name) if cat in K.STEP_MARKER_CATEGORIES else None
            return (_NONE, None, False, False) if n is None else (_STEP, n, False, False)
        data = name.startswith(K.DATALOADER_NEXT_PREFIX)
        coll = name.startswith(COLLECTIVE_PREFIXES)
        return (_OP if cat in K.CPU_OP_CATEGORIES else _ANNOT, None, data, coll)
    return (_NONE, None, False, False)


class TimeShare(BaseModel):
    """One part of the time table (``diageval.bundle.attribution``) over a trace's steps: its share of their summed
    time and that share's standard error."""

    part: str
    us: float
    share: float
    se: float
    occurrences: int = Field(description="The waits, calls, gaps or ops the time is made of")
    units: int = Field(description="Steps (or windows) summed")


class PartTime(BaseModel):
    us: float = 0.0
    occurrences: int = Field(0, description="Distinct occurrences (waits, calls, gaps, ops) the time is made of")
    sq_us2: float = Field(0.0, description="Sum of the squared time of each occurrence (its variance as a total)")


class UnitAttribution(BaseModel):
    """One unit's wall time split into ``PARTS`` (they sum to ``dur_us``)."""

    number: int | None
    start_us: float
    dur_us: float
    kernels: int = 0
    host_events: int = Field(0, description="CPU ops, annotations and runtime calls that start in the unit")
    parts: dict[str, PartTime] = Field(default_factory=dict)


class Attribution(BaseModel):
    """A rank's units, and each part's occurrences over all of them (an occurrence cut by a unit's edge counts once)."""

    units: list[UnitAttribution] = Field(default_factory=list)
    occurrences: dict[str, PartTime] = Field(default_factory=dict)


def _merged(ts: array, dur: array, touching_apart: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals (start, duration; a negative duration counts as none) in ``ts`` and ``dur``."""
    s = np.frombuffer(ts, dtype=np.float64) if len(ts) else np.zeros(0)
    d = np.frombuffer(dur, dtype=np.float64) if len(dur) else np.zeros(0)
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = s + np.where(d[order] > 0.0, d[order], 0.0)
    return merge_sorted(s, e, touching_apart)


def _run_starts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a sorted column starts, as a mask."""
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for values with no NaN, by a stable sort: a trace's times come nearly in order, which a
    stable sort (timsort) takes in close to linear time, where np.unique's quicksort takes n log n whatever the order
    (the 1 M segment boundaries of the 453 MB trace: 7 ms against 59)."""
    values = np.sort(values, kind="stable")
    return values[_run_starts(values)]


def _unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of an int64 column, by a stable sort, as :func:`_sorted_unique` (the
    tally's keys, unit-major and mostly in order: 8 ms against 61 for the 453 MB trace's 624 k)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = _run_starts(ordered)
    inverse = np.empty(len(keys), dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def top_level_spans(ts: array, dur: array) -> tuple[np.ndarray, np.ndarray]:
    """Top-level op intervals of one thread: ops nested in another join it; ops that merely touch (one ends where the
    next starts) stay apart, so that a CPU op that queues nothing is not merged into the launching op after it."""
    return _merged(ts, dur, touching_apart=True)


def _at_or_before(values: np.ndarray, instants: np.ndarray) -> np.ndarray:
    """``np.searchsorted(values, instants, side="right")`` where ``instants`` are sorted too (a split's segment
    midpoints): how many of the sorted ``values`` lie at or before each instant, found by placing each value among the
    instants and counting, n log m for n values where searching each of m instants costs m log n (the device intervals
    of the 453 MB trace among its 661 k segments: 7 ms against 13)."""
    placed = np.bincount(np.searchsorted(instants, values), minlength=len(instants) + 1)[:len(instants)]
    return np.cumsum(placed, out=placed)


def _member(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each instant of ``t`` (sorted): inside the merged intervals, and the index of the interval (-1 outside)."""
    if not len(starts):
        return np.zeros(len(t), dtype=bool), np.full(len(t), -1)
    k = _at_or_before(starts, t)  # in place from here: one index array per call (a segment's 8 bytes)
    k -= 1
    inside = k >= 0
    np.maximum(k, 0, out=k)
    inside &= ends[k] > t
    k[~inside] = -1
    return inside, k


def _segments(windows: list[tuple[int | None, float, float]],
              edges: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """The elementary segments the units' span is cut into by every unit boundary and every interval edge in
    ``edges`` (each a host state's or device activity's starts or ends): their midpoints and lengths, or None when
    fewer than two boundaries fall inside the span. Within a segment nothing starts or ends, so its midpoint's part
    is the whole segment's (the GPU and the host-only split both label segments by their midpoints)."""
    lo_all = windows[0][1]
    hi_all = max(w[1] + w[2] for w in windows)
    b = np.concatenate([np.array([w[1] for w in windows] + [w[1] + w[2] for w in windows]), *edges])
    b = _sorted_unique(b[(b >= lo_all) & (b <= hi_all)])
    if len(b) < 2:
        return None
    seg_lo, seg_hi = b[:-1], b[1:]
    return (seg_lo + seg_hi) / 2, seg_hi - seg_lo


def _unit_first(windows: list[tuple[int | None, float, float]], starts: np.ndarray,
                mid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each segment (its midpoint in ``mid``): when its unit's first activity starts (the first of the sorted
    ``starts`` inside the unit; the unit's end when none is), and when its unit ends."""
    w_lo = np.array([w[1] for w in windows])
    w_hi = np.array([w[1] + w[2] for w in windows])
    first = starts[np.minimum(np.searchsorted(starts, w_lo), len(starts) - 1)] if len(starts) else w_hi
    first = np.where((first >= w_lo) & (first < w_hi), first, w_hi)
    u = _at_or_before(w_lo, mid)
    u -= 1
    np.maximum(u, 0, out=u)
    return first[u], w_hi[u]


def _claim(part: np.ndarray, occ: np.ndarray, free: np.ndarray, name: str,
           membership: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Label as part ``name`` the segments still unlabeled (``free``) that ``membership`` (:func:`_member`: inside,
    interval index) puts inside an interval, that interval their occurrence; take them out of ``free`` (in place) and
    return them."""
    inside, idx = membership
    hit = free & inside
    part[hit] = PARTS.index(name)
    occ[hit] = idx[hit]
    free &= ~hit
    return hit


def _untallied(windows: list[tuple[int | None, float, float]]) -> Attribution:
    """The units with nothing split (no boundary inside their span)."""
    return Attribution(units=[UnitAttribution(number=n, start_us=lo, dur_us=d) for n, lo, d in windows])


def _labels(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``n`` segments' part and occurrence index (-1: none yet), as narrow as their values allow: a part is
    one of ``PARTS``, an occurrence an interval among at most ``n + 1`` bounds."""
    return np.full(n, -1, dtype=np.int8), np.full(n, -1, dtype=np.int32 if n < 2**31 - 2 else np.int64)


class _Bounds(NamedTuple):
    """Where one slice of a trace's units lies (``AttributionSlices``): its units in ``[start, end)`` (the next slice's
    first unit starts at ``end``), every event that overlaps ``[lo, hi]`` held; ``after`` is where the slice before
    stopped knowing the device (its ``hi`` less 1 us), ``last`` the last slice (holding every event after its start)."""

    start: float
    end: float
    lo: float
    hi: float
    after: float
    last: bool


class _Threads(NamedTuple):
    """What one slice took for facts about the whole trace's threads (``AttributionSlices.exact`` checks them)."""

    launching: set[str]  # threads seen launching inside a top-level op
    assumed_idle: set[str]  # threads whose long ops were left out as threads that never launch
    unsure: bool  # a long op that queued nothing in the slice reaches past what it holds


@dataclass
class _Labeled:
    """A split's segments (midpoint, length, part, occurrence) over sorted ``windows``, what starts in each window, and
    in a slice what goes on past its edges: per part, the occurrence that holds the slice's start (``held_in``) and
    end (``held_out``), the segments that turn ``queued`` if the device work after the slice's last gap was queued long
    before it (``tail``, occurrence ``tail_occ``), and for the slice before, whether the first device interval past its
    ``after`` was (``answer``; None: none here)."""

    windows: list[tuple[int | None, float, float]]
    mid: np.ndarray
    length: np.ndarray
    part: np.ndarray
    occ: np.ndarray
    kernels: list[int]
    host_events: list[int]
    threads: _Threads | None = None
    held_in: dict[int, int] = field(default_factory=dict)
    held_out: dict[int, int] = field(default_factory=dict)
    tail: np.ndarray | None = None
    tail_occ: int = 0
    answer: bool | None = None


# the intervals each part's occurrences are elements of (the device split): what a slice's edge is held by
_PART_SETS = {
    "device": (PARTS.index("compute"), PARTS.index("communication")),
    "gap": (PARTS.index("queued"), PARTS.index("launch"), PARTS.index("untraced")),
    **{name: (PARTS.index(name),) for name in HOST_STATES},
    "cpu work": (PARTS.index("cpu work"), PARTS.index("input work")),
}


def _gaps(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gaps around disjoint sorted intervals, gap k + 1 after interval k (the split's occurrence of a gap)."""
    return np.concatenate([[-np.inf], ends]), np.concatenate([starts, [np.inf]])


def _holding(starts: np.ndarray, ends: np.ndarray, x: float) -> int | None:
    """The index of the disjoint sorted interval that holds ``x`` strictly inside, None where none does."""
    i = int(np.searchsorted(starts, x, side="left")) - 1
    return i if i >= 0 and ends[i] > x else None


class _Totals:
    """Each part's occurrences over the units (``Attribution.occurrences``), added slice by slice in time order: an
    occurrence's time summed over its units in order, then each part's occurrences in order, as one tally of every
    unit adds them (the same floating-point sums). An occurrence that goes on into the next slice is carried."""

    def __init__(self) -> None:
        self.us = np.zeros(len(PARTS))
        self.sq = np.zeros(len(PARTS))
        self.n = np.zeros(len(PARTS), dtype=np.int64)
        self.carry: dict[int, float] = {}

    def add(self, po_keys: np.ndarray, po_at: np.ndarray, sums: np.ndarray, width: int, held_in: dict[int, int],
            held_out: dict[int, int]) -> None:
        """One slice's (part, occurrence) keys (``part * width + occurrence + 1``, sorted), each key's position of each
        (unit, part, occurrence) sum in ``sums`` (in unit order)."""
        n_parts = len(PARTS)
        carried, self.carry = self.carry, {}
        first_at: list[int] = []
        first_us: list[float] = []
        alone_p: list[int] = []
        alone_us: list[float] = []
        for p, us in carried.items():  # a carried occurrence is its part's first here
            o = held_in.get(p)
            i = _key_at(po_keys, p * width + o + 1) if o is not None else None
            if i is not None:
                first_at.append(i)
                first_us.append(us)
            elif o is not None and held_out.get(p) == o:  # it spans this slice without a segment of this part
                self.carry[p] = us
            else:
                alone_p.append(p)
                alone_us.append(us)
        po_us = np.bincount(np.concatenate([np.array(first_at, dtype=np.intp), po_at]),
                            weights=np.concatenate([np.array(first_us), sums]), minlength=len(po_keys))
        done = np.ones(len(po_keys), dtype=bool)
        for p, o in held_out.items():  # an occurrence that goes on into the next slice is its part's last here
            i = _key_at(po_keys, p * width + o + 1)
            if i is not None:
                done[i] = False
                self.carry[p] = float(po_us[i])
        p_of = np.concatenate([np.array(alone_p, dtype=np.intp), (po_keys // width)[done]])
        po_us = np.concatenate([np.array(alone_us), po_us[done]])
        at = np.concatenate([np.arange(n_parts), p_of])
        self.us = np.bincount(at, weights=np.concatenate([self.us, po_us]), minlength=n_parts)
        self.sq = np.bincount(at, weights=np.concatenate([self.sq, po_us * po_us]), minlength=n_parts)
        self.n += np.bincount(p_of, minlength=n_parts)

    def result(self) -> dict[str, PartTime]:
        if self.carry:  # the last slice carries nothing on; a trace cut short may
            self.add(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.intp), np.zeros(0), 1, {}, {})
        return {p: PartTime(us=round(us, 3), occurrences=n, sq_us2=round(sq, 3))
                for p, us, n, sq in zip(PARTS, self.us.tolist(), self.n.tolist(), self.sq.tolist())}


def _key_at(keys: np.ndarray, key: int) -> int | None:
    i = int(np.searchsorted(keys, key))
    return i if i < len(keys) and keys[i] == key else None


def _tally(lab: _Labeled, totals: _Totals) -> list[UnitAttribution]:
    """Sum the segments (midpoint, length, part, occurrence index) into each window's parts, and each part's
    occurrences over the windows into ``totals`` (an occurrence cut by a window's edge counts once)."""
    windows, mid, length, part, occ = lab.windows, lab.mid, lab.length, lab.part, lab.occ
    w_lo = np.array([w[1] for w in windows])
    w_hi = np.array([w[1] + w[2] for w in windows])
    # the tally is the split's peak of memory (the caller holds the segments): the key is built in place in the
    # units' column, and the segments are copied only where some fall outside every unit (between steps)
    unit = _at_or_before(w_lo, mid)
    unit -= 1
    ok = unit >= 0
    ok &= mid < w_hi[np.maximum(unit, 0)]
    part_k, occ_k = part, occ
    if not ok.all():
        unit, part_k, occ_k, length = unit[ok], part[ok], occ[ok], length[ok]
    del ok
    # occurrence indices from -1 (none), kept as index + 1; wide enough for the slice's held ones too
    width = max([int(occ_k.max()) if len(occ_k) else -1, *lab.held_in.values(), *lab.held_out.values()]) + 2
    key = unit  # ((unit * len(PARTS) + part) * width + occurrence + 1), in place
    key *= len(PARTS)
    key += part_k
    key *= width
    key += occ_k
    key += 1
    del unit, part_k, occ_k
    keys, inverse = _unique_inverse(key)
    del key
    sums = np.bincount(inverse, weights=length)
    del inverse
    # per (unit, part) and per part over units: numpy sums whose bincounts add in the keys' sorted order, the
    # order one Python loop over the keys would (byte-identical figures), and one pydantic row each at the end
    n_parts = len(PARTS)
    unit_part, occ_of = np.divmod(keys, width)
    # the keys are sorted, so their (unit, part)s are too: grouped by where they change, as np.unique would, no sort
    new = _run_starts(unit_part)
    up_keys, up_at = unit_part[new], np.cumsum(new) - 1
    up_us = np.bincount(up_at, weights=sums)
    up_sq = np.bincount(up_at, weights=sums * sums)
    up_n = np.bincount(up_at)
    # one occurrence over every unit: (part, occurrence) summed over units in unit order, then per part in
    # occurrence order (an occurrence cut by a unit's edge counts once)
    po_keys, po_at = _unique_inverse(unit_part % n_parts * width + occ_of)
    totals.add(po_keys, po_at, sums, width, lab.held_in, lab.held_out)
    rows: list[dict[str, PartTime]] = [{} for _ in windows]
    unit_of, part_of = (a.tolist() for a in np.divmod(up_keys, n_parts))
    for u, p, us, n, sq in zip(unit_of, part_of, up_us.tolist(), up_n.tolist(), up_sq.tolist()):
        rows[u][PARTS[p]] = PartTime(us=round(us, 3), occurrences=n, sq_us2=round(sq, 3))
    # a unit's parts cover it whole (segments are cut at its edges); rounding aside, they sum to its time
    return [UnitAttribution(number=n, start_us=lo, dur_us=d, kernels=k, host_events=h,
                            parts={p: row.get(p) or PartTime() for p in PARTS})
            for (n, lo, d), row, k, h in zip(windows, rows, lab.kernels, lab.host_events)]


class AttributionCollector:
    """Observer of one trace's read (``add_window``); ``attribute(windows)`` afterwards."""

    def __init__(self, keep: tuple[float, float] | None = None, main: str | None = None,
                 launching: frozenset[str] = frozenset()) -> None:
        self.keep = keep  # a slice of the trace (``AttributionSlices``): only the events that overlap (lo, hi)
        self.main = main  # a slice's main thread, the whole trace's (``main_tid``)
        # threads seen launching inside an op anywhere in the trace (a slice's, from the first read: ``add_facts``)
        self.launching = set(launching)
        self.sliced: AttributionSlices | None = None  # the read in slices this collector's table comes from
        self.table = IdTable(_kind)
        self.dev = (array("d"), array("d"))
        self.noncomm = (array("d"), array("d"))
        self.queue = _QueueJoin()  # each device activity's correlation, each queuing call's correlation and start
        self.launch_ts: dict[str, array] = defaultdict(lambda: array("d"))
        self.block = (array("d"), array("d"))
        self.async_copies: list[tuple[float, float, Any]] = []
        self.pageable: set[Any] = set()
        self.mem = (array("d"), array("d"))
        self.data = (array("d"), array("d"))
        self.coll = (array("d"), array("d"))
        self.ops: dict[str, tuple[array, array]] = defaultdict(lambda: (array("d"), array("d")))
        self.host_starts = array("d")
        # the earliest start and latest end of every host event and the profiler's span (a host-only trace's span),
        # folded window by window (a min of mins is the min, NaN included): two numbers, not two columns per event
        self.host_lo: Any = None
        self.host_hi: Any = None
        self.steps: list[tuple[Any, Any, Any, str]] = []

    def add_window(self, w: Any) -> None:
        """One window of the read (``trace_stats.timed_window``). A mask is tested by ``np.count_nonzero``, not its
        ``any()`` (a Python-level method, ~5x the time on a window's few hundred events, a dozen times a window)."""
        if self.keep is not None:
            w = w.select((w.ts < self.keep[1]) & (w.ends() > self.keep[0]))
            if not len(w):
                return
        table = self.table
        table.update(w.names)
        ids = w.ids
        code = table.kind[ids]
        ts, dur = w.ts, w.dur

        def put(cols: tuple[array, array], mask: np.ndarray) -> None:
            if np.count_nonzero(mask):
                cols[0].frombytes(ts[mask].tobytes())
                cols[1].frombytes(dur[mask].tobytes())

        is_dev = code == _DEV
        if np.count_nonzero(is_dev):
            put(self.dev, is_dev)
            self.queue.add_devices(w.select(is_dev))
            put(self.noncomm, is_dev & ~table.flag(1)[ids])
            pageable = is_dev & table.flag(2)[ids]
            if np.count_nonzero(pageable):
                self.pageable.update(c for c in w.select(pageable).correlations() if c is not None)
        put(self.block, code == _BLOCK)
        put(self.mem, code == _MEM)
        is_async = code == _ASYNC
        queuing = (code == _LAUNCH) | (code == _BLOCK) | is_async
        if np.count_nonzero(queuing):
            sel = w.select(queuing)
            self.queue.add_calls(sel)
        if np.count_nonzero(is_async):
            sel = w.select(is_async)
            self.async_copies.extend(zip(sel.ts.tolist(), sel.dur.tolist(), sel.correlations()))
        host = (code == _OP) | (code == _ANNOT) | (code == _LAUNCH) | (code == _BLOCK) | (code == _MEM) | is_async
        if np.count_nonzero(host):
            self.host_starts.frombytes(ts[host].tobytes())
        spans = host | (code == _SPAN)
        if np.count_nonzero(spans):
            t, d = ts[spans], dur[spans]
            lo, hi = np.minimum.reduce(t), np.maximum.reduce(t + np.where(d > 0.0, d, 0.0))  # .min(), .max()
            self.host_lo = lo if self.host_lo is None else np.minimum(self.host_lo, lo)
            self.host_hi = hi if self.host_hi is None else np.maximum(self.host_hi, hi)
        put(self.data, ((code == _OP) | (code == _ANNOT)) & table.flag(2)[ids])
        put(self.coll, ((code == _OP) | (code == _ANNOT)) & table.flag(3)[ids])
        is_step = code == _STEP
        if np.count_nonzero(is_step):
            self.steps.extend(step_markers(w, table.kinds, is_step))
        for kind, target in ((_LAUNCH, None), (_OP, self.ops)):
            mask = code == kind
            if not np.count_nonzero(mask):
                continue
            sel = w.select(mask)
            for tid, m in sel.by_thread():
                ts_m = sel.ts if m is None else sel.ts[m]
                if target is None:
                    self.launch_ts[tid].frombytes(ts_m.tobytes())
                else:
                    cols = target[tid]
                    cols[0].frombytes(ts_m.tobytes())
                    cols[1].frombytes((sel.dur if m is None else sel.dur[m]).tobytes())

    def main_tid(self) -> str | None:
        """The thread that drives the loop: the one with the most step markers, else the most launches (a slice's:
        the whole trace's)."""
        if self.keep is not None:
            return self.main
        main = most_markers(self.steps)
        if main is not None:
            return main
        if self.launch_ts:
            return max(sorted(self.launch_ts), key=lambda t: len(self.launch_ts[t]))
        if self.ops:
            return max(sorted(self.ops), key=lambda t: len(self.ops[t][0]))
        return None

    def step_windows(self) -> list[tuple[int | None, float, float]]:
        """The main thread's profiler steps (number, start, duration) in time order; without markers, ``device_span``."""
        main = self.main_tid()
        steps = sorted(((n, t, d) for n, t, d, tid in self.steps if tid == main), key=lambda s: s[1])
        return steps or self.device_span()

    def device_span(self) -> list[tuple[int | None, float, float]]:
        """One window from the first device activity's start to the last one's end (none without device events): what
        a trace without step markers is judged over. Before the first kernel a job creates its context, builds its
        model or loads its first batch, which is not the loop a cause is about (``rules.windows`` reasons alike)."""
        if not len(self.dev[0]):
            return []
        ts, dur = np.frombuffer(self.dev[0]), np.frombuffer(self.dev[1])
        lo, hi = float(ts.min()), float((ts + np.where(dur > 0.0, dur, 0.0)).max())
        return [(None, lo, hi - lo)] if hi > lo else []

    def host_span(self) -> list[tuple[int | None, float, float]]:
        """One window over every host event and the profiler's own recording span: what a host-only trace without
        step markers is judged over (its whole recording: without a device there is no first kernel to start from,
        and a window started by hand around part of a step holds its input work before the model's first op)."""
        if self.host_lo is None:
            return []
        lo, hi = float(self.host_lo), float(self.host_hi)
        return [(None, lo, hi - lo)] if hi > lo else []

    def span(self) -> list[tuple[int | None, float, float]]:
        """The window a trace without step markers is judged over: ``device_span``, else (host only) ``host_span``."""
        return self.device_span() if len(self.dev[0]) else self.host_span()

    def attribute(self, windows: list[tuple[int | None, float, float]]) -> Attribution:
        """Each window ``(number, start, duration)`` (the trace's own clock, not overlapping) split into ``PARTS``.
        After a read in slices (``AttributionSlices``) the table was made in that read, for the windows it was given:
        asked for others, this raises ``ValueError`` (the columns that could split them are gone)."""
        windows = sorted(windows, key=lambda w: w[1])
        if self.sliced is not None:
            if windows != self.sliced.windows:
                raise ValueError("the time attribution was split in slices of other windows than these")
            return self.sliced.attribution()
        if not windows:
            return Attribution()
        labeled = self._split(windows)
        if labeled is None:
            return _untallied(windows)
        totals = _Totals()
        units = _tally(labeled, totals)
        return Attribution(units=units, occurrences=totals.result())

    def _split(self, windows: list[tuple[int | None, float, float]], bounds: _Bounds | None = None) -> _Labeled | None:
        """The segments of ``windows`` (sorted by start) labeled with their part and occurrence, None when no
        boundary falls inside their span. ``bounds``: this collector holds one slice of the trace (its events
        overlapping ``bounds.lo, bounds.hi``), ``windows`` the units in it, and the trace has device events."""
        dev_s, dev_e = _merged(*self.dev)
        noncomm = _merged(*self.noncomm)
        # blocking: synchronising calls, plus async copies whose device copy touches pageable memory
        blk = (array("d", self.block[0]), array("d", self.block[1]))
        for t, d, corr in self.async_copies:
            if corr is not None and corr in self.pageable:
                blk[0].append(t)
                blk[1].append(d)
        sets = {
            "sync": _merged(*blk),
            "memory": _merged(*self.mem),
            "data wait": _merged(*self.data),
            "collective": _merged(*self.coll),
        }
        if not len(self.dev[0]) and bounds is None:
            return self._attribute_host(windows, sets)
        launching, idle_ops, threads = self._op_cover(bounds)
        sets["launch ops"] = launching
        sets["cpu work"] = idle_ops

        segments = _segments(windows, [dev_s, dev_e, *noncomm, *(edge for se in sets.values() for edge in se)])
        if segments is None:
            return None if bounds is None else _Labeled(windows, np.zeros(0), np.zeros(0), *_labels(0),
                                                        *self._counts(windows), threads=threads)
        mid, length = segments
        busy, dev_k = _member(dev_s, dev_e, mid)
        computing, _ = _member(*noncomm, mid)
        # the device gap an idle instant lies in: between device interval k and k+1 (k = -1 before the first)
        k = _at_or_before(dev_s, mid) - 1
        has_prev, has_next = k >= 0, k + 1 < len(dev_s)
        queued_after = self._queued_after(dev_s)
        queued = queued_after[np.minimum(k + 1, max(len(dev_s) - 1, 0))] if len(dev_s) else np.zeros(len(mid), dtype=bool)
        queued &= has_next
        short = np.zeros(len(mid), dtype=bool)
        if len(dev_s):
            gap_end, gap_start = dev_s[np.minimum(k + 1, len(dev_s) - 1)], dev_e[np.maximum(k, 0)]
            short = has_prev & has_next & (gap_end - gap_start <= SHORT_GAP_US)
            del gap_end, gap_start
        part, occ = _labels(len(mid))
        part[busy & computing] = PARTS.index("compute")
        part[busy & ~computing] = PARTS.index("communication")
        occ[busy] = dev_k[busy]
        idle = ~busy
        free = idle.copy()
        for name in HOST_STATES:
            _claim(part, occ, free, name, _member(*sets[name], mid))
        # a slice's last gap may end past what it holds: whether the device work after it was queued long before is
        # the next slice's to say (``AttributionSlices``); these segments turn ``queued`` if it was
        tail = np.flatnonzero(free & ~has_next) if bounds is not None and not bounds.last else None
        hit = free & queued
        part[hit] = PARTS.index("queued")
        occ[hit] = k[hit] + 1
        free &= ~hit
        in_launch, _ = _member(*sets["launch ops"], mid)
        hit = free & (short | in_launch)
        part[hit] = PARTS.index("launch")
        occ[hit] = k[hit] + 1
        free &= ~hit
        hit = _claim(part, occ, free, "cpu work", _member(*sets["cpu work"], mid))
        # before its unit's first device activity, CPU work is the step's input being made
        first, _ = _unit_first(windows, dev_s, mid)
        before = hit & (mid < first)
        part[before] = PARTS.index("input work")
        part[free] = PARTS.index("untraced")
        occ[free] = k[free] + 1
        # the split's working arrays go before the tally makes its own (about 60 bytes a segment: 40 MB of the
        # 661,253 segments of the 453 MB trace); the tally needs only the segments and their labels
        del busy, dev_k, computing, _, k, has_prev, has_next, queued, short, idle, free, hit, in_launch, first, before
        labeled = _Labeled(windows, mid, length, part, occ, *self._counts(windows), threads=threads)
        if bounds is not None:
            # the occurrences that go on past either edge of the slice: each set's element that holds the edge
            elements = {"device": (dev_s, dev_e), "gap": _gaps(dev_s, dev_e), **sets}
            for name, parts in _PART_SETS.items():
                for held, edge in ((labeled.held_in, bounds.start), (labeled.held_out, bounds.end)):
                    i = _holding(*elements[name], edge)
                    if i is not None:
                        held.update(dict.fromkeys(parts, i))
            labeled.tail, labeled.tail_occ = tail, len(dev_s)
            after = int(np.searchsorted(dev_s, bounds.after, side="right"))
            labeled.answer = bool(queued_after[after]) if after < len(dev_s) else None
        return labeled

    def _counts(self, windows: list[tuple[int | None, float, float]]) -> tuple[list[int], list[int]]:
        """Per window: the device activities and the host events that start in it."""
        kernel_starts = np.sort(np.frombuffer(self.dev[0]), kind="stable") if len(self.dev[0]) else np.zeros(0)
        host_starts = np.sort(np.frombuffer(self.host_starts), kind="stable") if len(self.host_starts) else np.zeros(0)
        lo = np.array([w[1] for w in windows])
        hi = np.array([w[1] + w[2] for w in windows])
        kernels = np.searchsorted(kernel_starts, hi) - np.searchsorted(kernel_starts, lo)
        host = np.searchsorted(host_starts, hi) - np.searchsorted(host_starts, lo)
        return kernels.tolist(), host.tolist()

    def _attribute_host(self, windows: list[tuple[int | None, float, float]],
                        sets: dict[str, tuple[np.ndarray, np.ndarray]]) -> _Labeled | None:
        """The table of a host-only trace (no device events: a job run on the CPU). The CPU's "device" is the main
        thread running the model's ops: ``compute`` is the main thread inside a top-level CPU op; ``sync``,
        ``memory``, ``data wait`` and ``collective`` claim an instant first, op or not (an op inside a DataLoader's
        ``__next__`` loads data, one inside a collective communicates); the main thread outside every op is the CPU's
        idle, split by where the gap lies: before the unit's first op (``input work``: the step's input made in
        Python before the model runs, decoding, resizing, tokenising, with no DataLoader), between two ops of the unit at
        most ``SHORT_GAP_US`` apart (``launch``: per-op dispatch, the Python and framework time between many small ops),
        else ``untraced`` (a long stretch of unrecorded Python inside or after the model's work). Occurrences:
        the ops, the intervals of each host state, the gaps."""
        main = self.main_tid()
        ops_s, ops_e = top_level_spans(*self.ops[main]) if main in self.ops else (np.zeros(0), np.zeros(0))
        segments = _segments(windows, [ops_s, ops_e, *(edge for name in HOST_STATES for edge in sets[name])])
        if segments is None:
            return None
        mid, length = segments
        part, occ = _labels(len(mid))
        free = np.ones(len(mid), dtype=bool)
        for name in HOST_STATES:
            _claim(part, occ, free, name, _member(*sets[name], mid))
        _claim(part, occ, free, "compute", _member(ops_s, ops_e, mid))
        # the gap an instant outside every op lies in: after op k, before op k + 1 (k = -1 before the first)
        k = _at_or_before(ops_s, mid) - 1
        has_prev, has_next = k >= 0, k + 1 < len(ops_s)
        gap_len = np.full(len(mid), np.inf)
        if len(ops_s):
            gap_len = ops_s[np.minimum(k + 1, len(ops_s) - 1)] - ops_e[np.maximum(k, 0)]
        first, unit_end = _unit_first(windows, ops_s, mid)
        before = free & (mid < first)
        part[before] = PARTS.index("input work")
        free &= ~before
        # between two ops of the same unit: the stretch after a step's last op is not dispatch between the model's ops,
        # even where the next step's first op follows within SHORT_GAP_US (it is the step's end: untraced)
        if len(ops_s):
            has_next &= ops_s[np.minimum(k + 1, len(ops_s) - 1)] < unit_end
        short = free & has_prev & has_next & (gap_len <= SHORT_GAP_US)
        part[short] = PARTS.index("launch")
        free &= ~short
        part[free] = PARTS.index("untraced")
        gaps = part >= PARTS.index("launch")
        occ[gaps] = k[gaps] + 1
        # as in ``attribute``: the working arrays go before the tally makes its own
        del free, k, has_prev, has_next, gap_len, first, unit_end, before, short, gaps
        return _Labeled(windows, mid, length, part, occ, *self._counts(windows))


    def _queued_after(self, dev_s: np.ndarray) -> np.ndarray:
        """Per merged device interval: its first activity was queued more than QUEUE_EMPTY_DELAY_US before it started
        (False where no call matches it)."""
        ts = np.frombuffer(self.dev[0]) if len(self.dev[0]) else np.zeros(0)
        delay = self.queue.delays(ts)
        order = np.argsort(ts, kind="stable")
        ts, delay = ts[order], delay[order]
        first = np.minimum(np.searchsorted(ts, dev_s), max(len(ts) - 1, 0))
        # the first activity of the interval: among activities starting at its start, the least delayed
        d = delay[first]
        return np.nan_to_num(d, nan=0.0) > QUEUE_EMPTY_DELAY_US

    def _op_cover(self, bounds: _Bounds | None = None) -> tuple[tuple[np.ndarray, np.ndarray],
                                                                 tuple[np.ndarray, np.ndarray], _Threads | None]:
        """Top-level CPU op intervals of every thread that queued device work in them or are too short to be work
        (``launch``), and those of the launching threads (the main thread and every thread with a launch) that ran at
        least ``SHORT_GAP_US`` and queued none (``cpu work``). In a slice (``bounds``), also what the slice took for
        the whole trace's: the threads it saw launch, those it took for threads that never launch, and whether a long op
        that queued nothing here runs past what the slice holds (it may queue work there)."""
        main = self.main_tid()
        launching = [(np.zeros(0), np.zeros(0))]
        idle = [(np.zeros(0), np.zeros(0))]
        threads = None if bounds is None else _Threads(set(), set(), False)
        for tid, (ts, dur) in sorted(self.ops.items()):
            s, e = top_level_spans(ts, dur)
            calls = (np.sort(np.frombuffer(self.launch_ts[tid]), kind="stable") if tid in self.launch_ts
                     and len(self.launch_ts[tid]) else np.zeros(0))
            n = np.searchsorted(calls, e) - np.searchsorted(calls, s)
            # an op that queues nothing is CPU work when it runs long enough to be work (SHORT_GAP_US: a visible
            # stall); shorter ones (views, allocations of the model's own dispatch) are the launch path
            dispatch = (n > 0) | (e - s < SHORT_GAP_US)
            launching.append((s[dispatch], e[dispatch]))
            if tid == main or n.any() or tid in self.launching:
                idle.append((s[~dispatch], e[~dispatch]))
            if threads is not None:
                if n.any():
                    threads.launching.add(tid)
                elif tid != main and tid not in self.launching and not dispatch.all():
                    threads.assumed_idle.add(tid)
                if tid == main or n.any() or tid in self.launching:
                    past = ~dispatch & (s < bounds.end) & (e > bounds.start) & ((s <= bounds.lo) | (e >= bounds.hi))
                    threads = threads._replace(unsure=threads.unsure or bool(past.any()))
        return _union(launching), _union(idle), threads


    def slice_units(self, units: list[list[tuple[int | None, float, float]]], margin: float,
                    markers: list[tuple[Any, Any, Any, str]]) -> list[_SliceRead]:
        """Past ``trace_summary``'s column budget: drop this read's columns and make the table of ``units`` (windows on
        the trace's own clock, sorted, in slices) in the next read, slice by slice (``AttributionSlices``); ``margin``
        is the call-to-device join's, ``markers`` every step marker of the trace. Returns the slices to feed."""
        main = most_markers(markers)
        launching = frozenset(self.launching | {tid for tid, (ts, dur) in self.ops.items()
                                                 if _launches_inside(top_level_spans(ts, dur), self.launch_ts.get(tid))})
        self.__init__()  # type: ignore[misc]
        self.sliced = AttributionSlices(units, margin, main, launching)
        return self.sliced.slices

    def add_facts(self, w: Any) -> None:
        """A window of the first read past the column budget (``trace_summary``): only the threads that launch inside
        an op of the window, what a slice of the second read could not see on its own (a thread that launches in other
        steps than the slice's: its long ops there are CPU work)."""
        self.table.update(w.names)
        code = self.table.kind[w.ids]
        is_launch = code == _LAUNCH
        if not is_launch.any():
            return
        # most windows launch from threads already known to launch (the main and the backward thread): nothing to read
        codes, tids = w.select(is_launch).thread_codes()
        if all(tids[c] in self.launching for c in np.unique(codes).tolist()):
            return
        mask = is_launch | (code == _OP)
        sel = w.select(mask)
        is_launch = is_launch[mask]
        for tid, m in sel.by_thread():
            if tid in self.launching:
                continue
            launch = is_launch if m is None else is_launch & m
            op = ~is_launch if m is None else ~is_launch & m
            if launch.any() and op.any() and _launches_inside(
                    top_level_spans(array("d", sel.ts[op].tobytes()), array("d", sel.dur[op].tobytes())),
                    array("d", sel.ts[launch].tobytes())):
                self.launching.add(tid)

    def slices_exact(self) -> bool:
        """After the read in slices: True when the table is the whole trace's (``AttributionSlices.exact``); False
        after dropping it, for the caller to feed this collector the whole trace again."""
        if self.sliced is not None and not self.sliced.exact():
            self.sliced = None
        return self.sliced is not None


def _launches_inside(spans: tuple[np.ndarray, np.ndarray], launches: array | None) -> bool:
    """Whether a launch (start) lies inside one of a thread's top-level op ``spans``, as ``_op_cover`` counts them."""
    if launches is None or not len(launches):
        return False
    calls = np.sort(np.frombuffer(launches), kind="stable")
    return bool((np.searchsorted(calls, spans[1]) - np.searchsorted(calls, spans[0])).any())


def most_markers(markers: list[tuple[Any, Any, Any, str]]) -> str | None:
    """The thread with the most step markers (the first in sorted order of those with as many), None without any."""
    counts: dict[str, int] = defaultdict(int)
    for *_, tid in markers:
        counts[tid] += 1
    return max(sorted(counts), key=counts.get) if counts else None


SLICE_PAD_US = SHORT_GAP_US
"""How far past its units a slice holds the trace (besides the margin of the call-to-device join): a gap or an op that
reaches past it is then longer than ``SHORT_GAP_US`` whatever it is beyond, so the split's short-gap and short-op tests
read the same in the slice as in the whole trace."""


class AttributionSlices:
    """The time attribution of a trace read in slices of units (``trace_summary``'s second read, past its budget):
    each slice a collector of the events that overlap its units widened by ``SLICE_PAD_US`` and ``margin`` (the
    largest gap between a runtime call and the device work it queued: a kernel's launch, an async copy's device copy),
    split when the read is past it, and tallied in time order, so that only the slices being read and the split ones
    waiting for their turn are held.

    The table is the one a read of the whole trace gives: within the units' span widened by the pad the merged
    intervals of every part, their gaps and each device interval's first activity (with its call) are the whole
    trace's; an occurrence that runs across a slice's edge is the one interval of its kind holding that instant, its
    time carried to the next slice in unit order (``_Totals``); a slice's last device gap that runs past what it holds
    is ``queued`` or not by the next slice that holds the device work after it (``_Labeled.tail``). Which threads
    launch inside an op (a thread's long ops are CPU work only on a launching thread) comes from the first read
    (``add_facts``, window by window) and from every slice. What a slice can only assume: that a thread it saw no
    launch from never launches, and that a long op reaching past what it holds queued nothing there; ``exact`` says
    whether every slice's assumptions held (the threads that launch are the union of those the slices saw) and no step
    runs into the next slice's first; where not, the caller reads the trace whole once more (the same table, at the
    memory of one read).

    Correlations are taken to match a call within ``margin`` of its device work, as ``trace_summary``'s slices take
    them: a correlation used again far apart in one trace would match differently (of the 24 real traces in
    ``../shared``, one repeats correlations: 175 of its 635 calls' correlations, each use within 0.1 s of the first).
    """

    def __init__(self, units: list[list[tuple[int | None, float, float]]], margin: float, main: str | None,
                 launching: frozenset[str] = frozenset()) -> None:
        self.windows = [w for ws in units for w in ws]
        self.main = main
        self.launching = launching
        starts = [ws[0][1] for ws in units]
        # a unit that runs into the next slice's first (steps recorded overlapping): its time past that start is the
        # later unit's in one read, which no slice can tell; the trace is then read whole
        self.overlapping = any(max(w[1] + w[2] for w in ws) > start for ws, start in zip(units, starts[1:]))
        self.slices: list[_SliceRead] = []
        for j, ws in enumerate(units):
            last = j == len(units) - 1
            start = starts[j] if j else -math.inf
            end = math.inf if last else starts[j + 1]
            lo, hi = start - SLICE_PAD_US - margin - 1.0, end + SLICE_PAD_US + margin + 1.0
            after = self.slices[-1].bounds.hi - 1.0 if j else -math.inf
            self.slices.append(_SliceRead(self, j, ws, _Bounds(starts[j], end, lo, hi, after, last)))
        self.labeled: dict[int, _Labeled] = {}
        self.threads: list[_Threads] = []
        self.next = 0
        self.units: list[UnitAttribution] = []
        self.totals = _Totals()
        self.empty = True

    def done(self, j: int, labeled: _Labeled) -> None:
        """Slice ``j`` split; tally every slice whose turn it is."""
        self.labeled[j] = labeled
        if labeled.threads is not None:
            self.threads.append(labeled.threads)
        self.empty &= not len(labeled.mid)
        while self.next in self.labeled:
            lab = self.labeled[self.next]
            if lab.tail is not None and len(lab.tail):
                queued = self._queued_after(self.next)
                if queued is None:
                    return
                if queued:
                    lab.part[lab.tail] = PARTS.index("queued")
                    lab.occ[lab.tail] = lab.tail_occ
            self.units += _tally(lab, self.totals)
            del self.labeled[self.next]
            self.next += 1

    def _queued_after(self, j: int) -> bool | None:
        """Whether the first device interval after slice ``j``'s last gap was queued long before it started (None: the
        slices that can say are not split yet). Each later slice says it for the device interval past the one before
        (its ``answer``); a slice with none passes the question on; past the last, there is no device work."""
        for m in range(j + 1, len(self.slices)):
            if m not in self.labeled:
                return None
            if self.labeled[m].answer is not None:
                return self.labeled[m].answer
        return False

    def exact(self) -> bool:
        """Every slice split and tallied, and what each took for the whole trace's threads held."""
        launching = set().union(*(t.launching for t in self.threads))
        return (self.next == len(self.slices) and not self.overlapping
                and not any(t.unsure or t.assumed_idle & launching for t in self.threads))

    def attribution(self) -> Attribution:
        if self.empty and len({w[1] for w in self.windows} | {w[1] + w[2] for w in self.windows}) < 2:
            return _untallied(self.windows)  # no boundary inside the units' span: what one read gives
        return Attribution(units=self.units, occurrences=self.totals.result())


class _SliceRead:
    """One slice's part of the read: opened, fed the read's windows, split and handed back once the read is past it."""

    def __init__(self, owner: AttributionSlices, j: int, windows: list[tuple[int | None, float, float]],
                 bounds: _Bounds) -> None:
        self.owner, self.j, self.windows, self.bounds = owner, j, windows, bounds
        self.lo, self.hi = bounds.lo, bounds.hi
        self.collector: AttributionCollector | None = None

    def open(self) -> None:
        self.collector = AttributionCollector(keep=(self.lo, self.hi), main=self.owner.main,
                                              launching=self.owner.launching)

    def add(self, w: Any) -> None:
        self.collector.add_window(w)  # type: ignore[union-attr]

    def build(self) -> None:
        if self.collector is None:
            self.open()
        labeled = self.collector._split(self.windows, self.bounds)  # type: ignore[union-attr]
        self.collector = None
        self.owner.done(self.j, labeled)  # type: ignore[arg-type]


class _QueueJoin:
    """The launch-to-start delay of each device activity: its correlation matched to the latest queuing call with the
    same one (a dict's ``update`` in file order, None never matched). Correlations are kept as
    :class:`~diageval.bundle.trace_ids.CorrelationColumn` s (int64 columns matched by sorting in every trace seen; the
    values themselves, matched by a dict, once one is not an int)."""

    def __init__(self) -> None:
        self.dev = CorrelationColumn()
        self.call_corr = CorrelationColumn()
        self.call_ts = array("d")

    def add_devices(self, w: Any) -> None:
        """A selection of a window (``trace_stats.TimedWindow``) of device activity, in file order."""
        w.extend_correlations(self.dev)

    def add_calls(self, w: Any) -> None:
        """A selection of a window of queuing calls, in file order."""
        w.extend_correlations(self.call_corr)
        self.call_ts.frombytes(w.ts.tobytes())

    def delays(self, dev_ts: np.ndarray) -> np.ndarray:
        """Per device activity (in the order added, starting at ``dev_ts``): its start less its call's (NaN: none)."""
        dev, corr = self.dev.column(), self.call_corr.column()
        if dev is None or corr is None:
            call = dict(zip(self.call_corr.tolist(), self.call_ts.tolist()))
            call.pop(None, None)
            return np.array([t - call[c] if c is not None and c in call else np.nan
                             for t, c in zip(dev_ts.tolist(), self.dev.tolist())], dtype=np.float64)
        at = np.frombuffer(self.call_ts, dtype=np.float64) if len(self.call_ts) else np.zeros(0)
        found, call_ts = latest_match(corr, at, dev)
        return np.where(found, dev_ts - call_ts, np.nan)


def _union(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.concatenate([p[0] for p in parts])
    e = np.concatenate([p[1] for p in parts])
    order = np.argsort(s, kind="stable")
    return merge_sorted(s[order], e[order])


def ratio_standard_error(parts: Sequence[float], totals: Sequence[float]) -> float:
    """Standard error of sum(parts) / sum(totals) over units (each unit's part of its total): the ratio estimator's
    error, the spread over units that :func:`share_rows` and rules' judges put beside a share. 0 for fewer than two
    units."""
    n, whole = len(parts), sum(totals)
    if n < 2 or whole <= 0:
        return 0.0
    share = sum(parts) / whole
    return math.sqrt(n / (n - 1) * sum((x - share * d) ** 2 for x, d in zip(parts, totals))) / whole


def share_rows(att: Attribution) -> list[TimeShare]:
    """Each part's share of the units' summed time, with its standard error (module doc): the larger of the
    occurrences' compound-Poisson error and the ratio estimator's error over units."""
    units = [u for u in att.units if u.dur_us > 0]
    total = sum(u.dur_us for u in units)
    if total <= 0:
        return []
    n = len(units)
    rows = []
    for p in PARTS:
        us = [u.parts[p].us if p in u.parts else 0.0 for u in units]
        share = sum(us) / total
        occ = att.occurrences.get(p)
        poisson = math.sqrt(occ.sq_us2) / total if occ else 0.0
        spread = ratio_standard_error(us, [u.dur_us for u in units])
        rows.append(TimeShare(part=p, us=sum(us), share=share, se=max(poisson, spread),
                             occurrences=occ.occurrences if occ else 0, units=n))
    return rows


def format_rows(rows: list[TimeShare], over: str, host_only: bool = False) -> list[tuple[str, str]]:
    """(line name, value) lines of the table: each part's time, share, standard error and occurrences (parts with no
    time left out, but for ``compute``), then the total the parts sum to, ``over`` what (``"4 steps"``).
    ``host_only``: the parts are the main thread's (a trace without device events)."""
    what, occurrence = (HOST_WHAT, HOST_OCCURRENCE) if host_only else (WHAT, OCCURRENCE)
    out = []
    for r in rows:
        if r.us <= 0 and r.part != "compute":
            continue
        value = (f"{r.us / 1e3:.2f} ms ({r.share:.1%}, standard error {r.se:.1%}, from {r.occurrences}"
                 f" {occurrence[r.part]}): {what[r.part]}")
        out.append((f"time: {r.part}", value))
    if rows:
        out.append(("time: total", f"{sum(r.us for r in rows) / 1e3:.2f} ms over {over}"))
    return out


__all__ = ["TimeShare", "Attribution", "ratio_standard_error", "PARTS", "DEVICE_PARTS", "IDLE_PARTS", "WHAT", "OCCURRENCE", "HOST_WHAT",
           "HOST_OCCURRENCE", "AttributionCollector", "UnitAttribution",
           "PartTime", "TimeShare", "share_rows", "format_rows"]
