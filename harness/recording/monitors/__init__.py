"""The in-job monitor registry: name -> MonitorInfo. Importing this module never imports torch or a tool.

An in-job monitor is a diagnoser kind (issue 27 item 4) whose measuring part runs inside the recorded
training job: :mod:`diageval.recording.monitors.hooks` installs it into every rank through the shared
step loop, the same for every case; it writes raw measurements into the bundle's ``monitor/`` folder, and
its diagnoser adapter (``diageval.diagnosers.monitors``, entry point of the same name) turns them into a
Diagnosis in the usual box. ``diageval run --diagnoser NAME`` with a name of this registry records each
case again with the monitor installed, under a cache entry of its own
(:mod:`diageval.recording.monitors.evidence`); the bundles every other diagnoser gets are unchanged.

Only the monitors listed here can be installed into a job (the hook's docstring says why: their code
shares the process with the injector). The registry is an explicit dict, like the workloads' and faults'.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MonitorInfo:
    name: str  # also the name of its diagnoser's entry point (``diageval.diagnosers``)
    summary: str
    impl: str  # "module:Class" of its in-job part, a ``StepMonitor``
    distribution: str  # the PyPI distribution of the tool (its extra in pyproject.toml has the same name)
    gpu_only: bool = False  # True: its in-job part cannot run without CUDA (its CPU test skips, saying why)

    def load(self) -> Any:
        module, _, attr = self.impl.partition(":")
        return getattr(importlib.import_module(module), attr)


MONITORS: dict[str, MonitorInfo] = {
    "nvrx-straggler": MonitorInfo(
        name="nvrx-straggler",
        summary="nvidia-resiliency-ext straggler detection: section timers scored by its ReportGenerator every few steps",
        impl="diageval.recording.monitors.nvrx:NvrxStragglerMonitor",
        distribution="nvidia-resiliency-ext",
    ),
    "traceml": MonitorInfo(
        name="traceml",
        summary="TraceML step-time telemetry (input wait, forward, backward, optimizer) per rank per step",
        impl="diageval.recording.monitors.traceml:TraceMLTelemetry",
        distribution="traceml-ai",
    ),
}


def monitor_for_spec(spec: str) -> MonitorInfo | None:
    """The registry's monitor when ``spec`` (a ``--diagnoser`` value) names one exactly, else None."""
    return MONITORS.get(spec.strip())
