"""The harness's handle on a long-lived worker process, inside a box, that hosts one in-process diagnoser
(the worker's side is :mod:`diageval.hosting.worker_process`).

Why a separate process: a diagnoser is code we do not control. The harness never imports it: the worker
resolves the spec (``module:attr`` or an entry point) inside the box and reports name and version back,
so import-time code runs where it can reach nothing of the harness. In the worker a diagnoser can hang
(killed at the per-case timeout and replaced), crash the interpreter (``diagnoser_error``), or print
freely (captured per case), and the run goes on. Why long-lived: importing a diagnoser's dependencies
(pandas, torch, HTA) takes seconds; one worker per job slot pays that once, so the per-case cost is one
private bundle copy and one round trip over a pipe (see ``benchmarks/run_overhead.py``).

Protocol: JSON lines. The harness writes requests to the worker's stdin; the worker answers each on its
original stdout, which it keeps for the protocol alone (fd 1 is pointed at its stderr, the box's
``worker.log``, copied to the run's ``diagnoser.log`` when the worker ends).

* ``{"op": "init", "spec": ...}`` -> ``{"ok": true, "name": ..., "version": ..., "origin": ...}`` or
  ``{"ok": false, "error": ...}``: the spec is resolved and the diagnoser constructed here, in the box.
* ``{"op": "prepare", "handover": {"kind": "corpus"|"vocabulary", "data": {...}}}`` -> ``{"ok": true}``:
  ``diagnoser.prepare(...)``. Which built-ins get a hand-over is the harness's own decision
  (:mod:`diageval.hosting.handover`); the harness sends it after init, so no diagnoser code has run with it
  in reach unless the harness's table says so.
* ``{"op": "diagnose", "bundle": ..., "dir": ...}``: with ``dir`` as working directory and fds 1 and 2 on
  ``dir/stdout.txt`` and ``dir/stderr.txt``, diagnose, write the diagnosis to ``dir/output.json`` and
  answer ``{"status": ..., "error": ..., "seconds": ...}``. The harness reads ``output.json`` through the
  one diagnosis reader, with its limits: nothing the worker says is trusted beyond its status.
* ``{"op": "list"}`` -> ``{"ok": true, "rows": [...]}``: ``diageval diagnosers list``, built inside the box.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from diageval.hosting.attempt import Attempt
from diageval.hosting.case_box import close_case, open_case, read_output
from diageval.hosting.limits import BoxGuard
from diageval.hosting.policy import HostPolicy
from diageval.hosting.process_groups import LiveGroups, kill_group, signal_group
from diageval.hosting.sandbox import Box, Isolation
from diageval.hosting.errors import WorkerStartError

WORKER_MODULE = "diageval.hosting.worker_process"  # the worker's side of the protocol
REPLY_CAP = 1 << 20  # a status line; a diagnosis travels in output.json, never in a reply
LOG_NAME = "worker.log"
LOG_CAP = 16 << 20



# --- the harness's side ----------------------------------------------------------------------------


class WorkerExecutor:
    """Runs diagnoses in one worker process in its own box, started on first use and replaced after a
    timeout or crash."""

    def __init__(
        self,
        spec: str,
        *,
        isolation: Isolation,
        log_path: Path | None = None,
        live: LiveGroups | None = None,
        policy: HostPolicy | None = None,
        python_path: tuple[str, ...] = (),
        init_timeout: float = 120.0,
    ):
        self.spec = spec
        self.isolation = isolation
        self.handover: dict[str, Any] | None = None
        self.log_path = Path(log_path) if log_path else None
        self.live = live or LiveGroups()
        self.policy = policy or HostPolicy()
        self.limits = self.policy.output
        self.python_path = python_path
        self.init_timeout = init_timeout
        self.starts = 0
        self.forks = False  # until the worker says it keeps cases apart
        self.cases = 0  # diagnosed by this executor
        self.identity: dict[str, Any] | None = None
        self._box: Box | None = None
        self._proc: subprocess.Popen | None = None
        self._buffer = bytearray()

    def describe(self) -> dict[str, Any]:
        """Start the worker (if needed) and return what it reported: name, version, origin, claims (when the
        diagnoser declares them) and needs_network."""
        if self._proc is None:
            self._start()
        assert self.identity is not None
        return self.identity

    def adopt(self, live: LiveGroups, log_path: Path | None) -> None:
        """Belong to a run: its live process groups (so that Ctrl-C kills this worker too) and its log."""
        if self._proc is not None:
            self.live.discard(self._proc)
            live.add(self._proc)
        self.live, self.log_path = live, Path(log_path) if log_path else None

    def prepare(self, handover: dict[str, Any]) -> None:
        """Hand ``handover`` to the diagnoser now, and again to every worker that replaces this one."""
        self.handover = handover
        if self._proc is None:
            self._start()
        else:
            self._prepare()

    def diagnose(self, bundle_dir: Path, case_dir: Path | None, *, bundle_id: str) -> Attempt:
        """Diagnose the bundle (a private copy; raises ``BundleIntegrityError`` before anything runs).

        The worker lives on between cases (its imports are paid once), but nothing carries over: whatever a
        case left in its output folder is removed before the next one starts, another's diagnoser runs each
        case in a child of its own and the box is swept after it (:mod:`~diageval.hosting.worker_process`),
        and a worker that cannot keep cases apart (``forks`` false at init, or ``leftovers`` after a case) is
        replaced by a fresh box and worker."""
        if self._proc is not None and not self.forks and self.cases > 0:
            self.close()  # the worker cannot keep cases apart: a fresh box and worker for every case
        if self._proc is None:
            self._start()
        assert self._box is not None
        self._box.empty_out()
        self.cases += 1
        folders = open_case(self._box, bundle_dir, bundle_id)
        timeout = self.policy.timeout_s
        reply: dict[str, Any] | None = None
        try:
            request = {"op": "diagnose", "bundle": str(folders.bundle), "dir": str(folders.out_dir)}
            start = time.perf_counter()
            proc = self._proc
            with BoxGuard(self._box.groups, self._box.host_out, lambda: signal_group(proc, 9)) as guard:
                reply, problem = self._ask(request, timeout)
            elapsed = time.perf_counter() - start
            if guard.reason is not None:
                if self._proc is not None:
                    self._kill()
                return Attempt(status="diagnoser_error", error=f"the box was stopped: {guard.reason}", seconds=elapsed)
            return self._attempt_from(reply, problem, folders, timeout, elapsed)
        finally:
            close_case(folders, case_dir)
            if reply is not None and reply.get("leftovers"):  # the box holds what the next case could read
                self.close()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # the worker's loop ends at EOF
                proc.wait(timeout=5)
            except Exception:
                pass
            finally:
                if proc.poll() is None:
                    kill_group(proc)
                self.live.discard(proc)
                proc.stdout.close()
        self._keep_log()
        if self._box is not None:
            self._box.remove()
            self._box = None

    # internals

    def _attempt_from(self, reply: dict[str, Any] | None, problem: str | None, folders: Any, timeout: float, elapsed: float) -> Attempt:
        if reply is None:
            if problem == "timeout":
                return Attempt(status="timeout", error=f"no result after {timeout:g} s; worker killed", seconds=elapsed)
            return Attempt(status="diagnoser_error", error=problem, seconds=elapsed)
        status = reply.get("status")
        seconds = reply.get("seconds") if isinstance(reply.get("seconds"), (int, float)) else elapsed
        seconds = min(float(seconds), elapsed)  # the worker's own clock, never more than the harness saw
        error = str(reply.get("error"))[:2000] if reply.get("error") is not None else None
        if status in ("diagnoser_error", "invalid_output", "cap_hit"):
            return Attempt(status=status, error=error or status, seconds=seconds)
        if status != "ok":
            return Attempt(status="diagnoser_error", error=f"the worker answered an unknown status {status!r}", seconds=seconds)
        diagnosis, why = read_output(folders, "the diagnosis", self.limits)
        if diagnosis is None:
            return Attempt(status="invalid_output", error=why, seconds=seconds)
        return Attempt(status="ok", diagnosis=diagnosis, seconds=seconds)

    def ask_once(self, request: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str | None]:
        """Start a bare worker (no diagnoser) and ask it one thing (``diageval diagnosers list``)."""
        self._spawn()
        return self._ask(request, timeout)

    def _spawn(self) -> None:
        self._box = self._box or self.isolation.new_box()
        python_path = os.pathsep.join(p for p in self.python_path if p) or None  # the diagnoser's own folder alone
        with open(self._box.host / LOG_NAME, "ab") as log:
            proc = self._box.spawn([sys.executable, "-m", WORKER_MODULE], self._box.host_out, {"PYTHONPATH": python_path},
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        self._proc, self._buffer = proc, bytearray()
        self.live.add(proc)
        self.starts += 1

    def _start(self) -> None:
        from diageval.hosting.registry import DiagnoserSpecError

        self._spawn()
        reply, problem = self._ask({"op": "init", "spec": self.spec, "allow_network": self.policy.allow_network,
                                    "sweep": self.isolation.kind != "none"}, self.init_timeout)
        if reply is None or not reply.get("ok"):
            why = str(reply.get("error")) if reply else problem
            log_tail = self._log_tail()
            self.close()
            if reply is not None and reply.get("spec_error"):
                raise DiagnoserSpecError(why)
            raise WorkerStartError(f"diagnoser {self.spec!r} could not start: {why}" + (f"\n{log_tail}" if log_tail else ""))
        self.identity = {k: str(reply.get(k, ""))[:200] for k in ("name", "version", "origin")}
        claims = reply.get("claims")  # the box's word, so checked: a list of short strings, or not declared
        if isinstance(claims, list) and all(isinstance(c, str) for c in claims):
            self.identity["claims"] = [c[:200] for c in claims[:1000]]
        self.identity["needs_network"] = reply.get("needs_network") is True
        self.forks = reply.get("forks") is True  # each case in a child of its own (worker_process); else a fresh worker
        if self.handover is not None:
            self._prepare()

    def _prepare(self) -> None:
        reply, problem = self._ask({"op": "prepare", "handover": self.handover}, self.init_timeout)
        if reply is None or not reply.get("ok"):
            why = str(reply.get("error")) if reply else problem
            self.close()
            raise WorkerStartError(f"diagnoser {self.spec!r} could not take its {self.handover['kind']}: {why}")

    def _ask(self, request: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str | None]:
        """Send one request and wait for its reply line: (reply, None) or (None, what went wrong).

        On a timeout, a dead worker or a garbled or oversized reply the worker is gone afterwards; the
        next attempt starts a new one.
        """
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None, self._died()
        deadline = time.monotonic() + timeout
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                return None, "timeout"
            if len(self._buffer) > REPLY_CAP:
                self._kill()
                return None, f"the worker's reply is over {REPLY_CAP >> 20} MiB; worker killed"
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None, self._died()
                self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            reply = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            self._kill()
            return None, f"the worker's reply is garbled: {line[:120]!r}"
        return reply, None

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_group(proc)
            self.live.discard(proc)

    def _died(self) -> str:
        proc, self._proc = self._proc, None
        assert proc is not None
        kill_group(proc)  # reaps it; kills anything it left running
        self.live.discard(proc)
        code = proc.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
        return f"the diagnoser's worker process died ({how})" + (f"; see {self.log_path}" if self.log_path else "")

    def _log_tail(self, lines: int = 8) -> str:
        if self._box is None:
            return ""
        try:
            text = (self._box.host / LOG_NAME).read_bytes()[-8000:].decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def _keep_log(self) -> None:
        """Append what the worker printed outside any case (capped) to the run's diagnoser.log."""
        if self._box is None or self.log_path is None:
            return
        src = self._box.host / LOG_NAME
        try:
            size = src.stat().st_size
        except OSError:
            return
        if size == 0:
            return
        with open(src, "rb") as fh:
            data = fh.read(LOG_CAP)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            out.write(data + (f"\n[diageval: cut at {LOG_CAP >> 20} MiB]\n".encode() if size > LOG_CAP else b""))
        src.write_bytes(b"")


def list_in_box(isolation: Isolation, timeout: float = 300.0) -> list[dict[str, Any]]:
    """``diageval diagnosers list``, built by a worker inside a box (listing constructs each diagnoser)."""
    ex = WorkerExecutor("", isolation=isolation, init_timeout=timeout)
    try:
        reply, problem = ex.ask_once({"op": "list"}, timeout)
        if reply is None or not reply.get("ok"):
            raise WorkerStartError(f"listing the diagnosers failed: {reply.get('error') if reply else problem}")
        return list(reply["rows"])
    finally:
        ex.close()
