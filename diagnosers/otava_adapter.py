"""``otava``: Apache Otava (the successor of MongoDB's Hunter, ``pip install apache-otava``) on fleet and
regression evidence: change points over the runs' step times ordered by start time, each mapped to the factor
values that changed there. Step times only; no trace is read.

What it runs: ``otava.analysis.compute_change_points`` (Hunter's split-and-merge E-divisive with a Student's
t significance test, Fleming et al. 2023) on one series: every logged step time (the slowest rank's, per
step) of every run, the runs in start order, at Otava's own default significance (``max_pvalue`` 0.001) and
with ``min_magnitude`` 0.1 (a change under a tenth of the step is not worth naming, the bar every built-in
uses). A run belongs to the segment that holds most of its steps.

Mapping (what the change points show -> a finding):

=======================================================  ==================================================
what it sees                                             finding
=======================================================  ==================================================
no change point, or no segment at least 10% slower than  nothing (the fleet looks alike)
the fastest one
slow segments: the runs in them (S)                      the values every run of which is in S, largest
                                                         first, until S is covered (two values at fault
                                                         are two groups); if none, the values whose runs
                                                         overlap S best (Jaccard |runs(v) ∩ S| / |runs(v) ∪
                                                         S|): ``symptom.slow_step`` naming each value,
                                                         confidence (1 − the largest p-value of the change
                                                         points that bound the slow segments) × (1, or the
                                                         Jaccard times the share of the value's runs that
                                                         are slow: a fault behind a value slows all of
                                                         them) / the values held by exactly the same
                                                         runs (aliased values share it); on a regression
                                                         pair, the magnitude (slow runs' mean step time
                                                         over the others')
=======================================================  ==================================================

Never claims: any cause (``claims = ()``). A change point says when the step time moved, never why: the
adapter reports where the slowdown sits (a symptom naming a factor value, which the rank-credited score and
factor precision and recall judge) and leaves the mechanism to others. Aliased values (held by the same runs)
tie and share the confidence: it does not abstain. One job's evidence (no ``fleet.json``): it says nothing.
"""

from __future__ import annotations

from typing import ClassVar

from diageval.bundle.fleet import Fleet, read_fleet
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserUnavailable, installed_version
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding

INSTALL_HINT = "pip install 'diageval[otava]'"
MAX_PVALUE = 0.001
MIN_MAGNITUDE = 0.1
MIN_STEPS = 3


def run_series(fleet: Fleet) -> list[tuple[str, dict[str, str], list[float]]]:
    """(name, metadata, per-step slowest-rank times) of each run with at least MIN_STEPS steps, by start time."""
    out = []
    for info in fleet.ordered():
        per_step: dict[int, float] = {}
        for s in fleet.open_run(info.name).steps():
            per_step[s.step] = max(per_step.get(s.step, 0.0), s.duration)
        if len(per_step) >= MIN_STEPS:
            out.append((info.name, dict(info.metadata), [per_step[k] for k in sorted(per_step)]))
    return out


def slow_runs(runs: list[tuple[str, dict[str, str], list[float]]]) -> tuple[set[str], float, float]:
    """The runs in segments at least MIN_MAGNITUDE slower than the fastest segment, the largest p-value of the
    change points that bound them, and the ratio of their mean step time to the other runs'."""
    from otava.analysis import compute_change_points

    series = [t for _, _, times in runs for t in times]
    owner = [name for name, _, times in runs for _ in times]
    cps, _ = compute_change_points(series, max_pvalue=MAX_PVALUE, min_magnitude=MIN_MAGNITUDE)
    bounds = [0, *(cp.index for cp in cps), len(series)]
    means = [sum(series[a:b]) / (b - a) for a, b in zip(bounds, bounds[1:])]
    fastest = min(means)
    slow_segments = [k for k, m in enumerate(means) if m >= (1 + MIN_MAGNITUDE) * fastest]
    if not slow_segments:
        return set(), 1.0, 1.0
    steps_in: dict[str, list[int]] = {}
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        for i in range(a, b):
            steps_in.setdefault(owner[i], []).append(k)
    slow = {name for name, ks in steps_in.items() if sum(k in slow_segments for k in ks) * 2 > len(ks)}
    bounding = {k - 1 for k in slow_segments if k > 0} | {k for k in slow_segments if k < len(cps)}
    pvalue = max((float(cps[i].stats.pvalue) for i in bounding), default=1.0)
    inside = [t for t, o in zip(series, owner) if o in slow]
    outside = [t for t, o in zip(series, owner) if o not in slow]
    ratio = (sum(inside) / len(inside)) / (sum(outside) / len(outside)) if inside and outside else 1.0
    return slow, pvalue, ratio


