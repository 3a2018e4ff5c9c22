"""A short profile of a job whose step log holds the whole run (diagnosers/rules/data_wait.py, ``logged_like``): the
log shows whether the profiled steps' data wait recurs, where too few profiled steps wait to show it themselves."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from synthetic_traces import StepShape, build_bundle

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.rules.data_wait import measure_data_wait
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
from diageval.diagnosers.rules.inputs import gather_evidence


def profile_last(root: Path, steps: int) -> Path:
    """Keep only the last ``steps`` profiled steps in each rank's trace (a short profiler schedule); the step log
    keeps every step."""
    for path in root.glob("rank*/trace.json.gz"):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        marks = sorted(e["ts"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
        first = marks[-steps]
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or e.get("ts", 0) >= first]
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return root


def short_profile(tmp_path: Path, shape) -> EvidenceBundle:
    return EvidenceBundle.open(profile_last(build_bundle(tmp_path / "b", shape, world_size=1, n_steps=20), 4))


def test_a_wait_in_every_other_step_of_a_short_profile_recurs_in_the_log(tmp_path):
    # two loader workers: every other step waits 12 ms; 2 of the 4 profiled steps wait, as 8 of the logged others do
    b = short_profile(tmp_path, lambda r, k: StepShape(data_us=12000 if k % 2 else 100, comm_us=100))
    (row,) = measure_data_wait(gather_evidence(b))
    assert row.steps_waiting == 2 and row.logged_like == 8
    (f,) = [f for f in RulesDiagnoser().diagnose(b).causes if f.confidence >= 0.5]
    assert f.category == "input.dataloader_starvation"
    assert any("logged steps outside them" in e for e in f.evidence)


def test_one_stray_wait_in_a_short_profile_is_not_starvation(tmp_path):
    # one long wait in the profile; the logged steps around it run at the quick steps' pace
    b = short_profile(tmp_path, lambda r, k: StepShape(data_us=40000 if k == 17 else 100, comm_us=100))
    (row,) = measure_data_wait(gather_evidence(b))
    assert row.steps_waiting == 1 and row.logged_like == 0
    assert "input.dataloader_starvation" not in [f.category for f in RulesDiagnoser().diagnose(b).causes]


def test_the_logs_start_up_step_is_not_a_recurring_wait(tmp_path):
    # one wait in the profile, and the log's only other long step is its first (start-up)
    def shape(r, k):
        return StepShape(data_us=40000 if k in (0, 17) else 100, comm_us=100)

    b = short_profile(tmp_path, shape)
    (row,) = measure_data_wait(gather_evidence(b))
    assert row.steps_waiting == 1 and row.logged_like == 0
