"""What ``diageval bundle import`` does about a trace whose evidence is present but wrong (issue 40, item 4).

The importer's one pass over each trace feeds a :class:`~diageval.bundle.trace_defects.DefectObserver` (the
detector that ``trace stats`` and rules use: one way of recognising each defect). For what it finds:

* **Several ranks in one file** (``ProfilerStep`` markers under two or more pids, TraceLens #577): repaired by
  splitting the file into one trace per process. A process is a pid that ran step markers; its events go with it.
  Device events sit on the device's pid, not the process's: an event goes with the process whose runtime call
  has the same ``correlation`` id (a flow event by its ``id``, which Kineto sets to that correlation), and a
  device pid whose events that can be traced all go to one process goes with it whole (its metadata and
  annotations too: the device is that rank's). Processes count correlation ids each from their own start, so two
  ranks' ids can collide; a device event that no process, or more than one, can have launched, on a device
  that is not one process's, cannot be placed: the file is refused. Everything else on no process's pid and
  with no launch (metadata, the profiler's own span, global instants) belongs to no single rank and goes
  into every piece. Each piece keeps the file's header; ``distributedInfo.rank`` is dropped from
  it, because the header named one rank for the whole file and says nothing about which process that was: the
  pieces take the free ranks in the order of their pids (a process started earlier has the lower pid on Linux,
  and launchers start rank 0 first, but nothing in the trace guarantees it: the report says so).
* **Events duplicated** (a ``ProfilerStep#N`` twice on one pid: a restarted profiler that wrote its records
  again): repaired by dropping every event that is an exact copy (same fields, same values) of an earlier one.
  An event recorded once cannot be an exact copy of another: Kineto gives each op its own ``External id`` and
  each launch its own correlation, and one thread cannot start the same op twice at the same microsecond for
  the same duration. If a step is still there twice afterwards, the copies differ (the second capture has its
  own times): which one is real is not known, and the file is refused.
* **Events stamped at ts 0** (pytorch #188481): counted and reported, kept in the trace. Their names and
  durations are still true (an op's total time, a kernel's count stay right), only their place in time is
  lost; dropping them would make every duration sum and count wrong as well, and a trace can hold a few events
  that really start at its origin, which no rule could tell from lost ones one by one. The readers already say
  what is wrong with them (the same detector), so a diagnoser is told, not handed a trace with work missing.

``repair=False`` (``--no-repair``) imports every file as given and still reports and records what was found.
What was found and done is written to ``import_report.json`` in the bundle (:class:`ImportReport`; only when
there is something to say), evidence about the evidence: which ranks, what was wrong, what was done, never a
file name of the input (it may name a case) nor a label. A repaired file is read whole into memory (the
detection before it streams, as for every trace); an intact file is still streamed only.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict

from diageval.bundle.kineto import GPU_EVENT_CATEGORIES, STEP_MARKER_CATEGORIES, profiler_step_number
from diageval.bundle.trace_defects import DefectObserver
from diageval.errors import DiagevalError

REPORT_NAME = "import_report.json"
FLOW_PHASES = frozenset({"s", "f", "t"})


class TraceRepairError(DiagevalError, ValueError):
    """A defect the importer names but cannot repair; the message names the file and what is wrong."""


class ImportNote(BaseModel):
    """One thing the importer found wrong with a trace and what it did about it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ranks_merged", "events_duplicated", "timestamps_lost"]  # no fault name: a leak check greps for those
    action: Literal["repaired", "kept_as_given", "reported"]
    ranks: list[int]  # the bundle's ranks the note is about (after any split)
    count: int  # processes split apart, events dropped, or events stamped 0
    detail: str


class ImportReport(BaseModel):
    """``import_report.json``: what the import found wrong with the evidence and did about it."""

    model_config = ConfigDict(extra="forbid")

    notes: list[ImportNote]


@dataclass
class Finding:
    """What the detector saw in one input file (before any repair)."""

    step_pids: list[str]  # pids that ran ProfilerStep markers, in pid order
    repeated: int  # ProfilerStep markers seen a second time on the same pid
    zeroed: int  # timed events at ts 0
    timed: int  # timed events
    zero_sentence: str | None  # the detector's sentence when those lost their times, else None

    @property
    def merged(self) -> bool:
        return len(self.step_pids) > 1


def finding_of(observer: DefectObserver) -> Finding:
    """The parts of the detector's state the importer acts on."""
    sentences = [s for s in observer.findings() if "times were lost" in s]
    return Finding(
        step_pids=sorted((p for p, s in observer.step_pids.items() if s), key=_pid_order),
        repeated=sum(observer.repeated.values()),
        zeroed=observer.zeroed,
        timed=observer.timed,
        zero_sentence=sentences[0] if sentences else None,
    )