def matching_values(runs: list[tuple[str, dict[str, str], list[float]]],
                    slow: set[str]) -> list[tuple[list[FactorRef], float]]:
    """The factor values that explain the slow runs: groups of values held by the same runs (aliased: they tie),
    each with its share of the confidence (module docstring)."""
    everyone = {n for n, _, _ in runs}
    held: dict[FactorRef, frozenset[str]] = {}
    for name, metadata, _ in runs:
        for k, v in metadata.items():
            ref = FactorRef(name=k, value=v)
            held[ref] = held.get(ref, frozenset()) | {name}
    held = {ref: names for ref, names in held.items() if names != everyone}
    groups: dict[frozenset[str], list[FactorRef]] = {}
    for ref, names in sorted(held.items(), key=lambda kv: (kv[0].name, kv[0].value)):
        groups.setdefault(names, []).append(ref)
    # values every run of which is slow, largest first, until the slow runs are covered
    chosen, uncovered = [], set(slow)
    inside = {names: refs for names, refs in groups.items() if names <= slow}
    while uncovered and inside:
        names = max(inside, key=lambda n: (len(n & uncovered), len(n)))
        if not names & uncovered:
            break
        chosen.append((inside.pop(names), 1.0))
        uncovered -= names
    if chosen:
        return chosen
    # no value is held by slow runs only: the best overlap (Jaccard), ties sharing, weighed by the share of the
    # value's runs that are slow (a fault behind a value slows every run holding it: a value some of whose runs
    # are fast is at most a hedge)
    jaccard = {names: len(names & slow) / len(names | slow) for names in groups}
    best = max(jaccard.values(), default=0.0)
    tied = [(names, refs) for names, refs in groups.items() if jaccard[names] == best and best > 0]
    return [([ref for _, refs in tied for ref in refs], best * min(len(n & slow) / len(n) for n, _ in tied))] if tied else []


class OtavaDiagnoser:
    """Change points over a fleet's step times (see the module docstring)."""

    name: ClassVar[str] = "otava"
    version: ClassVar[str] = f"1+apache-otava-{installed_version('apache-otava')}"
    claims: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        try:
            import otava.analysis  # noqa: F401
        except ImportError as exc:
            raise DiagnoserUnavailable(f"the otava diagnoser needs apache-otava ({exc}); install it with: {INSTALL_HINT}") from exc

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        fleet = read_fleet(bundle)
        if fleet is None:
            return Diagnosis()
        runs = run_series(fleet)
        if len(runs) < 2:
            return Diagnosis(abstain=Abstention(reason=f"{len(runs)} run(s) with at least {MIN_STEPS} logged steps: "
                                                       "no series to segment"))
        slow, pvalue, ratio = slow_runs(runs)
        if not slow or len(slow) == len(runs):
            return Diagnosis()
        magnitude = ratio if fleet.is_regression else None
        runs_text = ", ".join(sorted(slow))
        findings = []
        for values, match in matching_values(runs, slow):
            how = "every run holding it is slow" if match == 1.0 else (f"its runs overlap them best, though not all of "
                                                                        f"them are slow (weight {match:.2f})")
            tie = f"; held by exactly the same runs as {len(values) - 1} other value(s)" if len(values) > 1 else ""
            findings += [Finding(
                category="symptom.slow_step", kind="symptom", confidence=round((1 - pvalue) * match / len(values), 3),
                factor=ref, magnitude=magnitude,
                summary=f"change points put runs {runs_text} in segments {ratio:.2f}x slower than the others; "
                        f"{ref.name}={ref.value}: {how}{tie}",
                evidence=[f"otava change points: largest p-value {pvalue:.2g} (max_pvalue {MAX_PVALUE})"])
                for ref in values]
        return Diagnosis(findings=findings)
