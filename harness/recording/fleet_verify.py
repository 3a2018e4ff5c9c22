"""Did the faults behind a fleet's factor values manifest against the fleet's own run-to-run noise? (issue 24)

A fleet (8-16 runs): for each factor value a fault sits behind, the runs that have it against the runs that
have no fault at all. Per run, the manifest metric over its steps after the warm-up
(:data:`~diageval.recording.manifest_test.WARMUP_STEPS`), on a log scale. The statistic is the difference of
the two groups' mean log metric, its estimate ``exp`` of it (the factor's magnitude: how much slower its runs
are); the p-value is the exact one-sided permutation p of that difference over every way of choosing which of
the pooled runs carry the value (at most C(16, 8) = 12870). Runs are the unit: recordings made at different
moments on a shared machine differ as a whole (the manifestation test measured a recording-level shift of sd
0.19 in log), and a permutation over runs uses exactly that spread, the fleet's noise, and assumes nothing
else. A value manifests when ``p <= FLEET_ALPHA`` and the estimate reaches the case's ``min_ratio``; the
case manifests when every labeled value does.

With 3 runs carrying a value among 12 the smallest possible p is 1/220; with 2 among 8, 1/28 (0.036): a
case needs at least 2 runs behind each faulty value and ``FLEET_ALPHA`` is 0.05, one-sided (a fault slows).

A regression (a baseline and a candidate run, one each) has no spread of its own to test against: its
verification records the pair again (repeats of both members, as the cache keeps them) and applies the
manifestation test of one case against its twin (:func:`diageval.recording.manifest_test.sequential_test`)
with the baseline as the twin; its estimate is the regression's measured magnitude (candidate/baseline).

The result is a :class:`~diageval.recording.truth.Verification` (what the run pipeline reads: ``ratio`` is the
magnitude, of the smallest effect when two values are at fault) and, beside the cache's truth file and never in
the bundle, a :class:`FleetVerification` with every value's effect.
"""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path

from pydantic import BaseModel, Field

from diageval.bundle.model import EvidenceBundle, StepRecord
from diageval.cases.model import Case
from diageval.diagnosis import FactorRef
from diageval.recording.fleet import members_with_repeats
from diageval.recording.manifest_test import (LOOKS, WARMUP_STEPS, ManifestTest, metric_of, pairs_needed,
                                              sequential_test)
from diageval.recording.truth import Verification

FLEET_ALPHA = 0.05
"""One-sided level of the permutation test of a factor value's runs against the fault-free runs."""


class FactorEffect(BaseModel):
    factor: FactorRef
    runs_with: int = Field(description="Runs that have the value")
    runs_without: int = Field(description="Fault-free runs it is compared with")
    ratio: float = Field(description="exp(mean log metric of its runs - mean log metric of the fault-free ones): the magnitude")
    statistic: float = Field(description="The difference of mean log metrics")
    p_value: float = Field(description="Exact one-sided permutation p-value")
    permutations: int
    alpha: float
    manifested: bool


class FleetVerification(BaseModel):
    kind: str
    metric: str
    min_ratio: float
    run_metric: dict[str, float] = Field(description="Run name -> its metric (seconds)")
    noise: float = Field(description="Relative range of the fault-free runs' metric: (max - min) / median")
    effects: list[FactorEffect] = Field(default_factory=list, description="Fleets: one per labeled factor value")
    regression: ManifestTest | None = Field(None, description="Regressions: the repeated pair test")
    manifested: bool


def step_times(steps: list[StepRecord], start: int, stop: int) -> list[float]:
    """Per-step durations of steps [start, stop), each the mean over the ranks (as the manifestation check takes them)."""
    by_step: dict[int, list[float]] = {}
    for s in steps:
        if start <= s.step < stop:
            by_step.setdefault(s.step, []).append(s.duration)
    return [statistics.fmean(v) for _, v in sorted(by_step.items())]


def run_steps_metric(steps: list[StepRecord], metric: str, n_steps: int) -> float:
    """A run's manifest metric over its steps after the warm-up (median, mean or p90 of the step times)."""
    times = step_times(steps, WARMUP_STEPS if n_steps > WARMUP_STEPS else 0, n_steps)
    if not times:
        raise ValueError(f"a run of the fleet has no steps after the first {WARMUP_STEPS}")
    return metric_of(times, metric)


