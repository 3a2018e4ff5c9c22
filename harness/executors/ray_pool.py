"""The ``ray`` executor's driver: ``jobs`` slots as Ray actors (one CPU each, spread over the nodes), fed one
task at a time, their answers handed to the caller, which writes the run folder.

* **Opening**: ``jobs`` slots, at most one per CPU of the cluster; every actor runs :meth:`RemoteSlot.open` on its node, i.e. ``Host.open`` under the run's policy
  there. A node without a sandbox refuses (``SandboxUnavailable``, naming the node) and the run stops, as a
  local run does; a node whose diagnoser reports another name or version than the driver's stops it too
  (results would mix two diagnosers). Labels travel only inside the hand-over the harness's own table gives
  ``prior``, ``oracle`` (and public words to ``leak``): to every slot, through Ray, as locally to every worker.
* **Bundles** travel through the object store by content key (the sha256 of ``bundle.json``; one object per
  key while tasks need it), are checked against the key on arrival and then, file by file, by the slot's
  private copy (:mod:`~diageval.bundle.transfer`).
* **A lost worker** (its process or node died, or its bundle object was lost): the task is given again once,
  to a fresh actor; lost a second time, it ends :class:`HarnessFailure` (``harness_error``), never the
  diagnoser's fault. What the diagnoser does wrong (crash, hang, bad output) is the slot's attempt, as locally.
* **Interrupt**: every actor kills its diagnoser processes, then is killed; tasks in flight are not reported.

Ray is imported only here (``pip install 'diageval[ray]'``); a Ray this process did not start is left running.
"""

from __future__ import annotations

import collections
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import diageval.hosting as hosting_face
from diageval.hosting import Attempt
from diageval.hosting import BundleIntegrityError, HostError
from diageval.executors.tasks import DiagnoseTask, HarnessFailure, OnDone
from diageval.bundle.transfer import pack_bundle
from diageval.executors.remote_slot import KEPT, RemoteSlot

if TYPE_CHECKING:
    from diageval.hosting import Host

OPEN_TIMEOUT_S = 600.0  # placing an actor and starting its diagnoser (a worker's own start allows 120 s, twice)
CLOSE_TIMEOUT_S = 30.0
TRIES = 2  # a lost worker's task is given once more


def run_on_ray(host: "Host", tasks: list[DiagnoseTask], on_done: OnDone, *, address: str | None, jobs: int,
               handover: dict[str, Any] | None, log_path: Path | None) -> None:
    ray = _import_ray()
    started = _connect(ray, address)
    try:
        _Pool(ray, host, handover, log_path).run(tasks, on_done, jobs)
    finally:
        if started:
            ray.shutdown()


