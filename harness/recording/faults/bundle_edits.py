"""Evidence faults: applied to the finished bundle folder (evidence removed, damaged or skewed).

Damage (the abstain cases):

* ``drop_rank_trace`` removes one rank's profiler trace (its ``rank<N>/`` folder) and its Flight Recorder
  dump, as when that node's upload of its diagnostics failed. Step times, metrics and logs of that rank
  stay (the launcher collects them). The dump goes too: with both ranks' dumps a diagnoser can still
  compare when each rank entered every collective (``time_created_ns``), so the case would not lack the
  evidence it is labeled as lacking.
* ``truncate_trace`` keeps only the first ``keep_fraction`` of one rank's raw trace JSON (re-gzipped),
  as when the writer was killed mid-export: the file is there but is not valid JSON. The killed process
  never reached its exit-time Flight Recorder dump, so that rank's dump is removed as well.
* ``drop_step_markers`` removes every ``ProfilerStep#N`` event from every trace, as a profiler run
  without a ``schedule`` writes them (torch emits the markers only under a schedule); with
  ``drop_step_log`` the job's own step log (``steps.jsonl``) goes too, as for a job that logs no step times.
* ``drop_device_events`` removes what ran on the device (kernels, memcpy, memset, GPU-side annotations)
  and the runtime-to-kernel flow arrows (``ac2g``) from every trace, keeping ``deviceProperties``, the
  GPU process metadata and the host's runtime calls (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...):
  what a trace looks like when Kineto received the host's records but not the device's (CUPTI activity
  records dropped, or dropped as out of the capture window: pytorch/pytorch#192021, kineto#95).

Noise (evidence that is still sound, as real fleets record it):

* ``clock_offset`` shifts one rank's host clock, as for a rank on another host whose clock is off by
  ``offset_ms``: every ``ts`` of its trace, its ``steps.jsonl`` rows, its per-rank metric samples, the
  wall-clock stamps in its log and its Flight Recorder times. ``ts + baseTimeNanoseconds/1e3`` becomes the
  skewed epoch time (µs) and ``baseTimeNanoseconds`` is what that host's Kineto writes: current Kineto
  takes it as the host clock floored to a three-month interval (``ChromeTraceBaseTime``), so it stays
  (unless the shift crosses an interval boundary) and every ``ts`` moves; a base that is no such multiple
  is an older Kineto's program load time on the host clock, so it moves and ``ts`` stays.
* ``sample_rank_traces`` keeps the traces of ``traced_ranks`` only, as a fleet profiler that traces a
  sample of ranks does. The bundle is shaped like ``drop_rank_trace``'s (``bundle.json`` still says the
  whole world size; every rank's step log, metrics, logs and Flight Recorder dump stay), but the absence
  is by design and names the ranks kept rather than the one lost, for any number of ranks.
* ``trace_window`` keeps ``window_steps`` profiled steps from ``window_first_step`` in every trace, as a
  short profiler schedule (``active=K``) would have recorded: host events that start inside the kept
  steps, the device events their launches correlate to, metadata; ``steps.jsonl`` keeps every step. With
  ``window_step_share`` it keeps part of one step instead: the events that start within that share of the
  step, from ``window_start_share`` of it, and no ``ProfilerStep`` marker (a profiler started and stopped by
  hand around part of a step records none), as a window of a few milliseconds taken inside a long step is.

Traces are rewritten as plain JSON (gzipped at level 1, like the recorder) so that they stay valid; no
edit adds a name that is not already in the evidence.
"""

from __future__ import annotations

import gzip
import json
import pickle
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from diageval.bundle.kineto import DEVICE_CATEGORIES, PROFILER_STEP, RUNTIME_CATEGORIES
from diageval.bundle.model import rank_trace_files
from diageval.errors import DiagevalError
from diageval.fileio import read_jsonl, write_jsonl
from diageval.recording.faults.base import BundleFault

# Kineto's ChromeTraceBaseTime: the host clock floored to std::chrono::months * 3 (3 * 2629746 s).
KINETO_BASE_INTERVAL_NS = 3 * 2_629_746 * 1_000_000_000
DEVICE_SIDE_CATEGORIES = DEVICE_CATEGORIES | {"gpu_user_annotation"}
FLOW_TO_DEVICE_CATEGORY = "ac2g"  # Kineto's flow arrows from a runtime call to the device work it launched
_LOG_STAMP = re.compile(r"(?<=USDT:)(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")  # Kineto's own log lines


