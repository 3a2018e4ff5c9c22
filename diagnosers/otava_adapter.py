"""``otava``: Apache Otava (the successor of MongoDB's Hunter, ``pip install apache-otava``) on fleet and
regression evidence: change points over the runs' step times ordered by start time, each mapped to the factor
values that change there. Step times only; no trace is read.

What it runs: ``otava.analysis.compute_change_points`` (Hunter's split-and-merge E-divisive with a Student's
t significance test, Fleming et al. 2023) at Otava's own default significance (``max_pvalue`` 0.001) and with
``min_magnitude`` 0.1 (a change under a tenth of the step is not worth naming, the bar every built-in uses),
on one series:

* **a fleet** (three runs or more): one point per run, its level (the median over its steps of the slowest
  rank's step time), the runs in start order. A run's steps share its host, version and settings: they are
  one observation of its factor values, not eight. Otava's t-test takes the points of a series as independent,
  so a series of every step calls any run-to-run difference significant by the number of steps (the adapter's
  first version did: on a recorded 12-run fleet it named, at confidence 1.0, a host two of whose three runs
  were among the fleet's fastest);
* **a regression pair**: two points cannot be split, so the series is the baseline's steps then the
  candidate's, and the change must fall at the boundary (the candidate's steps in a slower segment). That
  p-value weighs the steps' spread only, never how far two runs of one job drift apart; the pair's confidence
  is therefore also the probability that the change is beyond that drift (below).

Mapping (what the change points show -> a finding). Every factor value whose runs change at a change point is
equally consistent with it, so the adapter spreads its forecast over them:

=======================================================  ==================================================
what it sees                                             finding
=======================================================  ==================================================
no change point, or no segment at least 10% slower than  nothing
the fastest one
a slow segment of a fleet (runs between change points,   ``symptom.slow_step`` naming each *candidate*
at least 10% slower than the fastest segment)            value: held by every run of the segment and by no
                                                         run of a segment that is not slow (a fault behind
                                                         a value slows every run holding it), at confidence
                                                         (1 − the largest p-value of the change points that
                                                         bound the segment, calibrated by permutation: see
                                                         :func:`calibrated`) / the number of candidates; a
                                                         value that is a candidate of several segments
                                                         keeps its highest. No candidate: nothing for that
                                                         segment (no one value explains it)
the candidates of every slow segment are one group of    abstain, naming the group: no evidence in the
values held by exactly the same runs, those runs are     fleet can tell them apart (the Bayes decision for
the slow runs, and 1 − p >= 0.5                          the abstain event: abstaining is right with
                                                         probability 1 − p)
a regression pair whose candidate is in a slower         ``symptom.slow_step`` naming the candidate's
segment                                                  changed value, confidence (1 − p) × the chance
                                                         that its magnitude m (the candidate's median step
                                                         over the baseline's) is beyond two runs' drift
                                                         (``pair_drift.beyond_drift``)
=======================================================  ==================================================

Never claims: any cause (``claims = ()``). A change point says when the step time moved, never why: the
adapter reports where the slowdown sits (a symptom naming a factor value, which the rank-credited score and
factor precision and recall judge) and leaves the mechanism to others. One job's evidence (no
``fleet.json``), or fewer than two runs with logged steps: it says nothing.
"""

from __future__ import annotations

import random
from statistics import median
from typing import ClassVar

from diageval.bundle.fleet import Fleet, read_fleet
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import installed_version, require_module
from diageval.diagnosers.pair_drift import beyond_drift
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding

INSTALL_HINT = "pip install 'diageval[otava]'"
MAX_PVALUE = 0.001
"""Otava's own default significance."""
MIN_MAGNITUDE = 0.1
"""The smallest change worth naming, a tenth of the step (the bar every built-in uses)."""
PERMUTATIONS = 100
"""Shuffles of a fleet's series that calibrate Otava's p-value (:func:`calibrated`); Otava's own permutation
test (``compute_change_points_orig``, Matteson and James' E-divisive) draws 100."""
MIN_STEPS = 3
"""A run with fewer logged steps has no level (one slow first step is not a run's speed)."""

Run = tuple[str, dict[str, str], list[float]]


