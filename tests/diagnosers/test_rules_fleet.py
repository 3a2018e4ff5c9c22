"""rules on fleet evidence (issue 24 item 6): segment the runs by every factor value with an effect size and its
interval, refuse to separate aliased values, then read the slow runs' evidence for the cause. Synthetic fleets
of steps.jsonl and tiny traces (tests/fleet_fakes.py), no recording."""

from __future__ import annotations

import pytest
from fleet_fakes import fleet_bundle, fleet_metadata

from diageval.bundle.fleet import read_fleet
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
from diageval.diagnosers.rules.fleet import effect_of, run_levels
from diageval.diagnosis import FactorRef

NODE2 = FactorRef(name="host", value="node-02")


def _fleet(tmp_path, slow: dict[str, float], noise: float = 0.04, **marks):
    """8 runs at 100 ms, those whose metadata holds a key of ``slow`` ('host=node-02') times its factor; marks
    ({'observer': 'host=node-02'}) put a trace mark on the runs holding that value."""
    runs = []
    for i in range(8):
        meta = fleet_metadata(i)
        held = {f"{k}={v}" for k, v in meta.items()}
        factor = 1.0
        for key, ratio in slow.items():
            if key in held:
                factor *= ratio
        runs.append({"metadata": meta, "median_s": 0.1 * factor, "noise": noise,
                     **{mark: where in held for mark, where in marks.items()}})
    return fleet_bundle(tmp_path, runs)


def _asserted(diagnosis):
    return [f for f in diagnosis.findings if f.confidence >= 0.5]


def test_the_slow_host_is_named_with_its_effect_and_interval(tmp_path):
    bundle = _fleet(tmp_path, {"host=node-02": 1.5})
    runs, notes = run_levels(read_fleet(bundle))
    assert len(runs) == 8 and notes == []
    e = effect_of(NODE2, runs)
    assert e.runs == ("job-02", "job-03") and e.low < 1.5 < e.high and e.ratio == pytest.approx(1.5, rel=0.08)
    assert e.confidence >= 0.9
    # no mechanism differs in these runs' evidence: the slowdown is said, naming the host, and no cause claimed
    d = RulesDiagnoser().diagnose(bundle)
    assert d.abstain is None and d.causes == []
    [said] = _asserted(d)
    assert (said.kind, said.category, said.factor) == ("symptom", "symptom.slow_step", NODE2)
    assert "1.5" in said.summary and "interval" in said.summary


def test_the_mechanism_the_slow_runs_show_is_the_cause_behind_the_value(tmp_path):
    bundle = _fleet(tmp_path, {"host=node-02": 1.5}, observer="host=node-02")
    d = RulesDiagnoser().diagnose(bundle)
    [claim] = [f for f in d.causes if f.confidence >= 0.5]
    assert (claim.category, claim.factor) == ("measurement.profiler_overhead", NODE2)
    assert claim.magnitude is None  # a fleet, not a regression pair
    wide = RulesDiagnoser().diagnose(_fleet(tmp_path / "w", {"version=v2": 1.6}, wide="version=v2"))
    assert [(f.category, f.factor) for f in wide.causes if f.confidence >= 0.5] == [
        ("compute.numeric_precision", FactorRef(name="version", value="v2"))]
    again = RulesDiagnoser().diagnose(_pair(tmp_path / "r", 3.0, 0.03, recompiled=True))
    assert [(f.category, f.factor) for f in again.causes if f.confidence >= 0.5] == [
        ("compile.recompilation", FactorRef(name="version", value="v2"))]


def test_aliased_values_are_not_separated(tmp_path):
    """Every node-04 run is on rack r2 and no other run is: the fleet cannot tell them apart."""
    d = RulesDiagnoser().diagnose(_fleet(tmp_path, {"host=node-04": 1.5}, observer="host=node-04"))
    assert d.abstain is not None and d.causes == []
    assert set(d.abstain.factors) == {FactorRef(name="host", value="node-04"), FactorRef(name="rack", value="r2")}


def test_noise_alone_names_no_factor(tmp_path):
    for noise in (0.04, 0.15):
        d = RulesDiagnoser().diagnose(_fleet(tmp_path / str(noise), {}, noise=noise))
        assert d.abstain is None and _asserted(d) == [], (noise, d)


