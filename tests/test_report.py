"""The markdown leaderboard and `diageval report`: ranking, marks, cells, refusals, files written."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from scoring_helpers import LOADER, STALL, STRAGGLER, cause, diag, make_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.cli import main
from diageval.reports.leaderboard import LeaderboardError, format_metric, render_leaderboard
from diageval.reports.report import ReportError, report_runs
from diageval.scoring.metrics import MetricValue
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case

TAX = load_taxonomy()
CASES = [make_case("p1", [{"category": STRAGGLER, "ranks": [1]}]), make_case("p2", [{"category": LOADER}]),
         make_case("h1")]


def run_summary(name, diagnoses, *, reference=False, self_test=False, case_set="feedc0de" * 8, taxonomy="1.0"):
    results = [score_case(c, d, taxonomy=TAX, seconds=1.0) for c, d in zip(CASES, diagnoses)]
    info = DiagnoserInfo(spec=name, name=name, version="1", reference=reference, self_test=self_test)
    return summarize(results, diagnoser=info, case_set_hash=case_set, taxonomy_version=taxonomy, n_boot=200)


GOOD = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(cause(LOADER, 0.8)), diag()]             # F1 1
NOISY = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(cause(LOADER, 0.8)), diag(cause(STALL))]  # F1 0.8, a false alarm
HALF = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(), diag()]                                 # P 1, R 0.5: F1 2/3
NOTHING = [diag(), diag(), diag()]                                                              # F1 undefined


def table_rows(markdown):
    lines = markdown.split("### Recall by cause")[0].splitlines()
    return [line for line in lines if line.startswith("| ") and not line.startswith("| #")]


def test_rows_ranked_by_f1_then_misleading_self_test_unranked():
    md = render_leaderboard([
        run_summary("null", NOTHING, reference=True),
        run_summary("oracle", GOOD, reference=True, self_test=True),
        run_summary("half", HALF),
        run_summary("noisy", NOISY),
        run_summary("good", GOOD),
    ])
    rows = table_rows(md)
    assert [r.split(" | ")[0:2] for r in rows] == [
        ["| 1", "**good 1**"], ["| 2", "**noisy 1**"], ["| 3", "**half 1**"],
        ["| 4", "null 1 *(reference)*"], ["| –", "oracle 1 *(self-test, reference)*"],
    ]
    assert "1.00 [1.00, 1.00] n=3" in rows[0]          # good's F1 over 3 scored cases
    assert "– n=0" in rows[3]                          # null claims nothing: precision undefined
    assert "3 cases" in md and "`feedc0defeed`" in md and "taxonomy 1.0" in md
    assert "compute.straggler_rank" in md.split("### Recall by cause")[1]


def test_equal_f1_broken_by_misleading_rate():
    # both find 1 of 2 causes with one right claim; "wrong" also makes a wrong claim: P 1/2 -> F1 1/2
    a = run_summary("wrong", [diag(cause(STRAGGLER, 0.9, ranks=[1]), cause(STALL, 0.1)), diag(), diag()])
    b = run_summary("silent", [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(cause(STALL, 0.5)), diag()])
    assert a.metrics.f1.value == b.metrics.f1.value == pytest.approx(0.5)
    assert a.metrics.misleading_rate.value == b.metrics.misleading_rate.value  # 1/2 each: name decides
    c = run_summary("careful", [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(), diag()])
    rows = table_rows(render_leaderboard([a, b, c]))
    assert [r.split(" | ")[1] for r in rows] == ["**careful 1**", "**silent 1**", "**wrong 1**"]


def test_format_metric():
    assert format_metric(MetricValue(value=0.5, ci=(0.25, 0.75), n=4)) == "0.50 [0.25, 0.75] n=4"
    assert format_metric(MetricValue(value=None, ci=None, n=0)) == "– n=0"


@pytest.mark.parametrize("kw, field", [({"case_set": "0" * 64}, "case-set hash"), ({"taxonomy": "2.0"}, "taxonomy version")])
def test_refuses_runs_on_different_case_sets(kw, field):
    with pytest.raises(LeaderboardError, match=field):
        render_leaderboard([run_summary("good", GOOD), run_summary("null", NOTHING, **kw)])


def test_refuses_nothing():
    with pytest.raises(LeaderboardError):
        render_leaderboard([])


def write_run(tmp_path, name, summary):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(summary.model_dump_json(indent=2))
    return d


def test_report_command_prints_writes_and_appends_step_summary(tmp_path, monkeypatch):
    runs = [write_run(tmp_path, "a", run_summary("good", GOOD)), write_run(tmp_path, "b", run_summary("null", NOTHING))]
    step = tmp_path / "step.md"
    step.write_text("earlier\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    out = tmp_path / "board.md"
    res = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "**good 1**" in res.output
    assert out.read_text() == res.output
    assert step.read_text() == "earlier\n" + res.output + "\n"


def test_report_errors_name_the_run(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportError, match="empty: no summary.json"):
        report_runs([empty])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(ReportError, match="summary.json: not a diageval summary: diagnoser: Field required"):
        report_runs([bad])
    a = write_run(tmp_path, "a", run_summary("good", GOOD))
    b = write_run(tmp_path, "b", run_summary("null", NOTHING, case_set="1" * 64))
    res = CliRunner().invoke(main, ["report", str(a), str(b)])
    assert res.exit_code == 1 and "case-set hash differs" in res.output
