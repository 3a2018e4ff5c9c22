"""The outside adapters on every real trace recorded by others: each ends ok or abstained, or with the
adapter's own status (DiagnoserFailed), never another exception."""

from __future__ import annotations

import pytest
from real_trace_data import real_trace_folders, real_traces_dir

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed
from diageval.hosting.registry import resolve_diagnoser

FOLDERS = real_trace_folders()
ADAPTERS = ["tbprofiler", "gpu-idle", "changepoint", "flightrecorder"]
STATUS = {"tbprofiler": "tbprofiler_error", "gpu-idle": "gpu_idle_error", "changepoint": None,
          "flightrecorder": "flightrecorder_error"}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    if not FOLDERS:
        pytest.skip(f"no real traces: set DIAGEVAL_DATA or add ../shared/real-traces (looked in {real_traces_dir()})")
    out = tmp_path_factory.mktemp("real")
    return {f"{d.parent.name}/{d.name}": EvidenceBundle.open(import_traces([d], out / d.name)) for d in FOLDERS}


@pytest.mark.parametrize("name", ADAPTERS)
def test_adapter_on_every_real_trace(name, bundles):
    try:
        diagnoser = resolve_diagnoser(name).factory()
    except Exception as exc:
        pytest.skip(f"{name} unavailable: {exc}")
    outcomes = {}
    for label, bundle in bundles.items():
        try:
            d = diagnoser.diagnose(bundle)
            outcomes[label] = "abstain" if d.abstain else "ok"
        except DiagnoserFailed as exc:
            assert exc.status == STATUS[name], f"{label}: unexpected status {exc.status}"
            outcomes[label] = exc.status
    assert len(outcomes) == len(bundles)
    if name == "flightrecorder":  # no real trace folder has Flight Recorder dumps
        assert set(outcomes.values()) == {"abstain"}
