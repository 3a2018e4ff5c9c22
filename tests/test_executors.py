"""Executors (issue 26): ``local`` and ``ray`` give the same results; a bundle travels by its key and is checked
on arrival; a node without a sandbox refuses as this machine does; a lost Ray worker's case is retried once,
then ends ``harness_error``.

The Ray tests share one local Ray (``ray.init(num_cpus=2)``) for the module and skip, saying why, where Ray is
not installed (``pip install 'diageval[ray]'``) or cannot start here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_fakes import FakeEvidence, make_case, make_case_set, write_bundle

from diageval.hosting import ExecutorSpec, HostPolicy, SandboxUnavailable, sandbox_problem
from diageval.hosting.executors.bundle_transfer import TransferDamaged, pack_bundle, unpack_bundle
from diageval.hosting.executors.ray_pool import _Pool, check_opened
from diageval.hosting.executors.remote_slot import RemoteSlot
from diageval.hosting.executors.tasks import DiagnoseTask, HarnessFailure
from diageval.run.pipeline import RunOptions, run_diagnoser
from diageval.run.store import RunStore

TESTS = Path(__file__).parent
SCRIPT = {"e1-ok": "ok", "e2-crash": "crash", "e3-bad": "bad", "e4-print": "print", "e5-exit": "exit", "e6-ok": "ok"}


def _run(spec, case_set, tmp_path, evidence, *, executor="local", run_id, sandbox=True, pass_env=(), jobs=2):
    options = RunOptions(cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs", run_id=run_id, jobs=jobs, seed=7,
                         executor=executor)
    policy = HostPolicy(sandbox=sandbox, timeout_s=30.0, pass_env=pass_env)
    return run_diagnoser(spec, case_set, options, policy, evidence_fn=evidence, cuda_device_count=lambda: 0, progress=None)


def _results(run_dir: Path) -> dict[str, dict]:
    """Every result as saved, less the diagnoser's wall time, with the run folder its errors name as RUN."""
    return {r.case_id: json.loads(r.model_dump_json(exclude={"seconds"}).replace(str(run_dir), "RUN"))
            for r in RunStore(run_dir).read_results()}


def _untimed(summary: object) -> object:
    """A summary less its one timing metric (``seconds_per_case``, wherever it appears)."""
    if isinstance(summary, dict):
        return {k: _untimed(v) for k, v in summary.items() if k != "seconds_per_case"}
    if isinstance(summary, list):
        return [_untimed(v) for v in summary]
    return summary


# --- without Ray --------------------------------------------------------------------------------------


def test_executor_spec_parses_local_ray_and_an_address():
    assert ExecutorSpec.parse("local") == ExecutorSpec()
    assert ExecutorSpec.parse("ray") == ExecutorSpec(kind="ray")
    assert ExecutorSpec.parse("ray:10.0.0.5:6379") == ExecutorSpec(kind="ray", address="10.0.0.5:6379")
    assert str(ExecutorSpec.parse("ray:ray://head:10001")) == "ray:ray://head:10001"
    for bad in ("dask", "local:x", "ray:", ""):
        with pytest.raises(ValueError, match="executor"):
            ExecutorSpec.parse(bad)
    assert RunOptions(executor="ray:auto").executor.address == "auto"
    from click.testing import CliRunner

    from diageval.cli import main

    result = CliRunner().invoke(main, ["run", "--diagnoser", "null", "--executor", "dask"])
    assert result.exit_code == 2 and "--executor: executor 'dask': expected local, ray or ray:ADDRESS" in result.output


def test_a_bundle_travels_by_its_key_and_is_checked_on_arrival(tmp_path):
    import hashlib

    bundle = write_bundle(tmp_path / "b", "opaque")
    key = hashlib.sha256((bundle / "bundle.json").read_bytes()).hexdigest()
    packed = pack_bundle(bundle)
    assert set(packed) == {"bundle.json", "rank0/trace.json.gz", "steps.jsonl", "logs/rank0.log"}
    out = unpack_bundle(packed, key, tmp_path / "arrived")
    assert (out / "steps.jsonl").read_bytes() == (bundle / "steps.jsonl").read_bytes()
    with pytest.raises(TransferDamaged, match="another sha256"):
        unpack_bundle({**packed, "bundle.json": packed["bundle.json"] + b" "}, key, tmp_path / "a2")
    with pytest.raises(TransferDamaged, match="outside the bundle"):
        unpack_bundle({**packed, "../escape": b"x"}, key, tmp_path / "a3")
    (bundle / "steps.jsonl").unlink()  # a listed file gone from the cache travels as missing
    assert "steps.jsonl" not in pack_bundle(bundle)


