"""``cmd:`` diagnosers: an external program that reads a bundle folder and writes a diagnosis as JSON.

The command is a shell command line. Before it runs, ``{bundle}`` is replaced by the bundle folder and
``{out}`` by the file the program must write its :class:`~diageval.diagnosis.Diagnosis` JSON to (both
shell-quoted). Without ``{out}`` the diagnosis is read from the program's stdout. Only these two literal
tokens are replaced, so other braces in the command (awk, jq, JSON) pass through untouched.

Outcomes, decided here:

* the program runs past the timeout -> ``timeout`` (its whole process group is killed: SIGTERM, then
  SIGKILL after a short grace period, so a hung tool never wedges the run; the same for a program that
  exits but leaves background children behind);
* it exits non-zero -> ``diagnoser_error`` with the tail of its stderr, whatever it wrote;
* it exits 0 but writes nothing, or something that is not a valid Diagnosis -> ``invalid_output``;
* otherwise ``ok``.

stdout and stderr go straight to files (``stdout.txt``, ``stderr.txt`` in the work folder), never to
pipes: a chatty program cannot fill a pipe and block, and the files are kept for the person debugging it.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from diageval.diagnosis import Diagnosis, DiagnosisParseError, parse_diagnosis_json
from diageval.run.process_groups import LiveGroups, spawn_group, wait_or_kill

OUTPUT_NAME = "output.json"
STDOUT_NAME = "stdout.txt"
STDERR_NAME = "stderr.txt"
KILL_GRACE_S = 1.0
DEFAULT_TIMEOUT_S = 300.0  # every diagnoser, in-process or cmd:, unless --timeout says otherwise


class CommandResult(BaseModel):
    """What one run of an external diagnoser produced."""

    status: Literal["ok", "timeout", "diagnoser_error", "invalid_output"]
    diagnosis: Diagnosis | None = None
    error: str | None = None
    seconds: float
    returncode: int | None = None


class CommandDiagnoser:
    """Runs one shell command per bundle."""

    name = "cmd"
    version = "1"

    def __init__(self, command: str, timeout: float = DEFAULT_TIMEOUT_S):
        self.command = command
        self.timeout = timeout

    def command_line(self, bundle_dir: Path, out_path: Path) -> str:
        return self.command.replace("{bundle}", shlex.quote(str(bundle_dir))).replace("{out}", shlex.quote(str(out_path)))

    @property
    def writes_file(self) -> bool:
        return "{out}" in self.command

    def run(
        self, bundle_dir: Path, work_dir: Path, timeout: float | None = None, *, live: LiveGroups | None = None
    ) -> CommandResult:
        """Run the command on one bundle; keep its stdout, stderr and output file in ``work_dir``.

        ``live`` (the harness's) lets an interrupted run kill the command while it runs.
        """
        timeout = self.timeout if timeout is None else timeout
        work_dir = Path(work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        out_path = (work_dir / OUTPUT_NAME).resolve()
        out_path.unlink(missing_ok=True)  # a stale file from an earlier attempt must not pass for output
        stdout_path, stderr_path = work_dir / STDOUT_NAME, work_dir / STDERR_NAME
        line = self.command_line(Path(bundle_dir).resolve(), out_path)
        start = time.perf_counter()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            try:
                proc = spawn_group(["/bin/sh", "-c", line], stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            except OSError as exc:
                return CommandResult(status="diagnoser_error", error=f"cannot start /bin/sh: {exc}", seconds=0.0)
            if live is not None:
                live.add(proc)
            try:
                returncode, timed_out = wait_or_kill(proc, timeout, grace=KILL_GRACE_S)
            finally:
                if live is not None:
                    live.discard(proc)
        seconds = time.perf_counter() - start
        if timed_out:
            return CommandResult(status="timeout", error=f"no result after {timeout:g} s; killed", seconds=seconds)
        if returncode != 0:
            tail = _tail(stderr_path)
            how = f"killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"
            return CommandResult(
                status="diagnoser_error", error=how + (f": {tail}" if tail else ""), seconds=seconds, returncode=returncode
            )
        source = out_path if self.writes_file else stdout_path
        diagnosis, error = parse_diagnosis_file(source, what="{out}" if self.writes_file else "stdout")
        if diagnosis is None:
            return CommandResult(status="invalid_output", error=error, seconds=seconds, returncode=returncode)
        return CommandResult(status="ok", diagnosis=diagnosis, seconds=seconds, returncode=returncode)


def parse_diagnosis_file(path: Path, what: str = "output") -> tuple[Diagnosis | None, str | None]:
    """Read and validate a diagnosis JSON file: (diagnosis, None) or (None, what is wrong)."""
    if not path.is_file():
        return None, f"the command exited 0 but wrote no {what} file"
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    if not text:
        return None, f"the command exited 0 but its {what} is empty"
    try:
        return parse_diagnosis_json(text, what), None
    except DiagnosisParseError as exc:
        return None, str(exc)


def _tail(path: Path, limit: int = 300) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    lines = text.splitlines()
    return (lines[-1] if lines else "")[-limit:]
