"""What each profiler option costs a training step on CPU (issue 24, the ``costly_profiling`` fault).

    python benchmarks/profiler_overhead.py [--rounds N] [--steps N] WORKLOAD [PARAMS_JSON]

Builds a built-in workload in this process (one rank, gloo) and runs its steps (the next batch and the train
step, as the rank worker times them) under each profiler configuration in turn, a short profiler session of
``--steps`` steps each, the configurations interleaved over ``--rounds`` rounds so that the machine's drift
falls on all of them alike. Per configuration it prints the median over rounds of each session's median step
CPU time of the thread (``time.thread_time``: time the thread ran, which another process on the core moves less
than wall time), and its ratio to ``base``, the options every recording's profiler uses (``record_shapes``):

* ``none``: no profiler; ``base``; ``stack``: + ``with_stack``; ``memory``: + ``profile_memory``;
* ``fault``: + both (``costly_profiling``'s default); ``fault+et``: + an execution trace observer
  (``record_execution_trace``), a fresh one per session, its file in a temp folder.

The first session's step of each configuration is left out (first allocations).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("params", nargs="?", default="{}", help="workload params as JSON")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=4, help="steps per profiler session")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    from diageval.recording.context import RankContext
    from diageval.recording.faults.base import Injection
    from diageval.recording.workloads import WORKLOADS

    torch.set_num_threads(1)
    scratch = Path(tempfile.mkdtemp(prefix="profiler-overhead-"))
    dist.init_process_group("gloo", store=dist.FileStore(str(scratch / "store"), 1), rank=0, world_size=1)
    info = WORKLOADS[args.workload]
    params = info.params_model.model_validate(json.loads(args.params))
    configs: dict[str, dict | None] = {
        "none": None,
        "base": {"record_shapes": True},
        "stack": {"record_shapes": True, "with_stack": True},
        "memory": {"record_shapes": True, "profile_memory": True},
        "fault": {"record_shapes": True, "with_stack": True, "profile_memory": True},
        "fault+et": {"record_shapes": True, "with_stack": True, "profile_memory": True, "et": True},
    }
    steps = args.steps * len(configs) * args.rounds + 8
    ctx = RankContext(rank=0, world_size=1, steps=steps, device="cpu", backend="gloo", scratch_dir=scratch)
    setup = info.load()(params, ctx, Injection([]))
    batches = iter(setup.loader)
    for _ in range(3):
        setup.train_step(next(batches))
    results: dict[str, list[float]] = {name: [] for name in configs}
    for round_ in range(args.rounds):
        for name, options in configs.items():
            options = dict(options) if options is not None else None
            if options is not None and options.pop("et", False):
                path = scratch / f"et-{round_}.json"
                options["execution_trace_observer"] = ExecutionTraceObserver().register_callback(str(path))
            session = profile(activities=[ProfilerActivity.CPU], **options) if options is not None else contextlib.nullcontext()
            times = []
            with session:
                for _ in range(args.steps):
                    started = time.thread_time()
                    setup.train_step(next(batches))
                    times.append(time.thread_time() - started)
            results[name].append(statistics.median(times[1:]))
            for leftover in scratch.glob("et-*.json"):
                leftover.unlink()
    base = statistics.median(results["base"])
    print(f"{args.workload} {params.model_dump(exclude_defaults=True)}: {args.rounds} rounds of {args.steps} steps, "
          f"load {os.getloadavg()[0]:.1f}")
    for name, values in results.items():
        med = statistics.median(values)
        lo, hi = sorted(values)[len(values) // 4], sorted(values)[(3 * len(values)) // 4]
        print(f"  {name:9s} {med * 1e3:7.2f} ms  {med / base:5.2f}x base  (rounds' quartiles {lo * 1e3:.2f}-{hi * 1e3:.2f} ms)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
