"""Gather what the rules read from a bundle: one ``TraceSummary`` per rank, the step log, and what is missing.

Decisions where the design is silent:

* The ranks that should have a trace are ``0 .. world_size-1`` where world_size is the largest of
  ``bundle.json``'s env, the ranks in ``steps.jsonl`` and the traces' own ``distributedInfo``. A rank
  without a trace, or with a trace cut short, makes the evidence incomplete: cross-rank causes cannot
  be judged from a subset of ranks, so the diagnoser abstains (symptoms may still be shown).
* A trace that shows an accelerator (deviceProperties, runtime calls) but holds no device events was
  recorded without the device activities: the device's side of every question is missing, so the
  evidence is incomplete (the diagnoser abstains rather than judge a GPU job by its host alone).
* A trace without step markers is cut into windows (``windows.py``: the job's logged steps when
  ``steps.jsonl`` covers the trace, else equal windows of the span with device work), which the per-rank
  rules judge like steps (``units``). Windows of different ranks are not the same steps, so with more than
  one rank the cross-rank questions stay unanswered: the evidence is partial for them.
* A trace whose own events say they are wrong (``diageval.bundle.trace_defects``: several processes' steps in one
  file, steps recorded twice, events stamped ts 0, device work starting before its launch) is read but not judged: its per-step figures would be another
  rank's, doubled or misplaced, so it counts like a truncated trace (the evidence is partial, named in the reason).
  A trace whose only defect is the device's clock keeps its host side: the host's own annotations (the wait for
  data) are on the host's clock, so the input-pipeline judge still reads it (``host_side_part``).
* A host-only rank's dispatch (``launch.py``) is read off every thread that runs ops, not the main thread alone: the
  backward of a training step can run on autograd's own thread (``thread_dispatch``).
* Trace steps (``ProfilerStep#N``) are mapped to the training loop's step numbers from ``steps.jsonl``
  by time overlap (the step timer runs inside the profiler step), so findings speak in the numbers the
  training script uses. Without a usable step log the profiler's own N is used.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from array import array

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from diageval.bundle.attribution import Attribution, AttributionCollector
from diageval.bundle.attribution import top_level_spans
from diageval.bundle.model import WORLD_SIZE_LIMIT, EvidenceBundle, StepRecord
from diageval.bundle.trace_defects import DefectObserver, clock_disagreement
from diageval.bundle.trace_ids import SHORT_GAP_US
from diageval.bundle.trace_stream import TraceFormatError
from diageval.bundle.trace_summary import SHORT_OP_US, StepSummary, TraceSummary, self_times, summarize_trace
from diageval.diagnosers.rules.windows import stepless_windows
from diageval.diagnosers.rules.work import RankStepWork, WorkCollector


class CpuSample(BaseModel):
    """One rank's row of ``metrics.jsonl``: its CPU use over the interval since its previous sample (``contention``)."""

    time: float  # seconds, the clock of steps.jsonl
    cpu_percent: float = Field(ge=0)  # 100 = one core busy

    @property
    def share(self) -> float:
        return self.cpu_percent / 100.0


def cpu_samples(bundle: EvidenceBundle) -> dict[int, list[CpuSample]]:
    """Rank -> its CPU samples in time order; rows that are not a rank's sample, or do not read as one, are left out
    (a bundle brought from elsewhere may carry other rows or none)."""
    out: dict[int, list[CpuSample]] = {}
    for row in bundle.metrics():
        if not isinstance(row, dict) or row.get("scope") != "rank" or not isinstance(row.get("rank"), int):
            continue
        try:
            sample = CpuSample.model_validate({"time": row.get("time"), "cpu_percent": row.get("cpu_percent")})
        except ValueError:
            continue
        out.setdefault(row["rank"], []).append(sample)
    return {r: sorted(rows, key=lambda x: x.time) for r, rows in out.items()}


class UnitDispatch(BaseModel):
    """What a host-only unit's op threads spent on dispatch beyond the time table's main-thread launch row."""

    short_ops_us: float = Field(0.0, description="Self time of every thread's cpu_ops under SHORT_OP_US")
    short_ops: int = 0
    off_main_gaps_us: float = Field(0.0, description="Threads other than the table's main one: time between their"
                                    " top-level ops at most SHORT_GAP_US apart")
    threads: int = Field(0, description="Threads with cpu_ops in the unit")


