"""Random fleets nobody labeled by hand, for the fleet adapters: does a diagnoser's factor forecast score at least
null's expected score where its tool has no signal, and above it where it has? (Issue 24.)

Each fleet has 12 runs with corpus-like metadata drawn at random (host node-01..04, version v1/v2, loader_workers
2/4), in a random start order, each run's level log-normal around 20 ms (run-to-run sd ``--run-sd``, default 0.15:
two recordings of one job on a loaded shared machine) with 4% step noise (tests/fleet_fakes.py writes the bundles).
Scenarios:

* ``noise``: nothing at fault (a healthy fleet): null's loss on the factor events is 0;
* ``interleaved``: a random value of a random factor slows its runs 1.5-3x, its runs spread over the start order
  (a host, a canary version, a setting): a change-point tool over start order has little to go on;
* ``rollout``: version v2 is every run from a random point in the start order on (4-8 runs), and slows them
  1.5-3x: the change that a change-point tool exists for;
* ``aliased``: the same rollout, and those runs alone also ran on host node-05: no fleet evidence tells the two
  values apart (the case expects abstention naming both).

Each diagnosis is scored by the scoring code itself (``score_case``); the loss compared is the rank-credited
score's over the events that concern the fleet (factor, aliased and the abstain decision; the adapters under test
claim no cause, so their cause events equal null's). Lower is better.

    python tests/fleet_simulation.py [--fleets 40] [--diagnoser otava|rules] [--false-alarms]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_fakes import fleet_bundle  # noqa: E402

from diageval.cases.model import Case  # noqa: E402
from diageval.cases.taxonomy import load_taxonomy  # noqa: E402
from diageval.diagnosis import Diagnosis, FactorRef  # noqa: E402
from diageval.scoring.verdicts import score_case  # noqa: E402

SCENARIOS = ("noise", "interleaved", "rollout", "aliased")
FLEET_EVENTS = ("factor", "aliased", "abstain")
RUNS = 12


def draw_fleet(scenario: str, rng: random.Random, run_sd: float = 0.15) -> tuple[list[dict], dict]:
    """(runs in start order: metadata and median_s, the case's labels and faults) of one random fleet."""
    meta = [{"host": f"node-0{rng.randrange(4) + 1}", "version": f"v{rng.randrange(2) + 1}",
             "loader_workers": rng.choice(["2", "4"])} for _ in range(RUNS)]
    behind, aliased, slow = None, [], set()
    if scenario == "interleaved":
        name = rng.choice(["host", "version", "loader_workers"])
        value = rng.choice(sorted({m[name] for m in meta}))
        behind = FactorRef(name=name, value=value)
        slow = {i for i, m in enumerate(meta) if m[name] == value}
        if len(slow) == RUNS:  # every run holds it: not a factor value of this fleet; take another draw
            return draw_fleet(scenario, rng, run_sd)
    elif scenario in ("rollout", "aliased"):
        first = RUNS - rng.randint(4, 8)
        for i, m in enumerate(meta):
            m["version"] = "v2" if i >= first else "v1"
            if scenario == "aliased":
                m["host"] = "node-05" if i >= first else f"node-0{rng.randrange(4) + 1}"
        slow = set(range(first, RUNS))
        behind = FactorRef(name="version", value="v2")
        if scenario == "aliased":
            aliased, behind = [FactorRef(name="host", value="node-05"), behind], None
    effect = rng.uniform(1.5, 3.0)
    runs = [{"metadata": m, "median_s": 0.02 * math.exp(rng.gauss(0, run_sd)) * (effect if i in slow else 1.0),
             "noise": 0.04} for i, m in enumerate(meta)]
    return runs, {"behind": behind, "aliased": aliased}


def case_of(scenario: str, runs: list[dict], truth: dict) -> Case:
    behind, aliased = truth["behind"], truth["aliased"]
    where = behind or (aliased[0] if aliased else None)
    data = {
        "id": f"sim-{scenario}", "title": f"simulated {scenario} fleet", "kind": "fleet",
        "workload": {"name": "mlp_ddp", "world_size": 1, "steps": 12},
        "fleet": {"runs": [{"name": f"job-{i:02d}", "metadata": r["metadata"], "start": i} for i, r in enumerate(runs)],
                  "faults": [{"where": where.model_dump(), "faults": [{"name": "cpu_contention"}]}] if where else []},
        "labels": {"causes": [{"category": "host.cpu_contention", "factor": behind.model_dump()}] if behind else [],
                   "expect": "diagnose" if behind else ("abstain" if aliased else "healthy"),
                   "aliased": [a.model_dump() for a in aliased]},
    }
    if behind:
        data["manifest"] = {"metric": "step_time_median", "min_ratio": 1.3}
    return Case.model_validate(data)


def fleet_loss(case: Case, diagnosis: Diagnosis, taxonomy) -> float:
    """The rank-credited score's loss over the fleet's events (factor, aliased, abstain)."""
    result = score_case(case, diagnosis, taxonomy=taxonomy)
    return sum((f.ranked_probability - f.outcome) ** 2 for f in result.forecasts if f.kind in FLEET_EVENTS)


def simulate(diagnose, scenario: str, fleets: int, tmp: Path, seed: int = 0, run_sd: float = 0.15) -> list[float]:
    """Per fleet, the diagnoser's loss minus null's (negative: better than null)."""
    taxonomy = load_taxonomy()
    rng = random.Random(f"{scenario}-{seed}")
    out = []
    for k in range(fleets):
        runs, truth = draw_fleet(scenario, rng, run_sd)
        case = case_of(scenario, runs, truth)
        bundle = fleet_bundle(tmp / f"{scenario}-{k}", runs)
        out.append(fleet_loss(case, diagnose(bundle), taxonomy) - fleet_loss(case, Diagnosis(), taxonomy))
    return out


def false_alarms(series: int = 300, run_sd: float = 0.15) -> None:
    """How often Otava reports a change point on run levels of noise alone (log-normal, sd ``run_sd``), at its
    default ``max_pvalue`` and ten times it: what :func:`diageval.diagnosers.otava_adapter.calibrated` corrects."""
    from otava.analysis import compute_change_points

    rng = random.Random(1)
    for n in (8, 12, 16):
        for max_p in (0.001, 0.01):
            hits = sum(bool(compute_change_points([math.exp(rng.gauss(0, run_sd)) for _ in range(n)],
                                                  max_pvalue=max_p, min_magnitude=0.1)[0]) for _ in range(series))
            print(f"  {n} runs, max_pvalue {max_p}: a change point in {hits} of {series} noise series "
                  f"({hits / series:.1%}; nominal {max_p:.1%})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleets", type=int, default=40)
    ap.add_argument("--run-sd", type=float, default=0.15)
    ap.add_argument("--diagnoser", default="otava", choices=["otava", "rules"])
    ap.add_argument("--false-alarms", action="store_true", help="Otava's own false-alarm rate on noise instead")
    args = ap.parse_args()
    if args.false_alarms:
        false_alarms(run_sd=args.run_sd)
        return
    if args.diagnoser == "otava":
        from diageval.diagnosers.otava_adapter import OtavaDiagnoser
        diagnose = OtavaDiagnoser().diagnose
    else:
        from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
        diagnose = RulesDiagnoser().diagnose
    print(f"{args.diagnoser}: loss on the fleet events minus null's, per fleet ({RUNS} runs, run-to-run sd "
          f"{args.run_sd}); negative is better than null")
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in SCENARIOS:
            d = simulate(diagnose, scenario, args.fleets, Path(tmp), run_sd=args.run_sd)
            mean = statistics.fmean(d)
            half = 1.96 * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
            print(f"  {scenario:12s} n={len(d):3d}  mean {mean:+.3f}  95% interval [{mean - half:+.3f}, {mean + half:+.3f}]"
                  f"  better/equal/worse than null: {sum(x < -1e-9 for x in d)}/{sum(abs(x) <= 1e-9 for x in d)}/"
                  f"{sum(x > 1e-9 for x in d)}")


if __name__ == "__main__":
    main()
