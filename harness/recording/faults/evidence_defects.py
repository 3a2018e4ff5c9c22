"""Evidence that lies: the profiler defects real users hit, applied to a finished bundle (issue 40).

``bundle_edits`` removes evidence; these leave it present and wrong, as the trackers of torch.profiler, Kineto,
HTA and TraceLens report it. Each is deterministic, reads and rewrites the traces once, adds no name that is
not already in the evidence (``rename_comm_kernels`` writes NCCL's own current kernel prefix), and checks,
after the case is derived (:meth:`check_present`), that what it breaks is in the bundle: an edit that finds
nothing to break (a CPU trace has no NCCL kernel) refuses the case rather than derive a healthy copy.

* ``zero_timestamps``: a share of one rank's timed events gets ``ts: 0`` (pytorch #188481, half of a trace's
  events at 0): those events' place in time is lost; their durations stay.
* ``merge_rank_traces``: every rank's trace events written into one rank's file, the other ranks' trace
  folders removed (TraceLens #577: several ranks in one file). Each rank's events keep their own ``pid``; the
  header (``distributedInfo``) is the kept file's.
* ``drop_distributed_info``: every trace loses its ``distributedInfo`` header: the trace no longer says which
  rank it is or how large the job was (the folder name and ``bundle.json`` still do).
* ``duplicate_events``: one rank's events (all but metadata) written twice, as a profiler restarted inside the
  same capture appends the same records again: every step marker and op occurs twice.
* ``drop_flow_events``: every flow event (``ph`` s/f/t: launch -> kernel, forward -> backward links) removed;
  the events' own ``correlation`` args stay, so a reader that links by them loses nothing.
* ``truncate_gzip``: one rank's compressed trace cut after a share of its bytes, as a killed job leaves a
  ``.gz`` whose last member never ended (unlike ``truncate_trace``, whose gzip is whole and JSON cut); the
  killed process wrote no Flight Recorder dump.
* ``device_clock_offset``: one rank's device events (kernels, copies, fills, GPU annotations, and the ends of the
  launch -> kernel flows) moved by ``device_clock_offset_us`` on its trace while its host events stay, as when
  CUPTI's conversion of the device's clock to the host's is off: the two clock domains disagree. GPU traces only.
* ``rename_comm_kernels``: NCCL's kernels named as NCCL >= 2.19 names them (``ncclKernel_*`` ->
  ``ncclDevKernel_*``; HTA #360 counts none of them as communication). GPU traces with NCCL only.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

from diageval.bundle.kineto import PROFILER_STEP
from diageval.bundle.model import rank_trace_files
from diageval.recording.faults.base import BundleFault
from diageval.recording.faults.bundle_edits import (
    DEVICE_SIDE_CATEGORIES,
    FLOW_TO_DEVICE_CATEGORY,
    EvidenceEditError,
    _drop_flight_recorder_dump,
    _edit_traces,
    read_trace,
    write_trace,
)

FLOW_PHASES = ("s", "f", "t")
OLD_NCCL_PREFIX, NEW_NCCL_PREFIX = "ncclKernel_", "ncclDevKernel_"


def _timed(e: Any) -> bool:
    return isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))


def _markers(events: list) -> list[tuple[Any, int]]:
    """(pid, N) of every ``ProfilerStep#N`` marker of ``events``."""
    out = []
    for e in events:
        m = PROFILER_STEP.match(e["name"]) if _timed(e) and isinstance(e.get("name"), str) else None
        if m:
            out.append((e.get("pid"), int(m.group(1))))
    return out


def _trace(bundle_dir: Path, rank: int) -> Path:
    path = rank_trace_files(bundle_dir).get(rank)
    if path is None:
        raise EvidenceEditError(f"{bundle_dir}: no trace of rank {rank} to edit")
    return path


def _require(ok: bool, bundle_dir: Path, what: str) -> None:
    if not ok:
        raise EvidenceEditError(f"{bundle_dir}: the edit is not in the bundle: {what}")


class _DefectEdit(BundleFault):
    """Every defect here leaves each rank's timing as recorded (``steps.jsonl`` untouched) and moves no rank, so
    whether the fault manifested is checked on the recordings without the edit (``verify.verification_subject``)."""

    def recorded_rank(self, rank: int) -> int | None:
        return rank


def zeroed_indices(n: int, share: float) -> list[int]:
    """The ``share`` of ``n`` events, spread evenly and deterministically (event i when i*share crosses an integer)."""
    return [i for i in range(n) if int((i + 1) * share) > int(i * share)]


