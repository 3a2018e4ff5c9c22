"""Limits on every box: how many processes, how much memory, how much written to its output folder.

Where this machine lets diageval make control groups (cgroup v1's ``pids`` and ``memory`` hierarchies,
or cgroup v2 with both controllers delegated to diageval's own group), each box gets one of its own:
``pids.max`` stops a fork bomb at the limit, the memory limit makes the kernel kill a memory hog inside
its box (a RAM-backed ``/tmp`` is charged there too). Elsewhere the same limits are rlimits of the box's
first process, inherited by everything it starts: ``RLIMIT_AS`` for memory and ``RLIMIT_NPROC`` for
processes (which the kernel does not apply to root: without cgroups, root's boxes have no process limit,
and :func:`describe` says so). ``RLIMIT_FSIZE`` caps every file a box writes at the output limit in both.

A :class:`BoxGuard` watches a running box: the bytes in its output folder, fork failures at the process
limit and kills at the memory limit. On a breach it kills the box and says why; the executor turns that
into the case's ``diagnoser_error``. The box's first process is started through :func:`limited_argv`:
:mod:`~diageval.hosting.lifeline`, run with ``-I -S`` (no site, no environment), whose child joins the box's groups
and sets the rlimits before ``exec``-ing bubblewrap, so that nothing the box starts escapes them.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import diageval.hosting.lifeline as lifeline
from diageval.hosting.policy import BoxLimits

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "diageval-box-"
GUARD_INTERVAL_S = 0.1
MAX_OUT_ENTRIES = 10_000  # files and folders a box may leave in its output folder


def _own_path(controller: str) -> str | None:
    """This process's group in ``controller``'s hierarchy ('' for cgroup v2), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return None


def _writable_dir(p: Path) -> bool:
    return p.is_dir() and os.access(p, os.W_OK)


@dataclass
class BoxGroups:
    """The control groups of one box (empty where none could be made) and the rlimits that stand in."""

    limits: BoxLimits
    dirs: dict[str, Path] = field(default_factory=dict)  # "pids", "memory" -> group folder
    v2: bool = False

    @classmethod
    def create(cls, limits: BoxLimits) -> "BoxGroups":
        groups = cls(limits)
        name = f"{GROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        v2_path = _own_path("")
        if (CGROUP_ROOT / "cgroup.controllers").is_file() and v2_path is not None:  # a pure v2 machine
            parent = CGROUP_ROOT / v2_path.lstrip("/")
            try:
                enabled = (parent / "cgroup.subtree_control").read_text().split()
            except OSError:
                enabled = []
            if {"pids", "memory"} <= set(enabled) and _writable_dir(parent):
                groups._make("pids", parent / name, {"pids.max": limits.max_processes,
                                                     "memory.max": limits.max_memory_mib << 20, "memory.swap.max": 0})
                if "pids" in groups.dirs:
                    groups.dirs["memory"] = groups.dirs["pids"]
                    groups.v2 = True
            return groups
        for controller, settings in (("pids", {"pids.max": limits.max_processes}),
                                     ("memory", {"memory.limit_in_bytes": limits.max_memory_mib << 20})):
            own = _own_path(controller)
            parent = CGROUP_ROOT / controller / (own or "/").lstrip("/")
            if own is not None and _writable_dir(parent):
                groups._make(controller, parent / name, settings)
        if "memory" in groups.dirs:  # no swap either, where the kernel accounts it
            _try_write(groups.dirs["memory"] / "memory.memsw.limit_in_bytes", limits.max_memory_mib << 20)
        return groups

    def _make(self, key: str, path: Path, settings: dict[str, int]) -> None:
        try:
            path.mkdir()
        except OSError:
            return
        for fname, value in settings.items():
            if not _try_write(path / fname, value) and fname != "memory.swap.max":
                _remove_group(path)
                return
        self.dirs[key] = path

    def rlimits(self) -> dict[str, int]:
        """The rlimits the box's first process sets (the stand-ins for missing groups, and the file size)."""
        out = {"RLIMIT_FSIZE": self.limits.max_out_mib << 20}
        if "memory" not in self.dirs:
            out["RLIMIT_AS"] = self.limits.max_memory_mib << 20
        if "pids" not in self.dirs:
            out["RLIMIT_NPROC"] = self.limits.max_processes
        return out

    def procs_files(self) -> list[Path]:
        return sorted({d / "cgroup.procs" for d in self.dirs.values()})

    def describe(self) -> str:
        """How the limits are enforced here, for run.json."""
        how = []
        how.append(f"processes {self.limits.max_processes} (" + ("cgroup" if "pids" in self.dirs else
                   "rlimit, not applied to root" if os.geteuid() == 0 else "rlimit") + ")")
        how.append(f"memory {self.limits.max_memory_mib} MiB (" + ("cgroup" if "memory" in self.dirs else "rlimit: address space") + ")")
        how.append(f"output {self.limits.max_out_mib} MiB, /tmp {self.limits.max_tmp_mib} MiB")
        return ", ".join(how)

    def breach(self) -> str | None:
        """Why the box broke a limit so far (a fork refused at the process limit, a kill at the memory limit)."""
        pids = self.dirs.get("pids")
        if pids is not None:
            refused = _event_count(pids / "pids.events", "max")
            if refused:
                return f"it hit the box's process limit ({self.limits.max_processes}): {refused} fork(s) refused"
        mem = self.dirs.get("memory")
        if mem is not None:
            killed = _event_count(mem / ("memory.events" if self.v2 else "memory.oom_control"), "oom_kill")
            if killed:
                return f"it hit the box's memory limit ({self.limits.max_memory_mib} MiB): {killed} process(es) killed"
        return None

    def remove(self) -> None:
        for d in set(self.dirs.values()):
            _remove_group(d)
        self.dirs.clear()