class _Pool:
    def __init__(self, ray: Any, host: "Host", handover: dict[str, Any] | None, log_path: Path | None):
        self.ray, self.host, self.handover, self.log_path = ray, host, handover, log_path
        self.actor_class = ray.remote(num_cpus=1, max_concurrency=2, scheduling_strategy="SPREAD")(RemoteSlot)
        self.lost = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                     ray.exceptions.ObjectLostError, ray.exceptions.LocalRayletDiedError, ray.exceptions.OutOfMemoryError)
        self.actors: list[Any] = []
        self.logs: dict[Any, str] = {}  # actor -> its diagnoser.log there, which the run's log stands for here

    def run(self, tasks: list[DiagnoseTask], on_done: OnDone, jobs: int) -> None:
        ray = self.ray
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))  # a slot holds one: more would wait for a free CPU
            free = self._open(min(jobs, len(tasks), max(cpus, 1)))
            pending = collections.deque(range(len(tasks)))
            tries = collections.Counter[int]()
            uses = collections.Counter(t.bundle_sha256 for t in tasks)
            objects: dict[str, Any] = {}
            inflight: dict[Any, tuple[int, Any]] = {}
            while pending or inflight:
                while pending and free:
                    i = pending.popleft()
                    task, actor = tasks[i], free.pop()
                    if task.bundle_sha256 not in objects:
                        objects[task.bundle_sha256] = ray.put(pack_bundle(task.bundle_dir))
                    ref = actor.diagnose.remote(objects[task.bundle_sha256], task.bundle_sha256, task.bundle_id)
                    inflight[ref] = (i, actor)
                if not inflight:
                    raise HostError(f"no Ray worker is left to diagnose {len(pending)} case(s): every one was lost")
                [ref], _ = ray.wait(list(inflight), num_returns=1)
                i, actor = inflight.pop(ref)
                task = tasks[i]
                try:
                    reply = ray.get(ref)
                except self.lost as exc:
                    self._forget(actor)
                    free += self._open(1, replacing=True)
                    tries[i] += 1
                    why = f"the Ray worker diagnosing it was lost ({type(exc).__name__}: {_first_line(exc)})"
                    if tries[i] < TRIES:
                        pending.appendleft(i)
                    else:
                        self._finish(task, objects, uses)
                        on_done(i, HarnessFailure(f"{why}, twice"))
                    continue
                free.append(actor)
                if "attempt" in reply and self.logs.get(actor) and self.log_path is not None:  # errors name the run's log
                    error = reply["attempt"].get("error")
                    if error:
                        reply["attempt"]["error"] = error.replace(self.logs[actor], str(self.log_path))
                if "transfer" in reply:
                    tries[i] += 1
                    if tries[i] < TRIES:
                        pending.appendleft(i)
                        continue
                    self._finish(task, objects, uses)
                    on_done(i, HarnessFailure(f"{reply['transfer']} (twice)"))
                    continue
                self._finish(task, objects, uses)
                on_done(i, self._outcome(task, reply))
        except BaseException:
            self._abort()
            raise
        self._close()

    # actors

    def _open(self, n: int, *, replacing: bool = False) -> list[Any]:
        """``n`` opened actors; a replacement that cannot be placed or opened is left out (the run goes on
        with fewer), while a node that refuses the diagnoser stops the run."""
        ray = self.ray
        actors = [self.actor_class.remote() for _ in range(n)]
        self.actors += actors
        refs = [a.open.remote(self.host.spec, self.host.policy.model_dump_json(), list(self.host.paths.python_path),
                              self.handover) for a in actors]
        opened = []
        for actor, ref in zip(actors, refs):
            try:
                reply = ray.get(ref, timeout=OPEN_TIMEOUT_S)
            except (ray.exceptions.GetTimeoutError, *self.lost) as exc:
                self._forget(actor)
                if replacing:
                    continue
                raise HostError(f"the Ray cluster could not start a diagnoser slot ({type(exc).__name__}: "
                                f"{_first_line(exc)}); each slot needs 1 CPU on a node with diageval installed "
                                "(`ray status` shows what is free)") from None
            check_opened(reply, self.host)
            self.logs[actor] = str(reply.get("log_path", ""))
            opened.append(actor)
        return opened

    def _forget(self, actor: Any) -> None:
        if actor in self.actors:
            self.actors.remove(actor)
        try:
            self.ray.kill(actor)
        except Exception:
            pass

    def _abort(self) -> None:
        """Interrupted or failed: stop every diagnosis in flight, then the actors."""
        ray = self.ray
        refs = []
        for a in self.actors:
            try:
                refs.append(a.abort.remote())
            except Exception:
                pass
        try:
            ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
        except Exception:
            pass
        for a in list(self.actors):
            self._forget(a)

    def _close(self) -> None:
        """Close every slot and keep what the diagnosers printed outside any case (``diagnoser.log``)."""
        ray = self.ray
        refs = [a.close.remote() for a in self.actors]
        for ref in refs:
            try:
                log = ray.get(ref, timeout=CLOSE_TIMEOUT_S)
            except Exception:
                continue
            if log and self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.log_path, "ab") as fh:
                    fh.write(log)
        for a in list(self.actors):
            self._forget(a)

    # tasks

    @staticmethod
    def _finish(task: DiagnoseTask, objects: dict[str, Any], uses: collections.Counter) -> None:
        """One task of this bundle is over: drop the bundle's object once no task needs it."""
        uses[task.bundle_sha256] -= 1
        if uses[task.bundle_sha256] <= 0:
            objects.pop(task.bundle_sha256, None)

    @staticmethod
    def _outcome(task: DiagnoseTask, reply: dict[str, Any]) -> Attempt | HarnessFailure:
        if "integrity" in reply:  # the same error, naming the same cached folder, as a local slot raises
            exc = BundleIntegrityError(task.bundle_dir, reply["integrity"]["rel"], reply["integrity"]["problem"])
            return HarnessFailure(str(exc), bundle_damaged=True)
        attempt = Attempt.model_validate(reply["attempt"])
        if task.case_dir is not None:
            for name, data in reply.get("kept", {}).items():
                if name in KEPT and data:
                    task.case_dir.mkdir(parents=True, exist_ok=True)
                    (task.case_dir / name).write_bytes(data)
        return attempt


def check_opened(reply: dict[str, Any], host: "Host") -> None:
    """Raise the ``HostError`` a slot's :meth:`RemoteSlot.open` answered (naming its node), or a ``HostError`` when
    the node hosts another diagnoser, version or isolation than ``host`` (one run holds one diagnoser)."""
    node = reply.get("node", "?")
    if not reply.get("ok"):
        cls = getattr(hosting_face, str(reply.get("type")), HostError)
        cls = cls if isinstance(cls, type) and issubclass(cls, HostError) and cls is not BundleIntegrityError else HostError
        raise cls(f"on Ray node {node}: {reply.get('error')}")
    mine = (host.name, host.version, host.isolation.kind)
    theirs = (reply.get("name"), reply.get("version"), reply.get("isolation"))
    if mine != theirs:
        raise HostError(f"on Ray node {node} the diagnoser is {theirs[0]} version {theirs[1]} (isolation {theirs[2]}), "
                        f"here {mine[0]} version {mine[1]} (isolation {mine[2]}): install the same diagnoser and "
                        "diageval on every node, so that one run holds one diagnoser")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise HostError("--executor ray needs Ray here and on every node: pip install 'diageval[ray]'") from None
    return ray


def _connect(ray: Any, address: str | None) -> bool:
    """Join ``address`` (or ``$RAY_ADDRESS``), or start a local Ray; True when this call started or joined it
    (and so ends it). A Ray this process already joined is used as it is."""
    if ray.is_initialized():
        return False
    from diageval.executors.local_ray import start_local_ray

    joining = address or os.environ.get("RAY_ADDRESS")
    try:
        if joining:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        else:  # one node that records one case at a time (ray_recording)
            start_local_ray(ray, logging_level=logging.WARNING, log_to_driver=False)
    except Exception as exc:
        where = f"join the Ray cluster at {joining}" if joining else "start a local Ray"
        raise HostError(f"--executor ray: could not {where}: {type(exc).__name__}: {_first_line(exc)}") from None
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
