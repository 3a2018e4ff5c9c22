"""rules on GPU traces (synthetic, known answers): queue-based launch judgement, host/device sync,
abstention without device events, no CPU op-count rule on a GPU trace, every host thread's work counted."""

from __future__ import annotations

from gpu_traces import gpu_trace

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
from diageval.diagnosers.rules.inputs import gather_evidence
from diageval.diagnosers.rules.launch import measure_launch


def _bundle(tmp_path, **kw) -> EvidenceBundle:
    return EvidenceBundle.open(import_traces([gpu_trace(tmp_path / "rank0.json.gz", **kw)], tmp_path / "b"))


def _causes(d):
    return {f.category: f for f in d.causes}


def test_empty_queue_and_fragmented_idle_is_launch_bound(tmp_path):
    d = RulesDiagnoser().diagnose(_bundle(tmp_path, delay_us=10.0, wait_us=0.0))
    assert set(_causes(d)) == {"launch.kernel_launch_overhead"}
    f = _causes(d)["launch.kernel_launch_overhead"]
    assert f.ranks == [0] and 0.5 < f.confidence <= 0.95 and "10 us" in f.summary


def test_a_deep_queue_is_not_launch_bound_however_many_gaps(tmp_path):
    d = RulesDiagnoser().diagnose(_bundle(tmp_path, delay_us=5_000.0))
    assert "launch.kernel_launch_overhead" not in _causes(d)


def test_host_blocked_in_pageable_copies_while_the_device_idles(tmp_path):
    d = RulesDiagnoser().diagnose(_bundle(tmp_path, delay_us=200.0, pageable_block_us=3_000.0))
    f = _causes(d)["host.device_sync"]
    assert f.ranks == [0] and "pageable" in f.summary
    assert f.impact is not None and 0.25 < f.impact < 0.35


def test_confidence_grows_with_the_margin(tmp_path):
    small = RulesDiagnoser().diagnose(_bundle(tmp_path / "a", delay_us=200.0, pageable_block_us=1_300.0))
    large = RulesDiagnoser().diagnose(_bundle(tmp_path / "b", delay_us=200.0, pageable_block_us=4_000.0))
    assert _causes(small)["host.device_sync"].confidence < _causes(large)["host.device_sync"].confidence


def test_gpu_trace_without_device_events_abstains(tmp_path):
    d = RulesDiagnoser().diagnose(_bundle(tmp_path, device_events=False, kernels=30))
    assert d.abstain is not None and "no device events" in d.abstain.reason
    assert d.causes == []


def test_the_cpu_op_count_rule_is_never_applied_to_a_gpu_trace(tmp_path):
    ev = gather_evidence(_bundle(tmp_path, device_events=False))
    assert measure_launch(ev) == []


def test_the_autograd_thread_is_work_not_waiting(tmp_path):
    ev = gather_evidence(_bundle(tmp_path, delay_us=5_000.0, kernels=5))
    st = ev.traces[0].steps[1]
    # the training thread: 1 ms DataLoader + 5 tiny ops; the autograd thread: a 3 ms backward op
    assert st.host_busy_us >= 4_000.0
    assert st.unexplained_us <= st.dur_us - 4_000.0


def test_a_one_step_mtia_trace_gets_no_launch_claim(tmp_path):
    """MTIA runtime/device categories mark an accelerator: no CPU op-count rule, and one step is no pattern."""
    import gzip
    import json

    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 50_000}]
    for i in range(3_000):  # far over the CPU rule's MIN_HOST_OPS_PER_STEP
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10 + i * 15, "dur": 5})
        ev.append({"ph": "X", "cat": "mtia_runtime", "name": "launch", "pid": 1, "tid": 1, "ts": 12 + i * 15, "dur": 2})
        ev.append({"ph": "X", "cat": "mtia_ccp_events", "name": "add_kernel", "pid": 0, "tid": 9, "ts": 14 + i * 15, "dur": 3})
    path = tmp_path / "rank0.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": ev}, fh)
    ev_ = gather_evidence(EvidenceBundle.open(import_traces([path], tmp_path / "b")))
    assert ev_.traces[0].has_accelerator and measure_launch(ev_) == []
    d = RulesDiagnoser().diagnose(EvidenceBundle.open(tmp_path / "b"))
    assert "launch.kernel_launch_overhead" not in _causes(d)
