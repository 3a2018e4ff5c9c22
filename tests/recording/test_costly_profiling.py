"""costly_profiling's execution trace option (issue 24): the observer goes to the profiler, its file to the rank's
scratch folder (which the recorder deletes), never to the bundle; off by default, so the cheap variant's cases
(the profiling look-alikes labeled healthy) are unchanged."""

from __future__ import annotations

from pathlib import Path

from diageval.recording.context import RankContext
from diageval.recording.faults import FAULTS
from diageval.recording.faults.base import Injection
from diageval.recording.faults.versions import CostlyProfiling


def _ctx(scratch: Path) -> RankContext:
    return RankContext(rank=1, world_size=2, steps=4, device="cpu", backend="gloo", scratch_dir=scratch)


def test_the_execution_trace_observer_writes_into_scratch(tmp_path):
    from torch.profiler import ExecutionTraceObserver

    params = FAULTS["costly_profiling"].params_model(record_execution_trace=True)
    options = Injection([CostlyProfiling(params, _ctx(tmp_path))]).profiler_options()
    observer = options.pop("execution_trace_observer")
    assert options == {"with_stack": True, "profile_memory": True}
    assert isinstance(observer, ExecutionTraceObserver)
    assert Path(observer.get_output_file_path()) == tmp_path / "execution_trace.rank1.json"
    observer.unregister_callback()


def test_the_execution_trace_is_off_by_default(tmp_path):
    params = FAULTS["costly_profiling"].params_model()
    assert params.record_execution_trace is False
    assert "execution_trace_observer" not in CostlyProfiling(params, _ctx(tmp_path)).profiler_options()
