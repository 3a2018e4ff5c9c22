"""Hostile input outside the run path (issue 25, item 5; issue 21, item 6): a diagnosis file handed to
`diageval score`, a run folder's results.jsonl edited or cut short, case YAML with the wrong types. Each
ends in an error that names the file and the field, exit code 1, no traceback and nothing overwritten."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from diageval.cases.load import load_case_set
from diageval.cli import main
from diageval.diagnosis import Diagnosis, DiagnosisLimits, DiagnosisParseError, parse_diagnosis_json, read_diagnosis_file
from diageval.paths import default_taxonomy_path
from diageval.run.grade import RescoreError, rescore_run, summarize_run
from diageval.run.store import RunDiagnoser, RunEnv, RunInfo, RunReadError, RunStore
from diageval.scoring.verdicts import score_case

HEALTHY = {
    "id": "tiny-healthy",
    "title": "A healthy control",
    "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 20},
    "labels": {"expect": "healthy"},
}
POSITIVE = {
    **HEALTHY,
    "id": "tiny-positive",
    "faults": [{"name": "dataloader_starvation", "params": {"extra_prep_ms": 50}}],
    "labels": {"causes": [{"category": "input.dataloader_starvation", "ranks": [0, 1], "steps": [0, 20]}],
               "symptoms": ["symptom.slow_step"], "expect": "diagnose"},
    "manifest": {"metric": "step_time_median", "min_ratio": 1.3},
}
CASES = {"tiny-healthy": HEALTHY, "tiny-positive": POSITIVE, "other-healthy": {**HEALTHY, "id": "other-healthy"}}


@pytest.fixture
def corpus(tmp_path) -> Path:
    d = tmp_path / "cases"
    d.mkdir()
    shutil.copy(default_taxonomy_path(), d / "taxonomy.yaml")
    for cid, case in CASES.items():
        (d / f"{cid}.yaml").write_text(yaml.safe_dump(case, sort_keys=False), encoding="utf-8")
    return d


def score(*args: str):
    return CliRunner().invoke(main, ["score", *args])


def assert_clean_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for needle in needles:
        assert needle in result.output, (needle, result.output)


# --- a diagnosis file handed to `diageval score --case ID --diagnosis F` ----------------------------


def test_a_huge_diagnosis_file_is_refused_without_reading_it_whole(corpus, tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:  # 500 MiB, sparse: no disk used
        fh.truncate(500 << 20)
    result = score("--case", "tiny-healthy", "--diagnosis", str(huge), "--cases", str(corpus))
    assert_clean_error(result, f"{huge}: over the size limit of 16 MiB")
    tracemalloc.start()
    try:
        with pytest.raises(DiagnosisParseError, match="over the size limit of 1 MiB"):
            read_diagnosis_file(huge, DiagnosisLimits(max_bytes=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # the limit plus one byte was read, not the file's 500 MiB


def test_the_size_limit_of_score_is_an_option(corpus, tmp_path):
    d = tmp_path / "d.json"
    d.write_text(json.dumps({"findings": [], "abstain": None, "pad": "x" * 600_000}))
    result = score("--case", "tiny-healthy", "--diagnosis", str(d), "--cases", str(corpus), "--max-diagnosis-mib", "0.5")
    assert_clean_error(result, f"{d}: over the size limit of 0.5 MiB")
    result = score(str(tmp_path), "--max-findings", "3")
    assert result.exit_code == 2 and "go with --case" in result.output


TEXT = json.dumps({"findings": [{"category": "input.dataloader_starvation", "confidence": 0.9}]})


@pytest.mark.parametrize("data, says", [
    (TEXT.encode("utf-16"), "starts with a UTF-16 byte-order mark"),
    (TEXT.encode("utf-16-be"), "holds a NUL byte (byte 0): UTF-16 or UTF-32 text"),
    (TEXT.encode("utf-16-le"), "holds a NUL byte (byte 1): UTF-16 or UTF-32 text"),
    (TEXT.encode("utf-32"), "starts with a UTF-32 byte-order mark"),
    (b"\xef\xbb\xbf" + TEXT.encode(), "starts with a UTF-8 byte-order mark"),
    (TEXT.replace("0.9", '0.9, "summary": "caf\xe9"').encode("latin-1"), "not UTF-8 at line 1 (byte"),
    (b"\n\n" + b"\x80" + TEXT.encode(), "not UTF-8 at line 3 (byte 2)"),
], ids=["utf-16", "utf-16-be-no-bom", "utf-16-le-no-bom", "utf-32", "utf-8-bom", "latin-1", "invalid-byte"])
def test_a_diagnosis_file_in_another_encoding_is_an_error_naming_the_file(corpus, tmp_path, data, says):
    d = tmp_path / "encoded.json"
    d.write_bytes(data)
    result = score("--case", "tiny-positive", "--diagnosis", str(d), "--cases", str(corpus))
    assert_clean_error(result, f"{d}: {says}")


@pytest.mark.parametrize("finding, field, says", [
    ({"confidence": True}, "confidence", "expected a number, not a boolean (got true)"),
    ({"confidence": "0.9"}, "confidence", 'expected a number, not a string (got "0.9")'),
    ({"impact": "0.2"}, "impact", 'expected a number, not a string (got "0.2")'),
    ({"ranks": [True]}, "ranks[0]", "expected an integer, not a boolean (got true)"),
    ({"ranks": ["1"]}, "ranks[0]", 'expected an integer, not a string (got "1")'),
    ({"steps": [0, "20"]}, "steps[1]", 'expected an integer, not a string (got "20")'),
])
def test_a_boolean_or_a_string_for_a_number_is_an_error_naming_the_field(corpus, tmp_path, finding, field, says):
    d = tmp_path / "typed.json"
    d.write_text(json.dumps({"findings": [{"category": "input.dataloader_starvation", **finding}]}))
    result = score("--case", "tiny-positive", "--diagnosis", str(d), "--cases", str(corpus))
    assert_clean_error(result, f"{d}: findings[0].{field}: {says}")


def test_numbers_that_are_numbers_still_read():
    d = parse_diagnosis_json(b'{"findings": [{"category": "a.b", "confidence": 1, "impact": 0, "ranks": [0], '
                             b'"steps": [0, 5]}]}', "ok.json")
    assert d.findings[0].confidence == 1.0 and d.findings[0].steps == (0, 5)


def test_an_in_process_diagnosis_is_as_strict_as_a_file():
    """The worker validates what an in-process diagnoser returns with the same model."""
    with pytest.raises(ValueError, match="confidence\n.*expected a number, not a boolean"):
        Diagnosis.model_validate({"findings": [{"category": "a.b", "confidence": True}]})


@pytest.mark.parametrize("text, key", [
    ('{"findings": [], "findings": [{"category": "input.dataloader_starvation"}]}', "findings"),
    ('{"findings": [{"category": "input.dataloader_starvation", "confidence": 0.1, "confidence": 1.0}]}', "confidence"),
], ids=["top-level", "in-a-finding"])
def test_a_key_given_twice_in_a_diagnosis_is_refused(corpus, tmp_path, text, key):
    d = tmp_path / "twice.json"
    d.write_text(text)
    result = score("--case", "tiny-positive", "--diagnosis", str(d), "--cases", str(corpus))
    assert_clean_error(result, f"{d}: the key '{key}' appears twice in one object")
    with pytest.raises(DiagnosisParseError, match="appears twice"):  # the run path reads through the same function
        parse_diagnosis_json(text.encode(), "out.json")


# --- a run folder's results.jsonl, re-scored by `diageval score RUN_DIR` ----------------------------


def write_run(cases_dir: Path, root: Path, *, status: str = "complete", record_cases: bool = True) -> RunStore:
    """A finished run of a diagnoser that claims the starvation cause on every case, written by the
    project's own writers (RunStore, score_case, summarize_run)."""
    case_set = load_case_set(cases_dir)
    store = RunStore(root / "run")
    manifest = RunInfo(
        run_id="run", diagnoser=RunDiagnoser(spec="t", name="t", version="1", origin="test", reference=False, self_test=False),
        case_set_hash=case_set.hash, taxonomy_version=case_set.taxonomy.version, cases_dir=str(cases_dir),
        env=RunEnv(python="3", torch=None, platform="test", host="test"), device="cpu", timeout_s=60, jobs=1,
        started=datetime(2026, 1, 1, tzinfo=timezone.utc), status=status,
        cases=sorted(CASES) if record_cases else None,
    )
    store.begin(manifest)
    diagnosis = Diagnosis.model_validate({"findings": [{"category": "input.dataloader_starvation", "confidence": 0.8}]})
    for lc in sorted(case_set.cases, key=lambda lc: lc.case.id):
        store.diagnosis_path(lc.case.id).parent.mkdir(parents=True, exist_ok=True)
        store.diagnosis_path(lc.case.id).write_text(diagnosis.model_dump_json(), encoding="utf-8")
        store.append_result(score_case(lc.case, diagnosis, taxonomy=case_set.taxonomy, status="ok", seconds=0.1))
    summarize_run(store, manifest)
    return store


