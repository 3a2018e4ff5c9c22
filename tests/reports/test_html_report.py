"""The HTML report (`diageval report RUN_DIR... --html FILE`): built from hand-made run folders, checked as
markup here and in a real headless Chromium (skipped, saying why, where Chromium or Playwright is missing;
.ci/run installs both, so CI runs it).

The run folders are written with the project's own writers (RunStore, score_case, summarize_run) from
five hand-written cases and four diagnosers whose claims are chosen to produce every kind of verdict, so
each count the page must show is known here without running anything.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from diageval.cases.load import load_case_set
from diageval.cli import main
from diageval.diagnosis import Diagnosis, Finding
from diageval.paths import default_taxonomy_path
from diageval.reports.browser import load_milliseconds, open_page, unavailable_reason
from diageval.reports.html import NO_CLAIM, metric_columns, render_html
from diageval.reports.html_data import gather
from diageval.reports.report import ReportError
from diageval.run.grade import summarize_run
from diageval.run.store import RunDiagnoser, RunEnv, RunInfo, RunStore
from diageval.scoring.metrics import BOARD, METRICS
from diageval.scoring.results import EvidenceFacts, ManifestationMeasure
from diageval.scoring.verdicts import score_case


def slowed_case(case_id: str, title: str, split: str, fault: str, cause: str, symptoms: str, min_ratio: float) -> str:
    """The file of a case whose one fault slows the job from step 5: the three such cases below differ in these
    fields alone."""
    return f"""
id: {case_id}
title: {title}
split: {split}
workload: {{name: mlp_ddp, world_size: 2, steps: 30}}
faults:
  - {fault}
labels:
  causes:
    - {cause}
  symptoms: [{symptoms}]
  expect: diagnose
manifest: {{metric: step_time_median, min_ratio: {min_ratio}}}
"""


CASE_FILES = {
    "straggler": slowed_case(
        "straggler", "From step 5 rank 1 computes 8x slower; rank 0 waits inside all_reduce", "public",
        "{name: slow_rank, params: {target_rank: 1, slowdown_factor: 8.0, start_step: 5}}",
        "{category: compute.straggler_rank, ranks: [1], steps: [5, 30]}", "symptom.long_collective, symptom.slow_step",
        1.5),
    "starved": slowed_case(
        "starved", "DataLoader workers need 160 ms more per batch from step 5", "private",
        "{name: dataloader_starvation, params: {extra_prep_ms: 160, start_step: 5}}",
        "{category: input.dataloader_starvation, steps: [5, 30]}", "symptom.slow_step, symptom.low_utilization", 1.5),
    "weak-straggler": slowed_case(
        "weak-straggler", "From step 5 rank 0 computes 2x slower", "private",
        "{name: slow_rank, params: {target_rank: 0, slowdown_factor: 2.0, start_step: 5}}",
        "{category: compute.straggler_rank, ranks: [0], steps: [5, 30]}", "symptom.long_collective", 1.2),
    "healthy": """
id: healthy
title: Healthy control
split: public
workload: {name: mlp_ddp, world_size: 2, steps: 30}
faults: []
labels: {causes: [], symptoms: [], expect: healthy}
""",
    "trace-missing": """
id: trace-missing
title: "Abstain: rank 1 is slow but its trace is missing"
split: private
workload: {name: mlp_ddp, world_size: 2, steps: 30}
faults:
  - {name: slow_rank, params: {target_rank: 1, slowdown_factor: 8.0, start_step: 5}}
  - {name: drop_rank_trace, params: {missing_rank: 1}}
