"""The markdown leaderboard and `diageval report`: ranking, marks, cells, refusals, files written."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from scoring_helpers import LOADER, STALL, STRAGGLER, cause, diag, make_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.cli import main
from diageval.reports.leaderboard import LeaderboardError, format_metric, render_leaderboard
from diageval.reports.board_gate import check_board
from diageval.reports.report import ReportError, report_runs
from diageval.scoring.metrics import MetricValue
from diageval.scoring.results import EvidenceFacts
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case
from locations import REPO

TAX = load_taxonomy()
CASES = [make_case("p1", [{"category": STRAGGLER, "ranks": [1]}]), make_case("p2", [{"category": LOADER}]),
         make_case("h1")]


def run_summary(name, diagnoses, *, reference=False, self_test=False, case_set="feedc0de" * 8, taxonomy="1.0"):
    results = [score_case(c, d, taxonomy=TAX, seconds=1.0) for c, d in zip(CASES, diagnoses)]
    info = DiagnoserInfo(spec=name, name=name, version="1", reference=reference, self_test=self_test)
    return summarize(results, diagnoser=info, case_set_hash=case_set, taxonomy_version=taxonomy, n_boot=200)


# skill = 1 - loss / R, R = 2 (1 - 1/3) = 4/3: two causes, each labeled on one of the three cases
GOOD = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(cause(LOADER, 0.8)), diag()]             # loss .05: .9625
NOISY = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(cause(LOADER, 0.8)), diag(cause(STALL))]  # + .5^2: .775
HALF = [diag(cause(STRAGGLER, 0.9, ranks=[1])), diag(), diag()]                                 # .01 + 1: .2425
NOTHING = [diag(), diag(), diag()]                                                              # 2: -.5
SYMPTOMS = [diag(cause("symptom.long_collective", 0.9)), diag(cause("symptom.slow_step", 0.9)), diag()]  # -1.71


def table_rows(markdown):
    lines = markdown.split("\n### ")[0].splitlines()
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
    assert "| 0.96 [" in rows[0] and "| -1.71 [" in rows[4]
    assert "| -0.50 [" in rows[3]                      # null: 1 - 2 / (4/3), below the base rates
    assert "`null` (saying nothing) scores -0.500 on these cases" in md
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
    (bad / "summary.json").write_text(json.dumps({"schema_version": 4}))
    with pytest.raises(ReportError, match="summary.json: not a diageval summary: diagnoser: Field required"):
        report_runs([bad])
    (bad / "summary.json").write_text(json.dumps({"schema_version": 1, "metrics": {"f1": {}}}))
    for old in (1, 2, 3):
        (bad / "summary.json").write_text(json.dumps({"schema_version": old, "metrics": {"f1": {}}}))
        with pytest.raises(ReportError, match=rf"bad/summary.json: .*schema version {old}, this diageval reads 4 "
                                              r".*re-score the run with `diageval score RUN_DIR`"):
            report_runs([bad])
    a = write_run(tmp_path, "a", run_summary("good", GOOD))
    b = write_run(tmp_path, "b", run_summary("null", NOTHING, case_set="1" * 64))
    res = CliRunner().invoke(main, ["report", str(a), str(b)])
    assert res.exit_code == 1 and "case-set hash differs" in res.output


ORACLE = [diag(cause(STRAGGLER, 1.0, ranks=[1])), diag(cause(LOADER, 1.0)), diag()]


def write_board(root, runs, cases=CASES, draws=None):
    """Run folders written by the project's writers, over case files written to ``root/cases``; ``draws``: case id ->
    the rank draw its recording made (the labels' ranks follow it, as a run scores a drawn recording)."""
    import shutil
    from datetime import datetime, timezone

    import yaml

    from diageval.cases.load import load_case_set
    from diageval.paths import default_taxonomy_path
    from diageval.run.store import RunDiagnoser, RunEnv, RunInfo, RunStore

    cases_dir = root / "cases"
    cases_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(default_taxonomy_path(), cases_dir / "taxonomy.yaml")
    for c in cases:
        data = c.model_dump(mode="json", exclude_none=True)
        data["faults"] = [{"name": "slow_rank", "params": {"target_rank": 1, "slowdown_factor": 4.0}}] if c.faults else []
        (cases_dir / f"{c.id}.yaml").write_text(yaml.safe_dump(data))
    case_set = load_case_set(cases_dir)
    out = []
    for name, diagnoses in runs.items():
        store = RunStore(root / name)
        info = RunInfo(run_id=name, diagnoser=RunDiagnoser(spec=name, name=name, version="1", origin="test",
                                                           reference=True, self_test=name == "oracle"),
                       case_set_hash=case_set.hash, taxonomy_version=case_set.taxonomy.version, cases_dir=str(cases_dir),
                       env=RunEnv(python="3", torch=None, platform="test", host="test"), device="cpu", timeout_s=60,
                       jobs=1, started=datetime(2026, 1, 1, tzinfo=timezone.utc), status="complete")
        store.begin(info)
        draws = draws or {}
        results = [score_case(case_set.get(c.id).case.with_rank_draw(draws.get(c.id)), d, taxonomy=case_set.taxonomy,
                              seconds=1.0, evidence=EvidenceFacts(rank_draw=draws.get(c.id))) for c, d in zip(cases, diagnoses)]
        for r in results:
            store.append_result(r)
        store.summary_path.write_text(summarize(results, diagnoser=DiagnoserInfo(spec=name, name=name, version="1"),
                                      case_set_hash=case_set.hash, taxonomy_version=case_set.taxonomy.version,
                                      n_boot=50).model_dump_json())
        out.append(store.root)
    return out


SOUND = {"oracle": ORACLE, "null": NOTHING, "leak": NOTHING, "symptoms": SYMPTOMS, "good": GOOD}


def test_the_gate_passes_a_sound_board_on_its_closed_forms(tmp_path):
    checks = check_board(write_board(tmp_path, SOUND))
    assert [c.split(":")[0] for c, _, _ in checks] == ["oracle", "null", "base-rate spray", "base-rate spray with ranks",
                                                       "leak", "symptoms"]
    assert all(ok for _, ok, _ in checks), checks
    measured = dict((c.split(":")[0], m) for c, _, m in checks)
    assert "skill -0.49999" in measured["null"] and "closed form -0.49999" in measured["null"]  # 1 - 2 / (4/3)
    assert "(3 cases, 2 labeled causes)" in measured["base-rate spray"]


def test_the_gate_counts_the_labels_where_each_recording_put_them(tmp_path):
    """Two stragglers labeled on rank 1, one recorded with its ranks swapped, so scored on rank 0 (issue 44's draw):
    the gate's closed forms count the labels as scored, and null's skill (ranks) and the rank spray still meet them
    (counted from the case files, rank 1 would hold both labels and the closed form would be another number)."""
    cases = [make_case("p1", [{"category": STRAGGLER, "ranks": [1]}]), make_case("p3", [{"category": STRAGGLER, "ranks": [1]}]),
             make_case("p2", [{"category": LOADER}]), make_case("h1")]
    checks = dict((c.split(":")[0], (ok, m)) for c, ok, m in check_board(
        write_board(tmp_path, {"null": [diag()] * 4}, cases=cases, draws={"p3": [1, 0]})))
    assert checks["null"][0] and checks["base-rate spray with ranks"][0], checks


def test_the_gate_fails_a_wrong_board(tmp_path):
    wrong = {"oracle": GOOD,        # an oracle below 1
             "null": NOTHING,
             "leak": HALF,          # a leak that found something
             "symptoms": NOTHING}   # symptoms that score like null
    checks = dict((c.split(":")[0], ok) for c, ok, _ in check_board(write_board(tmp_path, wrong)))
    assert checks == {"oracle": False, "null": True, "base-rate spray": True, "base-rate spray with ranks": True,
                      "leak": False, "symptoms": False}
    missing = dict((c.split(":")[0], (ok, m)) for c, ok, m in check_board(write_board(tmp_path / "x", {"leak": NOTHING})))
    assert not any(ok for ok, _ in missing.values())
    assert "no null run" in missing["base-rate spray"][1] and "no oracle run" in missing["oracle"][1]


def test_the_gate_recomputes_null_from_the_labels(tmp_path):
    """A null whose summary.json does not hold the closed form fails: the gate counts the labels itself."""
    runs = write_board(tmp_path, SOUND)
    from diageval.run.store import RunStore

    store = RunStore(runs[1])
    s = store.read_summary()
    store.summary_path.write_text(s.model_copy(update={"metrics": s.metrics.model_copy(update={
        "skill": s.metrics.skill.model_copy(update={"value": 0.0})})}).model_dump_json())
    checks = dict((c.split(":")[0], ok) for c, ok, _ in check_board(runs))
    assert checks["null"] is False and checks["leak"] is False  # leak no longer equals null either
    # case files that changed since the run: the spray cannot be scored on them
    (tmp_path / "cases" / "h1.yaml").write_text((tmp_path / "cases" / "h1.yaml").read_text().replace("hand-built", "edited"))
    spray = next((ok, m) for c, ok, m in check_board(runs) if c.startswith("base-rate spray"))
    assert spray[0] is False and "changed since the run" in spray[1]


def _where_board():
    """Cases with every event family: a ranked cause on rank 1 (twice) and on rank 0 (once), a fleet with its
    cause behind a host, an aliased fleet, a regression; and the reference runs on them."""
    from scoring_helpers import CONTENTION, fleet_case, regression_case

    from diageval.diagnosis import Abstention, Diagnosis, FactorRef

    node2, node4, rack2 = (FactorRef(name="host", value="node-02"), FactorRef(name="host", value="node-04"),
                           FactorRef(name="rack", value="r2"))
    cases = CASES + [make_case("p3", [{"category": STRAGGLER, "ranks": [1]}]),
                     make_case("p4", [{"category": STRAGGLER, "ranks": [0]}]), fleet_case("fa", behind=node2),
                     fleet_case("fc", expect="abstain", aliased=[node4, rack2]), regression_case("ra")]

    def oracle(case):
        if case.labels.expect == "abstain":
            return Diagnosis(abstain=Abstention(reason="aliased", factors=list(case.labels.aliased)))
        return diag(*(cause(c.category, 1.0, ranks=c.ranks).model_copy(update={"factor": c.factor})
                      for c in case.labels.causes))

    nothing = [diag() for _ in cases]
    symptoms = [diag(cause("symptom.slow_step", 0.9)) for _ in cases]
    return cases, {"oracle": [oracle(c) for c in cases], "null": nothing, "leak": nothing, "symptoms": symptoms}


def _seeded_bugs():
    """Bugs confined to rank or factor statements below confidence 1, or to the ranks' reference: the oracle
    (every statement at 1) and null (none) score as on a sound board, so the old gate (oracle, null's skill,
    a spray of causes alone) passed each."""
    from diageval.scoring import tallies, verdicts

    def rank_events_read_the_cause(category, labels, claims):  # each rank at the cause's highest confidence
        top = max((c.confidence for c in claims), default=0.0)
        return [f.model_copy(update={"ranked_probability": top}) if f.ranked_probability > 0 else f
                for f in real_rank_events(category, labels, claims)]

    def symptoms_name_no_value(case, findings):  # only cause findings' factor values read (docs: any finding)
        return real_factor_events(case, [f for f in findings if f.kind == "cause"])

    def per_cause_rank_climatology(t, labeled, families, rank_positions=(), factor_names=()):  # pooled over positions
        out = real_reference(t, labeled, families, (), factor_names)
        for k in {k for k, _ in rank_positions}:
            true = sum(t[tallies.rank_column("rank_true", k, r)] for kk, r in rank_positions if kk == k)
            slots = sum(t[tallies.rank_column("rank_slots", k, r)] for kk, r in rank_positions if kk == k)
            out[tallies.REFERENCE_RANKED] = out[tallies.REFERENCE_RANKED] + true - true * true / slots
        return out

    real_rank_events, real_factor_events = verdicts._rank_events, verdicts._factor_events
    real_reference = tallies.reference_totals
    return {"rank events": (verdicts, "_rank_events", rank_events_read_the_cause),
            "factor events": (verdicts, "_factor_events", symptoms_name_no_value),
            "rank reference": (tallies, "reference_totals", per_cause_rank_climatology)}


def test_the_gate_checks_every_event_family_and_catches_a_bug_confined_to_one(tmp_path, monkeypatch):
    """Issue 39 item 6: the gate checks the closed forms of rank and factor events too. On cases with ranks,
    fleets, an aliased fleet and a regression the sound board passes; a bug seeded in rank events, in factor
    events or in the ranks' reference (the board written and checked with it) fails a check."""
    cases, runs = _where_board()
    checks = check_board(write_board(tmp_path / "sound", runs, cases=cases))
    assert all(ok for _, ok, _ in checks), checks
    failing = {}
    for bug, (module, name, seeded) in _seeded_bugs().items():
        with monkeypatch.context() as m:
            m.setattr(module, name, seeded)
            checks = check_board(write_board(tmp_path / bug.replace(" ", "-"), runs, cases=cases))
        failing[bug] = {c.split(":")[0] for c, ok, _ in checks if not ok}
    assert failing == {"rank events": {"base-rate spray with ranks"},
                       "factor events": {"base-rate spray", "base-rate spray with ranks"},
                       "rank reference": {"null", "base-rate spray with ranks"}}, failing


def test_check_board_script_reads_run_folders(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = REPO
    runs = write_board(tmp_path, {n: SOUND[n] for n in ("oracle", "null", "leak", "symptoms")})
    (tmp_path / "leaderboard.md").write_text("not a run")
    ok = subprocess.run([sys.executable, str(root / ".ci" / "check_board"), *map(str, runs), str(tmp_path / "leaderboard.md")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count("\nok  ") + ok.stdout.startswith("ok  ") == 6
    from diageval.run.store import RunStore

    RunStore(runs[3]).summary_path.write_text(RunStore(runs[1]).read_summary().model_copy(update={
        "diagnoser": DiagnoserInfo(spec="symptoms", name="symptoms")}).model_dump_json())  # symptoms exactly like null
    bad = subprocess.run([sys.executable, str(root / ".ci" / "check_board"), *map(str, runs)], capture_output=True, text=True)
    assert bad.returncode == 1 and "FAIL symptoms: skill < null's" in bad.stdout and "the board is wrong" in bad.stderr


def test_injected_and_recorded_cases_are_shown_apart_as_well_as_together():
    results = [score_case(c, d, taxonomy=TAX, seconds=1.0) for c, d in zip(CASES, GOOD)]
    results[1] = results[1].model_copy(update={"evidence": "recorded"})
    s = summarize(results, diagnoser=DiagnoserInfo(spec="g", name="good", version="1"),
                  case_set_hash="feedc0de" * 8, taxonomy_version="1.0", n_boot=200)
    assert {k: v.cases for k, v in s.by_evidence.items()} == {"injected": 2, "recorded": 1}
    board = render_leaderboard([s])
    assert "### Skill by part" in board and "| recorded (1 cases †) |" in board
    # 3 cases: the board says its scale is not a full corpus' (issue 39 item 7)
    assert "**3 scored cases, under 8:**" in board and "shrinks as (n − 1)/n" in board
    only_injected = run_summary("plain", GOOD)
    assert "injected (" not in render_leaderboard([only_injected])


FAMILY_CASES = [make_case(f"s{i}", [{"category": STRAGGLER, "ranks": [1]}]) for i in range(4)] + \
               [make_case(f"l{i}", [{"category": LOADER}]) for i in range(4)] + [make_case(f"h{i}") for i in range(4)]


def family_summary(name, straggler, loader):
    """Finds the straggler cases at ``straggler``, the loader cases at ``loader`` (0: says nothing)."""
    diagnoses = [diag(cause(STRAGGLER, straggler, ranks=[1])) if straggler else diag() for _ in range(4)] + \
                [diag(cause(LOADER, loader)) if loader else diag() for _ in range(4)] + [diag() for _ in range(4)]
    results = [score_case(c, d, taxonomy=TAX, seconds=1.0) for c, d in zip(FAMILY_CASES, diagnoses)]
    return summarize(results, diagnoser=DiagnoserInfo(spec=name, name=name, version="1"), case_set_hash="f" * 64,
                     taxonomy_version="1.0", n_boot=100)


def test_skill_by_family_and_where_a_part_orders_the_diagnosers_otherwise():
    """Pooled, the broad diagnoser wins; on the compute family the specialist does: the board says so."""
    broad = family_summary("broad", 0.6, 0.95)
    specialist = family_summary("specialist", 0.95, 0.0)
    assert broad.metrics.skill.value > specialist.metrics.skill.value
    assert set(broad.by_family) == {"compute", "input"}
    assert broad.by_family["compute"].labeled == 4
    # compute: 4 straggler cases of 12, R = 4 (1 - 4/12) = 8/3; the specialist loses 4 x .05^2
    assert specialist.by_family["compute"].skill.value == pytest.approx(1 - 4 * 0.05**2 / (8 / 3))
    assert specialist.by_family["input"].skill.value == pytest.approx(1 - 4 / (8 / 3))  # says nothing on input
    md = render_leaderboard([broad, specialist])
    part = md.split("### Skill by part")[1].split("\n### ")[0]
    assert "compute.* (4 labeled) ⇅" in part and "input.* (4 labeled) |" in part
    assert "- compute.*: **specialist 1** above **broad 1** (the board has each pair the other way)" in part


def test_skill_by_split_and_the_gap_between_splits():
    cases = [c.model_copy(update={"split": "public" if i % 2 else "private"}) for i, c in enumerate(FAMILY_CASES)]
    diagnoses = [diag(cause(STRAGGLER, 0.9, ranks=[1])) if c.split == "public" else diag() for c in cases[:4]] + \
                [diag(cause(LOADER, 0.9)) for _ in range(4)] + [diag() for _ in range(4)]
    results = [score_case(c, d, taxonomy=TAX, seconds=1.0) for c, d in zip(cases, diagnoses)]
    assert {r.split for r in results} == {"public", "private"}
    s = summarize(results, diagnoser=DiagnoserInfo(spec="d", name="d", version="1"), case_set_hash="f" * 64,
                  taxonomy_version="1.0", n_boot=300)
    assert {k: v.cases for k, v in s.by_split.items()} == {"private": 6, "public": 6}
    public, private = s.by_split["public"].metrics.skill.value, s.by_split["private"].metrics.skill.value
    gap = s.split_gaps["public"]
    assert gap.value == pytest.approx(public - private) and gap.value > 0 and gap.n == 6
    assert gap.ci[0] <= gap.value <= gap.ci[1]
    assert s.split_gaps["private"].value == pytest.approx(-gap.value)
    md = render_leaderboard([s])
    table = md.split("### Skill by split")[1]
    assert "| split private (6 cases) | split public (6 cases) | gap private − public |" in table
    assert f"{s.split_gaps['private'].value:.2f} [" in table
    assert "split public (6 cases)" in md.split("### Skill by part")[1]  # a part of the per-part view too
    unsplit = summarize([r.model_copy(update={"split": None}) for r in results],
                        diagnoser=DiagnoserInfo(spec="d", name="d"), case_set_hash="f" * 64, taxonomy_version="1.0",
                        n_boot=0)
    assert unsplit.by_split == {} and unsplit.split_gaps == {} and "### Skill by split" not in render_leaderboard([unsplit])


def test_skill_by_device_family_of_the_evidence():
    """Issue 23: a diagnoser's skill on the CPU cases recorded here, and on each kind of real device, apart."""
    cases = FAMILY_CASES
    results = [score_case(c, diag(cause(STRAGGLER, 0.9, ranks=[1])) if i < 4 else diag(), taxonomy=TAX, seconds=1.0)
               for i, c in enumerate(cases)]
    assert {r.device_family for r in results} == {"cpu"}  # injected cases recorded on CPU here
    results = [r.model_copy(update={"device_family": "nvidia" if i % 3 == 0 else "cpu"}) for i, r in enumerate(results)]
    s = summarize(results, diagnoser=DiagnoserInfo(spec="d", name="d", version="1"), case_set_hash="f" * 64,
                  taxonomy_version="1.0", n_boot=200)
    assert {k: v.cases for k, v in s.by_device.items()} == {"cpu": 8, "nvidia": 4}
    part = render_leaderboard([s]).split("### Skill by part")[1].split("\n### ")[0]
    # a part under 8 cases is marked, and the board says why its skill is on another scale (issue 39 item 7)
    assert "on cpu (8 cases)" in part and "on nvidia (4 cases †)" in part
    assert "† under 8 cases (on nvidia)" in part and "shrinks as (n − 1)/n" in part
    assert "scored cases, under 8" not in render_leaderboard([s])


def test_a_recorded_case_s_device_family_is_its_hardware_s_maker():
    from diageval.cases.load import load_case_set

    families = {lc.case.id: lc.case.device_family for lc in load_case_set().cases}
    assert families["mi300x-one-rank-of-eight"] == "amd" and families["v100-ddp-gpu-bound"] == "nvidia"
    assert families["mlp-ddp-healthy"] == "cpu"
    assert set(families.values()) <= {"cpu", "nvidia", "amd", "mtia", "unknown"}
