"""Paired bootstrap comparison of two runs on the same case set (``diageval compare RUN_A RUN_B``).

Both runs are scored on the same cases, so their difference is measured case by case: each resample draws
cases with replacement (:func:`~diageval.scoring.metrics.bootstrap_weights`) and applies the SAME
multiplicities to run A's and run B's tally rows; every metric is recomputed from each run's resampled
totals (micro-averages from pooled sums, as :func:`~diageval.scoring.summary.summarize` does), and the
difference B − A is taken per resample. Pairing removes the case-to-case variation both runs share, so
the interval of the difference is much narrower than comparing two independent intervals.

Size: the comparison's models, the paired bootstrap, the randomisation test and the gate's refusals; they
share the tally tables and change together.

Decided here (the design is silent):

* Refused: runs whose case-set hash or taxonomy version differ (the error names both values), and runs
  that hold results for different case ids (one stopped early, or ran a ``--case``/``--tag`` subset):
  ``common_cases=True`` (``--common-cases``) compares them on the cases both hold instead, and lists
  what was dropped. A case whose labels (expect, labeled causes) differ between the two results files
  is refused too: the same case-set hash cannot produce that, so one folder was edited or corrupted.
* Cases scored in one run but not the other (``harness_error`` — our fault, never the diagnoser's —
  or ``invalid``) are always dropped from both sides, and listed with each side's status: the pair
  stays matched, and neither diagnoser is credited or blamed for a case the other was not judged on.
  With nothing dropped, each run's point values and marginal intervals equal its own ``summary.json``
  (same seed, same resamples).
* Refused: fewer than :data:`MIN_COMMON_CASES` cases scored in both runs. With four paired cases there
  are 16 ways to assign their differences' signs; no test on them can hold a 2.5% error rate, and a
  bootstrap interval over one case is zero-width whatever the noise.
* The interval of a difference is the hull of the paired BCa interval of B − A and the paired
  jackknife-t interval (the same case left out of both runs), over the resamples where the metric is
  defined for both runs, as for a metric's own interval (:func:`~diageval.scoring.intervals.ratio_interval`),
  clipped to the difference's range. BCa alone fired too often on the same diagnoser re-run on
  re-recorded evidence: when a few cases flip, the resamples that leave them out carry only the
  confidence jitter and make the interval too narrow (13% false "worse" against a nominal 2.5%;
  ``tests/compare_gate_simulation.py`` measures the gate). A metric undefined at the point for either
  run has no difference (null). Each run's own interval is the one its summary has (same resamples).
* B is *clearly* worse (the gate of ``--fail-if-worse``, and the verdict "B is worse") only when the
  interval lies on the worse side of 0 and the paired randomisation test agrees: under "the runs are the
  same diagnoser", A's and B's results of a case are exchangeable, so swapping them case by case at
  random (``n_boot`` swaps per comparison, one draw shared by every metric) gives the difference's
  distribution under that null, and ``p_swap_worse`` = (1 + swaps at least as far on the worse side) /
  (1 + swaps) is an exact one-sided p-value; it must be below 2.5%. For skill, a ratio of per-case loss
  sums over a reference both runs share, swapping a case flips the sign of its loss difference: the
  sign-flip test over the per-case score differences. Only the k cases whose results differ on the
  metric's inputs can move it; with k <= :data:`EXACT_SWAP_CASES` every one of the 2^k swap patterns is
  taken (p = patterns at least as far on the worse side / 2^k: exact, no draw), else the drawn ones.
  The interval alone measured 1.3-3.3% false "worse" on simulated same-diagnoser pairs; with the test the
  rate is held by construction (``python tests/compare_gate_simulation.py`` prints it, and the gate's power
  against true drops). "Clearly better" is the mirror image.
* A gate that cannot fire says so (:func:`gate_blockers`; ``diageval compare --fail-if-worse`` exits 2):
  the metric is undefined for either run, or fewer than :data:`GATE_MIN_CASES` cases are compared (all of
  them worse is still p >= 1/2^n >= 2.5%), or B reads worse but fewer than :data:`GATE_MIN_CASES` cases
  differ between the runs (the smallest p those swaps can give is 1/2^k). Before, such a gate passed.
* "B better" is direction-aware (each metric's ``better`` in :data:`~diageval.scoring.metrics.METRICS`).
  ``p_b_better`` / ``p_b_worse`` are the shares of those resamples where B is strictly better / worse;
  the rest are ties (differences within :data:`TIE_TOLERANCE`, floating-point noise), so identical runs
  read 0 and 0, not 0.5.
* ``excludes_zero``: whether the 95% interval lies entirely on one side of 0 (an interval of exactly
  [0, 0] does not exclude it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from diageval.errors import DiagevalError
from diageval.scoring.intervals import RELATIVE_TIE, bootstrap_weights, clip_interval, ratio_interval
from diageval.scoring.metrics import METRICS, Direction, MetricSpec, MetricValue, Resampled, resampled_columns
from diageval.scoring.results import CaseResult
from diageval.scoring.summary import BootstrapInfo
from diageval.scoring.tallies import TallyTable, is_derived, tally_table

SCHEMA_VERSION = 1
MIN_COMMON_CASES = 5
"""The fewest cases scored in both runs that ``compare`` judges (see the module docstring)."""
EXACT_SWAP_CASES = 12
"""Up to this many differing cases every swap pattern (2^k, at most 4096) is enumerated: an exact p-value."""
SWAP_STREAM = 104729
"""Seeds the randomisation test's swaps apart from the bootstrap's draws (same seed, same verdicts)."""
GATE_LEVEL = 0.025
"""One-sided level of "clearly worse" (and "clearly better"): the interval's tail and the swap test's."""
GATE_MIN_CASES = int(np.ceil(np.log2(1 / GATE_LEVEL) + 1e-9))
"""The fewest compared (or differing) cases on which the gate can fire: all of n cases worse has p = 1/2^n, below
:data:`GATE_LEVEL` from 6 cases (1/64); at 5 it is 1/32."""
TIE_TOLERANCE = RELATIVE_TIE
"""Differences this small (relative to the values, at least 1) are ties: resampled totals are float32, so
the same counts can reach the metric formulas by different rounding."""


def regressions(comparison: "Comparison", metrics: Iterable[str]) -> list[str]:
    """The given metrics on which run B is clearly worse than run A (see ``MetricComparison.clearly_worse``)."""
    return [m for m in metrics if m in comparison.metrics and comparison.metrics[m].clearly_worse]


class CompareError(DiagevalError):
    """Two runs that cannot be compared, or a run folder that cannot be read."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunSide(_Model):
    """Which run one side of the comparison is."""

    run_dir: str
    run_id: str
    diagnoser: str = Field(description="Diagnoser name and version")
    spec: str = Field(description="What --diagnoser was given")
    status: str = Field(description="The run's status in run.json (running, complete, interrupted, failed)")
    results: int = Field(description="Lines in its results.jsonl")
    scored: int = Field(description="Of those, scored (every status but harness_error and invalid)")


