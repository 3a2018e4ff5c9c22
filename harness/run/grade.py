"""Grading: turn saved diagnoses into scored results and summaries, never running a diagnoser.

* :func:`summarize_run`: the summary of a run folder's results, written to ``summary.json``;
* :func:`rescore_run` (``diageval score RUN_DIR``): re-score a saved run from its diagnoses;
* :func:`score_diagnosis_file` (``diageval score --case ID --diagnosis F``): one hand-made diagnosis.

Like SWE-bench's harness, grading never imports the runner: it reads what the run wrote.

Re-scoring:

Every line of ``results.jsonl`` is judged again: its status, timings, bundle ids and measured impact are
kept; the verdicts are recomputed from ``cases/<id>/diagnosis.json`` with today's scoring code and the
case files' labels. Then ``results.jsonl`` and ``summary.json`` are rewritten atomically.

Refused (with the reason): a folder that is not a run, a run still marked ``running`` (another process
may be appending; a run killed without cleanup is resumed with ``diageval run``, not rescored), and a
run whose case files or taxonomy changed since (old diagnoses would be judged against new labels).
"""

from __future__ import annotations

from pathlib import Path

from diageval.cases.load import CaseSet, load_case_set
from diageval.diagnosis import (
    DiagnosisLimits,
    DiagnosisParseError,
    parse_diagnosis_json,
    read_capped,
    read_diagnosis_file,
)
from diageval.errors import DiagevalError
from diageval.fileio import atomic_write_text
from diageval.run.store import RunInfo, RunReadError, RunStore
from diageval.scoring.results import ANSWERED_STATUSES, CaseResult
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.verdicts import score_case


class RescoreError(DiagevalError):
    """The run folder cannot be re-scored as it is."""


def rescore_run(run_dir: Path, *, case_set: CaseSet | None = None):
    """Re-score every case of the run in ``run_dir``; return the new Summary (also in ``summary.json``).

    ``case_set`` defaults to the case files the run was made from (``run.json``'s ``cases_dir``).
    """
    store = RunStore(Path(run_dir))
    try:
        manifest = store.read_info()
    except (FileNotFoundError, ValueError) as exc:
        raise RescoreError(str(exc)) from None
    if manifest.status == "running":
        raise RescoreError(
            f"{store.root} is still marked running; if no `diageval run` is writing to it, run that command "
            "again to resume and complete it"
        )
    if case_set is None:
        case_set = load_case_set(Path(manifest.cases_dir))
    if case_set.hash != manifest.case_set_hash or case_set.taxonomy.version != manifest.taxonomy_version:
        raise RescoreError(
            f"the case files changed since this run: case-set hash {case_set.hash[:12]} (taxonomy "
            f"{case_set.taxonomy.version}) now, {manifest.case_set_hash[:12]} (taxonomy {manifest.taxonomy_version}) "
            f"when {store.root.name} ran. Its diagnoses would be judged against other labels: run the diagnoser again."
        )

    try:
        rows = store.read_saved_outcomes()  # not read_results: a run scored by older rules is re-scored too
    except RunReadError as exc:
        raise RescoreError(str(exc)) from None
    rescored = []
    for row in rows:
        case_id = row.case_id
        try:
            case = case_set.get(case_id).case
        except KeyError as exc:
            raise RescoreError(f"{store.results_path}: {exc.args[0]}") from None
        diagnosis = None
        status = row.status
        if status in ANSWERED_STATUSES:
            path = store.diagnosis_path(case_id)
            if not path.is_file():
                raise RescoreError(f"{path}: missing; the result says the diagnoser answered ({status})")
            try:
                limits = DiagnosisLimits(max_bytes=manifest.max_diagnosis_bytes, max_findings=manifest.max_findings)
                diagnosis = parse_diagnosis_json(read_capped(path, limits.max_bytes), str(path), limits)
            except DiagnosisParseError as exc:
                raise RescoreError(str(exc)) from None
            status = "ok"  # scoring reads ok / abstained from the diagnosis
        result = score_case(
            case,
            diagnosis,
            taxonomy=case_set.taxonomy,
            status=status,
            measured_impact=row.measured_impact,
            difficulty=row.difficulty,
            seconds=row.seconds,
            error=row.error,
            bundle_id=row.bundle_id,
            bundle_sha256=row.bundle_sha256,
        )
        rescored.append(result)
    store.rewrite_results(rescored)
    _, summary = summarize_run(store, manifest)
    return summary


def summarize_run(store: RunStore, manifest: RunInfo) -> tuple[list[CaseResult], Summary]:
    """Summarise every result in the folder and write ``summary.json``."""
    results = store.read_results()
    d = manifest.diagnoser
    summary = summarize(
        results,
        diagnoser=DiagnoserInfo(spec=d.spec, name=d.name, version=d.version, reference=d.reference, self_test=d.self_test,
                                isolation=manifest.isolation, claims=d.claims),
        case_set_hash=manifest.case_set_hash,
        taxonomy_version=manifest.taxonomy_version,
    )
    atomic_write_text(store.summary_path, summary.model_dump_json(indent=2) + "\n")
    return results, summary


def score_diagnosis_file(case_id: str, diagnosis_path: Path, cases_dir: Path | None = None) -> CaseResult:
    """Load case ``case_id`` from the corpus at ``cases_dir`` and score the diagnosis in ``diagnosis_path``.

    Raises ``KeyError`` (with close matches) for an unknown case, :class:`CaseLoadError` for a corpus with
    bad cases and :class:`DiagnosisParseError` for a bad diagnosis file. No measured impact or timing is
    known here (nothing was recorded or run), so impact error and seconds stay empty.
    """
    case_set = load_case_set(cases_dir)
    case = case_set.get(case_id).case
    diagnosis = read_diagnosis_file(diagnosis_path)
    return score_case(case, diagnosis, taxonomy=case_set.taxonomy)
