"""Executors (issue 26): ``local`` and ``ray`` give the same results; a bundle travels by its key and is checked
on arrival; a node without a sandbox refuses as this machine does; a lost Ray worker's case is retried once,
then ends ``harness_error``; recordings run on Ray one per node at a time, and what they record comes back to
this machine's cache, checked, with the truth kept only here.

The Ray tests share one local Ray (``ray.init(num_cpus=2)``, declaring one ``diageval_recorder``) for the module
and skip, saying why, where Ray is not installed (``pip install 'diageval[ray]'``) or cannot start here.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
from run_fakes import FakeEvidence, make_case, make_case_set, write_bundle

from diageval.executors import ExecutorSpec
from diageval.hosting import HostPolicy, SandboxUnavailable, sandbox_problem
from diageval.bundle.transfer import TransferDamaged, pack_bundle, receive_bundle, unpack_bundle
from diageval.executors.local_ray import start_local_ray
from diageval.executors.ray_pool import _Pool, check_opened
from diageval.executors.ray_recording import RecordingFailed, prepare_on_ray
from diageval.executors.recording_task import record_here
from diageval.executors.remote_slot import RemoteSlot
from diageval.executors.tasks import DiagnoseTask, HarnessFailure
from diageval.recording import PreparedEvidence, RecordingPolicy
from diageval.run.pipeline import RunOptions, run_diagnoser
from diageval.run.store import RunStore
from locations import TESTS

pytestmark = pytest.mark.slow  # a local Ray starts here (20-30 s) and replaces actors it loses
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


@dataclass(frozen=True)
class RecorderFake:
    """Stands in for ``prepare_evidence`` where a recording node runs it (so it is importable there: Ray's
    workers get this folder on their path): one opaque bundle per case under its repeat-0 cache key in the
    cache it is given (default ``home``'s), a truth record beside it, and in the bundle's ``recorded.json``
    where and when it was recorded (after ``pause_s`` of "recording"). A bundle already in the cache is used
    as it is. Positive cases get a manifested verification."""

    home: Path
    pause_s: float = 0.0
    fail: tuple[str, ...] = ()
    script: dict = field(default_factory=lambda: dict(SCRIPT))  # case id -> the fake diagnosers' instruction

    def __call__(self, loaded, policy=RecordingPolicy()):
        from diageval.recording.cache import bundles_root, cache_key, write_truth
        from diageval.recording.draw import recorded_as
        from diageval.recording.truth import TruthRecord, Verification

        cache = Path(policy.cache_dir) if policy.cache_dir else self.home / "bundles"
        case = loaded.case
        if case.id in self.fail:
            raise RuntimeError("the ranks did not start")
        key = cache_key(recorded_as(case, cache)[0], "cpu")  # the drawn variant, as prepare_evidence records it
        folder = bundles_root(cache) / key
        verification = None
        if case.labels.expect == "diagnose":
            verification = Verification(metric="step_time_median", min_ratio=1.2, injected=0.018, healthy=0.01, ratio=1.8,
                                        noise=0.05, repeats=3, manifested=True, impact=0.4)
        if not (folder / "bundle.json").is_file():
            started = time.time()
            time.sleep(self.pause_s)
            folder.mkdir(parents=True)
            (folder / "recorded.json").write_text(json.dumps({"node": socket.gethostname(), "pid": os.getpid(),
                                                               "started": started, "ended": time.time(), "cache": str(cache)}))
            write_bundle(folder, FakeEvidence.bundle_id(case.id), log_text=self.script.get(case.id, "ok") + "\n")
            write_truth(cache, TruthRecord(case_id=case.id, key=key, repeat=0, recorded=datetime.now(timezone.utc),
                                           verification=verification))
        return PreparedEvidence(case_id=case.id, bundle_dir=folder, bundle_id=FakeEvidence.bundle_id(case.id),
                                manifest_sha256=hashlib.sha256((folder / "bundle.json").read_bytes()).hexdigest(),
                                verification=verification)


def _distinct(cases: list) -> list:
    """The cases each logging at its own interval: each its own recording spec, so its own cache key (not the step
    count: a recording draws it, recording/draw.py, and two counts may draw the same one)."""
    return [c.model_copy(update={"workload": c.workload.model_copy(update={"params": {**c.workload.params, "log_every": 1 + i}})})
            for i, c in enumerate(cases)]


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


def test_a_bundle_kept_where_it_arrives_is_checked_file_by_file_first(tmp_path):
    bundle = write_bundle(tmp_path / "b", "opaque")
    key = hashlib.sha256((bundle / "bundle.json").read_bytes()).hexdigest()
    damaged = pack_bundle(bundle)
    damaged["steps.jsonl"] += b"\n"
    with pytest.raises(TransferDamaged, match="arrived damaged: steps.jsonl: size or sha256 differs"):
        receive_bundle(damaged, key, tmp_path / "cache" / "k1")
    assert list((tmp_path / "cache").iterdir()) == []  # nothing left behind
    assert receive_bundle(pack_bundle(bundle), key, tmp_path / "cache" / "k1") is True
    assert (tmp_path / "cache" / "k1" / "steps.jsonl").read_bytes() == (bundle / "steps.jsonl").read_bytes()
    other = write_bundle(tmp_path / "c", "other")
    other_key = hashlib.sha256((other / "bundle.json").read_bytes()).hexdigest()
    assert receive_bundle(pack_bundle(other), other_key, tmp_path / "cache" / "k1") is False  # the first arrival stays
    assert json.loads((tmp_path / "cache" / "k1" / "bundle.json").read_text())["bundle_id"] == "opaque"


def test_a_recorder_records_only_what_its_seeds_lack_and_keeps_nothing(tmp_path):
    from diageval.recording.cache import bundles_root, cache_key
    from diageval.recording.draw import cache_secret, recorded_as

    home = tmp_path / "home"
    fake = RecorderFake(home)
    cached, fresh = make_case_set([make_case("s1-cached"), make_case("s2-fresh", expect="healthy")]).cases
    fake(cached)  # in this machine's cache
    secret = cache_secret(home / "bundles")  # the recorder draws each case as this machine does
    key = cache_key(recorded_as(cached.case, home / "bundles")[0], "cpu")
    seed = pack_bundle(bundles_root(home / "bundles") / key)
    seeded = {key: (hashlib.sha256(seed["bundle.json"]).hexdigest(), seed)}
    truth = (home / "bundles" / f"{key}.truth.json").read_text()
    answer = record_here(fake, cached, RecordingPolicy(device="cpu"), seeded, {key: truth}, secret)
    assert answer["bundles"] == {} and answer["truths"] == []  # found in its seeds: nothing recorded, no truth changed
    assert answer["prepared"].bundle_dir == Path(key) and answer["prepared"].verification.manifested
    answer = record_here(fake, fresh, RecordingPolicy(device="cpu"), seeded, None, secret)
    [(new_key, (sha, packed))] = answer["bundles"].items()
    assert new_key == cache_key(recorded_as(fresh.case, home / "bundles")[0], "cpu") and sha == hashlib.sha256(packed["bundle.json"]).hexdigest()
    [truth] = answer["truths"]
    assert json.loads(truth)["case_id"] == "s2-fresh"
    assert not Path(json.loads(packed["recorded.json"])["cache"]).exists()  # the recorder's cache is gone
    assert answer["node"] == socket.gethostname() and answer["started"] <= answer["ended"]
    failed = record_here(RecorderFake(home, fail=("s2-fresh",)), fresh, RecordingPolicy(device="cpu"), {})
    assert failed["error"] == "RuntimeError: the ranks did not start" and "prepared" not in failed


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
    # The fakes are importable on Ray's workers through PYTHONPATH in the environment the node inherits: a job's
    # runtime_env would give its actors workers of their own, each started (~8 s here) when an actor asks
    # for one, where the node's prestarted workers serve them at once
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(Path(__file__).resolve().parent)]),
                   prepend=os.pathsep)  # the shared fakes, and this module's (RecorderFake)
        if not ray.is_initialized():
            try:
                start_local_ray(ray, num_cpus=2, log_to_driver=False)  # one recorder
            except Exception as exc:  # still possible: the node must register within 30 s, its ports may be taken
                pytest.skip(f"a local Ray could not start here: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        yield ray
        ray.shutdown()


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")
def test_ray_gives_the_results_local_gives(tmp_path, local_ray, monkeypatch):
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    case_set = make_case_set(_distinct([make_case(c) for c in SCRIPT] + [make_case("e7-healthy", expect="healthy")]))
    evidence = RecorderFake(tmp_path / "home")  # the ray run prepares every case on the recorder, from this cache
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


def test_a_lost_worker_is_retried_once_then_the_case_is_a_harness_error(tmp_path, local_ray, monkeypatch):
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    markers = tmp_path / "markers"  # the diagnoser kills its Ray worker, unsandboxed (a box has its own PIDs)
    markers.mkdir()
    script = {"l1-lost-once": f"kill-worker-once {markers}", "l2-lost-twice": f"kill-worker {markers}", "l3-fine": "ok"}
    case_set = make_case_set(_distinct([make_case(c) for c in script]))
    # one slot: each loss is replaced by a fresh actor (~8 s to start on a loaded box), and one slot needs the fewest
    out = _run("lost_worker_diagnoser:LostWorkerDiagnoser", case_set, tmp_path, RecorderFake(tmp_path / "home", script=script),
               executor="ray", run_id="lost", sandbox=False, jobs=1)
    results = {r.case_id: r for r in RunStore(out.run_dir).read_results()}
    assert {c: r.status for c, r in results.items()} == {"l1-lost-once": "ok", "l2-lost-twice": "harness_error", "l3-fine": "ok"}
    assert "the Ray worker diagnosing it was lost" in results["l2-lost-twice"].error and "twice" in results["l2-lost-twice"].error
    assert out.info.status == "complete"


def test_recordings_run_one_per_node_and_come_back_checked_with_their_truth_kept_here(tmp_path, local_ray):
    """Four recordings at once on a Ray of 2 CPUs and one recorder: each task reports when it held the node;
    no two overlap on a node. Each bundle and its truth end in this machine's cache; a failed one names its node."""
    from diageval.bundle.model import EvidenceBundle
    from diageval.recording.cache import read_truth

    home = tmp_path / "home"
    cases = make_case_set(_distinct([make_case(f"r{i}-live") for i in range(3)] + [make_case("r9-fails", expect="healthy")])).cases
    answers: dict[int, object] = {}
    prepare_on_ray(cases, RecorderFake(home, pause_s=0.5, fail=("r9-fails",)),
                   lambda i, answer, seconds: answers.setdefault(i, answer),
                   policy=RecordingPolicy(device="cpu", cache_dir=home / "bundles"), address=None)
    assert sorted(answers) == [0, 1, 2, 3]
    assert isinstance(answers[3], RecordingFailed)
    assert str(answers[3]) == f"on Ray node {socket.gethostname()}: RuntimeError: the ranks did not start"
    held: dict[str, list[tuple[float, float]]] = {}
    for i in range(3):
        prepared = answers[i]
        assert isinstance(prepared, PreparedEvidence) and prepared.bundle_dir.parent == home / "bundles" / "evidence"
        assert EvidenceBundle.open(prepared.bundle_dir).verify_checksums() == []
        assert read_truth(home / "bundles", prepared.bundle_dir.name).case_id == cases[i].case.id  # kept here
        where = json.loads((prepared.bundle_dir / "recorded.json").read_text())
        assert where["pid"] != os.getpid() and not Path(where["cache"]).exists()  # on a worker, its cache removed
        held.setdefault(where["node"], []).append((where["started"], where["ended"]))
    for spans in held.values():
        spans.sort()
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), spans