class DroppedCase(_Model):
    case_id: str
    status_a: str | None = Field(description="Its status in run A; null when run A has no result for it")
    status_b: str | None = Field(description="Its status in run B; null when run B has no result for it")


class MetricComparison(_Model):
    better: Direction = Field(description="Which way is better for this metric")
    a: MetricValue = Field(description="Run A over the compared cases (interval from the shared resamples)")
    b: MetricValue = Field(description="Run B over the compared cases")
    difference: float | None = Field(description="B − A; null when either is undefined")
    ci: tuple[float, float] | None = Field(description="Paired bootstrap 95% interval of B − A")
    p_b_better: float | None = Field(description="Share of resamples (defined for both) where B is strictly better")
    p_b_worse: float | None = Field(description="Share of those resamples where B is strictly worse")
    resamples: int = Field(description="Resamples where the metric is defined for both runs")
    excludes_zero: bool | None = Field(description="The interval lies entirely above or below 0; null without one")
    p_swap_worse: float | None = Field(None, description="Paired randomisation test (A's and B's results of each case "
                                       "swapped at random): one-sided p-value that B is worse; null without resamples")
    p_swap_better: float | None = Field(None, description="The same, that B is better")
    differing_cases: int | None = Field(None, description="Cases whose results differ between the runs on this "
                                        "metric's inputs: the only ones a swap moves (the test is exact up to 12)")

    def _side(self, worse: bool) -> bool:
        if self.ci is None:
            return False
        below = self.ci[1] < 0 if self.better == "higher" else self.ci[0] > 0
        above = self.ci[0] > 0 if self.better == "higher" else self.ci[1] < 0
        p = self.p_swap_worse if worse else self.p_swap_better
        return (below if worse else above) and (p is None or p < GATE_LEVEL)

    @property
    def clearly_worse(self) -> bool:
        """B is worse than A beyond the noise: the whole interval of B − A lies on the worse side of 0 and the
        paired randomisation test says so too (p_swap_worse < 2.5%)."""
        return self._side(worse=True)

    @property
    def clearly_better(self) -> bool:
        """The mirror image of :attr:`clearly_worse`."""
        return self._side(worse=False)


