"""Fleet and regression evidence (``fleet.json`` beside one bundle per run): which factor value the slow runs
share, by how much, and why (issue 24).

How it reasons, in order:

1. **One number per run.** A run's step time is, per step, the slowest rank's duration (the job's step ends
   when its last rank does); its level is the median over its steps (robust to a warm-up step or a stray
   hiccup). Runs, not steps, are the units of comparison: steps of one run share its host, version and
   config, so they are not independent evidence about a factor.
2. **Segment by every factor value.** For each value *v* of each factor, the runs holding it (A) against
   the others (B): the effect is the difference of the mean log run level, A − B (a ratio, exp of it), with
   a standard error from the run-to-run spread: the pooled within-group standard deviation of the log
   levels (n − 2 degrees of freedom), never below :data:`RUN_NOISE_FLOOR` nor below the runs' own median
   standard errors (a regression pair has no spread to pool: its noise is the floor). The interval is
   effect ± t · se. The confidence that *v* is behind a slowdown is the probability that the effect exceeds
   the smallest one worth naming (``thresholds.MIN_CAUSE_SHARE``: a tenth of the step), graded as every
   rules confidence is (a fuzzy cut, ``stats.graded_confidence``, with Student's t at the spread's degrees
   of freedom for the normal), and corrected for looking at every value: the value picked is the best of
   *m* (the distinct groups of runs the values define), so the chance that noise alone put some value this
   far over the cut is at most *m* times one value's (Bonferroni): confidence = 1 − *m* · (1 − P), at most
   ``thresholds.MAX_CONFIDENCE``. A busy host moves whole runs by tens of percent, and a fleet of 8 runs
   offers 6-10 values to pick from.
3. **Aliased values are not separated.** Values held by exactly the same runs (every node-07 run is also a
   v2.5 run) have one effect; when the strongest effect belongs to such a group, the diagnosis abstains
   naming every value of the group: no evidence in the fleet can say which one it is. A regression whose
   candidate changed several values is the exception (:func:`regression_of_changed_values`): its causes are
   still read from the pair, and the slowdown is spread evenly over the changed values.
   When some value is claimable (over the claim floor after the correction) but none reaches 0.5, and the
   strongest effect is over that smallest slowdown in its point estimate (a regression smaller than the
   runs' spread), the diagnosis abstains, saying so: the fleet cannot confirm it, and naming it would be a
   guess. Below the claim floor it is noise: nothing is said.
4. **More than one factor.** After a value is named, its runs are set aside and step 2 runs again on the
   others (up to :data:`MAX_FACTORS` values), so a second faulty value is judged against runs that lack
   the first one.
5. **Why the runs are slow.** The slow runs' own evidence is read against the other runs': the rules'
   one-job analysis of each run (its cause claims), and what a trace shows about how it was made
   (:func:`trace_marks`: profiler bookkeeping events per op, wide numeric types in compute ops, compiled
   regions compiled more than once). A mechanism counts for the value by how much more of the slow runs
   show it than of the others (share or mean confidence, A − B); the claim's confidence is the factor's
   confidence times that difference. A trace mark says how the runs were made (profiled in detail, computing
   in double precision, compiling again): where one differs, what the one-job rules read differently on the
   same runs is its consequence (a recompiling run has thousands of host ops per step, a profiled one slow
   host ops), so those are reported in the mark's claim, not claimed beside it. When nothing differs, the
   diagnosis says which runs are slower and by how much (``symptom.slow_step`` naming the value) and claims
   no cause.

A regression pair's claims state the magnitude (candidate / baseline level). The module reads only the
bundles; the case, its labels and its fault words never reach it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from diageval.bundle.fleet import Fleet
from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stream import StreamState, TraceFormatError, iter_trace_events
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.stats import claimable, median, median_standard_error
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding

RUN_NOISE_FLOOR = 0.05
"""The least run-to-run spread of a run's log median step time assumed (5%): the harness's own floor on a
healthy twin's noise (``recording/truth.py``), since a shared host moves a run's median by a few percent
between otherwise equal runs. A fleet that shows more spread uses its own."""
MAX_FACTORS = 3
"""Values named in one fleet at most: each later one is judged on the runs the earlier ones leave."""
MIN_STEPS = 3
"""A run with fewer logged steps has no level (one slow first step is not a run's speed)."""
WIDE_TYPES = ("double", "c10::complex<double>")
COMPUTE_OP = re.compile(r"(mm|matmul|linear|conv|bmm|baddbmm|addmm)", re.IGNORECASE)
COMPILED_REGION = re.compile(r"Torch-Compiled Region: (\d+)/(\d+)")
OBSERVER_SHARE = 0.5
"""Profiler bookkeeping events (Python frames of ``with_stack``, ``[memory]`` events of ``profile_memory``)
per recorded op at which a run counts as observed in detail: ``with_stack`` adds about one Python frame
per op, ``profile_memory`` a few allocation events per op; a run profiled plainly has none."""
WIDE_SHARE = 0.5
"""Share of a run's compute ops (matmuls, convolutions) with double-precision inputs at which it counts as
computing wide: a model in float32 has none, one switched to float64 has all of them."""

JobDiagnoser = Callable[[EvidenceBundle], Diagnosis]


@dataclass
class RunLevel:
    """One run: its metadata and its step times."""

    name: str
    metadata: dict[str, str]
    step_times: list[float]
    bundle: EvidenceBundle | None = None
    signals: dict[str, float] = field(default_factory=dict)  # mechanism -> strength in [0, 1] (step 5)

    @property
    def level(self) -> float:
        return math.log(max(median(self.step_times), 1e-9))

    @property
    def level_se(self) -> float:
        return median_standard_error([math.log(max(t, 1e-9)) for t in self.step_times])


@dataclass(frozen=True)
class Effect:
    """The runs holding a factor value (A) against the others (B)."""

    factor: FactorRef
    runs: tuple[str, ...]
    ratio: float          # exp(mean log level of A - of B)
    low: float            # 95% interval of the ratio
    high: float
    confidence: float     # P(ratio > 1 + MIN_CAUSE_SHARE)

    def describe(self) -> str:
        return (f"runs with {self.factor.name}={self.factor.value} ({len(self.runs)}: {', '.join(self.runs[:6])}"
                f"{', ...' if len(self.runs) > 6 else ''}) take {self.ratio:.2f}x the others' median step time "
                f"[95% interval {self.low:.2f}, {self.high:.2f}]")


def step_times(bundle: EvidenceBundle) -> list[float]:
    """Per logged step, the slowest rank's duration (seconds), in step order."""
    per_step: dict[int, float] = {}
    for s in bundle.steps():
        per_step[s.step] = max(per_step.get(s.step, 0.0), s.duration)
    return [per_step[k] for k in sorted(per_step)]


def run_levels(fleet: Fleet) -> tuple[list[RunLevel], list[str]]:
    """The fleet's runs with enough steps to have a level (by start time), and a note per run left out."""
    runs, notes = [], []
    for info in fleet.ordered():
        bundle = fleet.open_run(info.name)
        times = step_times(bundle)
        if len(times) < MIN_STEPS:
            notes.append(f"run {info.name}: {len(times)} logged step(s), fewer than {MIN_STEPS}: left out")
            continue
        runs.append(RunLevel(info.name, dict(info.metadata), times, bundle))
    return runs, notes


def _t_quantile(df: int) -> float:
    if df < 1:
        return 1.959964
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def effect_of(ref: FactorRef, runs: list[RunLevel], looked_at: int = 1) -> Effect | None:
    """The effect of holding ``ref`` among ``runs`` (module docstring, step 2), its confidence corrected for
    ``looked_at`` values compared; None when no run, or every run, holds it."""
    a = [r for r in runs if r.metadata.get(ref.name) == ref.value]
    b = [r for r in runs if r.metadata.get(ref.name) != ref.value]
    if not a or not b:
        return None
    ya, yb = [r.level for r in a], [r.level for r in b]
    ma, mb = sum(ya) / len(ya), sum(yb) / len(yb)
    df = len(runs) - 2
    spread = math.sqrt((sum((y - ma) ** 2 for y in ya) + sum((y - mb) ** 2 for y in yb)) / df) if df > 0 else 0.0
    own = math.sqrt(sum(r.level_se ** 2 for r in runs) / len(runs))
    sigma = max(RUN_NOISE_FLOOR, spread, own)
    se = sigma * math.sqrt(1 / len(a) + 1 / len(b))
    diff, t = ma - mb, _t_quantile(df)
    return Effect(factor=ref, runs=tuple(r.name for r in a), ratio=math.exp(diff), low=math.exp(diff - t * se),
                  high=math.exp(diff + t * se), confidence=over_the_cut(diff, se, df, looked_at))


def over_the_cut(diff: float, se: float, df: int, looked_at: int) -> float:
    """P(the log effect exceeds the smallest slowdown worth naming), a fuzzy cut as ``stats.graded_confidence``
    with Student's t at ``df`` (the normal when there is no spread to pool), Bonferroni-corrected for
    ``looked_at`` values compared, at most MAX_CONFIDENCE."""
    cut = math.log(1 + T.MIN_CAUSE_SHARE)
    sigma = math.sqrt(se ** 2 + (T.CUT_SOFTNESS * cut) ** 2)
    z = (diff - cut) / sigma
    if df >= 1:
        from scipy.stats import t

        above = float(t.cdf(z, df))
    else:
        above = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    return round(min(T.MAX_CONFIDENCE, max(0.0, 1 - looked_at * (1 - above))), 3)


def factor_values(runs: list[RunLevel]) -> list[FactorRef]:
    names = sorted({k for r in runs for k in r.metadata})
    return [FactorRef(name=k, value=v) for k in names for v in sorted({r.metadata[k] for r in runs if k in r.metadata})]


def aliases(ref: FactorRef, runs: list[RunLevel]) -> list[FactorRef]:
    """Other values held by exactly the runs that hold ``ref`` (over the whole fleet)."""
    held = {r.name for r in runs if r.metadata.get(ref.name) == ref.value}
    return [other for other in factor_values(runs)
            if other != ref and {r.name for r in runs if r.metadata.get(other.name) == other.value} == held]


def slow_values(runs: list[RunLevel]) -> tuple[list[Effect], list[FactorRef], Effect | None]:
    """The values behind a slowdown, strongest first (steps 2-4), the aliased group that stopped the search
    (empty when none did), and the strongest effect over every run, claimable or not."""
    named: list[Effect] = []
    top: Effect | None = None
    left = list(runs)
    for _ in range(MAX_FACTORS):
        refs = factor_values(left)
        groups = len({frozenset(r.name for r in left if r.metadata.get(ref.name) == ref.value) for ref in refs})
        effects = [e for e in (effect_of(ref, left, groups) for ref in refs) if e is not None]
        if not effects:
            break
        best = max(effects, key=lambda e: (e.confidence, e.ratio))
        top = top or max(effects, key=lambda e: (e.ratio, e.confidence))
        if not claimable(best.confidence):
            break
        group = aliases(best.factor, runs)
        if group and best.confidence >= 0.5:
            return named, [best.factor, *group], top
        named.append(best)
        left = [r for r in left if r.name not in best.runs]
        if len(left) < 2:
            break
    return named, [], top


def trace_marks(bundle: EvidenceBundle) -> dict[str, float]:
    """What the run's traces show about how it ran, each in [0, 1]: ``observer`` (profiler bookkeeping events
    per op, over :data:`OBSERVER_SHARE`), ``wide`` (compute ops on double-precision inputs, over
    :data:`WIDE_SHARE`), ``recompiled`` (a compiled region compiled more than once)."""
    ops = bookkeeping = compute = wide = 0
    compiled: dict[str, set[str]] = {}
    for rank, path in bundle.trace_paths().items():
        state = StreamState()
        try:
            for ev in iter_trace_events(path, state):
                if ev.cat == "cpu_op":
                    ops += 1
                    if ev.name and COMPUTE_OP.search(ev.name):
                        compute += 1
                        types = ev.decoded_args().get("Input type") or []
                        wide += any(isinstance(x, str) and x in WIDE_TYPES for x in types)
                elif ev.cat == "python_function" or ev.name == "[memory]":
                    bookkeeping += 1
                if ev.name and ev.name.startswith("Torch-Compiled Region"):
                    m = COMPILED_REGION.search(ev.name)
                    if m:
                        compiled.setdefault(m.group(1), set()).add(m.group(2))
        except TraceFormatError:
            continue
    return {
        "observer": float(ops > 0 and bookkeeping / ops >= OBSERVER_SHARE),
        "wide": float(compute > 0 and wide / compute >= WIDE_SHARE),
        "recompiled": float(any(len(v) > 1 for v in compiled.values())),
    }


MARK_CAUSES = {"observer": "measurement.profiler_overhead", "wide": "compute.numeric_precision",
               "recompiled": "compile.recompilation"}
MARK_WORDS = {"observer": "profiler bookkeeping events (Python frames, memory events) on most ops",
              "wide": "double-precision inputs to most compute ops", "recompiled": "a compiled region compiled again"}


def run_signals(run: RunLevel, diagnose_job: JobDiagnoser) -> dict[str, float]:
    """Mechanism -> strength for one run: the one-job rules' cause claims (their confidence) and the trace marks."""
    if not run.signals and run.bundle is not None:
        signals: dict[str, float] = {}
        for f in diagnose_job(run.bundle).causes:
            signals[f.category] = max(signals.get(f.category, 0.0), f.confidence)
        for mark, strength in trace_marks(run.bundle).items():
            category = MARK_CAUSES[mark]
            signals[category] = max(signals.get(category, 0.0), strength)
        run.signals = signals
    return run.signals


def explain(effect: Effect, slow: list[RunLevel], others: list[RunLevel], diagnose_job: JobDiagnoser,
            magnitude: float | None) -> list[Finding]:
    """The causes the slow runs show more than the others (step 5), each behind ``effect.factor``."""
    def mean(rows: list[RunLevel], category: str) -> float:
        return sum(run_signals(r, diagnose_job).get(category, 0.0) for r in rows) / len(rows) if rows else 0.0

    categories = sorted({c for r in slow for c in run_signals(r, diagnose_job)})
    differing = {}
    for category in categories:
        a, b = mean(slow, category), mean(others, category)
        confidence = round(min(T.MAX_CONFIDENCE, effect.confidence * max(0.0, a - b)), 3)
        if claimable(confidence):
            differing[category] = (a, b, confidence)
    marked = [c for c in differing if c in MARK_CAUSES.values()]
    consequences = [c for c in differing if c not in MARK_CAUSES.values()] if marked else []
    findings = []
    for category, (a, b, confidence) in differing.items():
        if category in consequences:
            continue
        mark = next((m for m, c in MARK_CAUSES.items() if c == category), None)
        shown = MARK_WORDS[mark] if mark else f"the one-job rules name {category}"
        if mark and consequences:
            shown += f" (the one-job rules' {', '.join(consequences)} on them read as its consequence)"
        findings.append(Finding(
            category=category, kind="cause", confidence=confidence, factor=effect.factor, magnitude=magnitude,
            summary=f"{effect.describe()}; their evidence shows {shown} (mean {a:.2f} on them, {b:.2f} on the others)",
            evidence=[f"fleet.json: {effect.factor.name}={effect.factor.value} on runs {', '.join(effect.runs)}",
                      *(f"runs/{r.name}: median step {median(r.step_times) * 1e3:.1f} ms" for r in slow[:4])]))
    return sorted(findings, key=lambda f: -f.confidence)


def regression_of_changed_values(changed: list[FactorRef], runs: list[RunLevel], diagnose_job: JobDiagnoser) -> Diagnosis:
    """A regression whose candidate changed several values at once (a release moves a version and a config
    together): the pair cannot say which changed value slowed the candidate, but its evidence can still say why it
    is slower. So the causes the candidate shows more than the baseline are named (step 5) without a value, and the
    slowdown is placed behind each changed value at an equal share of its confidence: with no evidence that
    separates them, each is as likely as the others, which is the forecast a proper score rewards, where
    abstaining would also withhold the cause and the magnitude the pair does show. A fleet's aliased values are
    still abstained on: there the same runs hold them, and nothing is named."""
    effect = effect_of(changed[0], runs)
    if effect is None or not claimable(effect.confidence):
        return Diagnosis(findings=[])
    slow = [r for r in runs if r.name in effect.runs]
    others = [r for r in runs if r.name not in effect.runs]
    causes = [f.model_copy(update={"factor": None}) for f in explain(effect, slow, others, diagnose_job, effect.ratio)]
    share = round(effect.confidence / len(changed), 3)
    where = [Finding(category="symptom.slow_step", kind="symptom", confidence=share, factor=ref, magnitude=effect.ratio,
                     summary=f"{effect.describe()}; the candidate changed {len(changed)} values at once "
                             f"({', '.join(f'{r.name}={r.value}' for r in changed)}), which the pair cannot tell apart: "
                             f"1/{len(changed)} of the slowdown's confidence each")
             for ref in changed]
    return Diagnosis(findings=sorted([*causes, *where], key=lambda f: (f.kind != "cause", -f.confidence)))


def diagnose_fleet(fleet: Fleet, diagnose_job: JobDiagnoser) -> Diagnosis:
    """The diagnosis of a regression pair or a fleet (module docstring)."""
    runs, notes = run_levels(fleet)
    if len(runs) < 2:
        return Diagnosis(abstain=Abstention(reason="; ".join([*notes, f"{len(runs)} run(s) with a level: nothing "
                                                              "to compare"])))
    named, aliased, top = slow_values(runs)
    if aliased and fleet.is_regression:
        return regression_of_changed_values(aliased, runs, diagnose_job)
    if aliased:
        effect = effect_of(aliased[0], runs)
        values = ", ".join(f"{r.name}={r.value}" for r in aliased)
        return Diagnosis(abstain=Abstention(
            reason=f"{effect.describe() if effect else 'a slowdown'}; the same runs hold {values}: the fleet "
                   "cannot tell these factor values apart", factors=aliased))
    if named and top is not None and top.ratio >= 1 + T.MIN_CAUSE_SHARE and all(e.confidence < 0.5 for e in named):
        # a slowdown worth naming in the point estimate, which the fleet's run-to-run noise cannot confirm
        said = [Finding(category="symptom.slow_step", kind="symptom", confidence=e.confidence, factor=e.factor,
                        magnitude=e.ratio if fleet.is_regression else None, summary=e.describe()) for e in named]
        return Diagnosis(findings=said, abstain=Abstention(
            reason=f"{top.describe()}: over the smallest slowdown worth naming ({T.MIN_CAUSE_SHARE:.0%}), but within "
                   f"what the runs' spread allows for the best of the values compared (confidence {top.confidence:.2f})"))
    findings: list[Finding] = []
    set_aside = {name for e in named for name in e.runs}
    clean = [r for r in runs if r.name not in set_aside]
    for effect in named:
        slow = [r for r in runs if r.name in effect.runs]
        magnitude = effect.ratio if fleet.is_regression else None
        causes = explain(effect, slow, clean, diagnose_job, magnitude)
        findings += causes
        if not causes:
            findings.append(Finding(category="symptom.slow_step", kind="symptom", confidence=effect.confidence,
                                    factor=effect.factor, magnitude=magnitude,
                                    summary=f"{effect.describe()}; no mechanism in their evidence differs from the "
                                            "other runs'"))
    return Diagnosis(findings=sorted(findings, key=lambda f: (f.kind != "cause", -f.confidence)))
