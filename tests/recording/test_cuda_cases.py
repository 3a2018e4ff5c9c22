"""CUDA-only cases and faults: strict params and registry entries; on a machine without CUDA every such
case is skipped with the reason (run pipeline, verify, record, and a note under the leaderboard), never
recorded on CPU and never failed. On a lent GPU (``pytest -m gpu``) the faults leave what they should."""

from __future__ import annotations

from pathlib import Path

import pytest

from diageval.bundle.model import EvidenceBundle
from diageval.cases.load import load_case_set
from diageval.recording import record as record_mod
from diageval.recording.context import RankContext
from diageval.recording.faults import FAULTS
from diageval.recording.faults import params as p
from diageval.recording.launcher import RecordingError

CUDA_FAULTS = ("host_device_sync", "pageable_copies", "allocator_churn")
CUDA_CASES = [lc for lc in load_case_set().cases if lc.case.requires.device == "cuda"]


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class Notes:
    def __init__(self):
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    def __call__(self, text: str) -> None:
        pass

    def started(self, *a) -> None:
        pass

    def advance(self, phase: str) -> None:
        pass


def test_cuda_faults_are_registered_strict_and_cuda_only():
    for name in CUDA_FAULTS:
        info = FAULTS[name]
        impl = info.load()
        assert impl.stage == "live" and impl.backends == ("nccl",) and info.injects
    with pytest.raises(ValueError):
        p.HostDeviceSyncParams(sync_call="cpu", syncs_per_step=2)
    with pytest.raises(ValueError):
        p.HostDeviceSyncParams(sync_call="item", syncs_per_step=0)
    with pytest.raises(ValueError):
        p.PageableCopiesParams(copy_mb=0)
    with pytest.raises(ValueError):
        p.AllocatorChurnParams(empty_every_steps=1, extra=True)
    from diageval.cases.model import WorkloadSpec

    w = WorkloadSpec(name="mlp_ddp", world_size=1, steps=10)
    assert p.check_allocator_churn(p.AllocatorChurnParams(empty_every_steps=10), w)[0][0] == "empty_every_steps"
    assert p.check_allocator_churn(p.AllocatorChurnParams(empty_every_steps=2), w) == []


def test_cuda_faults_refuse_to_run_on_cpu(tmp_path):
    ctx = RankContext(rank=0, world_size=1, steps=4, device="cpu", backend="gloo", scratch_dir=tmp_path)
    for name in CUDA_FAULTS:
        info = FAULTS[name]
        params = info.params_model.model_validate(
            {"host_device_sync": {"sync_call": "item", "syncs_per_step": 1}, "pageable_copies": {"copy_mb": 1},
             "allocator_churn": {}}[name])
        with pytest.raises(RuntimeError, match="CUDA device"):
            info.load()(params, ctx)


def test_the_cuda_cases_cover_each_gpu_pathology_and_a_control():
    causes = {c.category for lc in CUDA_CASES for c in lc.case.labels.causes}
    assert {"host.device_sync", "memory.allocator_churn", "launch.kernel_launch_overhead"} <= causes
    faults = {f.name for lc in CUDA_CASES for f in lc.case.faults}
    assert set(CUDA_FAULTS) <= faults
    assert {lc.case.labels.expect for lc in CUDA_CASES} == {"diagnose", "healthy", "abstain"}
    # a lent machine has one GPU: each single-device pathology has a one-rank case it can run
    one_gpu = {c.category for lc in CUDA_CASES if lc.case.workload.world_size == 1 for c in lc.case.labels.causes}
    assert {"host.device_sync", "memory.allocator_churn", "launch.kernel_launch_overhead"} <= one_gpu
    assert all(lc.case.requires.min_devices >= lc.case.workload.world_size for lc in CUDA_CASES)  # says what it needs


def test_device_problem_says_why_a_cuda_case_cannot_run_here(monkeypatch):
    monkeypatch.setattr(record_mod, "cuda_device_count", lambda: 0)
    case = CUDA_CASES[0].case
    assert "needs CUDA" in record_mod.device_problem("cpu", case)
    assert "1 CUDA device(s) needed, this machine has 0" in record_mod.device_problem("auto", case)
    with pytest.raises(RecordingError, match="needs CUDA"):
        record_mod.resolve_device("auto", case)
    cpu_case = load_case_set().get("straggler-rank1").case
    assert record_mod.device_problem("auto", cpu_case) is None and record_mod.resolve_device("auto", cpu_case) == "cpu"
    monkeypatch.setattr(record_mod, "cuda_device_count", lambda: 1)
    assert record_mod.device_problem("auto", case) is None and record_mod.resolve_device("auto", case) == "cuda"
    # a gloo-only injection under --device cuda: skipped with the reason, not an error mid-run
    monkeypatch.setattr(record_mod, "cuda_device_count", lambda: 2)
    stall = load_case_set().get("collective-stall-mlp").case
    assert "collective_stall) works on CPU (gloo) only" in record_mod.device_problem("cuda", stall)
    assert record_mod.resolve_device("auto", stall) == "cpu"


