"""What the HTML report shows, gathered from run folders through the project's typed readers.

Each run folder is read as :class:`ReportRun` through the run store's typed readers (``run.json`` and
``results.jsonl``: :meth:`~diageval.run.store.RunStore.load`; ``summary.json``:
:meth:`~diageval.run.store.RunStore.read_summary`) and every saved diagnosis through the one diagnosis
reader (:func:`~diageval.diagnosis.read_diagnosis_file`). The case files the runs were made from give titles and labels (ranks, steps,
symptoms); an agent's ``trajectory.json`` per case through the run store's reader
(:meth:`~diageval.run.store.RunStore.read_trajectory`); the manifestation test's measurement (ratio, noise, z, p-value, repeat pairs) from the results
(:class:`~diageval.scoring.results.ManifestationMeasure`), never from a bundle cache.

Decided here (the design is silent):

* The runs must be comparable exactly as for the markdown leaderboard
  (:func:`~diageval.reports.leaderboard.check_comparable`), and are listed in its order.
* A case's measured impact and manifestation measurement are the first run's that has one (every run of one
  case set reads it from the same verification); a run whose impact disagrees is named in the case's notes.
* When the case files at ``run.json``'s ``cases_dir`` are missing or changed since (another case-set
  hash), the page still renders from the results alone (labeled causes and their ranks), and says so.
* The per-cause misleading rate is computed over the cases labeled with that cause (and, as rows of
  their own, over healthy controls and abstain cases): the metric table's ``misleading_rate`` (misleading
  claims / claims) over that subset, with the interval the table gives it
  (:func:`diageval.scoring.metrics.compute_metrics`), so each cell has its n and interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from diageval.cases.load import CaseLoadError, CaseSet, load_case_set
from diageval.run.store import AgentRecord  # the trajectory format, as the run store reads it
from diageval.diagnosis import Diagnosis, DiagnosisParseError, read_diagnosis_file
from diageval.reports.leaderboard import check_comparable, is_ranked, rank_key
from diageval.reports.report import ReportError
from diageval.run.store import LoadedRun, RunInfo, RunReadError, RunStore
from diageval.scoring.metrics import METRICS, MetricValue, compute_metrics
from diageval.scoring.results import ANSWERED_STATUSES, CaseResult, ManifestationMeasure
from diageval.scoring.summary import Summary
from diageval.scoring.tallies import tally_table

HEALTHY_ROW = "healthy controls"
ABSTAIN_ROW = "abstain cases"


@dataclass
class ReportRun:
    loaded: LoadedRun  # run.json and results.jsonl, as the run store reads them
    summary: Summary
    diagnoses: dict[str, Diagnosis]  # case id -> saved diagnosis (answered cases only)
    problems: list[str] = field(default_factory=list)  # diagnoses that could not be read
    trajectories: dict[str, AgentRecord] = field(default_factory=dict)  # case id -> an agent's record, where one is

    @property
    def name(self) -> str:
        return self.summary.diagnoser.name

    @property
    def root(self) -> Path:
        return self.loaded.root

    @property
    def info(self) -> RunInfo:
        return self.loaded.info

    @cached_property
    def results(self) -> dict[str, CaseResult]:
        """Case id -> result."""
        return {r.case_id: r for r in self.loaded.results}


@dataclass
class ReportInputs:
    runs: list[ReportRun]  # in leaderboard order: ranked, then self-tests
    given: list[ReportRun]  # in the order the run folders were given (compare: A, then B)
    case_set: CaseSet | None  # the case files, when they still match the runs
    case_note: str | None  # why the case files are not used, when they are not
    manifestations: Mapping[str, ManifestationMeasure]  # case id -> as the first run with one carries it


def read_run(run_dir: Path) -> ReportRun:
    """One run folder through the run store's typed readers; :class:`ReportError` names the file and field."""
    store = RunStore(Path(run_dir))
    try:
        loaded, summary = store.load(), store.read_summary()
    except RunReadError as err:
        raise ReportError(str(err)) from None
    diagnoses, problems, trajectories = {}, [], {}
    for r in loaded.results:
        record, problem = store.read_trajectory(r.case_id)  # an agent's; a file that does not fit is named, not shown
        if record is not None:
            trajectories[r.case_id] = record
        if problem is not None:
            problems.append(problem)
        if r.status not in ANSWERED_STATUSES:
            continue
        try:
            diagnoses[r.case_id] = read_diagnosis_file(store.diagnosis_path(r.case_id))
        except DiagnosisParseError as err:
            problems.append(str(err))
    return ReportRun(loaded=loaded, summary=summary, diagnoses=diagnoses, problems=problems, trajectories=trajectories)


def order_runs(runs: list[ReportRun]) -> list[ReportRun]:
    """The markdown leaderboard's order: ranked runs by its rank key, then self-tests by name."""
    ranked = sorted((r for r in runs if is_ranked(r.summary.diagnoser)), key=lambda r: rank_key(r.summary))
    unranked = sorted((r for r in runs if not is_ranked(r.summary.diagnoser)), key=lambda r: r.name)
    return ranked + unranked


def gather(run_dirs: list[Path]) -> ReportInputs:
    """Read the runs, check they share a case set, and find their case files."""
    runs = [read_run(Path(d)) for d in run_dirs]
    try:
        check_comparable([r.summary for r in runs])
    except ValueError as err:
        raise ReportError(f"{err} (runs: {', '.join(map(str, run_dirs))})") from None
    given, runs = runs, order_runs(runs)
    first = runs[0].info
    case_set, note = None, None
    try:
        case_set = load_case_set(Path(first.cases_dir))
    except (CaseLoadError, OSError, ValueError) as err:
        note = f"the case files at {first.cases_dir} cannot be read ({str(err).splitlines()[0]}): titles and symptoms are not shown"
    if case_set is not None and case_set.hash != first.case_set_hash:
        note = (f"the case files at {first.cases_dir} changed since these runs (case-set hash {case_set.hash[:12]} "
                f"now, {first.case_set_hash[:12]} then): titles and symptoms are not shown")
        case_set = None
    manifestations: dict[str, ManifestationMeasure] = {}
    for run in runs:
        for case_id, result in run.results.items():
            if result.manifestation is not None:
                manifestations.setdefault(case_id, result.manifestation)
    return ReportInputs(runs=runs, given=given, case_set=case_set, case_note=note, manifestations=manifestations)


def case_groups(runs: list[ReportRun]) -> dict[str, list[str]]:
    """Rows of the per-cause heatmap: each labeled cause -> the case ids labeling it; then healthy
    controls and abstain cases. Built from the first run's scored results (all runs share the labels)."""
    groups: dict[str, list[str]] = {}
    healthy, abstain = [], []
    for r in sorted(runs[0].results.values(), key=lambda r: r.case_id):
        if not r.scored:
            continue
        for c in dict.fromkeys(r.categories):
            groups.setdefault(c, []).append(r.case_id)
        if r.expect == "healthy":
            healthy.append(r.case_id)
        elif r.expect == "abstain":
            abstain.append(r.case_id)
    out = dict(sorted(groups.items()))
    if healthy:
        out[HEALTHY_ROW] = healthy
    if abstain:
        out[ABSTAIN_ROW] = abstain
    return out


def misleading_rate(run: ReportRun, case_ids: list[str]) -> MetricValue:
    """Misleading claims / claims over the given cases of ``run`` (scored ones), with its interval."""
    subset = [run.results[c] for c in case_ids if c in run.results and run.results[c].scored]
    definitions = {"misleading_rate": METRICS["misleading_rate"]}
    return compute_metrics(tally_table(subset), definitions)["misleading_rate"]
