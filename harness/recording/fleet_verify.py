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

What the diagnoser is shown must hold the label too (issue 44 item 3): a regression is verified over many pairs
but its bundle holds one (a float64 regression manifested at 1.39 over 12 pairs while the pair in its bundle read
0.88, the candidate faster). :func:`shown_pair` checks the shown pair against the noise measured in the same
recordings, the baseline's spread over the pairs (:func:`diageval.recording.label_support.relative_spread`, the
margin the label checks hold a cause to against the twin): the shown pair's ratio must exceed 1 by more than it.
When it does not, the bundle is assembled from the recorded pair that does and reads nearest the verified
magnitude; when none does, the case is not manifested, with the numbers (``invalid``, never scored). A fleet's
runs are the ones verified, but the group test can pass with one of a faulty value's runs inside the noise: each
run behind a labeled value must exceed the fault-free runs' median by more than their spread
(:func:`labeled_runs_check`).

A healthy regression's shown pair and every factor value no label names (in a healthy or a positive fleet) are checked
the other way round: they must not show a slowdown beyond the noise (:func:`healthy_pair`,
:func:`unlabeled_values_check`, :func:`healthy_fleet_check`).

Size: ~460 lines because a fleet's checks of what is shown, positive and healthy, share the run metrics, the permutation
test and the pair assembly with its verification; apart, each would import the other's internals.

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
from diageval.recording.label_support import MATERIAL_SHARE, relative_spread
from diageval.recording.manifest_test import (LOOKS, WARMUP_STEPS, ManifestTest, metric_of, pairs_needed,
                                              sequential_test)
from diageval.recording.truth import ControlCheck, Verification

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


class ShownCheck(BaseModel):
    """Does the evidence the diagnoser is shown hold the label (a regression's pair, a fleet's labeled runs)?"""

    spread: float = Field(description="The noise: the relative spread of the baseline's recordings over the pairs (a "
                                      "regression) or of the fault-free runs (a fleet), floored at NOISE_FLOOR")
    shown: dict[str, float] = Field(description="What is shown, against its baseline: 'pair <i>' -> that pair's "
                                                "candidate/baseline ratio (a regression), run name -> run / median of the "
                                                "fault-free runs (a fleet's labeled runs)")
    pair: int | None = Field(None, description="A regression: the recorded pair its bundle is assembled from (0: the "
                                               "first); None for a fleet")
    problems: list[str] = Field(default_factory=list, description="What the shown evidence does not hold; empty: holds")