class Comparison(_Model):
    schema_version: int = SCHEMA_VERSION
    a: RunSide
    b: RunSide
    case_set_hash: str
    taxonomy_version: str
    cases: int = Field(description="Cases compared: scored in both runs")
    dropped: list[DroppedCase] = Field(description="Cases left out: not scored in both runs, or held by one run only")
    metrics: dict[str, MetricComparison]
    bootstrap: BootstrapInfo


class ScoredRun(Protocol):
    """A run as comparison needs it (read by :meth:`diageval.run.store.RunStore.load`; scoring does no I/O)."""

    root: Path
    info: Any  # RunInfo: case_set_hash, taxonomy_version, run_id, status, diagnoser
    results: list[CaseResult]


def check_same_case_set(a: ScoredRun, b: ScoredRun) -> None:
    """Refuse runs made on different case files or taxonomy versions, naming both values."""
    for field, va, vb in (
        ("case-set hash", a.info.case_set_hash, b.info.case_set_hash),
        ("taxonomy version", a.info.taxonomy_version, b.info.taxonomy_version),
    ):
        if va != vb:
            raise CompareError(
                f"runs made on different case sets cannot be compared: the {field} differs "
                f"(A {a.root}: {va}; B {b.root}: {vb})"
            )


def pair_cases(
    a: list[CaseResult], b: list[CaseResult], *, common_cases: bool = False
) -> tuple[list[CaseResult], list[CaseResult], list[DroppedCase]]:
    """The results of the cases scored in both runs (sorted by case id) and the cases dropped.

    Refuses results for different case ids unless ``common_cases``; refuses a case labeled differently in
    the two runs.
    """
    by_a, by_b = {r.case_id: r for r in a}, {r.case_id: r for r in b}
    only_a, only_b = sorted(set(by_a) - set(by_b)), sorted(set(by_b) - set(by_a))
    if (only_a or only_b) and not common_cases:
        raise CompareError(
            f"the runs hold results for different cases ({len(by_a)} in A, {len(by_b)} in B; only in A: "
            f"{_some(only_a)}; only in B: {_some(only_b)}). A run that stopped early or ran a subset is not "
            "compared on the rest; pass --common-cases to compare on the cases both hold."
        )
    dropped, keep = [], []
    for case_id in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(case_id), by_b.get(case_id)
        if ra is None or rb is None or not (ra.scored and rb.scored):
            dropped.append(DroppedCase(case_id=case_id, status_a=ra and ra.status, status_b=rb and rb.status))
            continue
        if (ra.expect, ra.categories) != (rb.expect, rb.categories):
            raise CompareError(
                f"case {case_id} is labeled differently in the two runs (A: {ra.expect} {ra.categories}; "
                f"B: {rb.expect} {rb.categories}) although their case-set hashes match: a results file was edited"
            )
        keep.append(case_id)
    return [by_a[c] for c in keep], [by_b[c] for c in keep], dropped


def _some(ids: list[str], limit: int = 5) -> str:
    if not ids:
        return "none"
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(ids[:limit]) + more


