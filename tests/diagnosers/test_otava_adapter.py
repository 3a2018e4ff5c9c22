"""The otava adapter (issue 24 item 6): Apache Otava's change points over a fleet's run levels in start order,
each slow segment mapped to the factor values consistent with it (the forecast spread over them), its p-value
calibrated by permutation. Synthetic fleets (tests/fleet_fakes.py) and random ones (tests/fleet_simulation.py)."""

from __future__ import annotations

import math
import random

import pytest
from fleet_fakes import fleet_bundle, member_bundle
from test_rules_fleet import _pair

from diageval.diagnosis import FactorRef

pytest.importorskip("otava.analysis", reason="apache-otava is not installed (pip install 'diageval[otava]')")

from diageval.diagnosers.otava_adapter import OtavaDiagnoser, calibrated, fleet_forecast  # noqa: E402
from diageval.diagnosers.pair_drift import beyond_drift  # noqa: E402

V2 = FactorRef(name="version", value="v2")
NODE5 = FactorRef(name="host", value="node-05")


def _rollout(tmp_path, ratio: float, *, aliased: bool = False):
    """12 runs in start order, hosts node-01..04 and loader settings cycling; version v2 from the 7th run on,
    ``ratio`` slower; with ``aliased`` those runs alone also ran on node-05."""
    runs = []
    for i in range(12):
        host = "node-05" if aliased and i >= 6 else f"node-0{i % 4 + 1}"
        meta = {"host": host, "version": "v2" if i >= 6 else "v1", "loader_workers": "2" if i % 3 else "4"}
        runs.append({"metadata": meta, "median_s": 0.1 * (ratio if i >= 6 else 1.0) * (1 + 0.03 * math.sin(i)),
                     "noise": 0.04})
    return fleet_bundle(tmp_path, runs)


def _named(d):
    return {f.factor: f.confidence for f in d.findings}


def test_a_rollout_names_the_value_that_changed_there_and_no_cause(tmp_path):
    d = OtavaDiagnoser().diagnose(_rollout(tmp_path, 1.6))
    assert d.causes == [] and d.abstain is None
    named = _named(d)
    assert set(named) == {V2} and 0.95 <= named[V2] <= 100 / 101  # 1 - the calibrated p-value (>= 1/101)
    assert all(f.category == "symptom.slow_step" and f.magnitude is None for f in d.findings)
    assert "permutation-calibrated" in d.findings[0].summary


def test_aliased_values_at_the_change_are_named_by_an_abstention(tmp_path):
    d = OtavaDiagnoser().diagnose(_rollout(tmp_path, 1.6, aliased=True))
    assert d.findings == [] and d.abstain is not None
    assert set(d.abstain.factors) == {NODE5, V2}


def test_the_forecast_is_spread_over_the_values_consistent_with_a_segment():
    """v2 from the 7th run on (2x), and from the 10th on also loader_workers=2 (3x): the last segment's forecast
    is split between the two values consistent with it; the middle one's goes to v2 alone, which keeps its
    highest. Hosts cycle through fast and slow runs: no host is consistent with either segment."""
    runs = [(f"job-{i}", {"host": f"node-0{i % 4 + 1}", "version": "v2" if i >= 6 else "v1",
                          "loader_workers": "2" if i >= 9 else "4"},
             [0.1 * (1 if i < 6 else 2 if i < 9 else 3) * (1 + 0.02 * math.sin(i + s)) for s in range(6)])
            for i in range(12)]
    forecast, aliased, _ = fleet_forecast(runs)
    assert aliased == []
    loader = FactorRef(name="loader_workers", value="2")
    assert set(forecast) == {V2, loader}
    assert forecast[V2] >= 0.9 and 0.4 <= forecast[loader] <= 0.5


def test_the_calibration_is_a_permutation_p_value():
    rng = random.Random(3)
    noise = [math.exp(rng.gauss(0, 0.15)) for _ in range(12)]
    step = [1.0 + 0.01 * math.sin(i) + (1.0 if i >= 6 else 0.0) for i in range(12)]
    # at least 1/(1 + shuffles); a clean step's order is rare among its shuffles
    assert 1 / 101 <= calibrated(step, 1e-6) < 0.05
    # on noise, a change point at any p-value is what shuffles find now and then (Otava's false alarms), and a
    # stricter p-value is found no more often
    assert calibrated(noise, 1e-9) <= calibrated(noise, 1e-3) <= calibrated(noise, 1.0) <= 0.2


def test_a_regression_pair_names_the_changed_value_with_its_magnitude(tmp_path):
    [f] = OtavaDiagnoser().diagnose(_pair(tmp_path, 1.4, 0.03)).findings
    assert f.factor == V2 and f.magnitude == pytest.approx(1.4, rel=0.05)
    # one pair cannot see how far two runs drift apart: the confidence is the chance the change is beyond it
    assert f.confidence == pytest.approx(beyond_drift(f.magnitude), abs=0.01) and f.confidence < 0.95


def test_noise_and_a_regression_under_a_tenth_say_nothing(tmp_path):
    flat = [{"metadata": {"host": f"node-0{i % 4 + 1}", "version": f"v{i % 2 + 1}"}, "median_s": 0.1, "noise": 0.05}
            for i in range(12)]
    assert OtavaDiagnoser().diagnose(fleet_bundle(tmp_path / "noise", flat)).findings == []
    assert OtavaDiagnoser().diagnose(_pair(tmp_path / "small", 1.04, 0.03)).findings == []


def test_runs_without_logged_steps_get_nothing_not_an_abstention(tmp_path):
    """A recorded pair may log no steps: Otava has no series, which says nothing about whether the case can be
    judged (an abstention would say it cannot)."""
    runs = [{"metadata": {"host": "node-01", "version": f"v{i + 1}"}, "median_s": 0.1, "noise": 0.02, "steps": 2}
            for i in range(2)]
    d = OtavaDiagnoser().diagnose(fleet_bundle(tmp_path, runs, roles=["baseline", "candidate"]))
    assert d.findings == [] and d.abstain is None


def test_one_job_evidence_gets_nothing(tmp_path):
    from diageval.bundle.model import EvidenceBundle

    bundle = EvidenceBundle.open(member_bundle(tmp_path / "job", median_s=0.1, noise=0.02))
    d = OtavaDiagnoser().diagnose(bundle)
    assert d.findings == [] and d.abstain is None


def test_on_random_fleets_it_is_never_worse_than_null_and_better_where_otava_has_a_signal(tmp_path):
    """tests/fleet_simulation.py at 6 fleets per scenario (the script prints 40): no signal (noise, a value
    interleaved in start order) scores null's loss; a rollout and an aliased rollout score below it."""
    from fleet_simulation import simulate

    diagnose = OtavaDiagnoser().diagnose
    diff = {s: simulate(diagnose, s, 6, tmp_path) for s in ("noise", "interleaved", "rollout", "aliased")}
    assert sum(diff["noise"]) <= 0.05 and sum(diff["interleaved"]) <= 0.05
    assert sum(diff["rollout"]) / 6 < -0.2
    assert sum(diff["aliased"]) / 6 < -1.0
