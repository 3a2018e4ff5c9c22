"""The time table (issue 38): one table per GPU rank that sums to its time, what each idle instant is charged to,
the standard error from the occurrences, and ``trace stats`` printing the same table the rules name causes from."""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from gpu_traces import STEP_US, gpu_trace

from diageval.bundle.attribution import PARTS, AttributionCollector, _QueueJoin, share_rows
from diageval.bundle.trace_stats import Names, timed_window, trace_stats
from diageval.bundle.trace_stats_table import format_table
from diageval.bundle.trace_stream import StreamState, iter_trace_windows


def _table(path: Path):
    c = AttributionCollector()
    names = Names()
    for w in iter_trace_windows(path, StreamState()):
        timed, names = timed_window(w, names)
        c.add_window(timed)
    return c, c.attribute(c.step_windows())


def _write(path: Path, events: list[dict]) -> Path:
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    return path


def test_every_step_sums_to_its_time(tmp_path):
    path = gpu_trace(tmp_path / "r.json.gz", steps=3, pageable_block_us=2_000.0, comm_us=500.0, delay_us=10.0)
    _, att = _table(path)
    assert len(att.units) == 3
    for u in att.units:
        assert set(u.parts) == set(PARTS)
        assert abs(sum(p.us for p in u.parts.values()) - u.dur_us) < 1e-3 * u.dur_us
    rows = {r.part: r for r in share_rows(att)}
    assert abs(sum(r.share for r in rows.values()) - 1.0) < 1e-6
    # the fixture: a 1 ms DataLoader wait, a 2 ms pageable copy and a 0.5 ms NCCL kernel in each 10 ms step
    assert 0.09 < rows["data wait"].share < 0.11 and rows["data wait"].occurrences == 3
    assert 0.18 < rows["sync"].share < 0.21
    assert 0.04 < rows["communication"].share < 0.06


def test_what_the_launching_thread_did_while_the_device_idled(tmp_path):
    """A step: 4 ms of a CPU op that queues nothing (inline decode), then kernels that found an empty queue, a 2 ms
    cudaFree, and the rest with no recorded host op at all."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10_000}]
    ev.append({"ph": "X", "cat": "cpu_op", "name": "decode_jpeg", "pid": 1, "tid": 1, "ts": 0, "dur": 4_000})
    t, corr = 4_000.0, 0
    for _ in range(10):  # 10 kernels of 100 us, 150 us apart: short gaps, each kernel 10 us after its launch
        corr += 1
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": t, "dur": 20})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 2,
                   "dur": 5, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t + 12, "dur": 100,
                   "args": {"correlation": corr}})
        t += 250
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaFree", "pid": 1, "tid": 1, "ts": 6_500, "dur": 2_000})
    _, att = _table(_write(tmp_path / "r.json.gz", ev))
    (u,) = att.units
    parts = {p: round(v.us) for p, v in u.parts.items()}
    assert parts["compute"] == 1_000
    # the decode runs before the step's first kernel: the step's input, made inline
    assert parts["input work"] == 4_000 and u.parts["input work"].occurrences == 1 and parts["cpu work"] == 0
    assert parts["memory"] == 2_000
    # after the last kernel (6362) nothing is recorded but the cudaFree (6500-8500): 138 + 1500 us untraced
    assert parts["untraced"] == 1_638
    # the 9 short gaps between the kernels, and the 12 us before the first while its op launched it
    assert parts["launch"] == 9 * 150 + 12


def test_a_gap_before_a_kernel_queued_long_before_is_not_the_host(tmp_path):
    """A deep queue: each kernel launched 5 ms before it runs; the idle between them is the device's own."""
    path = gpu_trace(tmp_path / "r.json.gz", steps=3, delay_us=5_000.0, wait_us=0.0)
    _, att = _table(path)
    rows = {r.part: r for r in share_rows(att)}
    assert rows["queued"].share > 0.3 and rows["launch"].share < 0.05


def test_one_occurrence_has_a_standard_error_of_its_own_size(tmp_path):
    path = gpu_trace(tmp_path / "r.json.gz", steps=1, wait_us=4_000.0, delay_us=300.0, kernel_us=150.0, gap_us=5.0,
                     kernels=30)
    _, att = _table(path)
    row = {r.part: r for r in share_rows(att)}["data wait"]
    assert row.occurrences == 1 and abs(row.se - row.share) < 1e-9


