"""rules' launch judge on CPU traces (issue 38): the op count says a step is made of many ops, the dispatch the trace
measures (time between ops, short ops' self time, on every op thread) says whether that costs a share worth naming."""

from __future__ import annotations

from tests.diagnosers.test_rules_attributed import _diagnose

LAUNCH = "launch.kernel_launch_overhead"


def _ops(ev: list[dict], tid: int, t: float, n: int, op_us: float, gap_us: float) -> float:
    for _ in range(n):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": tid, "ts": t, "dur": op_us})
        t += op_us + gap_us
    return t


def _steps(body, n: int = 3) -> list[dict]:
    """``n`` profiler steps on thread 1, each filled by ``body(events, start) -> end``."""
    ev: list[dict] = []
    t = 0.0
    for k in range(n):
        start = t
        t = body(ev, t) + 50.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": start,
                   "dur": t - start})
    return ev


def test_thousands_of_ops_that_each_do_real_work_are_not_launch_overhead(tmp_path):
    """2500 ops a step, each 80 us of arithmetic 2 us apart: the count of a sliced model, but dispatch (the time between
    ops) is 2.4% of the step, under a loss worth naming. The op count alone (5 us assumed per op) claimed it."""
    d = _diagnose(tmp_path, _steps(lambda ev, t: _ops(ev, 1, t, 2500, 80.0, 2.0)), device=False)
    assert LAUNCH not in [f.category for f in d.findings]


def test_dispatch_on_the_backward_thread_is_measured(tmp_path):
    """A training step whose backward runs on another thread (autograd's): 2200 forward ops of 60 us on the main
    thread, then 4000 ops of 20 us, 10 us apart, on thread 3 while the main thread waits. Dispatch is about half the
    step, almost all of it off the main thread: the impact is that measured share (the old 5 us x ops said 4%)."""
    def step(ev: list[dict], t: float) -> float:
        t = _ops(ev, 1, t, 2200, 60.0, 1.0)
        return _ops(ev, 3, t, 4000, 20.0, 10.0)

    d = _diagnose(tmp_path, _steps(step), device=False)
    (f,) = [f for f in d.causes if f.category == LAUNCH]
    assert 0.4 < f.impact < 0.55
    assert f.confidence >= 0.5
    assert "on 2 op threads" in f.evidence[0]


def test_a_sliced_model_s_dispatch_is_claimed_at_its_measured_share(tmp_path):
    """3000 ops of 12 us, 3 us apart: the step is dispatch (short ops and the gaps between them), claimed with that
    share as its impact."""
    d = _diagnose(tmp_path, _steps(lambda ev, t: _ops(ev, 1, t, 3000, 12.0, 3.0)), device=False)
    (f,) = [f for f in d.causes if f.category == LAUNCH]
    assert f.impact > 0.9 and f.confidence > 0.8
