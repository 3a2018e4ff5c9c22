"""Cases per second of the diagnosis phase on the ``local`` and ``ray`` executors, with 1 and 2 slots, and what
each case costs beyond the fixed start.

Runs fake cases (tiny pre-made bundles, no recording; ``--pad-mib`` makes each bundle's trace that much
bigger, to see what carrying a bundle through the object store costs) through ``run_diagnoser`` with the
``null`` diagnoser (or ``--diagnoser``), sandboxed, and times the diagnose phase alone. For each executor and
slot count it runs ``N`` cases and ``N // 4`` cases, ``--repeats`` times each (alternating), and prints, from
the median times

* cases/s: ``N`` / the diagnose phase of the ``N``-case run;
* per case: the slope ``(t(N) - t(N/4)) / (N - N/4)``, the cost of one more case (fixed start excluded);
* start: ``t(N) - N * per case``, what opening the slots costs (workers, boxes; on Ray the actors too);

and, once, the seconds ``ray.init`` took to start the local Ray (which the ``ray`` rows then share). On a
shared machine the numbers move with its load: the script prints the load average beside them.

Usage: python benchmarks/executors.py [N] [--repeats R] [--pad-mib M] [--diagnoser SPEC] [--address ADDRESS]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from run_fakes import timed_fake_run  # noqa: E402

import diageval.run.pipeline as run_module  # noqa: E402
from diageval.hosting import HostPolicy  # noqa: E402


def diagnose_phase(spec: str, n: int, tmp: Path, executor: str, jobs: int, pad: str) -> float:
    """Seconds of the diagnose phase of one run of ``n`` fake cases."""
    run = timed_fake_run(spec, n, tmp / f"bundles-{n}", run_module.RunOptions(
        cases_dir=tmp, out_dir=tmp / "runs", run_id=f"{executor}-{jobs}-{n}-{secrets.token_hex(4)}", jobs=jobs,
        executor=executor), HostPolicy(), trace_text=pad)
    bad = [r.case_id for r in run.outcome.results if r.status != "ok"]
    if bad:
        raise SystemExit(f"{executor} x{jobs}: {len(bad)} case(s) did not end ok, e.g. {bad[0]}")
    return run.diagnose_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=40, help="cases per run (and n // 4 for the slope)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each size; the median is used")
    parser.add_argument("--pad-mib", type=float, default=0.0, help="extra MiB of text in each bundle's trace")
    parser.add_argument("--diagnoser", default="null")
    parser.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    args = parser.parse_args()
    pad = secrets.token_hex(int(args.pad_mib * (1 << 20)) // 2) if args.pad_mib else ""
    import ray

    start = time.perf_counter()
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        from diageval.executors.local_ray import start_local_ray

        start_local_ray(ray, num_cpus=2, log_to_driver=False)  # its agents' ports given: see local_ray
    print(f"ray.init: {time.perf_counter() - start:.1f} s ({'joined ' + args.address if args.address else 'a local Ray, 2 CPUs'})")
    small = max(1, args.n // 4)
    print(f"{args.diagnoser} on {args.n} and {small} fake cases (median of {args.repeats}), bundle trace padded by "
          f"{args.pad_mib:g} MiB, sandboxed")
    print(f"{'executor':<9} {'slots':>5} {'cases/s':>8} {'per case s':>11} {'start s':>8} {'load avg':>9}")
    try:
        with tempfile.TemporaryDirectory(prefix="diageval-bench-executors-") as tmp:
            for executor in ("local", "ray"):
                for jobs in (1, 2):
                    smalls, bigs = [], []
                    for _ in range(args.repeats):
                        smalls.append(diagnose_phase(args.diagnoser, small, Path(tmp), executor, jobs, pad))
                        bigs.append(diagnose_phase(args.diagnoser, args.n, Path(tmp), executor, jobs, pad))
                    t_small, t_n = statistics.median(smalls), statistics.median(bigs)
                    per_case = (t_n - t_small) / (args.n - small) if args.n > small else float("nan")
                    print(f"{executor:<9} {jobs:>5} {args.n / t_n:>8.2f} {per_case:>11.3f} {t_n - args.n * per_case:>8.2f} "
                          f"{os.getloadavg()[0]:>9.1f}", flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
