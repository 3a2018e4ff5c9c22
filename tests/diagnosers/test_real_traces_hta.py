"""The ``hta`` adapter on bundles imported from every real trace: a diagnosis, an honest abstention or
``DiagnoserFailed`` -- never another exception."""

from __future__ import annotations

import pytest

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed
from diageval.diagnosis import Diagnosis
from diageval.paths import real_traces_dir

REAL_TRACES = real_traces_dir() / "hta"
if not REAL_TRACES.is_dir():
    pytest.skip(f"real traces not found at {REAL_TRACES} (expected ../shared beside the repo)",
                allow_module_level=True)
pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis not installed (pip install 'diageval[hta]')")

from diageval.diagnosers.hta_adapter import HTADiagnoser  # noqa: E402

TRACE_DIRS = sorted(p for p in REAL_TRACES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def diagnoser() -> HTADiagnoser:
    return HTADiagnoser()


@pytest.mark.parametrize("trace_dir", TRACE_DIRS, ids=lambda p: p.name)
def test_hta_on_real_trace(trace_dir, tmp_path, diagnoser):
    bundle = EvidenceBundle.open(import_traces([trace_dir], tmp_path / "bundle"))
    try:
        result = diagnoser.diagnose(bundle)
    except DiagnoserFailed as failed:
        assert failed.status == "hta_error" and str(failed).startswith("HTA failed")
        return
    Diagnosis.model_validate(result.model_dump())  # a valid diagnosis, round-trips
    if bundle.env.device == "cuda":  # HTA's GPU analyses apply; it may only abstain for missing ranks
        if result.abstain is not None:
            assert len(bundle.trace_paths()) < bundle.world_size and "no trace for rank" in result.abstain.reason
    else:
        has_loader = any(b"DataLoader" in bundle.open_trace(r).read() for r in bundle.trace_paths())
        assert (result.abstain is not None) == (not has_loader)
    for f in result.findings:
        for line in f.evidence:
            if line.startswith("rank"):
                rank = int(line.split("/")[0][4:])
                assert rank in bundle.trace_paths()
        if f.ranks:
            assert set(f.ranks) <= set(bundle.trace_paths())
