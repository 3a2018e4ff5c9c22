"""``trace stats``: figures on a synthetic trace whose answers are known, and every real trace read."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from gpu_traces import STEP_US, gpu_trace

from diageval.bundle.trace_stats import Coverage, Names, timed_window, trace_stats
from diageval.bundle.trace_stats_table import format_table
from diageval.cli import main
from diageval.paths import real_traces_dir


def test_coverage_clips_and_merges():
    cov = Coverage([0.0, 5.0, 20.0], [10.0, 10.0, 5.0])  # [0,15) and [20,25)
    assert cov.covered(-5, 30) == 20
    assert cov.covered(10, 22) == 7
    assert cov.gaps(0, 30).tolist() == [5.0]


@pytest.mark.parametrize("legacy", [False, True], ids=["current", "torch-1.9"])
def test_figures_of_a_known_trace(tmp_path, legacy):
    s = trace_stats(gpu_trace(tmp_path / "t.json.gz", legacy=legacy, pageable_block_us=2_000.0, comm_us=500.0))
    assert s.category_style == ("legacy" if legacy else "current")
    assert s.has_accelerator and s.has_device_events and len(s.steps) == 4
    st = s.steps[1]
    assert st.dur_us == STEP_US and st.launches == 21 and st.kernels == 22
    assert st.launch_delay_median_us == pytest.approx(10.0)
    assert st.device_us_by_class["elementwise"] == pytest.approx(2_000.0)
    assert st.dataloader_wait_us == pytest.approx(1_000.0)
    # 19 gaps of 200 us between kernels, 200 us to the comm kernel, ~2 ms to the pageable copy
    assert st.device_gaps["50"] == 21 and st.device_gaps["1000"] == 1
    block = st.blocking["pageable_copy"]
    assert block.calls == 1 and block.host_us == 2_000.0 and block.device_idle_us == pytest.approx(1_998.0)
    assert st.comm_us == 500.0 and st.comm_exposed_us == 500.0 and st.comm_overlapped_us == 0.0
    busiest = {t.tid: t for t in st.threads}
    assert busiest["2"].autograd and busiest["2"].busy_us == 3_000.0


def test_no_device_events_and_no_steps(tmp_path):
    s = trace_stats(gpu_trace(tmp_path / "t.json.gz", device_events=False))
    assert s.has_accelerator and not s.has_device_events
    assert all(st.device_busy_us == 0 for st in s.steps)


def test_cli_table_json_and_compare(tmp_path):
    a = gpu_trace(tmp_path / "a.json.gz")
    b = gpu_trace(tmp_path / "b.json.gz", delay_us=5_000.0)
    runner = CliRunner()
    out = runner.invoke(main, ["trace", "stats", str(a)])
    assert out.exit_code == 0, out.output
    assert "launch-to-start delay (median of step medians)  10.0 us" in out.output
    out = runner.invoke(main, ["trace", "stats", "--compare", str(a), str(b)])
    assert out.exit_code == 0 and "5.00 ms" in out.output
    assert runner.invoke(main, ["trace", "stats", "--json", str(a)]).exit_code == 0
    assert runner.invoke(main, ["trace", "stats", "--compare", str(a)]).exit_code != 0


DATA = real_traces_dir()
REAL = sorted(DATA.rglob("*.json.gz")) if DATA.is_dir() else []


@pytest.mark.skipif(not REAL, reason=f"no real traces under {DATA} (set $DIAGEVAL_DATA)")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_every_real_trace_measured(path):
    s = trace_stats(path)
    assert s.truncated is None and s.steps
    assert format_table(s)
    if s.has_device_events:
        assert any(st.kernels for st in s.steps)
    if "kineto-resnet50" in str(path):
        assert s.category_style == "legacy" and len(s.steps) == 6  # Operator-category ProfilerSteps


def test_a_timed_window_keeps_complete_events_with_numeric_times_in_file_order():
    """What the collectors take: ``ph`` X with a number for start and duration (bool counts, as isinstance says);
    a string, a missing value or an integer beyond float range is no time. Pairs get one id each."""
    from diageval.bundle.trace_stream import event_from_dict

    raw = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2.5}, {"ph": "B", "ts": 1, "dur": 1},
           {"ph": "X", "ts": "5", "dur": 1}, {"ph": "X", "ts": 3}, {"ph": "X", "ts": 10**400, "dur": 1},
           {"ph": "X", "cat": "cpu_op", "name": "k", "ts": True, "dur": 0},
           {"ph": "X", "cat": "kernel", "name": "k", "ts": 7.5, "dur": -1}]
    w, names = timed_window([event_from_dict(e) for e in raw], Names())
    assert [e.ts for e in w.events] == [1, True, 7.5]
    assert w.ts.tolist() == [1.0, 1.0, 7.5] and w.dur.tolist() == [2.5, 0.0, -1.0]
    assert w.ids.tolist() == [0, 1, 0] and names.keys == [("kernel", "k"), ("cpu_op", "k")]
    assert [e.ts for e in w.select(w.dur > 0).events] == [1]


def test_names_give_ids_on_first_sight_in_file_order_across_windows():
    """Issue 43: a window whose pairs are all known is read by plain dict lookups; one holding a pair first met gives
    it the next id where it first shows, before and after pairs already known, as one event at a time would."""
    from diageval.bundle.trace_stream import event_from_dict

    def window(pairs):
        return [event_from_dict({"ph": "X", "cat": c, "name": n, "ts": 1, "dur": 1}) for c, n in pairs]

    names = Names()
    first, names = timed_window(window([("kernel", "a"), ("cpu_op", "a"), ("kernel", "a")]), names)
    known, names = timed_window(window([("cpu_op", "a"), ("kernel", "a")]), names)
    mixed, names = timed_window(window([("kernel", "a"), (None, "b"), ("cpu_op", None), (None, "b"), ("cpu_op", "a")]),
                                names)
    assert first.ids.tolist() == [0, 1, 0] and known.ids.tolist() == [1, 0] and mixed.ids.tolist() == [0, 2, 3, 2, 1]
    assert names.keys == [("kernel", "a"), ("cpu_op", "a"), (None, "b"), ("cpu_op", None)]


def test_names_past_their_limit_start_afresh_and_measure_the_same(tmp_path, monkeypatch):
    """A trace with more distinct (category, name) pairs than one Names holds (a hostile one) is measured the same:
    the ids start again at 0 in a fresh Names, and every collector's table follows (memory stays bounded)."""
    import diageval.bundle.trace_stats as tst
    from diageval.bundle import trace_stream
    from diageval.bundle.trace_summary import summarize_trace

    path = gpu_trace(tmp_path / "t.json.gz", pageable_block_us=2_000.0, comm_us=500.0)
    want_stats, want_summary = trace_stats(path).steps, summarize_trace(path).steps
    monkeypatch.setattr(tst, "NAMES_LIMIT", 2)
    monkeypatch.setattr(trace_stream, "CHUNK_BYTES", 2048)  # many windows, so the fresh Names come often
    assert trace_stats(path).steps == want_stats
    assert summarize_trace(path).steps == want_summary


