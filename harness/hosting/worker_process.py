"""The worker's side of :mod:`diageval.hosting.worker`: ``python -m diageval.hosting.worker_process``, inside a box.

It reads JSON-line requests on stdin and answers each on its original stdout (the protocol is described
in :mod:`diageval.hosting.worker`): it resolves and constructs the diagnoser (its import happens here, never
in the harness), hands it what the harness sends, diagnoses each private bundle copy with fds 1 and 2 on
the case's files, and writes the diagnosis to ``output.json`` for the harness to read through the one
diagnosis reader.

Nothing carries over from one case to the next (issue 44: a diagnoser that kept what it saw paired a noise
bundle with its base recording, and a fleet's member runs with the same runs in another fleet, +0.037 each).
A built-in (an entry point of diageval itself: our code) is imported and constructed here once, as a
long-lived worker is for. Any other diagnoser's code never runs in this process, which would otherwise be
its to patch: the worker stays a zygote that has imported only trusted libraries (numpy, pandas, the
bundle readers), and every request that needs the diagnoser (naming it at ``init``, each case) runs in a
child forked for it, which imports, constructs, is handed what ``prepare`` sent, diagnoses and exits with
everything it learned (:func:`_in_child`). In a box (``sweep``, which the harness sets only there) the worker
then ends every other process of the box (a daemon the child left behind) and empties what the box can
write besides the case folder (``/tmp``, ``/dev/shm`` and what the case added to ``/dev``); a System V IPC
object left behind is reported (``leftovers``) and the harness starts a fresh box. A fork is sound only from
one thread: the worker pins the numeric libraries' pools to one thread before anything loads them, and
reports after ``init`` whether cases are kept apart (``forks``); where they cannot be, the harness starts a
fresh worker for every case. The worker is not dumpable (``PR_SET_DUMPABLE`` 0), so a child cannot attach to
it or write its memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from diageval.hosting.case_box import OUTPUT_NAME, STDERR_NAME, STDOUT_NAME


@contextlib.contextmanager
def _captured(folder: Path) -> Iterator[None]:
    """Point fds 1 and 2 (and so print, logging and C libraries) at the case's files for a while."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(folder / STDOUT_NAME, "wb") as out, open(folder / STDERR_NAME, "wb") as err:
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
    from diageval.hosting.registry import DiagnoserSpecError, resolve_diagnoser

    try:
        resolved = resolve_diagnoser(request["spec"])
    except DiagnoserSpecError as exc:
        return None, {"ok": False, "spec_error": True, "error": str(exc)}
    if resolved.needs_network and not request.get("allow_network"):  # before it is built: it may need its endpoint
        return None, {"ok": False, "spec_error": True, "error": (
            f"{resolved.name} needs the network (it says needs_network: it calls a model endpoint), and this run keeps "
            "diagnosers offline: run again with --allow-network")}
    diagnoser = resolved.factory()
    return diagnoser, {"ok": True, "name": resolved.name, "version": resolved.version, "origin": resolved.origin,
                       "claims": None if resolved.claims is None else list(resolved.claims),
                       "needs_network": resolved.needs_network}


def _prepare(diagnoser: Any, request: dict[str, Any]) -> dict[str, Any]:
    from diageval.hosting.corpus import PublicVocabulary, ReferenceCorpus

    handover = request["handover"]
    model = {"corpus": ReferenceCorpus, "vocabulary": PublicVocabulary}[handover["kind"]]
    diagnoser.prepare(model.model_validate(handover["data"]))
    return {"ok": True}


