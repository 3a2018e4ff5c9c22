"""``diageval run``: prepare evidence for the selected cases, run a diagnoser on each, score, save.

The pipeline, in two phases:

1. **Evidence**, one case after another in this process: :func:`diageval.recording.prepare_case` records (or
   finds cached) the bundle and its manifestation check, under the run's
   :class:`~diageval.recording.RecordingPolicy` (device, data folder, in-job monitor). A recording that fails is a
   ``harness_error``, a positive case whose injection did not manifest is ``invalid``; both are saved
   at once and never blamed on the diagnoser. Evidence comes first, all of it, because a recording is a
   timing measurement: a diagnoser busy on the same cores would distort it.
2. **Diagnosis**, ``jobs`` cases at a time: each job owns a slot of the hosted diagnoser
   (:mod:`diageval.hosting`: a long-lived worker process for in-process diagnosers, a fresh box per case
   for ``cmd:``), in this process (``--executor local``) or on the workers of a Ray cluster (``--executor
   ray[:ADDRESS]``: each slot opened on its node by the same hosting code; results come back here), each in a sandbox that sees a private, checked copy of one bundle at a time and nothing
   of the checkout, the cache, the cases or the runs; a crash, a hang past the timeout, a box limit
   broken or an invalid output becomes that case's status and the run goes on. Each case is scored and its line appended to
   ``results.jsonl`` the moment it ends. A cached bundle whose files no longer match its ``bundle.json``
   is a ``harness_error`` naming the file, and is recorded again once the diagnoses are over.

Both phases take the cases in seeded shuffles (the seed is in ``run.json``), each its own, and the bundle
ids a diagnoser sees are drawn at random per run: neither the order of calls nor an id says which case it
is, and the evidence phase's progress lines (which name the cases) say nothing of the diagnosis order.
Nothing the run writes outside its folder while a box is alive names a case: the diagnosis phase's progress
lines carry counts (cases done, statuses so far), and the case ids with their statuses are printed once,
in id order, after the last box is closed (a log tee'd where a ``cmd:`` line can name it is another file
than the harness's own stderr, which the box refuses). The run folder (results, diagnoses, the worker log)
names cases, and no box is shown a run folder (:mod:`diageval.hosting`).
Only the harness writes the run folder, and it holds the folder's lock (``.lock``) while it does: a
second ``diageval run`` into the same folder is refused with the pid that holds it.

Ctrl-C (or SIGTERM) kills the diagnoses in flight, discards their unfinished cases, marks the run
``interrupted`` and keeps every finished case; running the same command again resumes. The default run
id is ``<diagnoser name>-<case-set hash[:8]>`` so that it does.

Size: ~560 lines, over the ~400 the project aims at: the run's two phases with their resume, interrupt
and re-record bookkeeping read best in one place; everything with a job of its own (recording and its checks of
the evidence, hosting, the sandbox, the case folders, the store, grading) is a module of its own.

Evidence tiers (``--evidence``, :mod:`diageval.cases.tiers`): the diagnoser gets the case's bundle cut to
the tier (:mod:`diageval.run.evidence_tiers`), and each case is scored as
:func:`~diageval.cases.tiers.case_under_tier` builds it (labels the tier cannot show taken out); scoring
itself is unchanged. ``run.json`` names the tier and what each case's bundle weighed.

Repeats (``--repeats K``, issue 41): evidence is prepared once per case; phase 2 then runs once per repeat, each
into its own store (:meth:`~diageval.run.store.RunStore.repeat_stores`: the run folder, then ``repeats/<k>/``)
with its own random bundle ids, diagnosing the cases that repeat still lacks; a case whose evidence fails ends so
in every repeat that needs it.

Labels: only the built-ins the harness itself lists (``prior`` and ``oracle``) get the corpus, with the
map from this run's random bundle ids to case ids, through :meth:`diageval.hosting.Host.handover`.
"""

from __future__ import annotations

import contextlib
import random
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field, field_validator