def permutation_p(with_values: list[float], without_values: list[float]) -> tuple[float, float, int]:
    """(statistic, one-sided exact p, permutations): the difference of means of ``with_values`` and
    ``without_values`` and the share of every split of the pooled values into groups of the same sizes whose
    difference is at least as large."""
    if not with_values or not without_values:
        raise ValueError("the permutation test needs runs on both sides")
    pooled = with_values + without_values
    k, total = len(with_values), sum(with_values) + sum(without_values)
    n = len(pooled)
    observed = statistics.fmean(with_values) - statistics.fmean(without_values)
    at_least, count = 0, 0
    for chosen in itertools.combinations(range(n), k):
        s = sum(pooled[i] for i in chosen)
        diff = s / k - (total - s) / (n - k)
        at_least += diff >= observed - 1e-12
        count += 1
    return observed, at_least / count, count


def fleet_effects(case: Case, run_metric: dict[str, float], refs: list[FactorRef] | None = None,
                  min_ratio: float | None = None) -> list[FactorEffect]:
    """The effect of each factor value in ``refs`` (default: the labeled ones) against the fault-free runs;
    ``min_ratio`` defaults to the case's manifest's (benchmarks/fleet_corpus.py measures unlabeled faults too)."""
    assert case.fleet is not None
    if min_ratio is None:
        assert case.manifest is not None
        min_ratio = case.manifest.min_ratio
    clean = [r.name for r in case.fleet.runs if not case.fleet.faults_of(r)]
    if refs is None:
        refs = list(dict.fromkeys(c.factor for c in case.labels.causes if c.factor is not None))
    out = []
    for ref in refs:
        with_runs = [r.name for r in case.fleet.runs_with(ref)]
        stat, p, count = permutation_p([math.log(run_metric[n]) for n in with_runs], [math.log(run_metric[n]) for n in clean])
        ratio = math.exp(stat)
        out.append(FactorEffect(factor=ref, runs_with=len(with_runs), runs_without=len(clean), ratio=ratio, statistic=stat,
                                p_value=p, permutations=count, alpha=FLEET_ALPHA,
                                manifested=p <= FLEET_ALPHA and ratio >= min_ratio))
    return out


def verify_fleet(case: Case, *, device: str, cache_dir: Path, force: bool = False) -> tuple[Verification, FleetVerification]:
    """Record what is missing (a regression's repeat pairs), test, store the FleetVerification beside the truth.
    ``force``: a regression's pairs after the first are recorded again (:func:`fleet_evidence`, the caller, has
    just recorded the fleet bundle and its members, pair 0 among them, again)."""
    from diageval.bundle.fleet import read_fleet
    from diageval.fileio import atomic_write_text
    from diageval.recording.cache import cache_key
    from diageval.recording.fleet import case_run_names, ensure_fleet_bundle

    assert case.fleet is not None and case.manifest is not None and case.workload is not None
    m, n_steps = case.manifest, case.workload.steps
    # the runs as the diagnoser sees them: the fleet bundle's own copies (step durations are the members'), read
    # back under the case's run names (fleet.json's are drawn per assembly: fleet.py)
    fleet_key, folder, _ = ensure_fleet_bundle(case, device, cache_dir=cache_dir)
    fleet = read_fleet(EvidenceBundle.open(folder))
    assert fleet is not None
    names = case_run_names(cache_dir, fleet_key)
    run_metric = {names.get(r.name, r.name): run_steps_metric(fleet.open_run(r.name).steps(), m.metric, n_steps)
                  for r in fleet.runs}
    members = members_with_repeats(case)
    clean = [run_metric[r.name] for r in case.fleet.runs if not case.fleet.faults_of(r)]
    noise = (max(clean) - min(clean)) / statistics.median(clean) if len(clean) > 1 else 0.0
    effects: list[FactorEffect] = []
    test: ManifestTest | None = None
    if case.kind == "regression":  # pair 0 is the fleet bundle's own
        test = _regression_test(case, members, device=device, cache_dir=cache_dir, force=force)
        manifested = test.manifested
        ratio = test.estimate
    else:
        effects = fleet_effects(case, run_metric)
        manifested = bool(effects) and all(e.manifested for e in effects)
        ratio = min(e.ratio for e in effects)
    faulty = [run_metric[r.name] for r in case.fleet.runs if case.fleet.faults_of(r)]
    injected, healthy = statistics.median(faulty), statistics.median(clean)
    fleet_v = FleetVerification(kind=case.kind, metric=m.metric, min_ratio=m.min_ratio, run_metric=run_metric, noise=noise,
                                effects=effects, regression=test, manifested=manifested)
    if test is None:  # the pipeline's record of the decision: the weakest value's test in the manifestation test's terms
        weakest = min(effects, key=lambda e: (e.manifested, e.ratio))
        clean_sd = statistics.stdev(math.log(v) for v in clean) if len(clean) > 1 else 0.0
        test = ManifestTest(pairs=weakest.runs_with, estimate=weakest.ratio, statistic=weakest.statistic,
                            p_value=weakest.p_value, alpha=FLEET_ALPHA, min_ratio=m.min_ratio, shift_sd=clean_sd,
                            autocorrelation=0.0, pair_shifts=[run_metric[r.name] / healthy for r in case.fleet.runs_with(weakest.factor)],
                            manifested=weakest.manifested, decided=True)
    verification = Verification(metric=m.metric, min_ratio=m.min_ratio, injected=injected, healthy=healthy, ratio=ratio,
                                noise=noise, repeats=test.pairs if case.kind == "regression" else len(case.fleet.runs),
                                manifested=manifested, impact=max(0.0, 1.0 - healthy / injected), test=test)
    key = cache_key(case, device)
    atomic_write_text(fleet_verification_path(cache_dir, key), fleet_v.model_dump_json(indent=2) + "\n")
    return verification, fleet_v


