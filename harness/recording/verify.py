"""Manifestation check: record a positive case and its healthy twin in interleaved repeat pairs and test.

Step time of one step = mean over the ranks of ``t_end - t_start`` in ``steps.jsonl`` (ranks of a
data-parallel job finish a step together, so this is close to every rank's), except for
``rank_step_time_median``, which uses ``manifest.rank`` alone. The metric is taken over the labeled
step range (the union of the causes' ``steps``), or over all steps when no cause names a range.

Repeat pair ``i`` is the twin recorded, then the case: the twin's repeats are the case's own
(:func:`twin_repeat`), never another case's with the same workload. Shared twins broke the interleaving the
test stands on: in a fresh-clone CI run (8068263) 12 cases compared their recordings with twin recordings made
for another case up to five minutes earlier, and ``sliced-ops-3-mlp`` measured ratio 2.00 on two pairs where
six fresh verifies with twins recorded beside it had measured 1.26-1.35.

The decision is :mod:`diageval.recording.manifest_test`'s: per-step times of each pair (the first
:data:`~diageval.recording.manifest_test.WARMUP_STEPS` steps of a recording left out), a shift estimate per pair,
a test across pairs with a minimum effect (``min_ratio``), sequential (pairs are added until a look decides, up
to a cap). ``ratio`` is the test's estimate; ``injected`` and ``healthy`` are
medians over repeats of the metric; ``noise`` is the healthy twin's relative spread over repeats (the
difficulty's denominator, :mod:`diageval.recording.truth`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from diageval.bundle.model import EvidenceBundle, StepRecord
from diageval.cases.model import Case
from diageval.progress import Progress
from diageval.recording.cache import cache_key, ensure_bundle, note_draw, read_truth, write_truth
from diageval.recording.label_support import (
    CHECKS_VERSION, label_problems, label_support, needs_check, read_recordings, shown_support,
)
from diageval.recording.manifest_test import LOOKS, WARMUP_STEPS, manifest_test, metric_of, pairs_needed, sequential_test
from diageval.recording.truth import ControlCheck, TruthRecord, Verification

DEFAULT_REPEATS = LOOKS[0]
"""Pairs recorded before the first look (more are added when it does not decide)."""
TWIN_REPEAT_BASE = 2_000_000_000
"""Twin repeats of a verification are numbered from here (see :func:`twin_repeat`), clear of a case's own
repeats (0, 1, ...) and of a regression's blocks (:func:`diageval.recording.fleet.repeat_base`: at most 1e9
plus the regression's runs)."""

# A case's ratio moves from one verify to the next on a shared machine: the machine's speed moves (the same
# healthy twin took 13.9 ms a step in one run, 8.5 ms in another) and a fault's cost does not scale with it.
# Over three runs of the corpus on 2 cores with the same recording code (47 cases verified in all three,
# n = 141; `python benchmarks/ratio_spread.py HOME...` prints it from their truth records), a run's ratio fell
# below 0.73x the case's median in 5% of runs and below 0.66x in 2.5%. A case whose usual ratio is under this
# margin (about 1 / 0.73) times its min_ratio fails one verify in twenty or more though nothing changed:
# `diageval verify` names it, so that its author raises the severity or lowers min_ratio.
RUN_TO_RUN_MARGIN = 1.35


def labeled_step_range(case: Case) -> tuple[int, int]:
    ranges = [c.steps for c in case.labels.causes if c.steps is not None]
    if not ranges:
        return 0, case.workload.steps
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


