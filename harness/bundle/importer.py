"""Bring your own traces: wrap existing torch.profiler (Kineto) traces into an evidence bundle.

``diageval bundle import TRACE_OR_DIR... --out DIR`` lets anyone run the diagnosers on traces they already
have (one Chrome-trace file per rank, ``.json`` or ``.json.gz``; a folder stands for every such file
directly inside it). The result is an ordinary bundle with ``origin: "imported"``:

``bundle.json``
    opaque ``bundle_id`` (a hash of the trace contents: importing the same traces twice gives the same id),
    ``env`` read from the traces themselves (see :func:`env_from_traces`), checksums of every file.
``rank<N>/trace.json.gz``
    each input trace, byte for byte when it was already gzipped, else gzipped (level 1, no timestamp).
``steps.jsonl`` (only when derivable)
    one row per ``ProfilerStep#N`` CPU annotation per rank: ``step`` = N, ``t_start``/``t_end`` in epoch
    seconds (``ts`` + ``baseTimeNanoseconds``; traces without ``baseTimeNanoseconds`` already carry epoch
    microseconds). Traces recorded without a profiler schedule have no step markers and get no steps file.

``import_report.json`` (only when there is something to say)
    what the import found wrong with the evidence and what it did: a file holding several ranks split into one
    trace per rank, events a restarted profiler duplicated dropped, events stamped ``ts`` 0 counted and kept
    (:mod:`~diageval.bundle.import_repairs`, which says why; ``repair=False`` / ``--no-repair`` imports every file
    as given and still records what was found). The same detector as ``trace stats`` and rules
    (:mod:`~diageval.bundle.trace_defects`) sees each event in the importer's one pass.

No metrics or logs are invented.

Size: over 400 lines because one import is one unit: find the files, read each once (facts, time checks, the
defect detector), rank them, check they are one job, and write the bundle; what is done about a defect lives in
``import_repairs``. Rank of each file, in order of preference: ``distributedInfo.rank``,
a number after ``rank`` in the file name (``rank-34.….json.gz``, ``sampled_rank-1.json.gz``, ``rank0.json``),
else the lowest rank not yet taken, in the order the files were given. Two files with the same rank, or
a file that is not a JSON trace, stop the import with an error naming the file(s). The bundle is built in
a temporary sibling folder and renamed into place, so a failed import leaves nothing behind.

Memory does not grow with trace size: each trace is streamed once through the shared reader
(``trace_stream``), which finds the header, GPU events and step markers on the way and keeps nothing else,
then copied (``.gz``) or gzipped (``.json``) a block at a time.

Bounds, each with a flag to raise it (decided here): a trace may decompress to at most
``MAX_TRACE_BYTES`` (4 GiB; ``--max-trace-gib``), so a gzip bomb is refused after reading that much; a
job may have at most ``MAX_WORLD_SIZE`` ranks (2^20, above the largest training jobs reported so far;
``--max-world-size``), because readers list the ranks ``0 .. world_size-1`` and a rank of 10^9 in a
file name would otherwise become a world size of 10^9. Every rank present must lie below the world
size the traces declare.

Times are checked: an event whose ``ts`` is NaN or infinite, or whose ``dur`` is negative, NaN or infinite, stops the import
with an error naming the file and the event (its index among the objects of ``traceEvents``, its name), because
every reader (and hta, which showed its own traceback first) takes times as finite and durations as >= 0 (a negative
``ts`` is only a point before the clock's origin: a trace shifted by hand has them, and every reader orders by it); no real
trace of the shared folder has one. A value that is not a number is left to the readers, as before. NaN and
infinities reach the importer only through ``trace_stream``'s ``json`` fallback (msgspec refuses them), negative
numbers through either path, so the check is not in the shared reader (every diagnoser's path) but in the
importer's own loop over each event: two chained comparisons, paid for by calling the step-marker test only on
events of a marker category (``read_trace_facts`` on the 229,459-event MI300 trace: 0.213-0.220 CPU s min, 0.237
median of 15, before and after, at load 11; ``benchmarks/big_trace.py`` measures the whole import). Feeding the
defect detector the same windows costs about a third more: 0.296-0.310 CPU s min against 0.221-0.226 without it
(two rounds of 5, loaded machine), the price of naming a defect without a read of its own.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from diageval.bundle.kineto import (
    GPU_EVENT_CATEGORIES,
    PROFILER_STEP_PREFIX,
    STEP_MARKER_CATEGORIES,
    profiler_step_number,
)
from diageval.bundle.import_repairs import (
    Finding,
    ImportNote,
    TraceRepairError,
    describe_note,
    finding_of,
    read_report,
    repair_file,
    write_report,
)
from diageval.bundle.model import MANIFEST_NAME, BundleEnv, BundleManifest, EvidenceBundle, StepRecord, describe_files
from diageval.bundle.trace_defects import DefectObserver
from diageval.bundle.trace_stats import Names, timed_window
from diageval.bundle.trace_stream import (
    StreamState,
    TraceEvent,
    TraceFormatError,
    TraceTooLargeError,
    iter_trace_windows,
)
from diageval.errors import DiagevalError
from diageval.fileio import atomic_write_text, write_jsonl

TRACE_SUFFIXES = (".json", ".json.gz")
MAX_TRACE_BYTES = 4 << 30
MAX_WORLD_SIZE = 1 << 20
_COPY_BLOCK = 1 << 20
_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
_INF = float("inf")


class TraceImportError(DiagevalError, ValueError):
    """A trace that cannot be imported; the message names the file and what was expected."""


@dataclass
class TraceFacts:
    """What the importer reads from one trace file (the file itself is copied untouched)."""

    path: Path
    rank_from_trace: int | None
    world_size: int | None
    backend: str | None
    gpu_names: list[str]
    has_gpu_events: bool
    host: str | None
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # (step, t_start, t_end) epoch s
    finding: Finding | None = None  # what the defect detector saw (import_repairs)


def find_trace_files(paths: list[Path]) -> list[Path]:
    """Expand folders into the ``.json``/``.json.gz`` files directly inside them; check plain files exist."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise TraceImportError(f"{p}: folder has no trace files (expected *.json or *.json.gz)")
            files.extend(found)
        elif p.is_file():
            if not p.name.endswith(TRACE_SUFFIXES):
                raise TraceImportError(f"{p}: not a trace file (expected a name ending in .json or .json.gz)")
            files.append(p)
        else:
            raise TraceImportError(f"{p}: no such file or folder")
    resolved = [f.resolve() for f in files]
    dupes = [str(f) for f, n in Counter(resolved).items() if n > 1]
    if dupes:
        raise TraceImportError(f"the same file was given twice: {', '.join(dupes)}")
    return files


