"""The one-pass trace reader: exact aggregates on hand-made traces, no crash on real ones, honest truncation."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from synthetic_traces import BASE_NS, StepShape, build_events, write_trace

from diageval.bundle.kineto import HOST_OP_CATEGORIES
from diageval.bundle.trace_stream import StreamState, TraceFormatError, iter_trace_events
from diageval.bundle.trace_summary import summarize_trace, union_length
from diageval.paths import real_traces_dir

REAL_TRACES = real_traces_dir()
REAL_FILES = sorted(p for p in REAL_TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


def test_union_length_merges_and_clips():
    assert union_length([(0, 10), (5, 15), (20, 30)], 0, 100) == 25
    assert union_length([(0, 10), (5, 15), (20, 30)], 8, 25) == 12
    assert union_length([], 0, 10) == 0


def test_stream_reads_header_before_and_after_events(tmp_path):
    doc = '{"a": 1, "traceEvents": [{"ph": "X"}, {"ph": "M"}], "baseTimeNanoseconds": 1790000000000000000}'
    p = tmp_path / "t.json"
    p.write_text(doc)
    state = StreamState()
    events = list(iter_trace_events(p, state))
    assert len(events) == 2 and state.truncated is None
    assert state.header == {"a": 1, "baseTimeNanoseconds": 1790000000000000000}


def test_stream_numbers_cut_at_chunk_edges_are_not_misread(tmp_path, monkeypatch):
    import diageval.bundle.trace_stream as ts

    monkeypatch.setattr(ts, "CHUNK_BYTES", 7)
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"ts": 123456789.25}], "baseTimeNanoseconds": 1790000000000000000}')
    state = StreamState()
    assert [e.ts for e in iter_trace_events(p, state)] == [123456789.25]
    assert state.header["baseTimeNanoseconds"] == 1790000000000000000


def test_malformed_json_raises_with_file_name(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}')
    with pytest.raises(TraceFormatError, match="bad.json"):
        list(iter_trace_events(p, StreamState()))


def test_summary_of_a_hand_made_step(tmp_path):
    shape = StepShape(data_us=1000, compute_us=3000, n_ops=30, gap_us=500, comm_us=2000, tail_us=400)
    events = build_events(2, 4, lambda r, k: shape)
    write_trace(tmp_path / "t.json.gz", 0, 2, events[0])
    s = summarize_trace(tmp_path / "t.json.gz")
    assert (s.rank, s.world_size, s.backend, s.truncated) == (0, 2, "gloo", None)
    assert [st.number for st in s.steps] == [0, 1, 2, 3]
    st = s.steps[1]
    assert st.start_us > BASE_NS / 1e3  # epoch microseconds
    assert st.data_wait_us == pytest.approx(1000)
    assert st.collective_us == pytest.approx(2000)
    assert st.top_level_ops == 32  # data wait + 30 ops + optimizer
    assert st.leaf_ops == 31 and st.short_ops == 0  # 30 x 95 us ops + optimizer; none is "short"
    assert st.unexplained_us == pytest.approx(500 + 10 + 20 + 30 * 5, abs=1)  # gap + seams between ops
    assert len(st.collectives) == 1 and st.collectives[0].name == "gloo:all_reduce"
    assert s.json_bytes > 0 and s.bytes_per_second > 0


def test_truncated_trace_is_reported_not_raised(tmp_path):
    events = build_events(2, 10, lambda r, k: StepShape())
    write_trace(tmp_path / "t.json.gz", 0, 2, events[0], truncate_at=0.6)
    s = summarize_trace(tmp_path / "t.json.gz")
    assert s.truncated is not None
    raw = (tmp_path / "t.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(raw[: len(raw) // 2])
    assert summarize_trace(tmp_path / "cut.json.gz").truncated is not None


@pytest.mark.skipif(not REAL_FILES, reason=f"real traces not found at {REAL_TRACES} (set DIAGEVAL_DATA)")
@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.parent.name + "/" + p.name)
def test_reader_on_real_traces_matches_json_load(path):
    s = summarize_trace(path)
    with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as fh:
        doc = json.load(fh)
    if isinstance(doc, list):  # the format's bare-array form (torch 1.8's Kineto)
        doc = {"traceEvents": doc}
    assert s.n_events == len(doc["traceEvents"])
    assert s.truncated is None
    # host-side markers only: GPU traces mirror each step on the device timeline (gpu_user_annotation)
    n_markers = sum(1 for e in doc["traceEvents"]
                    if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") in HOST_OP_CATEGORIES)
    assert len(s.steps) == n_markers
    for st in s.steps:
        assert 0 <= st.data_wait_us <= st.dur_us + 1e-6
        assert 0 <= st.host_busy_us <= st.dur_us + 1e-6
        assert 0 <= st.device_busy_us <= st.dur_us + 1e-6
    if any(e.get("cat") == "kernel" for e in doc["traceEvents"]):
        assert s.has_device


# Slices: a trace over the column budget is read again per slice of steps; every figure must stay the same.
SLICED_REAL = [REAL_TRACES / "gpu-jobs/hta-negative-queue/rank0.json.gz",  # A100, NCCL, negative queue delays
               REAL_TRACES / "gpu-jobs/kineto-resnet50-workers0/worker0.1623143089861.pt.trace.json.gz"]  # torch 1.9


def _summary_dump(s):
    return s.model_dump(exclude={"parse_seconds"})


def test_sliced_summary_of_a_hand_made_trace_is_the_single_pass_one(tmp_path, monkeypatch):
    import diageval.bundle.trace_summary as ts

    shape = StepShape(data_us=1000, compute_us=3000, n_ops=30, gap_us=500, comm_us=2000, tail_us=400)
    events = build_events(2, 12, lambda r, k: shape)
    write_trace(tmp_path / "t.json.gz", 0, 2, events[0])
    whole = summarize_trace(tmp_path / "t.json.gz")
    sliced = summarize_trace(tmp_path / "t.json.gz", max_entries=200)
    assert len(whole.steps) == 12
    assert _summary_dump(sliced) == _summary_dump(whole)
    import diageval.bundle.trace_stream as stream

    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)  # many windows: slices close as the pass goes
    reads = []
    real = ts.iter_trace_windows
    monkeypatch.setattr(ts, "iter_trace_windows", lambda *a, **k: (reads.append(1), real(*a, **k))[1])
    sliced = summarize_trace(tmp_path / "t.json.gz", max_entries=200)
    assert _summary_dump(sliced) == _summary_dump(whole)
    assert len(reads) == 2  # written in time order: one pass for the slices, whatever their number
    # a trace sure to pass the budget at the rate of its first bytes stops filling columns there
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))
    drops = []
    real_drop = ts._Columns.drop
    monkeypatch.setattr(ts._Columns, "drop", lambda self, held: (drops.append(self.n_timed), real_drop(self, held))[1])
    for early in (1 << 62, 8192):
        monkeypatch.setattr(ts, "EARLY_DROP_BYTES", early)
        sliced = summarize_trace(plain, max_entries=400)
        assert _summary_dump(sliced) | {"path": None, "bytes_on_disk": 0} == _summary_dump(whole) | {"path": None, "bytes_on_disk": 0}
    assert drops[1] < drops[0] / 2  # the early look dropped the columns well before the budget would have


class _Seen:
    """An observer that records what it is shown: (name, start, duration) of every event, in order."""

    def __init__(self):
        self.events = []

    def add_window(self, window):
        self.events += [(ev.name, ev.ts, ev.dur) for ev in window.events]


@pytest.mark.parametrize("steps", [True, False], ids=["steps", "step-less"])
def test_sliced_summary_shows_observers_every_event_once_in_order(tmp_path, monkeypatch, steps):
    """Past the budget the first read stops feeding observers; the slice pass (or, without steps, a read for them
    alone) feeds them the rest: the same events as one read, each once, in file order, in at most two reads."""
    import diageval.bundle.trace_stream as stream
    import diageval.bundle.trace_summary as ts

    shape = StepShape(data_us=1000, compute_us=3000, n_ops=30, gap_us=500, comm_us=2000, tail_us=400)
    events = build_events(2, 12, lambda r, k: shape)[0]
    if not steps:
        events = [e for e in events if not str(e.get("name", "")).startswith("ProfilerStep#")]
    write_trace(tmp_path / "t.json.gz", 0, 2, events)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)  # many windows: the columns drop after the first few
    whole, sliced = _Seen(), _Seen()
    one = summarize_trace(tmp_path / "t.json.gz", observers=[whole])
    reads = []
    real = ts.iter_trace_windows
    monkeypatch.setattr(ts, "iter_trace_windows", lambda *a, **k: (reads.append(1), real(*a, **k))[1])
    drops = []
    real_drop = ts._Columns.drop
    monkeypatch.setattr(ts._Columns, "drop", lambda self, held: (drops.append(self.n_timed), real_drop(self, held))[1])
    two = summarize_trace(tmp_path / "t.json.gz", max_entries=200, observers=[sliced])
    assert _summary_dump(two) == _summary_dump(one) and bool(one.steps) == steps
    assert len(reads) == 2 and len(whole.events) > 350
    assert sliced.events == whole.events
    assert drops and drops[0] < len(whole.events) / 2  # dropped early: the second read fed most of them


@pytest.mark.skipif(not all(p.is_file() for p in SLICED_REAL), reason=f"real traces not found at {REAL_TRACES}")
@pytest.mark.parametrize("path", SLICED_REAL, ids=lambda p: p.parent.name)
def test_sliced_summary_of_real_traces_is_the_single_pass_one(path):
    whole = summarize_trace(path)
    per_step = max(1, whole.n_events // len(whole.steps))
    sliced = summarize_trace(path, max_entries=2 * per_step)  # a slice of about one step
    assert len(whole.steps) >= 5 and any(st.gpu is not None for st in whole.steps)
    assert _summary_dump(sliced) == _summary_dump(whole)


@pytest.mark.skipif(not SLICED_REAL[0].is_file(), reason=f"real traces not found at {REAL_TRACES}")
def test_sliced_summary_without_a_margin_keeps_device_activity_whole(monkeypatch):
    """When the call-to-device join gives up (too many unmatched ids), slices keep all device activity."""
    import diageval.bundle.trace_stats as stats

    whole = summarize_trace(SLICED_REAL[0])
    monkeypatch.setattr(stats, "JOIN_PENDING_LIMIT", 10)
    sliced = summarize_trace(SLICED_REAL[0], max_entries=50_000)
    assert _summary_dump(sliced) == _summary_dump(whole)


def _random_intervals(seed: int, n: int) -> tuple[list[float], list[float]]:
    """Starts and durations with ties, nesting, overlaps and zero lengths (whole and half microseconds)."""
    import random

    rnd = random.Random(seed)
    ts = [float(rnd.randrange(0, 400)) / 2 for _ in range(n)]
    dur = [float(rnd.choice([0, 0.5, 1, 3, 7, 20, 60, 200])) for _ in range(n)]
    return ts, dur


def _old_self_times(ts, dur, idx):
    """The walk before issue 43's lists (indices into whole columns, a key per op), as the reference."""
    order = sorted(idx, key=lambda i: (ts[i], -dur[i]))
    self_t = {i: dur[i] for i in order}
    parents, stack = set(), []
    for i in order:
        while stack and ts[i] >= ts[stack[-1]] + dur[stack[-1]]:
            stack.pop()
        if stack:
            p = stack[-1]
            self_t[p] -= min(dur[i], ts[p] + dur[p] - ts[i])
            parents.add(p)
        stack.append(i)
    top, end = [], float("-inf")
    for i in idx:
        if ts[i] >= end:
            top.append(i)
            end = ts[i] + dur[i]
        elif ts[i] + dur[i] > end:
            end = ts[i] + dur[i]
    return self_t, set(order) - parents, len(top)


