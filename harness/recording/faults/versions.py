"""Version-style causes (issue 24): what a new software version or a changed setting does to the same job.

* :class:`CostlyProfiling` (``measurement.profiler_overhead``): the run's profiler also records every op's
  Python stack and the allocator's events (``with_stack``, ``profile_memory``), and pays for that bookkeeping on
  every op it records: the observer effect. The job and its ops are unchanged; only what is measured is more.
  Costs fall on the profiled steps (the workload's ``trace_steps``), so cases profile most of their steps.
  On CPU that bookkeeping is one more event per Python call and per allocation, beside the per-op record every
  run's profiler already makes (``record_shapes``): ``python benchmarks/profiler_overhead.py`` measured it at
  1.26x the CPU time of a profiled step of the smallest conv net and 1.31x of an MLP of 32 layers 8 wide (load
  5.5 on 2 cores), less than two recordings of one job differ on a loaded machine (a ratio of that size does
  not pass the manifestation test reliably there). ``record_execution_trace`` also attaches an execution trace
  observer (torch.profiler's ``execution_trace_observer``: the graph of every op with its inputs' values,
  shapes and types, the format replay and simulation tools read), which writes op by op to a file while the
  step runs (into the rank's private scratch folder, which the recorder deletes): 4.5x and 5.6x there. The
  job logs torch's own line saying the observer is on, as any job using it does.
* :class:`WiderNumbers` (``compute.numeric_precision``): the model and its inputs in float64 where they were
  float32 (a changed default dtype); the same ops on the same shapes, each matmul slower in proportion to the
  type's throughput.
* :class:`RecompilingModel` (``compile.recompilation``): the model is ``torch.compile``d with static shapes
  (``dynamic=False``), and the workload's batches change shape (the language model's padded length varies
  from batch to batch), so every new shape fails the compiled graph's guards and compiles again, until the
  compile cache is full. ``graph_compiler`` picks the compile pipeline: ``inductor`` (generated C++ kernels: a
  working C++ compiler needed), ``aot_eager`` (TorchDynamo capture and AOTAutograd, the ops run eagerly) or
  ``eager`` (capture only); each recompiles for the same reason.

Nothing here names itself in the evidence: no record_function, no log line.
"""

from __future__ import annotations

from typing import Any

from diageval.recording.faults.base import LiveFault


class CostlyProfiling(LiveFault):
    def profiler_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"with_stack": self.params.record_python_stacks,
                                   "profile_memory": self.params.record_allocations}
        if self.params.record_execution_trace:
            from torch.profiler import ExecutionTraceObserver

            path = self.ctx.scratch_dir / f"execution_trace.rank{self.ctx.rank}.json"
            options["execution_trace_observer"] = ExecutionTraceObserver().register_callback(str(path))
        return options


class _Float64Source:
    """A dataset whose floating-point tensors come as float64 (integers, e.g. class ids, unchanged)."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Any:
        item = self.inner[index]
        return tuple(_wider(t) for t in item) if isinstance(item, (tuple, list)) else _wider(item)


def _wider(t: Any) -> Any:
    import torch

    return t.to(torch.float64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t


class WiderNumbers(LiveFault):
    def model(self, model: Any) -> Any:
        return model.double()

    def dataset(self, dataset: Any) -> Any:
        return _Float64Source(dataset)


class RecompilingModel(LiveFault):
    def model(self, model: Any) -> Any:
        import torch

        return torch.compile(model, dynamic=False, backend=self.params.graph_compiler)
