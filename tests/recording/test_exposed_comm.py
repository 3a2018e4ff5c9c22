"""``exposed_communication`` (its params are checked in test_faults.py's table): it takes the right parameters
out of DDP, and a recorded bundle shows the mechanism: the gradient all-reduce issued after backward instead
of during it.

The recorded check reads the order of the main thread's ops in the trace (which all-reduce calls come
before the step's last backward op), never their durations.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from fault_cases import fault_case



def _fault(**params) -> list:
    return [{"name": "exposed_communication", "params": params}]


def test_the_output_side_leaves_ddp_and_the_first_parameter_stays():
    import torch
    from torch import nn

    from diageval.recording.faults.overlap import exposed_parameters

    model = nn.Sequential(nn.Linear(10, 100), nn.Linear(100, 100), nn.Linear(100, 10))
    named = list(model.named_parameters())
    assert [n for n, _ in exposed_parameters(named, 0.0005)] == ["2.bias"]
    half = [n for n, _ in exposed_parameters(named, 0.5)]
    assert half[:2] == ["2.bias", "2.weight"] and "0.weight" not in half
    everything = [n for n, _ in exposed_parameters(named, 1.0)]
    assert everything == [n for n, _ in reversed(named[1:])]  # all but the first: DDP needs one
    frozen = [(n, p.requires_grad_(False)) if n == "2.bias" else (n, p) for n, p in named]
    assert "2.bias" not in [n for n, _ in exposed_parameters(frozen, 1.0)]
    assert isinstance(named[0][1], torch.nn.Parameter)


def _allreduce_before_backward_ends(trace: Path) -> tuple[int, int]:
    """(elements all-reduced by calls the main thread issued before its step's last backward op, all
    elements all-reduced), over every recorded step of one rank."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    main = steps[0]["tid"]
    ops = sorted((e for e in events if e.get("tid") == main and e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: e["ts"])
    early = total = 0
    for step in steps:
        inside = [e for e in ops if step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
        backward = [i for i, e in enumerate(inside) if e["name"].endswith(("Backward0", "Backward1"))]
        if not backward:
            continue
        for i, e in enumerate(inside):
            if e["name"] == "c10d::allreduce_":
                elements = sum(_numel(d) for d in e["args"]["Input Dims"][0])
                total += elements
                if i < backward[-1]:
                    early += elements
    return early, total


def _numel(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


@pytest.mark.slow
def test_recorded_bundle_shows_the_all_reduce_moved_after_backward(tmp_path: Path):
    from diageval.recording.record import record_case

    workload = dict(steps=8, params={"trace_steps": 4, "hidden": 384})
    record_case(fault_case([], **workload), tmp_path / "twin", device="cpu")
    record_case(fault_case(_fault(exposed_fraction=1.0), **workload), tmp_path / "exposed", device="cpu")
    for rank in (0, 1):
        early, total = _allreduce_before_backward_ends(tmp_path / "twin" / f"rank{rank}" / "trace.json.gz")
        assert total > 0 and early > 0.1 * total  # DDP: a bucket goes out while backward still runs
        early, exposed_total = _allreduce_before_backward_ends(tmp_path / "exposed" / f"rank{rank}" / "trace.json.gz")
        assert early == 0 and exposed_total >= total  # the same bytes, all after backward