def limited_argv(argv: list[str], groups: BoxGroups, lifeline_fd: int) -> list[str]:
    """``argv`` started inside ``groups`` with its rlimits set (see the module docstring), by
    :mod:`~diageval.hosting.lifeline`, which ends it and all it started once ``lifeline_fd`` (the read end of a
    pipe whose write end only the harness holds) reads as closed."""
    procs = ":".join(str(p) for p in groups.procs_files())
    rl = ",".join(f"{k}={v}" for k, v in groups.rlimits().items())
    return [sys.executable, "-I", "-S", lifeline.__file__, str(lifeline_fd), procs, rl, *argv]


def _try_write(path: Path, value: int) -> bool:
    try:
        path.write_text(str(value))
        return True
    except OSError:
        return False


def _event_count(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _remove_group(path: Path) -> None:
    """Remove a group once its processes are gone (the kernel refuses while any is left: kill them first)."""
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            try:
                for pid in (path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), 9)
                    except (ProcessLookupError, PermissionError, ValueError):
                        pass
            except OSError:
                return
            threading.Event().wait(0.02)


def remove_stale_groups() -> list[Path]:
    """Groups left by a diageval process that was killed (its pid is in the name): removed."""
    removed = []
    for controller in ("pids", "memory", ""):
        own = _own_path(controller)
        if own is None:
            continue
        parent = CGROUP_ROOT / controller / own.lstrip("/") if controller else CGROUP_ROOT / own.lstrip("/")
        try:
            entries = list(parent.glob(GROUP_PREFIX + "*"))
        except OSError:
            continue
        for d in entries:
            try:
                owner = int(d.name[len(GROUP_PREFIX):].split("-")[0])
            except ValueError:
                continue
            if owner == os.getpid() or Path(f"/proc/{owner}").exists():
                continue
            _remove_group(d)
            if not d.exists():
                removed.append(d)
    return removed


def out_usage(folder: Path) -> tuple[int, int]:
    """(bytes, entries) under ``folder``, links not followed; stops counting past :data:`MAX_OUT_ENTRIES`."""
    total = entries = 0
    stack = [folder]
    while stack and entries <= MAX_OUT_ENTRIES:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    entries += 1
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(Path(e.path))
                        else:
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        pass
        except OSError:
            pass
    return total, entries


class BoxGuard:
    """Watches one running box (a thread, every :data:`GUARD_INTERVAL_S`); on a breach calls ``kill`` once
    and keeps the reason in :attr:`reason`. Use as a context manager around the wait for the diagnoser."""

    def __init__(self, groups: BoxGroups, out_dir: Path, kill: Callable[[], None]):
        self.groups = groups
        self.out_dir = out_dir
        self.kill = kill
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="box-guard", daemon=True)

    def __enter__(self) -> "BoxGuard":
        self._baseline = self.groups.breach()  # a long-lived box's earlier breaches are not this case's
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.reason is None:
            self.reason = self._check()

    def _check(self) -> str | None:
        """Why to stop the box now, if at all. The output folder first: on /dev/shm (box_parent) its pages are
        memory, so a fill that outruns one interval also trips the memory limit, and the fill is the cause
        (measured: a 600 MiB fill at tmpfs speed passes 256 MiB between two looks of the guard when the box starts
        just after one; which look comes first depends on the box's start time)."""
        used, entries = out_usage(self.out_dir)
        if used > self.groups.limits.max_out_mib << 20:
            return f"it wrote more than the box's output limit ({self.groups.limits.max_out_mib} MiB) to its folder"
        if entries > MAX_OUT_ENTRIES:
            return f"it left more than {MAX_OUT_ENTRIES} files in its folder"
        breach = self.groups.breach()
        if breach is not None and breach != self._baseline:
            return breach
        return None

    def _watch(self) -> None:
        while not self._stop.wait(GUARD_INTERVAL_S):
            reason = self._check()
            if reason is not None:
                self.reason = reason
                self.kill()
                return
