"""Child processes the harness may have to kill: a diagnoser that hangs, or everything on Ctrl-C.

Every diagnoser process (a ``cmd:`` program or the worker hosting an in-process diagnoser) starts in a
session of its own, so that killing it takes along whatever it started (a shell's children, a
multiprocessing pool) and so that the terminal's Ctrl-C reaches only the harness, which then stops them
in order and leaves the run folder consistent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any


def spawn_group(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` in a new session (its own process group, led by the child)."""
    return subprocess.Popen(argv, start_new_session=True, **popen_kwargs)


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(proc: subprocess.Popen, grace: float = 0.0) -> None:
    """SIGTERM the group and give it ``grace`` seconds (if any), then SIGKILL what is left; reap the leader."""
    if grace > 0:
        signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    signal_group(proc, signal.SIGKILL)
    proc.wait()


def wait_or_kill(proc: subprocess.Popen, timeout: float, grace: float = 1.0) -> tuple[int, bool]:
    """Wait for ``proc``; past ``timeout`` seconds kill its group. Returns (returncode, timed_out).

    The wait itself blocks in ``waitpid`` (no polling, so a fast program is not slowed down); a timer
    thread does the killing. Leftover members of the group are killed either way.
    """
    fired = threading.Event()
    exited = threading.Event()

    def expire() -> None:
        fired.set()
        signal_group(proc, signal.SIGTERM)
        if not exited.wait(grace):
            signal_group(proc, signal.SIGKILL)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        returncode = proc.wait()
    finally:
        exited.set()
        timer.cancel()
    if fired.is_set():
        timer.join()
    signal_group(proc, signal.SIGKILL)  # background children the program left behind
    return returncode, fired.is_set()


class LiveGroups:
    """The process groups of diagnoses in flight, so that an interrupted run can stop them all at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self._closed = False

    def add(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.add(proc)
            closed = self._closed
        if closed:  # started after kill_all: stop it at once
            signal_group(proc, signal.SIGKILL)

    def discard(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def kill_all(self) -> None:
        with self._lock:
            self._closed = True
            procs = list(self._procs)
        for proc in procs:
            signal_group(proc, signal.SIGKILL)