def _pid_order(pid: str) -> tuple[int, int | str]:
    return (0, int(pid)) if pid.lstrip("-").isdigit() else (1, pid)


def load_trace_doc(path: Path) -> dict[str, Any]:
    """The whole trace document (only for a file being repaired; it was read once already, so it is valid)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:  # NaN/Infinity, which only the stdlib reads (as the stream's fallback does)
        return json.loads(raw)


def write_trace_doc(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path, "wb", compresslevel=1, mtime=0) as out:
        out.write(json.dumps(doc).encode())
    return path


def drop_exact_duplicates(events: list[Any]) -> tuple[list[Any], int]:
    """``events`` without the ones that equal an earlier one field for field; and how many were dropped."""
    seen: set[str] = set()
    kept = []
    for e in events:
        key = json.dumps(e, sort_keys=True)
        if key not in seen:
            seen.add(key)
            kept.append(e)
    return kept, len(events) - len(kept)


def repeated_markers(events: list[Any]) -> list[tuple[str, int]]:
    """(pid, N) of each ``ProfilerStep#N`` marker that occurs again on its pid."""
    count = Counter((str(e.get("pid")), n) for e in events if (n := _marker(e)) is not None)
    return sorted((k for k, c in count.items() if c > 1), key=lambda k: (_pid_order(k[0]), k[1]))


def _marker(e: Any) -> int | None:
    if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in STEP_MARKER_CATEGORIES:
        return None
    name = e.get("name")
    return profiler_step_number(name) if isinstance(name, str) else None


def _correlation(e: dict[str, Any]) -> Any:
    args = e.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


def split_by_process(path: Path, doc: dict[str, Any], step_pids: list[str]) -> list[dict[str, Any]]:
    """One trace document per process of ``step_pids`` (module doc), in that order; a device event that cannot
    be placed refuses the file."""
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]
    hosts = set(step_pids)
    launched_by: dict[Any, set[str]] = {}  # correlation (or flow id) -> the processes whose host events carry it
    for e in events:
        pid = str(e.get("pid"))
        if pid not in hosts:
            continue
        for key in (_correlation(e), e.get("id") if e.get("ph") in FLOW_PHASES else None):
            if key is not None and not isinstance(key, (dict, list)):
                launched_by.setdefault(key, set()).add(pid)
    def owners(e: dict[str, Any]) -> set[str]:
        key = e.get("id") if e.get("ph") in FLOW_PHASES else _correlation(e)
        return launched_by.get(key, set()) if key is not None and not isinstance(key, (dict, list)) else set()

    others: dict[str, list[Any]] = {}  # pid -> its events, for pids that ran no step
    for e in events:
        if str(e.get("pid")) not in hosts:
            others.setdefault(str(e.get("pid")), []).append(e)
    pieces: dict[str, list[Any]] = {p: [e for e in events if str(e.get("pid")) == p] for p in step_pids}
    shared: list[Any] = []
    unplaced: Counter[str] = Counter()
    for pid, evs in others.items():
        placed = [owners(e) for e in evs]
        sure = {next(iter(o)) for o in placed if len(o) == 1}
        if len(sure) == 1:  # one process launched all of this pid's work it can be traced to: the pid is its device
            pieces[next(iter(sure))].extend(evs)
        elif not sure and not any(e.get("cat") in GPU_EVENT_CATEGORIES for e in evs):
            shared.extend(evs)  # no device work, no launch: the profiler's own spans, metadata, instants
        else:  # a device several processes launched onto (or none that can be told): event by event
            for e, o in zip(evs, placed):
                if len(o) == 1:
                    pieces[next(iter(o))].append(e)
                elif e.get("cat") in GPU_EVENT_CATEGORIES:
                    unplaced[pid] += 1
                else:
                    shared.append(e)
    if unplaced:
        where = ", ".join(f"{n} on pid {p}" for p, n in sorted(unplaced.items(), key=lambda kv: _pid_order(kv[0])))
        raise TraceRepairError(
            f"{path}: holds {len(step_pids)} processes' ProfilerStep markers (pids {', '.join(step_pids[:8])}), "
            f"several ranks merged into one file, and device events whose launching process cannot be told "
            f"({where}: their correlation id was launched by no process or by more than one); expected one trace "
            "file per rank: split the file per rank before importing, or import it as given with --no-repair")
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    dist = header.get("distributedInfo")
    if isinstance(dist, dict):
        header["distributedInfo"] = {k: v for k, v in dist.items() if k != "rank"}
    order = {id(e): i for i, e in enumerate(events)}  # each piece in the file's order
    return [{**header, "traceEvents": sorted(shared + pieces[p], key=lambda e: order[id(e)])} for p in step_pids]


