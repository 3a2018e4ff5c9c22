"""The first process of every box: it joins the box's limits, starts the box, and ends everything the box started
when the harness dies, however it dies.

Run as ``python -I -S lifeline.py FD PROCS RLIMITS ARGV...`` (:func:`~diageval.hosting.limits.limited_argv`; the
standard library only, nothing of the harness's environment). ``FD`` is the read end of a pipe whose write end only
the harness holds (:class:`~diageval.hosting.sandbox.Box`): nothing is ever written to it, so it reads as closed
(EOF) exactly when the harness's process has gone, by exit, crash or SIGKILL, whichever of its threads started the
box. Then this process kills what it started and what it has adopted, until it has no child left, and exits.

Why not bubblewrap's ``--die-with-parent`` alone (it stays on: the first line of defence while this process
lives): it is ``PR_SET_PDEATHSIG``, set by bwrap after its ``clone()``, and a parent that dies before that is
never noticed (the signal is armed against a parent already gone; bwrap does not look at ``getppid()``
afterwards). Measured on 2026-12-06 (``diageval diagnose`` of a sleeping ``cmd:`` diagnoser, killed with SIGKILL
while this process's predecessor, the few lines of Python that joined the limits, had not yet ``exec``-ed bwrap):
the outer bwrap lived on, reparented to PID 1, with PDEATHSIG set to SIGKILL (read with ``prctl(PR_GET_PDEATHSIG)``
inside it), and the whole box with it; 2 of 3 kills at the first sight of that process, 1 of 4 at the test's 50 ms
polling. PDEATHSIG is also tied to the parent *thread*, not the process, and cleared by credential changes: a pipe
is tied to neither.

Why a child subreaper: bwrap calls ``setsid()`` before it forks the sandbox's PID 1, so the inner bwrap is not in
the box's process group, and an inner bwrap orphaned before its own ``PR_SET_PDEATHSIG`` would go to PID 1 as
well. As a subreaper this process adopts it instead and kills it, and with the sandbox's PID 1 the kernel ends
every process of that PID namespace. Without a sandbox (``isolation: none``) the same adoption reaches every
descendant that outlived its parent.

While the harness lives, this process waits for its child and exits as it did (the same exit status, or the same
signal), after killing whatever the child left behind, so callers see the box's own status. SIGTERM or SIGKILL
to the box's process group reaches it and bwrap alike, as before.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def enter_limits(procs: str, rlimits: str) -> None:
    """Join the box's control groups (their ``cgroup.procs`` files, ':'-separated) and set its rlimits
    (``NAME=value``, ','-separated), so that nothing the box starts escapes them."""
    for f in procs.split(":") if procs else ():
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    for name, value in (a.split("=") for a in rlimits.split(",") if a):
        v = int(value)
        resource.setrlimit(getattr(resource, name), (v, v))


def become_subreaper() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def children() -> list[int]:
    """This process's live children (``/proc``'s parent field: needs no kernel option)."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me and fields[0] != b"Z":
            out.append(int(name))
    return out


def end_all() -> None:
    """SIGKILL every child until none is left. A child's own children come here when it dies (subreaper), before
    it can be reaped, so each round's wait is followed by a look that sees them. ``/proc`` is read only while
    there is a child (the usual end: bwrap reaped, nothing adopted, no reading)."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0]:  # reaped one (an adopted process that had ended): look again
                continue
        except ChildProcessError:  # no child at all
            return
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def exit_as(status: int) -> None:
    """Exit with the status the box's first process had: its exit code, or death by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    lifeline, procs, rlimits, command = int(argv[1]), argv[2], argv[3], argv[4:]
    become_subreaper()
    child = os.fork()
    if child == 0:
        os.close(lifeline)
        enter_limits(procs, rlimits)
        os.execvp(command[0], command)
    devnull = os.open(os.devnull, os.O_RDWR)  # the box's stdin and stdout are its own: a pipe's EOF is not delayed
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    waiting = select.poll()  # not select(): the harness's fd numbers (kept by pass_fds) may pass FD_SETSIZE
    waiting.register(lifeline, select.POLLIN)  # POLLHUP too, always: nothing is ever written, so the harness has gone
    waiting.register(os.pidfd_open(child), select.POLLIN)  # readable when the child exits (Linux 5.3)
    while True:
        ready = {fd for fd, _ in waiting.poll()}
        if lifeline in ready:
            end_all()
            os._exit(137)
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid == child:
            end_all()
            exit_as(status)


if __name__ == "__main__":
    main(sys.argv)