labels: {causes: [], symptoms: [symptom.long_collective], expect: abstain}
""",
}
IMPACT = {"straggler": 0.85, "starved": 0.62, "weak-straggler": 0.15}
# what the manifestation test measured, as the pipeline puts it in the results ("starved": a run made before)
MEASURES = {"straggler": ManifestationMeasure(metric="step_time_median", min_ratio=1.5, ratio=3.0, noise=0.2,
                                              effect_to_noise=10.0, statistic=7.5, p_value=3.2e-14, alpha=0.0025,
                                              repeats=2, manifested=True)}

STRAGGLER, LOADER, STALL = "compute.straggler_rank", "input.dataloader_starvation", "comm.collective_stall"
LONG_COLLECTIVE = "symptom.long_collective"


def claim(category, confidence, ranks=None, evidence=()):
    return Finding(category=category, confidence=confidence, ranks=ranks, summary=f"says {category}",
                   evidence=list(evidence))


# Per diagnoser: case id -> a Diagnosis, or a failure status. Verdicts this produces are listed beside.
DIAGNOSERS = {
    "good": {  # correct x2, mislocated, duplicate, wrong_cause (abstain case is a guess), a hedge, one missed cause
        "straggler": Diagnosis(findings=[claim(STRAGGLER, 0.9, [1], ["rank 1 compute 8x rank 0"]),
                                         claim(STRAGGLER, 0.55, [1])]),
        "starved": Diagnosis(findings=[claim(LOADER, 0.8, evidence=["DataLoader next 70% of step"])]),
        "weak-straggler": Diagnosis(findings=[claim(STRAGGLER, 0.6, [1])]),
        "healthy": Diagnosis(findings=[claim(STALL, 0.2)]),  # below 0.5: a hedge, no false alarm
        "trace-missing": Diagnosis(findings=[claim(STRAGGLER, 0.6, [1])]),
    },
    "symptomy": {  # symptom_as_cause x2, false_alarm, wrong_cause, a timeout
        "straggler": Diagnosis(findings=[claim(LONG_COLLECTIVE, 0.7, evidence=["all_reduce 40 ms"])]),
        "starved": Diagnosis(findings=[claim(STALL, 0.6)]),
        "weak-straggler": "timeout",
        "healthy": Diagnosis(findings=[claim(LONG_COLLECTIVE, 0.5)]),
        "trace-missing": Diagnosis(findings=[claim(LONG_COLLECTIVE, 0.5)]),
    },
    "null": {c: Diagnosis() for c in CASE_FILES},
    "oracle": {
        "straggler": Diagnosis(findings=[claim(STRAGGLER, 1.0, [1])]),
        "starved": Diagnosis(findings=[claim(LOADER, 1.0)]),
        "weak-straggler": Diagnosis(findings=[claim(STRAGGLER, 1.0, [0])]),
        "healthy": Diagnosis(),
        "trace-missing": Diagnosis(abstain={"reason": "rank 1's trace is missing"}),
    },
}
ROLES = {"good": (False, False), "symptomy": (False, False), "null": (True, False), "oracle": (True, True)}


def write_cases(root: Path) -> Path:
    cases = root / "cases"
    cases.mkdir(parents=True)
    shutil.copy(default_taxonomy_path(), cases / "taxonomy.yaml")
    for name, text in CASE_FILES.items():
        (cases / f"{name}.yaml").write_text(text.lstrip(), encoding="utf-8")
    return cases


def write_run(runs: Path, cases_dir: Path, name: str) -> Path:
    """A finished run folder, written by the project's own writers."""
    case_set = load_case_set(cases_dir)
    reference, self_test = ROLES[name]
    store = RunStore(runs / name)
    manifest = RunInfo(
        run_id=name,
        diagnoser=RunDiagnoser(spec=name, name=name, version="1", origin="test", reference=reference, self_test=self_test),
        case_set_hash=case_set.hash, taxonomy_version=case_set.taxonomy.version, cases_dir=str(cases_dir),
        env=RunEnv(python="3", torch=None, platform="test", host="test"), device="cpu", timeout_s=60, jobs=1,
        started=datetime(2026, 1, 1, tzinfo=timezone.utc), status="complete", isolation="bwrap",  # ranked runs
    )
    store.begin(manifest)
    for lc in case_set.cases:
        outcome = DIAGNOSERS[name][lc.case.id]
        diagnosis = outcome if isinstance(outcome, Diagnosis) else None
        status = "ok" if diagnosis is not None else outcome
        result = score_case(lc.case, diagnosis, taxonomy=case_set.taxonomy, status=status, seconds=0.25,
                            evidence=EvidenceFacts(measured_impact=IMPACT.get(lc.case.id), manifestation=MEASURES.get(lc.case.id)),
                            error=None if diagnosis else "took too long")
        if diagnosis is not None:
            store.diagnosis_path(lc.case.id).parent.mkdir(parents=True, exist_ok=True)
            store.diagnosis_path(lc.case.id).write_text(diagnosis.model_dump_json(), encoding="utf-8")
        store.append_result(result)
    summarize_run(store, manifest)
    return store.root


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("html")
    cases_dir = write_cases(root)
    return [write_run(root / "runs", cases_dir, name) for name in DIAGNOSERS]


