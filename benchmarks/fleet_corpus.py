"""The regression and fleet corpus (issue 24): what recording and verifying it costs, and what each case measured.

    python benchmarks/fleet_corpus.py [--cache DIR] [CASE_ID ...]

Prepares every regression and fleet case of the built-in corpus (or the named ones) as a run's evidence step
does (members recorded or reused through the bundle cache, the fleet bundle assembled, positive cases
verified), in a fresh temp cache unless ``--cache`` names one (then a second call shows the cached cost).
Prints per case: seconds, the members it recorded, and its measurement: for a fleet every factor value a
fault sits behind (labeled or not: the aliased and noise-bounded cases too), its runs' magnitude against the
fault-free runs, the permutation p-value and whether it clears alpha and the case's min_ratio; the fault-free
runs' relative range (the fleet's noise); for a regression the repeated pair test. Then the total seconds
and the machine's load. The first recording in the process also starts the forkserver, timed in the first case.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    from diageval.cases.load import load_case_set
    from diageval.recording.fleet import members_with_repeats
    from diageval.recording.fleet_verify import fleet_effects, run_steps_metric
    from diageval.recording.prepare import prepare_evidence
    from diageval.bundle.model import EvidenceBundle
    from diageval.recording.cache import bundles_root, cache_key

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case_ids", nargs="*")
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="fleet-corpus-"))
    chosen = [lc for lc in load_case_set().select(args.case_ids) if lc.case.fleet is not None and lc.case.workload is not None]
    print(f"cache {cache}; {len(chosen)} cases; load average {os.getloadavg()[0]:.1f}")
    total = time.perf_counter()
    for lc in chosen:
        case = lc.case
        before = len(list(bundles_root(cache).glob("*"))) if bundles_root(cache).is_dir() else 0
        start = time.perf_counter()
        prepared = prepare_evidence(lc, device="cpu", cache_dir=cache)
        seconds = time.perf_counter() - start
        recorded = len(list(bundles_root(cache).glob("*"))) - before - 1
        v = prepared.verification
        line = f"{case.id:34s} {seconds:6.1f}s  {max(recorded, 0):2d} new recordings  expect {case.labels.expect}"
        if v is not None:
            line += f"  ratio {v.ratio:.2f} manifested {v.manifested}"
            if v.test is not None:
                line += f" (p {v.test.p_value:.3g} alpha {v.test.alpha:g}, {v.test.pairs} {'pairs' if case.kind == 'regression' else 'runs'})"
        print(line, flush=True)
        if case.kind == "fleet":
            metric = case.manifest.metric if case.manifest else "step_time_median"
            run_metric = {}
            for run, member, repeat in members_with_repeats(case):
                folder = bundles_root(cache) / cache_key(member, "cpu", repeat)
                run_metric[run.name] = run_steps_metric(EvidenceBundle.open(folder).steps(), metric, case.workload.steps)
            refs = [ff.where for ff in case.fleet.faults]
            clean = [run_metric[r.name] for r in case.fleet.runs if not case.fleet.faults_of(r)]
            med = sorted(clean)[len(clean) // 2]
            print(f"    fault-free runs: {len(clean)}, {metric} median {med * 1000:.1f} ms, relative range "
                  f"{(max(clean) - min(clean)) / med:.2f}")
            min_ratio = case.manifest.min_ratio if case.manifest else 1.3
            for e in fleet_effects(case, run_metric, refs=refs, min_ratio=min_ratio) if refs else []:
                print(f"    {e.factor.name}={e.factor.value}: {e.runs_with} runs, magnitude {e.ratio:.2f}, p {e.p_value:.3g} "
                      f"over {e.permutations} splits, clears alpha {e.alpha:g} and min_ratio {min_ratio:g}: {e.manifested}")
    print(f"total {time.perf_counter() - total:.1f}s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