class ZeroTimestamps(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        path = _trace(bundle_dir, self.params.zeroed_rank)
        doc = read_trace(path)
        timed = [e for e in doc["traceEvents"] if _timed(e)]
        for i in zeroed_indices(len(timed), self.params.zeroed_share):
            timed[i]["ts"] = 0
        write_trace(path, doc)

    def check_present(self, bundle_dir: Path) -> None:
        doc = read_trace(_trace(bundle_dir, self.params.zeroed_rank))
        zeroed = sum(1 for e in doc["traceEvents"] if _timed(e) and e["ts"] == 0)
        _require(zeroed >= 2, bundle_dir, f"rank {self.params.zeroed_rank}'s trace has {zeroed} events at ts 0")


class MergeRankTraces(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        files = rank_trace_files(bundle_dir)
        keep = _trace(bundle_dir, self.params.merged_into_rank)
        doc = read_trace(keep)
        for rank, path in sorted(files.items()):
            if path == keep:
                continue
            doc["traceEvents"].extend(e for e in read_trace(path)["traceEvents"] if isinstance(e, dict))
            for child in sorted(path.parent.rglob("*"), reverse=True):
                child.unlink() if child.is_file() else child.rmdir()
            path.parent.rmdir()
        write_trace(keep, doc)

    def check_present(self, bundle_dir: Path) -> None:
        files = rank_trace_files(bundle_dir)
        _require(list(files) == [self.params.merged_into_rank], bundle_dir, f"trace files of ranks {sorted(files)}")
        pids = {pid for pid, _ in _markers(read_trace(files[self.params.merged_into_rank])["traceEvents"])}
        _require(len(pids) > 1, bundle_dir, f"the merged trace's step markers come from {len(pids)} process(es)")


class DropDistributedInfo(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        _edit_traces(bundle_dir, lambda doc, path: doc.pop("distributedInfo", None))

    def check_present(self, bundle_dir: Path) -> None:
        files = rank_trace_files(bundle_dir)
        _require(bool(files), bundle_dir, "no trace")
        for path in files.values():
            _require("distributedInfo" not in read_trace(path), bundle_dir, f"{path.name} still has distributedInfo")


class DuplicateEvents(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        path = _trace(bundle_dir, self.params.duplicated_rank)
        doc = read_trace(path)
        again = [dict(e) for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") != "M"]
        doc["traceEvents"].extend(again)
        write_trace(path, doc)

    def check_present(self, bundle_dir: Path) -> None:
        markers = _markers(read_trace(_trace(bundle_dir, self.params.duplicated_rank))["traceEvents"])
        _require(len(markers) > len(set(markers)), bundle_dir, "no step marker occurs twice")


class DropFlowEvents(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        self.dropped = 0

        def edit(doc: dict[str, Any], path: Path) -> None:
            self.dropped += sum(
                1 for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") in FLOW_PHASES)
            doc["traceEvents"] = [e for e in doc["traceEvents"] if not isinstance(e, dict) or e.get("ph") not in FLOW_PHASES]

        _edit_traces(bundle_dir, edit)

    def check_present(self, bundle_dir: Path) -> None:
        _require(getattr(self, "dropped", 0) > 0, bundle_dir, "the traces held no flow event to drop")
        for path in rank_trace_files(bundle_dir).values():
            _require(not any(isinstance(e, dict) and e.get("ph") in FLOW_PHASES for e in read_trace(path)["traceEvents"]),
                     bundle_dir, f"{path.name} still holds flow events")


class TruncateGzip(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        path = _trace(bundle_dir, self.params.cut_gzip_rank)
        if path.read_bytes()[:2] != b"\x1f\x8b":
            raise EvidenceEditError(f"{path}: not gzip-compressed, nothing to cut")
        raw = path.read_bytes()
        path.write_bytes(raw[: max(10, int(len(raw) * self.params.kept_gzip_fraction))])
        _drop_flight_recorder_dump(bundle_dir, self.params.cut_gzip_rank)

    def check_present(self, bundle_dir: Path) -> None:
        path = _trace(bundle_dir, self.params.cut_gzip_rank)
        try:
            gzip.decompress(path.read_bytes())
        except (EOFError, OSError, zlib.error):
            return
        raise EvidenceEditError(f"{bundle_dir}: the edit is not in the bundle: {path} still decompresses whole")


class RenameCommKernels(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        def edit(doc: dict[str, Any], path: Path) -> None:
            for e in doc["traceEvents"]:
                name = e.get("name") if isinstance(e, dict) else None
                if isinstance(name, str) and name.startswith(OLD_NCCL_PREFIX):
                    e["name"] = NEW_NCCL_PREFIX + name[len(OLD_NCCL_PREFIX):]

        _edit_traces(bundle_dir, edit)

    def check_present(self, bundle_dir: Path) -> None:
        found = any(isinstance(e, dict) and isinstance(e.get("name"), str) and e["name"].startswith(NEW_NCCL_PREFIX)
                    for path in rank_trace_files(bundle_dir).values() for e in read_trace(path)["traceEvents"])
        _require(found, bundle_dir, f"no {NEW_NCCL_PREFIX}* kernel (the traces hold no NCCL kernel to rename)")


class DeviceClockOffset(_DefectEdit):
    def apply(self, bundle_dir: Path) -> None:
        path = _trace(bundle_dir, self.params.device_clock_rank)
        doc = read_trace(path)
        for e in doc["traceEvents"]:
            if not isinstance(e, dict) or not isinstance(e.get("ts"), (int, float)):
                continue
            on_device = e.get("cat") in DEVICE_SIDE_CATEGORIES
            flow_end = e.get("cat") == FLOW_TO_DEVICE_CATEGORY and e.get("ph") == "f"
            if on_device or flow_end:
                e["ts"] = round(e["ts"] + self.params.device_clock_offset_us, 3)
        write_trace(path, doc)

    def check_present(self, bundle_dir: Path) -> None:
        doc = read_trace(_trace(bundle_dir, self.params.device_clock_rank))
        _require(any(isinstance(e, dict) and e.get("cat") in DEVICE_SIDE_CATEGORIES for e in doc["traceEvents"]),
                 bundle_dir, f"rank {self.params.device_clock_rank}'s trace holds no device event to move")
