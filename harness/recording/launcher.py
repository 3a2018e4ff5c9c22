"""Start one process per rank, watch them, and turn a crash or a hang into a clear error.

Decided here:

* Ranks are started through a ``forkserver`` that preloaded torch, ``torch._dynamo`` (which the first
  optimizer otherwise imports lazily, ~1.4 s), inductor's ``compile_fx`` (it imports AOT autograd and the
  inductor modules that a ``torch.compile``'d model's first step otherwise imports: 600 modules with aot_eager,
  30 left once it is loaded; ~0.8 s to import alone, while the aot_eager candidate of the recompiling
  regressions paid ~3 s for them inside its first step, in every recording: issue 42) and the rank worker.
  Children start in a fraction of a second, and unlike a plain fork they are safe whatever the calling
  process did before (ran torch ops on several OpenMP threads, started threads of its own): the server
  itself never runs an op (importing ``compile_fx`` records none under the profiler), nor does
  the single-threaded process it forks for each rank, which forks the rank (below). The first recording
  in a process pays ~3-4 s to start the server (its imports: 2.4-4.3 s without ``compile_fx``, 3.2-4.6 s with
  it, three fresh processes each at load 3 on 2 cores).
* The forkserver also preloads the modules the parent's main script took its names from
  (:func:`main_modules`). multiprocessing runs a main script that was started by path again, as
  ``__mp_main__``, in every process the forkserver starts, so each rank's parent imported what the main
  imports (``diageval``'s console script: ``diageval.cli`` and everything it imports, measured 0.05 s a rank
  on 2 cores with the server's preloads, in every recording); already in the server, they are not imported
  again.
* Each rank runs under a parent of its own, not under the forkserver: the forkserver forks the rank's
  parent, which forks the rank, tells the launcher the rank's pid (the metrics sample the rank and its
  descendants) and then only reaps: the rank, and any process the rank hands to it (the contention
  fault's competitors are the rank's siblings, not its children). The forkserver reaps only what it forked
  and warns ("waitpid returned unexpected pid") for anything else; it never sees those. The parent exits
  with the rank's exit status (killed by a signal: by the same signal) once it has no child left. On
  SIGTERM it kills the rank; only it can do that without racing pid reuse, since only it reaps the rank.
* A process dies with its parent (``PR_SET_PDEATHSIG``): when the forkserver exits, the kernel kills
  every rank's parent and so every rank. But the forkserver exits only once its "alive" pipe closes,
  which every process it started holds too (multiprocessing passes it on), so a ``record`` or ``run``
  killed with SIGKILL left its ranks running until their job ended (measured: a 10000-step job still ran
  30 s after the kill). So each rank's parent also watches the launcher (its pid, every
  :data:`LAUNCHER_POLL_S`) and kills its rank when the launcher is gone; it then exits, and with the
  ranks gone the forkserver does too. DataLoader workers watch their rank and exit with it.
* Each rank's stdout and stderr (file descriptors 1 and 2, so C++ output too) go to its log file.
* multiprocessing's own temp folders (``pymp-*``, holding its sockets: the launcher's forkserver listener, one
  per rank) are made inside a folder the launcher owns, ``<temp>/diageval-mp-<pid>-*``
  (:func:`~diageval.fileio.owned_temp_dir`): multiprocessing removes each at a normal exit, but a ``record`` or
  ``run`` killed with SIGKILL left one ``pymp-*`` per recording in the temp folder, with no owner in its name.
  The next recording (and every ``run`` and ``diagnose``, through ``remove_stale_boxes``) removes the owned
  folders whose launcher is dead, and whatever they hold.
* ``run_ranks`` waits until every rank exits or ``timeout_s`` passes; then it stops what is left and
  raises :class:`RecordingError` naming the rank that hung (or the first that failed, with its log's tail).
  Exit codes in ``accepted_exit_codes`` (a job that failed as its case intends, having written its
  evidence) count as finished, not as crashes.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from diageval.errors import DiagevalError
from diageval.fileio import owned_temp_dir, remove_stale_temp_dirs

PRELOAD = ["torch", "torch._dynamo", "torch._inductor.compile_fx", "torch.distributed", "diageval.recording.rank_worker"]
STOP_WAIT_S = 5.0  # how long a rank's parent gets to exit after SIGTERM (it kills the rank) before SIGKILL
LAUNCHER_POLL_S = 0.5  # how often a rank's parent checks that the launcher is still there
MP_PREFIX = "diageval-mp-"  # the owned folder of a launcher's multiprocessing temp folders (pymp-*)
# A socket's path holds at most 107 bytes (Linux's sun_path, less its NUL); multiprocessing puts its listeners at
# <its folder>/listener-XXXXXXXX, its folder being <temp>/pymp-XXXXXXXX: the owned folder costs 27 of them.
_SOCKET_PATH_MAX = 107
_MP_SOCKET_TAIL = len("/pymp-12345678/listener-12345678")


class RecordingError(DiagevalError):
    """A recording failed: a rank crashed, hung, or wrote no usable evidence."""


def _context() -> multiprocessing.context.BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(dict.fromkeys(PRELOAD + main_modules(sys.modules["__main__"]))))
    return ctx


def main_modules(main: types.ModuleType) -> list[str]:
    """The modules ``main`` (the process's ``__main__``) took its names from, sorted, when it is a script run by path:
    multiprocessing runs such a script again in each process the forkserver starts, where its imports cost nothing once
    the server holds them (module docstring). Nothing for a main run as a module (``python -m``: multiprocessing does not
    run it again) or with no file (``python -c``, a REPL). A module the server cannot import (one beside the script,
    found through the script's folder) is left to the rank's parent, as before: the server skips it."""
    if getattr(getattr(main, "__spec__", None), "name", None) is not None or getattr(main, "__file__", None) is None:
        return []
    names = set()
    for value in vars(main).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and name != "__main__" and name in sys.modules:
            names.add(name)
    return sorted(names)


def _mp_temp_dir_in(folder: str) -> str:
    """This process's multiprocessing temp folder (``pymp-*``), made inside ``folder`` unless it exists already.

    multiprocessing makes it, once per process, with ``tempfile.mkdtemp`` in ``tempfile.gettempdir()`` and removes
    it at exit; pointing ``tempfile.tempdir`` at ``folder`` for that one call is the only public way to place it.
    Another thread's temp file made in that instant lands in ``folder`` too, which is removed with this process."""
    import multiprocessing.util
    import tempfile

    saved = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        return multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def launcher_temp_dir() -> str:
    """The launcher's multiprocessing temp folder, inside an owned ``diageval-mp-<pid>-*`` folder (removed at exit
    after multiprocessing's own; by the next start after a SIGKILL); stale owned folders are removed first."""
    import multiprocessing.util
    import shutil
    import tempfile

    parent = Path(tempfile.gettempdir())
    remove_stale_temp_dirs(parent, MP_PREFIX)
    owned = owned_temp_dir(parent, MP_PREFIX)
    if len(os.fsencode(owned)) + _MP_SOCKET_TAIL > _SOCKET_PATH_MAX:  # a long $TMPDIR: a socket's path would not fit
        owned.rmdir()
        return multiprocessing.util.get_temp_dir()  # where multiprocessing puts it (a SIGKILL leaves it, as before)
    made = _mp_temp_dir_in(str(owned))
    if Path(made).parent == owned:  # multiprocessing's Finalize (priority -100) removes ``made``, then this one
        multiprocessing.util.Finalize(None, shutil.rmtree, args=(str(owned), True), exitpriority=-101)
    else:  # made before the first recording of this process, elsewhere: the ranks' go inside it all the same
        owned.rmdir()
    return made


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


def _rank_entry(target: Callable[..., Any], args: tuple, log_path: str, report: Any, launcher_pid: int,
                mp_dir: str) -> None:
    """Forkserver child: fork the rank, send its pid through ``report``, reap, exit with the rank's status.

    The rank (the forked child) returns from here into multiprocessing's own bootstrap, which runs its exit
    hooks and turns an exception into exit code 1, exactly as for a process the forkserver started itself.
    """
    die_with_parent()
    waited = {signal.SIGCHLD, signal.SIGTERM}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # before the fork: no SIGTERM is missed
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        report.close()
        _run_rank(target, args, log_path, mp_dir)
        return
    try:
        report.send(pid)
    except OSError:  # the launcher was killed meanwhile: the rank goes on as one started just before it would
        pass
    report.close()
    status = _reap(pid, waited, launcher_pid)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # the rank was killed: so is its parent, by the same signal, and the launcher sees that code
        sig = signal.Signals(-code)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the rank dumped its core if it was to; not this one
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # the two whose action cannot be set (nor needs to be)
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        code = 128 + sig  # only if that signal does not end a process
    os._exit(code)


def _reap(rank_pid: int, waited: set[signal.Signals], launcher_pid: int) -> int | None:
    """Reap every child until none is left; return the rank's wait status. SIGTERM kills the rank, and so
    does the launcher's death (checked every :data:`LAUNCHER_POLL_S`: a ``record`` killed with SIGKILL).

    ``waited`` is blocked and taken with ``sigwait``: the rank is killed only while it is not yet reaped,
    so its pid cannot have gone to another process. SIGCHLD gets a handler (never run: it stays blocked)
    because a blocked signal whose action is to ignore it may be dropped rather than kept pending.
    """
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the rank's to handle; this one reaps it
    rank_status: int | None = None
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # none left, so the rank, a child until reaped, was reaped
                return rank_status
            if pid == 0:
                break
            if pid == rank_pid:
                rank_status = status
        got = signal.sigtimedwait(waited, LAUNCHER_POLL_S)
        stop = got.si_signo == signal.SIGTERM if got is not None else not _alive(launcher_pid)
        if stop and rank_status is None:
            os.kill(rank_pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run_rank(target: Callable[..., Any], args: tuple, log_path: str, mp_dir: str) -> None:
    """The rank: die with its parent, send fds 1 and 2 to the rank's log, put its multiprocessing temp folder
    inside the launcher's (``mp_dir``; its DataLoader workers share it), then run ``target(*args)``."""
    die_with_parent()
    _mp_temp_dir_in(mp_dir)
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
    mp_dir = launcher_temp_dir()  # before the forkserver starts: its listener's socket goes there
    procs = []
    try:
        pid_readers = []
        for args, log in zip(rank_args, log_paths):
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            reader, writer = ctx.Pipe(duplex=False)
            # not daemonic: ranks start DataLoader workers
            p = ctx.Process(target=_rank_entry, args=(target, args, str(log), writer, os.getpid(), mp_dir),
                            daemon=False)
            p.start()
            writer.close()
            procs.append(p)
            pid_readers.append(reader)
        rank_pids = [_rank_pid(reader, r, procs[r], what, timeout_s) for r, reader in enumerate(pid_readers)]
        if on_started is not None:
            on_started(rank_pids)
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
                p.terminate()  # its parent kills the rank, reaps it and exits
        for p in procs:
            p.join(STOP_WAIT_S)
            if p.exitcode is None:
                p.kill()
                p.join(STOP_WAIT_S)


def _rank_pid(reader: Any, rank: int, parent: multiprocessing.process.BaseProcess, what: str, timeout_s: float) -> int:
    """The pid the rank's parent sends once it has forked the rank."""
    try:
        if reader.poll(timeout_s):
            return int(reader.recv())
    except EOFError:
        parent.join(STOP_WAIT_S)
        raise RecordingError(f"{what}: rank {rank} did not start (its parent exited with code {parent.exitcode} "
                             "before forking it)") from None
    finally:
        reader.close()
    raise RecordingError(f"{what}: rank {rank} did not start within {timeout_s:.0f}s")