def test_trace_stats_prints_the_table_the_rules_read(tmp_path):
    path = gpu_trace(tmp_path / "r.json.gz", steps=4, delay_us=10.0)
    stats = trace_stats(path)
    table = format_table(stats)
    assert "time: data wait" in table and "standard error" in table and "time: total" in table
    wait = next(r for r in stats.time_table if r.part == "data wait")
    assert abs(wait.share - 1_000.0 / STEP_US) < 0.01
    total = next(line for line in table.splitlines() if line.startswith("time: total"))
    assert "40.00 ms over 4 steps" in total


def _cpu_steps(n: int, inline_us: float, *, ops: int = 20, op_us: float = 150.0, gap_us: float = 10.0,
               markers: bool = True) -> list[dict]:
    """``n`` steps of a host-only job: ``inline_us`` of Python before the step's first op (no op, no DataLoader: input
    made inline), then ``ops`` model ops of ``op_us``, ``gap_us`` apart, then 100 us to the step's end."""
    ev, t = [], 0.0
    for s in range(n):
        dur = inline_us + ops * (op_us + gap_us) + 100.0
        if markers:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t,
                       "dur": dur})
        c = t + inline_us
        for _ in range(ops):
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": c, "dur": op_us})
            c += op_us + gap_us
        t += dur
    return ev


def test_a_cpu_trace_splits_the_main_threads_time(tmp_path):
    """Host only: the main thread is the CPU's device. Python before the first op is the step's input made inline,
    the short gaps between ops are dispatch, the time after the last op untraced; each unit sums to its time."""
    path = _write(tmp_path / "r.json.gz", _cpu_steps(5, 6_000.0))
    _, att = _table(path)
    assert len(att.units) == 5
    for u in att.units:
        assert abs(sum(p.us for p in u.parts.values()) - u.dur_us) < 1e-3 * u.dur_us
        parts = {p: round(v.us) for p, v in u.parts.items()}
        assert parts["input work"] == 6_000 and parts["compute"] == 20 * 150
        assert parts["launch"] == 19 * 10 and parts["untraced"] == 10 + 100
    rows = {r.part: r for r in share_rows(att)}
    inline = rows["input work"]
    assert inline.occurrences == 5 and abs(inline.share - 6_000 / 9_300) < 1e-3
    # five equal gaps: the compound-Poisson error is share / sqrt(5), so the part is told from none
    assert 0 < inline.se < inline.share / 1.645
    stats = trace_stats(path)
    table = format_table(stats)
    assert "time: input work" in table and "main thread" in table and "over 5 steps" in table


def test_a_cpu_window_without_markers_is_judged_over_the_recording(tmp_path):
    """A profile started by hand: no step marker, the profiler's own span ("Trace") holds Python before the first op."""
    ev = _cpu_steps(1, 4_000.0, markers=False)
    ev.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 1, "ts": 0, "dur": 7_300})
    stats = trace_stats(_write(tmp_path / "r.json.gz", ev))
    rows = {r.part: r for r in stats.time_table}
    assert round(rows["input work"].us) == 4_000 and rows["input work"].occurrences == 1
    assert abs(sum(r.us for r in stats.time_table) - 7_300) < 1e-3
    assert "over the recording (no step markers)" in format_table(stats)



def test_a_trace_with_an_accelerator_but_no_device_events_has_no_table(tmp_path):
    """Its host is not the device and there is no device to split (rules calls such evidence incomplete)."""
    ev = _cpu_steps(3, 2_000.0)
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2_010, "dur": 5})
    path = tmp_path / "r.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "deviceProperties": [{"name": "NVIDIA H100"}], "traceEvents": ev}, fh)
    stats = trace_stats(path)
    assert stats.time_table == [] and "time:" not in format_table(stats)


def test_a_cpu_step_s_end_is_not_dispatch_when_the_next_step_follows_closely(tmp_path):
    """Host only, 5 steps whose input is ready (0.1 ms before the first op): the 0.1 ms after a step's last op ends the
    step, and the next step's first op follows within SHORT_GAP_US; it is not dispatch between the model's ops
    (``launch`` is the 19 gaps between a step's own 20 ops), it is the step's untraced end."""
    path = _write(tmp_path / "r.json.gz", _cpu_steps(5, 100.0))
    _, att = _table(path)
    for u in att.units:
        parts = {p: round(v.us) for p, v in u.parts.items()}
        assert parts["launch"] == 19 * 10 and parts["untraced"] == 10 + 100 and parts["input work"] == 100


def _dict_delays(devices, calls):
    """The launch-to-start delays as a dict of every call (the latest per correlation) would give them."""
    last = {}
    for corr, ts in calls:
        last[corr] = ts
    last.pop(None, None)
    return [t - last[c] if c is not None and c in last else math.nan for c, t in devices]


