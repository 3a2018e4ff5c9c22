"""Build small, hand-shaped Kineto traces and evidence bundles for the trace-reader and rules tests.

The events mimic what torch 2.13 writes for a CPU/gloo DDP job (notes/measured.md): a ``ProfilerStep#N``
annotation per step on the training thread, ``enumerate(DataLoader)...__next__`` for the data wait,
``cpu_op`` events for compute, and ``gloo:all_reduce`` on a separate runloop thread that starts when the
rank arrives and ends when the last rank has arrived plus the transfer time. All ranks share one clock.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from diageval.bundle.model import BundleEnv, BundleManifest, describe_files

BASE_NS = 1_790_000_000_000_000_000  # an epoch in ns; ts in the trace are relative to it
DATA_NAME = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@dataclass
class StepShape:
    """How one rank spends one step (microseconds)."""

    data_us: float = 300.0
    compute_us: float = 4000.0
    n_ops: int = 30  # top-level ops the compute is split into
    gap_us: float = 200.0  # python time with no op (unexplained)
    comm_us: float = 800.0  # time all ranks spend inside the collective together
    tail_us: float = 300.0  # optimizer after the collective
    collectives: int = 1
    payload_floats: int | None = None  # recorded as the all_reduce's Input Dims (record_shapes)


Shape = Callable[[int, int], StepShape]  # (rank, step) -> StepShape


def healthy(rank: int, step: int) -> StepShape:
    return StepShape()


def build_events(world_size: int, n_steps: int, shape: Shape, first_step: int = 0) -> dict[int, list[dict]]:
    """Per rank, the list of trace events of ``n_steps`` steps numbered from ``first_step``."""
    events: dict[int, list[dict]] = {r: [] for r in range(world_size)}
    t = 1000.0
    for k in range(first_step, first_step + n_steps):
        shapes = {r: shape(r, k) for r in range(world_size)}
        cursor = {r: t for r in range(world_size)}
        ends: dict[int, float] = {}
        for r, s in shapes.items():
            ev = events[r]
            c = cursor[r]
            ev.append({"ph": "X", "cat": "user_annotation", "name": DATA_NAME, "pid": 1, "tid": 1, "ts": c, "dur": s.data_us})
            c += s.data_us
            op = s.compute_us / max(1, s.n_ops)
            for i in range(s.n_ops):
                ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": c, "dur": op * 0.95,
                           "args": {"External id": i}})
                c += op
            c += s.gap_us
            cursor[r] = c
        n_coll = shapes[0].collectives
        for j in range(n_coll):
            arrive = {r: cursor[r] for r in range(world_size)}
            done = max(arrive.values()) + shapes[0].comm_us / n_coll
            floats = shapes[0].payload_floats
            args = {"Input Dims": [[floats // n_coll]], "Input type": ["float"]} if floats else {}
            for r in range(world_size):
                events[r].append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2,
                                  "ts": arrive[r], "dur": done - arrive[r], "args": args})
                cursor[r] = done + 10.0
        for r, s in shapes.items():
            events[r].append({"ph": "X", "cat": "cpu_op", "name": "Optimizer.step#SGD.step", "pid": 1, "tid": 1,
                              "ts": cursor[r], "dur": s.tail_us})
            ends[r] = cursor[r] + s.tail_us + 20.0
        for r in range(world_size):
            events[r].append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                              "ts": t, "dur": ends[r] - t})
        t = max(ends.values()) + 5.0
    return events


def write_trace(path: Path, rank: int, world_size: int, events: list[dict], truncate_at: float | None = None) -> None:
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [],
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world_size},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "pt_gloo_runloop"}}] + events,
        "traceName": "trace.json",
    }
    raw = json.dumps(doc, indent=1).encode()
    if truncate_at is not None:
        raw = raw[: int(len(raw) * truncate_at)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw, compresslevel=1) if path.suffix == ".gz" else raw)


def build_bundle(
    root: Path,
    shape: Shape = healthy,
    world_size: int = 2,
    n_steps: int = 20,
    missing_ranks: tuple[int, ...] = (),
    truncate: dict[int, float] | None = None,
    step_log: bool = True,
) -> Path:
    """A complete evidence bundle folder under ``root`` whose traces follow ``shape``."""
    root.mkdir(parents=True, exist_ok=True)
    per_rank = build_events(world_size, n_steps, shape)
    rows = []
    for r, events in per_rank.items():
        if r not in missing_ranks:
            write_trace(root / f"rank{r}" / "trace.json.gz", r, world_size, events, (truncate or {}).get(r))
        for e in events:
            if e["name"].startswith("ProfilerStep#"):
                t0 = (BASE_NS / 1e3 + e["ts"] + 10.0) / 1e6
                t1 = (BASE_NS / 1e3 + e["ts"] + e["dur"] - 10.0) / 1e6
                rows.append({"rank": r, "step": int(e["name"].split("#")[1]), "t_start": t0, "t_end": t1})
    if step_log:
        (root / "steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    manifest = BundleManifest(
        bundle_id="b-test",
        created=datetime.now(timezone.utc),
        env=BundleEnv(device="cpu", world_size=world_size, backend="gloo"),
        files=describe_files(root),
    )
    (root / "bundle.json").write_text(manifest.model_dump_json(indent=1))
    return root
