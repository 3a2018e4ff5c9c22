"""What each in-job monitor costs the job (issue 27 item 5): its slowdown, measured like a signal's cost.

One case (default ``mlp-ddp-healthy``: two ranks, DDP, no fault) is recorded by the real recorder
(``record_case``, profiler and all, as every bundle is) without a monitor and with each monitor of the
registry, in rounds: every round records each variant once, in an order rotated from round to round, so
that drifts of the machine fall on every variant alike. Per recording, the job's time per step is the
slowest rank's span from the start of step 1 to the end of its last step over those steps (step 0 holds
the warm-up); a monitor's work between steps (nvrx's report collectives run after a step's timer stopped)
falls inside that span. Per round, each monitor's ratio = its time per step / the plain one's; printed:
the median ratio over rounds with a bootstrap 95% interval and n, as ``benchmarks/signal_cost.py`` prints
the profiler's. ``--json PATH`` also writes them (``diageval.reports.signal_value.OverheadMeasurement``);
written as ``monitor-overhead.json`` beside run folders, ``diageval report`` shows each slowdown beside
the monitor's skill.

This is the cost on CPU here, with the profiler on in both arms (the recorder always profiles); on a GPU
job nvrx's CUPTI kernel timing adds a cost this does not see. Run nothing heavy beside it. Default:
8 rounds x 3 recordings, ~3-5 minutes on 2 idle cores.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path


def time_per_step(bundle: Path) -> float:
    """The slowest rank's seconds per step over steps 1.. (see the module docstring)."""
    from diageval.bundle.model import EvidenceBundle

    per_rank: dict[int, list] = {}
    for s in EvidenceBundle.open(bundle).steps():
        per_rank.setdefault(s.rank, []).append(s)
    spans = []
    for rows in per_rank.values():
        rows = sorted(rows, key=lambda r: r.step)[1:]
        if rows:
            spans.append((rows[-1].t_end - rows[0].t_start) / len(rows))
    if not spans:
        raise ValueError(f"{bundle}: no steps after the first in steps.jsonl")
    return max(spans)


def bootstrap_median(ratios: list[float], seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return boots[49], boots[1949]


def measure(case_id: str, monitors: list[str], rounds: int) -> dict[str, list[float]]:
    from diageval.cases.load import load_case_set
    from diageval.recording.record import record_case

    case = load_case_set(None).select([case_id])[0].case
    variants: list[str | None] = [None, *monitors]
    ratios: dict[str, list[float]] = {m: [] for m in monitors}
    with tempfile.TemporaryDirectory(prefix="monitor-overhead-") as tmp:
        for i in range(rounds):
            order = variants[i % len(variants):] + variants[:i % len(variants)]
            got = {}
            for v in order:
                dest = Path(tmp) / f"r{i}-{v or 'plain'}"
                record_case(case, dest, device="cpu", monitor=v)
                got[v] = time_per_step(dest)
            for m in monitors:
                ratios[m].append(got[m] / got[None])
            print(f"  round {i + 1}/{rounds} ({' '.join(v or 'plain' for v in order)}): plain {got[None] * 1e3:.1f} ms/step, "
                  + ", ".join(f"{m} {got[m] / got[None]:.3f}x" for m in monitors), flush=True)
    return ratios


def main() -> None:
    from diageval.recording.monitors import MONITORS
    from diageval.reports.signal_value import MonitorOverhead, OverheadMeasurement

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="mlp-ddp-healthy")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--monitor", action="append", choices=sorted(MONITORS), help="default: every monitor")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here (monitor-overhead.json)")
    args = ap.parse_args()
    monitors = args.monitor or sorted(MONITORS)
    print(f"monitor overhead on {args.case}: {args.rounds} rounds of {1 + len(monitors)} recordings, order rotated")
    ratios = measure(args.case, monitors, args.rounds)
    out = []
    for m, rs in ratios.items():
        lo, hi = bootstrap_median(rs)
        out.append(MonitorOverhead(monitor=m, slowdown=statistics.median(rs), ci=(lo, hi), n=len(rs)))
        print(f"  {m:15s} slowdown median {statistics.median(rs):.3f}x   95% bootstrap interval [{lo:.3f}, {hi:.3f}]   n={len(rs)}")
    if args.json:
        method = (f"{args.rounds} rounds, each recording {args.case} plain and with each monitor in a rotated order; "
                  "ratio of the slowest rank's time per step over steps 1..")
        args.json.write_text(OverheadMeasurement(case=args.case, method=method, monitors=out).model_dump_json(indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
