"""The box a diagnoser runs in: its own PID, mount, IPC and network namespaces, built by bubblewrap.

What a diagnoser sees (decided here, after the design's Diagnosers section):

* an empty root (a tmpfs) onto which the system (``/usr``, ``/etc``, the ``/bin``-style links, ``/sys``),
  the Python installations in use (``sys.prefix``, ``sys.base_prefix``, every ``sys.path`` entry and
  every ``$PATH`` folder) and the package's own source folders are bound **read-only**; a fresh
  ``/proc`` that shows only the box's processes, a minimal ``/dev`` and an empty ``/tmp``;
* ``/box/in`` (read-only): the private copy of the bundle under a random name, and ``/box/out``
  (writable): one folder per case, with a random name, for ``{out}``, stdout and stderr; that folder is
  the working directory;
* nothing under a *hidden* root, whatever else asks for it: the checkout, ``$DIAGEVAL_HOME`` (the bundle
  cache and its truth files), the run folders and the cases folder.
  A path asked for that lies inside a hidden root is bound only when it is one of the explicitly
  *visible* paths (the package's source folders ``harness/``, ``diagnosers/``, ``scoring/``,
  ``reports/``, which an editable install imports from, and a diagnoser's own file or package);
* of ``sys.path``, only the Python installation's own folders (its prefixes and site-packages), never a
  ``PYTHONPATH`` entry or another folder a ``.pth`` names: a diagnoser's own code is bound by itself
  (:mod:`diageval.hosting.spec_paths`); a ``$PATH`` folder is bound only when it holds no label store
  and not the harness's own log (:mod:`diageval.hosting.label_stores`);
* one exception inside the hidden cases: the run's taxonomy, the public contract, shown read-only where
  ``load_taxonomy()`` looks for it (:func:`~diageval.hosting.box_policy.taxonomy_files`); no case file;
* an environment built from an allowlist (:meth:`~diageval.hosting.policy.HostPolicy.passes`: what a
  program needs to run, what the user names with ``--pass-env``, a networked diagnoser's own settings
  when the network is on), never ``DIAGEVAL_*`` and never a value that names a hidden root;
* limits (:mod:`diageval.hosting.limits`): processes and memory in a control group of its own where the
  machine allows (rlimits otherwise), every file it writes capped, ``/tmp`` a tmpfs of a fixed size;
* no network unless the run says ``--allow-network`` (a diagnoser that calls a model endpoint);
* no capabilities, a new session (no terminal injection), and an end with the harness: when it dies, even by
  SIGKILL and even while the box is starting, the box's first process (:mod:`~diageval.hosting.lifeline`, which
  holds the read end of a pipe only the harness writes to) kills bwrap and the box's PID 1, and with it the kernel
  every process inside (bwrap's ``--die-with-parent`` alone misses a harness that dies before bwrap arms it).

The allowlist (an empty root plus named binds) rather than the whole file system minus a denylist:
another checkout of diageval or an old cache elsewhere on the machine holds the same bundles with their
truth files, and a denylist cannot know of it.

Size: over 400 lines, because everything a box shows, hides and passes, and how its processes start, is decided
in this one module, so that one reading covers the whole boundary.

Where bubblewrap is missing or cannot start (no user namespaces), :func:`probe` says why, and hosting
refuses to start (:class:`~diageval.hosting.errors.SandboxUnavailable`) unless the policy says
``sandbox=False`` (``--no-sandbox``): then the run says ``isolation: none`` and is never ranked.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from diageval.fileio import owned_temp_dir, remove_stale_temp_dirs
from diageval.hosting.errors import SandboxUnavailable
from diageval.hosting.label_stores import harness_outputs, refusal
from diageval.hosting.limits import BoxGroups, limited_argv, remove_stale_groups
from diageval.hosting.policy import HostPolicy
from diageval.hosting.process_groups import kill_group, spawn_group
from diageval.hosting.python_paths import in_python, is_within, path_dirs, python_paths, real_path

BOX_ROOT = Path("/box")
BOX_IN = BOX_ROOT / "in"
BOX_OUT = BOX_ROOT / "out"
HOST_PREFIX = "diageval-box-"
DIAGNOSE_PREFIX = "diageval-diagnose-"  # `diageval diagnose`'s output folder (run/single.py), named with its pid
SYSTEM_DIRS = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ENV_DROP_PREFIX = "DIAGEVAL_"
# Boxes live in RAM when the machine has a roomy tmpfs there: a private bundle copy creates every file of its
# bundle (3,075 for a 1,024-rank job), and creating a file took 0.67 ms on this machine's ext4 /tmp against 0.03 ms
# on /dev/shm (3,000 files of 200 bytes each); a cached run of `prior` over the corpus spent 20 of its 24 s making
# copies in /tmp and took 9.5 s with them in /dev/shm. A box holds one bundle copy and at most ``max_out_mib`` of
# output at a time; a /dev/shm with less than SHM_MIN_FREE free (a container's default is 64 MiB) is not used.
SHM_DIR = Path("/dev/shm")
SHM_MIN_FREE = 4 << 30


@dataclass(frozen=True)
class SandboxPolicy:
    """What a box hides, what it shows read-only on top of the system, and the host policy behind it
    (network, environment, limits)."""

    hidden: tuple[Path, ...]
    visible: tuple[Path, ...] = ()
    host: HostPolicy = field(default_factory=HostPolicy)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    shown_files: tuple[tuple[Path, Path], ...] = ()  # (host file, path in the box): public files inside hidden folders

    @property
    def allow_network(self) -> bool:
        return self.host.allow_network


class Box:
    """The host folder behind one box: ``in/`` (bound read-only) and ``out/`` (bound writable), and how
    to start a process in it.

    With ``policy`` None there is no sandbox (``isolation: none``): the same folders, the host's paths,
    the scrubbed environment, and nothing else hidden. The folder is an
    :func:`~diageval.fileio.owned_temp_dir`: a later start removes it if its harness died without
    cleaning up (SIGKILL), see :func:`remove_stale_boxes`.
    """

    def __init__(self, policy: SandboxPolicy | None, parent: Path | None = None, *, env_policy: SandboxPolicy | None = None):
        self.policy = policy
        self.env_policy = policy or env_policy or SandboxPolicy(hidden=())
        self.host = owned_temp_dir(Path(parent or box_parent()), HOST_PREFIX)
        self.host_in = self.host / "in"
        self.host_out = self.host / "out"
        self.host_in.mkdir()
        self.host_out.mkdir()
        self.groups = BoxGroups.create(self.env_policy.host.box)
        self._mounts: tuple[SandboxPolicy, tuple[str, ...]] | None = None  # see _mounts()
        # the lifeline: every box process starts under one that holds the read end; the write end stays here (no
        # child inherits it), so it closes when this process dies, and the box ends with it (hosting.lifeline)
        self._lifeline_r, self._lifeline_w = os.pipe()

    @property
    def sandboxed(self) -> bool:
        return self.policy is not None

    def inner(self, host_path: Path) -> Path:
        """Where the box's process sees ``host_path`` (a path under ``in/`` or ``out/``)."""
        if not self.sandboxed:
            return Path(host_path)
        rel_in = _relative(host_path, self.host_in)
        if rel_in is not None:
            return BOX_IN / rel_in
        rel_out = _relative(host_path, self.host_out)
        if rel_out is None:
            raise ValueError(f"{host_path} is not inside the box {self.host}")
        return BOX_OUT / rel_out

    def spawn(self, argv: list[str], cwd_host: Path, env_edit: Mapping[str, str | None] | None = None,
              **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in this box, in ``cwd_host``, in a session of its own (``spawn_group``), tied to this
        process by the lifeline; ``env_edit``: variables set on the scrubbed environment (None: removed). Every
        box process starts here."""
        inner_cwd = self.inner(cwd_host)  # without a sandbox, cwd_host itself
        boxed = wrap(argv, self, self.policy, cwd=inner_cwd) if self.policy is not None else list(argv)
        env = {**scrubbed_env(os.environ, self.env_policy, home=inner_cwd), **(env_edit or {})}
        return spawn_group(limited_argv(boxed, self.groups, self._lifeline_r), pass_fds=(self._lifeline_r,),
                           env={k: v for k, v in env.items() if v is not None},
                           cwd=None if self.sandboxed else Path(cwd_host), **popen_kwargs)

    def empty_out(self) -> None:
        """Remove everything in ``out/`` (what a long-lived box's last case left there)."""
        for entry in list(self.host_out.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                for d, _, _ in os.walk(entry):
                    try:
                        os.chmod(d, 0o755)
                    except OSError:
                        pass
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def remove(self) -> None:
        for fd in (self._lifeline_w, self._lifeline_r):  # its processes have ended: the lifeline goes too
            if fd >= 0:
                os.close(fd)
        self._lifeline_r = self._lifeline_w = -1
        self.groups.remove()
        for d, _, _ in os.walk(self.host):  # private bundle copies are read-only folders
            try:
                os.chmod(d, 0o755)
            except OSError:
                pass
        shutil.rmtree(self.host, ignore_errors=True)


def _relative(p: Path, root: Path) -> Path | None:
    try:
        return Path(p).relative_to(root)
    except ValueError:
        return None


def box_parent() -> Path:
    """Where boxes' host folders are made: ``$TMPDIR`` when the user set it, else ``/dev/shm`` when it is writable,
    has SHM_MIN_FREE free and is not mounted noexec (a program a diagnoser writes to its working folder must run as
    it would in the temp folder), else the system's temp folder."""
    if os.environ.get("TMPDIR"):
        return Path(tempfile.gettempdir())
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return Path(tempfile.gettempdir())
    noexec = st.f_flag & getattr(os, "ST_NOEXEC", 0)  # a bind mount keeps it: the output folder would run nothing
    if st.f_bavail * st.f_frsize >= SHM_MIN_FREE and not noexec and os.access(SHM_DIR, os.W_OK | os.X_OK):
        return SHM_DIR
    return Path(tempfile.gettempdir())


def remove_stale_boxes(parent: Path | None = None) -> list[Path]:
    """Remove the host folders and control groups of boxes whose harness process is gone, and the other folders
    named with a dead owner's pid that a SIGKILL leaves (``diagnose``'s output folder; a recording launcher's, with
    multiprocessing's ``pymp-*`` inside); return them. A reused pid keeps a leftover: never a live owner's folder.
    Looks in ``parent``, or wherever they may be: :func:`box_parent` and the system's temp folder."""
    from diageval.recording import MP_PREFIX

    parents = [Path(parent)] if parent else list(dict.fromkeys([box_parent(), Path(tempfile.gettempdir())]))
    prefixes = (HOST_PREFIX, DIAGNOSE_PREFIX, MP_PREFIX)
    return [d for p in parents for x in prefixes for d in remove_stale_temp_dirs(p, x)] + remove_stale_groups()


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def probe() -> str | None:
    """None when a box can start here; otherwise why not (one line). Tried once per process."""
    bwrap = find_bwrap()
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    policy = SandboxPolicy(hidden=())
    box, proc = Box(policy), None
    try:
        proc = box.spawn(["/bin/sh", "-c", "exit 0"], box.host_out, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = proc.communicate(timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap cannot start: {exc}"
    finally:
        if proc is not None and proc.poll() is None:
            kill_group(proc)
        box.remove()
    if proc.returncode != 0:
        why = err.decode(errors="replace").strip().splitlines()
        return f"bwrap cannot start here: {why[-1] if why else f'exit status {proc.returncode}'}"
    return None


def wrap(argv: list[str], box: Box, policy: SandboxPolicy, *, cwd: Path = BOX_OUT) -> list[str]:
    """The bwrap command line that runs ``argv`` inside ``box`` under ``policy``."""
    return _mounts(box, policy) + ["--chdir", str(cwd), "--", *argv]


def _mounts(box: Box, policy: SandboxPolicy) -> list[str]:
    """Everything before ``--chdir``: the same for every process a box starts, so worked out once per box
    (a ``cmd:`` diagnoser starts one per case)."""
    cached = box._mounts
    if cached is not None and cached[0] == policy:
        return list(cached[1])
    bwrap = find_bwrap() or "bwrap"
    args = [
        bwrap,
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--hostname", "box",
    ]
    if not policy.allow_network:
        args.append("--unshare-net")
    for d in SYSTEM_DIRS:
        if Path(d).is_dir():
            args += ["--ro-bind", d, d]
    for link in SYSTEM_LINKS:
        p = Path(link)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), link]
        elif p.is_dir():
            args += ["--ro-bind", link, link]
    args += ["--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev",
             "--size", str(policy.host.box.max_tmp_mib << 20), "--tmpfs", "/tmp"]
    bound = readable_paths(policy)
    for path in bound:
        args += ["--ro-bind-try", str(path), str(path)]
    for target, link in _links_to(bound, policy):  # a $PATH or sys.path entry that is a symlink keeps its name
        args += ["--symlink", str(target), str(link)]
    for hidden in masked_paths(policy, bound):  # e.g. the corpus a wheel ships inside site-packages
        args += ["--tmpfs", str(hidden)] if hidden.is_dir() else ["--ro-bind", "/dev/null", str(hidden)]
    for host_file, inner in policy.shown_files:  # after the masks, so a file shows inside a masked folder
        args += ["--ro-bind", str(real_path(host_file)), str(inner)]
    args += ["--ro-bind", str(box.host_in), str(BOX_IN), "--bind", str(box.host_out), str(BOX_OUT)]
    box._mounts = (policy, tuple(args))
    return args


def readable_paths(policy: SandboxPolicy) -> list[Path]:
    """Every path bound read-only besides the system: Python, ``$PATH``, the explicitly visible paths.

    Never a path that holds a hidden root (binding it would show the root). A Python or ``$PATH``
    folder inside a hidden root is left out too, unless it belongs to the running Python installation
    (a virtual environment inside the checkout); an explicitly visible path inside a hidden root (the
    package's source folders) is bound. A ``$PATH`` folder outside the system and Python is bound only
    when :func:`~diageval.hosting.label_stores.refusal` finds nothing in it.
    """
    hidden = [real_path(h) for h in policy.hidden]
    exposing = [h for h in hidden if not in_python(h)]  # inside Python: masked instead
    outputs = harness_outputs()
    wanted: list[Path] = []
    for p, checked in python_paths() + [(Path(d), True) for d in path_dirs()]:
        rp = real_path(p)
        if not rp.exists() or any(is_within(h, rp) for h in exposing):
            continue
        if any(is_within(rp, h) for h in hidden) and not in_python(rp):
            continue
        system = any(is_within(rp, Path(d)) for d in SYSTEM_DIRS) or in_python(rp)
        if checked and not system and refusal(rp, outputs) is not None:
            continue
        wanted.append(rp)
    for p in policy.visible:
        rp = real_path(p)
        if rp.exists() and not any(is_within(h, rp) for h in hidden):
            wanted.append(rp)
    out: list[Path] = []
    for p in sorted(set(wanted), key=lambda q: (len(q.parts), str(q))):
        if any(is_within(p, Path(d)) for d in SYSTEM_DIRS) or any(is_within(p, q) for q in out):
            continue  # bound already, with the system or an enclosing folder
        out.append(p)
    return out


def masked_paths(policy: SandboxPolicy, bound: list[Path]) -> list[Path]:
    """Hidden roots that lie inside a bound folder (only inside the Python installation: a wheel ships the
    labeled corpus as ``site-packages/diageval/corpus``): each is covered with an empty tmpfs."""
    return [h for h in (real_path(p) for p in policy.hidden) if h.exists() and any(is_within(h, b) and h != b for b in bound)]


def _links_to(bound: list[Path], policy: SandboxPolicy) -> list[tuple[Path, Path]]:
    """(real path, path as named) for named Python and ``$PATH`` folders that resolve into ``bound`` under
    another name, and whose name is not itself inside a bound or hidden folder."""
    hidden = [real_path(h) for h in policy.hidden]
    out = []
    for p in [q for q, _ in python_paths()] + [Path(d) for d in path_dirs()]:
        p = Path(os.path.abspath(p))
        real = real_path(p)
        if p == real or real not in bound or any(is_within(p, q) for q in bound) or any(is_within(p, h) for h in hidden):
            continue
        if any(is_within(p, Path(d)) for d in SYSTEM_DIRS + SYSTEM_LINKS) or (real, p) in out:
            continue
        out.append((real, p))
    return out


def scrubbed_env(environ: Mapping[str, str], policy: SandboxPolicy, *, home: Path = BOX_OUT) -> dict[str, str]:
    """The diagnoser's environment: the variables the host policy passes
    (:meth:`~diageval.hosting.policy.HostPolicy.passes`), never ``DIAGEVAL_*``, nothing whose value names a
    hidden root. ``HOME``, ``PWD`` and ``TMPDIR`` point into the box; ``policy.extra_env`` is added last.
    """
    hidden = [str(real_path(h)) for h in policy.hidden] + [str(h) for h in policy.hidden]
    env = {}

    def shown(text: str) -> bool:
        """Names nothing hidden, or is a folder of the running Python (a venv inside the checkout)."""
        if not any(h in text for h in hidden if h and h != "/"):
            return True
        return os.path.isabs(text) and in_python(Path(text))

    for key, value in environ.items():
        if key.startswith(ENV_DROP_PREFIX) or key in ("PWD", "OLDPWD") or not policy.host.passes(key):
            continue
        if os.pathsep in value or key == "PATH":  # PATH-like: keep the entries that may be shown
            value = os.pathsep.join(v for v in value.split(os.pathsep) if v and shown(v))
            if value:
                env[key] = value
        elif value and shown(value):
            env[key] = value
    env.update({"HOME": str(home), "PWD": str(home), "TMPDIR": "/tmp"})
    env.update(policy.extra_env)
    return env


def hidden_roots(*paths: Path | None) -> tuple[Path, ...]:
    """The given paths that exist, resolved, without duplicates (the order kept)."""
    out: list[Path] = []
    for p in paths:
        if p is None:
            continue
        rp = real_path(Path(p))
        if rp not in out and str(rp) != "/":
            out.append(rp)
    return tuple(out)


def visible_sources(package_dirs: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(real_path(Path(p)) for p in package_dirs if Path(p).is_dir())


IsolationKind = Literal["bwrap", "none"]


@dataclass(frozen=True)
class Isolation:
    """What a run's diagnoser processes get: a bubblewrap box under ``policy``, or ``none`` (``note`` says
    why). Under ``none`` the environment is still scrubbed by ``policy`` and output still goes through
    the box folders, but every file the harness's user can read is readable."""

    kind: IsolationKind
    policy: SandboxPolicy
    note: str | None = None

    def new_box(self) -> Box:
        return Box(self.policy if self.kind == "bwrap" else None, env_policy=self.policy)


def choose_isolation(policy: SandboxPolicy) -> Isolation:
    """A bubblewrap box; ``none`` only where the host policy turns the sandbox off (``--no-sandbox``).
    Raises :class:`~diageval.hosting.errors.SandboxUnavailable`, saying why and what to do, where no box
    can start and one is required: hosting fails closed."""
    if not policy.host.sandbox:
        return Isolation("none", policy, "turned off for this run (--no-sandbox)")
    why = probe()
    if why:
        raise SandboxUnavailable(
            f"no sandbox can start here: {why}. diageval runs a diagnoser only in a sandbox, so that it cannot "
            "read the labels. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or pass --no-sandbox "
            "to run without one: such a run says isolation: none and is never ranked."
        )
    return Isolation("bwrap", policy)