def step_times(steps: list[StepRecord], step_range: tuple[int, int], rank: int | None = None) -> list[float]:
    """Per-step durations in [start, stop): mean over ranks, or one rank's."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for s in steps:
        if step_range[0] <= s.step < step_range[1] and (rank is None or s.rank == rank):
            by_step[s.step].append(s.duration)
    return [statistics.fmean(v) for _, v in sorted(by_step.items())]


def metric_value(steps: list[StepRecord], metric: str, step_range: tuple[int, int], rank: int | None = None) -> float:
    if metric == "rank_step_time_median":
        times = step_times(steps, step_range, rank)
    else:
        times = step_times(steps, step_range)
    if not times:
        raise ValueError(f"no steps in range {step_range}" + (f" for rank {rank}" if rank is not None else ""))
    return metric_of(times, metric)


def test_range(case: Case) -> tuple[int, int]:
    """The labeled step range without the warm-up steps, when steps remain after them."""
    start, stop = labeled_step_range(case)
    return (max(start, WARMUP_STEPS), stop) if stop > max(start, WARMUP_STEPS) else (start, stop)


def compare(case: Case, injected_steps: list[list[StepRecord]], healthy_steps: list[list[StepRecord]],
            repeats: int | None = None) -> Verification:
    """The Verification of a case from the step logs of its repeats and of its twin's (pair i = twin i, case i).

    ``repeats`` None: the sequential test over as many pairs as given; a number: one test at the full alpha
    on exactly that many pairs.
    """
    from diageval.recording.manifest_test import ALPHA

    assert case.manifest is not None
    if len(injected_steps) != len(healthy_steps):
        raise ValueError(f"case {case.id}: {len(injected_steps)} case recordings but {len(healthy_steps)} twin ones")
    rng = labeled_step_range(case)
    m = case.manifest
    inj = [metric_value(s, m.metric, rng, m.rank) for s in injected_steps]
    hea = [metric_value(s, m.metric, rng, m.rank) for s in healthy_steps]
    injected, healthy = statistics.median(inj), statistics.median(hea)
    noise = (max(hea) - min(hea)) / healthy if len(hea) > 1 else 0.0
    trng = test_range(case)
    rank = m.rank if m.metric == "rank_step_time_median" else None
    pairs = [(step_times(h, trng, rank), step_times(c, trng, rank)) for h, c in zip(healthy_steps, injected_steps)]
    if repeats is None:
        test = sequential_test(pairs, m.metric, m.min_ratio)
    else:
        test = manifest_test(pairs[:repeats], m.metric, m.min_ratio, alpha=ALPHA)
    inj_mean = statistics.median(metric_value(s, "step_time_mean", rng) for s in injected_steps)
    hea_mean = statistics.median(metric_value(s, "step_time_mean", rng) for s in healthy_steps)
    return Verification(
        metric=m.metric, min_ratio=m.min_ratio, injected=injected, healthy=healthy, ratio=test.estimate, noise=noise,
        repeats=len(inj), manifested=test.manifested, impact=max(0.0, 1.0 - hea_mean / inj_mean), test=test,
    )


def verification_subject(case: Case) -> Case:
    """The case the manifestation and label checks record: ``case`` itself, or, when every evidence edit of it
    keeps each rank's timing and says which recorded rank each derived rank shows (``scale_out``), the case
    without its edits, its labeled ranks moved to the recorded ones. Such an edit cannot change whether the
    fault happened or on which rank, so the 2-rank recordings answer both questions, without deriving a 128-
    or 1024-rank bundle for every repeat (and the label checks then compare each rank with the same rank of
    the 2-rank twin, which a scaled rank 109 has not)."""
    from diageval.recording.cache import split_bundle_edits

    live, edits = split_bundle_edits(case)
    if not edits or any(e.recorded_rank(0) is None for e in edits):
        return case

    def recorded(rank: int) -> int:
        for edit in reversed(edits):  # the last edit's ranks are the bundle's
            rank = edit.recorded_rank(rank)
        return rank

    causes = [c.model_copy(update={"ranks": sorted({recorded(r) for r in c.ranks})}) if c.ranks else c
              for c in case.labels.causes]
    return live.model_copy(update={"labels": case.labels.model_copy(update={"causes": causes})})


def twin_repeat(subject: Case, i: int) -> int:
    """The cache repeat of the ``i``-th twin recording in ``subject``'s verification: a block of the subject's own
    (from its spec hash), so that twin ``i`` is recorded right before case ``i`` whatever other cases share the
    workload. Cases verified on the same recording (a scaled-out case and its 2-rank base, see
    :func:`verification_subject`) share their pairs, twins and case recordings alike, each pair still
    interleaved."""
    return TWIN_REPEAT_BASE + 100 * (int(subject.spec_hash()[:8], 16) % 1_000_000) + i


def verify_case(case: Case, *, repeats: int | None = None, device: str = "cpu", cache_dir: Path | None = None,
                force: bool = False, progress: Callable[[str], None] | None = None) -> Verification:
    """Record (or reuse) repeat pairs of ``case`` and of its twin, test, store the result.

    ``repeats`` None: the sequential test (pairs added up to the cap until a look decides); a number: exactly
    that many pairs, one test. ``device`` must be resolved (cpu or cuda). The Verification is stored in the
    truth file of the case's repeat-0 bundle (outside the bundle folder).
    """
    from diageval.paths import bundle_cache_dir

    if case.manifest is None:
        raise ValueError(f"case {case.id}: only positive cases (expect: diagnose) are verified")
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    subject = verification_subject(case)
    role = "case" if subject is case else "base"
    twin = subject.healthy_twin()
    case_folders: list[Path] = []  # the recorded bundles, pair i at index i (label checks read them too)
    twin_folders: list[Path] = []
    injected, healthy = [], []

    def record_up_to(n: int) -> None:
        for i in range(len(injected), n):
            for c_role, c, folders, sink in (("twin", twin, twin_folders, healthy), (role, subject, case_folders, injected)):
                if progress:
                    progress(f"{case.id}: {c_role} {i + 1}/{n}")
                repeat = twin_repeat(subject, i) if c_role == "twin" else i
                _, folder, _ = ensure_bundle(c, device, repeat=repeat, force=force, cache_dir=cache, role=c_role)
                folders.append(folder)
                sink.append(EvidenceBundle.open(folder).steps())

    if repeats is not None:
        record_up_to(repeats)
        verification = compare(subject, injected, healthy, repeats=repeats)
    else:
        record_up_to(DEFAULT_REPEATS)
        while True:
            verification = compare(subject, injected, healthy)
            assert verification.test is not None
            if verification.test.decided:
                break
            record_up_to(pairs_needed(len(injected) + 1))
    if verification.manifested:  # does the evidence hold each labeled cause where its label puts it?
        problems = evidence_problems(subject, case_folders, twin_folders)
        if subject is not case:
            problems = [f"{p} (checked on the recording this bundle is derived from, on its ranks)" for p in problems]
        verification = verification.model_copy(update={"label_problems": problems, "manifested": not problems,
                                                       "shown_checked": True, "checks": CHECKS_VERSION})
    key, _, _ = ensure_bundle(case, device, repeat=0, cache_dir=cache, force=force and subject is not case)
    truth = read_truth(cache, key) or TruthRecord(case_id=case.id, key=key, repeat=0, recorded=_now())
    write_truth(cache, truth.model_copy(update={"verification": verification, "case_id": case.id}))
    return verification


def evidence_problems(subject: Case, case_folders: list[Path], twin_folders: list[Path]) -> list[str]:
    """Each labeled cause the case's recordings do not hold (:func:`~diageval.recording.label_support.label_support`,
    the median over pairs) and each the recording a diagnoser is shown does not hold
    (:func:`~diageval.recording.label_support.shown_support`: repeat 0, pair 0's case recording; asked once the
    recordings hold every label), with the numbers; the traces read once for both.

    A shown recording that does not hold a label makes the case ``invalid``; another recorded repeat is not shown
    instead (as a regression's pair is, fleet_verify.shown_pair): measured on a CI run's cache of the public corpus
    (``python benchmarks/label_support.py HOME``), every one of the 42 causes checked in 38 cases held in repeat 0,
    the narrowest by 45 points over the twin's spread, while showing another repeat would move the bundle's key
    everywhere the shown bundle is resolved (the run's preparation, the evidence tiers, the bundles derived from it)."""
    if all(needs_check(subject, c, shown=True) is not None for c in subject.labels.causes):
        return []  # no cause either check reads (the shown check reads what the pairs' does, and more): no trace read
    injected, healthy = read_recordings(case_folders), read_recordings(twin_folders)
    problems = label_problems(label_support(subject, injected, healthy))
    if problems:  # the recordings do not hold it: the shown one is not asked again
        return problems
    return [f"in the recording a diagnoser is shown (repeat 0, against the twin's {len(healthy)} recordings): {p}"
            for p in label_problems(shown_support(subject, injected[0], healthy))]


CONTROL_TWINS = 3
"""Twin recordings a healthy control's or confounder's shown evidence is compared with (label_support reads at most
its MAX_PAIRS = 3): three give each rank's spread three values, two would give one range."""


def control_subject(case: Case) -> str | None:
    """Why ``case``'s shown evidence is not checked as a control (:func:`check_control`), or None when it is: a
    healthy control or confounder recorded here (one rank included: its share measures are checked) whose bundle is
    its recording (a case
    derived by evidence edits shows its base recording, checked as the base case)."""
    from diageval.recording.cache import split_bundle_edits

    if case.labels.expect != "healthy":
        return f"expect {case.labels.expect}"
    if case.recorded is not None or case.fleet is not None or case.workload is None:
        return "not a job recorded here"
    if split_bundle_edits(case)[1]:
        return "derived by evidence edits from a recording checked as its own case"
    return None


def check_control(case: Case, *, device: str = "cpu", cache_dir: Path | None = None, force: bool = False,
                  progress: Callable[[str], None] | None = None) -> ControlCheck:
    """Does a healthy control's or confounder's shown evidence (its bundle, repeat 0) hold its label? Its ranks
    checked for a labeled cause's pattern against :data:`CONTROL_TWINS` twin recordings
    (:func:`diageval.recording.label_support.control_support`); stored in the truth of the repeat-0 bundle.
    ``device`` must be resolved."""
    from diageval.paths import bundle_cache_dir
    from diageval.recording.label_support import control_support

    why = control_subject(case)
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    key, shown, _ = ensure_bundle(case, device, repeat=0, cache_dir=cache, force=force)
    if why is not None:
        return ControlCheck(twins=0, checked=[f"not checked: {why}"], problems=[])
    twin = case.healthy_twin()
    twins = []
    for i in range(CONTROL_TWINS):
        if progress:
            progress(f"{case.id}: twin {i + 1}/{CONTROL_TWINS}")
        twins.append(ensure_bundle(twin, device, repeat=twin_repeat(case, i), cache_dir=cache, force=force, role="twin")[1])
    support = control_support(case, shown, twins)
    check = ControlCheck(
        twins=len(twins), checked=[f"{s.category} on rank {s.ranks[0]}: {s.detail}" for s in support],
        problems=[f"the shown evidence holds {s.category} on rank {s.ranks[0]} (beyond the twin's spread over "
                  f"{len(twins)} recordings): {s.detail}" for s in support if s.checked and s.supported])
    truth = read_truth(cache, key) or TruthRecord(case_id=case.id, key=key, repeat=0, recorded=_now())
    write_truth(cache, truth.model_copy(update={"control": check, "case_id": case.id}))
    return check


def _now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


VERIFY_COLUMNS = ["case", "metric", "healthy", "injected", "ratio", "noise", "min_ratio", "pairs", "z", "p", "manifested"]


def narrow_margin(v: Verification) -> bool:
    """Manifested, but by less than the run-to-run spread of the ratio (``RUN_TO_RUN_MARGIN``)."""
    return v.manifested and v.ratio < RUN_TO_RUN_MARGIN * v.min_ratio


def verification_row(case_id: str, v: Verification) -> dict[str, str]:
    return {
        "case": case_id, "metric": v.metric, "healthy": f"{v.healthy * 1000:.1f}ms",
        "injected": f"{v.injected * 1000:.1f}ms", "ratio": f"{v.ratio:.2f}", "noise": f"{v.noise:.2f}",
        "min_ratio": f"{v.min_ratio:.2f}", "pairs": str(v.repeats),
        "z": f"{v.test.statistic:.1f}" if v.test else "", "p": f"{v.test.p_value:.1e}" if v.test else "",
        "manifested": "yes" if v.manifested else "NO",
    }


def verify_cases(case_ids: list[str], *, cases_dir: Path | None = None, repeats: int | None = None,
                 device: str = "auto", cache_dir: Path | None = None, force: bool = False,
                 progress: Progress | None = None) -> list[tuple[str, Verification]]:
    """Verify the named positive cases (all positive cases when ``case_ids`` is empty).

    Named cases that are not positive (healthy controls, confounders, abstain cases) are skipped with a
    note through ``progress``: they have no injection to verify; a named healthy control or confounder that
    :func:`check_control` checks gets its shown evidence checked instead, the verdict and its numbers through
    ``progress`` (no result row: the table is of manifestation checks), and so does a named healthy regression or
    fleet (:func:`diageval.recording.fleet_verify.healthy_fleet_check`). Cases this machine cannot record on
    ``device`` (``requires: {device: cuda}`` without a GPU; a CPU-only injection under ``--device cuda``)
    are skipped with the reason, named or not: never recorded on the wrong device, never failed.
    """
    from diageval.cases.load import load_case_set
    from diageval.recording.record import device_problem, resolve_device

    from diageval.paths import bundle_cache_dir
    from diageval.recording.draw import recorded_as

    case_set = load_case_set(cases_dir)
    chosen = case_set.select(case_ids)
    results = []
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    for n, lc in enumerate(chosen, 1):
        case, draw = recorded_as(lc.case, cache)  # the drawn variant `diageval run` records (recording/draw.py)
        if case_ids and control_subject(case) is None and not device_problem(device, case):  # a named control: its shown evidence checked (not a result row)
            if progress:
                progress.started("verify", n, len(chosen), f"checking {case.id}'s shown evidence")
            check = check_control(case, device=resolve_device(device, case), cache_dir=cache_dir, force=force,
                                  progress=progress)
            if progress:
                verdict = "INVALID: " + "; ".join(check.problems) if check.problems else "holds its label"
                progress.line(f"{case.id}: a healthy control, its shown evidence against {check.twins} twin recordings "
                              f"{verdict}" + ("" if check.problems else "; " + "; ".join(check.checked)))
                progress.advance("verify")
            continue
        if case_ids and case.labels.expect == "healthy" and case.fleet is not None and case.workload is not None \
                and not device_problem(device, case):  # a named healthy regression or fleet: what it shows checked
            from diageval.recording.fleet_verify import fleet_control, fleet_evidence

            dev = resolve_device(device, case)
            fleet_evidence(case, device=dev, force=force, cache_dir=cache_dir)
            check = fleet_control(case, device=dev, cache_dir=cache)
            if progress and check is not None:
                verdict = "INVALID: " + "; ".join(check.problems) if check.problems else "holds its label"
                progress.line(f"{case.id}: a healthy {case.kind}, its shown evidence {verdict}"
                              + ("" if check.problems else "; " + "; ".join(check.checked)))
            if progress:
                progress.advance("verify")
            continue
        if case.labels.expect != "diagnose" or case.recorded is not None:
            if case_ids and progress:
                why = "a recorded case (labeled from measurements)" if case.recorded else f"expect {case.labels.expect}"
                progress.line(f"{case.id}: {why}, nothing to verify")
            if progress:
                progress.advance("verify")
            continue
        problem = device_problem(device, case)
        if problem:
            if progress:
                progress.line(f"{case.id}: skipped, {problem}")
                progress.advance("verify")
            continue
        if progress:
            progress.started("verify", n, len(chosen), f"verifying {case.id}")
        dev = resolve_device(device, case)
        if case.fleet is not None:  # a regression or fleet: its own test against the fleet's noise (fleet_verify.py)
            from diageval.recording.fleet_verify import fleet_evidence

            results.append((case.id, fleet_evidence(case, device=dev, force=force, cache_dir=cache_dir)[1]))
            if progress:
                progress.advance("verify")
            continue
        results.append((case.id, verify_case(case, repeats=repeats, device=dev, cache_dir=cache, force=force,
                                             progress=progress)))
        note_draw(cache, cache_key(case, dev), draw)
        if progress:
            progress.advance("verify")
    return results
