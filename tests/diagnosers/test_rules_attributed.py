"""rules on the shapes of real inference and one-step profiles (issue 38): a cause named from the repeated units one
step holds, inline input work with no DataLoader marker, a window of device work with no host events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser


def _diagnose(tmp_path: Path, events: list[dict]):
    path = tmp_path / "rank0.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "deviceProperties": [{"name": "NVIDIA H100"}], "traceEvents": events}, fh)
    return RulesDiagnoser().diagnose(EvidenceBundle.open(import_traces([path], tmp_path / "b")))


def _kernels(ev: list[dict], t: float, n: int, corr: int, *, kernel_us: float = 400.0, gap_us: float = 5.0,
             delay_us: float = 500.0) -> tuple[float, int]:
    """``n`` kernels, ``gap_us`` apart on the device: the first starts 10 us after its launch (the device was idle),
    the others were launched ``delay_us`` ahead (a deep queue); returns (end, correlation)."""
    for k in range(n):
        corr += 1
        ahead = 10.0 if k == 0 else delay_us
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t - ahead - 1, "dur": 8})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": t - ahead, "dur": 5, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": t, "dur": kernel_us,
                   "args": {"correlation": corr}})
        t += kernel_us + gap_us
    return t, corr


def test_five_data_waits_in_one_profiled_step_are_a_cause(tmp_path):
    """One ProfilerStep holding five inner iterations, each waiting 6 ms on its DataLoader with the device idle:
    five occurrences of one pattern, named from one step."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 60_000}]
    t, corr = 0.0, 0
    for _ in range(5):
        ev.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                   "pid": 1, "tid": 1, "ts": t, "dur": 6_000})
        t, corr = _kernels(ev, t + 6_000 + 600, 15, corr)
    d = _diagnose(tmp_path, ev)
    assert d.abstain is None
    (f,) = [f for f in d.causes if f.category == "input.dataloader_starvation"]
    assert f.confidence > 0.8 and any("5 waits" in e and "standard error" in e for e in f.evidence)


def test_one_data_wait_in_one_step_is_too_little_evidence(tmp_path):
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 20_000}]
    ev.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
               "pid": 1, "tid": 1, "ts": 0, "dur": 8_000})
    _kernels(ev, 8_600, 28, 0)
    d = _diagnose(tmp_path, ev)
    assert d.abstain is not None and "too little evidence" in d.abstain.reason and "1 waits" in d.abstain.reason
    assert not [f for f in d.causes if f.confidence >= 0.5]


def test_inline_input_work_before_each_step_is_the_input_pipeline(tmp_path):
    """No DataLoader: each of 4 steps decodes and resizes on the main thread (CPU ops that queue nothing) before its
    first kernel, for 40% of the step."""
    ev, corr = [], 0
    for s in range(4):
        t0 = s * 20_000.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t0,
                   "dur": 20_000})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "image::decode_jpeg", "pid": 1, "tid": 1, "ts": t0, "dur": 5_000})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::upsample_bilinear2d", "pid": 1, "tid": 1, "ts": t0 + 5_000,
                   "dur": 3_000})
        _, corr = _kernels(ev, t0 + 8_020, 28, corr)
    d = _diagnose(tmp_path, ev)
    (f,) = [f for f in d.causes if f.category == "input.dataloader_starvation"]
    assert f.confidence > 0.8 and "before each step's first device work" in f.summary


def test_a_window_of_device_work_without_host_events_abstains(tmp_path):
    """Kernels only, the device busy throughout: the window cannot show the host, nor whether it is a whole step."""
    ev = [{"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": k * 10.0, "dur": 10.0}
          for k in range(562)]
    d = _diagnose(tmp_path, ev)
    assert d.abstain is not None and "no host events" in d.abstain.reason
