"""``hta-tracediff``: HolisticTraceAnalysis' ``TraceDiff`` (PyPI ``traceinsight``, the ``hta`` extra) on a
regression pair: the baseline run's traces against the candidate's, op by op.

What it runs: ``hta.trace_diff.TraceDiff.compare_traces`` on rank 0 of both runs (the rank every job traces),
every profiled step of each (``control_iteration`` / ``test_iteration``: all of them), CPU ops and GPU
kernels (``DeviceType.ALL``), full names. Its table has per op name the counts and total duration on each
side. From it:

* **The regression**: the mean ``ProfilerStep#N`` duration of the candidate over the baseline's (the
  magnitude). Without profiled steps, the medians of the runs' logged step times (``steps.jsonl``). Under
  1.1 (a tenth of the step, the bar every built-in uses for the smallest loss worth naming) it says
  nothing: one pair has no run-to-run noise to judge a smaller change against.
* **The factor**: the pair differs in one declared factor (``fleet.json``); the candidate's value of it is
  named on every finding. The slowdown itself is reported as ``symptom.slow_step`` at 0.9 (measured, but
  one pair can be a fluke).
* **Why** (what the candidate's trace has that the baseline's does not):

  ===========================================================  ========================================
  what the diff shows                                          cause, confidence
  ===========================================================  ========================================
  ops only in the candidate named like Python frames           ``measurement.profiler_overhead``, 0.8
  (``file.py(123): fn``): the profiler records stacks          (the bookkeeping is what makes it slower;
                                                               not 0.95: the frames prove how it was
                                                               measured, not that this is all the cost)
  more compiled-region or compiler ops (``Torch-Compiled``,    ``compile.recompilation``, 0.8
  ``Dynamo``, ``Inductor``, ``CompiledFunction``)
  DataLoader ops longer by at least a tenth of a baseline      ``input.dataloader_starvation``, the
  step per step                                                share of the step-time increase they
                                                               explain (at most 0.95)
  collective ops (``all_reduce``, ``gloo``, ``nccl``, ...)      ``comm.collective_stall``, the same
  longer by at least a tenth of a baseline step per step
  ===========================================================  ========================================

Never claims: the causes a diff of op names and durations cannot show (the same ops at another speed: a
numeric type, a thread count, a contended host look alike), and any cause on a fleet (more than two runs)
or on one job's evidence, where it says nothing.
"""

from __future__ import annotations

import re
from statistics import median
from typing import ClassVar

from diageval.bundle.fleet import Fleet, read_fleet
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserUnavailable, installed_version
from diageval.diagnosers.hta_adapter import INSTALL_HINT, _load_trace, _quiet_hta, _step
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding

MIN_REGRESSION = 1.1
SLOWDOWN_CONFIDENCE = 0.9
MARK_CONFIDENCE = 0.8
MAX_CONFIDENCE = 0.95
MIN_SHARE = 0.1
PYTHON_FRAME = re.compile(r"\.py\(\d+\): ")
COMPILER = re.compile(r"Torch-Compiled|Dynamo|Inductor|CompiledFunction", re.IGNORECASE)
DATALOADER = re.compile(r"DataLoader", re.IGNORECASE)
COLLECTIVE = re.compile(r"all_reduce|allreduce|all_gather|reduce_scatter|broadcast|gloo|nccl", re.IGNORECASE)


def changed_value(fleet: Fleet) -> FactorRef | None:
    """The candidate's value of the one factor the pair differs in (None if it differs in none)."""
    base, cand = fleet.role("baseline"), fleet.role("candidate")
    differ = [k for k in fleet.factors if base.metadata[k] != cand.metadata[k]]
    return FactorRef(name=differ[0], value=cand.metadata[differ[0]]) if differ else None


def _logged_median(bundle: EvidenceBundle) -> float | None:
    per_step: dict[int, float] = {}
    for s in bundle.steps():
        per_step[s.step] = max(per_step.get(s.step, 0.0), s.duration)
    return median(per_step.values()) if per_step else None