class FleetVerification(BaseModel):
    kind: str
    metric: str
    min_ratio: float
    run_metric: dict[str, float] = Field(description="Run name -> its metric (seconds)")
    noise: float = Field(description="Relative range of the fault-free runs' metric: (max - min) / median")
    effects: list[FactorEffect] = Field(default_factory=list, description="Fleets: one per labeled factor value")
    regression: ManifestTest | None = Field(None, description="Regressions: the repeated pair test")
    shown: ShownCheck | None = Field(None, description="What the diagnoser is shown against the noise; None in a record "
                                                       "made before the check (verified again)")
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
    """Record what is missing (a regression's repeat pairs), test, check what is shown (a regression's bundle is
    assembled again from another recorded pair when the first does not show it), store the FleetVerification beside
    the truth. ``force``: a regression's pairs after the first are recorded again (:func:`fleet_evidence`, the caller,
    has just recorded the fleet bundle and its members, pair 0 among them, again)."""
    from diageval.bundle.fleet import read_fleet
    from diageval.fileio import atomic_write_text
    from diageval.recording.cache import cache_key
    from diageval.recording.fleet import case_run_names, ensure_fleet_bundle

    assert case.fleet is not None and case.manifest is not None and case.workload is not None
    m, n_steps = case.manifest, case.workload.steps
    members = members_with_repeats(case)
    clean_runs = [r.name for r in case.fleet.runs if not case.fleet.faults_of(r)]
    effects: list[FactorEffect] = []
    test: ManifestTest | None = None
    if case.kind == "regression":  # pair 0 is the fleet bundle's own, unless it does not show the regression
        test, baselines = _regression_test(case, members, device=device, cache_dir=cache_dir, force=force)
        shown = shown_pair(test, baselines)
    # the runs as the diagnoser sees them: the fleet bundle's own copies (step durations are the members'); a
    # regression's assembled from the pair that shows it (its members are cached: no recording); read back under the
    # case's run names (fleet.json's are drawn per assembly: fleet.py)
    fleet_key, folder, _ = ensure_fleet_bundle(case, device, cache_dir=cache_dir,
                                               pair=shown.pair if test is not None else None)
    fleet = read_fleet(EvidenceBundle.open(folder))
    assert fleet is not None
    names = case_run_names(cache_dir, fleet_key)
    run_metric = {names.get(r.name, r.name): run_steps_metric(fleet.open_run(r.name).steps(), m.metric, n_steps)
                  for r in fleet.runs}
    clean = [run_metric[name] for name in clean_runs]
    noise = (max(clean) - min(clean)) / statistics.median(clean) if len(clean) > 1 else 0.0
    if test is not None:
        manifested = test.manifested and not shown.problems
        ratio = test.estimate
    else:
        effects = fleet_effects(case, run_metric)
        shown = labeled_runs_check(case, run_metric)
        shown = shown.model_copy(update={"problems": shown.problems + unlabeled_values_check(case, run_metric)[1]})
        manifested = bool(effects) and all(e.manifested for e in effects) and not shown.problems
        ratio = min(e.ratio for e in effects)
    faulty = [run_metric[r.name] for r in case.fleet.runs if case.fleet.faults_of(r)]
    injected, healthy = statistics.median(faulty), statistics.median(clean)
    fleet_v = FleetVerification(kind=case.kind, metric=m.metric, min_ratio=m.min_ratio, run_metric=run_metric, noise=noise,
                                effects=effects, regression=test, shown=shown, manifested=manifested)
    if test is None:  # the pipeline's record of the decision: the weakest value's test in the manifestation test's terms
        weakest = min(effects, key=lambda e: (e.manifested, e.ratio))
        clean_sd = statistics.stdev(math.log(v) for v in clean) if len(clean) > 1 else 0.0
        test = ManifestTest(pairs=weakest.runs_with, estimate=weakest.ratio, statistic=weakest.statistic,
                            p_value=weakest.p_value, alpha=FLEET_ALPHA, min_ratio=m.min_ratio, shift_sd=clean_sd,
                            autocorrelation=0.0, pair_shifts=[run_metric[r.name] / healthy for r in case.fleet.runs_with(weakest.factor)],
                            manifested=weakest.manifested, decided=True)
    verification = Verification(metric=m.metric, min_ratio=m.min_ratio, injected=injected, healthy=healthy, ratio=ratio,
                                noise=noise, repeats=test.pairs if case.kind == "regression" else len(case.fleet.runs),
                                manifested=manifested, impact=max(0.0, 1.0 - healthy / injected), test=test,
                                label_problems=list(shown.problems))
    key = cache_key(case, device)
    atomic_write_text(fleet_verification_path(cache_dir, key), fleet_v.model_dump_json(indent=2) + "\n")
    return verification, fleet_v


def shown_pair(test: ManifestTest, baselines: list[float]) -> ShownCheck:
    """Which recorded pair a regression's bundle shows: pair 0 when its ratio (``test.pair_shifts``) exceeds 1 by
    more than the baseline's spread over the pairs (``baselines``: the baseline's metric per pair); else the pair
    that does and reads nearest the verified estimate; else pair 0, with the numbers as a problem (checked only when
    the regression manifested: otherwise it is not scored anyway)."""
    ratios = list(test.pair_shifts)
    spread = relative_spread(baselines)
    shown = {f"pair {i}": r for i, r in enumerate(ratios)}
    if not test.manifested or ratios[0] - 1.0 > spread:
        return ShownCheck(spread=spread, shown=shown, pair=0)
    holding = [i for i, r in enumerate(ratios) if r - 1.0 > spread]
    if holding:
        best = min(holding, key=lambda i: abs(math.log(ratios[i] / test.estimate)))
        return ShownCheck(spread=spread, shown=shown, pair=best)
    reads = ", ".join(f"{r:.2f}" for r in ratios)
    return ShownCheck(spread=spread, shown=shown, pair=0, problems=[
        f"no recorded pair shows the regression the test measured ({test.estimate:.2f} over {test.pairs} pairs): the pair "
        f"in the bundle reads {ratios[0]:.2f} (candidate/baseline) and the pairs {reads}, none above 1 by more than the "
        f"baseline's spread over the pairs ({spread:.0%})"])