def test_a_node_without_a_sandbox_refuses_as_this_machine_does(monkeypatch):
    import diageval.hosting.sandbox as sandbox

    monkeypatch.setattr(sandbox, "probe", lambda: "bwrap is not installed")
    reply = RemoteSlot().open("null", HostPolicy().model_dump_json(), [], None)
    assert reply["ok"] is False and reply["type"] == "SandboxUnavailable"
    with pytest.raises(SandboxUnavailable, match=r"on Ray node .*no sandbox can start here: bwrap is not installed"):
        check_opened(reply, host=None)


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")
def test_a_remote_slot_diagnoses_in_its_box_and_names_a_changed_file_as_a_local_slot(tmp_path):
    import hashlib

    bundle = write_bundle(tmp_path / "cache" / "0123abcd", "0123abcd")
    key = hashlib.sha256((bundle / "bundle.json").read_bytes()).hexdigest()
    slot = RemoteSlot()
    reply = slot.open("null", HostPolicy(timeout_s=30.0).model_dump_json(), [], None)
    try:
        assert reply["ok"] and reply["isolation"] == "bwrap", reply
        task = DiagnoseTask(bundle, key, "f" * 32, tmp_path / "case")
        answer = slot.diagnose(pack_bundle(bundle), key, task.bundle_id)
        assert _Pool._outcome(task, answer).status == "ok"
        damaged = pack_bundle(bundle)
        damaged["rank0/trace.json.gz"] += b"\0"
        outcome = _Pool._outcome(task, slot.diagnose(damaged, key, task.bundle_id))
    finally:
        slot.close()
    assert outcome == HarnessFailure(f"bundle {bundle}: rank0/trace.json.gz: size or sha256 differs from bundle.json "
                                     "(the cached file was changed)", bundle_damaged=True)


# --- on a local Ray -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="--executor ray needs ray: pip install 'diageval[ray]'")
    if not ray.is_initialized():
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # its agents must start within the raylet's 15 s window: a loaded machine misses it
            pytest.skip(f"a local Ray could not start here: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    yield ray
    ray.shutdown()


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")
def test_ray_gives_the_results_local_gives(tmp_path, local_ray):
    case_set = make_case_set([make_case(c) for c in SCRIPT] + [make_case("e7-healthy", expect="healthy")])
    evidence = FakeEvidence(tmp_path / "bundles", log_text=SCRIPT)
    here = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, evidence, run_id="local")
    there = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, evidence, executor="ray", run_id="ray")
    assert there.info.isolation == "bwrap" and there.info.env.model_dump()["executor"] == "ray"
    assert _results(there.run_dir) == _results(here.run_dir)
    assert {c: r["status"] for c, r in _results(there.run_dir).items()} == {
        "e1-ok": "ok", "e2-crash": "diagnoser_error", "e3-bad": "invalid_output", "e4-print": "ok",
        "e5-exit": "diagnoser_error", "e6-ok": "ok", "e7-healthy": "ok"}
    assert _untimed(there.summary.model_dump()) == _untimed(here.summary.model_dump())
    kept = RunStore(there.run_dir).case_dir("e4-print") / "stdout.txt"
    assert kept.read_text() == "hello from the diagnoser\n"  # what the diagnoser printed comes back to the run folder


def test_a_lost_worker_is_retried_once_then_the_case_is_a_harness_error(tmp_path, local_ray):
    markers = tmp_path / "markers"  # the diagnoser kills its Ray worker, unsandboxed (a box has its own PIDs)
    markers.mkdir()
    script = {"l1-lost-once": f"kill-worker-once {markers}", "l2-lost-twice": f"kill-worker {markers}", "l3-fine": "ok"}
    case_set = make_case_set([make_case(c) for c in script])
    out = _run("lost_worker_diagnoser:LostWorkerDiagnoser", case_set, tmp_path, FakeEvidence(tmp_path / "b", log_text=script),
               executor="ray", run_id="lost", sandbox=False)
    results = {r.case_id: r for r in RunStore(out.run_dir).read_results()}
    assert {c: r.status for c, r in results.items()} == {"l1-lost-once": "ok", "l2-lost-twice": "harness_error", "l3-fine": "ok"}
    assert "the Ray worker diagnosing it was lost" in results["l2-lost-twice"].error and "twice" in results["l2-lost-twice"].error
    assert out.info.status == "complete"