class EvidenceEditError(DiagevalError, ValueError):
    """A bundle edit cannot be applied to this bundle (says which file and why)."""


def read_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise EvidenceEditError(f"{path}: not a Kineto trace (expected an object with a traceEvents array)")
    return doc


def write_trace(path: Path, doc: dict[str, Any]) -> None:
    raw = json.dumps(doc, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(raw, compresslevel=1) if path.name.endswith(".gz") else raw)


def _edit_traces(bundle_dir: Path, edit) -> None:
    for path in rank_trace_files(bundle_dir).values():
        doc = read_trace(path)
        edit(doc, path)
        write_trace(path, doc)


def _step_marker(event: dict[str, Any]) -> int | None:
    name = event.get("name")
    m = PROFILER_STEP.match(name) if isinstance(name, str) and event.get("ph") == "X" else None
    return int(m.group(1)) if m else None


def _drop_orphan_flows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flow events (``ph`` s/f/t) whose start or finish is gone would point at nothing: drop them."""
    ends: dict[Any, set[str]] = {}
    for e in events:
        if e.get("ph") in ("s", "f", "t"):
            ends.setdefault((e.get("cat"), e.get("id")), set()).add(e["ph"])
    return [e for e in events if e.get("ph") not in ("s", "f", "t") or {"s", "f"} <= ends[(e.get("cat"), e.get("id"))]]


def _drop_flight_recorder_dump(bundle_dir: Path, rank: int) -> None:
    (Path(bundle_dir) / "flight_recorder" / f"rank_{rank}").unlink(missing_ok=True)


class DropRankTrace(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        folder = Path(bundle_dir) / f"rank{self.params.missing_rank}"
        if folder.is_dir():
            shutil.rmtree(folder)
        _drop_flight_recorder_dump(bundle_dir, self.params.missing_rank)


class TruncateTrace(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        _drop_flight_recorder_dump(bundle_dir, self.params.cut_rank)
        path = Path(bundle_dir) / f"rank{self.params.cut_rank}" / "trace.json.gz"
        if not path.is_file():
            return
        raw = gzip.decompress(path.read_bytes())
        path.write_bytes(gzip.compress(raw[: int(len(raw) * self.params.keep_fraction)], compresslevel=1))


class SampleRankTraces(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        keep = set(self.params.traced_ranks)
        for rank, path in rank_trace_files(bundle_dir).items():
            if rank not in keep:
                shutil.rmtree(path.parent)


class DropStepMarkers(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        def edit(doc: dict[str, Any], path: Path) -> None:
            doc["traceEvents"] = [e for e in doc["traceEvents"] if not isinstance(e, dict) or _step_marker(e) is None]

        _edit_traces(bundle_dir, edit)
        if self.params.drop_step_log:
            (Path(bundle_dir) / "steps.jsonl").unlink(missing_ok=True)


class DropDeviceEvents(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        def edit(doc: dict[str, Any], path: Path) -> None:
            doc["traceEvents"] = [
                e for e in doc["traceEvents"]
                if not isinstance(e, dict)
                or (e.get("cat") not in DEVICE_SIDE_CATEGORIES and e.get("cat") != FLOW_TO_DEVICE_CATEGORY)
            ]

        _edit_traces(bundle_dir, edit)


class TraceWindow(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        p = self.params
        part = None if p.window_step_share is None else (p.window_start_share, p.window_step_share)
        _edit_traces(bundle_dir, lambda doc, path: window_trace(doc, p.window_first_step, p.window_steps, path, part))


def window_trace(doc: dict[str, Any], first: int, count: int, path: Path,
                 part: tuple[float, float] | None = None) -> None:
    """Keep ``count`` profiled steps from ``first`` in ``doc`` (what ``trace_window`` does to each trace); with
    ``part`` (start, share), only that share of the one kept step, from ``start`` of it, without its marker."""
    kept = range(first, first + count)
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events if _step_marker(e) in kept]
    if not spans:
        steps = sorted(s for s in map(_step_marker, events) if s is not None)
        raise EvidenceEditError(f"{path}: no ProfilerStep#{first}..#{kept[-1]} to keep (the trace has "
                                f"steps {steps[0]}..{steps[-1]})" if steps else f"{path}: no ProfilerStep markers")
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    if part is not None:
        start, end = start + part[0] * (end - start), start + (part[0] + part[1]) * (end - start)
        events = [e for e in events if _step_marker(e) is None]

    def inside(e: dict[str, Any]) -> bool:
        return isinstance(e.get("ts"), (int, float)) and start <= e["ts"] < end

    host = [e for e in events if e.get("cat") not in DEVICE_SIDE_CATEGORIES and e.get("ph") != "M" and inside(e)]
    launched = {(e.get("args") or {}).get("correlation") for e in host if e.get("cat") in RUNTIME_CATEGORIES}
    out = []
    for e in events:
        if e.get("ph") == "M":
            out.append(e)
        elif e.get("cat") in DEVICE_SIDE_CATEGORIES:
            corr = (e.get("args") or {}).get("correlation")
            if (corr in launched) if corr is not None else inside(e):
                out.append(e)
        elif e.get("cat") == "Trace" and e.get("ph") == "X":  # the profiler's own span: the window now
            out.append({**e, "ts": start, "dur": end - start})
        elif inside(e):
            out.append(e)
    doc["traceEvents"] = _drop_orphan_flows(out)


class ClockOffset(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        bundle_dir = Path(bundle_dir)
        rank = self.params.offset_rank
        offset_s = self.params.offset_ms / 1000.0
        trace = rank_trace_files(bundle_dir).get(rank)
        if trace is not None:
            doc = read_trace(trace)
            shift_trace_clock(doc, self.params.offset_ms * 1000.0)
            write_trace(trace, doc)
        for name, in_rank in (("steps.jsonl", lambda r: r.get("rank") == rank),
                              ("metrics.jsonl", lambda r: r.get("scope") == "rank" and r.get("rank") == rank)):
            path = bundle_dir / name
            if path.is_file():
                rows = list(read_jsonl(path))
                for row in rows:
                    if in_rank(row):
                        for key in ("t_start", "t_end", "time"):
                            if isinstance(row.get(key), (int, float)):
                                row[key] = row[key] + offset_s
                write_jsonl(path, rows)
        log = bundle_dir / "logs" / f"rank{rank}.log"
        if log.is_file():
            log.write_text(shift_log_stamps(log.read_text(), offset_s))
        dump = bundle_dir / "flight_recorder" / f"rank_{rank}"
        if dump.is_file():
            dump.write_bytes(shift_flight_recorder(dump.read_bytes(), round(offset_s * 1e9), dump))


def shift_trace_clock(doc: dict[str, Any], offset_us: float) -> None:
    """Shift a trace's clock by ``offset_us`` as its host's Kineto would have recorded it (see module doc)."""
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    base = doc.get("baseTimeNanoseconds")
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    delta_us = offset_us
    if isinstance(base, int) and not isinstance(base, bool) and stamps:
        if base % KINETO_BASE_INTERVAL_NS == 0:  # Kineto's floored host clock: moves only across a boundary
            first_ns = base + min(stamps) * 1000 + offset_us * 1000  # the first event on the skewed clock
            new_base = int(first_ns // KINETO_BASE_INTERVAL_NS) * KINETO_BASE_INTERVAL_NS
        else:  # older Kineto: the program's load time on the host clock, so the base carries the offset
            new_base = base + round(offset_us * 1000)
        doc["baseTimeNanoseconds"] = new_base
        delta_us = offset_us - (new_base - base) / 1000
    if not delta_us:
        return
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] + delta_us, 3)


def shift_log_stamps(text: str, offset_s: float) -> str:
    """Kineto's ``USDT:YYYY-mm-dd HH:MM:SS`` stamps, moved by the offset (to the nearest second they print)."""
    step = timedelta(seconds=round(offset_s))

    def moved(m: re.Match) -> str:
        return (datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") + step).strftime("%Y-%m-%d %H:%M:%S")

    return _LOG_STAMP.sub(moved, text) if step else text


class _PlainUnpickler(pickle.Unpickler):
    """A Flight Recorder dump is plain containers, strings and numbers: anything else is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"unexpected object {module}.{name}")


def shift_flight_recorder(data: bytes, offset_ns: int, path: Path) -> bytes:
    """torch's Flight Recorder dump with every ``time_*_ns`` of its entries moved by ``offset_ns``."""
    import io

    try:
        dump = _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise EvidenceEditError(f"{path}: not a Flight Recorder dump ({exc})") from exc
    for entry in dump.get("entries", []) if isinstance(dump, dict) else []:
        for key, value in entry.items():
            if key.startswith("time_") and key.endswith("_ns") and isinstance(value, int):
                entry[key] = value + offset_ns
    return pickle.dumps(dump, protocol=2)  # the protocol torch writes
