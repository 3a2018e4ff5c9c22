"""Does ``--executor ray`` give the results ``--executor local`` gives? Runs each diagnoser on the cached corpus
twice, once per executor, into two run folders, and compares every result and the summary.

For each diagnoser (``--diagnoser``, repeatable; default ``rules`` and ``null``) it runs the selected cases
(default: every built-in case this machine can run; ``--cases-of RUN_DIR`` takes the cases that run folder
holds results for, i.e. whose evidence is cached; ``--cases ID...`` names them) with ``--executor local``, then with ``--executor ray``
(the local Ray this script starts, 2 CPUs and one ``diageval_recorder``, or ``--address``), same seed, same
jobs, same ``$DIAGEVAL_HOME``. With ray, the live cases' evidence is prepared on the Ray recorder from this
cache (seeded, nothing recorded again when the cache holds it) and the diagnoses run on Ray slots.

It compares, and prints every difference (there must be none):

* every result, field by field: status, verdicts, outcomes, forecasts, the measured fields, errors (with the
  run folder's path written ``RUN``); only ``seconds`` (the diagnoser's wall time) is left out;
* the summary, every metric value and interval at every level (per cause, per difficulty, ...), except
  ``seconds_per_case`` (wall time). Bootstrap intervals use a fixed seed over results sorted by case id, so
  they depend on neither the executor nor the order cases finished in.

and prints the counts: cases, statuses, fields and summary values compared. Exit status 1 on any difference.

Usage: DIAGEVAL_HOME=... python benchmarks/executor_parity.py [--cases-of RUN_DIR] [--cases ID...] [--diagnoser SPEC]...
       [--out DIR] [--jobs N] [--seed S] [--address ADDRESS]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from diageval.cases.load import load_case_set
from diageval.hosting import HostPolicy
from diageval.run.pipeline import RunOptions, run_diagnoser
from diageval.run.store import RunStore

TIMED = {"seconds"}  # result fields that are wall time
TIMED_SUMMARY = {"seconds_per_case"}


def comparable_results(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every result of the run folder as saved, less its wall time, the folder's path written RUN."""
    return {r.case_id: json.loads(r.model_dump_json(exclude=TIMED).replace(str(run_dir), "RUN"))
            for r in RunStore(run_dir).read_results()}


def untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMED_SUMMARY}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every leaf where ``a`` and ``b`` differ, as ``path: a != b``."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: {'missing' if k not in a else _short(a[k])} != "
                           f"{'missing' if k not in b else _short(b[k])}")
            else:
                out += differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {_short(a)} != {_short(b)}"]


def leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(leaves(v) for v in value.values())
    if isinstance(value, list):
        return sum(leaves(v) for v in value)
    return 1


def _short(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def run(spec: str, case_set: Any, case_ids: tuple[str, ...], out: Path, executor: str, jobs: int, seed: int,
        sandbox: bool) -> Any:
    options = RunOptions(case_ids=case_ids, out_dir=out, run_id=f"parity-{spec}-{executor.split(':')[0]}", jobs=jobs,
                         seed=seed, executor=executor)
    start = time.perf_counter()
    outcome = run_diagnoser(spec, case_set, options, HostPolicy(sandbox=sandbox), progress=None)
    print(f"  {executor:<6} {outcome.run_dir}: {len(outcome.results)} results in {time.perf_counter() - start:.0f} s "
          f"(prepared {outcome.counts['prepared']}, diagnosed {outcome.counts['diagnosed']}, skipped "
          f"{outcome.counts['skipped']})", flush=True)
    return outcome


def start_ray(address: str | None, tries: int = 5) -> Any:
    """One Ray for every run (a local one: 2 CPUs and one recorder, as the tests start it). A loaded machine
    sometimes misses Ray's 15 s window for its agents (:mod:`diageval.executors.local_ray`): try again."""
    import ray

    from diageval.executors.local_ray import start_local_ray

    for attempt in range(1, tries + 1):
        start = time.perf_counter()
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                start_local_ray(ray, num_cpus=2, log_to_driver=False)
        except Exception as exc:
            print(f"ray.init failed (try {attempt}/{tries}, load {os.getloadavg()[0]:.1f}): {str(exc).splitlines()[0]}",
                  flush=True)
            continue
        print(f"ray.init: {time.perf_counter() - start:.1f} s; resources {ray.cluster_resources()}", flush=True)
        return ray
    raise SystemExit("no Ray could start here")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--diagnoser", action="append", help="repeatable (default: rules and null)")
    parser.add_argument("--cases-of", type=Path, help="only the cases this run folder holds results for")
    parser.add_argument("--cases", nargs="+", default=(), help="only these case ids")
    parser.add_argument("--out", type=Path, help="where the run folders go (default: a temp folder, kept)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--address", help="a Ray cluster to join (default: start a local one)")
    parser.add_argument("--no-sandbox", action="store_true", help="both runs without the box (as diageval run's flag)")
    args = parser.parse_args()
    specs = args.diagnoser or ["rules", "null"]
    case_set = load_case_set()
    case_ids: tuple[str, ...] = ()
    if args.cases_of:
        case_ids = tuple(sorted({r.case_id for r in RunStore(args.cases_of).read_results()}))
    case_ids = tuple(sorted({*case_ids, *args.cases}))
    out = args.out or Path(tempfile.mkdtemp(prefix="diageval-parity-"))
    print(f"DIAGEVAL_HOME={os.environ.get('DIAGEVAL_HOME', '(unset: ./.diageval)')}; cases: "
          f"{len(case_ids) if case_ids else 'all'}{f' (with those of {args.cases_of})' if args.cases_of else ''}; runs in {out}; "
          f"seed {args.seed}, jobs {args.jobs}{', no sandbox' if args.no_sandbox else ''}; load {os.getloadavg()[0]:.1f}",
          flush=True)
    ray = start_ray(args.address)
    found = 0
    try:
        for spec in specs:
            print(f"{spec}:", flush=True)
            here = run(spec, case_set, case_ids, out, "local", args.jobs, args.seed, not args.no_sandbox)
            there = run(spec, case_set, case_ids, out, "ray", args.jobs, args.seed, not args.no_sandbox)
            a, b = comparable_results(here.run_dir), comparable_results(there.run_dir)
            diffs = [f"results: case only in {'local' if c in a else 'ray'}: {c}" for c in sorted(set(a) ^ set(b))]
            for c in sorted(set(a) & set(b)):
                diffs += [f"results/{c}{d}" for d in differences(a[c], b[c])]
            sa, sb = untimed(here.summary.model_dump(mode="json")), untimed(there.summary.model_dump(mode="json"))
            diffs += [f"summary{d}" for d in differences(sa, sb)]
            statuses = Counter(r["status"] for r in a.values())
            print(f"  compared {len(a)} results ({sum(leaves(r) for r in a.values())} fields; statuses "
                  f"{dict(sorted(statuses.items()))}; {sum(len(r['verdicts']) for r in a.values())} verdicts, "
                  f"{sum(len(r['outcomes']) for r in a.values())} outcomes, "
                  f"{sum(len(r['forecasts']) for r in a.values())} forecasts) and the summary ({leaves(sa)} values); "
                  f"ray's run.json env.executor = {there.info.env.model_dump().get('executor')}")
            print(f"  differences: {len(diffs)}")
            for d in diffs:
                print(f"    {d}")
            found += len(diffs)
    finally:
        ray.shutdown()
    print(f"total differences: {found}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
