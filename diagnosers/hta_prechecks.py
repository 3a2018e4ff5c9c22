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
* **Traces too large for the memory HTA may use.** HTA holds every rank's events in pandas frames and their
  derived columns at once: it held 13.9 GB for one 452 MB trace (issue 14, ``benchmarks/big_trace.py``),
  ``HTA_BYTES_PER_JSON_BYTE`` = 31 bytes of memory per byte of trace JSON, and its users report 950 GB for
  200 GB of traces (4.75 per byte, with their own columns dropped; the larger measured ratio is kept: a
  refusal costs an abstention, an overrun a killed case). Checked before anything is read: the traces' JSON
  bytes (a gzip file's own size field, else the file size) times that ratio against what this process may
  use (its address-space limit, its cgroup's memory limit, the machine's memory: the least of them).
* **More ranks than HTA reads in a case's time.** HTA parses and analyses each rank's trace on its own:
  ``benchmarks/scale.py`` measured about ``HTA_CPU_S_PER_RANK`` = 0.4 CPU seconds per rank on top of
  ``HTA_CPU_S_BASE`` = 6 s (a straggler job on a loaded 2-core machine: 5.8 to 7.1 CPU s at 2 ranks, 10.4 to 11.2 at 16,
  50.7 at 128).
  A bundle whose traces it would need longer than ``HTA_TIME_BUDGET_S`` (the host's default per-case limit,
  ``hosting.policy.DEFAULT_TIMEOUT_S``) for is refused before anything is parsed: at that speed it would be
  killed at the limit, and a 1024-rank job would hold a 2-core machine for 7 minutes to say so.
* **Device events shorter than a microsecond.** HTA rounds nanosecond-resolution timestamps to whole
  microseconds, start and end apart, which leaves an event of 0.02 us with a duration of -1 (kineto's own test
  trace); its temporal breakdown then asserts ``idle_time <= kernel_time``. Checked: HTA's own per-rank
  arithmetic replayed on its parsed frame, the assertions tested instead of raised.
"""

from __future__ import annotations

import os
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


HTA_BYTES_PER_JSON_BYTE = 31  # 13.9 GB held for a 452 MB trace (see the module docstring)


DEFLATE_MAX_RATIO = 1032


def trace_json_bytes(path: Path) -> int:
    """Bytes of JSON in a trace file without reading it: a gzip file's ISIZE trailer (its size mod 2^32, so
    never less than the compressed size is taken; ignored when no DEFLATE stream could expand that far),
    else the file's size."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b" or size < 18:
            return size
        fh.seek(-4, 2)
        isize = int.from_bytes(fh.read(4), "little")
    # DEFLATE expands at most 1032:1: a larger trailer is not one (a cut or damaged file; its reader says so)
    return max(size, isize) if isize <= DEFLATE_MAX_RATIO * size else size


def usable_memory() -> int:
    """Bytes this process may use: the least of its address-space limit, its cgroup's limit and the machine's memory."""
    import resource

    limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    for cgroup in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(cgroup).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits)


HTA_CPU_S_PER_RANK = 0.4
HTA_CPU_S_BASE = 6.0
HTA_TIME_BUDGET_S = 300.0  # diageval.hosting.policy.DEFAULT_TIMEOUT_S (the adapter runs in the box: no import)


def rank_count_blocker(paths: dict[int, str]) -> str | None:
    """Why HTA would not finish these traces within a case's default time limit (module docstring), or None."""
    need = HTA_CPU_S_BASE + HTA_CPU_S_PER_RANK * len(paths)
    if need <= HTA_TIME_BUDGET_S:
        return None
    return (f"HTA would need about {need:.0f} CPU seconds for {len(paths)} ranks' traces ({HTA_CPU_S_PER_RANK} s a rank, "
            f"as measured), more than a case's {HTA_TIME_BUDGET_S:.0f} s limit")


def memory_blocker(paths: dict[int, str], *, available: int | None = None) -> str | None:
    """Why HTA would run out of memory on these traces together (see the module docstring), or None."""
    json_bytes = sum(trace_json_bytes(Path(p)) for p in paths.values())
    need = json_bytes * HTA_BYTES_PER_JSON_BYTE
    have = usable_memory() if available is None else available
    if need <= have:
        return None
    return (f"HTA would need about {need / 1e9:.1f} GB for {len(paths)} traces of {json_bytes / 1e6:.0f} MB of JSON "
            f"({HTA_BYTES_PER_JSON_BYTE} bytes a byte, as it held for a 452 MB trace), more than the "
            f"{have / 1e9:.1f} GB this process may use")


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


__all__ = ["rank_count_blocker", "memory_blocker", "trace_json_bytes", "usable_memory", "loader_blocker", "critical_path_blocker", "gpu_analyses_blocker", "pandas_refuses_upcast"]
