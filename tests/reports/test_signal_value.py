"""The signal-value report: skill per evidence tier against bytes, in markdown and HTML, off the board."""

from __future__ import annotations

import pytest
from run_fakes import FakeEvidence, make_case, make_case_set, run_with

from diageval.reports.report import report_runs
from diageval.reports.signal_value import gather_points, signal_value_html, split_by_tier, which_first


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("signal")
    case_set = make_case_set([make_case("v1", ranks=[1]), make_case("v2", cause="host.device_sync", ranks=[0]),
                              make_case("v3", expect="healthy")])
    common = dict(cases_dir=tmp / "cases", out_dir=tmp / "runs", evidence_fn=FakeEvidence(tmp / "bundles"),
                  progress=None, cuda_device_count=lambda: 0, timeout=5.0)
    dirs = [run_with("null", case_set, run_id="null", **common).run_dir]
    for tier in ("steps", "one-rank"):
        dirs.append(run_with("null", case_set, evidence=tier, run_id=f"null-{tier}", **common).run_dir)
    return dirs


def test_tier_runs_stay_off_the_board_and_fill_the_table(runs):
    full, tiered = split_by_tier(runs)
    assert [d.name for d in full] == ["null"] and [d.name for d in tiered] == ["null-steps", "null-one-rank"]
    points = gather_points(runs)
    assert [(p.diagnoser, p.tier) for p in points] == [("null", "steps"), ("null", "one-rank"), ("null", "full")]
    steps, one_rank, whole = points
    # the fake bundle: steps.jsonl, rank 0's trace and a log; each tier weighs what it keeps
    assert 0 < steps.bytes_per_case < one_rank.bytes_per_case < whole.bytes_per_case
    assert steps.bytes_per_step == pytest.approx(steps.bytes_per_case / 4)  # 4 steps logged per fake bundle
    assert steps.sized == 3 and steps.cases == 3
    # null says nothing: on steps both positives expect abstention (it is wrong on them, right on healthy)
    assert steps.skill.value != whole.skill.value

    markdown = report_runs(runs)
    board, _, section = markdown.partition("## Signal value")
    assert section and "| null | steps |" in section and "| null | one-rank |" in section
    assert [line.split(" | ")[1] for line in board.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")] == ["null 1 *(reference)*"]  # once, on full evidence
    assert "Which signal first" in section and "null:" in section


def test_the_html_section_has_the_table_and_the_plot(runs):
    section = signal_value_html(gather_points(runs))
    assert section.startswith('<section id="signal-value">') and "<svg" in section and "one-rank" in section
    assert signal_value_html(gather_points(runs[:1])) == ""  # no tier run, no section


def test_which_first_names_the_cheapest_tier_as_good_as_the_best(runs):
    answers = which_first(gather_points(runs))
    assert set(answers) == {"null"} and "the cheapest tier this corpus cannot tell from the best is steps" in answers["null"]