def labeled_runs_check(case: Case, run_metric: dict[str, float]) -> ShownCheck:
    """Each run behind a labeled factor value against the fault-free runs: its metric over their median must exceed 1
    by more than their spread (:func:`~diageval.recording.label_support.relative_spread`)."""
    assert case.fleet is not None
    clean = [run_metric[r.name] for r in case.fleet.runs if not case.fleet.faults_of(r)]
    spread, mid = relative_spread(clean), statistics.median(clean)
    refs = list(dict.fromkeys(c.factor for c in case.labels.causes if c.factor is not None))
    shown = {r.name: run_metric[r.name] / mid for ref in refs for r in case.fleet.runs_with(ref)}
    problems = []
    for ref in refs:
        low = [r.name for r in case.fleet.runs_with(ref) if shown[r.name] - 1.0 <= spread]
        if low:
            reads = ", ".join(f"{r.name} {shown[r.name]:.2f}" for r in case.fleet.runs_with(ref))
            problems.append(f"run(s) {', '.join(low)} with {ref.name}={ref.value} not slower than the fault-free runs' "
                            f"median by more than their spread ({spread:.0%} over {len(clean)} runs): {reads}")
    return ShownCheck(spread=spread, shown=shown, problems=problems)


HEALTHY_METRIC = "step_time_median"
"""The metric a healthy regression or fleet (no manifest) is read with: the one most positive regressions and fleets
name (18 of 21 public ones), a median, so that one descheduled step does not read as a slowdown."""

HEALTHY_PAIRS = 3
"""Pairs a healthy regression records at most when its first pair reads slower (as a control's twins,
:data:`diageval.recording.verify.CONTROL_TWINS`: three give the baseline's spread three values)."""


def unlabeled_values_check(case: Case, run_metric: dict[str, float]) -> tuple[list[str], list[str]]:
    """(what was tested, problems): every factor value no label names, its runs against the other runs, among the runs
    no labeled value is behind (a positive fleet: its fault-free runs; a healthy fleet: every run, a benign change
    behind a value included, as a profiling canary's), with the test a labeled value must pass (:func:`permutation_p`)
    and the smallest slowdown worth naming (:data:`~diageval.recording.label_support.MATERIAL_SHARE`, a tenth, as for a
    control). A value whose runs are slower by that, at ``FLEET_ALPHA`` divided by the values tested, is one a
    diagnoser reading the fleet right would name, and the labels do not: a healthy fleet or a fleet's unlabeled runs
    that show it do not hold their labels.

    Divided by the values tested (Bonferroni) because every value is looked at, where a label's test asks about one
    value named in advance: measured on the cached corpus at the undivided 0.05, 2 of the 8 positive fleets had an
    unlabeled value "slower" (version=v2.5.0 of fleet-contended-host, 3 of 9 fault-free runs 1.25x, p 0.012;
    host=node-03 of fleet-slow-disk-host, 1.19x, p 0.024) from two fault-free members recorded at a loaded moment
    (1.28x and 1.37x the median, shared by every fleet of that spec), among ~8 values tested each, about what chance
    gives (1 - 0.95^8 = 34% a fleet). A value held by one run is never refused: its smallest p is 1/runs, as a label
    needs two runs behind its value."""
    assert case.fleet is not None
    refs = [c.factor for c in case.labels.causes if c.factor is not None]
    behind_labels = {r.name for ref in refs for r in case.fleet.runs_with(ref)}
    clean = [r for r in case.fleet.runs if r.name not in behind_labels]
    labeled = {(ref.name, ref.value) for ref in refs}
    tests = []
    for name, value in sorted({(k, v) for r in clean for k, v in r.metadata.items()} - labeled):
        held = [r.name for r in clean if r.metadata.get(name) == value]
        rest = [r.name for r in clean if r.metadata.get(name) != value]
        if held and rest:
            tests.append((name, value, held, rest))
    alpha = FLEET_ALPHA / max(1, len(tests))
    tested, problems = [], []
    for name, value, held, rest in tests:
        stat, p, _ = permutation_p([math.log(run_metric[n]) for n in held], [math.log(run_metric[n]) for n in rest])
        line = (f"{name}={value}: its {len(held)} unlabeled run(s) {math.exp(stat):.2f}x the other {len(rest)}, "
                f"p {p:.3f} (refused at p <= {alpha:.4f} and 1 + {MATERIAL_SHARE:g} or more)")
        tested.append(line)
        if p <= alpha and math.exp(stat) >= 1.0 + MATERIAL_SHARE:
            problems.append(f"the fleet shows a slowdown no label names: {line}")
    return tested, problems