def trace_files_of(path: Path) -> list[Path]:
    """The trace files ``path`` stands for: itself, a bundle's rank traces, or the traces in a folder."""
    path = Path(path)
    if path.is_dir() and (path / MANIFEST_NAME).is_file():
        return [p for _, p in sorted(EvidenceBundle.open(path).trace_paths().items())]
    return find_trace_files([path])


def read_trace_facts(path: Path, max_json_bytes: int = MAX_TRACE_BYTES) -> TraceFacts:
    """Stream one Kineto trace once; any failure names the file and what was expected."""
    path = Path(path)
    state = StreamState()
    has_gpu_events = False
    markers: list[tuple[str, Any, Any]] = []  # (name, ts, dur) of step markers: values, never events
    observer, names = DefectObserver(), Names()  # the readers' defect detector, fed the same windows
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        if path.name.endswith(".gz") and magic != b"\x1f\x8b":
            raise TraceImportError(f"{path}: cannot read the file: named .gz but not gzip-compressed")
        seen = 0  # events of the windows before this one: the index of a refused event
        for window in iter_trace_windows(path, state, max_json_bytes=max_json_bytes):
            for ev in window:  # the one visit of each event; _is_step_marker called on marker categories only
                cat = ev.cat
                if cat in GPU_EVENT_CATEGORIES:  # disjoint from STEP_MARKER_CATEGORIES
                    has_gpu_events = True
                elif cat in STEP_MARKER_CATEGORIES and _is_step_marker(ev):
                    markers.append((ev.name, ev.ts, ev.dur))
                ts, dur = ev.ts, ev.dur
                try:  # NaN fails both comparisons; a string raises TypeError and is left alone (not a time)
                    if (ts is not None and not -_INF < ts < _INF) or (dur is not None and not 0 <= dur < _INF):
                        raise _bad_time(path, seen, window, ev)
                except TypeError:
                    if _is_bad_number(ts, least=-_INF) or _is_bad_number(dur):  # a string beside a bad number
                        raise _bad_time(path, seen, window, ev) from None
            timed, names = timed_window(window, names)
            observer.add_window(timed)
            seen += len(window)
    except TraceTooLargeError as exc:
        raise TraceImportError(f"{exc}; if the trace is genuine, raise the limit with --max-trace-gib") from None
    except TraceFormatError as exc:
        raise TraceImportError(str(exc)) from None
    except OSError as exc:
        raise TraceImportError(f"{path}: cannot read the file ({exc})") from None
    if state.truncated:
        raise TraceImportError(f"{path}: not valid JSON: the trace is cut short ({state.truncated})")
    if not state.has_trace_events:
        raise TraceImportError(
            f"{path}: not a torch.profiler (Kineto) trace: expected a JSON object with a 'traceEvents' list"
        )
    header = state.header
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    devices = header.get("deviceProperties") if isinstance(header.get("deviceProperties"), list) else []
    gpu_names = [d["name"] for d in devices if isinstance(d, dict) and isinstance(d.get("name"), str)]
    return TraceFacts(
        path=path,
        rank_from_trace=_as_int(dist.get("rank"), path, "distributedInfo.rank"),
        world_size=_as_int(dist.get("world_size"), path, "distributedInfo.world_size"),
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        gpu_names=gpu_names,
        has_gpu_events=bool(devices) or has_gpu_events,
        host=header.get("host_name") if isinstance(header.get("host_name"), str) else None,
        steps=_steps_from_markers(markers, header.get("baseTimeNanoseconds")),
        finding=finding_of(observer),
    )