def test_two_values_at_fault_are_both_named(tmp_path):
    d = RulesDiagnoser().diagnose(_fleet(tmp_path, {"host=node-02": 1.6, "loader_workers=2": 1.4}))
    named = {f.factor for f in _asserted(d)}
    assert named == {NODE2, FactorRef(name="loader_workers", value="2")}


def _pair(tmp_path, ratio: float, noise: float, **candidate_marks):
    runs = [{"metadata": {"host": "node-01", "version": "v1"}, "median_s": 0.1, "noise": noise},
            {"metadata": {"host": "node-01", "version": "v2"}, "median_s": 0.1 * ratio, "noise": noise,
             **candidate_marks}]
    return fleet_bundle(tmp_path, runs, roles=["baseline", "candidate"])


def test_a_regression_pair_states_its_magnitude(tmp_path):
    d = RulesDiagnoser().diagnose(_pair(tmp_path, 1.4, 0.03, observer=True))
    [claim] = [f for f in d.causes if f.confidence >= 0.5]
    assert claim.category == "measurement.profiler_overhead"
    assert claim.factor == FactorRef(name="version", value="v2")
    assert claim.magnitude == pytest.approx(1.4, rel=0.05)


def test_a_regression_under_the_noise_is_not_asserted(tmp_path):
    """4% slower with a 5% run-to-run floor: under the smallest slowdown worth naming, so at most a hedge."""
    d = RulesDiagnoser().diagnose(_pair(tmp_path, 1.04, 0.03, observer=True))
    assert _asserted(d) == []


def test_a_slowdown_within_the_runs_spread_is_abstained_on(tmp_path):
    """Runs that differ by up to ±25% as a whole (a busy host), and node-02's runs 1.6x slower: over the smallest
    slowdown worth naming, not confirmed by 8 runs of that spread: an abstention that says so, no cause; the same
    spread without the slow host says nothing."""
    spread = [1.0, 1.2, 0.85, 0.95, 1.25, 0.8, 0.9, 1.15]  # as a whole; no factor value holds the slow ones
    runs = [{"metadata": fleet_metadata(i), "noise": 0.03,
             "median_s": 0.1 * spread[i] * (1.6 if fleet_metadata(i)["host"] == "node-02" else 1.0)} for i in range(8)]
    from fleet_fakes import fleet_bundle

    d = RulesDiagnoser().diagnose(fleet_bundle(tmp_path / "slow", runs))
    assert d.abstain is not None and "smallest slowdown worth naming" in d.abstain.reason
    assert d.causes == [] and _asserted(d) == []
    for run in runs:
        run["median_s"] = 0.1 * spread[runs.index(run)]
    quiet = RulesDiagnoser().diagnose(fleet_bundle(tmp_path / "quiet", runs))
    assert quiet.abstain is None and quiet.findings == []


def test_a_regression_that_changed_two_values_names_its_cause_and_spreads_the_where(tmp_path):
    """The candidate moved its host and its version at once (issue 39's regressions): the pair cannot tell which change
    slowed it, but its evidence still says why. The cause is named without a value, the slowdown placed behind each
    changed value at half its confidence, and nothing is abstained on."""
    runs = [{"metadata": {"host": "node-01", "version": "v1"}, "median_s": 0.1, "noise": 0.03},
            {"metadata": {"host": "node-02", "version": "v2"}, "median_s": 0.14, "noise": 0.03, "wide": True}]
    d = RulesDiagnoser().diagnose(fleet_bundle(tmp_path, runs, roles=["baseline", "candidate"]))
    assert d.abstain is None
    [cause] = [f for f in d.causes if f.confidence >= 0.5]
    assert cause.category == "compute.numeric_precision" and cause.factor is None
    assert cause.magnitude == pytest.approx(1.4, rel=0.05)
    where = {f.factor: f.confidence for f in d.findings if f.kind == "symptom"}
    assert set(where) == {FactorRef(name="host", value="node-02"), FactorRef(name="version", value="v2")}
    assert len(set(where.values())) == 1 and 0 < next(iter(where.values())) <= 0.5