def _diagnose(diagnoser: Any, request: dict[str, Any]) -> dict[str, Any]:
    from pydantic import ValidationError

    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.base import DiagnoserFailed
    from diageval.diagnosis import Diagnosis
    from diageval.validation import field_path

    folder = Path(request["dir"])
    os.chdir(folder)
    start = time.perf_counter()
    try:
        with _captured(folder):
            try:
                result = diagnoser.diagnose(EvidenceBundle.open(Path(request["bundle"])))
            except BaseException:
                traceback.print_exc()  # into the case's stderr.txt
                raise
    except DiagnoserFailed as exc:  # an adapter whose tool answered with something unreadable says invalid_output,
        status = exc.status if exc.status in ("invalid_output", "cap_hit") else "diagnoser_error"  # an agent's cap cap_hit
        return _reply(status, start, error=f"{exc.status}: {exc}")
    except Exception as exc:
        return _reply("diagnoser_error", start, error=f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - start
    try:
        payload = result.model_dump(mode="json") if isinstance(result, Diagnosis) else result
        diagnosis = Diagnosis.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = field_path(first["loc"]) or "<top level>"
        return _reply("invalid_output", start, seconds, error=f"not a valid Diagnosis: {where}: {first['msg']}")
    except RecursionError:
        return _reply("invalid_output", start, seconds, error="not a valid Diagnosis: nested too deeply")
    (folder / OUTPUT_NAME).write_text(diagnosis.model_dump_json(), encoding="utf-8")
    return {"status": "ok", "seconds": seconds}


REPLY_BYTES = 1 << 16  # a child's reply: a status line (an error is cut to fit)
ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def os_threads() -> int:
    """The threads of this process, as the kernel counts them (native threads included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0  # no /proc: unknown, so the caller does not fork


def _in_child(work: Any) -> dict[str, Any]:
    """``work()`` (a reply) in a child forked for it alone; the reply comes back over a pipe."""
    start = time.perf_counter()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: do the work, answer, and go, with everything it learned
        os.close(r)
        try:
            reply = work()
        except BaseException as exc:  # noqa: BLE001 - whatever the diagnoser raised is its own failure
            reply = _reply("diagnoser_error", start, error=f"{type(exc).__name__}: {exc}")
        if isinstance(reply.get("error"), str):
            reply["error"] = reply["error"][:REPLY_BYTES // 4]
        try:
            os.write(w, json.dumps(reply).encode()[:REPLY_BYTES - 1])
        finally:
            os._exit(0)
    os.close(w)
    _, code = os.waitpid(pid, 0)
    os.set_blocking(r, False)  # a grandchild may hold the pipe open: read what the child wrote, never wait for EOF
    try:
        data = os.read(r, REPLY_BYTES)
    except BlockingIOError:
        data = b""
    finally:
        os.close(r)
    try:
        reply = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        reply = None
    if isinstance(reply, dict):
        return reply
    how = (f"killed by signal {os.WTERMSIG(code)}" if os.WIFSIGNALED(code)
           else f"exited with status {os.WEXITSTATUS(code)}")
    return _reply("diagnoser_error", start, error=f"the diagnoser's process died ({how}) before it answered")


def is_builtin(spec: str) -> bool:
    """An entry point that diageval itself registers: our own code, which may run in the worker itself."""
    from diageval.hosting.registry import diagnoser_entry_points

    eps = diagnoser_entry_points().get(spec.strip(), [])
    return len(eps) == 1 and getattr(getattr(eps[0], "dist", None), "name", None) == "diageval"


def _not_dumpable() -> None:
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def _preload() -> None:
    """The libraries most diagnosers use, imported once here (trusted code), so a child's import is quick."""
    import importlib

    for name in ("numpy", "pandas", "diageval.bundle.trace_summary", "diageval.bundle.fleet"):
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                pid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids | {1}


def sweep_box(dev_entries: set[str]) -> list[str]:
    """After a case, in a box: end every process but this worker and its ancestors, empty ``/tmp`` and
    ``/dev/shm``, remove what the case added to ``/dev``; return what could not be made clean."""
    import shutil
    import signal

    keep = _ancestors()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in keep:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in keep:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(int(entry), 0)  # reaped when it was ours; others are the box's init's to reap
    mounts = _mount_points()
    left = _empty(Path("/tmp"), mounts) + _empty(Path("/dev/shm"), mounts)
    for name in set(os.listdir("/dev")) - dev_entries:
        path = Path("/dev", name)
        with contextlib.suppress(OSError):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for table in sorted(Path("/proc/sysvipc").glob("*")):  # shm, msg, sem: a header line, then one line an object
        objects = len(table.read_text().splitlines()) - 1
        if objects > 0:
            left.append(f"System V {table.name}: {objects} object(s)")
    left += [f"/dev/{e}" for e in set(os.listdir("/dev")) - dev_entries]
    return left


def _mount_points() -> set[Path]:
    """Every mount point of this box (the fifth field of ``/proc/self/mountinfo``, whose octal escapes stand for
    spaces and such)."""
    import re

    points: set[Path] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            field = line.split()[4]
            points.add(Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)))
    return points


