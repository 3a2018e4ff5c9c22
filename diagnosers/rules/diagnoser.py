"""The project's own trace-analysis diagnoser: one analyser per question, causes told from symptoms.

Order of reasoning (each analyser is independent; see its module):

1. Is the evidence complete? A rank's trace missing or cut short, a step-less trace whose ranks cannot be
   lined up step by step, or a GPU trace without device events means the cross-rank questions (who waits
   for whom, recurring stalls that show on one rank and are paid on another) cannot be answered. The
   per-rank questions (input pipeline, dispatch-bound steps, blocking calls) still can, on the intact traces
   present: a cause they find is reported with the gap named in its summary.
2. On a rank with device events, the time table (``attributed``; the table is ``diageval.bundle.attribution``, the
   one ``diageval trace stats`` prints): each step's (or the span's) wall time split into device work and, for every
   device-idle instant, what the launching threads did; the input pipeline (a DataLoader wait, or CPU work before
   the step's first kernel), synchronising calls, frees and allocations, and dispatch with an empty queue are
   named from their share, with a standard error from the occurrences they are made of. On CPU traces the
   same table splits the main thread's time and names input made inline (Python before the step's first op, no
   DataLoader) and dispatch (time between ops) where the op count (``launch``) does not; the DataLoader wait stays
   with ``data_wait``; a CPU rank whose matrix products and convolutions took more wall time than the process got CPU
   time (``metrics.jsonl``) was held off its cores (``contention``). On every trace: recurring stalls
   outside ops (``spikes``), who waits for whom in
   collectives (``collectives``: straggler vs stall), and whether one rank is handed more work
   (``load_imbalance``: larger operator input shapes); a straggler claim on a rank whose extra work explains
   its lateness is dropped. A trace without step markers is judged in windows (``windows``). Confidence is
   graded (``stats.graded_confidence``): a run just under a cut is named just under 0.5, with the symptom
   it shows beside it.
3. No cause found: is that health, or does the evidence not say (``evidence``)? On a rank with device events the
   evidence is too little only where a share that would matter cannot be told from none (its occurrences too
   few or too uneven), or where the idle sits outside every recorded host op; on a CPU trace, where a rank has
   too few steps (or windows) with evidence in them. With too little evidence, or ranks missing, the diagnosis
   is healthy only if every present rank's own trace bounds what could hide (device idle plus exposed
   communication under the smallest cause worth naming); otherwise it abstains, saying why.
4. What the run looks like (``observed``), reported as ``kind: symptom``.

Every cause cites its evidence (``cites``: the ranks and steps its analyser measured it on), which scoring's
grounding checks against where the fault acted (:mod:`diageval.scoring.grounding`).

A bundle with ``fleet.json`` (a regression pair or a fleet of runs) is judged by ``fleet``: which factor
value the slow runs share, then this analysis on each run for why.
"""

from __future__ import annotations

from typing import ClassVar

from diageval.bundle.fleet import read_fleet
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.rules.attributed import judge_attributed, measure_tables, thin_parts, unexplained
from diageval.diagnosers.rules.collectives import judge_stall, judge_straggler, measure_collectives
from diageval.diagnosers.rules.contention import judge_contention, measure_contention
from diageval.diagnosers.rules.data_wait import judge_data_wait, measure_data_wait
from diageval.diagnosers.rules.evidence import bounded_below_a_cause, describe_bound, reach, too_little_evidence
from diageval.diagnosers.rules.fleet import diagnose_fleet
from diageval.diagnosers.rules.host_sync import (
    judge_allocator_churn,
    judge_host_sync,
    measure_allocator_churn,
    measure_host_sync,
)
from diageval.diagnosers.rules.inputs import RunEvidence, gather_evidence
from diageval.diagnosers.rules.launch import judge_gpu_launch, judge_launch, measure_gpu_launch, measure_launch
from diageval.diagnosers.rules.load_imbalance import (
    explains_straggler,
    imbalance_table,
    judge_load_imbalance,
    measure_work,
)
from diageval.diagnosers.rules.observed import observe_symptoms
from diageval.diagnosers.rules.spikes import judge_blocking_save, measure_spikes
from diageval.diagnosis import Abstention, Citation, Diagnosis, Finding

# The symptom a cause shows first (taxonomy 1.2's symptom lists), reported beside a cause named under its cut.
BELOW_CUT_SYMPTOM = {
    "input.dataloader_starvation": "symptom.slow_step",
    "checkpoint.blocking_save": "symptom.step_time_spikes",
    "comm.collective_stall": "symptom.long_collective",
    "compute.straggler_rank": "symptom.long_collective",
    "launch.kernel_launch_overhead": "symptom.low_utilization",
    "host.device_sync": "symptom.low_utilization",
    "memory.allocator_churn": "symptom.low_utilization",
    "compute.load_imbalance": "symptom.long_collective",
    "host.cpu_contention": "symptom.slow_step",
}


