"""Fault injectors: parameter checks, and that each injector does what it says (without recording)."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_cases import fault_case

from diageval.cases.load import check_case
from diageval.cases.taxonomy import load_taxonomy
from diageval.recording.faults import FAULTS


def test_registries_do_not_import_torch():
    code = "import sys, diageval.recording.faults, diageval.recording.workloads, diageval.cases.load; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


ONE_RANK = {"world_size": 1}
CONV = {"workload": "convnet_allreduce"}


# Every fault's params refused, naming the field: (fault, its params, the job where it differs from fault_case's
# default, the field, what the message says). Checked when a case is validated, without torch.
@pytest.mark.parametrize("name, params, job, field, message", [
    ("slow_rank", {"target_rank": 2, "slowdown_factor": 2}, {}, "target_rank", "out of range"),
    ("slow_rank", {"target_rank": 0, "slowdown_factor": 2, "start_step": 10}, {}, "start_step", "not before"),
    ("slow_rank", {"target_rank": 0, "slowdown_factor": 2, "rank": 1}, {}, "rank", "unknown field"),
    ("slow_rank", {"target_rank": 0, "slowdown_factor": 0.5}, {}, "slowdown_factor", "greater than 1"),
    ("slow_rank", {"target_rank": 0, "slowdown_factor": 2}, ONE_RANK, "", "world_size >= 2"),
    ("drop_rank_trace", {"missing_rank": 5}, {}, "missing_rank", "out of range"),
    ("blocking_checkpoint", {"save_every_steps": 11, "write_mb_per_s": 1}, {}, "save_every_steps", "no save"),
    ("cpu_contention", {"contended_rank": 2, "duty_cycle": 1.0}, {}, "contended_rank", "out of range for world_size 2"),
    ("cpu_contention", {"contended_rank": 0, "duty_cycle": 1.0, "contention_start_step": 10}, {}, "contention_start_step",
     "not before the workload's 10 steps"),
    ("cpu_contention", {"contended_rank": 0, "duty_cycle": 0}, {}, "duty_cycle", "greater than 0"),
    ("cpu_contention", {"contended_rank": 0, "duty_cycle": 1.5}, {}, "duty_cycle", "less than or equal to 1"),
    ("cpu_contention", {"contended_rank": 0, "duty_cycle": 1.0, "competitors": 0}, {}, "competitors",
     "greater than or equal to 1"),
    ("cpu_contention", {"contended_rank": 0, "duty_cycle": 1.0, "niceness": 20}, {}, "niceness", "less than or equal to 19"),
    ("cpu_contention", {"contended_rank": 0}, {}, "duty_cycle", "required field is missing"),
    ("cpu_contention", {"contended_rank": 0, "duty_cycle": 1.0, "rank": 1}, {}, "rank", "unknown field"),
    ("load_imbalance", {"heavier_rank": 2, "work_factor": 2}, {}, "heavier_rank", "out of range for world_size 2"),
    ("load_imbalance", {"heavier_rank": 0, "work_factor": 2, "from_step": 10}, {}, "from_step",
     "not before the workload's 10 steps"),
    ("load_imbalance", {"heavier_rank": 0, "work_factor": 1.0}, {}, "work_factor", "greater than 1"),
    ("load_imbalance", {"heavier_rank": 0, "work_factor": 9}, {}, "work_factor", "less than or equal to 8"),
    ("load_imbalance", {"heavier_rank": 0, "work_factor": 2, "rank": 1}, {}, "rank", "unknown field"),
    ("load_imbalance", {"work_factor": 2}, {}, "heavier_rank", "required"),
    ("load_imbalance", {"heavier_rank": 0, "work_factor": 2}, ONE_RANK, "", "world_size >= 2"),
    ("exposed_communication", {"exposed_fraction": 0}, {}, "exposed_fraction", "greater than 0"),
    ("exposed_communication", {"exposed_fraction": 1.5}, {}, "exposed_fraction", "less than or equal to 1"),
    ("exposed_communication", {}, {}, "exposed_fraction", "required field is missing"),
    ("exposed_communication", {"exposed_fraction": 0.5, "bucket": 1}, {}, "bucket", "unknown field"),
    ("exposed_communication", {"exposed_fraction": 0.5}, CONV, "", "does not overlap its gradient all-reduce with backward"),
    ("exposed_communication", {"exposed_fraction": 0.5}, ONE_RANK, "", "needs world_size >= 2"),
])
def test_bad_fault_params_are_rejected_with_field(name, params, job, field, message):
    problems = check_case(fault_case([{"name": name, "params": params}], **job), "x.yaml", load_taxonomy())
    assert any(p.field == f"faults[0].params.{field}" and message in p.message for p in problems), problems


def test_good_params_pass():
    good = {"contended_rank": 1, "competitors": 2, "duty_cycle": 0.5, "niceness": 19, "contention_start_step": 3}
    assert check_case(fault_case([{"name": "cpu_contention", "params": good}]), "x.yaml", load_taxonomy()) == []


def test_every_registered_impl_loads_with_the_right_stage():
    for name, info in FAULTS.items():
        impl = info.load()
        assert impl.stage in ("live", "bundle"), name


def _ctx(rank=0):
    from diageval.recording.context import RankContext

    return RankContext(rank=rank, world_size=2, steps=10, device="cpu", backend="gloo", scratch_dir=Path("."))


def test_sliced_layers_compute_the_same_math():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    x = torch.randn(10, 3, 8, 8)
    expected = model(x)
    info = FAULTS["kernel_launch_overhead"]
    fault = info.load()(info.params_model(pieces_per_layer=4), _ctx())
    with torch.profiler.profile() as prof:
        got = fault.model(model)(x)
    assert torch.allclose(got, expected, atol=1e-6)
    mm = sum(1 for e in prof.events() if e.name in ("aten::addmm", "aten::convolution"))
    assert mm >= 8  # 4 pieces per layer, 2 layers


def test_slow_rank_stretches_only_its_target_from_its_step(monkeypatch):
    """The busy waits the fault asks for are recorded, not timed: nothing here compares wall-clock times."""
    import torch
    from torch import nn

    from diageval.recording.faults import compute

    waits: list[float] = []
    monkeypatch.setattr(compute, "_busy_wait", waits.append)
    info = FAULTS["slow_rank"]
    params = info.params_model(target_rank=1, slowdown_factor=4.0, start_step=1)

    def requested_waits(rank, step):
        waits.clear()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        fault = info.load()(params, _ctx(rank))
        model = fault.model(model)
        fault.on_step_start(step)
        model(torch.randn(32, 64)).sum().backward()
        return list(waits)

    assert requested_waits(0, 5) == []  # not the target rank
    assert requested_waits(1, 0) == []  # the target, before start_step
    active = requested_waits(1, 5)
    # 2 forward stretches (one per linear layer), at least one backward stretch per later gradient hook
    assert len(active) >= 3 and all(w >= 0 for w in active)


def test_throttled_checkpoint_file_is_slow_and_complete(tmp_path: Path):
    info = FAULTS["blocking_checkpoint"]
    fault = info.load()(info.params_model(save_every_steps=2, write_mb_per_s=1.0, start_step=2), _ctx(0))
    assert [s for s in range(6) if fault.checkpoint_due(s)] == [3, 5]
    with open(tmp_path / "c", "wb") as fh:
        assert fault.checkpoint_file(fh, 1) is fh  # before start_step: untouched
        wrapped = fault.checkpoint_file(fh, 3)
        t = time.perf_counter()
        wrapped.write(b"x" * 100_000)
        assert time.perf_counter() - t >= 0.09
    assert (tmp_path / "c").stat().st_size == 100_000
    other = info.load()(info.params_model(save_every_steps=2, write_mb_per_s=1.0), _ctx(1))
    assert not any(other.checkpoint_due(s) for s in range(6))  # only rank 0 saves


def test_starved_dataset_is_slower_from_its_step():
    info = FAULTS["dataloader_starvation"]
    fault = info.load()(info.params_model(extra_prep_ms=50, start_step=2), _ctx())
    ds = fault.dataset(list(range(5)))
    assert len(ds) == 5
    sleeps: list[float] = []
    real_sleep = time.sleep
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
        assert ds[1] == 1
        assert sleeps == []  # before start_step: no extra preparation
        assert ds[3] == 3
    assert sleeps == [pytest.approx(0.05)]


def test_a_decoding_starved_dataset_does_cpu_work_from_its_step_and_never_waits():
    """extra_decode_kib: the batch's extra cost is inflating the same zlib data every time (CPU work that scales
    with the machine), not a sleep; before start_step nothing is inflated."""
    import zlib

    from diageval.recording.faults.data import encoded_payload

    info = FAULTS["dataloader_starvation"]
    fault = info.load()(info.params_model(extra_decode_kib=256, start_step=2), _ctx())
    ds = fault.dataset(list(range(5)))
    inflated: list[int] = []
    real = zlib.decompress
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "sleep", lambda s: pytest.fail(f"slept {s}"))
        mp.setattr(zlib, "decompress", lambda data: inflated.append(len(real(data))) or b"")
        assert ds[1] == 1 and inflated == []
        assert ds[3] == 3
    assert inflated == [256 * 1024]
    assert encoded_payload(256) == encoded_payload(256)  # the same work every run
    assert 0.4 < len(encoded_payload(256)) / (256 * 1024) < 0.7  # compressible, as decoded data is


def test_a_starvation_without_any_extra_cost_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="extra_prep_ms or extra_decode_kib"):
        FAULTS["dataloader_starvation"].params_model(start_step=2)


def test_pacing_cap_applies_to_connected_tcp_sockets_only():
    from diageval.recording.faults.network import SO_MAX_PACING_RATE, cap_tcp_send_rate

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        assert cap_tcp_send_rate(123_456) >= 2  # client and peer; the listening socket is skipped
        assert client.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE) == 123_456
        assert server.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE) != 123_456
        client.sendall(b"still usable")  # borrowed, not closed
        assert peer.recv(100) == b"still usable"
    finally:
        client.close(); peer.close(); server.close()


def test_evidence_faults_edit_the_bundle_folder(tmp_path: Path):
    for r in (0, 1):
        (tmp_path / f"rank{r}").mkdir()
        (tmp_path / f"rank{r}" / "trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": [1] * 1000}).encode()))
    drop = FAULTS["drop_rank_trace"]
    drop.load()(drop.params_model(missing_rank=1)).apply(tmp_path)
    assert not (tmp_path / "rank1").exists() and (tmp_path / "rank0").is_dir()
    cut = FAULTS["truncate_trace"]
    cut.load()(cut.params_model(cut_rank=0, keep_fraction=0.5)).apply(tmp_path)
    raw = gzip.decompress((tmp_path / "rank0" / "trace.json.gz").read_bytes())
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
