"""``hta-tracediff``: HolisticTraceAnalysis' ``TraceDiff`` (PyPI ``traceinsight``, the ``hta`` extra) on a
regression pair: the baseline run's traces against the candidate's, op by op.

What it runs: ``hta.trace_diff.TraceDiff.compare_traces`` on rank 0 of both runs (the rank every job traces),
every profiled step of each (``control_iteration`` / ``test_iteration``: all of them), CPU ops and GPU
kernels (``DeviceType.ALL``), full names. Its table has per op name the counts and total duration on each
side. From it:

* **The regression**: the median ``ProfilerStep#N`` duration of the candidate over the baseline's (the
  magnitude; a median, as every run level here: a few stray slow steps are not the run's speed). Without
  profiled steps, the medians of the runs' logged step times (``steps.jsonl``). Under
  1.1 (a tenth of the step, the bar every built-in uses for the smallest loss worth naming) it says
  nothing. One pair cannot show how far two runs of an unchanged job drift apart, so the chance that the
  regression is real is Φ((ln ratio − ln 1.1) / PAIR_SHIFT_SD) (``pair_drift.beyond_drift``), with
  PAIR_SHIFT_SD the spread of that drift (the log ratio of two back-to-back healthy recordings on a loaded
  shared machine, 0.19, measured by the harness: ``recording/manifest_test.RECORDING_SHIFT_SD``), widened by
  the standard errors of the two medians from the runs' own steps. Every confidence below is multiplied by it.
* **The factor**: the pair differs in one declared factor (``fleet.json``); the candidate's value of it is
  named on every finding. The slowdown itself is reported as ``symptom.slow_step`` at that chance.
* **Why** (what the candidate's trace has that the baseline's does not). Only ops count: a Python frame
  (``file.py(123): fn``, recorded by ``with_stack``) is not an op, and its file name says which code ran, not
  which op got slower (``torch/utils/data/dataloader.py(...)`` frames are not DataLoader ops, nor
  ``torch/_dynamo/...`` frames compiled regions):

  ===========================================================  ========================================
  what the diff shows                                          cause, confidence (× the chance above)
  ===========================================================  ========================================
  ops only in the candidate named like Python frames           ``measurement.profiler_overhead``, 0.8
  (``file.py(123): fn``): the profiler records stacks          (the bookkeeping is what makes it slower;
                                                               not 0.95: the frames prove how it was
                                                               measured, not that this is all the cost)
  more compiled-region or compiler ops (``Torch-Compiled``,    ``compile.recompilation``, 0.8
  ``Dynamo``, ``Inductor``, ``CompiledFunction``)
  DataLoader ops longer, beyond their share of a step slowed   ``input.dataloader_starvation``, the
  by the ratio, by at least a tenth of a baseline step per     share of the step-time increase that
  step                                                         excess explains (at most 0.95)
  collective ops (``all_reduce``, ``gloo``, ``nccl``, ...)      ``comm.collective_stall``, the same
  longer beyond their share, the same way
  ===========================================================  ========================================

  "Beyond their share": when a host is contended or a machine slower, every op takes longer in proportion,
  the DataLoader's wait and the collectives included; an op that grew by the step's own ratio explains
  none of the increase (on a recorded contended-host pair the DataLoader op grew 4.1x with a 4.1x step).

Never claims: the causes a diff of op names and durations cannot show (the same ops at another speed: a
numeric type, a thread count, a contended host look alike), and any cause on a fleet (more than two runs)
or on one job's evidence, where it says nothing.
"""

from __future__ import annotations

import math
import re
from statistics import median
from typing import ClassVar

from diageval.bundle.fleet import Fleet, read_fleet
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import installed_version, require_module
from diageval.diagnosers.hta_adapter import INSTALL_HINT, _load_trace, _quiet_hta, _step
from diageval.diagnosers.pair_drift import beyond_drift
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding

MIN_REGRESSION = 1.1
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


def _logged_times(bundle: EvidenceBundle) -> list[float]:
    """Per logged step, the slowest rank's duration (seconds)."""
    per_step: dict[int, float] = {}
    for s in bundle.steps():
        per_step[s.step] = max(per_step.get(s.step, 0.0), s.duration)
    return [per_step[k] for k in sorted(per_step)]


def _median_se(times: list[float]) -> float:
    """Standard error of the median of log ``times`` (1.2533 sd / sqrt(n), the normal's), 0 under two steps."""
    logs = [math.log(t) for t in times if t > 0]
    if len(logs) < 2:
        return 0.0
    mean = sum(logs) / len(logs)
    return 1.2533 * math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)) / math.sqrt(len(logs))


