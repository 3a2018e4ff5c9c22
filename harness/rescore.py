"""Re-score a saved run from its diagnoses, without running anything (``diageval score RUN_DIR``).

Every line of ``results.jsonl`` is judged again: its status, timings, bundle ids and measured impact are
kept; the verdicts are recomputed from ``cases/<id>/diagnosis.json`` with today's scoring code and the
case files' labels. Then ``results.jsonl`` and ``summary.json`` are rewritten atomically.

Refused (with the reason): a folder that is not a run, a run still marked ``running`` (another process
may be appending; a run killed without cleanup is resumed with ``diageval run``, not rescored), and a
run whose case files or taxonomy changed since (old diagnoses would be judged against new labels).
"""

from __future__ import annotations

from pathlib import Path

from diageval.case import CaseSet, load_case_set
from diageval.diagnosis import DiagnosisParseError, parse_diagnosis_json
from diageval.run import summarize_run
from diageval.run_store import RunStore


class RescoreError(Exception):
    """The run folder cannot be re-scored as it is."""


def rescore_run(run_dir: Path, *, case_set: CaseSet | None = None):
    """Re-score every case of the run in ``run_dir``; return the new Summary (also in ``summary.json``).

    ``case_set`` defaults to the case files the run was made from (``run.json``'s ``cases_dir``).
    """
    from diageval.scoring.results import ANSWERED_STATUSES
    from diageval.scoring.verdicts import score_case

    store = RunStore(Path(run_dir))
    try:
        manifest = store.read_manifest()
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

    rescored = []
    for row in store.read_results():
        case_id = row["case_id"]
        try:
            case = case_set.get(case_id).case
        except KeyError as exc:
            raise RescoreError(f"{store.results_path}: {exc.args[0]}") from None
        diagnosis = None
        status = row["status"]
        if status in ANSWERED_STATUSES:
            path = store.diagnosis_path(case_id)
            if not path.is_file():
                raise RescoreError(f"{path}: missing; the result says the diagnoser answered ({status})")
            try:
                diagnosis = parse_diagnosis_json(path.read_text(encoding="utf-8"), str(path))
            except DiagnosisParseError as exc:
                raise RescoreError(str(exc)) from None
            status = "ok"  # scoring reads ok / abstained from the diagnosis
        result = score_case(
            case,
            diagnosis,
            taxonomy=case_set.taxonomy,
            status=status,
            measured_impact=row.get("measured_impact"),
            seconds=row.get("seconds"),
            error=row.get("error"),
            bundle_id=row.get("bundle_id"),
            bundle_sha256=row.get("bundle_sha256"),
        )
        rescored.append(result.model_dump(mode="json"))
    store.rewrite_results(rescored)
    _, summary = summarize_run(store, manifest)
    return summary
