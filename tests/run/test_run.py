"""The run pipeline on fake evidence: statuses, resume, interrupts, isolation, rescoring."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from processes import alive
from run_fakes import FakeEvidence, make_case, make_case_set

from diageval.run.grade import RescoreError, rescore_run
from diageval.run.pipeline import RunError, diagnosis_order
from run_fakes import run_with
from diageval.run.store import RunFolderConflict, RunStore
from diageval.hosting.worker import WorkerStartError
from locations import TESTS

CMD = f"cmd:{sys.executable} {TESTS / 'fake_cmd_diagnoser.py'} {{bundle}} {{out}}"


def _run(spec, case_set, tmp_path, evidence, **kw):
    kw.setdefault("timeout", 2.0)
    kw.setdefault("pass_env", ("FAKE_DIAGNOSER_CALLS",))  # the fakes' call log: named, as the allowlist asks
    return run_with(
        spec, case_set, cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs",
        evidence_fn=evidence, progress=None, cuda_device_count=lambda: 0, **kw,
    )


def _statuses(run_dir: Path) -> dict[str, str]:
    return {r.case_id: r.status for r in RunStore(run_dir).read_results()}


@pytest.fixture
def calls(tmp_path, monkeypatch):
    """Every diagnose call of the fake diagnosers, as (pid, instruction) lines. The file lies outside any
    sandbox (and pids inside one are the box's own): tests that read it run with ``isolation="none"``."""
    path = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_DIAGNOSER_CALLS", str(path))

    def lines() -> list[list[str]]:
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def read() -> list[tuple[str, str]]:
        return [(pid, what) for pid, what, *_ in lines()]

    read.workers = lambda: {line[2] for line in lines() if len(line) > 2}  # the worker processes that hosted the calls
    return read


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_in_process_failures_become_statuses_and_the_run_goes_on(tmp_path, isolation):
    script = {"c1-ok": "ok", "c2-hang": "hang", "c3-after-hang": "ok", "c4-crash": "crash", "c5-exit": "exit",
              "c6-bad": "bad", "c7-print": "print"}
    case_set = make_case_set([make_case(c) for c in script] + [make_case("c8-healthy", expect="healthy")])
    evidence = FakeEvidence(tmp_path / "bundles", log_text=script)
    out = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, evidence, isolation=isolation)
    assert _statuses(out.run_dir) == {
        "c1-ok": "ok", "c2-hang": "timeout", "c3-after-hang": "ok", "c4-crash": "diagnoser_error",
        "c5-exit": "diagnoser_error", "c6-bad": "invalid_output", "c7-print": "ok", "c8-healthy": "ok",
    }
    assert out.info.status == "complete" and (out.run_dir / "summary.json").is_file()
    assert out.summary.counts.scored == 8
    store = RunStore(out.run_dir)
    errors = {r.case_id: r.error for r in store.read_results()}
    assert "ValueError: cannot parse this trace" in errors["c4-crash"]
    assert "died" in errors["c5-exit"] and "2" in errors["c2-hang"]
    assert "ValueError" in (store.case_dir("c4-crash") / "stderr.txt").read_text()
    assert (store.case_dir("c7-print") / "stdout.txt").read_text() == "hello from the diagnoser\n"
    assert not (store.case_dir("c1-ok") / "stdout.txt").exists()  # nothing printed, nothing kept
    assert json.loads(store.diagnosis_path("c1-ok").read_text())["findings"][0]["category"] == "compute.straggler_rank"
    assert not store.diagnosis_path("c2-hang").exists()


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_cmd_failures_become_statuses_and_output_is_kept(tmp_path, isolation):
    script = {"k1-ok": "ok", "k2-hang": "hang", "k3-crash": "crash", "k4-bad": "bad", "k5-invalid": "invalid", "k6-ok": "ok"}
    case_set = make_case_set([make_case(c) for c in script])
    out = _run(CMD, case_set, tmp_path, FakeEvidence(tmp_path / "bundles", log_text=script), jobs=2, isolation=isolation)
    assert _statuses(out.run_dir) == {
        "k1-ok": "ok", "k2-hang": "timeout", "k3-crash": "diagnoser_error", "k4-bad": "invalid_output",
        "k5-invalid": "invalid_output", "k6-ok": "ok",
    }
    store = RunStore(out.run_dir)
    assert "cannot parse" in (store.case_dir("k3-crash") / "stderr.txt").read_text()
    assert (store.case_dir("k1-ok") / "stdout.txt").read_text().startswith("reading ")
    assert "exited with status 2" in {r.case_id: r.error for r in store.read_results()}["k3-crash"]
    assert out.info.diagnoser.name == "cmd-fake_cmd_diagnoser"