def thread_dispatch(ops: dict[str, tuple[array, array]], main_tid: str | None,
                    windows: list[tuple[float, float]]) -> list[UnitDispatch]:
    """Per window (start, length on the trace's own clock): every op thread's short ops' self time (trace_summary's
    measure, over every thread, not the training thread's alone) and, on the threads other than ``main_tid`` (whose
    time between ops is the time table's launch row), the time between top-level ops at most SHORT_GAP_US apart
    (the table's own split of a gap; longer gaps are a thread waiting, not dispatching). An op belongs to the window it
    starts in."""
    out = [UnitDispatch() for _ in windows]
    for tid, (ts, dur) in sorted(ops.items()):
        s = np.frombuffer(ts) if len(ts) else np.zeros(0)
        d = np.frombuffer(dur) if len(dur) else np.zeros(0)
        order = np.argsort(s, kind="stable")
        s, d = s[order], d[order]
        for unit, (lo, length) in zip(out, windows):
            a, b = np.searchsorted(s, lo), np.searchsorted(s, lo + length)
            if a == b:
                continue
            unit.threads += 1
            self_t, _ = self_times(s[a:b], d[a:b])
            short = self_t[self_t < SHORT_OP_US]
            unit.short_ops += len(short)
            unit.short_ops_us += float(np.where(short > 0.0, short, 0.0).sum())
            if tid != main_tid:
                top_s, top_e = top_level_spans(s[a:b], d[a:b])
                gaps = top_s[1:] - top_e[:-1]
                unit.off_main_gaps_us += float(gaps[(gaps > 0.0) & (gaps <= SHORT_GAP_US)].sum())
    return out


