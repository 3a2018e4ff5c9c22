"""Repeats (issue 41 item 4): each case diagnosed K times; skill over repeats with its interval over cases, each
case's verdict (stable, flaky, catastrophic) and the consistency; recording once, resume per repeat."""

from __future__ import annotations

import json

from run_fakes import FakeEvidence, make_case, make_case_set, run_with

from diageval.diagnosis import parse_diagnosis_json
from diageval.run.store import RunStore
from diageval.scoring.repeats import summarize_repeats
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case

TAXONOMY = make_case_set([]).taxonomy


def _scored(case, category: str | None, confidence: float = 0.9):
    findings = [] if category is None else [{"category": category, "confidence": confidence}]
    return score_case(case, parse_diagnosis_json(json.dumps({"findings": findings}), "t"), taxonomy=TAXONOMY)


def test_stable_flaky_and_catastrophic_cases_and_the_consistency():
    a, b, c = (make_case(i, ranks=[1]) for i in ("a", "b", "c"))
    d = make_case("d", expect="healthy")
    right, wrong = "compute.straggler_rank", "input.dataloader_starvation"
    first = [_scored(a, right), _scored(b, right), _scored(c, right), _scored(d, None)]
    second = [_scored(a, right), _scored(b, wrong), _scored(c, None), _scored(d, wrong, 0.3)]
    view = summarize_repeats([first, second], n_boot=50)
    verdicts = {cid: v.verdict for cid, v in view.by_case.items()}
    # a: the same both times; b: right, then a confident wrong cause; c: right, then nothing; d (a control): quiet,
    # then a hedge, which misleads nobody
    assert verdicts == {"a": "stable", "b": "catastrophic", "c": "flaky", "d": "flaky"}
    assert (view.repeats, view.cases, view.stable, view.flaky, view.catastrophic) == (2, 4, 1, 2, 1)
    assert view.consistency.value == 0.25 and view.consistency.n == 4 and view.consistency.ci is not None
    one, two = view.skill_per_repeat
    assert one is not None and two is not None and one > two
    assert min(one, two) <= view.skill.value <= max(one, two) and view.skill.n == 4 and view.skill.ci is not None


def test_one_repeat_has_no_repeats_section():
    results = [_scored(make_case("a", ranks=[1]), "compute.straggler_rank")]
    s = summarize(results, diagnoser=DiagnoserInfo(spec="t", name="t"), case_set_hash="h", taxonomy_version="1",
                  n_boot=20)
    assert s.repeats is None


def _run(tmp_path, case_set, evidence, **kw):
    return run_with("fake_diagnosers:ScriptedDiagnoser", case_set, cases_dir=tmp_path / "cases",
                    out_dir=tmp_path / "runs", evidence_fn=evidence, progress=None, cuda_device_count=lambda: 0,
                    timeout=20.0, isolation="none", pass_env=("FAKE_DIAGNOSER_CALLS",), run_id="r", **kw)


def test_a_run_with_repeats_records_once_diagnoses_k_times_and_resumes_per_repeat(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DIAGNOSER_CALLS", str(tmp_path / "calls.txt"))
    case_set = make_case_set([make_case("a-ok", ranks=[1]), make_case("b-flip", ranks=[1]),
                              make_case("h-healthy", expect="healthy"), make_case("z-faint", ranks=[1])])
    evidence = FakeEvidence(tmp_path / "bundles", log_text={"a-ok": "ok", "b-flip": "flip", "h-healthy": "quiet"},
                            not_manifested={"z-faint"})
    out = _run(tmp_path, case_set, evidence, repeats=3)
    assert sorted(evidence.calls) == ["a-ok", "b-flip", "h-healthy", "z-faint"]  # recorded once, whatever K
    root = out.run_dir
    assert out.info.repeats == 3 and sorted(p.name for p in (root / "repeats").iterdir()) == ["2", "3"]
    for k in ("2", "3"):
        store = RunStore(root / "repeats" / k)
        assert {r.case_id: r.status for r in store.read_results()} == {
            "a-ok": "ok", "b-flip": "ok", "h-healthy": "ok", "z-faint": "invalid"}
        assert store.diagnosis_path("b-flip").is_file() and not (root / "repeats" / k / "run.json").exists()
    view = out.summary.repeats
    assert view is not None and view.repeats == 3 and view.cases == 3  # the invalid case is never scored
    assert {c: v.verdict for c, v in view.by_case.items()} == {
        "a-ok": "stable", "b-flip": "catastrophic", "h-healthy": "stable"}  # the same false alarm every time
    assert view.by_case["b-flip"].right == 2 and view.by_case["b-flip"].wrong == 1
    assert view.consistency.value == 2 / 3 and view.skill.ci is not None
    from diageval.reports.run_outcome import format_run_outcome

    told = format_run_outcome(out)
    assert "diagnosed (over 3 repeats)" in told and "repeats: 3 over 3 cases" in told and "1 catastrophic" in told

    from diageval.run.grade import rescore_run

    rescored = rescore_run(root, case_set=case_set)  # every repeat judged again from its diagnoses: the same view
    assert rescored.repeats == view

    # resume: a line lost from repeat 3 is diagnosed again there, and only there; evidence is not prepared again
    store3 = RunStore(root / "repeats" / "3")
    store3.rewrite_results([r for r in store3.read_results() if r.case_id != "a-ok"])
    before = len((tmp_path / "calls.txt").read_text().splitlines())
    again = _run(tmp_path, case_set, evidence, repeats=3)
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == before + 1
    assert again.counts["diagnosed"] == 1 and again.summary.repeats.cases == 3


def test_one_repeat_writes_the_files_it_always_wrote(tmp_path, monkeypatch):
    case_set = make_case_set([make_case("a-ok", ranks=[1])])
    out = _run(tmp_path, case_set, FakeEvidence(tmp_path / "bundles", log_text={"a-ok": "ok"}))
    assert not (out.run_dir / "repeats").exists() and out.summary.repeats is None and out.info.repeats == 1
    assert sorted(p.name for p in out.run_dir.iterdir()) == [
        ".lock", "cases", "results.jsonl", "run.json", "summary.json"]
