"""CPU contention: other busy processes on the cores a rank runs on (``host.cpu_contention``).

From ``contention_start_step`` on, ``contended_rank`` binds itself (every thread of the rank process,
as a launcher's ``--cpu-bind`` / ``numactl`` would) to one core, and ``competitors`` busy processes are started on that
same core. Each one spins for ``duty_cycle`` of every 10 ms period and sleeps the rest, at nice level
``niceness`` (0: competes as an equal; 19: only takes cycles nobody else wants, the benign look-alike).
The rank's ops, their shapes and their count stay the same; they simply get less of the core.

Decided here:

* The competitors are not the rank's children: they are started with ``clone(CLONE_PARENT)``, so their
  parent is the rank's own parent (the process the launcher runs each rank under, which reaps the rank
  and whatever the rank hands it). A competing process on a real host belongs to somebody else; the
  recorder's metrics count a rank's descendants into its CPU use, and a child would have put the
  competitor's cycles into the rank's row. What ``metrics.jsonl`` shows instead is what a real host
  shows: the contended rank uses less CPU than its peers while it is the slow one, and the host is
  busier than its ranks.
* Each competitor execs a fresh ``python -S`` right after the clone (nothing of the rank's state is
  used in between) and first closes every file descriptor it inherited except its lifeline: the read
  end of a pipe whose only writer is the rank. The competitor exits as soon as that pipe reaches EOF:
  when the rank closes it at exit, or when the rank dies, however (SIGKILL included), since the kernel
  closes a dead process's descriptors. So no competitor outlives its rank by more than one period.
* Nothing in the evidence names it: no op, log line or thread is added to the rank; the competitors
  print nothing (their stdio is ``/dev/null``).

Linux only (``clone``, ``/proc``, CPU affinity); x86_64 and aarch64.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import sys
import time

from diageval.recording.faults.base import LiveFault

PERIOD_S = 0.010  # a competitor's spin/sleep period
EXIT_WAIT_S = 1.0  # how long the rank waits for its competitors to exit before killing them
KILL_WAIT_S = 10.0  # how long it then waits for a killed competitor to be gone (a zombie)

_CLONE_PARENT = 0x00008000
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}

# What a competitor runs (in a fresh interpreter): spin for duty * period, sleep the rest, until the
# lifeline pipe reaches EOF. argv: duty, period, lifeline fd.
_COMPETITOR = """
import os, select, sys, time
duty, period, fd = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
os.closerange(3, fd)
os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
poll = select.poll()
poll.register(fd, select.POLLIN | select.POLLHUP)
busy, idle_ms = duty * period, (1 - duty) * period * 1000
while True:
    end = time.perf_counter() + busy
    while time.perf_counter() < end:
        pass
    if poll.poll(idle_ms):
        break
"""


def thread_ids(pid: int | str = "self") -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def bind_process(cpus: set[int]) -> None:
    """Bind every current thread of this process to ``cpus`` (threads started later inherit it)."""
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            pass  # a thread that ended meanwhile


def rank_core(contended_rank: int) -> int:
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[contended_rank % len(cpus)]


def start_competitor(core: int, duty: float, niceness: int, lifeline_r: int) -> int:
    """Start one competitor (a sibling of this process: same parent); return its pid."""
    nr = _SYS_CLONE.get(platform.machine())
    if nr is None or not sys.platform.startswith("linux"):
        raise RuntimeError(f"CPU contention needs Linux on x86_64 or aarch64 (this is {sys.platform}/{platform.machine()})")
    argv = [sys.executable, "-S", "-c", _COMPETITOR, repr(duty), repr(PERIOD_S), str(lifeline_r)]
    devnull = os.open(os.devnull, os.O_RDWR)
    libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held across the call, so the child has it
    libc.syscall.restype = ctypes.c_long
    pid = libc.syscall(ctypes.c_long(nr), ctypes.c_long(_CLONE_PARENT | signal.SIGCHLD),
                       ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if pid == 0:  # the child: plain system calls only, then exec
        try:
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.close(devnull)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone failed")
    os.sched_setaffinity(pid, {core})
    if niceness:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    return pid


class CpuContention(LiveFault):
    backends = ("gloo", "nccl")

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.pids: list[int] = []  # the competitors
        self.pidfds: list[int] = []  # their pidfds (not children of this process: no waitpid)
        self.lifeline_w: int | None = None

    def on_step_start(self, step: int) -> None:
        if step == self.params.contention_start_step and self.ctx.rank == self.params.contended_rank:
            self.start()

    def start(self) -> None:
        from multiprocessing import util

        core = rank_core(self.params.contended_rank)
        bind_process({core})
        lifeline_r, self.lifeline_w = os.pipe()
        os.set_inheritable(lifeline_r, True)
        try:
            for _ in range(self.params.competitors):
                pid = start_competitor(core, self.params.duty_cycle, self.params.niceness, lifeline_r)
                self.pids.append(pid)
                self.pidfds.append(os.pidfd_open(pid))
        finally:
            os.close(lifeline_r)
        # Runs when the rank returns normally (multiprocessing's exit hook); a rank that dies otherwise
        # closes the lifeline by dying.
        util.Finalize(self, self.stop, exitpriority=10)

    def stop(self) -> None:
        """Close the lifeline, wait for every competitor to exit, kill any that does not and wait for that too."""
        import select

        if self.lifeline_w is not None:
            os.close(self.lifeline_w)
            self.lifeline_w = None
        deadline = time.monotonic() + EXIT_WAIT_S
        for fd in self.pidfds:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:  # killed, and waited for: at niceness 19 on a loaded machine a SIGKILL takes a while
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                select.select([fd], [], [], KILL_WAIT_S)
            os.close(fd)
        self.pidfds = []