def run_series(fleet: Fleet) -> list[Run]:
    """(name, metadata, per-step slowest-rank times) of each run with at least MIN_STEPS steps, by start time."""
    out = []
    for info in fleet.ordered():
        per_step: dict[int, float] = {}
        for s in fleet.open_run(info.name).steps():
            per_step[s.step] = max(per_step.get(s.step, 0.0), s.duration)
        if len(per_step) >= MIN_STEPS:
            out.append((info.name, dict(info.metadata), [per_step[k] for k in sorted(per_step)]))
    return out


def change_points(series: list[float]) -> list[tuple[int, float]]:
    """Otava's change points of ``series``: (index, p-value), by index."""
    from otava.analysis import compute_change_points

    cps, _ = compute_change_points(series, max_pvalue=MAX_PVALUE, min_magnitude=MIN_MAGNITUDE)
    return sorted((int(cp.index), float(cp.stats.pvalue)) for cp in cps)


def calibrated(series: list[float], pvalue: float) -> float:
    """The chance that Otava reports a change point at least this strong (a p-value at most ``pvalue``) on the
    same values in an order that carries no change: a permutation p-value over PERMUTATIONS shuffles of the
    series (fixed seed: the same evidence gets the same answer). Otava's own p-value is that of a t-test at the
    split it chose as the best of many; on 300 series of 12 runs of noise alone (log-normal, sd 0.15) it
    reported a change point at ``max_pvalue`` 0.001 in 8 (2.7%) and at 0.01 in 48 (16%) (``python
    tests/fleet_simulation.py --false-alarms``): the search makes its p-value smaller than the chance of a false change. Shuffling the series
    repeats the search, so this one is not."""
    rng = random.Random(0)
    shuffled, hits = list(series), 0
    for _ in range(PERMUTATIONS):
        rng.shuffle(shuffled)
        found = change_points(shuffled)
        hits += bool(found) and min(p for _, p in found) <= pvalue
    return (1 + hits) / (1 + PERMUTATIONS)


def slow_segments(series: list[float], cps: list[tuple[int, float]]) -> list[tuple[int, int, float]]:
    """The segments (start, stop, p) at least MIN_MAGNITUDE slower than the fastest segment; p is the largest
    p-value of the change points that bound the segment."""
    bounds = [0, *(i for i, _ in cps), len(series)]
    pvalue = dict(cps)
    means = [sum(series[a:b]) / (b - a) for a, b in zip(bounds, bounds[1:])]
    fastest = min(means)
    return [(a, b, max(pvalue.get(a, 0.0), pvalue.get(b, 0.0)))
            for (a, b), m in zip(zip(bounds, bounds[1:]), means) if m >= (1 + MIN_MAGNITUDE) * fastest]


def holders(runs: list[Run]) -> dict[FactorRef, frozenset[int]]:
    """Each factor value -> the positions (in start order) of the runs holding it; values every run holds
    are left out (they tell no run from another)."""
    held: dict[FactorRef, set[int]] = {}
    for i, (_, metadata, _) in enumerate(runs):
        for k, v in metadata.items():
            held.setdefault(FactorRef(name=k, value=v), set()).add(i)
    return {ref: frozenset(pos) for ref, pos in held.items() if len(pos) < len(runs)}


def fleet_forecast(runs: list[Run]) -> tuple[dict[FactorRef, float], list[FactorRef], str]:
    """The factor forecast of a fleet (module docstring): value -> confidence, the aliased group to abstain on
    (empty when none), and a line of evidence."""
    levels = [median(times) for _, _, times in runs]
    cps = change_points(levels)
    if not cps:
        return {}, [], "no change point"
    segments = slow_segments(levels, cps)
    if not segments:
        return {}, [], f"{len(cps)} change point(s), no segment {MIN_MAGNITUDE:.0%} slower than the fastest"
    segments = [(a, b, calibrated(levels, p)) for a, b, p in segments]
    slow = {i for a, b, _ in segments for i in range(a, b)}
    held = holders(runs)
    forecast: dict[FactorRef, float] = {}
    groups: set[frozenset[int]] = set()
    for a, b, p in segments:
        inside = set(range(a, b))
        candidates = sorted((ref for ref, pos in held.items() if inside <= pos <= slow),
                            key=lambda r: (r.name, r.value))
        for ref in candidates:
            forecast[ref] = max(forecast.get(ref, 0.0), (1 - p) / len(candidates))
        groups |= {held[ref] for ref in candidates}
    where = "; ".join(f"runs {a + 1}-{b} of {len(runs)} (start order) slow, p {p:.2g} (permutation-calibrated)"
                      for a, b, p in segments)
    if len(groups) == 1:
        [group] = groups
        tied = sorted((ref for ref, pos in held.items() if pos == group), key=lambda r: (r.name, r.value))
        p = max(p for _, _, p in segments)
        if len(tied) > 1 and group == slow and 1 - p >= 0.5:
            return {}, tied, where
    return forecast, [], where


