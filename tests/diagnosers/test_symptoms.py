"""The symptoms baseline: it measures real symptoms and (wrongly, by design) claims them as causes."""

from __future__ import annotations

from synthetic_traces import StepShape, build_bundle

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.symptoms import SymptomsDiagnoser


def claims(tmp_path, shape, **kw):
    d = SymptomsDiagnoser().diagnose(EvidenceBundle.open(build_bundle(tmp_path / "b", shape, **kw)))
    assert d.abstain is None
    assert all(f.kind == "cause" and f.category.startswith("symptom.") for f in d.findings)
    return {f.category: f for f in d.findings}


def test_straggler_is_named_by_its_symptoms(tmp_path):
    c = claims(tmp_path, lambda r, k: StepShape(compute_us=9000 if r == 1 else 4000))
    assert "symptom.long_collective" in c
    assert c["symptom.long_collective"].ranks == [0]  # the waiting rank: exactly the misleading answer


def test_spikes_are_claimed(tmp_path):
    c = claims(tmp_path, lambda r, k: StepShape(gap_us=15000 if r == 0 and k % 5 == 4 else 200))
    assert "symptom.step_time_spikes" in c and c["symptom.step_time_spikes"].steps == (4, 20)


def test_data_starvation_shows_as_low_utilization(tmp_path):
    c = claims(tmp_path, lambda r, k: StepShape(data_us=8000))
    assert "symptom.low_utilization" in c


def test_quiet_run_claims_nothing(tmp_path):
    assert claims(tmp_path, lambda r, k: StepShape()) == {}


def test_it_is_a_reference_by_the_harness_table_not_its_own_say():
    from diageval.hosting.handover import BUILTIN_ROLES

    assert SymptomsDiagnoser.name == "symptoms" and not hasattr(SymptomsDiagnoser, "reference")
    assert BUILTIN_ROLES["symptoms"].reference
