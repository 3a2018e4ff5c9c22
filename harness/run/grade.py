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
may be appending; a run killed without cleanup is resumed with ``diageval run``, not rescored), a
run whose case files or taxonomy changed since (old diagnoses would be judged against new labels), and
a results file with a case on two lines (:class:`~diageval.run.store.RunStore` refuses it). Every check
is made before anything is written.

Lost result lines (decided here): re-scoring never writes a ``summary.json`` over fewer cases than the
run had without being told to. A *complete* run whose ``results.jsonl`` lacks a case that ``run.json``
says it diagnosed (``cases``), or that holds fewer lines than the ``summary.json`` it replaces counted
(runs written before ``run.json`` listed its cases), is refused, naming the cases (for an old run: the
case folders without a line). ``allow_missing=True`` (``diageval score --allow-missing``) re-scores the
lines that are there and still names the missing cases as a warning. ``diageval run`` into the same
folder is the other way out: it resumes the run and diagnoses the missing cases again. An interrupted
or failed run is re-scored as it is, with a warning naming how many of its cases have no line yet.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from diageval.cases.load import CaseSet, load_case_set
from diageval.cases.tiers import case_under_tier
from diageval.diagnosis import DEFAULT_LIMITS, DiagnosisLimits, DiagnosisParseError, read_diagnosis_file
from diageval.errors import DiagevalError
from diageval.fileio import atomic_write_text
from diageval.run.store import RunInfo, RunReadError, RunStore
from diageval.scoring.results import ANSWERED_STATUSES, CaseResult, EvidenceFacts
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.verdicts import score_case


class RescoreError(DiagevalError):
    """The run folder cannot be re-scored as it is."""


def rescore_run(run_dir: Path, *, case_set: CaseSet | None = None, allow_missing: bool = False,
                warn: Callable[[str], None] | None = None):
    """Re-score every case of the run in ``run_dir``; return the new Summary (also in ``summary.json``).

    ``case_set`` defaults to the case files the run was made from (``run.json``'s ``cases_dir``).
    ``allow_missing``: re-score a complete run that lost result lines (see the module's docstring);
    ``warn`` receives one line for each thing re-scored anyway (missing cases named).
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

    stores = store.repeat_stores(manifest.repeats)  # repeat 1 is the folder itself; repeats 2..K re-scored alike
    rescored_by = []
    for each in stores:
        try:
            rows = each.read_saved_outcomes()  # not read_results: a run scored by older rules is re-scored too
        except RunReadError as exc:
            raise RescoreError(str(exc)) from None
        if each is store:
            for line in _lost_lines(store, manifest, [row.case_id for row in rows], allow_missing=allow_missing):
                if warn is not None:
                    warn(line)
        rescored_by.append(_rescored(each, manifest, case_set, rows))
    for each, rescored in zip(stores, rescored_by):  # every check made above: now write
        each.rewrite_results(rescored)
    _, summary = summarize_run(store, manifest)
    return summary


def _rescored(store: RunStore, manifest: RunInfo, case_set: CaseSet, rows: list) -> list[CaseResult]:
    """Every saved outcome of one repeat's ``results.jsonl`` (``store``) judged again from its diagnosis files."""
    rescored = []
    for row in rows:
        case_id = row.case_id
        try:
            # as the run scored it: the labels' ranks where the recording put them, the tier's cut
            case = case_under_tier(case_set.get(case_id).case.with_rank_draw(row.rank_draw), manifest.evidence_tier)
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
                diagnosis = read_diagnosis_file(path, limits)
            except DiagnosisParseError as exc:
                raise RescoreError(str(exc)) from None
            status = "ok"  # scoring reads ok / abstained from the diagnosis
        result = score_case(
            case,
            diagnosis,
            taxonomy=case_set.taxonomy,
            status=status,
            seconds=row.seconds,
            usage=row.usage,
            error=row.error,
            evidence=EvidenceFacts.of(row),
        )
        rescored.append(result)
    return rescored


