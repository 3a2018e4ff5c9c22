"""Hostile input and a hostile diagnoser's output (issue 8: bounded input, clear errors, integrity):
each ends in a one-line error naming the file and the field, with nothing lost."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from locations import REPO
from run_fakes import FakeEvidence, make_case, make_case_set
from tests.cases.test_case_validation import HEALTHY  # the one minimal valid case file of the tests

from diageval.cli import main
from diageval.diagnosis import DiagnosisLimits
from diageval.run.grade import RescoreError, rescore_run
from run_fakes import run_with
from diageval.run.store import RunFolderLocked, RunReadError, RunStore


def validate(*paths):
    return CliRunner().invoke(main, ["cases", "validate", *map(str, paths)])


# --- case files ------------------------------------------------------------------------------------


def test_a_key_given_twice_is_refused_not_overwritten(tmp_path):
    text = yaml.safe_dump(HEALTHY, sort_keys=False)
    text += "labels: {causes: [], symptoms: [], expect: healthy}\n"  # a second labels: would silently win
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    result = validate(path)
    assert result.exit_code == 1
    assert f"{path}" in result.output and "duplicate key 'labels'" in result.output and "first at line" in result.output


def test_invalid_utf8_and_deep_nesting_are_errors_naming_the_file(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(yaml.safe_dump(HEALTHY).encode() + b"# caf\xe9\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("id: x\ntitle: " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = validate(bad, deep)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{bad}: <file>: not UTF-8 at line" in result.output
    assert f"{deep}: <file>: nested too deeply" in result.output


def test_run_on_a_corpus_with_an_invalid_utf8_case_exits_with_one_line_per_problem(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "taxonomy.yaml").write_bytes((REPO / "cases" / "taxonomy.yaml").read_bytes())
    (cases / "bad.yaml").write_bytes(b"id: caf\xe9\n")
    result = CliRunner().invoke(main, ["run", "--diagnoser", "null", "--cases", str(cases), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{cases / 'bad.yaml'}: <file>: not UTF-8 at line 1" in result.output


# --- what a diagnoser returns ----------------------------------------------------------------------

EMIT = r"""
import json, sys
what, out = sys.argv[1], sys.argv[2]
if what == "big":
    data = json.dumps({"findings": [{"category": "compute.straggler_rank", "summary": "x" * 2_000_000}]})
elif what == "many":
    data = json.dumps({"findings": [{"category": "compute.straggler_rank"}] * 1001})
elif what == "deep":
    data = '{"findings": [{"category": "compute.straggler_rank", "evidence": ' + "[" * 100_000 + "]" * 100_000 + "}]}"
else:
    data = json.dumps({"findings": []})
open(out, "w").write(data)
"""


EMITTER_MODULE = """
class Emitter:
    '''The same over-sized diagnoses, from inside the worker.'''

    name = "emitter"
    version = "1"

    def diagnose(self, bundle):
        what = (bundle.root / "logs" / "rank0.log").read_text().split()[0]
        if what == "many":
            return {"findings": [{"category": "compute.straggler_rank"}] * 1001}
        if what == "big":
            return {"findings": [{"category": "compute.straggler_rank", "summary": "x" * 2_000_000}]}
        return {"findings": []}