def expected_claim_rows(case_id: str) -> int:
    """Rows the case's claims table must have: one per cause claim (duplicates too), or one 'no claim' row
    for a diagnoser that claimed nothing (abstained, failed, or found nothing)."""
    rows = 0
    for outcomes in DIAGNOSERS.values():
        d = outcomes[case_id]
        rows += max(1, len(d.causes)) if isinstance(d, Diagnosis) else 1
    return rows


def render(run_dirs) -> str:
    return render_html(gather(run_dirs), generated=datetime(2026, 1, 1, tzinfo=timezone.utc))


# --- markup (no browser) -----------------------------------------------------------------------------


def test_page_is_self_contained_and_has_every_section(runs):
    html = render(runs)
    for section in ("leaderboard", "parts", "by-cause", "detection", "reliability", "cost", "confusion", "cases"):
        assert f'<section id="{section}">' in html
    assert 'id="compare"' not in html  # four runs: no pairwise section
    # nothing fetched at view time: no external URL in any src/href, no @import, no CDN
    assert not re.search(r'(src|href)="(?!#)', html)
    assert "@import" not in html and not re.search(r"url\((?!#)", html)
    assert html.count("<svg") == 3  # detection curves, reliability diagrams and skill against cost, inlined


def test_leaderboard_columns_come_from_the_metric_table():
    columns = metric_columns()
    assert [c.key for c in columns] == list(BOARD)
    assert [c.label for c in columns] == [METRICS[m].label for m in BOARD]


def test_skill_by_part_and_by_split(runs):
    """The per-part view: every part as a column (evidence kinds when both, cause families, splits) with each
    diagnoser's skill, the parts whose order differs from the leaderboard's marked, and the split gaps."""
    from diageval.reports.leaderboard import is_ranked
    from diageval.reports.parts import parts

    html = render(runs)
    section = html[html.index('<section id="parts">'):html.index("</section>", html.index('<section id="parts">'))]
    summaries = [r.summary for r in gather(runs).runs]
    expected = parts(summaries, [is_ranked(s.diagnoser) for s in summaries])
    # comm: claimed (symptomy names a stall), never labeled: its skill is undefined (no base rate to beat)
    assert [p.label for p in expected] == ["comm.*", "compute.*", "input.*", "split private", "split public"]
    header = section[section.index("<thead>"):section.index("</thead>")]
    for p in expected:
        assert f">{p.label}{' ⇅' if p.inversions else ''}<span" in header, p.label
    assert section.count('<tr data-diagnoser=') == 2 * len(DIAGNOSERS)  # the parts table and the split table
    assert ("part-swaps" in section) == any(p.inversions for p in expected)
    assert "<th>gap private − public</th>" in section
    good = next(s for s in summaries if s.diagnoser.name == "good")
    assert f"{good.split_gaps['private'].value:.2f}" in section