def healthy_pair(ratios: list[float], baselines: list[float]) -> ShownCheck:
    """Which recorded pair a healthy regression's bundle shows: pair 0 when its candidate/baseline ratio (``ratios``,
    per pair) exceeds 1 by no more than the baseline's spread over the pairs (``baselines``, per pair; the floor with
    one pair) or a tenth (:data:`~diageval.recording.label_support.MATERIAL_SHARE`, the smallest slowdown worth
    naming), whichever is larger; else the pair within that reads nearest 1; else pair 0 with the numbers as a problem:
    a candidate slower than that in the pair shown is a regression a diagnoser reading it right would name."""
    spread = relative_spread(baselines)
    bar = max(spread, MATERIAL_SHARE)
    shown = {f"pair {i}": r for i, r in enumerate(ratios)}
    if ratios[0] - 1.0 <= bar:
        return ShownCheck(spread=spread, shown=shown, pair=0)
    within = [i for i, r in enumerate(ratios) if r - 1.0 <= bar]
    if within:
        return ShownCheck(spread=spread, shown=shown, pair=min(within, key=lambda i: abs(math.log(ratios[i]))))
    reads = ", ".join(f"{r:.2f}" for r in ratios)
    return ShownCheck(spread=spread, shown=shown, pair=0, problems=[
        f"every recorded pair shows the candidate slower (candidate/baseline {reads}), above 1 by more than the "
        f"baseline's spread over the pairs ({spread:.0%}) and a tenth of the step: the healthy label does not hold"])