def test_recording_failures_and_unmanifested_cases_are_never_blamed_on_the_diagnoser(tmp_path, calls):
    case_set = make_case_set([make_case("r1-broken"), make_case("r2-faint"), make_case("r3-fine")])
    evidence = FakeEvidence(tmp_path / "bundles", fail={"r1-broken"}, not_manifested={"r2-faint"})
    out = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, evidence, isolation="none")
    assert _statuses(out.run_dir) == {"r1-broken": "harness_error", "r2-faint": "invalid", "r3-fine": "ok"}
    faint = {r.case_id: r.error for r in RunStore(out.run_dir).read_results()}["r2-faint"]
    assert "ratio 1.8 against min_ratio 1.5 over 3 repeats" in faint  # a stand-in without the test's measurement
    assert len(calls()) == 1  # only r3-fine reached the diagnoser
    assert out.summary.counts.scored == 1

    # Resuming retries the harness error (often transient) and nothing else.
    evidence.fail.clear()
    evidence.calls.clear()
    out = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, evidence, isolation="none")
    assert evidence.calls == ["r1-broken"]
    assert _statuses(out.run_dir) == {"r1-broken": "ok", "r2-faint": "invalid", "r3-fine": "ok"}
    assert len(RunStore(out.run_dir).read_results()) == 3


def test_a_bundle_path_naming_the_case_is_a_harness_error(tmp_path):
    case_set = make_case_set([make_case("n1-case")])

    class Revealing(FakeEvidence):
        def __call__(self, loaded, policy):
            prepared = super().__call__(loaded, policy)
            target = self.root / f"bundle-of-{loaded.case.id}"
            if not target.exists():
                prepared.bundle_dir.rename(target)
            return prepared.model_copy(update={"bundle_dir": target})

    out = _run("null", case_set, tmp_path, Revealing(tmp_path / "bundles"))
    assert _statuses(out.run_dir) == {"n1-case": "harness_error"}


def test_rerunning_resumes_without_redoing_finished_cases(tmp_path, calls):
    case_set = make_case_set([make_case(f"s{i}") for i in range(5)])
    evidence = FakeEvidence(tmp_path / "bundles", log_text={f"s{i}": f"s{i}" for i in range(5)})  # names itself
    first = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, evidence, case_ids=["s0", "s3"], isolation="none")
    assert set(_statuses(first.run_dir)) == {"s0", "s3"}
    second = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, evidence, isolation="none")
    assert second.run_dir == first.run_dir and second.counts["resumed"] == 2
    diagnosed = [what for _, what in calls()]
    assert sorted(diagnosed) == [f"s{i}" for i in range(5)]  # each case diagnosed exactly once
    assert second.summary.counts.cases == 5