def find_local_causes(ev: RunEvidence, host_side: RunEvidence | None = None) -> list[Finding]:
    """Causes each rank's own trace can show without its peers: the input pipeline, dispatch overhead,
    host/device synchronisation, allocator churn. ``host_side``: the evidence the input-pipeline judge reads
    (host events alone), when it holds more than ``ev`` (a trace whose device clock alone is off)."""
    host_side = (ev if host_side is None else host_side).without_attributed(ev, host_only=False)
    # ranks with device events are judged by their time table (attributed.py); host-only ranks by theirs for the input
    # pipeline alone, by the counting judges for the rest
    counted = ev.without_attributed(host_only=False)
    findings = [
        *judge_data_wait(measure_data_wait(host_side), host_side),
        *judge_launch(measure_launch(counted), counted),
        *judge_gpu_launch(measure_gpu_launch(counted), counted),
        *judge_host_sync(measure_host_sync(counted), counted),
        *judge_allocator_churn(measure_allocator_churn(counted), counted),
        *judge_contention(measure_contention(ev), ev),
    ]
    named: dict[int, set[str]] = {}
    for f in findings:
        for rank in f.ranks or []:
            named.setdefault(rank, set()).add(f.category)
    findings += judge_attributed(measure_tables(ev), ev, named)
    return sorted(findings, key=lambda f: -f.confidence)


def find_causes(ev: RunEvidence) -> list[Finding]:
    """Every cause finding the analysers support, most confident first."""
    table = measure_collectives(ev)
    findings = [
        *find_local_causes(ev),
        *judge_blocking_save(measure_spikes(ev), ev),
        *judge_stall(table, ev),
    ]
    work = imbalance_table(ev, measure_work(ev))
    findings += judge_load_imbalance(work, ev)
    findings += [f for f in judge_straggler(table, ev) if not explains_straggler(work, f)]
    return sorted(findings, key=lambda f: -f.confidence)


def below_cut_symptoms(causes: list[Finding], symptoms: list[Finding]) -> list[Finding]:
    """For a cause named under its cut (confidence < 0.5), the symptom it shows, when not already reported."""
    shown = {f.category for f in symptoms}
    out = []
    for f in causes:
        category = BELOW_CUT_SYMPTOM.get(f.category)
        if f.confidence >= 0.5 or category is None or category in shown:
            continue
        shown.add(category)
        out.append(f.model_copy(update={
            "category": category, "kind": "symptom",
            "summary": f"{f.summary} (under the cut for naming it as the cause)",
        }))
    return out


def cited(finding: Finding) -> Finding:
    """The finding citing its evidence (issue 41): the ranks and steps its analyser measured it on are where a
    person checks it in the bundle."""
    if finding.cites is not None or (finding.ranks is None and finding.steps is None):
        return finding
    return finding.model_copy(update={"cites": Citation(ranks=finding.ranks, steps=finding.steps)})


class RulesDiagnoser:
    name: ClassVar[str] = "rules"
    version: ClassVar[str] = "0.7.3"
    # the causes its judges can name (the coverage table judges it on these as well as on all causes)
    claims: ClassVar[tuple[str, ...]] = (
        "input.dataloader_starvation", "checkpoint.blocking_save", "comm.collective_stall",
        "compute.straggler_rank", "launch.kernel_launch_overhead", "host.device_sync", "compute.load_imbalance",
        "memory.allocator_churn", "measurement.profiler_overhead", "compute.numeric_precision", "compile.recompilation",
        "host.cpu_contention",
    )

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        fleet = read_fleet(bundle)
        return diagnose_fleet(fleet, self.diagnose_job) if fleet is not None else self.diagnose_job(bundle)

    def diagnose_job(self, bundle: EvidenceBundle) -> Diagnosis:
        ev = gather_evidence(bundle)
        symptoms = observe_symptoms(ev)
        reason = ev.incomplete_reason()
        if reason is None:
            causes = find_causes(ev)
            judged = ev
        else:
            judged = ev.intact_part()
            causes = [f.model_copy(update={"summary": f"{f.summary} (partial evidence: {reason})"})
                      for f in find_local_causes(judged, ev.host_side_part())]
        causes = [cited(f) for f in causes]
        symptoms += below_cut_symptoms(causes, symptoms)
        if any(f.confidence >= 0.5 for f in causes):
            return Diagnosis(findings=[*causes, *symptoms])
        # no cause named with confidence: healthy, or does the evidence not say?
        tables = measure_tables(judged)
        rows = reach(judged, {t.rank: 1.0 - t.rows["compute"].share for t in tables if not t.host_only})
        # a host-only rank whose table separates its parts keeps the step count's question (the table answers the
        # input pipeline's alone); a device rank's table answers for every cause
        thin = too_little_evidence(rows, {t.rank: why for t in tables
                                          for why in [thin_parts(t, judged)] if why or not t.host_only})
        gaps = [why for why in (reason, thin, *[unexplained(t) for t in tables]) if why]
        blind = any(t.host_events == 0 for t in tables)  # nothing bounds what a window without host events misses
        if not gaps or (bounded_below_a_cause(rows) and not blind):
            return Diagnosis(findings=[*causes, *symptoms])
        if rows and reason is not None and thin is None:
            gaps.append(f"what the present traces bound is too large to call the job healthy: {describe_bound(rows)}")
        # an abstention claims no cause (the contract): what was graded under the cut stays readable in the reason,
        # and as its symptom where it has one (below_cut_symptoms, above)
        if causes:
            gaps.append("under the cut for naming a cause: " + ", ".join(f"{f.category} {f.confidence:.2f}" for f in causes))
        return Diagnosis(findings=symptoms, abstain=Abstention(reason="; ".join(gaps)))