from diageval.bundle.model import EvidenceBundle
from diageval.cases.load import CaseSet, LoadedCase
from diageval.cases.tiers import FULL, EvidenceTier, case_under_tier
from diageval.errors import DiagevalError
from diageval.fileio import atomic_write_text
from diageval.executors import DiagnoseTask, ExecutorSpec, HarnessFailure, executor_for
from diageval.hosting import Attempt, Host, HostPolicy, remove_stale_boxes
from diageval.progress import Progress
from diageval.recording import (
    CaseEnd,
    EvidenceFn,
    PreparedEvidence,
    RecordingPolicy,
    monitor_for_spec,
    prepare_case,
    prepare_evidence,
)
from diageval.run.evidence_tiers import EvidenceSize, TierSourceDamaged, evidence_size, tier_bundle
from diageval.run.grade import summarize_run
from diageval.run.store import RunDiagnoser, RunInfo, RunStore, SkippedCase, git_sha, now, run_env
from diageval.scoring.results import EvidenceFacts, Status

MAX_REPEATS = 20
"""--repeats' bound: the repeats view judges consistency (stable, flaky, catastrophic); a few repeats already show
a flaky case, and each repeat is a whole run's diagnoses (an agent's dollars K times over)."""


class RunError(DiagevalError):
    """The run cannot start or had to stop (bad options, a diagnoser that cannot start here)."""


