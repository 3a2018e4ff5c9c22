"""The otava adapter (issue 24 item 6): Apache Otava's change points over a fleet's step times in start order,
mapped to the factor values whose runs are the slow ones. Synthetic fleets (tests/fleet_fakes.py)."""

from __future__ import annotations

import pytest
from test_rules_fleet import NODE2, _fleet, _pair

from diageval.diagnosis import FactorRef

pytest.importorskip("otava.analysis", reason="apache-otava is not installed (pip install 'diageval[otava]')")

from diageval.diagnosers.otava_adapter import OtavaDiagnoser  # noqa: E402


def _named(d):
    return {f.factor: f.confidence for f in d.findings}


def test_the_slow_host_is_named_and_no_cause_is_claimed(tmp_path):
    d = OtavaDiagnoser().diagnose(_fleet(tmp_path, {"host=node-02": 1.5}))
    assert d.causes == [] and d.abstain is None
    assert _named(d) == {NODE2: pytest.approx(1.0, abs=0.01)}
    assert all(f.category == "symptom.slow_step" and f.magnitude is None for f in d.findings)


def test_two_values_at_fault_and_aliased_values(tmp_path):
    two = OtavaDiagnoser().diagnose(_fleet(tmp_path / "two", {"host=node-02": 1.6, "loader_workers=2": 1.4}))
    assert set(_named(two)) == {NODE2, FactorRef(name="loader_workers", value="2")}
    aliased = OtavaDiagnoser().diagnose(_fleet(tmp_path / "alias", {"host=node-04": 1.5}))
    # the same runs hold both values: they share the confidence, neither is asserted
    assert _named(aliased) == {FactorRef(name="host", value="node-04"): pytest.approx(0.5, abs=0.01),
                               FactorRef(name="rack", value="r2"): pytest.approx(0.5, abs=0.01)}


def test_noise_and_a_regression_under_a_tenth_say_nothing(tmp_path):
    assert OtavaDiagnoser().diagnose(_fleet(tmp_path / "noise", {}, noise=0.15)).findings == []
    assert OtavaDiagnoser().diagnose(_pair(tmp_path / "small", 1.04, 0.03)).findings == []


def test_a_regression_pair_names_the_changed_value_with_its_magnitude(tmp_path):
    [f] = OtavaDiagnoser().diagnose(_pair(tmp_path, 1.4, 0.03)).findings
    assert f.factor == FactorRef(name="version", value="v2") and f.magnitude == pytest.approx(1.4, rel=0.05)


def test_one_job_evidence_gets_nothing(tmp_path):
    from fleet_fakes import member_bundle

    from diageval.bundle.model import EvidenceBundle

    bundle = EvidenceBundle.open(member_bundle(tmp_path / "job", median_s=0.1, noise=0.02))
    d = OtavaDiagnoser().diagnose(bundle)
    assert d.findings == [] and d.abstain is None