@dataclass
class Pending:
    """A note whose ranks are known once ranks are assigned: the traces it is about, by identity."""

    about: list[Any]
    kind: str
    action: str
    count: int
    detail: str


def repair_file(f: Any, scratch: Path, repair: bool, reread: Callable[[Path], Any]) -> tuple[list[Any], list[Pending]]:
    """The traces that stand for ``f`` (the importer's ``TraceFacts`` of one file: ``path``, ``finding``) in the
    bundle, ``f`` itself or its repaired pieces (written under ``scratch`` and read with ``reread``), and what
    was found and done."""
    found = f.finding
    if found is None or not (found.merged or found.repeated or found.zero_sentence):
        return [f], []
    out, pending = [f], []
    if (found.merged or found.repeated) and repair:
        doc = load_trace_doc(f.path)
        events = doc.get("traceEvents", [])
        if found.repeated:
            events, dropped = drop_exact_duplicates(events)
            still = repeated_markers(events)
            if still:
                pid, step = still[0]
                raise TraceRepairError(
                    f"{f.path}: ProfilerStep#{step} (and {len(still) - 1} other step(s)) recorded twice by process "
                    f"{pid}, and the two records differ, so they are not a copy to drop ({dropped} exact copies "
                    "were found): which one is real is not known; expected each step once per process, or import "
                    "it as given with --no-repair")
            doc["traceEvents"] = events
        docs = split_by_process(f.path, doc, found.step_pids) if found.merged else [doc]
        stem = f"piece{len(list(scratch.iterdir()))}"  # no "rank" in the name: a piece's rank is not its file's
        out = [reread(write_trace_doc(scratch / f"{stem}-{i}.json.gz", d)) for i, d in enumerate(docs)]
        if found.repeated:
            pending.append(Pending(out, "events_duplicated", "repaired", dropped,
                                    f"{found.repeated} ProfilerStep markers were recorded twice by the same process "
                                    f"(a restarted profiler's copies): dropped the {dropped} events that were exact "
                                    "copies of earlier ones"))
        if found.merged:
            pending.append(Pending(out, "ranks_merged", "repaired", len(docs),
                                    f"one file held the ProfilerStep markers of {len(docs)} processes (several ranks' "
                                    "traces merged): split into one trace per process, whose ranks were taken in the "
                                    "order of their pids (the file's header named one rank for all of them)"))
    elif found.merged or found.repeated:
        if found.merged:
            pending.append(Pending(out, "ranks_merged", "kept_as_given", len(found.step_pids),
                                    f"one file holds the ProfilerStep markers of {len(found.step_pids)} processes "
                                    "(several ranks' traces merged); imported as given (no repair): per-step figures "
                                    "of this trace mix ranks"))
        if found.repeated:
            pending.append(Pending(out, "events_duplicated", "kept_as_given", found.repeated,
                                    f"{found.repeated} ProfilerStep markers recorded twice by the same process (events "
                                    "duplicated); imported as given (no repair): counts and times inside those steps "
                                    "are doubled"))
    if found.zero_sentence:
        pending.append(Pending(out, "timestamps_lost", "reported", found.zeroed,
                                f"{found.zeroed} of {found.timed} timed events stamped ts 0, their times lost; kept: "
                                "their names and durations hold, only their place in time is unknown"))
    return out, pending


def write_report(bundle_dir: Path, notes: list[ImportNote]) -> None:
    if notes:
        (Path(bundle_dir) / REPORT_NAME).write_text(ImportReport(notes=notes).model_dump_json(indent=2) + "\n")


def read_report(bundle_dir: Path) -> ImportReport | None:
    """The bundle's import report, None when the import found nothing wrong (or the bundle was not imported)."""
    path = Path(bundle_dir) / REPORT_NAME
    return ImportReport.model_validate_json(path.read_bytes()) if path.is_file() else None


def describe_note(note: ImportNote) -> str:
    """The line the CLI prints for one note."""
    return f"{note.action.replace('_', ' ')}: ranks {note.ranks}: {note.detail}"


__all__ = [
    "REPORT_NAME",
    "TraceRepairError",
    "ImportNote",
    "ImportReport",
    "Finding",
    "finding_of",
    "load_trace_doc",
    "write_trace_doc",
    "drop_exact_duplicates",
    "repeated_markers",
    "split_by_process",
    "Pending",
    "repair_file",
    "write_report",
    "read_report",
    "describe_note",
]