def compare_results(
    a: list[CaseResult],
    b: list[CaseResult],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    definitions: Mapping[str, MetricSpec] = METRICS,
) -> dict[str, MetricComparison]:
    """Every metric for A and B over the same scored cases, and the paired bootstrap of B − A.

    ``a`` and ``b`` must hold the same scored case ids (in any order; rows are aligned by case id).
    """
    ids_a, ids_b = sorted(r.case_id for r in a), sorted(r.case_id for r in b)
    if ids_a != ids_b:
        raise ValueError("compare_results needs results for the same cases in both runs (see pair_cases)")
    if len(set(ids_a)) != len(ids_a):
        raise ValueError("compare_results: a case id appears more than once")
    unscored = [r.case_id for r in [*a, *b] if not r.scored]
    if unscored:
        raise ValueError(f"compare_results: case(s) not scored: {', '.join(sorted(set(unscored)))}")
    table_a, table_b = tally_table(a), tally_table(b)  # both sorted by case id: row i is the same case
    weights = bootstrap_weights(len(ids_a), n_boot, seed)
    swaps = np.random.default_rng([seed, SWAP_STREAM]).integers(0, 2, size=(n_boot, len(ids_a))).astype(np.float32)
    ra, rb = Resampled(table_a, n_boot, seed, weights), Resampled(table_b, n_boot, seed, weights)
    marginal = {"a": ra.metrics(definitions), "b": rb.metrics(definitions)}

    out: dict[str, MetricComparison] = {}
    for name, d in definitions.items():
        if not n_boot:
            diffs = jack = scale = np.empty(0)
        else:
            (boot_a, jack_a), (boot_b, jack_b) = ra.resampled_values(d), rb.resampled_values(d)
            diffs, jack = boot_b - boot_a, jack_b - jack_a
            scale = np.maximum(1.0, np.maximum(np.abs(boot_a), np.abs(boot_b)))
        contributing = ra.contributing_mask(d) | rb.contributing_mask(d)
        bounds = (d.bounds[0] - d.bounds[1], d.bounds[1] - d.bounds[0])
        m = _difference(d.better, marginal["a"][name], marginal["b"][name], diffs, jack, scale, contributing,
                        bounds, n_boot)
        if n_boot and m.difference is not None:
            differing = differing_cases(table_a, table_b, d)
            exact = len(differing) <= EXACT_SWAP_CASES
            patterns = all_swaps(len(ids_a), differing) if exact else swaps
            m = m.model_copy(update={**swap_test(m.difference, swapped_differences(table_a, table_b, d, patterns),
                                                 d.better, exact=exact),
                                     "differing_cases": len(differing)})
        out[name] = m
    return out


def differing_cases(table_a: TallyTable, table_b: TallyTable, spec: MetricSpec) -> np.ndarray:
    """Indices of the cases whose tally rows differ between the runs on ``spec``'s inputs: the only cases a
    swap can move."""
    cols = table_a.inputs_for(resampled_columns({spec.name: spec}, proportions=True))
    va = table_a.values[:, [table_a.columns.index(c) for c in cols]]
    vb = table_b.values[:, [table_b.columns.index(c) for c in cols]]
    return np.flatnonzero(np.any(va != vb, axis=1))


def all_swaps(n_cases: int, cases: np.ndarray) -> np.ndarray:
    """Every one of the 2^k swap patterns of the k ``cases`` (one row each, the identity first), as 0/1 over
    all ``n_cases`` columns."""
    k = len(cases)
    bits = ((np.arange(2 ** k)[:, None] >> np.arange(k)[None, :]) & 1).astype(np.float32)
    out = np.zeros((2 ** k, n_cases), dtype=np.float32)
    out[:, cases] = bits
    return out


def swapped_differences(table_a: TallyTable, table_b: TallyTable, spec: MetricSpec, swaps: np.ndarray) -> np.ndarray:
    """B − A of ``spec`` with each case's two rows exchanged where ``swaps`` (one row per randomisation, one
    column per case, 0 or 1) says so; NaN where the metric is undefined for either side."""
    cols = table_a.inputs_for(resampled_columns({spec.name: spec}, proportions=True))
    va = table_a.values[:, [table_a.columns.index(c) for c in cols]]
    vb = table_b.values[:, [table_b.columns.index(c) for c in cols]]
    shift = (swaps @ (vb - va).astype(np.float32)).astype(float)  # a swapped case moves B's row into A
    totals_a, totals_b = va.sum(axis=0) + shift, vb.sum(axis=0) - shift
    ta = {c: totals_a[:, j] for j, c in enumerate(cols)}
    tb = {c: totals_b[:, j] for j, c in enumerate(cols)}
    if any(is_derived(c) for c in resampled_columns({spec.name: spec}, proportions=True)):
        ta, tb = table_a.with_references(ta), table_b.with_references(tb)
    return spec.values(tb) - spec.values(ta)


def swap_test(observed: float, swapped: np.ndarray, better: Direction, *, exact: bool = False) -> dict[str, float]:
    """One-sided randomisation p-values of "B worse" and "B better" (module docstring). ``exact``: ``swapped``
    holds every swap pattern, the identity included, so p is the share of them at least as far out;
    otherwise they are drawn and the observed arrangement counts once more, (1 + k) / (1 + m)."""
    defined = swapped[~np.isnan(swapped)]
    sign = 1.0 if better == "higher" else -1.0
    gain, gains = sign * observed, sign * defined
    tolerance = TIE_TOLERANCE * max(1.0, abs(observed))
    m, extra = (defined.size, 0) if exact else (defined.size + 1, 1)
    return {"p_swap_worse": (extra + int(np.count_nonzero(gains <= gain + tolerance))) / m,
            "p_swap_better": (extra + int(np.count_nonzero(gains >= gain - tolerance))) / m}


