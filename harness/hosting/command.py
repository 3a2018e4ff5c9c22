"""``cmd:`` diagnosers: an external program that reads a bundle folder and writes a diagnosis as JSON.

The command is a shell command line. Before it runs, ``{bundle}`` is replaced by the (private, read-only)
bundle copy and ``{out}`` by the file the program must write its :class:`~diageval.diagnosis.Diagnosis`
JSON to (both shell-quoted). Without ``{out}`` the diagnosis is read from the program's stdout. Only
these two literal tokens are replaced, so other braces in the command (awk, jq, JSON) pass through.

Each case runs in a box of its own (:mod:`diageval.hosting.sandbox`), made for it and removed after it: a
fresh PID namespace, so every process the program starts, a ``setsid`` daemon included, ends when its
case does; a fresh ``/box/out`` and ``/tmp``, so nothing one case wrote is there for the next; its own
limits (:mod:`diageval.hosting.limits`). Outcomes, decided here:

* the program runs past the timeout -> ``timeout`` (the box is killed: SIGTERM, then SIGKILL after a
  short grace period, so a hung tool never wedges the run);
* it breaks a box limit (a fork bomb at the process limit, a memory hog, a disk fill of its folder) ->
  ``diagnoser_error`` saying which (the box is killed at once);
* it exits non-zero -> ``diagnoser_error`` with the tail of its stderr, whatever it wrote;
* it exits 0 but writes nothing, or something that is not a valid Diagnosis (or is over the limits) ->
  ``invalid_output``;
* otherwise ``ok``.

stdout and stderr go straight to files (``stdout.txt``, ``stderr.txt`` in the case's folder), never to
pipes: a chatty program cannot fill a pipe and block, and the files are kept (capped) for the person
debugging it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from diageval.hosting.attempt import Attempt
from diageval.diagnosers.base import TRAJECTORY_NAME
from diageval.hosting.case_box import OUTPUT_NAME, STDERR_NAME, STDOUT_NAME, CaseFolders, close_case, open_case, read_output
from diageval.hosting.limits import BoxGuard
from diageval.hosting.policy import HostPolicy
from diageval.hosting.process_groups import LiveGroups, signal_group, wait_or_kill
from diageval.hosting.sandbox import Isolation

KILL_GRACE_S = 1.0


class CommandDiagnoser:
    """One shell command line with ``{bundle}`` and ``{out}`` placeholders."""

    def __init__(self, command: str):
        self.command = command

    def command_line(self, bundle_dir: Path, out_path: Path) -> str:
        return self.command.replace("{bundle}", shlex.quote(str(bundle_dir))).replace("{out}", shlex.quote(str(out_path)))

    @property
    def writes_file(self) -> bool:
        return "{out}" in self.command


class CommandExecutor:
    """Runs a ``cmd:`` diagnoser once per case, each time in a fresh box."""

    def __init__(self, command: CommandDiagnoser, *, isolation: Isolation, live: LiveGroups | None = None,
                 policy: HostPolicy | None = None):
        self.command = command
        self.isolation = isolation
        self.live = live or LiveGroups()
        self.policy = policy or HostPolicy()

    def diagnose(self, bundle_dir: Path, case_dir: Path | None, *, bundle_id: str) -> Attempt:
        """Run the command on a private copy of the bundle (raises ``BundleIntegrityError`` first if the
        cached bundle does not match its ``bundle.json``); keep stdout, stderr and output in ``case_dir``."""
        box = self.isolation.new_box()
        try:
            folders = open_case(box, bundle_dir, bundle_id)
            try:
                return self._run(folders)
            finally:
                close_case(folders, case_dir, keep=(STDOUT_NAME, STDERR_NAME, OUTPUT_NAME, TRAJECTORY_NAME),
                           output_cap=self.policy.output.max_bytes)
        finally:
            box.remove()

    def close(self) -> None:
        pass  # every box is removed with its case

    def _run(self, folders: CaseFolders) -> Attempt:
        box = folders.box
        timeout = self.policy.timeout_s
        line = self.command.command_line(folders.bundle, folders.output)
        start = time.perf_counter()
        with open(folders.out_host / STDOUT_NAME, "wb") as out, open(folders.out_host / STDERR_NAME, "wb") as err:
            try:
                proc = box.spawn(["/bin/sh", "-c", line], folders.out_host, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            except OSError as exc:
                return Attempt(status="diagnoser_error", error=f"cannot start {sys.executable}: {exc}", seconds=0.0)
            self.live.add(proc)
            try:
                with BoxGuard(box.groups, box.host_out, lambda: signal_group(proc, 9)) as guard:
                    returncode, timed_out = wait_or_kill(proc, timeout, grace=KILL_GRACE_S)
            finally:
                self.live.discard(proc)
        seconds = time.perf_counter() - start
        if guard.reason is not None:
            return Attempt(status="diagnoser_error", error=f"the box was stopped: {guard.reason}", seconds=seconds)
        if timed_out:
            return Attempt(status="timeout", error=f"no result after {timeout:g} s; killed", seconds=seconds)
        if returncode != 0:
            tail = _tail(folders.out_host / STDERR_NAME)
            how = f"killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"
            return Attempt(status="diagnoser_error", error=how + (f": {tail}" if tail else ""), seconds=seconds)
        diagnosis, error = read_output(folders, "{out}" if self.command.writes_file else "stdout", self.policy.output)
        if diagnosis is None:
            return Attempt(status="invalid_output", error=error, seconds=seconds)
        return Attempt(status="ok", diagnosis=diagnosis, seconds=seconds)


def _tail(path: Path, limit: int = 300) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 4096))
            text = fh.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""
    lines = text.splitlines()
    return (lines[-1] if lines else "")[-limit:]