def healthy_fleet_check(case: Case, *, device: str, cache_dir: Path) -> ControlCheck:
    """A healthy regression's or fleet's shown evidence against its noise (a regression's ``pair``: the recorded pair
    its bundle is to show). A regression records pairs beyond the first only when the first reads slower than a tenth
    (:func:`healthy_pair`); a fleet reads its bundle's runs (:func:`unlabeled_values_check`)."""
    from diageval.bundle.fleet import read_fleet
    from diageval.recording.cache import cache_key, ensure_bundle
    from diageval.recording.fleet import case_run_names, ensure_fleet_bundle

    assert case.fleet is not None and case.workload is not None
    n_steps = case.workload.steps
    if case.kind == "regression":
        by_role = {run.role: (member, repeat) for run, member, repeat in members_with_repeats(case)}

        def metric(role: str, i: int) -> float:
            member, repeat = by_role[role]
            _, folder, _ = ensure_bundle(member, device, repeat=repeat + i, cache_dir=cache_dir)
            return run_steps_metric(EvidenceBundle.open(folder).steps(), HEALTHY_METRIC, n_steps)

        baselines, ratios = [metric("baseline", 0)], [metric("candidate", 0) / metric("baseline", 0)]
        if ratios[0] - 1.0 > MATERIAL_SHARE:  # the spread can only raise the bar: more pairs only when it may matter
            for i in range(1, HEALTHY_PAIRS):
                baselines.append(metric("baseline", i))
                ratios.append(metric("candidate", i) / baselines[-1])
        shown = healthy_pair(ratios, baselines)
        checked = [f"candidate/baseline per pair: {', '.join(f'{r:.2f}' for r in ratios)}; the baseline's spread "
                   f"{shown.spread:.0%}; shown: pair {shown.pair}"]
        return ControlCheck(twins=len(ratios), checked=checked, problems=shown.problems, pair=shown.pair)
    key, folder, _ = ensure_fleet_bundle(case, device, cache_dir=cache_dir)
    fleet = read_fleet(EvidenceBundle.open(folder))
    assert fleet is not None
    names = case_run_names(cache_dir, cache_key(case, device))
    run_metric = {names.get(r.name, r.name): run_steps_metric(fleet.open_run(r.name).steps(), HEALTHY_METRIC, n_steps)
                  for r in fleet.runs}
    tested, problems = unlabeled_values_check(case, run_metric)
    return ControlCheck(twins=len(run_metric), checked=tested, problems=problems)


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
    if verify and case.labels.expect == "healthy" and case.workload is not None:  # does what is shown hold "healthy"?
        truth = read_truth(cache, key)
        assert truth is not None  # written by ensure_fleet_bundle
        control = truth.control
        if control is None or force:
            control = healthy_fleet_check(case, device=resolved, cache_dir=cache)
        if control.pair:  # a healthy regression shown from a pair that does not read as a regression
            key, folder, _ = ensure_fleet_bundle(case, resolved, cache_dir=cache, pair=control.pair)
        truth = read_truth(cache, key)
        if truth is not None and truth.control != control:
            write_truth(cache, truth.model_copy(update={"control": control, "case_id": case.id}))
        return folder, None
    if not verify or case.labels.expect != "diagnose" or case.workload is None:
        return folder, None
    truth = read_truth(cache, key)
    stored = read_fleet_verification(cache, key)
    if truth is not None and truth.verification is not None and not force and stored is not None and stored.shown is not None:
        if stored.shown.pair:  # a regression shown from another pair than the first: the bundle assembled from it
            key, folder, _ = ensure_fleet_bundle(case, resolved, cache_dir=cache, pair=stored.shown.pair)
        return folder, truth.verification
    verification, _ = verify_fleet(case, device=resolved, cache_dir=cache, force=force)
    truth = read_truth(cache, key)
    assert truth is not None  # written by ensure_fleet_bundle
    write_truth(cache, truth.model_copy(update={"verification": verification, "case_id": case.id}))
    return folder, verification


def fleet_control(case: Case, *, device: str = "auto", cache_dir: Path | None = None) -> ControlCheck | None:
    """The stored check of a healthy regression's or fleet's shown evidence (made by :func:`fleet_evidence`; its
    problems make the case invalid, as a control's do), or None when the case is not one or was not checked."""
    from diageval.paths import bundle_cache_dir
    from diageval.recording.cache import cache_key, read_truth
    from diageval.recording.record import resolve_device

    if case.fleet is None or case.workload is None or case.labels.expect != "healthy":
        return None
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    truth = read_truth(cache, cache_key(case, resolve_device(device, case)))
    return truth.control if truth is not None else None


def fleet_verification_path(cache_dir: Path, key: str) -> Path:
    """Beside the truth file of the fleet bundle (outside every bundle folder)."""
    return Path(cache_dir) / f"{key}.fleet-verification.json"


def read_fleet_verification(cache_dir: Path, key: str) -> FleetVerification | None:
    """The stored FleetVerification of the fleet bundle ``key``; None when there is none or it does not read."""
    path = fleet_verification_path(cache_dir, key)
    try:
        return FleetVerification.model_validate_json(path.read_bytes()) if path.is_file() else None
    except ValueError:
        return None


def _regression_test(case: Case, members, *, device: str, cache_dir: Path,
                     force: bool = False) -> tuple[ManifestTest, list[float]]:
    """The manifestation test on repeat pairs (baseline repeat i, candidate repeat i), sequential over LOOKS, and the
    baseline's metric in each pair the test used. ``force``: pairs after the first are recorded again (the first is
    the fleet bundle's, forced with it)."""
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
            return test, [metric_of(b, case.manifest.metric) for b, _ in pairs[:test.pairs]]
        record_up_to(pairs_needed(len(pairs) + 1))
