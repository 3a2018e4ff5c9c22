"""Manifestation check: record a positive case and its healthy twin several times and compare.

Step time of one step = mean over the ranks of ``t_end - t_start`` in ``steps.jsonl`` (ranks of a
data-parallel job finish a step together, so this is close to every rank's), except for
``rank_step_time_median``, which uses ``manifest.rank`` alone. The metric is taken over the labeled
step range (the union of the causes' ``steps``), or over all steps when no cause names a range.

Per repeat ``i`` the case and its twin are each recorded once (cached: repeat ``i`` of a twin is shared
by every case with the same workload). ``injected`` and ``healthy`` are medians over repeats;
``noise`` is the healthy twin's relative spread over repeats; a case manifested when the ratio reaches
``min_ratio`` and, with two or more repeats, the slowest healthy repeat is faster than the fastest
injected one (the effect is not an accident of one noisy recording).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from diageval.bundle.model import EvidenceBundle, StepRecord
from diageval.cases.model import Case
from diageval.progress import Progress
from diageval.recording.cache import ensure_bundle, read_truth, write_truth
from diageval.recording.truth import TruthRecord, Verification

DEFAULT_REPEATS = 3

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
    if metric in ("step_time_median", "rank_step_time_median"):
        return statistics.median(times)
    if metric == "step_time_mean":
        return statistics.fmean(times)
    if metric == "step_time_p90":
        ordered = sorted(times)
        return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    raise ValueError(f"unknown manifest metric {metric!r}")


def compare(case: Case, injected_steps: list[list[StepRecord]], healthy_steps: list[list[StepRecord]]) -> Verification:
    """The Verification of a case from the step logs of its repeats and of its twin's."""
    assert case.manifest is not None
    rng = labeled_step_range(case)
    m = case.manifest
    inj = [metric_value(s, m.metric, rng, m.rank) for s in injected_steps]
    hea = [metric_value(s, m.metric, rng, m.rank) for s in healthy_steps]
    injected, healthy = statistics.median(inj), statistics.median(hea)
    ratio = injected / healthy
    noise = (max(hea) - min(hea)) / healthy if len(hea) > 1 else 0.0
    separated = len(inj) < 2 or min(inj) > max(hea)
    inj_mean = statistics.median(metric_value(s, "step_time_mean", rng) for s in injected_steps)
    hea_mean = statistics.median(metric_value(s, "step_time_mean", rng) for s in healthy_steps)
    return Verification(
        metric=m.metric, min_ratio=m.min_ratio, injected=injected, healthy=healthy, ratio=ratio, noise=noise,
        repeats=len(inj), manifested=ratio >= m.min_ratio and separated,
        impact=max(0.0, 1.0 - hea_mean / inj_mean),
    )


def verify_case(case: Case, *, repeats: int = DEFAULT_REPEATS, device: str = "cpu", cache_dir: Path | None = None,
                force: bool = False, progress: Callable[[str], None] | None = None) -> Verification:
    """Record (or reuse) ``repeats`` recordings of ``case`` and of its twin, compare, store the result.

    ``device`` must be resolved (cpu or cuda). The Verification is stored in the truth file of the
    case's repeat-0 bundle (outside the bundle folder).
    """
    from diageval.paths import bundle_cache_dir

    if case.manifest is None:
        raise ValueError(f"case {case.id}: only positive cases (expect: diagnose) are verified")
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    twin = case.healthy_twin()
    injected, healthy = [], []
    for i in range(repeats):
        for role, c, sink in (("twin", twin, healthy), ("case", case, injected)):
            if progress:
                progress(f"{case.id}: {role} {i + 1}/{repeats}")
            _, folder, _ = ensure_bundle(c, device, repeat=i, force=force, cache_dir=cache, role=role)
            sink.append(EvidenceBundle.open(folder).steps())
    verification = compare(case, injected, healthy)
    key, _, _ = ensure_bundle(case, device, repeat=0, cache_dir=cache)
    truth = read_truth(cache, key) or TruthRecord(case_id=case.id, key=key, repeat=0, recorded=_now())
    write_truth(cache, truth.model_copy(update={"verification": verification, "case_id": case.id}))
    return verification


def _now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


VERIFY_COLUMNS = ["case", "metric", "healthy", "injected", "ratio", "noise", "min_ratio", "manifested"]


def narrow_margin(v: Verification) -> bool:
    """Manifested, but by less than the run-to-run spread of the ratio (``RUN_TO_RUN_MARGIN``)."""
    return v.manifested and v.ratio < RUN_TO_RUN_MARGIN * v.min_ratio


def verification_row(case_id: str, v: Verification) -> dict[str, str]:
    return {
        "case": case_id, "metric": v.metric, "healthy": f"{v.healthy * 1000:.1f}ms",
        "injected": f"{v.injected * 1000:.1f}ms", "ratio": f"{v.ratio:.2f}", "noise": f"{v.noise:.2f}",
        "min_ratio": f"{v.min_ratio:.2f}", "manifested": "yes" if v.manifested else "NO",
    }


def verify_cases(case_ids: list[str], *, cases_dir: Path | None = None, repeats: int = DEFAULT_REPEATS,
                 device: str = "auto", cache_dir: Path | None = None, force: bool = False,
                 progress: Progress | None = None) -> list[tuple[str, Verification]]:
    """Verify the named positive cases (all positive cases when ``case_ids`` is empty).

    Named cases that are not positive (healthy controls, confounders, abstain cases) are skipped with a
    note through ``progress``: they have no injection to verify. Cases this machine cannot record on
    ``device`` (``requires: {device: cuda}`` without a GPU; a CPU-only injection under ``--device cuda``)
    are skipped with the reason, named or not: never recorded on the wrong device, never failed.
    """
    from diageval.cases.load import load_case_set
    from diageval.recording.record import device_problem, resolve_device

    case_set = load_case_set(cases_dir)
    chosen = case_set.select(case_ids)
    results = []
    for n, lc in enumerate(chosen, 1):
        case = lc.case
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
        results.append((case.id, verify_case(case, repeats=repeats, device=dev, cache_dir=cache_dir, force=force,
                                             progress=progress)))
        if progress:
            progress.advance("verify")
    return results
