"""The markdown leaderboard and `diageval report`: ranking, marks, cells, refusals, files written."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from scoring_helpers import LOADER, STALL, STRAGGLER, cause, diag, make_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.cli import main
from diageval.reports.leaderboard import LeaderboardError, format_metric, render_leaderboard
from diageval.reports.report import ReportError, check_baselines, report_runs
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


# skill = 1 - loss / 2 (null's loss: the two labeled causes)
GOOD = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(cause(LOADER, 0.8)), diag()]             # loss .05: .975
NOISY = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(cause(LOADER, 0.8)), diag(cause(STALL))]  # + .5^2: .85
HALF = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(), diag()]                                 # .01 + 1: .495
NOTHING = [diag(), diag(), diag()]                                                              # 0
SYMPTOMS = [diag(cause("symptom.long_collective", 0.9)), diag(cause("symptom.slow_step", 0.9)), diag()]  # -.81


def table_rows(markdown):
    lines = markdown.split("### Recall by cause")[0].splitlines()
    return [line for line in lines if line.startswith("| ") and not line.startswith("| #")]


def test_rows_ranked_by_skill_self_test_unranked_null_above_the_misleading():
    md = render_leaderboard([
        run_summary("null", NOTHING, reference=True),
        run_summary("oracle", GOOD, reference=True, self_test=True),
        run_summary("symptoms", SYMPTOMS, reference=True),
        run_summary("half", HALF),
        run_summary("noisy", NOISY),
        run_summary("good", GOOD),
    ])
    rows = table_rows(md)
    assert [r.split(" | ")[0:2] for r in rows] == [
        ["| 1", "**good 1**"], ["| 2", "**noisy 1**"], ["| 3", "**half 1**"],
        ["| 4", "null 1 *(reference)*"], ["| 5", "symptoms 1 *(reference)*"],
        ["| –", "oracle 1 *(self-test, reference)*"],
    ]
    header = next(line for line in md.splitlines() if line.startswith("| # |"))
    assert header.startswith("| # | diagnoser | scored | skill ↑ | skill (ranks) ↑ | F1 ↑ | precision ↑")
    assert "| 0.97 [" in rows[0] and "| -0.81 [" in rows[4]
    assert "| 0.00 [0.00, 0.00] n=3 |" in rows[3]     # null: skill exactly 0
    assert "– n=0" in rows[3]                          # null claims nothing: precision undefined
    assert "3 cases" in md and "`feedc0defeed`" in md and "taxonomy 1.0" in md
    assert "Ranked by skill then skill (ranks)" in md
    assert "compute.straggler_rank" in md.split("### Recall by cause")[1]
    assert "undefined (0 of 5 cases)" in md.split("### Detection limit by cause")[1]


def test_equal_skill_broken_by_rank_credit_then_name():
    exact = run_summary("exact", [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(), diag()])
    every = run_summary("every", [diag(cause(STRAGGLER, 0.9, ranks=[0, 1])), diag(), diag()])
    twin = run_summary("another", [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(), diag()])
    assert exact.metrics.skill.value == every.metrics.skill.value == twin.metrics.skill.value
    assert every.metrics.skill_ranked.value < exact.metrics.skill_ranked.value
    rows = table_rows(render_leaderboard([every, exact, twin]))
    assert [r.split(" | ")[1] for r in rows] == ["**another 1**", "**exact 1**", "**every 1**"]


def test_a_run_without_sandbox_is_marked():
    boxed = run_summary("boxed", GOOD)
    open_ = run_summary("open", GOOD)
    open_ = open_.model_copy(update={"diagnoser": open_.diagnoser.model_copy(update={"isolation": "none"})})
    rows = table_rows(render_leaderboard([boxed, open_]))
    assert [r.split(" | ")[1] for r in rows] == ["**boxed 1**", "open 1 *(no sandbox: isolation none)*"]


def test_coverage_judges_a_narrow_diagnoser_on_its_field():
    results = [score_case(c, d, taxonomy=TAX, seconds=1.0) for c, d in zip(CASES, HALF)]  # finds the straggler only
    narrow = summarize(results, diagnoser=DiagnoserInfo(spec="n", name="narrow", version="1", claims=[STRAGGLER]),
                       case_set_hash="feedc0de" * 8, taxonomy_version="1.0", n_boot=200)
    wide = run_summary("undeclared", HALF)
    assert narrow.recall_claimable.value == 1.0 and narrow.recall_claimable.n == 1  # 1 of its 1 claimable label
    assert narrow.metrics.recall.value == 0.5  # the gap to all causes stays visible
    assert wide.recall_claimable is None
    board = render_leaderboard([narrow, wide]).split("### Coverage")[1].split("###")[0]
    assert f"`{STRAGGLER}` | 1.00" in board and "not declared | – | 0.50" in board


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
    (bad / "summary.json").write_text(json.dumps({"schema_version": 2}))
    with pytest.raises(ReportError, match="summary.json: not a diageval summary: diagnoser: Field required"):
        report_runs([bad])
    (bad / "summary.json").write_text(json.dumps({"schema_version": 1, "metrics": {"f1": {}}}))
    with pytest.raises(ReportError, match=r"bad/summary.json: .*schema version 1, this diageval reads 2 .*re-score "
                                          r"the run with `diageval score RUN_DIR`"):
        report_runs([bad])
    a = write_run(tmp_path, "a", run_summary("good", GOOD))
    b = write_run(tmp_path, "b", run_summary("null", NOTHING, case_set="1" * 64))
    res = CliRunner().invoke(main, ["report", str(a), str(b)])
    assert res.exit_code == 1 and "case-set hash differs" in res.output


ORACLE = [diag(cause(STRAGGLER, 1.0, ranks=[1])), diag(cause(LOADER, 1.0)), diag()]


def test_baseline_checks_pass_on_a_sound_board():
    board = [run_summary("oracle", ORACLE, self_test=True), run_summary("null", NOTHING), run_summary("leak", NOTHING),
             run_summary("symptoms", SYMPTOMS), run_summary("good", GOOD)]
    checks = check_baselines(board)
    assert [ok for _, ok, _ in checks] == [True, True, True, True]
    assert checks[2][2] == "skill 0.0, skill (ranks) 0.0; null's skill 0.0"


def test_baseline_checks_fail_when_the_board_is_wrong():
    leaky = run_summary("leak", HALF)               # a leak that found something
    imperfect = run_summary("oracle", GOOD)         # an oracle below 1
    harmless = run_summary("symptoms", NOTHING)     # symptoms that score like null
    checks = dict((c.split(":")[0], ok) for c, ok, _ in check_baselines([imperfect, run_summary("null", NOTHING),
                                                                         leaky, harmless]))
    assert checks == {"oracle": False, "null": True, "leak": False, "symptoms": False}
    missing = check_baselines([run_summary("null", NOTHING)])
    assert [ok for _, ok, _ in missing] == [False, True, False, False] and "no oracle run" in missing[0][2]


def test_check_board_script_reads_run_folders(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    runs = [write_run(tmp_path, n, run_summary(n, d)) for n, d in
            (("oracle", ORACLE), ("null", NOTHING), ("leak", NOTHING), ("symptoms", SYMPTOMS))]
    (tmp_path / "leaderboard.md").write_text("not a run")
    ok = subprocess.run([sys.executable, str(root / ".ci" / "check_board"), *map(str, runs), str(tmp_path / "leaderboard.md")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count("\nok  ") + ok.stdout.startswith("ok  ") == 4
    (runs[3] / "summary.json").write_text(run_summary("symptoms", NOTHING).model_dump_json())
    bad = subprocess.run([sys.executable, str(root / ".ci" / "check_board"), *map(str, runs)], capture_output=True, text=True)
    assert bad.returncode == 1 and "FAIL symptoms: skill < 0" in bad.stdout and "the board is wrong" in bad.stderr


def test_injected_and_recorded_cases_are_shown_apart_as_well_as_together():
    results = [score_case(c, d, taxonomy=TAX, seconds=1.0) for c, d in zip(CASES, GOOD)]
    results[1] = results[1].model_copy(update={"evidence": "recorded"})
    s = summarize(results, diagnoser=DiagnoserInfo(spec="g", name="good", version="1"),
                  case_set_hash="feedc0de" * 8, taxonomy_version="1.0", n_boot=200)
    assert {k: v.cases for k, v in s.by_evidence.items()} == {"injected": 2, "recorded": 1}
    board = render_leaderboard([s])
    assert "### Injected and recorded cases apart" in board and "(1 cases)" in board
    only_injected = run_summary("plain", GOOD)
    assert "### Injected and recorded" not in render_leaderboard([only_injected])