class TraceDiffDiagnoser:
    """HTA's TraceDiff on a regression pair (see the module docstring)."""

    name: ClassVar[str] = "hta-tracediff"
    version: ClassVar[str] = f"2+traceinsight-{installed_version('traceinsight')}"
    claims: ClassVar[tuple[str, ...]] = ("measurement.profiler_overhead", "compile.recompilation",
                                         "input.dataloader_starvation", "comm.collective_stall")

    def __init__(self) -> None:
        require_module("hta.trace_diff", self.name, "HolisticTraceAnalysis (traceinsight)", INSTALL_HINT)

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
        durations: dict[str, list[float]] = {side: [] for side in runs}
        if table is not None:
            profiled = table[table.index.str.startswith("ProfilerStep#")]
            durations = {side: [float(d) for c, d in zip(profiled[f"{side}_counts"], profiled[f"{side}_total_duration"])
                                if c > 0 and d > 0] for side in runs}
        steps = {side: len(durations[side]) for side in runs}
        step_us = {side: sum(durations[side]) / max(steps[side], 1) for side in runs}
        if all(steps.values()):
            ratio, source = median(durations["candidate"]) / median(durations["baseline"]), \
                "the median ProfilerStep durations of TraceDiff's table"
            spread = math.sqrt(sum(_median_se(durations[side]) ** 2 for side in runs))
        else:
            logged = {side: _logged_times(b) for side, b in runs.items()}
            if not logged["baseline"] or not logged["candidate"]:
                return Diagnosis()  # no step to measure the pair by: TraceDiff says nothing (the case may be judged
                #                     on other evidence; not an abstention, which says the case cannot be)
            ratio, source = median(logged["candidate"]) / median(logged["baseline"]), "the logged step times' medians"
            spread = math.sqrt(sum(_median_se(logged[side]) ** 2 for side in runs))
            steps = {side: 1 for side in runs}
            step_us = {side: median(logged[side]) * 1e6 for side in runs}
        if ratio < MIN_REGRESSION:
            return Diagnosis()
        where = f"{value.name}={value.value}" if value else "the candidate"
        common = dict(factor=value, magnitude=round(ratio, 4))
        real = beyond_drift(ratio, spread)
        findings = [Finding(category="symptom.slow_step", kind="symptom", confidence=round(real, 3),
                            summary=f"the candidate ({where}) takes {ratio:.2f}x the baseline's step time ({source}); "
                                    f"beyond two runs' drift with probability {real:.2f}", **common)]
        if table is not None:
            findings += self._causes(table, steps, step_us, ratio, where, common, real)
        findings = [f for f in findings if f.confidence > 0]
        return Diagnosis(findings=sorted(findings, key=lambda f: (f.kind != "cause", -f.confidence)))

    @staticmethod
    def _diff(runs: dict[str, EvidenceBundle]):
        from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

        with _quiet_hta():
            traces = {side: _step(f"loading the {side} trace", 0, lambda b=b: _load_trace({0: str(b.trace_paths()[0])}))
                      for side, b in runs.items()}
            labeled = {side: _step(f"indexing the {side} trace", 0, lambda t=t, side=side: LabeledTrace(label=side, t=t))
                       for side, t in traces.items()}
            if not all(t.iterations() for t in labeled.values()):
                return None  # TraceDiff compares iterations (ProfilerStep#N): a trace without them has none to compare
            return _step("comparing the traces", 0, lambda: TraceDiff.compare_traces(
                labeled["baseline"], labeled["candidate"], control_iteration=labeled["baseline"].iterations() or None,
                test_iteration=labeled["candidate"].iterations() or None, device_type=DeviceType.ALL))

    @staticmethod
    def _causes(table, steps: dict[str, float], step_us: dict[str, float], ratio: float, where: str,
                common: dict, real: float) -> list[Finding]:
        only_new = table[(table["baseline_counts"] == 0) & (table["candidate_counts"] > 0)]
        out = []
        frames = [n for n in only_new.index.astype(str) if PYTHON_FRAME.search(n)]
        table = table[~table.index.astype(str).str.contains(PYTHON_FRAME)]  # ops only, frames are not ops
        names = table.index.astype(str)
        if frames:
            out.append(Finding(category="measurement.profiler_overhead", kind="cause",
                               confidence=round(MARK_CONFIDENCE * real, 3),
                               summary=f"the candidate ({where}) is {ratio:.2f}x slower and its trace records Python "
                                       f"frames the baseline's does not ({len(frames)} of them): it is profiled with "
                                       "stacks, and measured in more detail", evidence=frames[:4], **common))
        compiled = table[names.str.contains(COMPILER) & (table["diff_counts"] > 0)]
        if len(compiled):
            out.append(Finding(category="compile.recompilation", kind="cause", confidence=round(MARK_CONFIDENCE * real, 3),
                               summary=f"the candidate ({where}) runs compiler regions more often than the baseline "
                                       f"(+{int(compiled['diff_counts'].sum())})",
                               evidence=[str(n) for n in compiled.index[:4]], **common))
        increase = step_us["candidate"] - step_us["baseline"]
        for pattern, category, what in ((DATALOADER, "input.dataloader_starvation", "DataLoader ops"),
                                        (COLLECTIVE, "comm.collective_stall", "collective ops")):
            rows = table[names.str.contains(pattern)]
            if not len(rows):
                continue
            base = rows["baseline_total_duration"].sum() / max(steps["baseline"], 1)
            cand = rows["candidate_total_duration"].sum() / max(steps["candidate"], 1)
            grown = step_us["candidate"] / step_us["baseline"] if step_us["baseline"] > 0 else 1.0
            per_step = cand - base * grown  # beyond growing with the (mean) step (module docstring)
            if per_step < MIN_SHARE * step_us["baseline"] or increase <= 0:
                continue
            out.append(Finding(category=category, kind="cause",
                               confidence=round(real * min(MAX_CONFIDENCE, per_step / increase), 3),
                               summary=f"the candidate's {what} take {(cand - base) / 1e3:.1f} ms more per step, "
                                       f"{per_step / 1e3:.1f} ms beyond their share of a step {grown:.2f}x longer: "
                                       f"{per_step / increase:.0%} of its step-time increase",
                               evidence=[str(n) for n in rows.index[:4]], **common))
        return out
