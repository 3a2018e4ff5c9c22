"""The executors: one protocol and one explicit registry (name -> the class that implements it, imported only
when a run names it, so that ``local`` never imports Ray)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from diageval.cases.load import LoadedCase
    from diageval.cases.model import Case
    from diageval.hosting import Host
    from diageval.recording import EvidenceFn, RecordingPolicy

# name -> "module:Class"; ``--executor NAME[:ADDRESS]`` picks one (diageval.executors.tasks.ExecutorSpec)
EXECUTORS: dict[str, str] = {
    "local": "diageval.executors.local:LocalExecutor",
    "ray": "diageval.executors.ray_executor:RayExecutor",
}


class Executor(Protocol):
    """Where a run's diagnoses execute (and, for some, where its live cases are recorded)."""

    def session(self) -> AbstractContextManager[None]:
        """Hold what the executor needs for a whole run (a cluster joined once for recordings and diagnoses)."""

    def records(self, case: "Case") -> bool:
        """Whether this executor records ``case``'s evidence itself (else the run prepares it here)."""

    def prepare(self, cases: "list[LoadedCase]", prepare: "EvidenceFn",
                on_done: Callable[[int, Any, float], None], *, policy: "RecordingPolicy") -> None:
        """Prepare the evidence of ``cases`` (each one ``records`` said yes to) with ``prepare`` under ``policy``
        (what to record, on which device; its cache is this machine's); call ``on_done(index, answer, seconds)``
        as each ends, the answer being the prepared evidence or the exception that replaces it."""

    def run(self, host: "Host", tasks: list[Any], on_done: Callable[[int, Any], None], *, jobs: int,
            handover: dict[str, Any] | None, log_path: Path | None) -> None:
        """Diagnose every task with ``jobs`` slots; call ``on_done`` once per finished task (possibly from
        worker threads: it must be thread-safe). A ``HostError`` stops the run; on KeyboardInterrupt the
        diagnoses in flight are killed and not reported."""


def executor_for(spec: Any) -> Executor:
    """The executor an :class:`~diageval.executors.tasks.ExecutorSpec` names, built with its address."""
    module, _, cls = EXECUTORS[spec.kind].partition(":")
    return getattr(importlib.import_module(module), cls)(spec.address)