def pair_forecast(runs: list[Run], value: FactorRef | None) -> tuple[float, float, str]:
    """A regression pair (baseline first): the confidence that the candidate is slower because of its changed
    value, the magnitude, and a line of evidence."""
    (_, _, base), (_, _, cand) = runs
    cps = change_points(base + cand)
    magnitude = median(cand) / median(base)
    if value is None or not cps:
        return 0.0, magnitude, "no change point"
    segments = slow_segments(base + cand, cps)
    in_slow = sum(1 for a, b, _ in segments for i in range(a, b) if i >= len(base))
    if in_slow * 2 <= len(cand) or any(a < len(base) for a, _, _ in segments):
        return 0.0, magnitude, "the change points do not put the candidate alone in a slower segment"
    p = max(p for _, _, p in segments)
    beyond = beyond_drift(magnitude)
    return (1 - p) * beyond, magnitude, (f"otava change point at the run boundary, p {p:.2g}; candidate/baseline "
                                         f"median step {magnitude:.2f}, beyond two runs' drift with probability {beyond:.2f}")


class OtavaDiagnoser:
    """Change points over a fleet's step times (see the module docstring)."""

    name: ClassVar[str] = "otava"
    version: ClassVar[str] = f"2+apache-otava-{installed_version('apache-otava')}"
    claims: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        require_module("otava.analysis", self.name, "apache-otava", INSTALL_HINT)

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        fleet = read_fleet(bundle)
        if fleet is None:
            return Diagnosis()
        runs = run_series(fleet)
        if len(runs) < 2:
            # no series for Otava (a recorded pair may log no steps): it says nothing. Not an abstention, which
            # states that the case cannot be judged on its evidence; the traces may judge it
            return Diagnosis()
        if fleet.is_regression:
            return self._pair(fleet, runs)
        forecast, aliased, where = fleet_forecast(runs)
        if aliased:
            values = ", ".join(f"{r.name}={r.value}" for r in aliased)
            return Diagnosis(abstain=Abstention(reason=f"otava change points: {where}; exactly the slow runs hold "
                                                       f"{values}: the fleet cannot tell them apart", factors=aliased))
        return Diagnosis(findings=[
            Finding(category="symptom.slow_step", kind="symptom", confidence=round(q, 3), factor=ref,
                    summary=f"otava change points over the runs' median step times in start order: {where}; "
                            f"{ref.name}={ref.value} is held by a slow segment's every run and by no fast run "
                            f"(one of the values consistent with it)",
                    evidence=[f"otava compute_change_points(max_pvalue={MAX_PVALUE}, min_magnitude={MIN_MAGNITUDE})"])
            for ref, q in sorted(forecast.items(), key=lambda kv: (-kv[1], kv[0].name, kv[0].value)) if q > 0])

    @staticmethod
    def _pair(fleet: Fleet, runs: list[Run]) -> Diagnosis:
        base, cand = fleet.role("baseline"), fleet.role("candidate")
        ordered = {run[0]: run for run in runs}
        if base.name not in ordered or cand.name not in ordered:
            return Diagnosis()  # no pair of step series to compare (as above)
        differ = [k for k in fleet.factors if base.metadata[k] != cand.metadata[k]]
        value = FactorRef(name=differ[0], value=cand.metadata[differ[0]]) if differ else None
        q, magnitude, where = pair_forecast([ordered[base.name], ordered[cand.name]], value)
        if q <= 0 or value is None:
            return Diagnosis()
        return Diagnosis(findings=[Finding(
            category="symptom.slow_step", kind="symptom", confidence=round(q, 3), factor=value,
            magnitude=round(magnitude, 4),
            summary=f"the candidate ({value.name}={value.value}) takes {magnitude:.2f}x the baseline's median step: "
                    f"{where}", evidence=[f"otava compute_change_points(max_pvalue={MAX_PVALUE}, "
                                          f"min_magnitude={MIN_MAGNITUDE}) over the pair's steps"])])
