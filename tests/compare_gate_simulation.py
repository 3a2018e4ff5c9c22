"""How often ``diageval compare A B --fail-if-worse skill`` says "worse" when A and B are the same diagnoser.

The situation the gate must survive: one diagnoser run twice on the built-in corpus, its evidence
re-recorded in between, so that a few cases flip outcome (a cause found in one run and missed in the
other, an alarm raised once, an abstention taken once) and every confidence moves a little. Nothing
about the diagnoser changed, so a gate at a 95% two-sided interval should call B worse in at most 2.5%
of such pairs.

Each simulated pair draws a diagnoser's answers on every case of the corpus (a mid-skill diagnoser:
finds 70% of causes at confidence 0.5-0.95, adds a wrong cause 30% of the time, alarms on 25% of healthy
controls, abstains on 60% of abstain cases), then two runs of it: every confidence jittered by ±j (j drawn
in [0.02, 0.05] per pair), and ``flips`` cases (3 to 10) flipped in one run or the other, chosen at
random, so that A and B are exchangeable. The gate fires when the interval of B − A on skill lies below 0.

The test (``tests/test_compare.py``) runs a few dozen pairs on a synthetic corpus of the coverage
simulation's mix (no case files to parse), to stay within seconds.

    python tests/compare_gate_simulation.py [--pairs 1000] [--flips 3,5,10] [--n-boot 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random

from diageval.cases.load import load_case_set
from diageval.cases.model import Case
from diageval.cases.taxonomy import Taxonomy
from diageval.diagnosis import Abstention, Diagnosis, Finding
from diageval.scoring.compare import compare_results
from diageval.scoring.intervals import jeffreys
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
    rate = {"diagnose": 0.7, "healthy": 0.25, "abstain": 0.6}[case.labels.expect]
    return rng.random() < rate


def _jitter(d: Diagnosis, j: float, rng: random.Random) -> Diagnosis:
    return d.model_copy(update={"findings": [
        f.model_copy(update={"confidence": min(1.0, max(0.0, f.confidence + rng.uniform(-j, j)))}) for f in d.findings]})


def simulated_pair(cases: list[Case], taxonomy: Taxonomy, flips: int, rng: random.Random):
    """Results of runs A and B of one diagnoser that differ by ``flips`` flipped cases and jitter."""
    state = [_finds(c, rng) for c in cases]
    seeds = [rng.random() for _ in cases]  # the same wrong claims in both runs, unless the case flips
    flipped = {i: rng.random() < 0.5 for i in rng.sample(range(len(cases)), flips)}  # True: flipped in B
    j = rng.uniform(0.02, 0.05)
    runs = []
    for side in (False, True):
        results = []
        for i, case in enumerate(cases):
            finds = state[i] != (i in flipped and flipped[i] == side)
            d = _jitter(_answer(case, taxonomy, random.Random(seeds[i]), finds=finds), j, rng)
            results.append(score_case(case, d, taxonomy=taxonomy))
        runs.append(results)
    return runs


def false_worse_rate(pairs: int, flips: tuple[int, ...], n_boot: int = 1000, seed: int = 0,
                     corpus: tuple[list[Case], Taxonomy] | None = None) -> tuple[int, int]:
    """(pairs the gate called B worse on skill, pairs simulated), the flips cycling over ``flips``; on the
    built-in corpus unless ``corpus`` is given."""
    cases, taxonomy = corpus or builtin_corpus()
    rng = random.Random(seed)
    worse = 0
    for k in range(pairs):
        a, b = simulated_pair(cases, taxonomy, flips[k % len(flips)], rng)
        worse += compare_results(a, b, n_boot=n_boot, seed=k, definitions=_SKILL)["skill"].clearly_worse
    return worse, pairs


def _skill_only():
    from diageval.scoring.metrics import METRICS

    return {"skill": METRICS["skill"]}


_SKILL = _skill_only()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--flips", default="3,5,10")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    corpus = builtin_corpus()
    print(f"built-in corpus: {len(corpus[0])} cases, {len(corpus[1].causes)} taxonomy causes; {args.n_boot} resamples "
          f"and swaps per comparison", flush=True)
    for flips in [int(k) for k in args.flips.split(",")]:
        worse, pairs = false_worse_rate(args.pairs, (flips,), args.n_boot, args.seed, corpus)
        lo, hi = jeffreys(worse, pairs)[0]
        print(f"{flips} flipped cases, jitter ±0.02-0.05: the gate called B worse in {worse} of {pairs} same-diagnoser "
              f"pairs: {worse / pairs:.1%} [{lo:.1%}, {hi:.1%}] (nominal 2.5%)", flush=True)


if __name__ == "__main__":
    main()