"""


@pytest.mark.parametrize("kind", ["cmd", "in_process"])
def test_diagnoses_over_the_limits_are_invalid_output_with_the_reason(tmp_path, kind, monkeypatch):
    script = {"e1-big": "big", "e2-many": "many", "e3-deep": "deep", "e4-fine": "fine"}
    if kind == "cmd":
        emit = tmp_path / "emit.py"
        emit.write_text(EMIT)
        spec = f"cmd:{sys.executable} {emit} $(head -c 5 {{bundle}}/logs/rank0.log) {{out}}"
    else:
        mod = tmp_path / "mods"
        mod.mkdir()
        (mod / "emitter_mod.py").write_text(EMITTER_MODULE)
        monkeypatch.syspath_prepend(str(mod))
        spec = "emitter_mod:Emitter"
        script.pop("e3-deep")  # a Python object cannot be nested that deep to begin with
    case_set = make_case_set([make_case(c) for c in script])
    out = run_with(spec, case_set, cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs", progress=None,
                        evidence_fn=FakeEvidence(tmp_path / "bundles", log_text=script), cuda_device_count=lambda: 0,
                        limits=DiagnosisLimits(max_bytes=1 << 20, max_findings=1000), timeout=60)
    rows = {r.case_id: r for r in RunStore(out.run_dir).read_results()}
    assert rows["e1-big"].status == "invalid_output" and "over the size limit of 1 MiB" in rows["e1-big"].error
    assert rows["e2-many"].status == "invalid_output" and "1001 findings, over the limit of 1000" in rows["e2-many"].error
    if "e3-deep" in rows:
        assert rows["e3-deep"].status == "invalid_output" and "nested too deeply" in rows["e3-deep"].error
    assert rows["e4-fine"].status == "ok"
    assert all(p.stat().st_size < (1 << 20) for p in out.run_dir.rglob("*") if p.is_file())  # nothing huge kept
    assert out.info.max_diagnosis_bytes == 1 << 20


# --- the run folder --------------------------------------------------------------------------------


def test_a_second_run_into_a_locked_folder_names_the_holder(tmp_path):
    case_set = make_case_set([make_case("l1")])
    store = RunStore(tmp_path / "runs" / "locked")
    with store.lock():
        with pytest.raises(RunFolderLocked, match=f"locked by pid {os.getpid()}"):
            run_with("null", case_set, cases_dir=tmp_path, out_dir=tmp_path / "runs", run_id="locked", progress=None,
                          evidence_fn=FakeEvidence(tmp_path / "bundles"), cuda_device_count=lambda: 0)
    out = run_with("null", case_set, cases_dir=tmp_path, out_dir=tmp_path / "runs", run_id="locked", progress=None,
                        evidence_fn=FakeEvidence(tmp_path / "bundles"), cuda_device_count=lambda: 0)
    assert out.info.status == "complete"


def test_a_torn_results_line_is_reported_then_set_aside_and_its_case_run_again(tmp_path):
    case_set = make_case_set([make_case("t1"), make_case("t2")])
    kw = dict(cases_dir=tmp_path, out_dir=tmp_path / "runs", run_id="torn", progress=None,
              evidence_fn=FakeEvidence(tmp_path / "bundles"), cuda_device_count=lambda: 0)
    out = run_with("null", case_set, **kw)
    store = RunStore(out.run_dir)
    lines = store.results_path.read_text().splitlines(keepends=True)
    store.results_path.write_text(lines[0] + lines[1][:40])  # killed mid-append
    with pytest.raises(RunReadError, match=r"results.jsonl: line 2 is torn"):
        store.read_results()
    with pytest.raises(RescoreError, match=r"results.jsonl: line 2 is torn"):  # `diageval score` says the same
        rescore_run(out.run_dir, case_set=case_set)
    out = run_with("null", case_set, **kw)
    assert sorted(r.case_id for r in store.read_results()) == ["t1", "t2"]
    assert (out.run_dir / "results.jsonl.torn-1").read_text() == lines[1][:40] + "\n"


def test_run_json_and_the_summary_say_what_isolation_the_run_had(tmp_path):
    case_set = make_case_set([make_case("i1")])
    out = run_with("null", case_set, cases_dir=tmp_path, out_dir=tmp_path / "runs", progress=None, isolation="none",
                        evidence_fn=FakeEvidence(tmp_path / "bundles"), cuda_device_count=lambda: 0)
    info = json.loads((out.run_dir / "run.json").read_text())
    assert info["isolation"] == "none" and info["isolation_note"] == "turned off for this run (--no-sandbox)"
    assert "processes" in info["box_limits"] and "memory" in info["box_limits"]
    assert json.loads((out.run_dir / "summary.json").read_text())["diagnoser"]["isolation"] == "none"


# --- the cached bundle ------------------------------------------------------------------------------


def test_a_changed_cached_bundle_is_a_harness_error_naming_the_file_and_is_recorded_again(tmp_path):
    case_set = make_case_set([make_case("c1"), make_case("c2")])
    evidence = FakeEvidence(tmp_path / "bundles")
    for lc in case_set.cases:
        evidence(lc)
    damaged = tmp_path / "bundles" / FakeEvidence.bundle_id("c2") / "steps.jsonl"
    damaged.write_text(damaged.read_text() + '{"rank": 0, "step": 99, "t_start": 0, "t_end": 1}\n')
    recorded: list[tuple[str, bool]] = []

    class Recording(FakeEvidence):
        def __call__(self, loaded, policy):
            recorded.append((loaded.case.id, policy.force))
            if policy.force:  # a real recording replaces the folder
                import shutil

                shutil.rmtree(self.root / self.bundle_id(loaded.case.id))
            return super().__call__(loaded, policy)

    kw = dict(cases_dir=tmp_path, out_dir=tmp_path / "runs", run_id="damaged", progress=None,
              evidence_fn=Recording(tmp_path / "bundles"), cuda_device_count=lambda: 0)
    out = run_with("null", case_set, **kw)
    rows = {r.case_id: r for r in RunStore(out.run_dir).read_results()}
    assert rows["c1"].status == "ok"
    assert rows["c2"].status == "harness_error" and "steps.jsonl: size or sha256 differs from bundle.json" in rows["c2"].error
    assert ("c2", True) in recorded  # the cache entry was recorded again
    out = run_with("null", case_set, **kw)  # resuming retries the harness error, on the fresh bundle
    assert {r.case_id: r.status for r in RunStore(out.run_dir).read_results()} == {"c1": "ok", "c2": "ok"}


def test_a_bundle_with_a_symlink_pointing_outside_is_refused(tmp_path):
    case_set = make_case_set([make_case("s1")])
    evidence = FakeEvidence(tmp_path / "bundles")
    folder = evidence(case_set.cases[0]).bundle_dir
    secret = tmp_path / "labels.txt"
    secret.write_text("compute.straggler_rank")
    log = folder / "logs" / "rank0.log"
    log.unlink()
    log.symlink_to(secret)
    out = run_with("null", case_set, cases_dir=tmp_path, out_dir=tmp_path / "runs", progress=None,
                        evidence_fn=evidence, cuda_device_count=lambda: 0)
    [row] = RunStore(out.run_dir).read_results()
    assert row.status == "harness_error" and "logs/rank0.log is a symlink" in row.error
