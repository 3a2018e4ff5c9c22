"""Evidence edits (bundle faults): each leaves a valid bundle, does exactly what it says, and composes with
the cache (derived from the cached recording of the case without it); a recorded case may take them."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path

import pytest
from synthetic_traces import BASE_NS, build_bundle

from diageval.bundle.model import EvidenceBundle
from diageval.cases.model import Case, WorkloadSpec
from diageval.recording.faults import FAULTS
from diageval.recording.faults import params as p
from diageval.recording.faults.bundle_edits import KINETO_BASE_INTERVAL_NS, EvidenceEditError, shift_trace_clock

W2 = WorkloadSpec(name="mlp_ddp", world_size=2, steps=30)


def _edit(name: str, bundle: Path, **params) -> Path:
    info = FAULTS[name]
    info.load()(info.params_model.model_validate(params)).apply(bundle)
    return bundle


def _trace(bundle: Path, rank: int) -> dict:
    return json.loads(gzip.decompress((bundle / f"rank{rank}" / "trace.json.gz").read_bytes()))


@pytest.fixture()
def bundle(tmp_path) -> Path:
    """A synthetic 2-rank bundle (steps 0..19) with per-rank metrics, Kineto log stamps and Flight Recorder dumps."""
    root = build_bundle(tmp_path / "b", n_steps=20)
    rows = [{"time": 1.79e9 + i, "scope": "host", "cpu_percent": 50.0} for i in range(3)]
    rows += [{"time": 1.79e9 + i, "scope": "rank", "rank": r, "cpu_percent": 90.0} for r in (0, 1) for i in range(3)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in (0, 1):
        (root / "logs").mkdir(exist_ok=True)
        (root / "logs" / f"rank{r}.log").write_text(
            "step 0 loss 2.3\nUSDT:2026-11-30 17:16:04 30244:30244 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        (root / "flight_recorder").mkdir(exist_ok=True)
        dump = {"version": "2.10", "entries": [{"record_id": 0, "time_created_ns": 1_790_000_000_000_000_000,
                                                "time_discovered_started_ns": None, "profiling_name": "gloo:all_reduce"}]}
        (root / "flight_recorder" / f"rank_{r}").write_bytes(pickle.dumps(dump, protocol=2))
    return root


def test_params_are_strict_and_checked_against_the_workload():
    with pytest.raises(ValueError, match="below 1 ms"):
        p.ClockOffsetParams(offset_rank=1, offset_ms=0.5)
    with pytest.raises(ValueError):
        p.ClockOffsetParams(offset_rank=1, offset_ms=20_000)
    with pytest.raises(ValueError):
        p.SampleRankTracesParams(traced_ranks=[])
    with pytest.raises(ValueError, match="distinct"):
        p.SampleRankTracesParams(traced_ranks=[1, 1])
    with pytest.raises(ValueError):
        p.DropStepMarkersParams(drop_step_log=True, other=1)
    assert p.check_clock_offset(p.ClockOffsetParams(offset_rank=2, offset_ms=5), W2)[0][0] == "offset_rank"
    assert p.check_clock_offset(p.ClockOffsetParams(offset_rank=0, offset_ms=5), W2.model_copy(update={"world_size": 1}))
    assert "nothing is sampled out" in p.check_sample_rank_traces(p.SampleRankTracesParams(traced_ranks=[0, 1]), W2)[0][1]
    assert p.check_sample_rank_traces(p.SampleRankTracesParams(traced_ranks=[1]), W2) == []
    # mlp_ddp profiles the last 12 steps by default: 18..29 of 30
    assert p.check_trace_window(p.TraceWindowParams(window_first_step=20, window_steps=3), W2) == []
    assert "not all profiled" in p.check_trace_window(p.TraceWindowParams(window_first_step=10, window_steps=3), W2)[0][1]
    assert "not shorter" in p.check_trace_window(p.TraceWindowParams(window_first_step=18, window_steps=12), W2)[0][1]
    short = W2.model_copy(update={"params": {"trace_steps": 4}})
    assert "26..29" in p.check_trace_window(p.TraceWindowParams(window_first_step=20, window_steps=2), short)[0][1]


def test_evidence_edits_are_registered_as_edits_that_inject_no_cause():
    for name in ("clock_offset", "sample_rank_traces", "trace_window", "drop_step_markers", "drop_device_events"):
        info = FAULTS[name]
        assert info.load().stage == "bundle" and info.injects == ()


def test_clock_offset_moves_one_ranks_clock_everywhere_and_nothing_else(bundle):
    before = {r: _trace(bundle, r) for r in (0, 1)}
    steps_before = EvidenceBundle.open(bundle).steps()
    _edit("clock_offset", bundle, offset_rank=1, offset_ms=250.0)
    after = {r: _trace(bundle, r) for r in (0, 1)}
    assert after[0] == before[0]
    # the synthetic base is not a Kineto three-month multiple: an older Kineto's load time, which moves
    assert after[1]["baseTimeNanoseconds"] == BASE_NS + 250_000_000
    abs_before = [e["ts"] + BASE_NS / 1e3 for e in before[1]["traceEvents"] if "ts" in e]
    abs_after = [e["ts"] + after[1]["baseTimeNanoseconds"] / 1e3 for e in after[1]["traceEvents"] if "ts" in e]
    assert all(abs(b + 250_000 - a) < 1e-3 * 1e3 for b, a in zip(abs_before, abs_after))
    steps_after = EvidenceBundle.open(bundle).steps()
    for s0, s1 in zip(steps_before, steps_after):
        assert s1.t_start - s0.t_start == pytest.approx(0.25 if s0.rank == 1 else 0.0, abs=1e-6)
        assert s1.duration == pytest.approx(s0.duration, abs=1e-6)
    metrics = [json.loads(x) for x in (bundle / "metrics.jsonl").read_text().splitlines()]
    assert [m["time"] - 1.79e9 for m in metrics if m.get("rank") == 1] == pytest.approx([0.25, 1.25, 2.25])
    assert [m["time"] - 1.79e9 for m in metrics if m.get("rank") != 1] == pytest.approx([0, 1, 2, 0, 1, 2])
    assert "17:16:04" in (bundle / "logs" / "rank1.log").read_text()  # 0.25 s: the printed second stays
    dump = pickle.loads((bundle / "flight_recorder" / "rank_1").read_bytes())
    assert dump["entries"][0]["time_created_ns"] == 1_790_000_000_250_000_000
    assert pickle.loads((bundle / "flight_recorder" / "rank_0").read_bytes())["entries"][0]["time_created_ns"] == 1_790_000_000_000_000_000


def test_clock_offset_of_seconds_moves_log_stamps(bundle):
    _edit("clock_offset", bundle, offset_rank=0, offset_ms=-2000.0)
    assert "17:16:02" in (bundle / "logs" / "rank0.log").read_text()
    assert "17:16:04" in (bundle / "logs" / "rank1.log").read_text()


def test_kineto_base_stays_and_ts_moves_unless_a_boundary_is_crossed():
    base = 227 * KINETO_BASE_INTERVAL_NS  # what torch 2.13's Kineto wrote on this machine (1790857026 s)
    doc = {"baseTimeNanoseconds": base, "traceEvents": [{"ph": "X", "ts": 5.2e12, "dur": 1.0}, {"ph": "M", "name": "x"}]}
    shift_trace_clock(doc, 1500.0)
    assert doc["baseTimeNanoseconds"] == base and doc["traceEvents"][0]["ts"] == pytest.approx(5.2e12 + 1500.0)
    near = {"baseTimeNanoseconds": base, "traceEvents": [{"ph": "X", "ts": KINETO_BASE_INTERVAL_NS / 1e3 - 10.0}]}
    shift_trace_clock(near, 20.0)  # the skewed host is already in the next interval
    assert near["baseTimeNanoseconds"] == base + KINETO_BASE_INTERVAL_NS
    assert near["traceEvents"][0]["ts"] == pytest.approx(10.0)


def test_sample_rank_traces_keeps_the_sampled_ranks_traces_and_everything_else(bundle):
    _edit("sample_rank_traces", bundle, traced_ranks=[1])
    b = EvidenceBundle.open(bundle)
    assert sorted(b.trace_paths()) == [1]
    assert b.world_size == 2 and {s.rank for s in b.steps()} == {0, 1}
    assert (bundle / "logs" / "rank0.log").is_file() and (bundle / "flight_recorder" / "rank_0").is_file()


def test_trace_window_keeps_only_the_window_and_stays_valid(bundle):
    _edit("trace_window", bundle, window_first_step=15, window_steps=3)
    for r in (0, 1):
        events = _trace(bundle, r)["traceEvents"]
        steps = sorted(int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
        assert steps == [15, 16, 17]
        marks = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        lo, hi = min(e["ts"] for e in marks), max(e["ts"] + e["dur"] for e in marks)
        assert all(lo <= e["ts"] < hi for e in events if e.get("ph") == "X")
        assert any(e.get("name") == "gloo:all_reduce" for e in events)  # other threads' events in the window stay
        assert any(e.get("ph") == "M" for e in events)
    assert len({s.step for s in EvidenceBundle.open(bundle).steps()}) == 20  # the step log keeps every step


def test_trace_window_of_part_of_a_step_keeps_that_share_and_no_marker(bundle):
    before = _trace(bundle, 0)["traceEvents"]
    (mark,) = [e for e in before if e.get("name") == "ProfilerStep#12" and e.get("ph") == "X"]
    lo = mark["ts"] + 0.25 * mark["dur"]
    hi = lo + 0.5 * mark["dur"]
    expected = sum(1 for e in before if e.get("ph") == "X" and e.get("cat") != "Trace" and lo <= e["ts"] < hi
                   and not e["name"].startswith("ProfilerStep#"))
    _edit("trace_window", bundle, window_first_step=12, window_steps=1, window_step_share=0.5, window_start_share=0.25)
    events = _trace(bundle, 0)["traceEvents"]
    assert not [e for e in events if e.get("name", "").startswith("ProfilerStep#")]  # a hand-started window has none
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") != "Trace"]
    assert timed and all(lo <= e["ts"] < hi for e in timed)
    assert len(timed) == expected
    assert len({s.step for s in EvidenceBundle.open(bundle).steps()}) == 20  # the step log keeps every step


def test_trace_window_part_of_a_step_params():
    with pytest.raises(ValueError, match="window_steps: 2, expected 1"):
        p.TraceWindowParams(window_first_step=5, window_steps=2, window_step_share=0.5)
    with pytest.raises(ValueError, match="ends past the step"):
        p.TraceWindowParams(window_first_step=5, window_steps=1, window_step_share=0.5, window_start_share=0.6)
    with pytest.raises(ValueError, match="only with window_step_share"):
        p.TraceWindowParams(window_first_step=5, window_steps=1, window_start_share=0.5)
    one = WorkloadSpec(name="inference", world_size=1, steps=6, params={"trace_steps": 1})
    # part of the only profiled step is shorter than the profile, though it keeps all (one) of its steps
    assert p.check_trace_window(p.TraceWindowParams(window_first_step=5, window_steps=1, window_step_share=0.3), one) == []
    assert "not shorter" in p.check_trace_window(p.TraceWindowParams(window_first_step=5, window_steps=1), one)[0][1]


def test_trace_window_outside_the_trace_is_a_clear_error(bundle):
    with pytest.raises(EvidenceEditError, match=r"no ProfilerStep#40..#41 to keep \(the trace has steps 0..19\)"):
        _edit("trace_window", bundle, window_first_step=40, window_steps=2)


def test_drop_step_markers_and_the_step_log(bundle):
    _edit("drop_step_markers", bundle)
    for r in (0, 1):
        events = _trace(bundle, r)["traceEvents"]
        assert not any(e.get("name", "").startswith("ProfilerStep#") for e in events)
        assert any(e.get("name") == "aten::mm" for e in events)
    assert (bundle / "steps.jsonl").is_file()
    _edit("drop_step_markers", bundle, drop_step_log=True)
    assert not (bundle / "steps.jsonl").exists()


def test_drop_device_events_keeps_the_host_side_of_a_gpu_trace(tmp_path):
    from gpu_traces import gpu_trace

    root = tmp_path / "g"
    path = gpu_trace(root / "rank0" / "trace.json.gz", pageable_block_us=500.0)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["traceEvents"] += [{"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 1.0, "name": "ac2g"},
                           {"ph": "f", "cat": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 2.0, "name": "ac2g", "bp": "e"},
                           {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 1.0, "dur": 5.0}]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    _edit("drop_device_events", root)
    after = json.loads(gzip.decompress(path.read_bytes()))
    cats = {e.get("cat") for e in after["traceEvents"]}
    assert cats.isdisjoint({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g"})
    assert {"cuda_runtime", "cpu_op", "user_annotation"} <= cats
    assert after["deviceProperties"] == doc["deviceProperties"]
    runtime = lambda d: [e for e in d["traceEvents"] if e.get("cat") == "cuda_runtime"]  # noqa: E731
    assert runtime(after) == runtime(doc)


def test_an_edited_case_is_derived_from_the_cached_recording_without_re_recording(tmp_path, monkeypatch):
    """ensure_bundle records the case without its edits once, then derives the edited one from it."""
    from diageval.recording import cache as cache_mod
    from diageval.recording import record as record_mod

    calls = []

    def fake_record(case, dest, *, device="auto", timeout_s=0):
        calls.append([f.name for f in case.faults])
        build_bundle(Path(dest), n_steps=20)

    monkeypatch.setattr(record_mod, "record_case", fake_record)
    monkeypatch.setattr(cache_mod, "cache_key", lambda case, device, repeat=0: case.spec_hash()[:32] + str(repeat))
    base = Case.model_validate({
        "id": "x", "title": "t", "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 30},
        "faults": [{"name": "one_off_pause", "params": {"pause_step": 3, "pause_ms": 10}}],
        "labels": {"expect": "healthy"}})
    edited = base.model_copy(update={"faults": base.faults + [
        Case.model_validate({"id": "y", "title": "t", "workload": {"name": "mlp_ddp", "steps": 3},
                             "faults": [{"name": "sample_rank_traces", "params": {"traced_ranks": [0]}}],
                             "labels": {"expect": "healthy"}}).faults[0]]})
    cache = tmp_path / "cache"
    _, base_dir, fresh = cache_mod.ensure_bundle(base, "cpu", cache_dir=cache)
    _, edited_dir, _ = cache_mod.ensure_bundle(edited, "cpu", cache_dir=cache)
    assert fresh and calls == [["one_off_pause"]]  # the edited case recorded nothing
    b = EvidenceBundle.open(edited_dir)
    assert sorted(b.trace_paths()) == [0] and b.verify_checksums() == []
    assert b.bundle_id != EvidenceBundle.open(base_dir).bundle_id
    assert sorted(EvidenceBundle.open(base_dir).trace_paths()) == [0, 1]  # the base is untouched
    shutil.rmtree(base_dir)
    cache_mod.ensure_bundle(edited, "cpu", cache_dir=cache, repeat=1)  # no base for repeat 1: recorded once, live faults only
    assert calls == [["one_off_pause"], ["one_off_pause"]]
