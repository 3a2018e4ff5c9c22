"""rules on the shapes of real inference and one-step profiles (issue 38): a cause named from the repeated units one
step holds, inline input work with no DataLoader marker, a window of device work with no host events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
from tests.bundle.test_time_attribution import _cpu_steps


def _diagnose(tmp_path: Path, events: list[dict], device: bool = True, step_log: list[float] | None = None):
    """``step_log``: the job's logged step times (ms), written as its steps.jsonl."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "rank0.json.gz"
    props = [{"name": "NVIDIA H100"}] if device else []
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "deviceProperties": props, "traceEvents": events}, fh)
    root = import_traces([path], tmp_path / "b")
    if step_log is not None:
        t, rows = 1_000.0, []
        for k, ms in enumerate(step_log):
            rows.append({"rank": 0, "step": k, "t_start": t, "t_end": t + ms / 1e3})
            t += ms / 1e3
        (root / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return RulesDiagnoser().diagnose(EvidenceBundle.open(root))


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


def test_inline_input_work_on_a_cpu_job_is_the_input_pipeline(tmp_path):
    """Host only, no DataLoader: each of 5 steps runs 6 ms of Python before its first op (decoding inline), 65% of
    the step; named from the main thread's table with its standard error."""
    d = _diagnose(tmp_path, _cpu_steps(5, 6_000.0), device=False)
    (f,) = [f for f in d.causes if f.category == "input.dataloader_starvation"]
    assert f.confidence > 0.8 and d.abstain is None
    assert "main thread" in f.summary and "standard error" in f.evidence[0] and "5 gaps" in f.evidence[0]


def test_a_healthy_cpu_inference_loop_gets_no_claim(tmp_path):
    """The same loop with its input ready (0.1 ms before the first op): no cause, no abstention."""
    d = _diagnose(tmp_path, _cpu_steps(5, 100.0), device=False)
    assert not d.causes and d.abstain is None


def test_one_inline_gap_in_a_cpu_window_is_too_little_evidence(tmp_path):
    """A window started by hand (the profiler's span, no step markers, no step log) whose one stretch of Python before
    the model is 60% of it: one occurrence cannot be told from a stray pause."""
    ev = _cpu_steps(1, 5_000.0, markers=False)
    ev.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 1, "ts": 0, "dur": 8_300})
    d = _diagnose(tmp_path, ev, device=False)
    assert d.abstain is not None and "too little evidence" in d.abstain.reason and "input work" in d.abstain.reason


def test_the_step_log_tells_a_recurring_gap_from_a_one_off(tmp_path):
    """One profiled step with 6 ms of inline Python: where the job's log says every step takes as long, the gap
    recurs (named); where the profiled step is 6 ms longer than the log's typical step, it may be a one-off (not)."""
    step_ms = 9.3
    d = _diagnose(tmp_path / "a", _cpu_steps(1, 6_000.0), device=False, step_log=[step_ms] * 8)
    (f,) = [f for f in d.causes if f.category == "input.dataloader_starvation"]
    assert f.confidence > 0.8 and "step log" in f.evidence[0]
    d = _diagnose(tmp_path / "b", _cpu_steps(1, 6_000.0), device=False, step_log=[step_ms - 6.0] * 8)
    assert not [f for f in d.causes if f.confidence >= 0.5]


def test_one_long_pause_in_one_of_several_cpu_steps_is_neither_a_cause_nor_too_little_evidence(tmp_path):
    """Four steps, one holding 30 ms of Python before its first op: the units show a one-off, not a pattern."""
    ev = _cpu_steps(4, 100.0)
    shift = 30_000.0 - 100.0
    step2 = next(e for e in ev if e["name"] == "ProfilerStep#2")
    for e in ev:
        if e["ts"] > step2["ts"]:
            e["ts"] += shift
    step2["dur"] += shift
    d = _diagnose(tmp_path, ev, device=False)
    assert not [f for f in d.causes if f.confidence >= 0.5] and d.abstain is None


def test_dispatch_between_a_few_hundred_small_cpu_ops_is_launch_overhead(tmp_path):
    """300 ops of 10 us, 8 us apart, in each of 5 steps (too few ops for the op count): 44% of the main thread's
    time is between ops, over the CPU's cut of a third; the same ops 2 us apart (16%) are not."""
    d = _diagnose(tmp_path / "a", _cpu_steps(5, 100.0, ops=300, op_us=10.0, gap_us=8.0), device=False)
    (f,) = [f for f in d.causes if f.category == "launch.kernel_launch_overhead"]
    assert f.confidence > 0.7 and "between the model's ops" in f.summary and "gaps" in f.evidence[0]
    d = _diagnose(tmp_path / "b", _cpu_steps(5, 100.0, ops=300, op_us=10.0, gap_us=2.0), device=False)
    assert not [f for f in d.causes if f.confidence >= 0.5] and d.abstain is None


def _hand_window(inline_us: float, ops: int = 20) -> list[dict]:
    """A window started by hand around part of one step (the profiler's span, no step markers): ``inline_us`` of
    Python before the model's ``ops`` ops."""
    ev = _cpu_steps(1, inline_us, markers=False, ops=ops)
    ev.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 1, "ts": 0,
               "dur": inline_us + ops * 160.0 + 100.0})
    return ev


def test_the_step_log_tells_a_window_s_recurring_inline_gap_from_a_one_off(tmp_path):
    """A hand-started window of 8.3 ms, 60% of it one stretch of Python before the model, in a job whose log holds 8
    steps of 10 ms: a one-off would make the steps the window touches 5 ms longer than the typical one, and none is,
    so the gap recurs (named). Where one logged step is 5 ms longer than the rest, it may be that one-off (not)."""
    d = _diagnose(tmp_path / "a", _hand_window(5_000.0), device=False, step_log=[10.0, 10.1, 9.9, 10.0] * 2)
    (f,) = [f for f in d.causes if f.category == "input.dataloader_starvation"]
    assert f.confidence > 0.8 and d.abstain is None and "step log" in f.evidence[0]
    d = _diagnose(tmp_path / "b", _hand_window(5_000.0), device=False, step_log=[10.0] * 7 + [15.0])
    assert not [f for f in d.causes if f.confidence >= 0.5]


def test_a_window_of_a_small_part_of_the_logged_step_that_names_nothing_abstains(tmp_path):
    """A hand-started window of 3.3 ms of the model's ops in a job whose logged steps take 20 ms: nothing in it is
    wrong, but the unseen 84% of the step could hold any cause (too little evidence, not healthy)."""
    d = _diagnose(tmp_path, _hand_window(100.0), device=False, step_log=[20.0] * 8)
    assert not d.causes and d.abstain is not None and "unseen" in d.abstain.reason
