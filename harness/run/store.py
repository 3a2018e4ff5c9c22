"""The run folder ``runs/<run_id>/``: its manifest, its results, and the rules for resuming it.

Layout::

    run.json                 RunInfo: who ran what on which case set, and whether it finished
    results.jsonl            one CaseResult a line, appended (and fsynced) as each case ends
    cases/<id>/diagnosis.json  the diagnosis as returned (validated), when there is one
    cases/<id>/stdout.txt, stderr.txt, output.json   what the diagnoser printed / wrote, when anything
    cases/<id>/trajectory.json  an agent's turns, tokens, dollars and tool calls (diageval.diagnosers.agent_record)
    diagnoser.log            what in-process diagnosers printed outside any case
    summary.json             the metrics, written when the run completes (and by ``diageval score``)
    repeats/<k>/results.jsonl, repeats/<k>/cases/<id>/...   repeat k = 2..K of ``diageval run --repeats K``

Size: ~405 lines, over the ~400 the project aims at: it is the one reader and writer of every format of the
run folder (manifest, results, repeats, kept output, trajectories), and two homes for them would drift apart.

Decided here (the design is silent):

* A folder holds one diagnoser (spec and version) on one case set (hash and taxonomy version). Running
  again into the same folder resumes it; anything else is refused, so results are never mixed.
* A case is done once its line is in ``results.jsonl``. On resume, ``harness_error`` lines (our fault,
  often transient) and ``unavailable`` ones (traces fetched since?) are dropped and those cases retried;
  every other status stands.
* ``summary.json`` is derived from ``results.jsonl``: written when the run completes (and by ``diageval
  score``); a resumed run deletes it until it completes again: no stale summary beside newer results.
* Only the harness writes the folder, and only one harness at a time: ``diageval run`` holds an
  exclusive ``flock`` on ``.lock`` (which names its pid) while it writes; a second one exits with
  "locked by pid N". The kernel drops the lock when its holder dies, even by SIGKILL.
* A torn last line of ``results.jsonl`` (a writer killed mid-line) is never silently dropped: readers
  name it, and a resumed run moves it to ``results.jsonl.torn-<n>`` (kept for inspection) and says so;
  that case is then run again.
* A case has one result line. Two lines for one case (a hand edit, a copy of lines from another run)
  are refused by every reader, naming the case and both lines: which one stands cannot be told.
* Repeats (``--repeats K``, issue 41): the folder itself is repeat 1, exactly as a run without repeats (K = 1
  writes nothing more than before, ``run.json``'s ``repeats: 1`` aside); repeat k >= 2 is ``repeats/<k>/``, a
  results file and case folders laid out like the folder's own (:meth:`RunStore.repeat_stores`), holding no
  ``run.json``, lock or summary of its own. Evidence is prepared once per case; only the diagnosis repeats. Each
  repeat resumes on its own: a case is done in repeat k once its line is in that repeat's ``results.jsonl`` (the
  same retry rules), and a resumed run diagnoses each case in each repeat that lacks it. A resumed run with
  another K keeps what is there; the summary's repeats view reads repeats 1..K of ``run.json``'s ``repeats``.
* ``run.json`` lists the cases the latest ``diageval run`` into the folder was asked to diagnose
  (``cases``: the selection less the skipped ones). A complete run has a result line for each of them, so
  a line lost later (a truncated copy, a hand edit) is named when the run is re-scored
  (:mod:`diageval.run.grade`), never summarised away. Runs written before the field have ``cases: null``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diageval import __version__
from diageval.diagnosers.agent_record import AgentRecord, Usage
from diageval.diagnosers.base import TRAJECTORY_NAME
from diageval.diagnosis import DEFAULT_LIMITS
from diageval.errors import DiagevalError
from diageval.fileio import append_jsonl, atomic_write_text, read_jsonl, write_jsonl
from diageval.paths import SOURCE_ROOT
from diageval.cases.tiers import EvidenceTier
from diageval.run.evidence_tiers import EvidenceSize
from diageval.scoring.results import CaseResult, ManifestationMeasure, Status
from diageval.scoring.summary import Summary
from diageval.validation import field_path

RUN_SCHEMA_VERSION = 1
RunStatus = Literal["running", "complete", "interrupted", "failed"]


class RunDiagnoser(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: str
    name: str
    version: str
    origin: str
    reference: bool
    self_test: bool
    claims: list[str] | None = None  # taxonomy ids of the causes it can claim; None = undeclared


class RunEnv(BaseModel):
    model_config = ConfigDict(extra="allow")

    python: str
    torch: str | None
    platform: str
    host: str
    cpus: int | None = None


class SkippedCase(BaseModel):
    case_id: str
    reason: str


class RunInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = RUN_SCHEMA_VERSION
    run_id: str
    diageval_version: str = __version__
    git_sha: str | None = None
    diagnoser: RunDiagnoser
    case_set_hash: str
    taxonomy_version: str
    cases_dir: str = Field(description="Where the case files were read from (rescoring reads them again)")
    env: RunEnv
    device: str
    timeout_s: float
    jobs: int
    isolation: Literal["bwrap", "none"] = Field("none", description="bwrap: every diagnoser process ran in a bubblewrap "
                                                "sandbox; none: no sandbox could start (or it was turned off)")
    isolation_note: str | None = Field(None, description="Why isolation is none")
    allow_network: bool = Field(False, description="Whether the sandbox let the diagnoser use the network")
    seed: int | None = Field(None, description="Seed of the shuffled case order")
    max_diagnosis_bytes: int = DEFAULT_LIMITS.max_bytes
    max_findings: int = DEFAULT_LIMITS.max_findings
    status: RunStatus = "running"
    started: datetime
    box_limits: str | None = Field(None, description="The limits on every box and how this machine enforced them")
    finished: datetime | None = None
    skipped: list[SkippedCase] = Field(default_factory=list, description="Selected cases this machine cannot run")
    cases: list[str] | None = Field(
        None, description="The cases this run was asked to diagnose (selected, less skipped); a complete run has one "
        "result line for each. null in runs written before it was recorded")
    error: str | None = Field(None, description="Why a failed run stopped")
    evidence_tier: EvidenceTier = Field(
        "full", description="The evidence tier the diagnoser was given (diageval.cases.tiers); labels it cannot "
        "show are scored as diageval.cases.tiers.case_under_tier says. Runs before the field: full")
    evidence_sizes: dict[str, EvidenceSize] = Field(
        default_factory=dict, description="Case id -> bytes of the bundle the diagnoser got and steps logged")
    repeats: int = Field(1, ge=1, description="How many times each case is diagnosed (--repeats): repeat 1 is this "
                         "folder's results, repeat k >= 2 is repeats/<k>/. Runs before the field: 1")


class SavedOutcome(BaseModel):
    """What re-scoring keeps of a result line, whatever scoring rules wrote it (older lines lack fields that
    :class:`CaseResult` requires now; these few have been in every version)."""

    model_config = ConfigDict(extra="ignore")

    case_id: str
    status: Status
    measured_impact: float | None = None
    measured_magnitude: float | None = None  # regression cases (scoring 4); none before
    manifestation: ManifestationMeasure | None = None  # in runs before it was carried: none
    difficulty: Literal["easy", "medium", "hard"] | None = None  # in runs before it was measured: as declared
    seconds: float | None = None
    usage: Usage | None = None  # an agent's, from its trajectory (issue 41); none before
    error: str | None = None
    bundle_id: str | None = None
    bundle_sha256: str | None = None
    shown_values: dict[str, str] = {}  # the value words the bundle showed (issue 39); none before they were drawn
    rank_draw: list[int] | None = None  # where the recording put the case's ranks (none before issue 44's draw)


class RunFolderConflict(DiagevalError):
    """The folder holds a different run (another diagnoser, version or case set)."""


class RunFolderLocked(RunFolderConflict):
    """Another process is writing the run folder."""


class RunReadError(DiagevalError, ValueError):
    """A run folder that cannot be read as one: the message names the file, the line and the field."""


@dataclass(frozen=True)
class LoadedRun:
    """A run folder read whole: its manifest and every result, typed."""

    root: Path
    info: RunInfo
    results: list[CaseResult]


_Line = TypeVar("_Line", CaseResult, SavedOutcome)

class RunStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        # the folder's own files (module docstring)
        self.info_path = self.root / "run.json"
        self.results_path = self.root / "results.jsonl"
        self.summary_path = self.root / "summary.json"
        self.log_path = self.root / "diagnoser.log"
        self.lock_path = self.root / ".lock"

    def repeat_stores(self, repeats: int) -> list["RunStore"]:
        """The stores of repeats 1..``repeats``: this folder, then ``repeats/<k>/`` (module docstring)."""
        return [self] + [RunStore(self.root / "repeats" / str(k)) for k in range(2, repeats + 1)]

    def case_dir(self, case_id: str) -> Path:
        return self.root / "cases" / case_id

    def diagnosis_path(self, case_id: str) -> Path:
        return self.case_dir(case_id) / "diagnosis.json"

    def trajectory_path(self, case_id: str) -> Path:
        """Where an agent's record of ``case_id`` is kept (format: diageval.diagnosers.agent_record)."""
        return self.case_dir(case_id) / TRAJECTORY_NAME

    def read_trajectory(self, case_id: str) -> tuple[AgentRecord | None, str | None]:
        """``cases/<id>/trajectory.json``: (record, None), (None, None) if absent, (None, why): reported, never raised."""
        path = self.case_dir(case_id) / TRAJECTORY_NAME
        try:
            return (AgentRecord.model_validate_json(path.read_bytes()), None) if path.is_file() else (None, None)
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError: its first problem
            return None, f"{path}: not a diageval trajectory: {' '.join(str(exc).split(chr(10))[1:3]) or exc}"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder's exclusive lock, or raise :class:`RunFolderLocked` naming the holder's pid."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                raise RunFolderLocked(f"{self.root} is locked by pid {holder}: another `diageval run` is writing it") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    def set_aside_torn_tail(self) -> str | None:
        """Move a torn last line of ``results.jsonl`` to ``results.jsonl.torn-<n>``; say what was done."""
        path = self.results_path
        if not path.is_file():
            return None
        data = path.read_bytes()
        if not data or data.endswith(b"\n"):
            return None
        cut = data.rfind(b"\n") + 1
        n = 1
        while path.with_name(f"{path.name}.torn-{n}").exists():
            n += 1
        kept = path.with_name(f"{path.name}.torn-{n}")
        atomic_write_text(kept, data[cut:].decode("utf-8", errors="replace") + "\n")
        atomic_write_text(path, data[:cut].decode("utf-8", errors="replace"))
        line = data[:cut].count(b"\n") + 1
        return f"{path}: line {line} was torn (a writer killed mid-line); kept in {kept.name}, its case runs again"

    # manifest
    def read_info(self) -> RunInfo:
        if not self.info_path.is_file():
            raise FileNotFoundError(f"{self.root}: not a run folder (no run.json)")
        try:
            return RunInfo.model_validate_json(self.info_path.read_bytes())
        except ValueError as exc:
            raise ValueError(f"{self.info_path}: invalid run.json: {exc}") from exc

    def write_info(self, manifest: RunInfo) -> None:
        atomic_write_text(self.info_path, manifest.model_dump_json(indent=2) + "\n")

    def begin(self, manifest: RunInfo) -> RunInfo:
        """Start or resume the run: refuse a folder holding another run; keep the first start time."""
        if self.info_path.is_file():
            old = self.read_info()
            mine = (manifest.diagnoser.spec, manifest.diagnoser.version, manifest.case_set_hash, manifest.taxonomy_version,
                    manifest.evidence_tier)
            theirs = (old.diagnoser.spec, old.diagnoser.version, old.case_set_hash, old.taxonomy_version, old.evidence_tier)
            if mine != theirs:
                raise RunFolderConflict(
                    f"{self.root} holds a run of {old.diagnoser.spec!r} version {old.diagnoser.version} on case set "
                    f"{old.case_set_hash[:12]} (taxonomy {old.taxonomy_version}); this run is {manifest.diagnoser.spec!r} "
                    f"version {manifest.diagnoser.version} on {manifest.case_set_hash[:12]} (taxonomy "
                    f"{manifest.taxonomy_version}), evidence tier {old.evidence_tier} there, {manifest.evidence_tier} here. "
                    "Results are never mixed: pick another --run-id or --out."
                )
            manifest = manifest.model_copy(update={"started": old.started})
        self.summary_path.unlink(missing_ok=True)
        self.write_info(manifest)
        return manifest

    # results: the one reader and writer of results.jsonl
    def read_results(self) -> list[CaseResult]:
        """Every result line, validated; :class:`RunReadError` names the file, line and field."""
        return self._read_lines(CaseResult)

    def read_saved_outcomes(self) -> list[SavedOutcome]:
        """Every result line as re-scoring reads it (:class:`SavedOutcome`), so that a run scored by older
        rules can be re-scored; :class:`RunReadError` names the file, line and field."""
        return self._read_lines(SavedOutcome)

    def _read_lines(self, model: type[_Line]) -> list[_Line]:
        if not self.results_path.is_file():
            return []
        try:
            rows = list(read_jsonl(self.results_path))
        except ValueError as exc:
            raise RunReadError(str(exc)) from None
        out = []
        for line, row in enumerate(rows, 1):
            try:
                out.append(model.model_validate(row))
            except ValidationError as err:
                first = err.errors(include_url=False)[0]
                where = field_path(first["loc"]) or "<top level>"
                raise RunReadError(f"{self.results_path}: result {line}: {where}: {first['msg']}") from None
        self._refuse_repeats([r.case_id for r in out])
        return out

    def _refuse_repeats(self, case_ids: list[str]) -> None:
        """:class:`RunReadError` naming every case with more than one result line, and which ones."""
        where: dict[str, list[int]] = {}
        for n, case_id in enumerate(case_ids, 1):
            where.setdefault(case_id, []).append(n)
        repeated = [f"{cid} (results {', '.join(map(str, ns))})" for cid, ns in sorted(where.items()) if len(ns) > 1]
        if repeated:
            shown = "; ".join(repeated[:10]) + (f"; and {len(repeated) - 10} more" if len(repeated) > 10 else "")
            raise RunReadError(
                f"{self.results_path}: {len(repeated)} case(s) with more than one result line: {shown}. A case has one "
                "line and which of these stands cannot be told: remove the extra lines, or run the cases again"
            )

    def append_result(self, result: CaseResult) -> None:
        append_jsonl(self.results_path, result.model_dump(mode="json"))

    def rewrite_results(self, results: list[CaseResult]) -> None:
        write_jsonl(self.results_path, [r.model_dump(mode="json") for r in results])

    def drop_retryable(self) -> set[str]:
        """Drop ``harness_error`` and ``unavailable`` lines (retried on resume: a recorded case's traces may
        have been fetched since); return the case ids that stay done."""
        results = self.read_results()
        keep = [r for r in results if r.status not in ("harness_error", "unavailable")]
        if len(keep) != len(results):
            self.rewrite_results(keep)
        return {r.case_id for r in keep}

    def read_summary(self) -> Summary:
        """``summary.json``, validated; :class:`RunReadError` says how to rebuild a missing one."""
        path = self.summary_path
        if not path.is_file():
            raise RunReadError(f"{self.root}: no summary.json (an unfinished run? `diageval score {self.root}` rebuilds it)")
        try:
            return Summary.model_validate_json(path.read_bytes())
        except ValidationError as err:
            problems = "; ".join(f"{field_path(e['loc']) or '<top level>'}: {e['msg']}"
                                 for e in err.errors(include_url=False)[:5])
            raise RunReadError(f"{path}: not a diageval summary: {problems}") from None

    def load(self) -> LoadedRun:
        """The manifest and every result (a case that appears twice is refused by :meth:`read_results`)."""
        try:
            manifest = self.read_info()
        except (FileNotFoundError, ValueError) as exc:
            raise RunReadError(str(exc)) from None
        return LoadedRun(root=self.root, info=manifest, results=self.read_results())

    def missing_results(self, manifest: RunInfo, case_ids: list[str]) -> list[str]:
        """The cases ``manifest`` says this run was asked to diagnose that have no result line among
        ``case_ids`` (empty for a run written before ``run.json`` recorded its cases)."""
        have = set(case_ids)
        return sorted(c for c in manifest.cases or () if c not in have)


def now() -> datetime:
    return datetime.now(timezone.utc)


def run_env() -> RunEnv:
    import os

    try:
        torch_version: str | None = version("torch")  # without importing torch
    except PackageNotFoundError:
        torch_version = None
    return RunEnv(
        python=sys.version.split()[0],
        torch=torch_version,
        platform=platform.platform(),
        host=socket.gethostname(),
        cpus=os.cpu_count(),
    )


def git_sha() -> str | None:
    """The source tree's commit (with ``-dirty`` when it has uncommitted changes), if it is a git checkout."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha or None