def _corr_window(corrs, starts):
    """A reader's window (``timed_window``) of complete events with these correlations (None: no ``args``) and starts."""
    from diageval.bundle.trace_stats import Names, timed_window
    from diageval.bundle.trace_stream import event_from_dict

    events = [event_from_dict({"ph": "X", "cat": "kernel", "name": "k", "ts": t, "dur": 1.0,
                               **({} if c is None else {"args": {"External id": 1, "correlation": c}})})
              for c, t in zip(corrs, starts)]
    return timed_window(events, Names())[0]


def test_queue_delays_match_each_activity_to_its_latest_call():
    """The delays ``_QueueJoin`` keeps in int64 columns are those of a dict of the calls (a repeated correlation: the
    latest call; None never matches); a correlation that is not an int turns it to the values themselves, matched as
    Python's equality does (1.0 is 1). Fed windows of the read, as the collector feeds it."""
    rng = random.Random(7)
    cases = [
        [(rng.choice([None, *range(40)]), rng.uniform(0, 1e6)) for _ in range(300)],
        [(c, float(i)) for i, c in enumerate([3, 1, None, 2**63 - 1, 3])],
        [(c, float(i)) for i, c in enumerate([3, "x", 1.0, True, None])],
    ]
    for calls in cases:
        for generic_after in (None, 1):  # int columns throughout, or an odd value arriving after the first window
            devices = [(c, t + 100.0) for c, t in calls] + [(7, 5.0), (None, 6.0), (1, 7.0)]
            join = _QueueJoin()
            join.add_calls(_corr_window([c for c, _ in calls[:150]], [t for _, t in calls[:150]]))
            join.add_devices(_corr_window([c for c, _ in devices[:2]], [t for _, t in devices[:2]]))
            if generic_after:
                join.add_devices(_corr_window(["odd"], [1.0]))
                devices = devices[:2] + [("odd", 1.0)] + devices[2:]
            rest = devices[2 + bool(generic_after):]
            join.add_devices(_corr_window([c for c, _ in rest], [t for _, t in rest]))
            join.add_calls(_corr_window([c for c, _ in calls[150:]], [t for _, t in calls[150:]]))
            got = join.delays(np.array([t for _, t in devices]))
            want = np.array(_dict_delays(devices, calls))
            assert np.array_equal(got, want, equal_nan=True)


def test_a_windows_correlations_are_decoded_once_as_ints_until_one_is_not():
    """Issue 43: a window's correlations are decoded once for every selection that asks, kept as an int64 column; a
    selection holding a value that is not an int turns the window's to the values themselves, and every selection,
    before or after, reads the same values."""
    from diageval.bundle import trace_stats as ts
    from diageval.bundle.trace_ids import CorrelationColumn

    corrs = [5, None, 7, "x", 9, 1.5, 2**63 - 1]
    w = _corr_window(corrs, [float(i) for i in range(len(corrs))])
    decoded = []
    real = ts.correlations
    ts.correlations = lambda events: (decoded.extend(events), real(events))[1]
    try:
        ints = w.select(np.array([True, True, True, False, True, False, True]))
        col = CorrelationColumn()
        ints.extend_correlations(col)
        assert col.column() is not None and col.tolist() == [5, None, 7, 9, 2**63 - 1]
        assert w._corr[2] is None  # every value so far an int: no object column
        odd = w.select(np.array([False, False, False, True, False, True, False]))
        assert odd.correlations() == ["x", 1.5] and w._corr[2] is not None
        assert ints.correlations() == [5, None, 7, 9, 2**63 - 1] and w.correlations() == corrs
        ints.extend_correlations(col)
        assert col.column() is not None and col.tolist() == [5, None, 7, 9, 2**63 - 1] * 2  # ints still
        odd.extend_correlations(col)
        assert col.column() is None and col.tolist() == [5, None, 7, 9, 2**63 - 1] * 2 + ["x", 1.5]
    finally:
        ts.correlations = real
    assert len(decoded) == len(corrs)  # each event's args decoded once