@pytest.mark.parametrize("seed", range(6))
def test_one_steps_nesting_walk_is_the_same_on_plain_lists(seed):
    """Self times, leaves and top-level ops of one step, from that step's ops as lists: the same floats as the walk
    over whole columns by index gave."""
    from array import array

    from diageval.bundle.trace_summary import _sorted_index, _top_level, self_times

    ts, dur = _random_intervals(seed, 600)
    col_ts, col_dur = array("d", ts), array("d", dur)
    starts, order = _sorted_index(col_ts)
    assert list(order) == sorted(range(len(ts)), key=ts.__getitem__) and list(starts) == sorted(ts)
    idx = list(order)
    want_self, want_leaves, want_top = _old_self_times(col_ts, col_dur, idx)
    step_ts, step_dur = np.array([ts[i] for i in idx]), np.array([dur[i] for i in idx])
    self_t, leaf = self_times(step_ts, step_dur)
    assert self_t.tolist() == [want_self[i] for i in idx]
    assert [i for i, lf in zip(idx, leaf.tolist()) if lf] == [i for i in idx if i in want_leaves]
    assert _top_level(step_ts, step_dur) == want_top


@pytest.mark.parametrize("seed", range(4))
def test_the_vectorised_nesting_walk_gives_the_walks_floats(seed):
    """Issue 43: self times, leaves and top-level ops found by numpy (no Python per op) are the walk's, float for
    float (signed zeros too), on steps with ties, negative and zero lengths, partial overlaps, an infinite start and
    a NaN (which the walk keeps)."""
    import random

    from diageval.bundle.trace_summary import _top_level, self_times

    rnd = random.Random(seed)
    for trial in range(300):
        n = rnd.choice([0, 1, 2, 5, 40, 300])
        ts = sorted(float(rnd.randrange(0, 80)) / 2 + (1683564901548726.0 if trial % 2 else 0.0) for _ in range(n))
        dur = [float(rnd.choice([0, 0.5, 1, 3, 7, 20, 60, -1, -0.0, 0.1])) for _ in range(n)]
        if n and trial % 7 == 0:
            ts[-1] = float("inf")
        if n and trial % 11 == 0:
            dur[rnd.randrange(n)] = float("nan")
        want_self, want_leaves, want_top = _old_self_times(ts, dur, list(range(n)))
        self_t, leaf = self_times(np.array(ts), np.array(dur))
        assert [repr(x) for x in self_t.tolist()] == [repr(want_self[i]) for i in range(n)]
        assert [i for i in range(n) if leaf[i]] == [i for i in range(n) if i in want_leaves]
        assert _top_level(np.array(ts), np.array(dur)) == want_top


def test_numpy_sorts_give_pythons_order_and_a_nan_keeps_pythons_sort():
    import math
    from array import array

    from diageval.bundle.trace_stats import sorted_doubles
    from diageval.bundle.trace_summary import _sorted_index

    ts, _ = _random_intervals(7, 500)
    ts[3], ts[9] = -0.0, 0.0  # equal to each other: the first stays first
    col = array("d", ts)
    assert list(sorted_doubles(col)) == sorted(ts) and str(sorted_doubles(col)) == str(array("d", sorted(ts)))
    assert list(_sorted_index(col)[1]) == sorted(range(len(ts)), key=ts.__getitem__)
    with_nan = array("d", [3.0, math.nan, 1.0, 2.0])
    assert str(sorted_doubles(with_nan)) == str(array("d", sorted(with_nan)))
    assert list(_sorted_index(with_nan)[1]) == sorted(range(4), key=with_nan.__getitem__)
    big = [2**53 + 1, 2**53]  # times as written (ints): ordered exactly, as Python compares them
    assert list(_sorted_index(big)[1]) == [1, 0]
