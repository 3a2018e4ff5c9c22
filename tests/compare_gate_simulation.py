"""How often ``diageval compare A B --fail-if-worse skill`` says "worse": falsely, when A and B are the same
diagnoser, and rightly (its power), when B's true skill is lower by a known drop.

The situation the gate must survive: one diagnoser run twice on the built-in corpus, its evidence
re-recorded in between, so that a few cases flip outcome (a cause found in one run and missed in the
other, an alarm raised once, an abstention taken once) and every confidence moves a little. Nothing
about the diagnoser changed, so the gate (one-sided, 2.5%) should call B worse in at most 2.5% of such
pairs.

Each simulated pair draws ``size`` cases of the corpus at random and a diagnoser's answers on each (a
mid-skill diagnoser: finds 70% of causes at confidence 0.5-0.95, adds a wrong cause 30% of the time,
alarms on 25% of healthy controls, abstains on 60% of abstain cases), then two runs of it: every
confidence jittered by ±j (j drawn in [0.02, 0.05] per pair), and ``flips`` cases (3, 5 or 10, in turn)
flipped in one run or the other, chosen at random, so that A and B are exchangeable.

A true drop ``drop`` in skill: run B misses each cause it would have found with probability
q = drop · R / (causes B would find · E[1 − (1 − p)²]), R the drawn cases' climatology reference and
p ~ U(0.5, 0.95) the confidence of a found cause, so that B's expected skill is ``drop`` below what it
would have been (the mean B − A printed beside each cell checks it; where B finds too few causes for the
drop, at 16 cases, q is 1 and the drop is smaller). Two models
of how much else moves between the runs:

* ``paired``: B is A's diagnoser with that defect (and the re-recording noise above); its other
  answers are A's. The gate's test is paired, case by case, for this;
* ``redrawn``: every answer of B is drawn afresh from its diagnoser (a release that changes its answers
  on many cases, in both directions, beside the drop). Pairing removes nothing here; the column
  "z bound" is the share of pairs a one-sided z-test at 2.5% would call worse if it knew the null's spread
  of B − A (measured on the drop-0 pairs of the same size) instead of estimating it from the pair: an
  oracle. A real test estimates the spread from the pair's own differences, which the cases carrying the
  drop widen too; in the redrawn model the gate is within a few points of it.

The test (``tests/scoring/test_compare.py``) runs a few dozen pairs on a synthetic corpus of the coverage
simulation's mix (no case files to parse), to stay within seconds.

    python tests/compare_gate_simulation.py [--pairs 500] [--sizes 16,60,130] [--drops 0,0.05,0.1,0.2]
        [--models paired,redrawn] [--n-boot 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
from statistics import NormalDist

import numpy as np

from diageval.cases.load import load_case_set
from diageval.cases.model import Case
from diageval.cases.taxonomy import Taxonomy
from diageval.diagnosis import Abstention, Diagnosis, Finding
from diageval.scoring.compare import GATE_LEVEL, compare_results
from diageval.scoring.intervals import jeffreys
from diageval.scoring.tallies import tally_table
from diageval.scoring.verdicts import score_case


def builtin_corpus() -> tuple[list[Case], Taxonomy]:
    case_set = load_case_set()
    return [lc.case for lc in case_set.cases], case_set.taxonomy


def synthetic_corpus(size: int, seed: int = 0) -> tuple[list[Case], Taxonomy]:
    """``size`` cases drawn from the coverage simulation's mix in the live taxonomy's world."""
    from coverage_simulation import Simulator, simulation_taxonomy

    sim = Simulator(simulation_taxonomy())
    rng = random.Random(seed)
    return [sim.case(rng).model_copy(update={"id": f"s{i:03d}"}) for i in range(size)], sim.taxonomy


FOUND_RATE = {"diagnose": 0.7, "healthy": 0.25, "abstain": 0.6}
"""How often the mid-skill diagnoser finds a positive case's cause, alarms on a healthy control, abstains."""


def _answer(case: Case, taxonomy: Taxonomy, rng: random.Random, *, finds: bool) -> Diagnosis:
    """One answer of the mid-skill diagnoser; ``finds`` decides the outcome the flips change (a positive case's
    cause found, a healthy control alarmed, an abstain case abstained on)."""
    causes = taxonomy.causes
    expect = case.labels.expect
    if expect == "healthy":
        return Diagnosis(findings=[Finding(category=rng.choice(causes), confidence=rng.uniform(0.5, 0.8))] if finds else [])
    if expect == "abstain":
        if finds:
            return Diagnosis(abstain=Abstention(reason="insufficient"))
        return Diagnosis(findings=[Finding(category=rng.choice(causes), confidence=rng.uniform(0.5, 0.7))])
    findings = []
    if finds:
        label = case.labels.causes[0]
        findings.append(Finding(category=label.category, confidence=rng.uniform(0.5, 0.95), ranks=label.ranks))
    if rng.random() < 0.3:
        wrong = [c for c in causes if c not in {label.category for label in case.labels.causes}]
        findings.append(Finding(category=rng.choice(wrong), confidence=rng.uniform(0.5, 0.7)))
    return Diagnosis(findings=findings)


def _finds(case: Case, rng: random.Random) -> bool:
    return rng.random() < FOUND_RATE[case.labels.expect]


def _jitter(d: Diagnosis, j: float, rng: random.Random) -> Diagnosis:
    return d.model_copy(update={"findings": [
        f.model_copy(update={"confidence": min(1.0, max(0.0, f.confidence + rng.uniform(-j, j)))}) for f in d.findings]})


