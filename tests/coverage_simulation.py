"""Coverage of the summary's 95% intervals: simulated runs of a known diagnoser on corpora of 16 to 80 cases.

A run draws cases from a fixed mix (60% positive with one cause, three in four of them on labeled ranks; 25%
healthy controls; 15% expect-abstain) and a diagnoser with fixed behaviour, scores them and summarises them
with 1000 resamples. The diagnosers (``--diagnoser``):

* ``mid``: the mid-skill diagnoser (:meth:`Simulator.diagnose_mid`): finds 70% of causes, adds a wrong
  cause 30% of the time, alarms on 25% of healthy controls, abstains on 60% of abstain cases, times out
  on 2%;
* ``err2``, ``err4``, ``err10``: near-perfect diagnosers (:meth:`Simulator.diagnose_near_perfect`) that
  answer right except on 2%, 4% or 10% of cases, where they make one confident mistake. These are the
  hard case for a bootstrap: most 16-case samples of a 2% diagnoser hold no mistake at all.
 Each metric's true value is its value on a very large run of the
same mix (every metric is a ratio of per-case sums, so that value converges to the population's ratio
of expectations). Coverage = the share of runs whose interval holds the true value, over the runs where
the metric is defined (a 16-case run can draw no healthy control: its false-alarm rate is undefined and
the run is not counted for it).

The simulated world is the live taxonomy's (its causes and symptoms), or, with ``--causes K``, its first
K causes plus synthetic ones up to K: the intervals must keep their coverage as the taxonomy grows. A
coverage estimated from R runs has its own binomial noise (about ±1.8 points at 95% and R = 200): each
cell is printed with its Jeffreys 95% interval, and the cells near the line are judged on 1000 runs.

    python tests/coverage_simulation.py [--runs 200] [--sizes 16,60,80] [--causes 8,10,12]
                                        [--diagnoser mid,err2,err4,err10] [--truth-cases 40000]
                                        [--timeout-seconds 3] [--seed 0]
    python tests/coverage_simulation.py --detection [--runs 1000] [--sizes 8,10,12] [--bootstrap 200]

``--detection`` measures the detection limit's interval instead (:mod:`diageval.scoring.detection`): per
simulated cause, a known limit L, 8-12 cases at measured impacts log-uniform over 2%-60%, each found with a
probability that rises through 50% at L (a step, or a logistic in ln(impact) of slope 6, 3 or 1.5), and the
share of causes whose interval holds L; the impacts spread over the span, or on a ladder of three
severities (the corpus' usual shape, where the percentile bootstrap collapsed onto one severity).
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass

from diageval.cases.model import Case
from diageval.cases.taxonomy import Taxonomy, TaxonomyEntry, load_taxonomy
from diageval.diagnosis import Abstention, Diagnosis, Finding
from diageval.scoring.intervals import jeffreys
from diageval.scoring.metrics import METRICS
from diageval.scoring.results import CaseResult, EvidenceFacts
from diageval.scoring.summary import DiagnoserInfo, headline_metrics, summarize
from diageval.scoring.verdicts import score_case

TARGET = 0.93
"""Coverage every cell must reach from 60 cases."""
TARGET_SMALL = 0.90
"""Coverage every cell must reach at 16 cases (the smallest corpus judged)."""
SMALL = 16
DIAGNOSERS = {"mid": None, "err2": 0.02, "err4": 0.04, "err10": 0.10}
"""Simulated diagnosers: the mid-skill one, and near-perfect ones by their per-case error rate."""
INFO = DiagnoserInfo(spec="simulated", name="simulated")


def simulation_taxonomy(causes: int | None = None) -> Taxonomy:
    """The live taxonomy (``causes`` None), or a world of ``causes`` causes: the live taxonomy's first ones,
    then synthetic ``sim.extra_cause_<i>`` entries. Its symptoms are the live ones."""
    live = load_taxonomy()
    live_causes = [e for e in live.entries if e.kind == "cause"]
    k = len(live_causes) if causes is None else causes
    extra = [TaxonomyEntry(id=f"sim.extra_cause_{i}", kind="cause", definition="simulated", evidence="simulated")
             for i in range(max(0, k - len(live_causes)))]
    return Taxonomy(version="simulation", entries=[e for e in live.entries if e.kind == "symptom"] + live_causes[:k] + extra)


def _case(case_id: str, expect: str, category: str | None = None, ranks=None, world_size: int = 2) -> Case:
    data = {"id": case_id, "title": "simulated", "workload": {"name": "mlp_ddp", "world_size": world_size, "steps": 40},
            "labels": {"expect": expect, "causes": [{"category": category, "ranks": ranks}] if category else [],
                       "symptoms": ["symptom.slow_step"] if category else []},
            "faults": [{"name": "slow_rank"}] if expect != "healthy" else []}
    if expect == "diagnose":
        data["manifest"] = {"metric": "step_time_median", "min_ratio": 1.3}
    return Case.model_validate(data)


@dataclass
class Simulator:
    """The case mix and the known diagnoser's behaviour."""

    taxonomy: Taxonomy
    error_rate: float | None = None
    """None: the mid-skill diagnoser; else a near-perfect one erring on this share of cases."""
    timeout_seconds: float = 3.0
    """What a timed-out case records as its time. 3 s is about 2.6 times the median; a limit far above the
    median (30 s) makes s/case a mean dominated by an event most 16-case samples do not contain, which no
    interval computed from the sample can cover (``--timeout-seconds 30`` shows it)."""

    def __post_init__(self) -> None:
        causes = self.taxonomy.causes
        self.positive = [_case(f"p{i}-{j}", "diagnose", c, None if r is None else [r], 4)
                         for i, c in enumerate(causes) for j, r in enumerate((None, 0, 1, 3))]
        self.healthy = _case("h", "healthy")
        self.abstain = _case("a", "abstain")

    def case(self, rng: random.Random) -> Case:
        u = rng.random()
        if u < 0.60:
            return rng.choice(self.positive)
        return self.healthy if u < 0.85 else self.abstain

    def diagnose(self, case: Case, rng: random.Random, measured: float | None) -> Diagnosis | None:
        if self.error_rate is None:
            return self.diagnose_mid(case, rng)
        return self.diagnose_near_perfect(case, rng, measured)

    def diagnose_near_perfect(self, case: Case, rng: random.Random, measured: float | None) -> Diagnosis:
        """Right on each case, except with probability ``error_rate`` one confident mistake: a positive case's
        cause missed and a wrong one claimed, an alarm on a healthy control, a guess on an abstain case (each
        at confidence 0.5-0.9). Right answers: the labeled cause on its ranks at 0.85-0.99 with the measured
        impact ±0.03; silence on a healthy control; abstention on an abstain case."""
        causes = self.taxonomy.causes
        expect = case.labels.expect
        if rng.random() < self.error_rate:
            labeled = {c.category for c in case.labels.causes}
            wrong = rng.choice([c for c in causes if c not in labeled])
            return Diagnosis(findings=[Finding(category=wrong, confidence=rng.uniform(0.5, 0.9),
                                               impact=rng.uniform(0.0, 0.4) if expect == "diagnose" else None)])
        if expect == "healthy":
            return Diagnosis()
        if expect == "abstain":
            return Diagnosis(abstain=Abstention(reason="insufficient"))
        label = case.labels.causes[0]
        impact = min(1.0, max(0.0, measured + rng.gauss(0.0, 0.03)))
        return Diagnosis(findings=[Finding(category=label.category, confidence=rng.uniform(0.85, 0.99),
                                           ranks=label.ranks, impact=impact)])

    def diagnose_mid(self, case: Case, rng: random.Random) -> Diagnosis | None:
        """The mid-skill diagnoser (module docstring); None: it timed out (2%)."""
        if rng.random() < 0.02:
            return None
        causes = self.taxonomy.causes
        if case.labels.expect == "healthy":
            alarm = rng.random() < 0.25
            return Diagnosis(findings=[Finding(category=rng.choice(causes), confidence=rng.uniform(0.1, 0.6))] if alarm else [])
        if case.labels.expect == "abstain":
            if rng.random() < 0.6:
                return Diagnosis(abstain=Abstention(reason="insufficient"))
            return Diagnosis(findings=[Finding(category=rng.choice(causes), confidence=rng.uniform(0.2, 0.6))])
        if rng.random() < 0.03:
            return Diagnosis(abstain=Abstention(reason="unsure"))
        label = case.labels.causes[0]
        findings = []
        if rng.random() < 0.7:
            ranks = None
            if label.ranks is not None:
                u = rng.random()
                ranks = label.ranks if u < 0.6 else ([(label.ranks[0] + 1) % 4] if u < 0.8 else None)
            findings.append(Finding(category=label.category, confidence=rng.uniform(0.5, 0.95), ranks=ranks,
                                    impact=rng.uniform(0.05, 0.6)))
        if rng.random() < 0.3:
            wrong = rng.choice([c for c in causes if c != label.category])
            findings.append(Finding(category=wrong, confidence=rng.uniform(0.2, 0.7), impact=rng.uniform(0.0, 0.4)))
        if rng.random() < 0.15:
            findings.append(Finding(category=rng.choice(self.taxonomy.symptoms), confidence=rng.uniform(0.1, 0.5)))
        return Diagnosis(findings=findings)

    def run(self, n: int, rng: random.Random, prefix: str = "c") -> list[CaseResult]:
        out = []
        for i in range(n):
            case = self.case(rng)
            if self.error_rate is None:  # the mid-skill diagnoser's draws, in the order they always were
                d = self.diagnose_mid(case, rng)
                measured = rng.uniform(0.05, 0.6) if case.labels.expect == "diagnose" else None
            else:
                measured = rng.uniform(0.05, 0.6) if case.labels.expect == "diagnose" else None
                d = self.diagnose_near_perfect(case, rng, measured)
            seconds = self.timeout_seconds if d is None else rng.lognormvariate(0.0, 0.5)
            r = score_case(case, d, taxonomy=self.taxonomy, status="timeout" if d is None else "ok",
                           evidence=EvidenceFacts(measured_impact=measured), seconds=seconds)
            out.append(r.model_copy(update={"case_id": f"{prefix}{i:06d}"}))
        return out


