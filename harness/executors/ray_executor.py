"""``--executor ray[:ADDRESS]``: diagnoses in slots on the workers of a Ray cluster (:mod:`.ray_pool`), and a
run's live cases recorded on its recorder nodes first, one per node at a time (:mod:`.ray_recording`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diageval.executors.ray_pool import _connect, _import_ray, run_on_ray
from diageval.executors.ray_recording import prepare_on_ray, recorded_on_ray
from diageval.executors.tasks import DiagnoseTask, OnDone, OnPrepared

if TYPE_CHECKING:
    from diageval.cases.load import LoadedCase
    from diageval.cases.model import Case
    from diageval.hosting import Host
    from diageval.recording import EvidenceFn, RecordingPolicy


class RayExecutor:
    def __init__(self, address: str | None = None):
        self.address = address  # None: $RAY_ADDRESS, or a local Ray started for the run

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Join or start the cluster once, for the recordings and the diagnoses, and end a Ray this started."""
        ray = _import_ray()
        started = _connect(ray, self.address)
        try:
            yield
        finally:
            if started:
                ray.shutdown()

    def records(self, case: "Case") -> bool:
        return recorded_on_ray(case)

    def prepare(self, cases: "list[LoadedCase]", prepare: "EvidenceFn", on_done: OnPrepared, *,
                policy: "RecordingPolicy") -> None:
        prepare_on_ray(cases, prepare, on_done, policy=policy, address=self.address)

    def run(self, host: "Host", tasks: list[DiagnoseTask], on_done: OnDone, *, jobs: int,
            handover: dict[str, Any] | None, log_path: Path | None) -> None:
        run_on_ray(host, tasks, on_done, address=self.address, jobs=jobs, handover=handover, log_path=log_path)