class RunEvidence(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    world_size: int
    traces: dict[int, TraceSummary] = Field(default_factory=dict)
    unreadable: dict[int, str] = Field(default_factory=dict, description="rank -> why its trace could not be read")
    defects: dict[int, str] = Field(default_factory=dict, description="rank -> what its trace says is wrong with it")
    device_clock_only: list[int] = Field(default_factory=list, description="ranks whose only defect is the device's"
                                         " clock (their host events stand)")
    step_log: dict[int, list[StepRecord]] = Field(default_factory=dict, description="rank -> steps.jsonl rows")
    step_offset: dict[int, int] = Field(default_factory=dict, description="rank -> training step minus ProfilerStep N")
    device: str = "cpu"
    windows: dict[int, list[StepSummary]] = Field(default_factory=dict, description="rank -> windows of a step-less trace")
    window_source: dict[int, str] = Field(default_factory=dict, description="rank -> 'step log' or 'time'")
    no_windows: dict[int, str] = Field(default_factory=dict, description="rank -> why its step-less trace has no windows")
    work: dict[int, dict[int, RankStepWork]] = Field(
        default_factory=dict, description="rank -> profiler step -> the arithmetic of its counted ops (load_imbalance)")
    cpu_samples: dict[int, list[CpuSample]] = Field(
        default_factory=dict, description="rank -> its CPU samples from metrics.jsonl (contention.py)")
    attribution: dict[int, Attribution] = Field(
        default_factory=dict, description="rank -> its units' time tables (ranks with device events; attributed.py)")
    dispatch: dict[int, list[UnitDispatch]] = Field(
        default_factory=dict, description="host-only rank -> per unit (``units``), its op threads' dispatch (launch.py)")

    def without_attributed(self, judged: "RunEvidence | None" = None, host_only: bool = True) -> "RunEvidence":
        """The same evidence less the ranks judged by their time table in ``judged`` (default: this evidence): what the
        step-counting judges still read. A rank left out of ``judged`` (its device clock disagrees, so its table would
        misplace the device's idle) keeps its host side here. ``host_only=False`` keeps the host-only (CPU) ranks,
        whose table names only inline input work (``attributed.HOST_CAUSE_OF_PART``): the counting judges still
        read them."""
        judged = self if judged is None else judged
        table = {r for r in judged.attribution if r in judged.traces and (host_only or judged.traces[r].has_device)}
        return self.model_copy(update={"traces": {r: s for r, s in self.traces.items() if r not in table}})

    def units(self, rank: int) -> list[StepSummary]:
        """What the per-rank rules judge on ``rank``: its profiler steps, else the windows of its step-less trace."""
        s = self.traces.get(rank)
        if s is None:
            return []
        return s.steps or self.windows.get(rank, [])

    def windowed(self, rank: int) -> bool:
        s = self.traces.get(rank)
        return s is not None and not s.steps and bool(self.windows.get(rank))

    def unit_name(self, rank: int, plural: bool = True) -> str:
        """What a rank's units are called in findings: steps, logged steps or (equal-time) windows."""
        if not self.windowed(rank):
            name = "step"
        else:
            name = "logged step" if self.window_source.get(rank) == "step log" else "window"
        return name + "s" if plural else name

    def step_range(self, rank: int, first: StepSummary, last: StepSummary) -> tuple[int, int] | None:
        """Training steps [start, stop) from ``first`` to ``last``; None for equal-time windows (no step numbers)."""
        if self.windowed(rank) and self.window_source.get(rank) != "step log":
            return None
        return self.training_step(rank, first.number), self.training_step(rank, last.number) + 1

    @property
    def missing_ranks(self) -> list[int]:
        return [r for r in range(self.world_size) if r not in self.traces and r not in self.unreadable]

    @property
    def truncated(self) -> dict[int, str]:
        return {r: s.truncated for r, s in self.traces.items() if s.truncated}

    def incomplete_reason(self) -> str | None:
        """Why the traces cannot support a cross-rank judgement, or None when they can."""
        parts = []
        missing = self.missing_ranks
        if missing and len(missing) <= 8:
            parts.append(f"no trace for rank(s) {missing} of world size {self.world_size}")
        elif missing:
            parts.append(
                f"no trace for {len(missing)} of {self.world_size} ranks (traces present: {sorted(self.traces)})"
            )
        for r, why in sorted(self.unreadable.items()):
            parts.append(f"rank{r} trace unreadable ({why})")
        for r, why in sorted(self.truncated.items()):
            parts.append(f"rank{r} trace truncated ({why})")
        for r, why in sorted(self.defects.items()):
            parts.append(f"rank{r} trace inconsistent ({why})")
        blind = [r for r, s in sorted(self.traces.items()) if s.has_accelerator and not s.has_device]
        if blind:
            parts.append(
                f"rank(s) {blind}: the trace shows an accelerator ({self._accelerator_hint(blind[0])}) but holds"
                " no device events (kernels, copies): where the device's time went cannot be measured"
            )
        if not parts and self.traces and not any(s.steps for s in self.traces.values()):
            if not any(self.windows.values()):
                why = "; ".join(sorted(set(self.no_windows.values()))) or "nothing to cut into windows"
                parts.append(f"no ProfilerStep markers in any trace: per-step shares cannot be measured ({why})")
            elif len(self.traces) > 1 or self.world_size > 1:
                parts.append("no ProfilerStep markers: the ranks cannot be lined up step by step, so who waits for"
                             " whom cannot be judged (each rank's own trace is judged in windows)")
        if not self.traces and not parts:
            parts.append("the bundle holds no trace")
        return "; ".join(parts) or None

    def _accelerator_hint(self, rank: int) -> str:
        s = self.traces[rank]
        return s.devices[0] if s.devices else "runtime calls recorded"

    def intact_part(self) -> "RunEvidence":
        """The same evidence restricted to the traces that were read whole (truncated ones dropped), and
        without traces that show an accelerator but no device events (nothing about the device to judge)."""
        keep = {r: s for r, s in self.traces.items()
                if not s.truncated and r not in self.defects and not (s.has_accelerator and not s.has_device)}
        return self.model_copy(update={"traces": keep})

    def host_side_part(self) -> "RunEvidence":
        """:meth:`intact_part` plus the traces whose only defect is the device's clock: for the judges that read
        host events alone."""
        intact = self.intact_part()
        keep = {**intact.traces, **{r: self.traces[r] for r in self.device_clock_only if not self.traces[r].truncated}}
        return self.model_copy(update={"traces": keep})

    def training_step(self, rank: int, profiler_step: int) -> int:
        return profiler_step + self.step_offset.get(rank, 0)

    def trace_file(self, rank: int) -> str:
        s = self.traces.get(rank)
        return f"rank{rank}/{Path(s.path).name}" if s else f"rank{rank}"


def _step_offset(summary: TraceSummary, rows: list[StepRecord]) -> int:
    """Training step - ProfilerStep N, by which logged step each profiler step overlaps most."""
    if not rows or not summary.steps or summary.base_time_us == 0.0:
        return 0
    votes: Counter[int] = Counter()
    spans = sorted((r.t_start * 1e6, r.t_end * 1e6, r.step) for r in rows)
    for st in summary.steps:
        lo, hi = st.start_us, st.end_us
        best, best_ov = None, 0.0
        for s, e, n in spans:
            if s >= hi:
                break
            ov = min(e, hi) - max(s, lo)
            if ov > best_ov:
                best, best_ov = n, ov
        if best is not None:
            votes[best - st.number] += 1
    return votes.most_common(1)[0][0] if votes else 0


def gather_evidence(bundle: EvidenceBundle) -> RunEvidence:
    """Summarise every rank's trace once and line it up with the step log."""
    step_log: dict[int, list[StepRecord]] = {}
    for row in bundle.steps():
        step_log.setdefault(row.rank, []).append(row)
    for rows in step_log.values():
        rows.sort(key=lambda r: r.step)
    traces: dict[int, TraceSummary] = {}
    unreadable: dict[int, str] = {}
    work: dict[int, dict[int, RankStepWork]] = {}
    defects: dict[int, str] = {}
    clock_only: list[int] = []
    attributors: dict[int, AttributionCollector] = {}
    for rank, path in bundle.trace_paths().items():
        collector = WorkCollector()  # measured in the same read: each trace is read once here
        defect = DefectObserver()
        attributor = attributors[rank] = AttributionCollector()
        try:
            traces[rank] = summarize_trace(path, observers=[collector, defect, attributor])
        except (TraceFormatError, OSError) as exc:
            unreadable[rank] = str(exc)
            continue
        clock = clock_disagreement([st.gpu for st in traces[rank].steps])
        wrong = defect.findings() + ([clock] if clock else [])
        if wrong:
            defects[rank] = "; ".join(wrong)
        if clock and not defect.findings():
            clock_only.append(rank)
        per_step = collector.per_step(traces[rank])
        if per_step is not None:
            work[rank] = per_step
    declared = [bundle.world_size, *(r + 1 for r in step_log), *(r + 1 for r in traces), *(r + 1 for r in unreadable)]
    declared += [s.world_size for s in traces.values() if s.world_size and s.world_size <= WORLD_SIZE_LIMIT]
    world_size = max(declared)
    offsets = {r: _step_offset(s, step_log.get(r, [])) for r, s in traces.items()}
    windows: dict[int, list[StepSummary]] = {}
    sources: dict[int, str] = {}
    no_windows: dict[int, str] = {}
    for rank, s in traces.items():
        if s.steps or s.truncated:
            continue
        cut = stepless_windows(s, step_log.get(rank, []))
        if cut.units:
            windows[rank], sources[rank] = cut.units, cut.source
        else:
            no_windows[rank] = cut.why_none or "no windows"
    ev = RunEvidence(
        world_size=world_size,
        traces=traces,
        unreadable=unreadable,
        defects=defects,
        device_clock_only=clock_only,
        step_log=step_log,
        step_offset=offsets,
        device=bundle.env.device,
        windows=windows,
        window_source=sources,
        no_windows=no_windows,
        work=work,
        cpu_samples=cpu_samples(bundle),
    )
    for rank, s in traces.items():  # every rank's time table (attributed.py); host-only ranks split the main thread's
        units = ev.units(rank)
        if s.truncated or not units or (s.has_accelerator and not s.has_device):  # no device to split, host not it
            continue
        if ev.windowed(rank) and sources.get(rank) != "step log":  # no steps: the span with device work (or the
            windows = attributors[rank].span()  # recording of a host-only trace), as trace stats
        else:
            windows = [(st.number, st.start_us - s.base_time_us, st.dur_us) for st in units]
        ev.attribution[rank] = attributors[rank].attribute(windows)
        if not s.has_accelerator:
            ev.dispatch[rank] = thread_dispatch(attributors[rank].ops, attributors[rank].main_tid(),
                                                [(st.start_us - s.base_time_us, st.dur_us) for st in units])
    return ev
