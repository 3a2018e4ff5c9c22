"""The ``hta`` adapter's pre-checks of HTA's known crashes (diagnosers/hta_prechecks.py), on synthetic traces:
each check predicts exactly the input HTA fails on, and the adapter turns it into an abstention with the
reason instead of a diagnoser_error."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from gpu_traces import gpu_trace

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.hta_prechecks import (
    _int_type_max,
    critical_path_blocker,
    gpu_analyses_blocker,
    loader_blocker,
)


def _on_streams(path: Path, corr_offset: int = 0) -> Path:
    """Give device events a stream (as Kineto writes them) and shift every correlation id by ``corr_offset``."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if "correlation" in args:
            args["correlation"] += corr_offset
            if e["cat"] in ("kernel", "Kernel", "gpu_memcpy", "Memcpy"):
                args["stream"] = 7
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_the_downcast_type_is_pandas_choice():
    assert _int_type_max(-1, 127) == 127 and _int_type_max(-1, 128) == 32767
    assert _int_type_max(-1, 8278) == 32767 and _int_type_max(-1, 64889) == 2**31 - 1


def test_small_correlation_ids_with_events_past_their_type_are_predicted(tmp_path):
    small = _on_streams(gpu_trace(tmp_path / "a" / "rank0.json.gz", steps=4))  # ids up to 80 (int8), 250 events
    large = _on_streams(gpu_trace(tmp_path / "b" / "rank0.json.gz", steps=4), corr_offset=100_000)
    reason = loader_blocker(small, refuses_upcast=True)
    assert reason is not None and "at most 127" in reason and "int16 overflow" in reason
    assert loader_blocker(large, refuses_upcast=True) is None
    assert loader_blocker(small, refuses_upcast=False) is None  # pandas 2 upcasts instead
    # no pairs (device events without a stream): nothing is written, nothing overflows
    assert loader_blocker(gpu_trace(tmp_path / "c" / "rank0.json.gz", steps=4), refuses_upcast=True) is None


hta = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis not installed (pip install 'diageval[hta]')")


@pytest.fixture(scope="module")
def hta_diagnoser():
    from diageval.diagnosers.hta_adapter import HTADiagnoser

    return HTADiagnoser()


def test_the_prediction_is_the_crash(tmp_path):
    """What loader_blocker predicts is what HTA's loader does under this pandas."""
    from diageval.diagnosers.hta_adapter import _load_trace, _quiet_hta
    from diageval.diagnosers.hta_prechecks import pandas_refuses_upcast

    if not pandas_refuses_upcast():
        pytest.skip("pandas < 3 upcasts the column: HTA does not crash")
    small = _on_streams(gpu_trace(tmp_path / "a" / "rank0.json.gz", steps=4))
    large = _on_streams(gpu_trace(tmp_path / "b" / "rank0.json.gz", steps=4), corr_offset=100_000)
    with _quiet_hta(), pytest.raises(TypeError, match="int8"):
        _load_trace({0: str(small)})
    with _quiet_hta():
        _load_trace({0: str(large)})


def test_the_adapter_abstains_on_a_trace_its_loader_cannot_hold(hta_diagnoser, tmp_path):
    small = _on_streams(gpu_trace(tmp_path / "t" / "rank0.json.gz", steps=4))
    if loader_blocker(small) is None:
        pytest.skip("pandas < 3: HTA loads this trace")
    d = hta_diagnoser.diagnose(EvidenceBundle.open(import_traces([small], tmp_path / "b")))
    assert d.abstain is not None and "not analysable by HTA" in d.abstain.reason and d.causes == []


def _loaded(tmp_path: Path, legacy: bool):
    from diageval.diagnosers.hta_adapter import _load_trace, _quiet_hta

    path = _on_streams(gpu_trace(tmp_path / "rank0.json.gz", steps=4, legacy=legacy), corr_offset=100_000)
    with _quiet_hta():
        return path, _load_trace({0: str(path)})


def test_launches_of_the_legacy_runtime_category_block_the_critical_path(tmp_path):
    from diageval.diagnosers.hta_adapter import _quiet_hta

    _, legacy = _loaded(tmp_path / "legacy", legacy=True)
    _, current = _loaded(tmp_path / "current", legacy=False)
    with _quiet_hta():
        reason = critical_path_blocker(legacy, 0)
        assert reason is not None and "'Runtime'" in reason and "Could not find runtime index" in reason
        assert critical_path_blocker(current, 0) is None


def test_the_adapter_leaves_the_data_question_unanswered_on_a_legacy_trace(hta_diagnoser, tmp_path):
    """A legacy trace with DataLoader waits: HTA's other analyses run, the critical path is not run, and with no
    cause found the adapter abstains saying which question went unasked (it used to end in diagnoser_error)."""
    path, _ = _loaded(tmp_path, legacy=True)
    d = hta_diagnoser.diagnose(EvidenceBundle.open(import_traces([path], tmp_path / "b")))
    assert d.causes == [] and d.abstain is not None
    assert "data-loading question" in d.abstain.reason and "'Runtime'" in d.abstain.reason
    assert "symptom.low_utilization" in {f.category for f in d.findings}  # HTA's GPU analyses still ran


def test_device_events_under_a_microsecond_block_the_gpu_breakdowns(hta_diagnoser, tmp_path):
    """HTA rounds start and end to whole microseconds apart: 0.02 us kernels get a duration of -1 and its temporal
    breakdown asserts; the pre-check sees that in HTA's own frame, and the adapter abstains saying so."""
    from diageval.diagnosers.hta_adapter import _analysis, _load_trace, _quiet_hta

    tiny = _on_streams(gpu_trace(tmp_path / "tiny" / "rank0.json.gz", steps=4, kernel_us=0.02, gap_us=0.33),
                       corr_offset=100_000)
    with _quiet_hta():
        t = _load_trace({0: str(tiny)})
        reason = gpu_analyses_blocker(t, 0)
        assert reason is not None and "negative duration" in reason
        assert "negative duration" in critical_path_blocker(t, 0)
        with pytest.raises(AssertionError):
            _analysis(t).get_temporal_breakdown(visualize=False)
    _, normal = _loaded(tmp_path / "normal", legacy=False)
    with _quiet_hta():
        assert gpu_analyses_blocker(normal, 0) is None
    d = hta_diagnoser.diagnose(EvidenceBundle.open(import_traces([tiny], tmp_path / "b")))
    assert d.causes == [] and d.abstain is not None and "GPU analyses were not run" in d.abstain.reason
