"""A long-lived worker process that hosts one in-process diagnoser, and the harness's handle on it.

Why a separate process: a diagnoser is code we do not control. In a worker it can hang (killed at the
per-case timeout and replaced), crash the interpreter (the case gets ``diagnoser_error``), or print
freely (captured per case), and the run goes on. Why long-lived: constructing a diagnoser and importing
its dependencies (pandas, torch, HTA) takes seconds; one worker per job slot pays that once, so the
per-case cost is one round trip over a pipe (see ``benchmarks/run_overhead.py``).

Protocol: JSON lines. The harness writes requests to the worker's stdin; the worker answers each on its
original stdout, which it keeps for the protocol alone: the diagnoser's own prints go to the case's
``stdout.txt``/``stderr.txt`` while it diagnoses, and to the run's ``diagnoser.log`` otherwise.

* ``{"op": "init", "spec": ..., "corpus": {...} | null}`` -> ``{"ok": true, "name": ..., "version": ...}``
  or ``{"ok": false, "error": ...}``. The corpus is sent only for reference diagnosers, which alone get
  ``prepare(corpus)``.
* ``{"op": "diagnose", "bundle": ..., "stdout": ..., "stderr": ...}`` -> an :class:`Attempt` as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from diageval.run.attempt import Attempt
from diageval.run.process_groups import LiveGroups, kill_group, spawn_group
from diageval.validation import field_path

WORKER_MODULE = "diageval.run.worker"


class WorkerStartError(Exception):
    """The diagnoser could not be started in a worker (import error, DiagnoserUnavailable, ...)."""


# --- the harness's side ----------------------------------------------------------------------------


class WorkerExecutor:
    """Runs diagnoses in one worker process, started on first use and replaced after a timeout or crash."""

    def __init__(
        self,
        spec: str,
        *,
        corpus_json: str | None,
        log_path: Path,
        live: LiveGroups | None = None,
        init_timeout: float = 120.0,
    ):
        self.spec = spec
        self.corpus_json = corpus_json
        self.log_path = Path(log_path)
        self.live = live or LiveGroups()
        self.init_timeout = init_timeout
        self.starts = 0
        self._proc = None
        self._buffer = bytearray()

    def attempt(self, bundle_dir: Path, case_dir: Path, timeout: float) -> Attempt:
        if self._proc is None:
            self._start()
        case_dir = Path(case_dir)
        case_dir.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = case_dir / "stdout.txt", case_dir / "stderr.txt"
        request = {"op": "diagnose", "bundle": str(bundle_dir), "stdout": str(stdout_path), "stderr": str(stderr_path)}
        start = time.perf_counter()
        reply, problem = self._ask(request, timeout)
        elapsed = time.perf_counter() - start
        for p in (stdout_path, stderr_path):  # keep only what the diagnoser actually printed
            if p.is_file() and p.stat().st_size == 0:
                p.unlink()
        if reply is not None:
            return Attempt.model_validate(reply)
        if problem == "timeout":
            return Attempt(status="timeout", error=f"no result after {timeout:g} s; worker killed", seconds=elapsed)
        return Attempt(status="diagnoser_error", error=problem, seconds=elapsed)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
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

    def _start(self) -> None:
        env = dict(os.environ)
        # The worker imports exactly what this process can: module:attr specs resolve the same way.
        paths = [p for p in sys.path if p] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            proc = spawn_group([sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
        self._proc, self._buffer = proc, bytearray()
        self.live.add(proc)
        self.starts += 1
        corpus = json.loads(self.corpus_json) if self.corpus_json is not None else None
        reply, problem = self._ask({"op": "init", "spec": self.spec, "corpus": corpus}, self.init_timeout)
        if reply is None or not reply.get("ok"):
            why = reply.get("error") if reply else problem
            self.close()
            raise WorkerStartError(f"diagnoser {self.spec!r} could not start: {why} (worker log: {self.log_path})")

    def _ask(self, request: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str | None]:
        """Send one request and wait for its reply line: (reply, None) or (None, what went wrong).

        On a timeout or a dead worker the worker is gone afterwards; the next attempt starts a new one.
        """
        proc = self._proc
        assert proc is not None
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
                kill_group(proc)
                self.live.discard(proc)
                self._proc = None
                return None, "timeout"
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None, self._died()
                self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            return json.loads(line), None
        except json.JSONDecodeError:
            kill_group(proc)
            self._proc = None
            return None, f"the worker's reply is garbled: {line[:120]!r}"

    def _died(self) -> str:
        proc, self._proc = self._proc, None
        assert proc is not None
        kill_group(proc)  # reaps it; kills anything it left running
        self.live.discard(proc)
        code = proc.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
        return f"the diagnoser's worker process died ({how}); see {self.log_path}"


# --- the worker's side -----------------------------------------------------------------------------


@contextlib.contextmanager
def _captured(stdout_path: str, stderr_path: str) -> Iterator[None]:
    """Point fds 1 and 2 (and so print, logging and C libraries) at the case's files for a while."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _init(request: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from diageval.run.registry import resolve_diagnoser

    resolved = resolve_diagnoser(request["spec"])
    diagnoser = resolved.factory()
    if request.get("corpus") is not None:
        if not resolved.reference:
            raise RuntimeError("refusing to hand the corpus (labels) to a diagnoser not marked reference")
        from diageval.run.corpus import ReferenceCorpus

        prepare = getattr(diagnoser, "prepare", None)
        if prepare is not None:
            prepare(ReferenceCorpus.model_validate(request["corpus"]))
    return diagnoser, {"ok": True, "name": resolved.name, "version": resolved.version}


def _diagnose(diagnoser: Any, request: dict[str, Any]) -> dict[str, Any]:
    from pydantic import ValidationError

    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.base import DiagnoserFailed
    from diageval.diagnosis import Diagnosis

    start = time.perf_counter()
    try:
        with _captured(request["stdout"], request["stderr"]):
            try:
                result = diagnoser.diagnose(EvidenceBundle.open(Path(request["bundle"])))
            except BaseException:
                traceback.print_exc()  # into the case's stderr.txt
                raise
    except DiagnoserFailed as exc:
        return _attempt("diagnoser_error", start, error=f"{exc.status}: {exc}")
    except Exception as exc:
        return _attempt("diagnoser_error", start, error=f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - start
    try:
        payload = result.model_dump(mode="json") if isinstance(result, Diagnosis) else result
        diagnosis = Diagnosis.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = field_path(first["loc"]) or "<top level>"
        return _attempt("invalid_output", start, seconds, error=f"not a valid Diagnosis: {where}: {first['msg']}")
    return Attempt(status="ok", diagnosis=diagnosis, seconds=seconds).model_dump(mode="json")


def _attempt(status: str, start: float, seconds: float | None = None, *, error: str) -> dict[str, Any]:
    return {"status": status, "error": error, "seconds": seconds if seconds is not None else time.perf_counter() - start}


def main() -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # stray prints between cases go to the run's log, never into the protocol
    diagnoser = None
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "init":
            try:
                diagnoser, reply = _init(request)
            except Exception as exc:
                traceback.print_exc()
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        elif request["op"] == "diagnose":
            if diagnoser is None:
                reply = {"status": "diagnoser_error", "error": "worker not initialised", "seconds": 0.0}
            else:
                reply = _diagnose(diagnoser, request)
        else:
            reply = {"ok": False, "error": f"unknown op {request['op']!r}"}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


if __name__ == "__main__":
    main()
