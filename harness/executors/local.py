"""The ``local`` executor: ``jobs`` slots of the hosted diagnoser in this process, one thread each.

Each thread takes a free slot (a long-lived worker in its box, or a ``cmd:`` slot that opens a box per case),
diagnoses one task and gives the slot back. A bundle that fails its checksums is a
:class:`~diageval.executors.HarnessFailure` with ``bundle_damaged``; an exception from a slot (a worker
that cannot start) stops the run; Ctrl-C kills every diagnosis in flight, and those tasks are not reported.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diageval.hosting import Slot
from diageval.hosting import BundleIntegrityError
from diageval.executors.tasks import DiagnoseTask, HarnessFailure, OnDone, Outcome
from diageval.hosting import LiveGroups

if TYPE_CHECKING:
    from diageval.hosting import Host


def run_local(host: "Host", tasks: list[DiagnoseTask], on_done: OnDone, *, jobs: int,
              handover: dict[str, Any] | None, log_path: Path | None) -> None:
    live = LiveGroups()
    stop = threading.Event()
    slots: queue.Queue[Slot] = queue.Queue()
    executors: list[Slot] = []
    try:
        for _ in range(min(jobs, len(tasks))):
            executors.append(host.slot(live=live, log_path=log_path, handover=handover))
    except BaseException:
        for ex in executors:
            ex.close()
        raise
    for ex in executors:
        slots.put(ex)

    def run(index: int) -> None:
        if stop.is_set():
            return
        task = tasks[index]
        ex = slots.get()
        try:
            outcome: Outcome = ex.diagnose(task.bundle_dir, task.case_dir, bundle_id=task.bundle_id)
        except BundleIntegrityError as exc:
            outcome = HarnessFailure(str(exc), bundle_damaged=True)
        finally:
            slots.put(ex)
        if stop.is_set():  # interrupted mid-diagnosis: this task was not really run; leave it unreported
            return
        on_done(index, outcome)

    pool = ThreadPoolExecutor(max_workers=len(executors), thread_name_prefix="diagnose")
    try:
        futures = [pool.submit(run, i) for i in range(len(tasks))]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in done:
            f.result()  # a WorkerStartError (diagnoser cannot start here) stops the run
    except BaseException:
        stop.set()
        live.kill_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        for ex in executors:
            ex.close()


class LocalExecutor:
    """``--executor local``: diagnoses in this process's slots; every case's evidence is prepared by the run."""

    def __init__(self, address: str | None = None):
        assert address is None, "local takes no address"

    def session(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def records(self, case: Any) -> bool:
        return False

    def prepare(self, cases: list[Any], prepare: Any, on_done: Any, *, policy: Any) -> None:
        raise AssertionError("the local executor records nothing itself (records() is False)")

    def run(self, host: "Host", tasks: list[DiagnoseTask], on_done: OnDone, *, jobs: int,
            handover: dict[str, Any] | None, log_path: Path | None) -> None:
        run_local(host, tasks, on_done, jobs=jobs, handover=handover, log_path=log_path)