def snapshot(store: RunStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (store.results_path, store.summary_path)}


def test_a_case_on_two_result_lines_is_an_error_naming_both_and_nothing_is_rewritten(corpus, tmp_path):
    store = write_run(corpus, tmp_path)
    lines = store.results_path.read_text().splitlines(keepends=True)
    store.results_path.write_text("".join(lines) + lines[0])
    before = snapshot(store)
    result = score(str(store.root))
    assert_clean_error(result, f"{store.results_path}: 1 case(s) with more than one result line: other-healthy (results 1, 4)")
    assert snapshot(store) == before
    with pytest.raises(RunReadError, match=r"other-healthy \(results 1, 4\)"):  # what report and compare read
        store.load()


def test_lost_result_lines_of_a_complete_run_are_named_and_the_summary_is_kept(corpus, tmp_path):
    store = write_run(corpus, tmp_path)
    lines = store.results_path.read_text().splitlines(keepends=True)
    store.results_path.write_text(lines[0] + lines[2])  # tiny-healthy's line lost
    before = snapshot(store)
    result = score(str(store.root))
    assert_clean_error(result, f"{store.results_path}: 1 case(s) of this complete run have no result line: tiny-healthy",
                       "Nothing was rewritten", "--allow-missing")
    assert snapshot(store) == before
    assert json.loads(store.summary_path.read_text())["counts"]["cases"] == 3

    result = score(str(store.root), "--allow-missing")
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and "tiny-healthy" in result.stderr
    assert json.loads(store.summary_path.read_text())["counts"]["cases"] == 2


