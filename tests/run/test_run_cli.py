"""The CLI shells: `diageval diagnosers list`, `diageval diagnose`, `diageval run` (fake evidence)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from run_fakes import FakeEvidence, copy_real_cases, write_bundle

from diageval.cli import main
from locations import TESTS

REAL_CASES = ["healthy/mlp-ddp-healthy.yaml", "input/starved-loader-mlp.yaml"]


@pytest.fixture
def cases_dir(tmp_path) -> Path:
    """Two real case files (valid against the real registries) in a folder of their own."""
    return copy_real_cases(tmp_path / "cases", REAL_CASES)


def test_diagnosers_list_shows_the_built_ins_in_100_columns_with_their_kind():
    """Issue 44 item 7: the list fits 100 columns (it printed ~450) and says what each diagnoser is; the
    causes one can claim moved to `diagnosers show`."""
    out = CliRunner().invoke(main, ["diagnosers", "list"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert lines[0].split() == ["name", "version", "kind", "origin", "status"]
    kinds = {line.split()[0]: line for line in lines[2:] if line.strip() and not line.startswith(("What", "Also"))}
    for name, kind in (("null", "reference"), ("prior", "reference"), ("oracle", "self-test"), ("rules", "offline"),
                       ("llm", "network"), ("traceml", "in-job monitor"), ("nvrx-straggler", "in-job monitor")):
        assert f"  {kind}  " in kinds[name], (name, kinds[name])
    assert "available" in kinds["null"] and "compute.straggler_rank" not in out.output


def test_a_long_row_is_cut_to_fit(monkeypatch):
    """A plugin's long name, version and error are cut with "…" (and shown whole by `show`)."""
    row = {"name": "plugin-" + "n" * 60, "version": "v" * 80, "origin": "plugin some-dist 1.0", "self_test": False,
           "reference": False, "error": "ImportError: " + "e" * 300, "claims": None, "needs_network": False}
    monkeypatch.setattr("diageval.cli._listed", lambda: [row])
    out = CliRunner().invoke(main, ["diagnosers", "list"])
    assert out.exit_code == 0 and max(len(line) for line in out.output.splitlines()) <= 100, out.output
    assert "…" in out.output and "offline" in out.output
    out = CliRunner().invoke(main, ["diagnosers", "show", row["name"]])
    assert out.exit_code == 0 and row["error"] in out.output and row["version"] in out.output
    assert "not declared: it may claim any cause" in out.output


def test_diagnosers_show_lists_what_one_can_claim():
    out = CliRunner().invoke(main, ["diagnosers", "show", "rules"])
    assert out.exit_code == 0, out.output
    assert re.search(r"^kind +offline: ", out.output, re.M) and re.search(r"^claims +\d+ cause\(s\) it can claim", out.output, re.M)
    assert "  compute.straggler_rank" in out.output.splitlines()
    out = CliRunner().invoke(main, ["diagnosers", "show", "rulez"])
    assert out.exit_code == 1 and "did you mean rules?" in out.output


def test_diagnose_prints_findings_or_a_clear_error(tmp_path, cases_dir):
    bundle = write_bundle(tmp_path / "b", "0f3a")
    runner = CliRunner()
    out = runner.invoke(main, ["diagnose", "-d", "null", str(bundle)])
    assert out.exit_code == 0 and "no findings" in out.output
    out = runner.invoke(main, ["diagnose", "-d", "prior", "--cases", str(cases_dir), str(bundle)])
    assert out.exit_code == 0 and "input.dataloader_starvation" in out.output and "confidence 1.00" in out.output
    out = runner.invoke(main, ["diagnose", "-d", "nul", str(bundle)])
    assert out.exit_code == 1 and "Did you mean null" in out.output
    cmd = f"cmd:{sys.executable} {TESTS / 'fake_cmd_diagnoser.py'} {{bundle}} {{out}}"
    out = runner.invoke(main, ["diagnose", "-d", cmd, "--json", str(bundle)])
    assert out.exit_code == 0 and json.loads(out.stdout)["findings"][0]["category"] == "compute.straggler_rank"
    (bundle / "logs" / "rank0.log").write_text("crash\n")  # changed behind bundle.json's back: refused
    out = runner.invoke(main, ["diagnose", "-d", cmd, str(bundle)])
    assert out.exit_code == 1 and "logs/rank0.log: size or sha256 differs from bundle.json" in out.output
    write_bundle(tmp_path / "c", "0f3c", log_text="crash\n")
    out = runner.invoke(main, ["diagnose", "-d", cmd, str(tmp_path / "c")])
    assert out.exit_code == 1 and "diagnoser_error: exited with status 2" in out.output


def test_run_prints_the_headline_and_resumes(tmp_path, cases_dir, monkeypatch):
    fake = FakeEvidence(tmp_path / "bundles")  # the run prepares with prepare_evidence (the --data in its policy): stand in
    monkeypatch.setattr("diageval.run.pipeline.prepare_evidence", fake)  # the name the pipeline holds (from the face)
    args = ["run", "-d", "oracle", "--cases", str(cases_dir), "--out", str(tmp_path / "runs"), "--timeout", "30"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "(complete)" in out.output and re.search(r"^  recall +1\.00 ", out.output, re.M)
    # the oracle: the headline's top; two perfect cases cannot pin the interval's lower end (the small-sample floor)
    assert re.search(r"^  skill +1\.00 \[-?\d+\.\d\d, 1\.00\] n=2$", out.output, re.M)
    assert "diagnose [2/2]" in out.stderr
    assert sorted(fake.calls) == ["mlp-ddp-healthy", "starved-loader-mlp"]  # not the home's cached recordings
    run_dirs = list((tmp_path / "runs").iterdir())
    assert len(run_dirs) == 1 and run_dirs[0].name.startswith("oracle-")
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and "2 already done" in again.output


def test_run_rejects_unknown_cases_and_diagnosers(tmp_path, cases_dir):
    out = CliRunner().invoke(main, ["run", "-d", "null", "--cases", str(cases_dir), "--case", "starved-loader-ml"])
    assert out.exit_code == 1 and "did you mean starved-loader-mlp" in out.output
    out = CliRunner().invoke(main, ["run", "-d", "orcale", "--cases", str(cases_dir)])
    assert out.exit_code == 1 and "Did you mean oracle" in out.output


def test_diagnose_imports_a_module_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "my_local_diag.py").write_text(
        "from diageval.diagnosis import Diagnosis, Finding\n"
        "class D:\n    name = 'mine'\n    version = '0.1'\n"
        "    def diagnose(self, bundle):\n"
        "        return Diagnosis(findings=[Finding(category='host.cpu_contention', confidence=0.4)])\n"
    )
    bundle = write_bundle(tmp_path / "b", "0f3b")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    out = CliRunner().invoke(main, ["diagnose", "-d", "my_local_diag:D", str(bundle)])
    assert out.exit_code == 0, out.output
    assert "host.cpu_contention" in out.output
