"""`diageval score --case --diagnosis`: the verdicts printed with reasons, and clear errors on bad input."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from scoring_helpers import CHECKPOINT, LOADER, STALL, STRAGGLER, cause, diag, make_case, symptom

from diageval.cases.taxonomy import load_taxonomy
from diageval.cli import main
from diageval.diagnosis import DiagnosisParseError as DiagnosisFileError
from diageval.diagnosis import read_diagnosis_file as load_diagnosis_file
from diageval.paths import default_taxonomy_path
from diageval.scoring.explain import format_case_result
from diageval.scoring.results import EvidenceFacts
from diageval.scoring.verdicts import score_case

HEALTHY_CASE = """\
id: healthy-mlp
title: A healthy two-rank MLP
workload: {name: mlp_ddp, world_size: 2, steps: 20}
labels: {expect: healthy}
"""


@pytest.fixture
def corpus(tmp_path):
    d = tmp_path / "cases"
    (d / "controls").mkdir(parents=True)
    shutil.copy(default_taxonomy_path(), d / "taxonomy.yaml")
    (d / "controls" / "healthy-mlp.yaml").write_text(HEALTHY_CASE)
    return d


def write(tmp_path, obj, name="d.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_score_one_case_prints_verdicts_with_reasons(corpus, tmp_path):
    d = write(tmp_path, {"findings": [{"category": STALL, "confidence": 0.7}], "abstain": None})
    res = CliRunner().invoke(main, ["score", "--case", "healthy-mlp", "--diagnosis", str(d), "--cases", str(corpus)])
    assert res.exit_code == 0, res.output
    assert "#0 comm.collective_stall (confidence 0.70): false_alarm - the run is a healthy control" in res.output
    as_json = CliRunner().invoke(main, ["score", "--case", "healthy-mlp", "--diagnosis", str(d), "--cases", str(corpus), "--json"])
    assert json.loads(as_json.output)["verdicts"][0]["verdict"] == "false_alarm"


def test_score_bad_diagnosis_names_file_and_field(corpus, tmp_path):
    d = write(tmp_path, {"findings": [{"category": STALL, "confidence": 1.5}]})
    res = CliRunner().invoke(main, ["score", "--case", "healthy-mlp", "--diagnosis", str(d), "--cases", str(corpus)])
    assert res.exit_code == 1
    assert f"{d}: findings[0].confidence: Input should be less than or equal to 1 (got 1.5)" in res.output


def test_score_unknown_case_suggests_close_ids(corpus, tmp_path):
    d = write(tmp_path, {"findings": []})
    res = CliRunner().invoke(main, ["score", "--case", "healthy-mpl", "--diagnosis", str(d), "--cases", str(corpus)])
    assert res.exit_code == 1 and "did you mean healthy-mlp" in res.output


def test_score_needs_run_dir_or_case_and_diagnosis(tmp_path):
    res = CliRunner().invoke(main, ["score", "--case", "x"])
    assert res.exit_code == 2 and "--diagnosis" in res.output
    res = CliRunner().invoke(main, ["score", str(tmp_path), "--case", "x"])
    assert res.exit_code == 2 and "not both" in res.output


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON at line 1, column 2"),
    ('{"findings": [], "verdict": 1}', "verdict: unknown field"),
    ('{"findings": [{"confidence": 0.5}]}', "findings[0].category: Field required"),
    ('{"findings": [{"category": "a.b", "kind": "cause"}], "abstain": {"reason": "x"}}', "abstain: a diagnosis that abstains"),
])
def test_diagnosis_file_errors(tmp_path, text, message):
    with pytest.raises(DiagnosisFileError, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
        load_diagnosis_file(write(tmp_path, text))
    assert str(tmp_path / "d.json") in str(err.value)
    with pytest.raises(DiagnosisFileError, match="cannot read"):
        load_diagnosis_file(tmp_path / "missing.json")


def test_format_case_result_shows_every_verdict_and_outcome():
    tax = load_taxonomy()
    case = make_case("c1", [{"category": STRAGGLER, "ranks": [1]}, {"category": LOADER}])
    r = score_case(case, diag(cause(STRAGGLER, 0.8, ranks=[0], impact=0.2), cause(STALL, 0.6),
                              symptom("symptom.slow_step"), cause(CHECKPOINT, 0.3)), taxonomy=tax, evidence=EvidenceFacts(measured_impact=0.25))
    text = format_case_result(r)
    assert "#0 compute.straggler_rank ranks [0] (confidence 0.80): mislocated - " in text
    assert "#1 comm.collective_stall (confidence 0.60): wrong_cause - " in text
    assert "#3 checkpoint.blocking_save (confidence 0.30): hedge - confidence 0.30 < 0.5: states that" in text
    # one event per (cause, rank) in the rank-credited score: the rank claimed (0) and the rank labeled (1)
    assert "  rank compute.straggler_rank@0: stated 0.80, true 0, error 0.640 (rank-credited score only)" in text
    assert "  rank compute.straggler_rank@1: stated 0.00, true 1, error 1.000 (rank-credited score only)" in text
    assert "compute.straggler_rank ranks [1]: found, not localised - found by claim #0" in text
    assert "input.dataloader_starvation: missed - missed: no claim names input.dataloader_starvation" in text
    assert "symptoms observed (recorded, not scored): symptom.slow_step" in text
    assert "impact: claimed 0.20, measured 0.25" in text
    timeout = score_case(case, None, taxonomy=tax, status="timeout", error="no result after 60 s")
    assert "status timeout (no result after 60 s)" in format_case_result(timeout)


def test_score_one_case_prints_the_headline_loss(corpus, tmp_path):
    d = write(tmp_path, {"findings": [{"category": STALL, "confidence": 0.5}]})
    res = CliRunner().invoke(main, ["score", "--case", "healthy-mlp", "--diagnosis", str(d), "--cases", str(corpus)])
    assert res.exit_code == 0, res.output
    assert "headline loss S = 0.250 (with rank credit 0.250; null's S = 0;" in res.output
    assert "  cause comm.collective_stall: stated 0.50, true 0, error 0.250" in res.output


def _downgrade_to_scoring_1(run_dir):
    """Rewrite a run folder the way diageval before scoring 2 left it: no scoring_version, forecasts,
    stated impacts or claimed ranks in results.jsonl; summary.json at schema version 1."""
    results = run_dir / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    for row in rows:
        for key in ("scoring_version", "forecasts", "taxonomy_causes"):
            row.pop(key)
        for v in row["verdicts"]:
            v.pop("impact")
        for o in row["outcomes"]:
            o.pop("claimed_ranks")
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps(summary | {"schema_version": 1}))


def test_runs_scored_by_older_rules_are_refused_until_rescored(tmp_path):
    from run_fakes import FakeEvidence, make_case, make_case_set

    from diageval.reports.report import ReportError, report_runs
    from diageval.run.grade import rescore_run
    from run_fakes import run_with
    from diageval.run.store import RunReadError, RunStore

    case_set = make_case_set([make_case("q1"), make_case("q2", expect="healthy")])
    outcome = run_with("null", case_set, cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs",
                            evidence_fn=FakeEvidence(tmp_path / "bundles"), progress=None, cuda_device_count=lambda: 0,
                            timeout=5.0)
    run = outcome.run_dir
    before = json.loads((run / "summary.json").read_text())
    _downgrade_to_scoring_1(run)
    with pytest.raises(ReportError, match=r"summary.json: .*schema version 1.*re-score the run with `diageval score RUN_DIR`"):
        report_runs([run])
    with pytest.raises(RunReadError, match=r"result 1: .*no scoring_version.*re-score the run with `diageval score RUN_DIR`"):
        RunStore(run).load()  # what diageval compare reads
    summary = rescore_run(run, case_set=case_set)
    # one positive and one healthy case: R = 1 (1 - 1/2) = 0.5, null loses 1
    assert summary.schema_version == 4 and summary.metrics.skill.value == pytest.approx(1 - 1 / 0.5)
    assert json.loads((run / "summary.json").read_text()) == before
    assert "null" in report_runs([run])
    # scored by scoring 2 (skill against null, wrong-rank events folded): refused the same way
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    (run / "results.jsonl").write_text("".join(json.dumps(r | {"scoring_version": 2}) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps(before | {"schema_version": 2}))
    with pytest.raises(ReportError, match=r"schema version 2, this diageval reads 4.*diageval score RUN_DIR"):
        report_runs([run])
    with pytest.raises(RunReadError, match=r"result 1: .*scoring_version 2, this diageval reads 3 and 5.*diageval score RUN_DIR"):
        RunStore(run).load()
    assert rescore_run(run, case_set=case_set).schema_version == 4