class TraceDiffDiagnoser:
    """HTA's TraceDiff on a regression pair (see the module docstring)."""

    name: ClassVar[str] = "hta-tracediff"
    version: ClassVar[str] = f"1+traceinsight-{installed_version('traceinsight')}"
    claims: ClassVar[tuple[str, ...]] = ("measurement.profiler_overhead", "compile.recompilation",
                                         "input.dataloader_starvation", "comm.collective_stall")

    def __init__(self) -> None:
        try:
            import hta.trace_diff  # noqa: F401
        except ImportError as exc:
            raise DiagnoserUnavailable(f"the hta-tracediff diagnoser needs HolisticTraceAnalysis (traceinsight) "
                                       f"({exc}); install it with: {INSTALL_HINT}") from exc

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        fleet = read_fleet(bundle)
        if fleet is None or not fleet.is_regression:
            return Diagnosis()
        value = changed_value(fleet)
        runs = {role: fleet.open_run(fleet.role(role).name) for role in ("baseline", "candidate")}
        missing = [role for role, b in runs.items() if 0 not in b.trace_paths()]
        if missing:
            return Diagnosis(abstain=Abstention(reason=f"no rank-0 trace in the {' and '.join(missing)} run: nothing "
                                                       "for TraceDiff to compare"))
        table = self._diff(runs)
        steps = {side: table[table.index.str.startswith("ProfilerStep#")][f"{side}_counts"].sum() for side in runs}
        step_us = {side: table[table.index.str.startswith("ProfilerStep#")][f"{side}_total_duration"].sum()
                   / max(steps[side], 1) for side in runs}
        if all(steps.values()) and step_us["baseline"] > 0:
            ratio, source = step_us["candidate"] / step_us["baseline"], "TraceDiff's ProfilerStep durations"
        else:
            logged = {side: _logged_median(b) for side, b in runs.items()}
            if not logged["baseline"] or not logged["candidate"]:
                return Diagnosis(abstain=Abstention(reason="neither profiled steps nor logged steps to measure the pair"))
            ratio, source = logged["candidate"] / logged["baseline"], "the logged step times' medians"
            steps = {side: 1 for side in runs}
            step_us = {"baseline": logged["baseline"] * 1e6, "candidate": logged["candidate"] * 1e6}
        if ratio < MIN_REGRESSION:
            return Diagnosis()
        where = f"{value.name}={value.value}" if value else "the candidate"
        common = dict(factor=value, magnitude=round(ratio, 4))
        findings = [Finding(category="symptom.slow_step", kind="symptom", confidence=SLOWDOWN_CONFIDENCE,
                            summary=f"the candidate ({where}) takes {ratio:.2f}x the baseline's step time ({source})",
                            **common)]
        findings += self._causes(table, steps, step_us, ratio, where, common)
        return Diagnosis(findings=sorted(findings, key=lambda f: (f.kind != "cause", -f.confidence)))

    @staticmethod
    def _diff(runs: dict[str, EvidenceBundle]):
        from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

        with _quiet_hta():
            traces = {side: _step(f"loading the {side} trace", 0, lambda b=b: _load_trace({0: str(b.trace_paths()[0])}))
                      for side, b in runs.items()}
            labeled = {side: _step(f"indexing the {side} trace", 0, lambda t=t, side=side: LabeledTrace(label=side, t=t))
                       for side, t in traces.items()}
            return _step("comparing the traces", 0, lambda: TraceDiff.compare_traces(
                labeled["baseline"], labeled["candidate"], control_iteration=labeled["baseline"].iterations() or None,
                test_iteration=labeled["candidate"].iterations() or None, device_type=DeviceType.ALL))

    @staticmethod
    def _causes(table, steps: dict[str, float], step_us: dict[str, float], ratio: float, where: str,
                common: dict) -> list[Finding]:
        names = table.index.astype(str)
        only_new = table[(table["baseline_counts"] == 0) & (table["candidate_counts"] > 0)]
        out = []
        frames = [n for n in only_new.index.astype(str) if PYTHON_FRAME.search(n)]
        if frames:
            out.append(Finding(category="measurement.profiler_overhead", kind="cause", confidence=MARK_CONFIDENCE,
                               summary=f"the candidate ({where}) is {ratio:.2f}x slower and its trace records Python "
                                       f"frames the baseline's does not ({len(frames)} of them): it is profiled with "
                                       "stacks, and measured in more detail", evidence=frames[:4], **common))
        compiled = table[names.str.contains(COMPILER) & (table["diff_counts"] > 0)]
        if len(compiled):
            out.append(Finding(category="compile.recompilation", kind="cause", confidence=MARK_CONFIDENCE,
                               summary=f"the candidate ({where}) runs compiler regions more often than the baseline "
                                       f"(+{int(compiled['diff_counts'].sum())})",
                               evidence=[str(n) for n in compiled.index[:4]], **common))
        increase = step_us["candidate"] - step_us["baseline"]
        for pattern, category, what in ((DATALOADER, "input.dataloader_starvation", "DataLoader ops"),
                                        (COLLECTIVE, "comm.collective_stall", "collective ops")):
            rows = table[names.str.contains(pattern)]
            if not len(rows):
                continue
            per_step = (rows["candidate_total_duration"].sum() / max(steps["candidate"], 1)
                        - rows["baseline_total_duration"].sum() / max(steps["baseline"], 1))
            if per_step < MIN_SHARE * step_us["baseline"] or increase <= 0:
                continue
            out.append(Finding(category=category, kind="cause",
                               confidence=round(min(MAX_CONFIDENCE, per_step / increase), 3),
                               summary=f"the candidate's {what} take {per_step / 1e3:.1f} ms more per step, "
                                       f"{per_step / increase:.0%} of its step-time increase",
                               evidence=[str(n) for n in rows.index[:4]], **common))
        return out