def _is_bad_number(value: Any, least: float = 0.0) -> bool:
    """A number outside [least, inf): NaN and infinities always; below 0 for a duration (``least`` 0)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not (least <= value < _INF and value > -_INF)


def _bad_time(path: Path, seen: int, window: list[TraceEvent], ev: TraceEvent) -> TraceImportError:
    """The error for an event with a negative or non-finite time: file, event index and name, the value."""
    index = seen + next(i for i, e in enumerate(window) if e is ev)
    name = ev.name if isinstance(ev.name, str) else None
    shown = repr(name[:80] + "..." if name and len(name) > 80 else name)
    bad = [f"ts = {ev.ts!r}, expected a finite number (microseconds)"] if _is_bad_number(ev.ts, least=-_INF) else []
    bad += [f"dur = {ev.dur!r}, expected a finite number >= 0 (microseconds)"] if _is_bad_number(ev.dur) else []
    return TraceImportError(f"{path}: traceEvents event {index} (name {shown}): {'; '.join(bad)}")


def _as_int(value: Any, path: Path, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraceImportError(f"{path}: {what} = {value!r}, expected a non-negative integer")
    return value


def _is_step_marker(ev: TraceEvent) -> bool:
    return (ev.ph == "X" and ev.cat in STEP_MARKER_CATEGORIES and isinstance(ev.name, str)
            and ev.name.startswith(PROFILER_STEP_PREFIX))


def profiler_steps(events: Iterable[TraceEvent], base_time_ns: Any) -> list[tuple[int, float, float]]:
    """(step, t_start, t_end) in epoch seconds for each CPU ``ProfilerStep#N`` span, sorted by step."""
    return _steps_from_markers([(e.name, e.ts, e.dur) for e in events if _is_step_marker(e)], base_time_ns)


def _steps_from_markers(markers: list[tuple[str, Any, Any]], base_time_ns: Any) -> list[tuple[int, float, float]]:
    """The first span of each step number from (name, ts, dur) of ``ProfilerStep#N`` markers."""
    base_us = base_time_ns / 1e3 if isinstance(base_time_ns, (int, float)) else 0.0
    out: dict[int, tuple[int, float, float]] = {}
    for name, ts, dur in markers:
        step = profiler_step_number(name)
        if step is None or not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            continue
        start = (float(ts) + base_us) / 1e6
        out.setdefault(step, (step, start, start + float(dur) / 1e6))
    return [out[k] for k in sorted(out)]