@pytest.mark.parametrize("spec", ["fake_diagnosers:ScriptedDiagnoser", CMD])
def test_a_killed_run_is_interrupted_consistently_and_resumes(tmp_path, calls, spec):
    """Ctrl-C a real `run` process while its diagnoser sleeps; then resume it here."""
    script = {"i1": "ok", "i2": "ok", "i3": "sleep 30", "i4": "ok"}
    # cases run in a seeded shuffle: take a seed that puts the sleeper third, after two quick cases
    seed = next(s for s in range(1000) if diagnosis_order(script, s)[2] == "i3")
    first_two = set(diagnosis_order(script, seed)[:2])
    runner = tmp_path / "runner.py"
    # A shell without job control (CI, nohup, `cmd &`) starts children with SIGINT ignored, and Python keeps
    # it ignored; restore what a terminal gives, so the SIGINT below acts as a Ctrl-C.
    runner.write_text(textwrap.dedent(f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(TESTS)!r})
        from pathlib import Path
        from run_fakes import FakeEvidence, make_case, make_case_set, run_with
        script = {script!r}
        case_set = make_case_set([make_case(c) for c in script])
        run_with({spec!r}, case_set, cases_dir=Path("cases"), isolation="none", seed={seed},
                      out_dir=Path({str(tmp_path / 'runs')!r}), run_id="killed", timeout=60,
                      evidence_fn=FakeEvidence(Path({str(tmp_path / 'bundles')!r}), log_text=script),
                      cuda_device_count=lambda: 0)
    """))
    proc = subprocess.Popen([sys.executable, str(runner)], stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "runs" / "killed"
    deadline = time.monotonic() + 60
    while len(RunStore(run_dir).read_results() if (run_dir / "results.jsonl").exists() else []) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else "too slow"
        time.sleep(0.05)
    time.sleep(0.3)  # let the worker start sleeping on i3
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "interrupted" in err
    store = RunStore(run_dir)
    assert store.read_info().status == "interrupted"
    assert set(_statuses(run_dir)) == first_two
    assert not store.diagnosis_path("i3").exists()
    before = len(calls())
    first_run_pids = {int(pid) for pid, _ in calls()} | {int(pid) for pid in calls.workers()}

    script["i3"] = "ok"  # fresh bundle folders (same bundle ids) whose logs no longer ask for a sleep
    case_set = make_case_set([make_case(c) for c in script])
    out = _run(spec, case_set, tmp_path, FakeEvidence(tmp_path / "bundles2", log_text=script), run_id="killed", timeout=60,
               isolation="none")
    assert out.counts["resumed"] == 2 and out.info.status == "complete"
    assert set(_statuses(run_dir)) == {"i1", "i2", "i3", "i4"}
    assert len(calls()) - before == 2  # only i3 and i4 were diagnosed again
    assert not [pid for pid in first_run_pids if alive(pid)], "diagnoser processes outlived the interrupted run"


def test_jobs_run_diagnoses_concurrently_in_separate_workers(tmp_path, calls):
    script = {f"j{i}": "sleep 0.3" for i in range(4)}
    case_set = make_case_set([make_case(c) for c in script])
    out = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, FakeEvidence(tmp_path / "bundles", log_text=script), jobs=2,
               isolation="none")
    assert set(_statuses(out.run_dir).values()) == {"ok"}
    assert len(calls.workers()) == 2  # each case in a child of its own, forked by one of the two workers


def test_a_folder_holding_another_run_is_refused(tmp_path):
    case_set = make_case_set([make_case("f1")])
    evidence = FakeEvidence(tmp_path / "bundles")
    _run("null", case_set, tmp_path, evidence, run_id="shared")
    with pytest.raises(RunFolderConflict, match="never mixed"):
        _run("prior", case_set, tmp_path, evidence, run_id="shared")


def test_cuda_cases_are_skipped_with_a_note_without_cuda(tmp_path):
    cuda = make_case("g1-gpu").model_copy(update={"requires": make_case("x").requires.model_copy(update={"device": "cuda"})})
    case_set = make_case_set([cuda, make_case("g2-cpu")])
    out = _run("null", case_set, tmp_path, FakeEvidence(tmp_path / "bundles"))
    assert set(_statuses(out.run_dir)) == {"g2-cpu"}
    assert [(s.case_id, s.reason) for s in out.info.skipped] == [("g1-gpu", "needs 2 CUDA device(s); this machine has 0")]
    with pytest.raises(RunError, match="no CUDA"):
        _run("null", case_set, tmp_path, FakeEvidence(tmp_path / "bundles"), device="cuda")
    # One GPU: every 2-rank case is skipped under --device cuda (one device per rank), none fails.
    out = run_with("null", case_set, cases_dir=tmp_path, out_dir=tmp_path / "runs1", device="cuda",
                        evidence_fn=FakeEvidence(tmp_path / "bundles"), progress=None, cuda_device_count=lambda: 1)
    assert sorted(s.case_id for s in out.info.skipped) == ["g1-gpu", "g2-cpu"] and out.results == []


def test_a_diagnoser_that_cannot_start_fails_the_run_clearly(tmp_path):
    case_set = make_case_set([make_case("u1")])
    evidence = FakeEvidence(tmp_path / "bundles")
    with pytest.raises(WorkerStartError, match="could not start: DiagnoserUnavailable: needs the optional package 'nothere'"):
        _run("fake_diagnosers:UnavailableDiagnoser", case_set, tmp_path, evidence, run_id="u")
    # resolved (in its sandbox) before anything else: nothing recorded, no run folder
    assert evidence.calls == [] and not (tmp_path / "runs" / "u").exists()


def test_oracle_scores_perfectly_and_leak_scores_like_null(tmp_path):
    case_set = make_case_set(
        [make_case("o1", ranks=[1]), make_case("o2", cause="input.dataloader_starvation", fault="slow_loader"),
         make_case("o3", expect="healthy"), make_case("o4", expect="abstain")]
    )
    evidence = FakeEvidence(tmp_path / "bundles")
    oracle = _run("oracle", case_set, tmp_path, evidence).summary.metrics
    assert (oracle.recall.value, oracle.precision.value, oracle.misleading_rate.value) == (1.0, 1.0, 0.0)
    assert oracle.abstention_recall.value == oracle.abstention_precision.value == 1.0
    assert (oracle.skill.value, oracle.skill_ranked.value) == (1.0, 1.0)
    leak = _run("leak", case_set, tmp_path, evidence).summary.metrics
    null = _run("null", case_set, tmp_path, evidence).summary.metrics
    assert leak.recall.value == null.recall.value == 0.0


def test_a_regression_is_scored_in_the_value_words_its_bundle_showed(tmp_path):
    """Issue 39 item 2: a regression bundle shows drawn value words (the map comes with the prepared evidence, from
    the truth record). The oracle is handed the map and names the drawn word: perfect; the result line keeps the
    map, so re-scoring judges the saved diagnosis in the same words."""
    from tests.cases.test_fleet_cases import two_factor_regression

    from diageval.cases.model import Case

    case = Case.model_validate(two_factor_regression(id="reg-drawn"))
    shown = {"loader_workers=2": "7", "loader_workers=4": "1", "version=v2.5.0": "v3.8.6", "version=v2.5.1": "v0.4.9"}
    fake = FakeEvidence(tmp_path / "bundles")

    def evidence(loaded, policy):
        return fake(loaded, policy).model_copy(update={"shown_values": shown})

    case_set = make_case_set([case, make_case("plain")])
    out = _run("oracle", case_set, tmp_path, evidence)
    m = out.summary.metrics
    assert (m.skill.value, m.factor_precision.value, m.factor_recall.value) == (1.0, 1.0, 1.0)
    store = RunStore(out.run_dir)
    [line] = [r for r in store.read_results() if r.case_id == "reg-drawn"]
    assert line.shown_values == shown
    assert json.loads(store.diagnosis_path("reg-drawn").read_text())["findings"][0]["factor"] == \
        {"name": "loader_workers", "value": "7"}
    before = store.read_results()
    rescore_run(out.run_dir, case_set=case_set)
    assert store.read_results() == before


def test_rescoring_reproduces_the_results_and_refuses_changed_cases(tmp_path):
    case_set = make_case_set([make_case("q1"), make_case("q2", cause="input.dataloader_starvation"), make_case("q3", expect="healthy")])
    out = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, FakeEvidence(tmp_path / "bundles"))
    store = RunStore(out.run_dir)
    before = store.read_results()
    summary = rescore_run(out.run_dir, case_set=case_set)
    assert store.read_results() == before
    assert summary.model_dump() == out.summary.model_dump()

    changed = make_case_set([make_case("q1", cause="input.dataloader_starvation"), make_case("q2"), make_case("q3", expect="healthy")])
    with pytest.raises(RescoreError, match="case files changed"):
        rescore_run(out.run_dir, case_set=changed)

    manifest = store.read_info()
    store.write_info(manifest.model_copy(update={"status": "running"}))
    with pytest.raises(RescoreError, match="still marked running"):
        rescore_run(out.run_dir, case_set=case_set)


def test_rescoring_names_a_damaged_saved_diagnosis(tmp_path):
    case_set = make_case_set([make_case("d1"), make_case("d2")])
    out = _run("fake_diagnosers:ScriptedDiagnoser", case_set, tmp_path, FakeEvidence(tmp_path / "bundles"))
    damaged = RunStore(out.run_dir).diagnosis_path("d2")
    damaged.write_text('{"findings": [{"category": "compute.straggler_rank", "confidence": 7}]}')
    with pytest.raises(RescoreError, match=r"diagnosis.json: findings\[0\].confidence"):
        rescore_run(out.run_dir, case_set=case_set)


def test_a_diagnoser_that_needs_the_network_is_refused_without_allow_network(tmp_path):
    from diageval.hosting.registry import DiagnoserSpecError

    case_set = make_case_set([make_case("n1")])
    evidence = FakeEvidence(tmp_path / "bundles")
    with pytest.raises(DiagnoserSpecError, match="--allow-network"):
        _run("fake_diagnosers:NetworkDiagnoser", case_set, tmp_path, evidence, isolation="none")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # refused before anything ran
    out = _run("fake_diagnosers:NetworkDiagnoser", case_set, tmp_path, evidence, isolation="none", allow_network=True)
    assert _statuses(out.run_dir) == {"n1": "ok"}
    assert out.info.diagnoser.claims == ["input.dataloader_starvation"]  # the box's word reaches run.json