def test_without_a_gpu_driver_the_device_count_is_zero_without_importing_torch(monkeypatch, tmp_path):
    """Every run asks how many CUDA devices there are (the corpus holds CUDA cases); on Linux without any GPU
    driver node the answer is 0 before torch is imported (seconds on 2 cores), and with one, torch's."""
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("the driver-node shortcut is Linux's")
    monkeypatch.setattr(record_mod, "GPU_DRIVER_NODES", (str(tmp_path / "no-such-driver"),))
    monkeypatch.setitem(sys.modules, "torch", None)  # any `import torch` now raises ImportError
    assert record_mod.cuda_device_count() == 0
    monkeypatch.setattr(record_mod, "GPU_DRIVER_NODES", (str(tmp_path),))  # a node exists: torch is asked
    with pytest.raises(ImportError):
        record_mod.cuda_device_count()


def test_verify_and_record_skip_cuda_cases_without_cuda_and_record_nothing(monkeypatch, tmp_path):
    from diageval.recording import cache, prepare, verify

    monkeypatch.setattr(record_mod, "cuda_device_count", lambda: 0)

    def must_not_record(*a, **k):
        raise AssertionError("a CUDA-only case was recorded on a machine without CUDA")

    monkeypatch.setattr(verify, "verify_case", must_not_record)
    monkeypatch.setattr(cache, "ensure_bundle", must_not_record)
    monkeypatch.setattr(prepare, "ensure_bundle", must_not_record)
    ids = [lc.case.id for lc in CUDA_CASES]
    for device in ("auto", "cpu"):
        notes = Notes()
        assert verify.verify_cases(ids, device=device, cache_dir=tmp_path, progress=notes) == []
        skipped = [x for x in notes.lines if "skipped" in x]
        positive = [lc for lc in CUDA_CASES if lc.case.labels.expect == "diagnose"]
        assert len(skipped) == len(positive) and all("needs CUDA" in x for x in skipped)
        notes = Notes()
        assert prepare.record_cases(ids, device=device, cache_dir=tmp_path, progress=notes) == []
        assert len([x for x in notes.lines if "skipped, needs CUDA" in x]) == len(CUDA_CASES)


def test_the_run_and_its_leaderboard_list_cuda_cases_as_skipped(tmp_path):
    from run_fakes import FakeEvidence, make_case, make_case_set

    from diageval.reports.report import report_runs
    from run_fakes import run_with

    cuda = make_case("g1-gpu", expect="healthy").model_copy(
        update={"requires": make_case("x").requires.model_copy(update={"device": "cuda"})})
    out = run_with("null", make_case_set([cuda, make_case("c1", expect="healthy")]), cases_dir=tmp_path,
                        out_dir=tmp_path / "runs", evidence_fn=FakeEvidence(tmp_path / "bundles"), progress=None,
                        cuda_device_count=lambda: 0, isolation="none")
    assert [r.case_id for r in out.results] == ["c1"]
    assert [s.case_id for s in out.info.skipped] == ["g1-gpu"]
    board = report_runs([out.run_dir])
    assert "Skipped on this machine, not scored: 1 case(s): `g1-gpu` (needs 2 CUDA device(s); this machine has 0)" in board


def _record(case_id: str, tmp_path: Path) -> EvidenceBundle:
    from diageval.recording.record import record_case

    case = load_case_set().get(case_id).case
    small = case.model_copy(update={"workload": case.workload.model_copy(update={"steps": 8, "params": {
        **case.workload.params, "trace_steps": 3}})})
    record_case(small, tmp_path / case_id, device="cuda")
    return EvidenceBundle.open(tmp_path / case_id)


def _names(bundle: EvidenceBundle, cats: set[str]) -> list[str]:
    return [e.get("name", "") for e in bundle.load_trace(0)["traceEvents"] if e.get("cat") in cats]


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_devices() < 1, reason="needs a CUDA device")
def test_gpu_host_device_sync_leaves_syncs_and_device_to_host_copies(tmp_path):
    b = _record("device-sync-item-mlp", tmp_path)
    runtime = _names(b, {"cuda_runtime", "cuda_driver"})
    assert any("Synchronize" in n for n in runtime) or any(n.startswith("cudaMemcpy") for n in runtime)
    assert any("DtoH" in n for n in _names(b, {"gpu_memcpy"}))


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_devices() < 1, reason="needs a CUDA device")
def test_gpu_pageable_copies_leave_pageable_host_to_device_copies(tmp_path):
    b = _record("pageable-copies-mlp", tmp_path)
    assert any("HtoD" in n and "Pageable" in n for n in _names(b, {"gpu_memcpy"}))


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_devices() < 1, reason="needs a CUDA device")
def test_gpu_allocator_churn_leaves_mallocs_and_frees_every_step(tmp_path):
    b = _record("allocator-churn-mlp", tmp_path)
    runtime = _names(b, {"cuda_runtime", "cuda_driver"})
    assert sum("Malloc" in n for n in runtime) >= 3 and sum("Free" in n for n in runtime) >= 1
    healthy = _record("mlp-healthy-gpu", tmp_path)
    assert sum("Malloc" in n for n in _names(healthy, {"cuda_runtime", "cuda_driver"})) < sum("Malloc" in n for n in runtime)