def gate_blockers(comparison: "Comparison", metrics: Iterable[str]) -> dict[str, str]:
    """Metric -> why ``--fail-if-worse`` on it cannot fire on this comparison (module docstring); the metrics
    absent from the result can fire (whether they do is :func:`regressions`)."""
    out: dict[str, str] = {}
    for name in metrics:
        m = comparison.metrics.get(name)
        if m is None or m.difference is None:
            sides = [] if m is None else [s for s, v in (("A", m.a), ("B", m.b)) if v.value is None]
            out[name] = f"{name} is undefined for {' and '.join(sides) or 'these runs'}: there is no difference to test"
        elif comparison.cases < GATE_MIN_CASES:
            out[name] = (f"only {comparison.cases} cases are compared: even B worse on every one gives p = "
                         f"1/{2 ** comparison.cases} >= {GATE_LEVEL:.1%}; the gate needs {GATE_MIN_CASES}")
        elif m.p_swap_worse is None:
            out[name] = "no resamples (--n-boot 0): the randomisation test was not run"
        elif (m.differing_cases is not None and m.differing_cases < GATE_MIN_CASES and not m.clearly_worse
              and (m.difference < 0) == (m.better == "higher") and m.difference != 0):
            out[name] = (f"B reads worse ({m.difference:+.3g}) but only {m.differing_cases} case(s) differ between "
                         f"the runs: no arrangement of them gives p < {GATE_LEVEL:.1%} (the gate needs "
                         f"{GATE_MIN_CASES} differing cases)")
    return out


def _difference(better: Direction, a: MetricValue, b: MetricValue, diffs: np.ndarray, jack: np.ndarray,
                scale: np.ndarray, contributing: np.ndarray, bounds: tuple[float, float], n_boot: int) -> MetricComparison:
    keep = ~np.isnan(diffs)
    defined, tolerance = diffs[keep], TIE_TOLERANCE * scale[keep]
    if a.value is None or b.value is None:
        return MetricComparison(better=better, a=a, b=b, difference=None, ci=None, p_b_better=None,
                                p_b_worse=None, resamples=int(defined.size), excludes_zero=None)
    gain = defined if better == "higher" else -defined
    ci = clip_interval(ratio_interval(b.value - a.value, diffs, jack, contributing), bounds) if n_boot else None
    return MetricComparison(
        better=better,
        a=a,
        b=b,
        difference=b.value - a.value,
        ci=ci,
        p_b_better=float(np.mean(gain > tolerance)) if defined.size else None,
        p_b_worse=float(np.mean(gain < -tolerance)) if defined.size else None,
        resamples=int(defined.size),
        excludes_zero=None if ci is None else bool(ci[0] > 0 or ci[1] < 0),
    )


def compare_runs(a: ScoredRun, b: ScoredRun, *, n_boot: int = 1000, seed: int = 0, common_cases: bool = False) -> Comparison:
    """Refuse two loaded runs that cannot be compared, and compare every metric (B − A)."""
    check_same_case_set(a, b)
    results_a, results_b, dropped = pair_cases(a.results, b.results, common_cases=common_cases)
    if not results_a:
        raise CompareError(f"no case is scored in both runs ({len(dropped)} dropped: {_some([d.case_id for d in dropped])})")
    if len(results_a) < MIN_COMMON_CASES:
        raise CompareError(
            f"only {len(results_a)} case(s) scored in both runs ({_some([r.case_id for r in results_a])}); a paired "
            f"comparison needs at least {MIN_COMMON_CASES}: with fewer, no interval of the difference can hold its "
            f"error rate ({len(dropped)} dropped: {_some([d.case_id for d in dropped])})")
    return Comparison(
        a=_side(a),
        b=_side(b),
        case_set_hash=a.info.case_set_hash,
        taxonomy_version=a.info.taxonomy_version,
        cases=len(results_a),
        dropped=dropped,
        metrics=compare_results(results_a, results_b, n_boot=n_boot, seed=seed),
        bootstrap=BootstrapInfo(resamples=n_boot, seed=seed),
    )


def _side(run: ScoredRun) -> RunSide:
    d = run.info.diagnoser
    return RunSide(
        run_dir=str(run.root),
        run_id=run.info.run_id,
        diagnoser=f"{d.name} {d.version}".strip(),
        spec=d.spec,
        status=run.info.status,
        results=len(run.results),
        scored=sum(r.scored for r in run.results),
    )
