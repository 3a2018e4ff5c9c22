"""Hang cases record and verify: the job fails within seconds, every rank exits on its own, the evidence
(timeout error in the logs, Flight Recorder dumps, the traces written, the steps up to the failure) is in
the bundle, and no process is left behind. Records live workloads, so marked ``slow``."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import psutil
import pytest
import yaml

from diageval.bundle.model import EvidenceBundle
from diageval.cases.model import Case
from locations import REPO

pytestmark = pytest.mark.slow
CASES = REPO / "cases"


def _case(name: str, **fault_params) -> Case:
    data = yaml.safe_load((CASES / "hang" / f"{name}.yaml").read_text())
    data["faults"][0]["params"].update(fault_params)
    return Case.model_validate(data)


def _forkserver_descendants() -> list[psutil.Process]:
    """Processes started through the recorder's forkserver (ranks, their DataLoader workers) still alive."""
    from multiprocessing import forkserver

    pid = forkserver._forkserver._forkserver_pid
    assert pid is not None, "the recorder's forkserver is not running: nothing to check"
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize("name", ["hang-skip-rank1", "hang-reorder-convnet", "hang-stall-rank0"])
def test_hang_case_fails_fast_and_leaves_its_evidence(name, tmp_path):
    from diageval.recording.record import record_case

    case = _case(name)
    fault = case.faults[0].params
    # the recorder's own kill timeout is far above the collective timeout: reaching it raises RecordingError
    record_case(case, tmp_path / "b", device="cpu", timeout_s=90)
    bundle = EvidenceBundle.open(tmp_path / "b")
    assert bundle.verify_checksums() == []
    world = case.workload.world_size
    assert sorted(int(p.name.split("_")[1]) for p in (bundle.root / "flight_recorder").iterdir()) == list(range(world))
    logs = {r: p.read_text() for r, p in bundle.log_paths().items()}
    assert all(f"step {fault['hang_step']} failed:" in text for text in logs.values())
    failures = [line for text in logs.values() for line in text.splitlines() if "failed:" in line]
    # gloo words its timeout two ways: "Timed out waiting 3000ms for recv ..." or "Application timeout caused
    # pair closure" (seen under load); the peer of a rank that gave up sees "Connection closed by peer"
    assert any("timed out waiting" in line.lower() or "application timeout" in line.lower() for line in failures), failures
    assert set(bundle.trace_paths()) == set(range(world))  # the steps profiled before the failure
    steps = bundle.steps()
    assert max(s.step for s in steps) == fault["hang_step"]
    last = [s for s in steps if s.step == fault["hang_step"]]
    assert len(last) == world and max(s.duration for s in last) >= fault["collective_timeout_s"]
    assert _forkserver_descendants() == []
    assert multiprocessing.active_children() == []


def test_lookalike_completes_with_the_same_short_timeout(tmp_path):
    from diageval.recording.record import record_case

    case = _case("late-rank-lookalike")
    record_case(case, tmp_path / "b", device="cpu", timeout_s=90)
    bundle = EvidenceBundle.open(tmp_path / "b")
    assert max(s.step for s in bundle.steps()) == case.workload.steps - 1
    assert all("failed:" not in p.read_text() for p in bundle.log_paths().values())
    assert len(list((bundle.root / "flight_recorder").iterdir())) == case.workload.world_size


def test_a_job_failure_is_a_crash_for_faults_that_do_not_declare_it(tmp_path):
    from diageval.recording.launcher import RecordingError
    from diageval.recording.record import record_case

    # a late rank that blocks past the timeout: the job fails, but late_rank does not declare fails_job
    case = _case("late-rank-lookalike", late_ms=2500, collective_timeout_s=1.0)
    with pytest.raises(RecordingError, match="failed \\(exit code 3\\)"):
        record_case(case, tmp_path / "b", device="cpu", timeout_s=90)
    assert not (tmp_path / "b").exists()