def _crossing_trace(path: Path, seed: int, steps: int = 24, late_launcher: bool = False, long_op: bool = False) -> Path:
    """Steps whose occurrences run across step edges every way a read in slices of steps must join again:
    kernels and NCCL kernels running into the next step, DataLoader waits and synchronising calls across an
    edge, device gaps across an edge whose next kernel was launched long before (queued) or not, whole steps
    with no device work, pageable copies, steps in a row with no device work, a second launching thread with
    long ops across edges and a third that never launches, steps apart and steps back to back.
    ``late_launcher``: a fourth thread launches in the last step only, after long ops that queue nothing in the
    others (what a slice of other steps cannot see). ``long_op``: an op of a fifth thread runs over many steps
    and launches only at its end (what a slice of its first steps cannot see)."""
    rng = random.Random(seed)
    ev: list[dict] = []
    shuffled = None
    corr = 0
    t0 = 1_000.0

    def kernel(tid: int, launch: float, start: float, dur: float, name: str = "void gemm_kernel()") -> None:
        nonlocal corr
        corr += 1
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": tid, "ts": launch - 3, "dur": 10})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": launch,
                   "dur": 4, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start, "dur": dur,
                   "args": {"correlation": corr}})

    for s in range(steps):
        length = rng.choice([4_000.0, 6_000.0, 9_000.0])
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t0,
                   "dur": length})
        wait = rng.choice([0.0, 300.0, 1_500.0])
        if wait:  # a wait that sometimes starts in the step before
            back = rng.choice([0.0, 200.0])
            ev.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_Iter.__next__", "pid": 1,
                       "tid": 1, "ts": t0 - back, "dur": wait + back})
        t = t0 + wait + 50.0
        if rng.random() < 0.15 or 9 <= s < 12:  # no device work in this step (three in a row): one long CPU op
            ev.append({"ph": "X", "cat": "cpu_op", "name": "decode", "pid": 1, "tid": 1, "ts": t, "dur": 2_500.0})
            if s == 11:  # the device work after the three queued long before
                kernel(1, t0 + length - 100.0, t0 + length + 1_800.0, 100.0)
        else:
            for _ in range(rng.randint(3, 12)):
                delay = rng.choice([8.0, 8.0, 120.0, 2_000.0])
                kernel(1, t, t + delay, rng.choice([30.0, 200.0, 600.0]))
                t += rng.choice([40.0, 250.0, 1_200.0])
            if rng.random() < 0.4:  # the last kernel runs into the next step, sometimes a communication kernel
                kernel(1, t0 + length - 300.0, t0 + length - 200.0, 1_500.0,
                       rng.choice(["void gemm_kernel()", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"]))
            if rng.random() < 0.3:  # the next step's first kernel queued long before it runs
                kernel(1, t0 + length - 100.0, t0 + length + 1_800.0, 100.0)
        if rng.random() < 0.3:  # a synchronising call across the step's end
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                       "ts": t0 + length - 400.0, "dur": 900.0})
        if rng.random() < 0.3:  # a pageable copy
            corr += 1
            at = t0 + rng.uniform(0.2, 0.8) * length
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": at,
                       "dur": 700.0, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0,
                       "tid": 8, "ts": at + 690.0, "dur": 5.0, "args": {"correlation": corr}})
        # the backward thread: a long op across the step's end, launching in some steps and not in others
        back = {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1,
                "tid": 2, "ts": t0 + length - 1_500.0, "dur": 3_000.0}
        ev.append(back)
        if rng.random() < 0.5:
            kernel(2, back["ts"] + 100.0, back["ts"] + 150.0, 300.0)
        ev.append({"ph": "X", "cat": "cpu_op", "name": "pin_memory", "pid": 1, "tid": 3, "ts": t0 + 100.0,
                   "dur": rng.choice([500.0, 2_000.0])})
        if late_launcher:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "tokenize", "pid": 1, "tid": 4, "ts": t0 + 200.0,
                       "dur": 1_500.0})
            if s == steps - 1:  # at the file's end, together (as Kineto writes an op's launches near it)
                shuffled = len(ev)
                kernel(4, t0 + 300.0, t0 + 320.0, 50.0)
        if long_op and s == 3:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "long_op", "pid": 1, "tid": 5, "ts": t0 + 50.0,
                       "dur": 60_000.0})
            kernel(5, t0 + 59_000.0, t0 + 59_010.0, 20.0)
        t0 += length + rng.choice([0.0, 0.0, 300.0])
    head = ev[:shuffled]
    rng.shuffle(head)  # any file order: Kineto writes a step's events out of time order
    return _write(path, head + ev[len(head):])


def _sliced_and_whole(path: Path, max_entries: int):
    from diageval.bundle.trace_summary import summarize_trace

    out = []
    for budget in (None, max_entries):
        collector = AttributionCollector()
        summary = summarize_trace(path, max_entries=budget, observers=[collector])
        windows = [(st.number, st.start_us - summary.base_time_us, st.dur_us) for st in summary.steps]
        out.append((collector, collector.attribute(windows)))
    return out