def test_lost_lines_of_a_run_that_did_not_list_its_cases_are_told_by_its_summary(corpus, tmp_path):
    store = write_run(corpus, tmp_path, record_cases=False)  # run.json from before `cases` was recorded
    lines = store.results_path.read_text().splitlines(keepends=True)
    store.results_path.write_text(lines[0] + lines[1])
    before = snapshot(store)
    with pytest.raises(RescoreError, match=r"holds 2 result lines, but the summary.json it would replace counted 3 "
                                           r"cases.*case folders without a line: tiny-positive"):
        rescore_run(store.root)
    assert snapshot(store) == before


def test_an_interrupted_run_is_rescored_as_it_is_with_a_warning(corpus, tmp_path):
    store = write_run(corpus, tmp_path, status="interrupted")
    lines = store.results_path.read_text().splitlines(keepends=True)
    store.results_path.write_text(lines[0])
    warnings: list[str] = []
    summary = rescore_run(store.root, warn=warnings.append)
    assert summary.counts.cases == 1
    assert warnings == [f"{store.root} is interrupted: 2 of the cases it was asked to diagnose have no result line yet "
                        "(tiny-healthy, tiny-positive); the summary covers the 1 that do"]


def test_a_complete_run_rescores_without_a_warning(corpus, tmp_path):
    store = write_run(corpus, tmp_path)
    warnings: list[str] = []
    assert rescore_run(store.root, warn=warnings.append).counts.cases == 3 and warnings == []


def test_a_diagnosis_in_a_run_folder_in_utf16_is_an_error_naming_it(corpus, tmp_path):
    store = write_run(corpus, tmp_path)
    path = store.diagnosis_path("tiny-positive")
    path.write_bytes(path.read_text().encode("utf-16"))
    assert_clean_error(score(str(store.root)), f"{path}: starts with a UTF-16 byte-order mark")


# --- case YAML ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("change, field, says", [
    ({"workload": {"name": "mlp_ddp", "world_size": True, "steps": 20}}, "workload.world_size",
     "expected an integer, got true (a boolean)"),
    ({"workload": {"name": "mlp_ddp", "world_size": 2, "steps": "30"}}, "workload.steps",
     'expected an integer, got "30" (a string; write 30 without quotes)'),
    ({"workload": {"name": "mlp_ddp", "world_size": 2, "steps": 20.0}}, "workload.steps",
     "expected an integer, got 20.0 (a number with a decimal point)"),
    ({"manifest": {"metric": "step_time_median", "min_ratio": "1.3"}}, "manifest.min_ratio",
     'expected a number, got "1.3" (a string; write 1.3 without quotes)'),
    ({"labels": {"causes": [{"category": "input.dataloader_starvation", "ranks": [False]}], "expect": "diagnose"}},
     "labels.causes[0].ranks[0]", "expected an integer, got false (a boolean)"),
    ({"faults": [{"name": "dataloader_starvation", "params": {"extra_prep_ms": "50"}}]}, "faults[0].params.extra_prep_ms",
     'expected a number, got "50" (a string; write 50 without quotes)'),
    ({"workload": {"name": "mlp_ddp", "world_size": 2, "steps": 20, "params": {"batch_size": True}}},
     "workload.params.batch_size", "expected an integer, got true (a boolean)"),
    ({"tags": [7]}, "tags[0]", "expected a string, got 7 (an integer)"),
])
def test_case_yaml_types_are_strict(tmp_path, change, field, says):
    path = tmp_path / "typed.yaml"
    path.write_text(yaml.safe_dump({**POSITIVE, **change}, sort_keys=False))
    result = CliRunner().invoke(main, ["cases", "validate", str(path)])
    assert_clean_error(result, f"{path}: {field}: {says}")


def test_an_integer_where_a_number_is_expected_is_fine(tmp_path):
    path = tmp_path / "int.yaml"
    path.write_text(yaml.safe_dump({**POSITIVE, "manifest": {"metric": "step_time_median", "min_ratio": 2}}, sort_keys=False))
    result = CliRunner().invoke(main, ["cases", "validate", str(path)])
    assert result.exit_code == 0, result.output