def assign_ranks(facts: list[TraceFacts]) -> dict[int, TraceFacts]:
    """Rank -> trace: from the trace, else from the file name, else the lowest free rank (input order)."""
    by_rank: dict[int, TraceFacts] = {}
    unranked: list[TraceFacts] = []

    def claim(rank: int, f: TraceFacts, source: str) -> None:
        if rank in by_rank:
            raise TraceImportError(
                f"{f.path}: rank {rank} ({source}) is also the rank of {by_rank[rank].path}; "
                "expected one trace file per rank"
            )
        by_rank[rank] = f

    for f in facts:
        if f.rank_from_trace is not None:
            claim(f.rank_from_trace, f, "distributedInfo.rank")
    for f in facts:
        if f.rank_from_trace is None:
            m = _RANK_IN_NAME.search(f.path.name)
            if m:
                claim(int(m.group(1)), f, "from the file name")
            else:
                unranked.append(f)
    free = 0
    for f in unranked:
        while free in by_rank:
            free += 1
        claim(free, f, "assigned in order")
    return dict(sorted(by_rank.items()))


def env_from_traces(by_rank: dict[int, TraceFacts], max_world_size: int = MAX_WORLD_SIZE) -> BundleEnv:
    """Bundle env from what the traces say.

    device is ``cuda`` when any trace has deviceProperties or GPU events (kernels, memcpy, CUDA runtime),
    else ``cpu``; gpu_name is the most common deviceProperties name; world_size from
    distributedInfo.world_size (it may exceed the number of traces: a sample of a big job), else the
    highest rank + 1. Traces that disagree on world_size or backend are not one job, a rank at or above
    the declared world_size is not in the job, and a world size over ``max_world_size``: error.
    """
    facts = list(by_rank.values())
    for attr in ("world_size", "backend"):
        seen = {getattr(f, attr): f.path for f in facts if getattr(f, attr) is not None}
        if len(seen) > 1:
            detail = ", ".join(f"{p.name}: {v}" for v, p in seen.items())
            raise TraceImportError(f"traces disagree on distributedInfo.{attr} ({detail}); expected one job")
    declared = next(((f.world_size, f.path) for f in facts if f.world_size is not None), None)
    top_rank = max(by_rank)
    if declared is not None:
        world, source = declared
        if top_rank >= world:
            raise TraceImportError(
                f"{by_rank[top_rank].path}: rank {top_rank} is outside the job: {source.name} declares "
                f"distributedInfo.world_size = {world} (expected ranks 0..{world - 1})"
            )
        how = f"distributedInfo.world_size of {source}"
    else:
        world = top_rank + 1
        how = f"rank {top_rank} of {by_rank[top_rank].path} + 1"
    if world > max_world_size:
        raise TraceImportError(
            f"world size {world} ({how}) is over the limit of {max_world_size} ranks, with {len(by_rank)} "
            "trace file(s) present; if the job really had that many ranks, raise the limit with --max-world-size"
        )
    gpu_names = Counter(n for f in facts for n in f.gpu_names)
    hosts = Counter(f.host for f in facts if f.host)
    return BundleEnv(
        device="cuda" if any(f.has_gpu_events for f in facts) else "cpu",
        gpu_name=gpu_names.most_common(1)[0][0] if gpu_names else None,
        world_size=world,
        backend=next((f.backend for f in facts if f.backend), None),
        host=hosts.most_common(1)[0][0] if hosts else None,
    )