class RunOptions(BaseModel):
    """What to run and where to keep it (what the diagnoser is allowed is the :class:`HostPolicy`, what recording
    does, on which device, the :class:`~diageval.recording.RecordingPolicy`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    cases_dir: Path | None = Field(None, description="the case folder the case set came from (default: the built-in corpus)")
    out_dir: Path | None = Field(None, description="the folder of run folders (default: ./runs)")
    run_id: str | None = None
    jobs: int = Field(1, ge=1)
    seed: int | None = Field(None, description="the shuffle of the cases (default: drawn at random, or the resumed run's)")
    evidence: EvidenceTier = Field(FULL, description="the evidence tier the diagnoser gets (diageval.cases.tiers)")
    executor: ExecutorSpec = Field(ExecutorSpec(), description="where diagnoses run: local, ray or ray:ADDRESS (diageval.executors)")
    repeats: int = Field(1, ge=1, le=MAX_REPEATS, description="diagnose each case this many times (its evidence is "
                         "prepared once); repeats 2..K are kept in repeats/<k>/ (diageval.run.store)")

    @field_validator("executor", mode="before")
    @classmethod
    def _executor(cls, value: object) -> object:
        return ExecutorSpec.parse(value) if isinstance(value, str) else value


@dataclass
class RunOutcome:
    run_dir: Path
    info: RunInfo
    results: list[Any]  # CaseResult, every case in the folder
    summary: Any  # diageval.scoring.summary.Summary
    counts: dict[str, int]  # this invocation: prepared (evidence), diagnosed, resumed (already done), skipped


@dataclass
class _Ready:
    """A case whose evidence is ready for the diagnoser: the bundle of its tier, what scoring copies (its ids
    those of that bundle) and what the bundle weighs."""

    loaded: LoadedCase
    bundle_dir: Path
    facts: EvidenceFacts
    size: EvidenceSize | None = None


def default_run_id(diagnoser_name: str, case_set_hash: str, evidence: EvidenceTier = FULL) -> str:
    """``<diagnoser>-<case-set hash[:8]>``, with the tier before the hash when it is not ``full``."""
    tier = "" if evidence == FULL else f"{evidence}-"
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', diagnoser_name)}-{tier}{case_set_hash[:8]}"


def diagnosis_order(case_ids: Iterable[str], seed: int) -> list[str]:
    """The order a run with ``seed`` takes its cases in: a shuffle of the sorted ids."""
    ids = sorted(case_ids)
    random.Random(seed).shuffle(ids)
    return ids


def evidence_shuffle(case_ids: Iterable[str], seed: int) -> list[str]:
    """The order evidence is prepared in: a shuffle of its own (the progress lines of this phase name the
    cases, so they must say nothing of the diagnosis order)."""
    ids = sorted(case_ids)
    random.Random(f"evidence-{seed}").shuffle(ids)
    return ids


def run_diagnoser(
    spec: str,
    case_set: CaseSet,
    options: RunOptions = RunOptions(),
    policy: HostPolicy = HostPolicy(),
    *,
    recording: RecordingPolicy = RecordingPolicy(),
    evidence_fn: EvidenceFn | None = None,
    cuda_device_count: Callable[[], int] | None = None,
    progress: TextIO | Literal["stderr"] | None = "stderr",
) -> RunOutcome:
    """Run the diagnoser ``spec`` on the selected cases of ``case_set`` into ``<out_dir>/<run_id>``
    (resuming it), hosted under ``policy`` (its ``runs_dir`` and ``cases_dir`` are this run's, whatever
    the caller set: they are what the box must hide), its evidence prepared under ``recording`` (its ``monitor`` is
    this run's: set when ``spec`` is an in-job monitor, whatever the caller set).

    ``progress``: a stream (a live bar on a terminal, one line per case otherwise; :mod:`diageval.progress`),
    ``"stderr"`` (whatever ``sys.stderr`` is when a line is written) or None for silence. ``evidence_fn``
    and ``cuda_device_count`` stand in for recording and for torch in tests.
    """
    from diageval.paths import default_cases_dir, default_runs_dir

    try:
        selected = case_set.select(options.case_ids, options.tags)
    except KeyError as exc:
        raise RunError(str(exc.args[0])) from None
    if not selected:
        raise RunError(f"no case matches (cases: {list(options.case_ids) or 'all'}, tags: {list(options.tags) or 'any'})")
    runnable, skipped = _split_by_device(selected, recording.device, cuda_device_count or _cuda_device_count)
    recording = _for_monitor(spec, recording, options.evidence)
    runs_root = Path(options.out_dir or default_runs_dir())
    cases_dir = Path(options.cases_dir or default_cases_dir())
    policy = policy.model_copy(update={"runs_dir": runs_root, "cases_dir": cases_dir})
    show = Progress(progress)
    for stale in remove_stale_boxes():
        show.line(f"removed {stale}, left by a diageval process that was killed")
    host = Host.open(spec, policy)
    try:
        store = RunStore(runs_root / (options.run_id or default_run_id(host.name, case_set.hash, options.evidence)))
        with store.lock():
            return _run_locked(host, case_set, store, show, runnable=runnable, skipped=skipped, cases_dir=cases_dir,
                               options=options, recording=recording, evidence_fn=evidence_fn)
    finally:
        host.close()
        show.close()


def _run_locked(hosted: Host, case_set: CaseSet, store: RunStore, show: Progress, *, runnable: list[LoadedCase],
                skipped: list[SkippedCase], cases_dir: Path, options: RunOptions, recording: RecordingPolicy,
                evidence_fn: EvidenceFn | None) -> RunOutcome:
    previous = store.read_info() if store.info_path.is_file() else None
    seed = options.seed
    if seed is None:
        seed = previous.seed if previous is not None and previous.seed is not None else secrets.randbits(32)
    jobs, policy = options.jobs, hosted.policy
    isolation, note = hosted.isolation.kind, hosted.isolation.note
    if previous is not None and previous.isolation == "none" and isolation != "none":  # a run is as isolated as its weakest part
        isolation, note = "none", f"an earlier part of this run had no sandbox ({previous.isolation_note})"
    if hosted.isolation.kind == "none":
        show.line(f"isolation: none ({note}): the diagnoser can read every file this user can; this run is never ranked")
    manifest = store.begin(
        RunInfo(
            run_id=store.root.name,
            git_sha=git_sha(),
            diagnoser=RunDiagnoser(
                spec=hosted.spec, name=hosted.name, version=hosted.version, origin=hosted.origin,
                reference=hosted.reference, self_test=hosted.self_test, claims=hosted.claims,
            ),
            case_set_hash=case_set.hash,
            taxonomy_version=case_set.taxonomy.version,
            cases_dir=str(cases_dir.resolve()),
            env=_env_with_executor(options.executor),
            device=recording.device,
            timeout_s=policy.timeout_s,
            jobs=jobs,
            isolation=isolation,
            isolation_note=note,
            allow_network=policy.allow_network,
            box_limits=hosted.limits_note(),
            seed=seed,
            max_diagnosis_bytes=policy.output.max_bytes,
            max_findings=policy.output.max_findings,
            started=now(),
            skipped=skipped,
            cases=sorted(lc.case.id for lc in runnable),
            evidence_tier=options.evidence,
            evidence_sizes=previous.evidence_sizes if previous is not None else {},
            repeats=options.repeats,
        )
    )
    for s in skipped:
        show.line(f"skip {s.case_id}: {s.reason}")
    stores = store.repeat_stores(options.repeats)  # the run folder itself is repeat 1
    done_by: list[set[str]] = []
    for each in stores:
        torn = each.set_aside_torn_tail()
        if torn:
            show.line(torn)
        done_by.append(each.drop_retryable())
    order = {cid: i for i, cid in enumerate(diagnosis_order([lc.case.id for lc in runnable], seed))}
    todo = sorted((lc for lc in runnable if any(lc.case.id not in done for done in done_by)),
                  key=lambda lc: order[lc.case.id])
    evidence_order = evidence_shuffle([lc.case.id for lc in todo], seed)
    counts = {"resumed": len(runnable) - len(todo), "prepared": 0, "diagnosed": 0, "skipped": len(skipped)}
    if counts["resumed"]:
        show.line(f"resuming {store.root}: {counts['resumed']} case(s) already done, {len(todo)} to go")
    record_there = recording.monitor is None  # a monitor's cases are recorded here, with it in the job
    pipeline = _Pipeline(hosted, case_set, store, jobs=jobs, show=show, tier=options.evidence, executor=options.executor,
                         recording=recording)
    pipeline.needs = {lc.case.id: [each for each, done in zip(stores, done_by) if lc.case.id not in done] for lc in todo}
    try:
        by_id = {lc.case.id: lc for lc in todo}
        with (pipeline.executor.session() if todo else contextlib.nullcontext()):  # one Ray for both phases
            prepared = pipeline.prepare_all([by_id[cid] for cid in evidence_order], evidence_fn,
                                            record_there=record_there)
            ready = sorted(prepared, key=lambda r: order[r.loaded.case.id])
            sizes = {**manifest.evidence_sizes, **{r.loaded.case.id: r.size for r in ready if r.size is not None}}
            manifest = manifest.model_copy(update={"evidence_sizes": sizes})
            store.write_info(manifest)
            counts["prepared"] = len(todo)
            for each, done in zip(stores, done_by):  # recorded once above; only the diagnosis repeats
                counts["diagnosed"] += pipeline.diagnose_all([r for r in ready if r.loaded.case.id not in done], each)
        pipeline.record_damaged_again(evidence_fn)
        results, summary = summarize_run(store, manifest)
    except KeyboardInterrupt:
        store.write_info(manifest.model_copy(update={"status": "interrupted", "finished": now()}))
        show.line(f"interrupted: finished cases are kept in {store.root}; run the same command again to resume")
        raise
    except Exception as exc:
        store.write_info(manifest.model_copy(update={"status": "failed", "finished": now(), "error": str(exc)}))
        raise
    manifest = manifest.model_copy(update={"status": "complete", "finished": now()})
    store.write_info(manifest)
    return RunOutcome(run_dir=store.root, info=manifest, results=results, summary=summary, counts=counts)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM (a CI job cancelled, ``kill``) like Ctrl-C while a run is going: stop cleanly."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- the two phases ---------------------------------------------------------------------------------


class _Pipeline:
    def __init__(self, hosted: Host, case_set: CaseSet, store: RunStore, *, jobs: int, show: Progress,
                 tier: EvidenceTier = FULL, executor: ExecutorSpec = ExecutorSpec(),
                 recording: RecordingPolicy = RecordingPolicy()):
        self.hosted = hosted
        self.recording = recording
        self.executor = executor_for(executor)
        self.tier = tier
        self.case_set = _under_tier(case_set, tier)  # as scored and as handed to prior and oracle
        self.store = store
        self.jobs = jobs
        self.show = show
        self._write_lock = threading.Lock()
        self.damaged: list[LoadedCase] = []  # cached bundles that failed their checksums: recorded again
        self.needs: dict[str, list[RunStore]] = {}  # case id -> the repeats' stores still without its line

    def prepare_all(self, todo: list[LoadedCase], evidence_fn: EvidenceFn | None, *,
                    record_there: bool = False) -> list[_Ready]:
        """Every case's evidence, here one after another; with ``record_there``, the cases the executor records
        itself on its own machines (``ray``: the live cases, on the cluster's recorder nodes, one per node at a
        time), after the
        others, their answers checked here exactly as a local preparation's."""
        ready: list[_Ready] = []
        there = [lc for lc in todo if record_there and self.executor.records(lc.case)]
        here = [lc for lc in todo if not (record_there and self.executor.records(lc.case))]
        shown = 0

        def finish(loaded: LoadedCase, fn: EvidenceFn | None, start: float) -> None:
            nonlocal shown
            outcome = self._prepare(loaded, fn)
            if isinstance(outcome, _Ready):
                ready.append(outcome)
                status = "ready"
            else:
                status = outcome.status
                for each in self.needs.get(loaded.case.id, [self.store]):  # every repeat that needs it ends so
                    self._save(loaded, None, outcome.status, outcome.facts, error=outcome.error, store=each)
            shown += 1
            self.show.step("evidence", shown, len(todo), loaded.case.id, status, time.perf_counter() - start)

        for loaded in here:
            finish(loaded, evidence_fn, time.perf_counter())
        if there:
            def answered(i: int, answer: Any, seconds: float) -> None:  # seconds: the recording's, on its node
                finish(there[i], _answered(answer), time.perf_counter() - seconds)

            self.executor.prepare(there, evidence_fn or prepare_evidence, answered, policy=self.recording)
        sharing: dict[str, list[str]] = {}
        for r in ready:
            sharing.setdefault(r.facts.bundle_id, []).append(r.loaded.case.id)
        for bundle_id, ids in sharing.items():
            if len(ids) > 1:  # identical recording specs: one piece of evidence, judged against several labels
                self.show.line(f"note: cases {', '.join(ids)} share bundle {bundle_id} (identical workload and faults)")
        return ready

    def _prepare(self, loaded: LoadedCase, evidence_fn: EvidenceFn | None) -> "_Ready | CaseEnd":
        """The case's evidence (recording's face), then cut to the run's tier; or how the case ends there."""
        evidence = prepare_case(loaded, self.recording, prepare=evidence_fn or prepare_evidence)
        if isinstance(evidence, CaseEnd):
            return evidence
        bundle_dir, facts = evidence.bundle_dir, evidence.facts
        ids = EvidenceFacts(bundle_id=facts.bundle_id, bundle_sha256=facts.bundle_sha256, rank_draw=facts.rank_draw)
        try:  # the tier the diagnoser gets: an evidence edit of the bundle (diageval.run.evidence_tiers)
            shown = tier_bundle(bundle_dir, self.tier)
        except TierSourceDamaged as exc:
            with self._write_lock:
                self.damaged.append(loaded)
            return CaseEnd(status="harness_error", error=f"{exc}; the cache entry is recorded again after the diagnoses",
                           facts=ids)
        except (OSError, ValueError) as exc:
            return CaseEnd(status="harness_error", error=f"cutting the bundle to the {self.tier} tier failed: {exc}",
                           facts=ids)
        if shown != bundle_dir:
            from diageval.fileio import sha256_file

            facts = facts.model_copy(update={"bundle_id": EvidenceBundle.open(shown).bundle_id,
                                             "bundle_sha256": sha256_file(shown / "bundle.json")})
        return _Ready(loaded, shown, facts, evidence_size(shown, bundle_dir))

    def diagnose_all(self, ready: list[_Ready], store: RunStore | None = None) -> int:
        """Diagnose ``ready`` with ``jobs`` slots on the run's executor (``local`` or ``ray``,
        :class:`diageval.executors.Executor`) into ``store`` (a repeat's; default the run folder); return how
        many cases finished. Each finished case is scored and saved here, in this process, whatever executed it."""
        store = store or self.store
        if not ready:
            return 0
        shown_ids = {r.loaded.case.id: secrets.token_hex(16) for r in ready}  # random per run
        handover = self.hosted.handover(_as_drawn(self.case_set, {r.loaded.case.id: r.facts.rank_draw for r in ready}),
                                        {shown_ids[r.loaded.case.id]: r.loaded.case.id for r in ready},
                                        {shown_ids[r.loaded.case.id]: r.facts.shown_values for r in ready
                                         if r.facts.shown_values})
        tasks = [DiagnoseTask(r.bundle_dir, r.facts.bundle_sha256, shown_ids[r.loaded.case.id],
                              store.case_dir(r.loaded.case.id)) for r in ready]
        finished = 0
        total = len(ready)
        ended: dict[str, tuple[str, float | None]] = {}  # case id -> status, seconds: shown once every box is closed
        tally: dict[str, int] = {}

        def done(index: int, outcome: Attempt | HarnessFailure) -> None:
            nonlocal finished
            item = ready[index]
            attempt = outcome if isinstance(outcome, Attempt) else None
            if isinstance(outcome, HarnessFailure):
                error = outcome.error
                if outcome.bundle_damaged:
                    with self._write_lock:
                        self.damaged.append(item.loaded)
                    error += "; the cache entry is recorded again after the diagnoses"
                status = self._save(item.loaded, None, "harness_error", item.facts, error=error, store=store)
            else:
                status = self._save(item.loaded, attempt, outcome.status, item.facts, error=outcome.error,
                                    seconds=outcome.seconds, store=store)
            seconds = attempt.seconds if attempt else None
            with self._write_lock:
                finished += 1
                n = finished
                ended[item.loaded.case.id] = (status, seconds)
                tally[status] = tally.get(status, 0) + 1
                so_far = dict(tally)
            self.show.tally("diagnose", n, total, so_far, seconds)  # counts only: other boxes are still alive

        if tasks:
            self.executor.run(self.hosted, tasks, done, jobs=self.jobs, handover=handover, log_path=self.store.log_path)
        for case_id, (status, seconds) in sorted(ended.items()):  # every box is closed: the ids may be named
            secs = f"{seconds:7.2f} s" if seconds is not None else ""
            self.show.line(f"diagnosed {case_id:<40} {status:<15} {secs}".rstrip())
        return finished

    def record_damaged_again(self, evidence_fn: EvidenceFn | None) -> None:
        """Record again (after the diagnoses: a recording is a timing measurement) every cached bundle
        that failed its checksums; those cases stay ``harness_error`` and are retried on resume."""
        forced = self.recording.model_copy(update={"force": True})
        for loaded in self.damaged:
            start = time.perf_counter()
            again = prepare_case(loaded, forced, prepare=evidence_fn or prepare_evidence)
            failed = isinstance(again, CaseEnd) and again.status != "invalid"  # invalid: recorded, judged so again
            status = again.error if failed else "recorded again"
            self.show.step("re-record", 1, 1, loaded.case.id, status, time.perf_counter() - start)

    def _save(self, loaded: LoadedCase, attempt: Attempt | None, status: Status, facts: EvidenceFacts, *,
              error: str | None = None, seconds: float | None = None, store: RunStore | None = None) -> str:
        """Score one finished case and record it into ``store`` (default the run folder): diagnosis file first,
        then its results line."""
        from diageval.scoring.verdicts import score_case

        store = store or self.store
        diagnosis = attempt.diagnosis if attempt is not None else None
        # the labels' ranks where the recording put them, then those the tier cannot show taken out
        case = case_under_tier(loaded.case.with_rank_draw(facts.rank_draw), self.tier)
        record, _ = store.read_trajectory(loaded.case.id) if attempt is not None else (None, None)
        usage = record.usage if record is not None else None  # an unreadable one is reported by the page, not trusted
        result = score_case(case, diagnosis, taxonomy=self.case_set.taxonomy, status=status, seconds=seconds,
                            error=error, usage=usage, evidence=facts)
        with self._write_lock:
            if diagnosis is not None:
                atomic_write_text(store.diagnosis_path(loaded.case.id), diagnosis.model_dump_json(indent=2) + "\n")
            store.append_result(result)
        return result.status


# --- helpers ----------------------------------------------------------------------------------------


def _answered(answer: PreparedEvidence | BaseException) -> EvidenceFn:
    """An evidence function that gives ``answer`` (prepared elsewhere), or raises it when it is an exception."""

    def given(loaded: LoadedCase, policy: RecordingPolicy) -> PreparedEvidence:
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return given


def _under_tier(case_set: CaseSet, tier: EvidenceTier) -> CaseSet:
    """``case_set`` with every case as scored under ``tier`` (same files, same hash); ``full``: itself."""
    if tier == FULL:
        return case_set
    cases = [lc.model_copy(update={"case": case_under_tier(lc.case, tier)}) for lc in case_set.cases]
    return case_set.model_copy(update={"cases": cases})


def _as_drawn(case_set: CaseSet, draws: dict[str, list[int] | None]) -> CaseSet:
    """``case_set`` with each case of ``draws`` labeled as its recording drew it (what ``oracle`` and ``prior``
    are handed: the labels the run scores)."""
    
    if not any(draws.values()):
        return case_set
    cases = [lc.model_copy(update={"case": lc.case.with_rank_draw(draws.get(lc.case.id))}) for lc in case_set.cases]
    return case_set.model_copy(update={"cases": cases})


def _env_with_executor(executor: ExecutorSpec) -> Any:
    """This machine's environment, and where the diagnoses ran when that was not here (``executor``)."""
    env = run_env()
    return env if executor == ExecutorSpec() else env.model_copy(update={"executor": str(executor)})


def _split_by_device(
    selected: list[LoadedCase], device: str, cuda_device_count: Callable[[], int]
) -> tuple[list[LoadedCase], list[SkippedCase]]:
    """Cases this machine can record on ``device``, and the rest with the reason (one CUDA device per rank)."""
    needs = [lc for lc in selected if lc.case.requires.device == "cuda" and lc.case.recorded is None]
    if not needs and device != "cuda":
        return selected, []
    available = cuda_device_count()
    if device == "cuda" and available == 0:
        raise RunError("--device cuda, but torch sees no CUDA device here")
    runnable, skipped = [], []
    for lc in selected:
        if lc.case.evidence_kind == "recorded":  # imported (a recorded job or regression), not recorded here: no device needed
            runnable.append(lc)
            continue
        req = lc.case.requires
        ranks = lc.case.workload.world_size
        reason = None
        if req.device == "cuda" and device == "cpu":
            reason = "needs CUDA; --device cpu"
        elif req.device == "cuda" and available < max(req.min_devices, ranks):
            reason = f"needs {max(req.min_devices, ranks)} CUDA device(s); this machine has {available}"
        elif device == "cuda" and available < ranks:
            reason = f"--device cuda: its {ranks} ranks need {ranks} CUDA devices; this machine has {available}"
        if reason:
            skipped.append(SkippedCase(case_id=lc.case.id, reason=reason))
        else:
            runnable.append(lc)
    return runnable, skipped


def _for_monitor(spec: str, recording: RecordingPolicy, tier: EvidenceTier) -> RecordingPolicy:
    """For an in-job monitor's spec (:func:`diageval.recording.monitor_for_spec`): its evidence is each case recorded
    with the monitor installed (a case no monitor can watch ends ``unavailable``, saying why, so the run keeps
    the board's case count). Any other spec: no monitor."""
    monitor = monitor_for_spec(spec)
    if monitor is not None and tier != FULL:
        raise RunError(f"{spec} is an in-job monitor: it watches the live job, so --evidence {tier} does not apply to it")
    return recording.model_copy(update={"monitor": monitor.name if monitor is not None else None})


def _cuda_device_count() -> int:
    from diageval.recording import cuda_device_count

    return cuda_device_count()
