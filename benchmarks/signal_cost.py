"""What each evidence signal costs (issue 27 item 2): bytes per step per tier, and the profiler's slowdown.

1. Bytes: every cached bundle under the bundle cache (``$DIAGEVAL_HOME/bundles/evidence``; a tier bundle
   cut from another is skipped: it is not a recording), each tier's bytes from its ``bundle.json`` alone
   (:func:`diageval.run.evidence_tiers.tier_bytes`) divided by the steps its step log holds. Printed:
   median and the 10th-90th percentile over bundles, with n.
2. Slowdown: a training loop like the recorder's (an MLP trained with SGD on random batches, one thread)
   timed with the profiler as the recorder runs it (CPU activity, shapes recorded, no stacks, a schedule
   that records the last steps) and without it, in interleaved pairs A B A B so drifts of the machine
   fall on both; printed: the median ratio of profiled to plain step time over pairs with a bootstrap 95%
   interval. This is the profiler's cost on a CPU loop here, not on a GPU job (CUPTI's cost differs).
   The loop stands in for the recorder's own workloads because the rank worker has no profiler-off switch
   (adding one changes the recording code's hash, so every cached bundle would be recorded again).

Default run: ~1-2 minutes on 2 shared cores. ``--pairs`` and ``--steps`` change the slowdown's size.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path


def bytes_per_step(cache: Path) -> None:
    from diageval.bundle.model import MANIFEST_NAME, BundleManifest
    from diageval.cases.tiers import TIERS
    from diageval.run.evidence_tiers import tier_bytes

    per_tier: dict[str, list[float]] = {t: [] for t in TIERS}
    n = 0
    for folder in sorted((cache / "evidence").glob("*/")):
        path = folder / MANIFEST_NAME
        if not path.is_file():
            continue
        manifest = BundleManifest.model_validate_json(path.read_bytes())
        if not any(f.path.startswith("rank") for f in manifest.files) or not (folder / "steps.jsonl").is_file():
            continue  # a tier bundle cut from a recording, or no step log: no steps to divide by
        if not any(f.path.startswith("flight_recorder/") for f in manifest.files):
            continue  # an imported real trace or an edited bundle: not a whole recording
        if any(f.path.startswith("monitor/") for f in manifest.files):
            continue  # recorded with an in-job monitor (its cost: benchmarks/monitor_overhead.py), not a plain one
        steps = len({json.loads(line)["step"] for line in (folder / "steps.jsonl").read_text().splitlines() if line.strip()})
        if not steps:
            continue
        n += 1
        for tier, b in tier_bytes(manifest).items():
            per_tier[tier].append(b / steps)
    print(f"bytes per step by tier, over {n} whole recordings in {cache / 'evidence'}")
    if not n:
        print("  none cached: run `diageval record` or `diageval run` first")
        return
    for tier, values in per_tier.items():
        values.sort()
        lo, hi = values[int(0.1 * (len(values) - 1))], values[int(0.9 * (len(values) - 1))]
        print(f"  {tier:9s} median {statistics.median(values):10.0f} B/step   10-90%: {lo:.0f} - {hi:.0f}   n={len(values)}")


def _loop(steps: int, profiled: bool, scratch: Path) -> float:
    """Seconds per step of a small MLP's training steps (the last ``steps``, after warm-up)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    warm = 3
    prof = None
    if profiled:
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=False,
                       schedule=schedule(wait=0, warmup=warm, active=steps, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(str(scratch / "trace.json")))
        prof.start()
    times = []
    for i in range(warm + steps):
        t = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= warm:
            times.append(time.perf_counter() - t)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    return statistics.median(times)


def profiler_slowdown(pairs: int, steps: int) -> None:
    import torch

    torch.set_num_threads(1)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(pairs):
            order = (False, True) if i % 2 == 0 else (True, False)  # A B, then B A: neither always goes first
            got = {p: _loop(steps, p, Path(tmp)) for p in order}
            ratios.append(got[True] / got[False])
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    print(f"profiler slowdown (profiled / plain median step time), {pairs} interleaved pairs of {steps} steps:")
    print(f"  median {statistics.median(ratios):.3f}x   95% bootstrap interval [{boots[49]:.3f}, {boots[1949]:.3f}]   n={pairs}")
    print(f"  pairs: {', '.join(f'{r:.3f}' for r in ratios)}")


def main() -> None:
    from diageval.paths import bundle_cache_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None, help="bundle cache (default: diageval's)")
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    bytes_per_step(args.cache or bundle_cache_dir())
    profiler_slowdown(args.pairs, args.steps)


if __name__ == "__main__":
    main()
