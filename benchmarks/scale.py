"""Diagnosers against the number of ranks (issue 26 item 3): time and peak memory of rules, hta and changepoint.

    python benchmarks/scale.py [--ranks 2 16 128 1024] [--diagnosers rules hta changepoint]
                               [--window-steps 5] [--memory-limit-gb 6] [--timeout-s 600]

The bundles are the built-in straggler case (``cases/compute/straggler-rank1.yaml``: rank 1 computes 8x
slower) at 2 ranks as recorded, and scaled out to each larger size with the ``scale_out`` evidence edit
(the slow rank kept at a rank drawn once per size, ``--window-steps`` profiled steps per trace, 5 by
default: the fewest a cross-rank cause is called on). They are derived through the bundle cache
(``$DIAGEVAL_HOME``), so a second run measures without deriving. Each diagnoser runs in its own process
(``benchmarks/big_trace.py``'s in-process runner: the sandbox of ``diageval diagnose`` reaps its processes in
their own pid namespace, where ``wait4`` cannot see their RSS), under an address-space limit of
``--memory-limit-gb`` (``RLIMIT_AS``, as ``ulimit -v``; the machine is shared) and a wall-clock limit of
``--timeout-s``. A diagnoser that fails at a size (out of memory, killed, past the time limit, an error) is not
run on the larger sizes: the table says where and how it stopped. Printed per cell: wall seconds, CPU
seconds, peak RSS (MB), and what it concluded (the causes it claimed, or that it abstained).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_RUN = """
import json, sys, time
from pathlib import Path
from diageval.bundle.model import EvidenceBundle
from diageval.hosting.registry import resolve_diagnoser
diagnoser = resolve_diagnoser(sys.argv[1]).factory()
t = time.perf_counter()
d = diagnoser.diagnose(EvidenceBundle.open(Path(sys.argv[2])))
claims = sorted(f"{c.category}@{c.ranks if c.ranks is None or len(c.ranks) <= 8 else f'{len(c.ranks)} ranks'}"
                for c in d.causes)
why = d.abstain.reason[:90] if d.abstain is not None else None
print(json.dumps({"seconds": time.perf_counter() - t, "claims": claims, "abstain": why}))
"""


def bundle_for(ranks: int, window_steps: int) -> tuple[Path, str]:
    """The straggler bundle at ``ranks`` (derived through the cache), and where its slow rank sits."""
    from diageval.cases.load import load_case
    from diageval.cases.taxonomy import load_taxonomy
    from diageval.paths import builtin_cases_dir
    from diageval.recording.cache import ensure_bundle

    case = load_case(builtin_cases_dir() / "compute" / "straggler-rank1.yaml", load_taxonomy()).case
    if ranks == 2:
        return ensure_bundle(case, "cpu")[1], "1"
    kept_at = random.Random(ranks).randrange(1, ranks - 1)  # drawn once per size, the same on every run
    edit = {"name": "scale_out", "params": {"scaled_world_size": ranks, "kept_rank": 1, "kept_at_rank": kept_at,
                                            "copied_rank": 0, "window_first_step": 30 - window_steps - 1,
                                            "window_steps": window_steps, "jitter_seed": ranks}}
    scaled = case.model_copy(update={"faults": [*case.faults, type(case.faults[0]).model_validate(edit)]})
    return ensure_bundle(scaled, "cpu")[1], str(kept_at)


def run_one(diagnoser: str, bundle: Path, limit_bytes: int, timeout_s: float) -> dict:
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _RUN, diagnoser, str(bundle)], stdout=out, stderr=err,
                                preexec_fn=limits, start_new_session=True)
        status = usage = None
        while time.perf_counter() - started < timeout_s:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.2)
        else:
            os.killpg(proc.pid, 9)
            _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    row = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
           "rc": os.waitstatus_to_exitcode(status)}
    if wall >= timeout_s:
        row["failed"] = f"past the {timeout_s:.0f} s limit"
    elif row["rc"] != 0:
        last = (errors.strip().splitlines() or ["(no stderr)"])[-1][:160]
        row["failed"] = "out of memory: " + last if "MemoryError" in errors or row["rc"] == -9 else last
    else:
        try:
            row.update(json.loads(text.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            row["failed"] = "no result printed"
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 16, 128, 1024])
    ap.add_argument("--diagnosers", nargs="+", default=["rules", "hta", "changepoint"])
    ap.add_argument("--window-steps", type=int, default=5)
    ap.add_argument("--memory-limit-gb", type=float, default=6.0)
    ap.add_argument("--timeout-s", type=float, default=600.0)
    args = ap.parse_args(argv)
    limit = int(args.memory_limit_gb * (1 << 30))
    stopped: dict[str, str] = {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; limits: {args.memory_limit_gb:g} GB of "
          f"address space, {args.timeout_s:.0f} s per run")
    print("| ranks | traces MB (JSON) | diagnoser | wall s | CPU s | peak RSS MB | concluded |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for n in args.ranks:
        # derived in a process of its own: this one stays small, since a child's peak RSS counts what it was
        # forked with (ru_maxrss survives exec), and the derivation imports torch
        derive = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from scale import bundle_for; " \
                 f"print(*bundle_for({n}, {args.window_steps}))"
        bundle, culprit = subprocess.run([sys.executable, "-c", derive], capture_output=True, text=True,
                                         check=True).stdout.split()[-2:]
        bundle = Path(bundle)
        json_mb = sum(_json_bytes(p) for p in bundle.glob("rank*/trace.json.gz")) / 1e6
        for d in args.diagnosers:
            if d in stopped:
                print(f"| {n} | {json_mb:.0f} | {d} | - | - | - | not run: {stopped[d]} |")
                continue
            row = run_one(d, bundle, limit, args.timeout_s)
            if "failed" in row:
                stopped[d] = f"failed at {n} ranks"
                what = f"FAILED: {row['failed']}"
            else:
                what = f"abstained: {row['abstain']}" if row["abstain"] else (", ".join(row["claims"]) or "no cause")
            print(f"| {n} | {json_mb:.0f} | {d} | {row['wall']:.1f} | {row['cpu']:.1f} | {row['rss_mb']:.0f} | {what} |",
                  flush=True)
        print(f"(the slow rank of the {n}-rank bundle is rank {culprit}; load average now {os.getloadavg()[0]:.1f})")
    return 0


def _json_bytes(path: Path) -> int:
    import zlib

    z, n = zlib.decompressobj(wbits=31), 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            n += len(z.decompress(block))
    return n


if __name__ == "__main__":
    sys.exit(main())