def fleet_evidence(case: Case, *, device: str = "auto", force: bool = False, verify: bool = True,
                   cache_dir: Path | None = None, data_dir: Path | None = None) -> tuple[Path, Verification | None]:
    """A regression or fleet case's bundle folder (members recorded or reused, assembled) and, for a positive case,
    its verification (a stored one reused unless ``force``; it is kept in the fleet bundle's truth record)."""
    from diageval.paths import bundle_cache_dir
    from diageval.recording.cache import read_truth, write_truth
    from diageval.recording.fleet import ensure_fleet_bundle
    from diageval.recording.record import resolve_device

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    resolved = resolve_device(device, case) if case.workload is not None else "cpu"  # a recorded fleet: imported
    key, folder, _ = ensure_fleet_bundle(case, resolved, force=force, cache_dir=cache, data_dir=data_dir)
    if not verify or case.labels.expect != "diagnose" or case.workload is None:
        return folder, None
    truth = read_truth(cache, key)
    if truth is not None and truth.verification is not None and not force and fleet_verification_path(cache, key).is_file():
        return folder, truth.verification
    verification, _ = verify_fleet(case, device=resolved, cache_dir=cache, force=force)
    truth = read_truth(cache, key)
    assert truth is not None  # written by ensure_fleet_bundle
    write_truth(cache, truth.model_copy(update={"verification": verification, "case_id": case.id}))
    return folder, verification


def fleet_verification_path(cache_dir: Path, key: str) -> Path:
    """Beside the truth file of the fleet bundle (outside every bundle folder)."""
    return Path(cache_dir) / f"{key}.fleet-verification.json"


def _regression_test(case: Case, members, *, device: str, cache_dir: Path, force: bool = False) -> ManifestTest:
    """The manifestation test on repeat pairs (baseline repeat i, candidate repeat i), sequential over LOOKS.
    ``force``: pairs after the first are recorded again (the first is the fleet bundle's, forced with it)."""
    from diageval.recording.cache import ensure_bundle

    assert case.manifest is not None and case.workload is not None
    by_role = {run.role: member for run, member, _ in members}
    base = min(repeat for _, _, repeat in members)  # the case's own block (fleet.repeat_base): pair i = base + i
    start = WARMUP_STEPS if case.workload.steps > WARMUP_STEPS else 0
    pairs: list[tuple[list[float], list[float]]] = []

    def times(member: Case, repeat: int) -> list[float]:
        _, folder, _ = ensure_bundle(member, device, repeat=repeat, cache_dir=cache_dir, force=force and repeat > base)
        return step_times(EvidenceBundle.open(folder).steps(), start, case.workload.steps)

    def record_up_to(n: int) -> None:
        for i in range(len(pairs), n):
            pairs.append((times(by_role["baseline"], base + i), times(by_role["candidate"], base + i)))

    record_up_to(LOOKS[0])
    while True:
        test = sequential_test(pairs, case.manifest.metric, case.manifest.min_ratio)
        if test.decided:
            return test
        record_up_to(pairs_needed(len(pairs) + 1))
