"""TraceML's step-time telemetry, in the job: per rank, per step, the phases TraceML times (``input_wait``:
the wait for the DataLoader's batch; ``forward``, ``backward``, ``optimizer_step``; ``traced_step_time``:
the step after the batch arrived), in milliseconds on the CPU clock, one JSON line per step to
``monitor/traceml-rank<N>.jsonl``.

TraceML's own in-job part (``traceml.init`` + ``trace_step`` and its patches) streams the same events over
TCP to an aggregator process that ``traceml run`` starts, which stores them and runs the diagnosis; here
the phase clock of the hook (:class:`~diageval.recording.monitors.hooks.PhaseClock`, at TraceML's
boundaries) takes the place of its instrumentation and the rank's file that of the socket, and the
diagnosis (TraceML's ``StepTimeAnalyzer`` and ``diagnose_step_time_window``, its summary policy) runs in
the boxed adapter, ``diageval.diagnosers.monitors.traceml``, as TraceML's aggregator runs outside the
training process. No GPU clock on CPU: TraceML then selects the CPU clock itself.
"""

from __future__ import annotations

import json

from diageval.recording.monitors.hooks import MonitorContext, StepMonitor, StepPhases


def rows_file(rank: int) -> str:
    return f"traceml-rank{rank}.jsonl"


class TraceMLTelemetry(StepMonitor):
    def __init__(self, ctx: MonitorContext):
        super().__init__(ctx)
        self.fh = open(ctx.out_dir / rows_file(ctx.rank), "a", encoding="utf-8")

    def on_step(self, phases: StepPhases) -> None:
        metrics = {"input_wait": phases.input_wait_ms, "traced_step_time": max(0.0, phases.step_ms - phases.input_wait_ms),
                   "forward": phases.forward_ms, "backward": phases.backward_ms, "optimizer_step": phases.optimizer_ms}
        row = {"rank": self.ctx.rank, "world_size": self.ctx.world_size, "step": phases.step,
               "cpu_ms": {k: v for k, v in metrics.items() if v is not None}}
        self.fh.write(json.dumps(row) + "\n")
        self.fh.flush()

    def finish(self, failed: bool) -> None:
        self.fh.close()
