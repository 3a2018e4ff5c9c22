"""A trace without ``ProfilerStep`` markers, cut into windows that the per-rank rules judge like steps.

A profiler run without a ``schedule`` writes no step markers (``trace stats`` then measures the trace as one
whole window). One window cannot show a pattern, and its figures mix the job's set-up with its loop, so
the window is cut (decided here):

* into the job's own steps when ``steps.jsonl`` logs at least ``MIN_PATTERN_STEPS`` of them inside the
  trace's time span (the step timer runs inside the training loop, so each row is one step of work);
* else into ``STEPLESS_WINDOWS`` equal windows of the span in which the device had work (first device
  event to last): before the first kernel the job is creating its CUDA context, building the model or
  loading its first batch, which is not the loop a cause is about. A trace of a job without an
  accelerator is cut over its whole span.

Each window is measured by the same ``trace stats`` code as a profiler step (``StatsCollector.measure_windows``)
and turned into a ``StepSummary`` with the fields the per-rank rules read (device figures, DataLoader wait,
the training thread's op count). Cross-rank rules never see windows: windows of two ranks are not the same
steps. Reading a step-less trace costs a second pass (``summarize_trace`` drops a step-less trace's
figures); a trace whose events would exceed the summary's column budget is not windowed (memory stays
bounded) and the reason says so.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from diageval.bundle.model import StepRecord
from diageval.bundle.trace_stats import Names, StatsCollector, StepStats, timed_window
from diageval.bundle.trace_stream import StreamState, TraceFormatError, iter_trace_windows
from diageval.bundle.trace_summary import MAX_COLUMN_ENTRIES, StepSummary, TraceSummary
from diageval.diagnosers.rules import thresholds as T

_SPAN_PROBES = 200  # fine windows used to find where the device's work starts and ends (0.5% of the span)


class Windows(BaseModel):
    """A step-less trace's windows, or why it has none."""

    units: list[StepSummary] = Field(default_factory=list)
    source: str = Field("", description="'step log' (steps.jsonl rows) or 'time' (equal windows of the span)")
    span_us: float = 0.0
    why_none: str | None = None


def stepless_windows(summary: TraceSummary, step_rows: list[StepRecord]) -> Windows:
    """Windows of ``summary``'s trace, which has no step markers (see the module docstring)."""
    if summary.steps or summary.truncated:
        return Windows(why_none="the trace has step markers or was cut short")
    if summary.n_events > MAX_COLUMN_ENTRIES:
        return Windows(why_none=f"no ProfilerStep markers, and {summary.n_events} events are too many to cut into"
                                " windows within the reader's memory budget")
    collector = StatsCollector()
    try:
        names = Names()
        for window in iter_trace_windows(Path(summary.path), StreamState()):
            timed, names = timed_window(window, names)
            collector.add_window(timed)
    except (TraceFormatError, OSError, UnicodeDecodeError) as exc:
        return Windows(why_none=f"the trace could not be read again to cut it into windows ({exc})")
    whole, _ = collector.measure()
    if not whole or whole[0].dur_us <= 0:
        return Windows(why_none="no ProfilerStep markers and no timed events to cut into windows")
    lo, hi = whole[0].start_us, whole[0].start_us + whole[0].dur_us
    base = summary.base_time_us
    logged = [(r.step, r.t_start * 1e6 - base, (r.t_end - r.t_start) * 1e6) for r in step_rows]
    inside = sorted((w for w in logged if w[2] > 0 and lo <= w[1] and w[1] + w[2] <= hi), key=lambda w: w[1])
    main = _training_thread(whole[0])
    if len(inside) >= T.MIN_PATTERN_STEPS:
        measured = collector.measure_windows(main or "", inside)
        return Windows(units=[_as_step(st, base, main, summary.has_accelerator) for st in measured], source="step log", span_us=hi - lo)
    if summary.has_device:
        lo, hi = _device_span(collector, lo, hi)
    width = (hi - lo) / T.STEPLESS_WINDOWS
    windows = [(k, lo + k * width, width) for k in range(T.STEPLESS_WINDOWS)]
    measured = collector.measure_windows(main or "", windows)
    return Windows(units=[_as_step(st, base, main, summary.has_accelerator) for st in measured], source="time", span_us=hi - lo)


def _device_span(collector: StatsCollector, lo: float, hi: float) -> tuple[float, float]:
    """From the start of the first probe window with device work to the end of the last one."""
    width = (hi - lo) / _SPAN_PROBES
    probes = collector.measure_windows("", [(k, lo + k * width, width) for k in range(_SPAN_PROBES)])
    active = [p for p in probes if p.kernels > 0 or p.device_busy_us > 0]
    if not active:
        return lo, hi
    return active[0].start_us, active[-1].start_us + active[-1].dur_us


def _training_thread(whole: StepStats) -> str | None:
    """The thread the loop runs on: the busiest host thread that is not autograd's (the backward's own)."""
    threads = [t for t in whole.threads if not t.autograd and t.ops > 0] or [t for t in whole.threads if t.ops > 0]
    return max(threads, key=lambda t: (t.busy_us, t.ops)).tid if threads else None


def _as_step(st: StepStats, base_us: float, main: str | None, accelerator: bool) -> StepSummary:
    own = next((t for t in st.threads if t.tid == main), None)
    return StepSummary(
        number=int(st.number) if st.number is not None else 0,
        start_us=st.start_us + base_us,
        dur_us=st.dur_us,
        data_wait_us=st.dataloader_wait_us,
        host_busy_us=max((t.busy_us for t in st.threads), default=0.0),
        host_ops=own.ops if own else 0,
        device_busy_us=st.device_busy_us,
        kernels=st.kernels,
        launches=st.launches,
        gpu=st if accelerator else None,
    )


__all__ = ["Windows", "stepless_windows"]
