"""The small pieces the one-pass trace collectors share (``trace_stats``, ``attribution``): the device-gap bins, ids
of (category, name) pairs read once per id, merged intervals, step markers, thread ids of a window, and the join of
device activity to the call that queued it by correlation (int64 columns matched by sorting).

Apart from ``trace_stats`` so that a collector built on them (``attribution``) can feed ``trace_stats``' own read
without an import cycle; ``trace_stats`` re-exports every name.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from diageval.bundle.trace_stream import TraceEvent

GAP_BINS_US = (10.0, 50.0, 1000.0)
SHORT_GAP_US = 1000.0
"""Device idle gaps are counted when longer than each of these (a kernel launch costs ~5 us on the
host, so a gap over 10 us is more than one launch's worth; over 1 ms is a visible stall)."""


def merge_sorted(starts: np.ndarray, ends: np.ndarray, touching_apart: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint union of intervals sorted by start: one joins the interval before it where it starts at or
    before the furthest end so far (``touching_apart``: only where it starts before it, so that intervals that merely
    touch stay apart)."""
    if not len(starts):
        return starts, ends
    reach = np.maximum.accumulate(ends)
    first = np.empty(len(starts), dtype=bool)
    first[0] = True
    (np.greater_equal if touching_apart else np.greater)(starts[1:], reach[:-1], out=first[1:])
    at = np.flatnonzero(first)
    return starts[at], np.maximum.reduceat(ends, at)


def step_markers(w: Any, kinds: list[tuple], is_step: np.ndarray) -> list[tuple[Any, Any, Any, str]]:
    """(number, start, duration, thread) of the step markers of ``w`` (where ``is_step``; item 1 of a step's kind
    is its number), the columns' one shape of a step marker."""
    steps = w.select(is_step)
    return [(kinds[i][1], ev.ts, ev.dur, str(ev.tid)) for i, ev in zip(steps.ids.tolist(), steps.events)]


def tid_strings(events: list[TraceEvent]) -> list[str]:
    """``[str(ev.tid) for ev in events]``, converting each distinct thread id once."""
    raw = [ev.tid for ev in events]
    try:
        as_str = {t: str(t) for t in set(raw)}
    except TypeError:  # an unhashable tid (a list...): one at a time
        return [str(t) for t in raw]
    return [as_str[t] for t in raw]


NO_CORR = -(2**63)  # no correlation (None), in an int64 column


def int_column(values: list[Any]) -> array | None:
    """``values`` (correlations) as an int64 column, None as ``NO_CORR``; None where any is something else (not an
    int, beyond int64, the marker itself)."""
    types = set(map(type, values))  # per value in C, not a Python test per value
    if not types <= _INT_OR_NONE:
        return None
    nones = values.count(None) if _NONE in types else 0
    try:
        col = array("q", [NO_CORR if v is None else v for v in values] if nones else values)
    except OverflowError:
        return None
    return col if np.count_nonzero(np.frombuffer(col, dtype=np.int64) == NO_CORR) == nones else None


_NONE = type(None)
_INT_OR_NONE = {int, _NONE}  # exactly: a bool (an int subclass) is not a correlation


def int_values(ints: np.ndarray | array) -> list[Any]:
    """The correlations of an int64 column as values, None for ``NO_CORR``: ``int_column``'s inverse."""
    return [None if c == NO_CORR else c for c in ints.tolist()]


class CorrelationColumn:
    """Correlations in file order, as the collectors keep them: an int64 column (``NO_CORR`` for None, 8 bytes a value
    where a Python int in a list takes ~40) while every value is an int, as in every trace seen; from the first value
    that is not, a list of the values themselves, so that any JSON value is matched as Python's equality does."""

    __slots__ = ("ints", "values")

    def __init__(self) -> None:
        self.ints = array("q")
        self.values: list[Any] | None = None

    def extend(self, values: list[Any]) -> None:
        if self.values is None:
            col = int_column(values)
            if col is not None:
                self.ints.extend(col)
                return
            self.values, self.ints = self.tolist(), array("q")
        self.values.extend(values)

    def extend_ints(self, ints: np.ndarray) -> None:
        """``extend`` by an int64 column (``NO_CORR`` for None) of values that are all ints."""
        if self.values is None:
            self.ints.frombytes(ints.tobytes())
        else:
            self.values.extend(int_values(ints))

    def __len__(self) -> int:
        return len(self.ints) if self.values is None else len(self.values)

    def column(self) -> np.ndarray | None:
        """The int64 column; None once a value was not an int (then :meth:`tolist` holds them)."""
        if self.values is not None:
            return None
        return np.frombuffer(self.ints, dtype=np.int64) if len(self.ints) else np.zeros(0, dtype=np.int64)

    def tolist(self) -> list[Any]:
        """The values, None where there was none."""
        if self.values is not None:
            return list(self.values)
        return int_values(self.ints)


def latest_match(call_corr: np.ndarray, call_ts: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``corr`` (int64, ``NO_CORR`` for none): whether a call (``call_corr``, in file order) has the same
    correlation, and the start (``call_ts``) of the latest that does (where none does, any value): a dict of the calls
    updated in file order, looked up, as int64 columns matched by sorting."""
    order = np.argsort(call_corr, kind="stable")  # equal correlations in file order: the last of each run is the latest
    call_corr, call_ts = call_corr[order], call_ts[order]
    last = np.ones(len(call_corr), dtype=bool)
    np.not_equal(call_corr[1:], call_corr[:-1], out=last[:-1])
    keep = last & (call_corr != NO_CORR)
    call_corr, call_ts = call_corr[keep], call_ts[keep]
    if not len(call_corr):
        return np.zeros(len(corr), dtype=bool), np.zeros(len(corr))
    pos = np.minimum(np.searchsorted(call_corr, corr), len(call_corr) - 1)
    return (call_corr[pos] == corr) & (corr != NO_CORR), call_ts[pos]


class IdTable:
    """A collector's reading of each (category, name) id of a :class:`Names` (``kind_of`` turns a pair into a
    tuple whose first item is its kind), grown as new ids appear: ``kind[ids]`` is a window's kinds at once."""

    def __init__(self, kind_of: Any) -> None:
        self.kind_of = kind_of
        self.names: Any = None
        self.kinds: list[tuple] = []
        self.kind = np.zeros(0, dtype=np.int8)
        self.flags: dict[int, np.ndarray] = {}

    def update(self, names: Any) -> None:
        if names is not self.names:  # a fresh Names (a new read, or past NAMES_LIMIT): its ids start again at 0
            self.names, self.kinds, self.kind, self.flags = names, [], np.zeros(0, dtype=np.int8), {}
        if len(self.kinds) < len(names.keys):
            new = [self.kind_of(*key) for key in names.keys[len(self.kinds):]]
            self.kinds += new
            self.kind = np.concatenate([self.kind, np.array([k[0] for k in new], dtype=np.int8)])
            # the flags grow by the new ids (a table made elsewhere, under a negative item, is made again)
            self.flags = {item: np.concatenate([f, _flags(new, item)]) for item, f in self.flags.items() if item >= 0}

    def flag(self, item: int) -> np.ndarray:
        """Per id: bool(item ``item`` of its kind) (False where the kind is shorter)."""
        f = self.flags.get(item)
        if f is None:
            f = self.flags[item] = _flags(self.kinds, item)
        return f


def _flags(kinds: list[tuple], item: int) -> np.ndarray:
    return np.array([len(k) > item and bool(k[item]) for k in kinds], dtype=bool)


__all__ = ["GAP_BINS_US", "SHORT_GAP_US", "merge_sorted", "step_markers", "tid_strings", "IdTable", "NO_CORR", "int_column", "int_values", "CorrelationColumn", "latest_match"]