def _names(ids: list[str], shown: int = 10) -> str:
    return ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _lost_lines(store: RunStore, manifest: RunInfo, case_ids: list[str], *, allow_missing: bool) -> list[str]:
    """Refuse (:class:`RescoreError`) a complete run that lost result lines unless ``allow_missing``;
    return the warnings to print when it goes on."""
    n = len(case_ids)
    if manifest.status != "complete":
        missing = store.missing_results(manifest, case_ids)
        return [f"{store.root} is {manifest.status}: {len(missing)} of the cases it was asked to diagnose have no "
                f"result line yet ({_names(missing)}); the summary covers the {n} that do"] if missing else []
    missing = store.missing_results(manifest, case_ids)
    if missing:
        what = (f"{store.results_path}: {len(missing)} case(s) of this complete run have no result line: "
                f"{_names(missing)} (run.json lists {len(manifest.cases or ())} cases, results.jsonl holds {n} lines)")
    else:
        before = _summarised_cases(store)
        if before is None or before <= n:
            return []
        have = set(case_ids)
        folders = sorted(d.name for d in (store.root / "cases").glob("*") if d.is_dir() and d.name not in have)
        what = (f"{store.results_path}: holds {n} result lines, but the summary.json it would replace counted {before} "
                "cases: lines were lost since the run was summarised"
                + (f" (case folders without a line: {_names(folders)})" if folders else ""))
    if not allow_missing:
        raise RescoreError(
            f"{what}. Nothing was rewritten: re-scoring would replace the summary with one over fewer cases. "
            f"`diageval run` into this folder resumes the run and diagnoses the missing cases again; "
            f"`diageval score --allow-missing {store.root}` re-scores the {n} cases that are there."
        )
    return [f"{what}; re-scoring the {n} that are there (--allow-missing)"]


def _summarised_cases(store: RunStore) -> int | None:
    """How many cases the ``summary.json`` in the folder counted, if there is a readable one (of any schema)."""
    try:
        counts = json.loads(store.summary_path.read_bytes()).get("counts", {})
    except (OSError, ValueError, RecursionError, AttributeError):
        return None
    cases = counts.get("cases") if isinstance(counts, dict) else None
    return cases if isinstance(cases, int) and not isinstance(cases, bool) else None


def summarize_run(store: RunStore, manifest: RunInfo) -> tuple[list[CaseResult], Summary]:
    """Summarise every result in the folder and write ``summary.json``."""
    results = store.read_results()
    more = [each.read_results() for each in store.repeat_stores(manifest.repeats)[1:]]
    d = manifest.diagnoser
    summary = summarize(
        results,
        more_repeats=more or None,
        diagnoser=DiagnoserInfo(spec=d.spec, name=d.name, version=d.version, reference=d.reference, self_test=d.self_test,
                                isolation=manifest.isolation, claims=d.claims),
        case_set_hash=manifest.case_set_hash,
        taxonomy_version=manifest.taxonomy_version,
    )
    atomic_write_text(store.summary_path, summary.model_dump_json(indent=2) + "\n")
    return results, summary


def score_diagnosis_file(case_id: str, diagnosis_path: Path, cases_dir: Path | None = None,
                         limits: DiagnosisLimits = DEFAULT_LIMITS) -> CaseResult:
    """Load case ``case_id`` from the corpus at ``cases_dir`` and score the diagnosis in ``diagnosis_path``.

    Raises ``KeyError`` (with close matches) for an unknown case, :class:`CaseLoadError` for a corpus with
    bad cases and :class:`DiagnosisParseError` for a bad diagnosis file (over ``limits``, not UTF-8, not a
    diagnosis: at most ``limits.max_bytes + 1`` bytes are ever read). No measured impact or timing is
    known here (nothing was recorded or run), so impact error and seconds stay empty.
    """
    case_set = load_case_set(cases_dir)
    case = case_set.get(case_id).case
    diagnosis = read_diagnosis_file(diagnosis_path, limits)
    return score_case(case, diagnosis, taxonomy=case_set.taxonomy)
