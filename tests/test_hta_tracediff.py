"""The TraceDiff adapter (issue 24 item 6): HTA's TraceDiff on a regression pair's rank-0 traces; the magnitude
from the profiled steps, the changed factor value, and a cause from what only the candidate's trace holds.
Synthetic pairs (tests/fleet_fakes.py); skipped without HTA."""

from __future__ import annotations

import pytest
from test_rules_fleet import _fleet, _pair

from diageval.diagnosis import FactorRef

pytest.importorskip("hta.trace_diff", reason="HolisticTraceAnalysis is not installed (pip install 'diageval[hta]')")

from diageval.diagnosers.hta_tracediff import TraceDiffDiagnoser  # noqa: E402

V2 = FactorRef(name="version", value="v2")


def test_the_profiled_candidate_is_named_with_its_factor_and_magnitude(tmp_path):
    d = TraceDiffDiagnoser().diagnose(_pair(tmp_path, 1.4, 0.03, observer=True))
    [claim] = d.causes
    assert (claim.category, claim.factor, claim.confidence) == ("measurement.profiler_overhead", V2, 0.8)
    assert claim.magnitude == pytest.approx(1.4, rel=0.02)
    [slow] = [f for f in d.findings if f.kind == "symptom"]
    assert slow.factor == V2 and slow.confidence == 0.9


def test_a_region_compiled_again_is_recompilation(tmp_path):
    d = TraceDiffDiagnoser().diagnose(_pair(tmp_path, 3.0, 0.03, recompiled=True))
    assert [(f.category, f.factor) for f in d.causes] == [("compile.recompilation", V2)]


def test_the_same_ops_at_another_speed_name_no_cause(tmp_path):
    d = TraceDiffDiagnoser().diagnose(_pair(tmp_path, 1.4, 0.03))
    assert d.causes == [] and [f.factor for f in d.findings] == [V2]


def test_under_a_tenth_or_on_a_fleet_it_says_nothing(tmp_path):
    assert TraceDiffDiagnoser().diagnose(_pair(tmp_path / "small", 1.04, 0.03, observer=True)).findings == []
    fleet = TraceDiffDiagnoser().diagnose(_fleet(tmp_path / "fleet", {"host=node-02": 1.5}))
    assert fleet.findings == [] and fleet.abstain is None  # a fleet is not a pair
