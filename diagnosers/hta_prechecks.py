"""What HolisticTraceAnalysis (traceinsight 0.6.x) is known to crash on, checked before it runs.

Each check reproduces the condition under which HTA's own code fails, measured on the real traces
(notes/measured.md), so that the ``hta`` adapter abstains on that input with the reason instead of ending
the case ``diagnoser_error``. Plain functions; the loader check reads the trace with diageval's own
streaming reader, the critical-path check reads HTA's already parsed frame.

* **Correlation ids overflow their column (ROCm traces).** HTA's parser downcasts each column to the
  smallest integer type that holds it (``pd.to_numeric(downcast="integer")``), so ``correlation`` becomes
  int8/int16 when a trace's correlation ids are small (roctracer numbers them per session: 8278 at most in
  the MI300X trace). ``transform_correlation_to_index`` then initialises ``index_correlation`` from that
  column and writes into it the positions (in ``traceEvents``) of the host and device events it pairs by
  correlation id; a position past what the type holds (56363 in that trace) makes pandas 3 refuse the write
  (``TypeError: Invalid value ... for dtype 'int16'``; pandas 2 silently upcast). Checked: the largest
  paired position against the range of the type the correlation ids downcast to.
* **Launches HTA's critical path cannot see (legacy traces).** The critical path makes graph nodes only for
  events of category ``cpu_op``, ``cuda_runtime`` or ``cuda_driver``
  (``TraceSymbolTable.get_operator_or_cuda_runtime_mask``); a kernel or copy launched from an event of any
  other category (torch 1.8/1.9 write ``Runtime`` and ``Operator``) has no node to link to, and HTA asserts
  ("Could not find runtime index"). Checked: the categories of the events HTA itself links the device events
  to (``index_correlation``).
* **Device events shorter than a microsecond.** HTA rounds nanosecond-resolution timestamps to whole
  microseconds, start and end apart, which leaves an event of 0.02 us with a duration of -1 (kineto's own test
  trace); its temporal breakdown then asserts ``idle_time <= kernel_time``. Checked: HTA's own per-rank
  arithmetic replayed on its parsed frame, the assertions tested instead of raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from diageval.bundle.trace_stream import StreamState, TraceFormatError, iter_trace_events

CRITICAL_PATH_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")  # and cpu_op, which launches nothing


def _int_type_max(lo: int, hi: int) -> int:
    """The largest value of the smallest signed integer type holding [lo, hi] (pandas' downcast="integer")."""
    for bits in (8, 16, 32, 64):
        if -(2 ** (bits - 1)) <= lo and hi < 2 ** (bits - 1):
            return 2 ** (bits - 1) - 1
    return 2**63 - 1


def pandas_refuses_upcast() -> bool:
    """pandas 3 raises on writing a value its integer column cannot hold; pandas 2 upcast with a warning."""
    return int(pd.__version__.split(".")[0]) >= 3


def loader_blocker(path: Path, *, refuses_upcast: bool | None = None) -> str | None:
    """Why HTA's trace loader would crash on ``path`` (see the module docstring), or None.

    Mirrors ``transform_correlation_to_index``: host events and device events (those with a ``stream``) that
    share a correlation id are paired, and each side's position in ``traceEvents`` is written into a column of
    the correlation ids' own downcast type; the load fails when a paired position does not fit it."""
    refuses = pandas_refuses_upcast() if refuses_upcast is None else refuses_upcast
    if not refuses:
        return None
    lo, hi = -1, -1  # HTA fills a missing correlation with -1
    host: dict[int, int] = {}
    device: dict[int, int] = {}
    try:
        for position, ev in enumerate(iter_trace_events(Path(path), StreamState())):
            if ev.ph != "X" or ev.cat is None:
                continue
            args = ev.decoded_args()
            corr = args.get("correlation")
            if not isinstance(corr, int) or isinstance(corr, bool):
                continue
            lo, hi = min(lo, corr), max(hi, corr)
            if corr == -1:
                continue
            stream = args.get("stream")
            side = device if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0 else host
            side[corr] = max(side.get(corr, -1), position)
    except (TraceFormatError, OSError, UnicodeDecodeError):
        return None  # an unreadable file is reported as such by the adapter's own loader
    paired = [max(host[c], device[c]) for c in host.keys() & device.keys()]
    biggest = _int_type_max(lo, hi)
    if not paired or max(paired) <= biggest:
        return None
    return (
        f"HTA's loader cannot hold this trace's event indices: its correlation ids ({lo}..{hi}) downcast to an"
        f" integer column holding at most {biggest}, and HTA writes into it the positions of the events it pairs"
        f" by correlation, up to {max(paired)}, which pandas {pd.__version__} refuses (the int16 overflow of"
        " ROCm traces)"
    )


def critical_path_blocker(t: Any, rank: int) -> str | None:
    """Why HTA's critical path would fail on ``rank`` of the loaded HTA ``Trace`` ``t``, or None (a device event of
    negative duration breaks its graph too: "HTA could not find a critical path")."""
    rounding = gpu_analyses_blocker(t, rank)
    if rounding is not None:
        return rounding.replace("its temporal breakdown would assert 'idle_time <= kernel_time'",
                                "its critical path comes out empty ('HTA could not find a critical path')")
    df = t.get_trace(rank)
    if "index_correlation" not in df.columns:
        return None
    device = df[(df["stream"] != -1) & (df["index_correlation"] > 0)]
    if device.empty:
        return None
    symbols = t.symbol_table.get_sym_table()
    index = t.symbol_table.get_sym_id_map()
    allowed = {index.get(c) for c in CRITICAL_PATH_LAUNCH_CATEGORIES} - {None}
    launchers = df.loc[df.index.intersection(device["index_correlation"].unique()), "cat"]
    outside = sorted({symbols[int(c)] for c in launchers.unique() if int(c) not in allowed and 0 <= int(c) < len(symbols)})
    if not outside:
        return None
    return (
        f"HTA's critical path links device work only to launches of category {'/'.join(CRITICAL_PATH_LAUNCH_CATEGORIES)},"
        f" and this trace launches from {', '.join(repr(c) for c in outside)} (the torch 1.8/1.9 category names):"
        " it would assert 'Could not find runtime index'"
    )


def gpu_analyses_blocker(t: Any, rank: int) -> str | None:
    """Why HTA's temporal breakdown would assert on ``rank`` of the loaded HTA ``Trace`` ``t``, or None: its own
    per-rank arithmetic (``BreakdownAnalysis.get_temporal_breakdown``'s ``idle_time_per_rank``) replayed on the
    rank's device events, with the three assertions it makes checked instead of asserted."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import KernelType, get_kernel_type, merge_kernel_intervals

    df = t.get_trace(rank)
    device = df[df["stream"].ne(-1)].copy()
    if device.empty:
        return None
    idle, kernel_time = BreakdownAnalysis._get_idle_time_for_kernels(device)
    symbols = t.symbol_table.get_sym_table()
    kinds = device["name"].map(lambda n: get_kernel_type(symbols[n]))
    compute = merge_kernel_intervals(device[kinds.eq(KernelType.COMPUTATION.name)].copy())
    compute_time = compute.end.sum() - compute.ts.sum()
    if idle <= kernel_time and compute_time <= kernel_time and kernel_time - compute_time - idle >= 0:
        return None
    negative = int((device["dur"] < 0).sum())
    return (
        f"HTA's rounding to whole microseconds leaves {negative} device event(s) with a negative duration (events"
        f" shorter than a microsecond), and its device time comes out as {kernel_time:g} us with {idle:g} us idle:"
        " its temporal breakdown would assert 'idle_time <= kernel_time'"
    )


__all__ = ["loader_blocker", "critical_path_blocker", "gpu_analyses_blocker", "pandas_refuses_upcast"]