def _empty(folder: Path, mounts: set[Path]) -> list[str]:
    """Remove what ``folder`` holds but mount points and the folders on the way to one (the box binds a diagnoser's
    own folder there when it lies under ``/tmp``: a test's, a user's); return what stayed that is neither. Without
    the exception such a folder was "left" after every case, and every case got a fresh box (~1 s: the order
    cheater's whole-corpus test took 175 s in ci2)."""
    import shutil

    left: list[str] = []
    for entry in list(folder.iterdir()) if folder.is_dir() else []:
        if entry in mounts:
            continue
        if any(entry in m.parents for m in mounts):
            left += _empty(entry, mounts)
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
        if entry.is_symlink() or entry.exists():
            left.append(str(entry))
    return left


def _list() -> dict[str, Any]:
    from dataclasses import asdict

    from diageval.hosting.registry import list_diagnosers

    return {"ok": True, "rows": [asdict(r) for r in list_diagnosers()]}


def _reply(status: str, start: float, seconds: float | None = None, *, error: str) -> dict[str, Any]:
    return {"status": status, "error": error, "seconds": seconds if seconds is not None else time.perf_counter() - start}


def main() -> None:
    from diageval.recording import die_with_parent

    die_with_parent()  # without a box (isolation: none) a killed harness must not leave a worker behind
    for name in ONE_THREAD:  # before numpy, torch or BLAS load: their pools would make the worker unforkable
        os.environ[name] = "1"
    _not_dumpable()
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # stray prints between cases go to the log, never into the protocol
    diagnoser = None
    init: dict[str, Any] | None = None  # another's diagnoser: the init request each child replays
    prepare: dict[str, Any] | None = None  # and the hand-over, likewise
    sweep = False
    dev_entries = set(os.listdir("/dev")) if os.path.isdir("/dev") else set()

    def fresh() -> Any:  # in a child: another's diagnoser, built as the init built it, handed what prepare sent
        made, reply = _init(init or {})
        if made is None:
            raise RuntimeError(reply.get("error"))
        if prepare is not None:
            _prepare(made, prepare)
        return made

    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "init":
                sweep = request.get("sweep") is True
                if is_builtin(str(request.get("spec", ""))):
                    diagnoser, reply = _init(request)
                else:
                    _preload()
                    reply = _in_child(lambda: _init(request)[1])
                    init = request if reply.get("ok") else None
                reply["forks"] = init is None or os_threads() == 1
            elif op == "prepare":
                if diagnoser is not None:
                    reply = _prepare(diagnoser, request)
                elif init is not None:
                    prepare, reply = request, {"ok": True}
                else:
                    reply = {"ok": False, "error": "worker not initialised"}
            elif op == "diagnose":
                if diagnoser is not None:  # a built-in, here
                    reply = _diagnose(diagnoser, request)
                elif init is None:
                    reply = {"status": "diagnoser_error", "error": "worker not initialised", "seconds": 0.0}
                elif os_threads() == 1:
                    reply = _in_child(lambda: _diagnose(fresh(), request))
                    left = sweep_box(dev_entries) if sweep else []
                    if left:  # the next case would find it: the harness starts a fresh box
                        reply["leftovers"] = left[:20]
                else:  # here, once: this worker is no longer one thread, so the harness replaces it after the case
                    reply = _diagnose(fresh(), request)
                    reply["leftovers"] = [f"the worker runs {os_threads()} threads: a fork would copy them"]
            elif op == "list":
                reply = _list()
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:
            traceback.print_exc()
            reply = {"ok": False, "status": "diagnoser_error", "error": f"{type(exc).__name__}: {exc}"}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


if __name__ == "__main__":
    main()
