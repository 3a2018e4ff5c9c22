"""Per-case recording time: median (and min/max) wall seconds over repeats, recorded into a temp folder.

    python benchmarks/record.py [CASE_ID ...] [--repeats 3]

The first recording in the process also starts the forkserver (~3 s); it is timed apart as "warm-up".
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from diageval.cases.load import load_case_set
from diageval.recording.record import record_case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case_ids", nargs="*")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cases = load_case_set().select(args.case_ids)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        record_case(cases[0].case, Path(tmp) / "warmup", device="cpu")
        print(f"warm-up (forkserver start + first case): {time.perf_counter() - t:.2f}s")
        print(f"{'case':28} {'steps':>5} {'median_s':>9} {'min_s':>7} {'max_s':>7} {'trace_MB':>8}")
        total = 0.0
        for lc in cases:
            times = []
            for i in range(args.repeats):
                dest = Path(tmp) / f"{lc.case.id}-{i}"
                t = time.perf_counter()
                record_case(lc.case, dest, device="cpu")
                times.append(time.perf_counter() - t)
            size = sum(p.stat().st_size for p in Path(tmp, f"{lc.case.id}-0").rglob("*.gz")) / 1e6
            total += statistics.median(times)
            print(f"{lc.case.id:28} {lc.case.workload.steps:>5} {statistics.median(times):>9.2f} "
                  f"{min(times):>7.2f} {max(times):>7.2f} {size:>8.2f}", flush=True)
        print(f"sum of medians over {len(cases)} cases: {total:.1f}s")


if __name__ == "__main__":
    main()