LOSS_OF_A_MISS = 1 - (0.5 ** 3 - 0.05 ** 3) / (3 * 0.45)
"""E[1 − (1 − p)²] for p ~ U(0.5, 0.95): the loss a missed cause adds over a found one (before the jitter)."""
FLIPS = (3, 5, 10)


def simulated_pair(cases: list[Case], taxonomy: Taxonomy, flips: int, rng: random.Random, *, drop: float = 0.0,
                   redrawn: bool = False):
    """Results of runs A and B of one diagnoser that differ by ``flips`` flipped cases and jitter, B with a true
    skill drop of ``drop`` and, when ``redrawn``, every answer drawn afresh (module docstring)."""
    state = [_finds(c, rng) for c in cases]
    seeds = [rng.random() for _ in cases]  # the same wrong claims in both runs, unless the case flips
    state_b = [_finds(c, rng) for c in cases] if redrawn else state
    seeds_b = [rng.random() for _ in cases] if redrawn else seeds
    flipped = {i: rng.random() < 0.5 for i in rng.sample(range(len(cases)), min(flips, len(cases)))}  # True: in B
    j = rng.uniform(0.02, 0.05)

    def finds(side: bool, found: list[bool]) -> list[bool]:
        return [found[i] != (i in flipped and flipped[i] == side) for i in range(len(cases))]

    def run(finding: list[bool], draws: list[float]):
        return [score_case(case, _jitter(_answer(case, taxonomy, random.Random(draws[i]), finds=finding[i]), j, rng),
                           taxonomy=taxonomy) for i, case in enumerate(cases)]

    a, finding_b = run(finds(False, state), seeds), finds(True, state_b)
    if drop:
        found_b = [i for i, c in enumerate(cases) if c.labels.expect == "diagnose" and finding_b[i]]
        reference = float(tally_table(a).totals(np.ones((1, len(a))))["reference"][0])
        q = min(1.0, drop * reference / (max(1, len(found_b)) * LOSS_OF_A_MISS))  # 1: every cause missed
        finding_b = [f and not (i in found_b and rng.random() < q) for i, f in enumerate(finding_b)]
    return a, run(finding_b, seeds_b)


def gate_rate(pool: list[Case], taxonomy: Taxonomy, size: int, pairs: int, *, drop: float = 0.0,
              redrawn: bool = False, flips: tuple[int, ...] = FLIPS, n_boot: int = 1000,
              seed: int = 0) -> tuple[int, int, list[float]]:
    """(pairs the gate called B worse on skill, pairs simulated, each pair's B − A), ``size`` cases of ``pool``
    drawn per pair, the flips cycling over ``flips``."""
    rng = random.Random(seed)
    worse, differences = 0, []
    for k in range(pairs):
        cases = pool if size >= len(pool) else rng.sample(pool, size)
        a, b = simulated_pair(cases, taxonomy, flips[k % len(flips)], rng, drop=drop, redrawn=redrawn)
        m = compare_results(a, b, n_boot=n_boot, seed=k, definitions=_SKILL)["skill"]
        worse += m.clearly_worse
        differences.append(m.difference)
    return worse, pairs, differences


def false_worse_rate(pairs: int, flips: tuple[int, ...], n_boot: int = 1000, seed: int = 0,
                     corpus: tuple[list[Case], Taxonomy] | None = None) -> tuple[int, int]:
    """(pairs the gate called B worse on skill, pairs simulated) on same-diagnoser pairs over every case of the
    built-in corpus unless ``corpus`` is given."""
    cases, taxonomy = corpus or builtin_corpus()
    worse, pairs, _ = gate_rate(cases, taxonomy, len(cases), pairs, flips=flips, n_boot=n_boot, seed=seed)
    return worse, pairs


def _skill_only():
    from diageval.scoring.metrics import METRICS

    return {"skill": METRICS["skill"]}


_SKILL = _skill_only()


def _share(k: int, n: int) -> str:
    lo, hi = jeffreys(k, n)[0]
    return f"{k / n:.1%} [{lo:.1%}, {hi:.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--sizes", default="16,60,130")
    parser.add_argument("--drops", default="0,0.05,0.1,0.2")
    parser.add_argument("--models", default="paired,redrawn")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pool, taxonomy = builtin_corpus()
    sizes, drops = [int(v) for v in args.sizes.split(",")], [float(v) for v in args.drops.split(",")]
    print(f"built-in corpus: {len(pool)} cases, {len(taxonomy.causes)} taxonomy causes; {args.pairs} pairs a cell, "
          f"{args.n_boot} resamples per comparison; flipped cases {', '.join(map(str, FLIPS))} in turn, jitter "
          f"±0.02-0.05", flush=True)
    for model in args.models.split(","):
        redrawn = model == "redrawn"
        print(f"\nmodel {model}: the gate's share of pairs called B worse on skill [Jeffreys 95%]\n", flush=True)
        print("| cases | true drop | called worse | mean B − A | z bound |\n|---:|---:|---:|---:|---:|", flush=True)
        for size in sizes:
            spread = None
            for drop in drops:
                worse, pairs, diffs = gate_rate(pool, taxonomy, size, args.pairs, drop=drop, redrawn=redrawn,
                                                n_boot=args.n_boot, seed=args.seed)
                if drop == 0:
                    spread = float(np.std(diffs))
                z = NormalDist().inv_cdf(1 - GATE_LEVEL)
                bound = "–" if spread is None or drop == 0 else f"{np.mean(np.asarray(diffs) < -z * spread):.0%}"
                what = "0 (same diagnoser)" if drop == 0 else f"{drop:.2f}"
                print(f"| {size} | {what} | {_share(worse, pairs)} | {np.mean(diffs):+.3f} | {bound} |", flush=True)


if __name__ == "__main__":
    main()
