"""Start one process per rank, watch them, and turn a crash or a hang into a clear error.

Decided here:

* Ranks are forked from a ``forkserver`` that preloaded torch, ``torch._dynamo`` (which the first
  optimizer otherwise imports lazily, ~1.4 s) and the rank worker. Children start in a fraction of a
  second, and unlike a plain fork they are safe whatever the calling process did before (ran torch ops
  on several OpenMP threads, started threads of its own): the server itself never runs an op. The
  first recording in a process pays ~3 s to start the server.
* A rank dies with its parent (``PR_SET_PDEATHSIG``): the forkserver exits when the harness does (even
  on SIGKILL, it sees its pipe close), and the kernel then kills every rank, so a killed ``record`` or
  ``run`` leaves no rank behind. DataLoader workers watch their rank and exit with it.
* Each rank's stdout and stderr (file descriptors 1 and 2, so C++ output too) go to its log file.
* ``run_ranks`` waits until every rank exits or ``timeout_s`` passes; then it kills what is left and
  raises :class:`RecordingError` naming the rank that hung (or the first that failed, with its log's tail).
  Exit codes in ``accepted_exit_codes`` (a job that failed as its case intends, having written its
  evidence) count as finished, not as crashes.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from diageval.errors import DiagevalError

PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "diageval.recording.rank_worker"]


class RecordingError(DiagevalError):
    """A recording failed: a rank crashed, hung, or wrote no usable evidence."""


def _context() -> multiprocessing.context.BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _rank_entry(target: Callable[..., Any], args: tuple, log_path: str) -> None:
    """Child side: die with the parent, send fds 1 and 2 to the rank's log, then run ``target(*args)``."""
    die_with_parent()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    target(*args)
    sys.stdout.flush()
    sys.stderr.flush()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def run_ranks(
    target: Callable[..., Any],
    rank_args: Sequence[tuple],
    log_paths: Sequence[Path],
    *,
    timeout_s: float,
    what: str,
    on_started: Callable[[list[int]], None] | None = None,
    accepted_exit_codes: frozenset[int] = frozenset({0}),
) -> None:
    """Run ``target(*rank_args[r])`` in one process per rank; raise RecordingError unless all exit 0.

    ``what`` names the job in errors (e.g. the case id: the parent may name it, the ranks never see it).
    ``on_started`` receives the ranks' pids once all have started (the metrics sampler uses them).
    """
    ctx = _context()
    procs = []
    try:
        for args, log in zip(rank_args, log_paths):
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            p = ctx.Process(target=_rank_entry, args=(target, args, str(log)), daemon=False)  # ranks start DataLoader workers
            p.start()
            procs.append(p)
        if on_started is not None:
            on_started([p.pid for p in procs])
        deadline = time.monotonic() + timeout_s
        failed: int | None = None
        while True:
            alive = [r for r, p in enumerate(procs) if p.exitcode is None]
            crashed = [r for r, p in enumerate(procs) if p.exitcode is not None and p.exitcode not in accepted_exit_codes]
            if crashed:
                failed = crashed[0]
                break
            if not alive:
                return
            if time.monotonic() > deadline:
                raise RecordingError(
                    f"{what}: rank {alive[0]} did not finish within {timeout_s:.0f}s and was killed "
                    f"(ranks still running: {alive}). Last lines of its log {log_paths[alive[0]]}:\n{_tail(Path(log_paths[alive[0]]))}"
                )
            procs[alive[0]].join(0.02)
        # a crashed rank is reported at once; the finally below kills its peers (they would wait for it)
        code = procs[failed].exitcode
        raise RecordingError(
            f"{what}: rank {failed} failed (exit code {code}). Last lines of its log {log_paths[failed]}:\n"
            f"{_tail(Path(log_paths[failed]))}"
        )
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
        for p in procs:
            p.join(5)