def coverage(runs: int = 200, sizes=(16, 80), truth_cases: int = 40000, seed: int = 0, n_boot: int = 1000,
             timeout_seconds: float = 3.0, causes: int | None = None, diagnoser: str = "mid"):
    """{size: {metric: (covered, defined runs)}} and the true values, in a world of ``causes`` causes
    (None: the live taxonomy's), for one of :data:`DIAGNOSERS`."""
    sim = Simulator(simulation_taxonomy(causes), DIAGNOSERS[diagnoser], timeout_seconds)
    rng = random.Random(seed)
    truth_summary = summarize(sim.run(truth_cases, rng, "t"), diagnoser=INFO, case_set_hash="x",
                              taxonomy_version="sim", n_boot=0)
    truth = {name: getattr(truth_summary.metrics, name).value for name in METRICS}
    out: dict[int, dict[str, tuple[int, int]]] = {}
    for n in sizes:
        tally = {name: [0, 0] for name in METRICS}
        for k in range(runs):
            metrics = headline_metrics(sim.run(n, rng), n_boot=n_boot, seed=k)
            for name in METRICS:
                mv = getattr(metrics, name)
                if mv.value is None or mv.ci is None:
                    continue
                tally[name][1] += 1
                tally[name][0] += mv.ci[0] - 1e-9 <= truth[name] <= mv.ci[1] + 1e-9
        out[n] = {name: (c, d) for name, (c, d) in tally.items()}
    return out, truth