def import_traces(
    paths: list[Path],
    out_dir: Path,
    *,
    max_trace_bytes: int = MAX_TRACE_BYTES,
    max_world_size: int = MAX_WORLD_SIZE,
    repair: bool = True,
) -> Path:
    """Wrap Kineto traces (files, or folders of them) into a new evidence bundle at ``out_dir``.

    ``out_dir`` must not exist yet (or be an empty folder). Returns ``out_dir``. ``repair``: split merged ranks
    and drop duplicated events (``import_repairs``); False imports every file as given. Either way what was
    found is recorded in ``import_report.json``.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise TraceImportError(f"{out_dir}: already exists and is not an empty folder; choose a new --out")
    files = find_trace_files(list(paths))
    facts = [read_trace_facts(f, max_trace_bytes) for f in files]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.repairing-"))
    try:
        return _import(facts, out_dir, scratch, repair=repair, max_trace_bytes=max_trace_bytes,
                       max_world_size=max_world_size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _import(facts: list[TraceFacts], out_dir: Path, scratch: Path, *, repair: bool, max_trace_bytes: int,
            max_world_size: int) -> Path:
    kept: list[TraceFacts] = []
    pending: list[_Pending] = []
    for f in facts:
        try:
            more, notes = repair_file(f, scratch, repair, lambda p: read_trace_facts(p, max_trace_bytes))
        except TraceRepairError as exc:
            raise TraceImportError(str(exc)) from None
        kept += more
        pending += notes
    by_rank = assign_ranks(kept)
    env = env_from_traces(by_rank, max_world_size)
    rank_of = {id(f): rank for rank, f in by_rank.items()}
    notes = [ImportNote(kind=p.kind, action=p.action, ranks=sorted(rank_of[id(f)] for f in p.about), count=p.count,
                        detail=p.detail) for p in pending]

    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.importing-"))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a bundle is an ordinary folder
        for rank, f in by_rank.items():
            _copy_as_gzip(f.path, tmp / f"rank{rank}" / "trace.json.gz")
        steps = [
            StepRecord(rank=rank, step=s, t_start=t0, t_end=t1).model_dump()
            for rank, f in by_rank.items()
            for s, t0, t1 in f.steps
        ]
        if steps:
            write_jsonl(tmp / "steps.jsonl", steps)
        write_report(tmp, notes)
        files_meta = describe_files(tmp)
        manifest = BundleManifest(
            bundle_id=_content_id([m.sha256 for m in files_meta if m.path.startswith("rank")]),
            created=datetime.now(timezone.utc),
            env=env,
            files=files_meta,
            origin="imported",
        )
        atomic_write_text(tmp / MANIFEST_NAME, manifest.model_dump_json(indent=2) + "\n")
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _copy_as_gzip(src: Path, dst: Path) -> None:
    """A gzip file byte for byte, anything else gzipped (level 1, no timestamp), a block at a time."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin:
        gzipped = fin.read(2) == b"\x1f\x8b"
    if gzipped:
        shutil.copyfile(src, dst)
        return
    with open(src, "rb") as fin, open(dst, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as fout:
            shutil.copyfileobj(fin, fout, _COPY_BLOCK)


def _content_id(trace_hashes: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(trace_hashes)).encode()).hexdigest()[:16]


def describe_import(bundle_dir: Path) -> str:
    """One line per rank and the env, for the CLI to print after an import."""
    manifest = BundleManifest.model_validate_json((Path(bundle_dir) / MANIFEST_NAME).read_bytes())
    ranks = sorted(int(f.path.split("/")[0][4:]) for f in manifest.files if f.path.endswith("trace.json.gz"))
    e = manifest.env
    has_steps = any(f.path == "steps.jsonl" for f in manifest.files)
    report = read_report(bundle_dir)
    return "\n".join([
        f"bundle {manifest.bundle_id} at {bundle_dir}: ranks {ranks} of world size {e.world_size}, "
        f"device {e.device}{f' ({e.gpu_name})' if e.gpu_name else ''}, backend {e.backend or 'none'}, "
        f"steps.jsonl {'derived from ProfilerStep markers' if has_steps else 'absent (no ProfilerStep markers)'}"
    ] + [describe_note(n) for n in (report.notes if report else [])])


__all__ = [
    "TraceImportError",
    "TraceFacts",
    "MAX_TRACE_BYTES",
    "MAX_WORLD_SIZE",
    "find_trace_files",
    "trace_files_of",
    "read_trace_facts",
    "profiler_steps",
    "assign_ranks",
    "env_from_traces",
    "import_traces",
    "describe_import",
]
