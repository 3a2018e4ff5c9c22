"""Where a run's diagnoses execute: ``local`` (a pool of slots in this process, one per job) or ``ray``
(slots on the workers of a Ray cluster, each opened by the same :class:`~diageval.hosting.Host` code on its
node, so the sandbox fails closed there exactly as it does here).

Both take the same list of :class:`DiagnoseTask` (a bundle folder, its content key, the random id the
diagnoser is shown, the folder the diagnoser's output is kept in) and report each finished task once to the
caller's ``on_done(index, outcome)``, where the outcome is the slot's :class:`~diageval.hosting.Attempt` or a
:class:`HarnessFailure` (the bundle failed its checksums, or the machine diagnosing it was lost twice): never
the diagnoser's fault. The caller (the run pipeline) stays the one writer of the run folder; an executor
only writes the diagnoser's kept output into each task's ``case_dir``, as a local slot does.

With ``ray``, a run's live cases are also recorded on Ray, one recording per node at a time
(:mod:`.ray_recording`: :func:`prepare_on_ray`), before any diagnosis starts.

What travels to a Ray worker: the diagnoser spec, the host policy, the harness's hand-over (only for the
built-ins :mod:`diageval.hosting.handover` lists), and per task the bundle's files, its content key (the
sha256 of its ``bundle.json``) and the random id. Never a case id, a label or a run-folder path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diageval.hosting.executors.ray_recording import RecordingFailed, prepare_on_ray, recorded_on_ray
from diageval.hosting.executors.tasks import DiagnoseTask, ExecutorSpec, HarnessFailure, OnDone, Outcome

if TYPE_CHECKING:
    from diageval.hosting.host import Host

__all__ = ["DiagnoseTask", "ExecutorSpec", "HarnessFailure", "OnDone", "Outcome", "RecordingFailed", "executor_session",
           "prepare_on_ray", "recorded_on_ray", "run_diagnoses"]


@contextlib.contextmanager
def executor_session(executor: ExecutorSpec) -> Iterator[None]:
    """Hold the executor's connection for a whole run (``ray``: join or start the cluster once, for the
    recordings and the diagnoses, and end a Ray this started); ``local``: nothing to hold."""
    if executor.kind == "local":
        yield
        return
    from diageval.hosting.executors.ray_pool import _connect, _import_ray

    ray = _import_ray()
    started = _connect(ray, executor.address)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def run_diagnoses(host: "Host", tasks: list[DiagnoseTask], on_done: OnDone, *, executor: ExecutorSpec, jobs: int,
                  handover: dict[str, Any] | None, log_path: Path | None) -> None:
    """Diagnose every task with ``jobs`` slots on ``executor``; call ``on_done`` once per finished task
    (from worker threads under ``local``: it must be thread-safe). A ``HostError`` (a slot that cannot start,
    no sandbox on a node) stops the run; on KeyboardInterrupt the diagnoses in flight are killed and not
    reported."""
    if not tasks:
        return
    if executor.kind == "local":
        from diageval.hosting.executors.local import run_local

        run_local(host, tasks, on_done, jobs=jobs, handover=handover, log_path=log_path)
    else:
        from diageval.hosting.executors.ray_pool import run_on_ray

        run_on_ray(host, tasks, on_done, address=executor.address, jobs=jobs, handover=handover, log_path=log_path)