def test_the_table_is_the_same_under_any_hash_seed(tmp_path):
    """Issue 42 item 7: host threads that tie (here five, each inside an op for the whole step) are ordered by their
    id, not by the hash order of a set of strings, so ``trace stats`` prints the same table on every run."""
    import json
    import os
    import subprocess
    import sys

    events = []
    for s in range(3):
        t0 = 1000.0 + s * 10_000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": "main",
                       "ts": t0, "dur": 10_000.0})
        for tid in ("worker-a", "worker-b", "worker-c", "worker-d", "worker-e"):
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": tid, "ts": t0, "dur": 10_000.0})
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    tables = set()
    for seed in range(6):
        out = subprocess.run([sys.executable, "-m", "diageval", "trace", "stats", str(trace)], capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
        tables.add("\n".join(line for line in out.splitlines() if line.startswith("host thread")))
    assert len(tables) == 1
    assert [line.split("tid ")[1].split(":")[0] for line in tables.pop().splitlines()] == [
        "worker-a", "worker-b", "worker-c", "worker-d"]


def test_a_windows_correlations_are_decoded_once_for_every_collector(tmp_path, monkeypatch):
    """The stats collector and the time attribution read the same kernels' and calls' correlations: each event's is
    decoded once per window, whichever collector asks first, and a selection's values are each event's own."""
    from diageval.bundle import attribution, trace_stats as ts
    from diageval.bundle.trace_stream import StreamState, correlations, event_from_dict, iter_trace_windows

    decoded: list[int] = []

    def counting(events):
        decoded.extend(id(ev) for ev in events)
        return correlations(events)

    monkeypatch.setattr(ts, "correlations", counting)
    monkeypatch.setattr(attribution, "correlations", counting, raising=False)  # where the attribution decoded its own
    path = gpu_trace(tmp_path / "r.json.gz", steps=2, pageable_block_us=2_000.0, comm_us=500.0)
    stats, att, names = ts.StatsCollector(), attribution.AttributionCollector(), Names()
    for window in iter_trace_windows(path, StreamState()):
        timed, names = timed_window(window, names)
        stats.add_window(timed)
        att.add_window(timed)
    assert decoded and len(decoded) == len(set(decoded))
    # an event whose args one decode of the list cannot take (not an object) falls back alone, same values
    args = [{"correlation": 4}, [1], {}, {"correlation": "x"}]
    events = [event_from_dict({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1,
                               "args": a}) for i, a in enumerate(args)]
    timed, _ = timed_window(events, Names())
    some = timed.select(np.array([False, True, True, True]))
    assert some.correlations() == [None, None, "x"]
    assert timed.correlations() == [ev.correlation() for ev in events] == [4, None, None, "x"]


def test_a_windows_threads_are_read_once_for_every_collector_and_group_as_by_first_sight(monkeypatch):
    """Issue 43: the summary's, ``trace stats``' and the time attribution's columns are kept per thread; each event's
    thread is read once per window whichever selection asks first, threads that print alike are one (5 and "5"), and a
    selection's groups come in order of first appearance, with the mask of their events (None: the only thread)."""
    from diageval.bundle import trace_stats as ts
    from diageval.bundle.trace_stream import event_from_dict

    read: list[int] = []

    def counting(ev):
        read.append(id(ev))
        return ev.tid

    monkeypatch.setattr(ts, "_TID", counting)
    tids = [7, "5", 5, 7, "x", 5]
    events = [event_from_dict({"ph": "X", "cat": "cpu_op", "name": "op", "tid": t, "ts": i, "dur": 1})
              for i, t in enumerate(tids)]
    w, _ = timed_window(events, Names())
    some = w.select(np.array([False, True, True, True, False, True]))
    groups = some.by_thread()
    assert [(t, m.tolist()) for t, m in groups] == [("5", [True, True, False, True]), ("7", [False, False, True, False])]
    whole = w.by_thread()
    assert [t for t, _ in whole] == ["7", "5", "x"] and whole[0][1].tolist() == [True, False, False, True, False, False]
    assert w.select(np.array([True, False, False, True, False, False])).by_thread() == [("7", None)]
    assert some.threads_where(np.array([True, False, True, False])) == ["5", "7"]
    assert sorted(read) == sorted(id(ev) for ev in events) and len(read) == len(set(read))
    assert w.select(np.zeros(6, dtype=bool)).by_thread() == []


def test_a_thread_id_that_cannot_be_hashed_is_grouped_by_its_string():
    """A ``tid`` that is a JSON array (no hash: a hostile or broken trace) is a thread by its string, as ``str(ev.tid)``
    of every event would make it, beside the hashable ones of the same window."""
    from diageval.bundle.trace_stream import event_from_dict

    tids = [[1], 7, [1], "7", [2]]
    events = [event_from_dict({"ph": "X", "cat": "cpu_op", "name": "op", "tid": t, "ts": i, "dur": 1})
              for i, t in enumerate(tids)]
    w, _ = timed_window(events, Names())
    assert [(t, m.tolist()) for t, m in w.by_thread()] == [
        ("[1]", [True, False, True, False, False]), ("7", [False, True, False, True, False]),
        ("[2]", [False, False, False, False, True])]
    assert w.select(np.array([False, True, False, True, True])).threads_where(np.array([True, True, True])) == [
        "7", "7", "[2]"]


def test_the_columns_dropped_at_the_budget_feed_the_join_in_time_order(monkeypatch):
    """Issue 43: at the column budget the columns held so far feed the call-to-device join in order of start (a call
    before a device event at one instant), so that each launch waits only until its kernel, as in the read; fed a
    column at a time every launch waited at once, and a trace that dropped its columns holding more launches than
    ``JOIN_PENDING_LIMIT`` (the 577 MB repeated A100 trace: 143 k) lost its margin. Blocking calls that are not copies
    are not joined, as in the read after the drop."""
    from array import array

    from diageval.bundle import trace_stats as ts

    monkeypatch.setattr(ts, "JOIN_PENDING_LIMIT", 5)
    collector = ts.StatsCollector()
    c = collector.cols
    c.launch_corr.extend(list(range(50)))
    c.launch_at = array("d", [10.0 * i for i in range(50)])
    c.dev_corr.extend([*range(50), 100])
    c.dev_ts = array("d", [10.0 * i + 3.0 for i in range(50)] + [999.0])
    c.dev_dur = array("d", [1.0] * 51)
    c.calls = [("async_copy", 990.0, 1.0, 100), *(("sync", 5.0 * i, 1.0, 1000 + i) for i in range(20))]
    blocks = list(ts._joined_in_time_order(c, block=7))
    assert len(blocks) == 15 and all(len(b[0]) == len(b[1]) == len(b[2]) for b in blocks)
    is_device, starts, corrs = ([x for b in blocks for x in b[i]] for i in range(3))
    assert starts == sorted(starts) and corrs[:2] == [0, 0] and is_device[:2] == [False, True]
    assert len(corrs) == 50 + 51 + 1  # the 20 synchronising calls are not joined
    assert corrs[-2:] == [100, 100] and is_device[-2:] == [False, True]  # the copy, then its device copy
    odd = ts._Cols()
    odd.launch_corr.extend(["x", None, 2])
    odd.launch_at = array("d", [3.0, 1.0, 2.0])
    assert list(ts._joined_in_time_order(odd)) == [([False] * 3, [1.0, 2.0, 3.0], [None, 2, "x"])]
    collector.drop_columns()
    assert collector.join.max_gap == 9.0  # the copy's gap (each launch's is 3 us): every pair matched, none given up
    assert collector.margin_us == 9.0  # over the calls' 1 us of blocking


def test_launch_delays_match_each_device_event_to_the_latest_launch_as_a_dict_lookup_would():
    """Issue 43: the launch-to-start delays are matched as int64 columns (no Python per device event) when every
    correlation is an int, one at a time otherwise; either way each device event's own, against the latest launch with
    its correlation (a dict updated in file order), in file order. ``latest_match`` is that join for both collectors."""
    from array import array

    from diageval.bundle import trace_stats as ts
    from diageval.bundle.trace_ids import NO_CORR, CorrelationColumn, latest_match

    def by_dict(dev_ts, dev_corr, launches):
        latest = {}
        for k, t in launches:  # a dict updated in file order: a correlation launched twice counts its latest launch
            latest[k] = t
        latest.pop(None, None)
        return [(t, t - latest[k]) for t, k in zip(dev_ts, dev_corr) if k is not None and k in latest]

    def column(values):
        col = CorrelationColumn()
        col.extend(values)
        return col

    c = ts._Cols()
    c.dev_ts = array("d", [10.0, 20.0, 30.0, 40.0, 50.5])
    int_launches = [(1, 9.0), (3, 35.0), (7, 1.0), (1, 4.0), (None, 3.0), (2**62, 2.0)]
    odd_launches = [(1, 4.0), ("2", 5.0), (None, 3.0), (3, 35.0), (True, 6.0)]
    for launches in (int_launches, odd_launches):
        for corrs in ([1, 2, None, 3, 1], [2**62, 1, 3, None, 7], [1, "2", None, 3, 1.0], [True, 3, 1, 1, None]):
            c.dev_corr = column(corrs)
            c.launch_corr, c.launch_at = column([k for k, _ in launches]), array("d", [t for _, t in launches])
            assert (c.dev_corr.column() is None) == any(type(k) is not int and k is not None for k in corrs)
            starts, delays = ts._launch_delays(c)
            assert list(zip(starts.tolist(), delays.tolist())) == by_dict(c.dev_ts, corrs, launches), (corrs, launches)
            assert c.dev_corr.tolist() == corrs
    found, at = latest_match(np.array([5, 3, 5, NO_CORR, 8]), np.array([1.0, 2.0, 3.0, 4.0, 5.0]),
                             np.array([5, 3, 9, NO_CORR, 8, 1]))
    assert found.tolist() == [True, True, False, False, True, False] and at[found].tolist() == [3.0, 2.0, 5.0]
    assert latest_match(np.zeros(0, dtype=np.int64), np.zeros(0), np.array([1]))[0].tolist() == [False]