def target(size: int) -> float:
    """The coverage a cell must reach at ``size`` cases."""
    return TARGET_SMALL if size <= SMALL else TARGET


def table(result, truth, runs: int, causes: int | None = None, diagnoser: str = "mid") -> str:
    sizes = list(result)
    head = "| metric | true value | " + " | ".join(f"{n} cases: coverage [95% CI] (runs)" for n in sizes) + " |"
    world = "the live taxonomy's causes" if causes is None else f"{causes} causes"
    who = "the mid-skill diagnoser" if DIAGNOSERS[diagnoser] is None else \
        f"a near-perfect diagnoser erring on {DIAGNOSERS[diagnoser]:.0%} of cases"
    lines = [f"95% interval coverage over {runs} simulated runs per size, {who}, {world} (target >= "
             f"{TARGET_SMALL:.0%} at {SMALL} cases, >= {TARGET:.0%} from 60; the bracket is the Jeffreys interval of "
             "the coverage estimate itself)", "", head, "|---|---:|" + "---:|" * len(sizes)]
    for name in METRICS:
        cells = []
        for n in sizes:
            c, d = result[n][name]
            if d:
                lo, hi = jeffreys(c, d)[0]
                cells.append(f"{c / d:.1%} [{lo:.1%}, {hi:.1%}] ({d})")
            else:
                cells.append("– (0)")
        true_value = "–" if truth[name] is None else f"{truth[name]:.4g}"  # undefined here (a factor metric on one-job cases)
        lines.append(f"| {name} | {true_value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


DETECTION_SHAPES = {"step": math.inf, "sharp": 6.0, "moderate": 3.0, "shallow": 1.5}
"""Found-rate curves of the detection simulation: the logistic slope in ln(impact) (step: found exactly above
the limit; shallow: from 18% found at a third of the limit to 82% at three times it)."""
DETECTION_SPAN = (0.02, 0.6)
"""Measured impacts of a simulated cause's cases: log-uniform over this span (the corpus' 2%-60% of step time)."""
DETECTION_LIMITS = (0.03, 0.4)
"""True limits, log-uniform over this span: inside the cases' span, where a limit can be measured at all."""
LADDER = ((0.02, 0.05), (0.08, 0.15), (0.25, 0.6))
"""The ``ladder`` design: three severities (each drawn log-uniform in its band), the cases dealt among them in
turn, each measured within ±15% of its severity: a corpus that holds a cause at a few severities, repeated."""


def _impacts(design: str, size: int, rng: random.Random) -> list[float]:
    if design == "spread":
        return [math.exp(rng.uniform(*map(math.log, DETECTION_SPAN))) for _ in range(size)]
    levels = [math.exp(rng.uniform(*map(math.log, band))) for band in LADDER]
    return [levels[i % len(levels)] * math.exp(rng.uniform(-0.15, 0.15)) for i in range(size)]


def _found_probability(impact: float, limit: float, slope: float) -> float:
    z = math.log(impact / limit)
    if math.isinf(slope):
        return 1.0 if z >= 0 else 0.0
    return 1 / (1 + math.exp(-slope * z))


def _bootstrap_ends(impacts: list[float], found: list[bool], rng: random.Random, resamples: int) -> tuple[float, float]:
    """The percentile bootstrap the inverted test replaced (a resample's censored limit at the end of its range
    that widens the interval), for the table's comparison column."""
    from diageval.scoring.detection import limit_of

    lows, highs = [], []
    for _ in range(resamples):
        pick = [rng.randrange(len(impacts)) for _ in impacts]
        xs, ys = [impacts[i] for i in pick], [found[i] for i in pick]
        state, value = limit_of(xs, ys)
        lows.append({"measured": value, "below": 0.0, "not_reached": max(xs)}[state])
        highs.append({"measured": value, "below": min(xs), "not_reached": math.inf}[state])
    lows.sort()
    highs.sort()
    return lows[int(0.025 * resamples)], highs[min(resamples - 1, int(math.ceil(0.975 * resamples)) - 1)]


def detection_coverage(causes: int = 1000, sizes=(8, 10, 12), shapes=tuple(DETECTION_SHAPES), seed: int = 0,
                       bootstrap: int = 0, designs=("spread", "ladder")) -> dict[tuple[str, int, str], dict[str, float]]:
    """Per (design, cases a cause, curve shape): of ``causes`` simulated causes with a known limit, the share whose
    interval holds it (``covered``, out of ``defined``: every cause of >= 5 cases), whose interval has no upper
    end, and the median ratio of a bounded interval's ends (its width on the log scale); with ``bootstrap``
    resamples, the same coverage for the percentile bootstrap."""
    from diageval.scoring.detection import detection_limit

    rng = random.Random(seed)
    out = {}
    for design, size, shape in ((d, n, c) for d in designs for n in sizes for c in shapes):
        if True:
            slope = DETECTION_SHAPES[shape]
            covered = boot_covered = open_ended = 0
            ratios = []
            for _ in range(causes):
                limit = math.exp(rng.uniform(*map(math.log, DETECTION_LIMITS)))
                impacts = _impacts(design, size, rng)
                found = [rng.random() < _found_probability(x, limit, slope) for x in impacts]
                d = detection_limit("sim", impacts, found)
                lo, hi = d.ci
                covered += lo <= limit and (hi is None or limit <= hi)
                open_ended += hi is None
                if hi is not None and lo > 0:
                    ratios.append(hi / lo)
                if bootstrap:
                    blo, bhi = _bootstrap_ends(impacts, found, rng, bootstrap)
                    boot_covered += blo <= limit <= bhi
            ratios.sort()
            out[(design, size, shape)] = {"defined": causes, "covered": covered, "boot_covered": boot_covered,
                                  "open_ended": open_ended, "median_ratio": ratios[len(ratios) // 2] if ratios else math.nan}
    return out


def detection_table(result: dict[tuple[str, int, str], dict[str, float]], causes: int, bootstrap: int) -> str:
    lines = [f"Detection-limit interval coverage over {causes} simulated causes a cell (impacts: spread, log-uniform "
             f"over {DETECTION_SPAN[0]:g}-{DETECTION_SPAN[1]:g}, or ladder, three severities; true limit log-uniform "
             f"over {DETECTION_LIMITS[0]:g}-{DETECTION_LIMITS[1]:g}; target >= 90%; the bracket is the Jeffreys "
             "interval of the coverage)", "",
             "| impacts | cases a cause | curve | covered [95% CI] | no upper end | median hi/lo (bounded) |"
             + (f" percentile bootstrap ({bootstrap} resamples) |" if bootstrap else ""),
             "|---|---:|---|---:|---:|---:|" + ("---:|" if bootstrap else "")]
    for (design, size, shape), r in result.items():
        n = int(r["defined"])
        lo, hi = jeffreys(int(r["covered"]), n)[0]
        row = (f"| {design} | {size} | {shape} | {r['covered'] / n:.1%} [{lo:.1%}, {hi:.1%}] | {r['open_ended'] / n:.0%} | "
               f"{r['median_ratio']:.1f} |")
        if bootstrap:
            blo, bhi = jeffreys(int(r["boot_covered"]), n)[0]
            row += f" {r['boot_covered'] / n:.1%} [{blo:.1%}, {bhi:.1%}] |"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detection", action="store_true",
                        help="the detection limit's interval instead: --runs simulated causes per cell, --sizes cases "
                             "per cause (default 8,10,12), --bootstrap resamples of the old percentile interval beside it")
    parser.add_argument("--bootstrap", type=int, default=0)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--sizes", default="16,60,80")
    parser.add_argument("--causes", default="", help="comma-separated world sizes (default: the live taxonomy's)")
    parser.add_argument("--diagnoser", default=",".join(DIAGNOSERS), help=f"comma-separated, of {', '.join(DIAGNOSERS)}")
    parser.add_argument("--truth-cases", type=int, default=40000)
    parser.add_argument("--timeout-seconds", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.detection:
        sizes = tuple(int(v) for v in args.sizes.split(",")) if args.sizes != "16,60,80" else (8, 10, 12)
        print(detection_table(detection_coverage(args.runs, sizes, seed=args.seed, bootstrap=args.bootstrap),
                              args.runs, args.bootstrap), flush=True)
        return
    for diagnoser in args.diagnoser.split(","):
        for causes in [int(k) for k in args.causes.split(",") if k] or [None]:
            result, truth = coverage(args.runs, tuple(int(s) for s in args.sizes.split(",")), args.truth_cases,
                                     seed=args.seed, timeout_seconds=args.timeout_seconds, causes=causes,
                                     diagnoser=diagnoser)
            print(table(result, truth, args.runs, causes, diagnoser), end="\n\n", flush=True)


if __name__ == "__main__":
    main()