def test_a_table_made_in_slices_of_steps_is_the_whole_reads(tmp_path):
    """Issue 43: past the column budget the time table is made in the summary's slice read, a slice of steps at a
    time; every unit's row and every part's occurrences are the ones one read of the whole trace gives, whatever the
    slices' size (one step a slice and up), the order of the file or what runs across a slice's edge."""
    for seed in range(6):
        path = _crossing_trace(tmp_path / f"t{seed}.json.gz", seed, late_launcher=seed % 2 == 1)
        for budget in (60, 250, 700):  # a step a slice, a few, a quarter of the trace
            (_, whole), (sliced, parts) = _sliced_and_whole(path, budget)
            assert sliced.sliced is not None and len(sliced.sliced.slices) > 1  # made in slices, and held
            assert parts.model_dump() == whole.model_dump(), (seed, budget)
            names = {p for u in whole.units for p, t in u.parts.items() if t.us > 0}
            assert {"compute", "communication", "sync", "data wait", "queued", "launch", "cpu work",
                    "untraced"} <= names


def test_a_thread_that_launches_in_one_slice_only_is_a_launching_thread_in_every_slice(tmp_path):
    """A thread whose long ops queue nothing in every step but the last launches there, at the end of a file of many
    reader windows: the first read, past its budget, still sees which threads launch inside an op (``add_facts``),
    so the slices of the other steps count its long ops as CPU work, as one read does, without reading the trace whole
    once more."""
    path = _crossing_trace(tmp_path / "late.json.gz", 3, steps=300, late_launcher=True)
    (_, whole), (sliced, parts) = _sliced_and_whole(path, 2_000)
    assert sliced.sliced is not None and len(sliced.sliced.slices) > 1
    assert parts.model_dump() == whole.model_dump()
    (_, without), _ = _sliced_and_whole(_crossing_trace(tmp_path / "no.json.gz", 3, steps=300), 2_000)
    cpu_work = [sum(u.parts["cpu work"].us for u in att.units[:-1]) for att in (whole, without)]
    assert cpu_work[0] > cpu_work[1]  # its long ops in the other steps are CPU work


def test_a_slice_that_cannot_see_whether_an_op_launches_reads_the_trace_whole(tmp_path):
    """An op that runs over many steps and launches only at its end: the slices of its first steps see no launch in
    it (CPU work, or the launch path?); the read finds out and the table is made from the whole trace, the same as
    one read's."""
    path = _crossing_trace(tmp_path / "long.json.gz", 1, long_op=True)
    (_, whole), (sliced, parts) = _sliced_and_whole(path, 400)
    assert sliced.sliced is None  # not the slices' table
    assert parts.model_dump() == whole.model_dump()


def test_steps_recorded_overlapping_across_a_slice_edge_are_read_whole(tmp_path):
    """A step that runs into the next one where slices meet: in one read the later step takes the overlap, which the
    earlier step's slice cannot know; the table is made from the whole trace, the same as one read's."""
    path = tmp_path / "overlap.json.gz"
    with gzip.open(_crossing_trace(tmp_path / "t.json.gz", 4)) as fh:
        events = json.load(fh)["traceEvents"]
    for e in events:
        if e["name"].startswith("ProfilerStep"):
            e["dur"] += 500.0  # every step runs 0.5 ms into the next
    _write(path, events)
    (_, whole), (sliced, parts) = _sliced_and_whole(path, 60)
    assert sliced.sliced is None
    assert parts.model_dump() == whole.model_dump()


def test_a_table_made_in_slices_answers_only_for_its_steps(tmp_path):
    path = _crossing_trace(tmp_path / "t.json.gz", 0)
    (_, _), (sliced, parts) = _sliced_and_whole(path, 400)
    with pytest.raises(ValueError):
        sliced.attribute([(u.number, u.start_us, u.dur_us) for u in parts.units[1:]])


def test_past_the_budget_a_table_not_made_in_slices_is_the_whole_reads(tmp_path):
    """Past the column budget, a trace whose table cannot be made in slices of steps (no device events: the main
    thread's split; no step markers: the span) is still the whole trace's table, as one read makes it."""
    from diageval.bundle.trace_summary import summarize_trace

    host_only = gpu_trace(tmp_path / "host.json.gz", steps=300, device_events=False)  # a file of many windows
    stepless = tmp_path / "stepless.json.gz"
    with gzip.open(_crossing_trace(tmp_path / "t.json.gz", 2, steps=300)) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    _write(stepless, events)
    for path in (host_only, stepless):
        tables = []
        for budget in (None, 60):
            collector = AttributionCollector()
            summary = summarize_trace(path, max_entries=budget, observers=[collector])
            windows = ([(st.number, st.start_us - summary.base_time_us, st.dur_us) for st in summary.steps]
                       or collector.span())
            tables.append(collector.attribute(windows).model_dump())
        assert tables[0] == tables[1] and tables[0]["units"]
