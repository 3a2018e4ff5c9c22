"""Tiny synthetic fleets for the fleet diagnosers' tests: member bundles of steps.jsonl (and, when asked, a
small Kineto-like trace), assembled by the harness's own ``write_fleet``. No recording; milliseconds each."""

from __future__ import annotations

import gzip
import json
import random
import uuid
from datetime import datetime, timezone
from pathlib import Path

from diageval.bundle.fleet import FleetRunInfo, start_times, write_fleet
from diageval.bundle.model import MANIFEST_NAME, BundleEnv, BundleManifest, EvidenceBundle, describe_files


def member_bundle(root: Path, *, median_s: float, noise: float, steps: int = 12, seed: int = 0,
                  observer: bool = False, wide: bool = False, recompiled: bool = False) -> Path:
    """One run: ``steps`` steps around ``median_s`` seconds (multiplicative noise of ``noise``); with
    ``observer`` its trace carries a Python frame per op (a run profiled with stacks), with ``wide`` its
    matmuls take double-precision inputs."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    t, rows = 1_700_000_000.0, []
    for i in range(steps):
        d = median_s * (1 + noise * rng.uniform(-1, 1))
        rows.append({"rank": 0, "step": i, "t_start": t, "t_end": t + d})
        t += d + 0.001
    (root / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    events, ts = [], 0
    step_us = round(median_s * 1e4)  # the profiled steps scale with the run's speed (100 ms -> 1000 us)
    for i in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": ts, "dur": step_us})
        for k in range(4):
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": ts + 10 + k * 200,
                           "dur": 150, "args": {"Input type": ["double" if wide else "float"] * 3}})
            if observer:
                events.append({"ph": "X", "cat": "python_function", "name": "torch/nn/modules/linear.py(125): forward",
                               "pid": 1, "tid": 1, "ts": ts + 5 + k * 200, "dur": 160})
        if recompiled or i == 0:  # a compiled region: compiled once at the first step, again each step when recompiling
            events.append({"ph": "X", "cat": "user_annotation", "name": f"Torch-Compiled Region: 0/{i if recompiled else 0}",
                           "pid": 1, "tid": 1, "ts": ts + 900, "dur": 50})
        ts += step_us + 100
    finish_one_rank_bundle(root, events)
    return root


def finish_one_rank_bundle(root: Path, events: list[dict]) -> None:
    """Write ``events`` as rank 0's trace under ``root`` and the bundle's manifest over every file there."""
    (root / "rank0").mkdir()
    with gzip.open(root / "rank0" / "trace.json.gz", "wt") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    manifest = BundleManifest(bundle_id=uuid.uuid4().hex, created=datetime.now(timezone.utc),
                              env=BundleEnv(device="cpu", world_size=1), files=describe_files(root))
    (root / MANIFEST_NAME).write_text(manifest.model_dump_json())


def fleet_bundle(tmp: Path, runs: list[dict], *, roles: list[str | None] | None = None) -> EvidenceBundle:
    """A fleet bundle from ``runs``: dicts with ``metadata`` and the keyword arguments of :func:`member_bundle`
    (``median_s``, ``noise``, ``observer``, ``wide``); run i is named ``job-<i>`` and starts i-th."""
    infos, members = [], {}
    starts = start_times(list(range(len(runs))))
    for i, spec in enumerate(runs):
        spec = dict(spec)
        name = f"job-{i:02d}"
        metadata = spec.pop("metadata")
        members[name] = member_bundle(tmp / "members" / name, seed=i, **spec)
        infos.append(FleetRunInfo(name=name, metadata=metadata, start=starts[i],
                                  role=roles[i] if roles else None, bundle=f"runs/{name}"))
    dest = tmp / "fleet"
    write_fleet(dest, infos, members)
    return EvidenceBundle.open(dest)


def fleet_metadata(i: int) -> dict[str, str]:
    """8 runs: host node-01..04 (two runs each), version v1/v2 alternating, rack r2 only on node-04 (aliased
    with it), loader_workers 2 on runs 1 and 6 (hosts node-01 and node-04)."""
    host = f"node-0{i // 2 + 1}"
    return {"host": host, "version": f"v{i % 2 + 1}", "rack": "r2" if host == "node-04" else "r1",
            "loader_workers": "2" if i in (1, 6) else "8"}
