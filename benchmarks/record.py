"""Recording the corpus: per-case wall seconds, and the whole corpus as `diageval record` does it.

    python benchmarks/record.py [CASE_ID ...] [--repeats 1]

Each repeat prepares every case into a fresh, empty bundle cache (a temp folder), exactly as
``diageval record`` and a run's evidence step do: live cases are recorded, evidence edits are derived
from the cached recording of the case without its edits, recorded cases are imported from the data
folder, and cases that need CUDA are skipped with the reason on a machine without it. No verification
(a run verifies positive cases on top: see ``diageval verify``). The first recording in the process
also starts the forkserver (~3 s); it is timed apart as "warm-up".
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from diageval.cases.load import load_case_set
from diageval.recording.prepare import prepare_evidence
from diageval.recording.record import device_problem, record_case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case_ids", nargs="*")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    cases = load_case_set().select(args.case_ids)
    runnable = [lc for lc in cases if lc.case.recorded is not None or device_problem("auto", lc.case) is None]
    for lc in cases:
        if lc not in runnable:
            print(f"skipped {lc.case.id}: {device_problem('auto', lc.case)}")
    with tempfile.TemporaryDirectory() as tmp:
        first = next(lc for lc in runnable if lc.case.recorded is None)
        t = time.perf_counter()
        record_case(first.case, Path(tmp) / "warmup", device="cpu")
        print(f"warm-up (forkserver start + first case): {time.perf_counter() - t:.2f}s")
        print(f"{'case':40} {'median_s':>9} {'min_s':>7} {'max_s':>7}")
        per_case: dict[str, list[float]] = {lc.case.id: [] for lc in runnable}
        totals = []
        for i in range(args.repeats):
            cache = Path(tmp) / f"cache-{i}"
            start = time.perf_counter()
            for lc in runnable:
                t = time.perf_counter()
                prepare_evidence(lc, device="auto", verify=False, cache_dir=cache)
                per_case[lc.case.id].append(time.perf_counter() - t)
            totals.append(time.perf_counter() - start)
        for case_id, times in per_case.items():
            print(f"{case_id:40} {statistics.median(times):>9.2f} {min(times):>7.2f} {max(times):>7.2f}", flush=True)
        print(f"whole corpus: {len(runnable)} cases prepared ({len(cases) - len(runnable)} skipped) in "
              f"{statistics.median(totals):.1f} s (median of {args.repeats}; min {min(totals):.1f}, max {max(totals):.1f})")


if __name__ == "__main__":
    main()
