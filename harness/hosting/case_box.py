"""One case inside a box: the private bundle copy going in, the diagnoser's output coming back.

Both executors (the worker hosting an in-process diagnoser, and a ``cmd:`` program) go through here, so a
diagnoser sees the same thing either way: the bundle under a random name, read-only, and a fresh folder,
also randomly named and its working directory, for ``{out}`` (``output.json``), ``stdout.txt`` and
``stderr.txt``. Only the harness writes the run folder: after the diagnoser is done, it copies what is
worth keeping into ``runs/<run>/cases/<id>/``, reading each file without following links, only if it is a
regular file, and at most :data:`KEEP_CAP` bytes of it (the rest is cut, and the cut is said).
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from diageval.diagnosers.base import TRAJECTORY_NAME
from diageval.diagnosis import DEFAULT_LIMITS, Diagnosis, DiagnosisLimits, DiagnosisParseError, parse_diagnosis_json
from diageval.hosting.private_bundle import private_copy, remove_copy
from diageval.hosting.sandbox import Box

OUTPUT_NAME = "output.json"
STDOUT_NAME = "stdout.txt"
STDERR_NAME = "stderr.txt"
KEEP_CAP = 16 << 20  # bytes of stdout/stderr kept per case: as much as a diagnosis may be


@dataclass(frozen=True)
class CaseFolders:
    """A case's two folders, as the host and as the diagnoser see them."""

    box: Box
    bundle_host: Path
    out_host: Path

    @property
    def bundle(self) -> Path:
        return self.box.inner(self.bundle_host)

    @property
    def out_dir(self) -> Path:
        return self.box.inner(self.out_host)

    @property
    def output(self) -> Path:
        return self.out_dir / OUTPUT_NAME


def open_case(box: Box, bundle_dir: Path, bundle_id: str) -> CaseFolders:
    """Copy the bundle into ``box`` (checked; raises ``BundleIntegrityError``) and make the output folder."""
    folders = CaseFolders(box, box.host_in / secrets.token_hex(8), box.host_out / secrets.token_hex(8))
    private_copy(bundle_dir, folders.bundle_host, bundle_id)
    folders.out_host.mkdir()
    return folders


def read_output(folders: CaseFolders, source: str, limits: DiagnosisLimits = DEFAULT_LIMITS) -> tuple[Diagnosis | None, str | None]:
    """The diagnosis the diagnoser wrote (``output.json``, or its stdout when ``source == "stdout"``):
    (diagnosis, None) or (None, what is wrong), through the one diagnosis reader and its limits."""
    name = STDOUT_NAME if source == "stdout" else OUTPUT_NAME
    data, problem = _read_regular(folders.out_host / name, limits.max_bytes + 1)
    if problem == "missing":
        return None, f"the diagnoser wrote no {source}"
    if problem:
        return None, f"{source}: {problem}"
    if not data.strip():
        return None, f"the diagnoser's {source} is empty"
    try:
        return parse_diagnosis_json(data, source, limits), None
    except DiagnosisParseError as exc:
        return None, str(exc)


def close_case(folders: CaseFolders, case_dir: Path | None, keep: tuple[str, ...] = (STDOUT_NAME, STDERR_NAME, TRAJECTORY_NAME),
               output_cap: int = DEFAULT_LIMITS.max_bytes) -> None:
    """Copy ``keep`` (non-empty regular files only) into ``case_dir``, then remove both folders (an agent's
    ``trajectory.json`` is kept like its stdout; the run store reads it through its format). stdout and
    stderr are cut at :data:`KEEP_CAP`; ``output.json`` is kept only within ``output_cap`` (beyond it the
    case is ``invalid_output`` and its error says why)."""
    try:
        if case_dir is not None:
            for name in keep:
                data, problem = _read_regular(folders.out_host / name, KEEP_CAP + 1)
                if problem or not data or (name == OUTPUT_NAME and len(data) > output_cap):
                    continue
                if len(data) > KEEP_CAP:
                    data = data[:KEEP_CAP] + f"\n[diageval: cut at {KEEP_CAP >> 20} MiB]\n".encode()
                Path(case_dir).mkdir(parents=True, exist_ok=True)
                (Path(case_dir) / name).write_bytes(data)
    finally:
        remove_copy(folders.bundle_host)
        remove_copy(folders.out_host)


def _read_regular(path: Path, limit: int) -> tuple[bytes, str | None]:
    """At most ``limit`` bytes of ``path`` if it is a regular file (links are not followed, a FIFO does
    not block): (data, None), or (b"", "missing" / what it is instead)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b"", "missing"
    except OSError as exc:
        return b"", f"not a plain file ({exc.strerror or exc})"
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return b"", "not a plain file"
        return fh.read(limit), None
