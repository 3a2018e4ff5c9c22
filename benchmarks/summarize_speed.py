"""How long summarize() takes (1000 bootstrap resamples) on synthetic runs of growing size.

Prints one line per corpus size: cases, claims, seconds (the best of --repeat runs, so a busy machine
inflates it less), and the machine's load average and core count, since the target (10,000 cases in
<= 1 s on 2 cores) is read against them. Synthetic results are drawn with a fixed seed from hand-built
cases and random diagnoses; nothing is recorded or run, and building them is not timed.

    python benchmarks/summarize_speed.py [--sizes 1000,10000] [--n-boot 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import time

from diageval.cases.model import Case
from diageval.cases.taxonomy import load_taxonomy
from diageval.diagnosis import Diagnosis, Finding
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case


def synthetic_results(n: int, seed: int = 0):
    tax = load_taxonomy()
    rng = random.Random(seed)
    categories = tax.causes + tax.symptoms
    results = []
    for i in range(n):
        expect = rng.choice(["diagnose"] * 6 + ["healthy"] * 3 + ["abstain"])
        label = rng.choice(tax.causes)
        case = Case.model_validate({
            "id": f"case-{i}", "title": "synthetic",
            "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 40},
            "faults": [] if expect == "healthy" else [{"name": "slow_rank"}],
            "labels": {"causes": [{"category": label, "ranks": [rng.randrange(2)]}] if expect == "diagnose" else [],
                       "expect": expect},
            "manifest": {"metric": "step_time_median", "min_ratio": 1.3} if expect == "diagnose" else None,
        })
        findings = [Finding(category=rng.choice(categories + [label] * 4), confidence=rng.random(),
                            ranks=[rng.randrange(2)], impact=rng.random() * 0.5) for _ in range(rng.randrange(4))]
        status = rng.choice(["ok"] * 18 + ["timeout", "invalid"])
        diagnosis = Diagnosis(findings=findings) if status == "ok" else None
        results.append(score_case(case, diagnosis, taxonomy=tax, status=status, seconds=rng.random() * 3,
                                  measured_impact=rng.random() * 0.5 if expect == "diagnose" else None,
                                  difficulty=rng.choice(["easy", "medium", "hard"])))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    info = DiagnoserInfo(spec="synthetic", name="synthetic")
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min)")
    print(f"{'cases':>6} {'claims':>7} {'seconds':>8}  (n_boot={args.n_boot}, best of {args.repeat})")
    for n in (int(s) for s in args.sizes.split(",")):
        results = synthetic_results(n)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            summary = summarize(results, diagnoser=info, case_set_hash="x", taxonomy_version="1", n_boot=args.n_boot)
            times.append(time.perf_counter() - t0)
        print(f"{n:>6} {summary.metrics.precision.n:>7} {min(times):>8.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