def test_a_claim_below_half_is_shown_as_a_hedge(runs):
    html = render(runs)
    assert '<option value="hedge">hedge</option>' in html
    assert 'data-verdict="hedge"' in html


def test_cases_show_labels_impact_and_every_claim(runs):
    html = render(runs)
    assert "From step 5 rank 1 computes 8x slower" in html  # title from the case file
    assert "rank 1 compute 8x rank 0" in html  # an evidence line from the saved diagnosis
    assert "measured impact <b>0.85</b>" in html
    assert "abstained: rank 1&#39;s trace is missing" in html
    assert "took too long" in html  # the timeout's error


def test_refuses_runs_on_different_case_sets(runs, tmp_path):
    other_cases = write_cases(tmp_path)
    (other_cases / "healthy.yaml").write_text(CASE_FILES["healthy"].replace("Healthy control", "Changed"), encoding="utf-8")
    other = write_run(tmp_path / "runs", other_cases, "null")
    with pytest.raises(ReportError, match="case-set hash"):
        gather([runs[0], other])


def test_cli_writes_the_page_beside_the_markdown(runs, tmp_path):
    out = tmp_path / "leaderboard.html"
    result = CliRunner().invoke(main, ["report", *map(str, runs[:2]), "-o", str(tmp_path / "lb.md"), "--html", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert (tmp_path / "lb.md").is_file()
    assert 'id="compare"' in html and "Not compared" not in html  # two runs: the paired comparison


# --- in a real browser ---------------------------------------------------------------------------------

browser = pytest.mark.skipif(unavailable_reason() is not None, reason=f"browser test: {unavailable_reason()}")


@browser
def test_in_chromium_sections_rows_filter_sort_and_no_network(runs, tmp_path):
    page_file = tmp_path / "report.html"
    page_file.write_text(render(runs), encoding="utf-8")
    with open_page(page_file) as (page, log):
        assert load_milliseconds(page) > 0
        # leaderboard: one row per run, the self-test last and unranked, roles marked
        names = page.locator("#leaderboard-table tbody tr").evaluate_all("rs => rs.map(r => r.dataset.diagnoser)")
        assert sorted(names) == sorted(DIAGNOSERS) and names[-1] == "oracle"
        assert page.locator("#leaderboard-table tr.self-test").count() == 1
        assert page.locator("#leaderboard-table tr.reference").count() == 2  # null, and the oracle (self-test too)
        # heatmap: two labeled causes, then healthy controls and abstain cases; R and M per diagnoser
        assert page.locator("#heatmap tbody tr").count() == 4
        assert page.locator("#heatmap tbody tr").first.locator("td.cell").count() == 2 * len(DIAGNOSERS)
        assert page.locator("#detection-figure svg").count() == 1
        assert page.locator("#reliability-figure svg").count() == 1
        # confusion: one matrix per diagnoser; symptomy's symptom-as-cause column is marked
        assert page.locator("table.confusion").count() == len(DIAGNOSERS)
        assert page.locator('table.confusion[data-diagnoser="symptomy"] th.col.symptom').count() == 1
        # cases: one section each, one row per claim (or per diagnoser without claims)
        assert page.locator("section.case").count() == len(CASE_FILES)
        for case_id in CASE_FILES:
            rows = page.locator(f'section.case[data-case="{case_id}"] tr.claim')
            assert rows.count() == expected_claim_rows(case_id), case_id

        # the verdict filter: only symptom-as-cause rows stay, and only the cases holding one
        assert page.locator("#case-filters").is_visible()
        page.select_option("#verdict-filter", "symptom_as_cause")
        visible = page.locator("tr.claim:visible")
        assert visible.count() == 2
        assert set(visible.evaluate_all("rs => rs.map(r => r.dataset.verdict)")) == {"symptom_as_cause"}
        assert page.locator("section.case:visible").count() == 2  # straggler and trace-missing
        page.select_option("#verdict-filter", "misleading")
        assert set(page.locator("tr.claim:visible").evaluate_all("rs => rs.map(r => r.dataset.verdict)")) == {
            "symptom_as_cause", "wrong_cause", "false_alarm"}
        page.select_option("#verdict-filter", NO_CLAIM)
        page.select_option("#diagnoser-filter", "null")
        assert page.locator("tr.claim:visible").count() == len(CASE_FILES)
        page.select_option("#verdict-filter", "all")
        page.select_option("#diagnoser-filter", "all")
        assert page.locator("tr.claim:visible").count() == sum(expected_claim_rows(c) for c in CASE_FILES)

        # sorting: by name ascending, then descending
        page.click("#leaderboard-table th:nth-child(2)")
        by_name = page.locator("#leaderboard-table tbody tr").evaluate_all("rs => rs.map(r => r.dataset.diagnoser)")
        assert by_name == sorted(DIAGNOSERS)
        page.click("#leaderboard-table th:nth-child(2)")
        assert page.locator("#leaderboard-table tbody tr").evaluate_all(
            "rs => rs.map(r => r.dataset.diagnoser)") == sorted(DIAGNOSERS, reverse=True)

        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert log.console_errors == [] and log.page_errors == []
    assert log.requests == []


@browser
def test_in_chromium_compare_section_for_two_runs(runs, tmp_path):
    page_file = tmp_path / "compare.html"
    page_file.write_text(render(runs[:2]), encoding="utf-8")
    with open_page(page_file) as (page, log):
        assert page.locator("#compare-table tbody tr").count() == len(METRICS)
        assert "A = good 1 vs B = symptomy 1" in page.locator("#compare h2").inner_text()
    assert log.console_errors == [] and log.requests == []


@browser
def test_a_page_that_fetches_is_caught(tmp_path):
    """The no-network check can fail: a page with a remote script is reported, not silently loaded."""
    page_file = tmp_path / "fetching.html"
    page_file.write_text('<!DOCTYPE html><html><head><script src="https://cdn.example.invalid/x.js"></script>'
                         "</head><body>x</body></html>", encoding="utf-8")
    with open_page(page_file) as (_, log):
        pass
    assert log.requests == ["https://cdn.example.invalid/x.js"]


def test_manifestation_measurements_come_from_the_results(runs):
    """The page's ratio, noise, z and p-value are the ones the run's results carry (no bundle cache is read);
    a positive case whose results carry none says so."""
    inputs = gather(runs)
    assert set(inputs.manifestations) == {"straggler"}
    assert inputs.manifestations["straggler"].p_value == pytest.approx(3.2e-14)
    html = render(runs)
    assert "ratio 3.00 (min 1.50), healthy-twin noise 0.20, z 10.0, test p 3.2e-14 (alpha 0.0025) over 2 repeat pairs" in html
    assert "no manifestation measurement in the results" in html  # starved: a run made before results carried it


def test_the_pareto_front_keeps_the_diagnosers_nothing_beats_on_both_cost_and_skill():
    from diageval.reports.plots import CostPoint, pareto_front, skill_against_cost

    points = [CostPoint("a", 1.0, 0.2, None), CostPoint("b", 2.0, 0.5, (0.3, 0.7)), CostPoint("c", 3.0, 0.4, None),
              CostPoint("d", 1.0, 0.1, None), CostPoint("e", 10.0, 0.6, None), CostPoint("f", 10.0, 0.6, None)]
    assert [p.name for p in pareto_front(points)] == ["a", "b", "e", "f"]  # c: b is cheaper and better; d: a is
    svg = skill_against_cost({"seconds per case (mean)": points, "dollars per case (mean)": []})
    assert svg.startswith("<svg") and "Pareto front" in svg
    assert skill_against_cost({"dollars per case (mean)": []}) == ""
