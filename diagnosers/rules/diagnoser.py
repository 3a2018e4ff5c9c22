"""The project's own trace-analysis diagnoser: one analyser per question, causes told from symptoms.

Order of reasoning (each analyser is independent; see its module):

1. Is the evidence complete? A rank's trace missing or cut short means cross-rank questions (who waits
   for whom, recurring stalls that show on one rank and are paid on another) cannot be answered. The
   per-rank questions (input pipeline, dispatch-bound steps) still can, on the intact traces present:
   a cause they find is reported with the gap named in its summary; when they find none, abstain,
   showing only the symptoms the present traces support. (Jobs often profile a sample of ranks.)
   A GPU trace without device events is incomplete in the same way.
2. Input pipeline (``data_wait``), recurring stalls outside ops (``spikes``), dispatch-bound steps
   (``launch``: the device queue on GPU traces, op counts on CPU ones), the host blocked in synchronising
   calls while the device idles (``host_sync``), who waits for whom in collectives (``collectives``:
   straggler vs stall), and whether one rank is handed more work (``load_imbalance``: larger operator
   input shapes); a straggler claim on a rank whose extra work explains its lateness is dropped.
3. What the run looks like (``observed``), reported as ``kind: symptom``.
"""

from __future__ import annotations

from typing import ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.rules.collectives import judge_stall, judge_straggler, measure_collectives
from diageval.diagnosers.rules.data_wait import judge_data_wait, measure_data_wait
from diageval.diagnosers.rules.host_sync import judge_host_sync, measure_host_sync
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
from diageval.diagnosis import Abstention, Diagnosis, Finding


def find_local_causes(ev: RunEvidence) -> list[Finding]:
    """Causes each rank's own trace can show without its peers: the input pipeline, dispatch overhead,
    host/device synchronisation."""
    findings = [
        *judge_data_wait(measure_data_wait(ev), ev),
        *judge_launch(measure_launch(ev), ev),
        *judge_gpu_launch(measure_gpu_launch(ev), ev),
        *judge_host_sync(measure_host_sync(ev), ev),
    ]
    return sorted(findings, key=lambda f: -f.confidence)


def find_causes(ev: RunEvidence) -> list[Finding]:
    """Every cause finding the analysers support, most confident first."""
    table = measure_collectives(ev)
    findings = [
        *judge_data_wait(measure_data_wait(ev), ev),
        *judge_blocking_save(measure_spikes(ev), ev),
        *judge_launch(measure_launch(ev), ev),
        *judge_gpu_launch(measure_gpu_launch(ev), ev),
        *judge_host_sync(measure_host_sync(ev), ev),
        *judge_stall(table, ev),
    ]
    work = imbalance_table(ev, measure_work(ev))
    findings += judge_load_imbalance(work, ev)
    findings += [f for f in judge_straggler(table, ev) if not explains_straggler(work, f)]
    return sorted(findings, key=lambda f: -f.confidence)


class RulesDiagnoser:
    name: ClassVar[str] = "rules"
    version: ClassVar[str] = "0.3.0"
    # the causes its judges can name (the coverage table judges it on these as well as on all causes)
    claims: ClassVar[tuple[str, ...]] = (
        "input.dataloader_starvation", "checkpoint.blocking_save", "comm.collective_stall",
        "compute.straggler_rank", "launch.kernel_launch_overhead", "host.device_sync", "compute.load_imbalance",
    )

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        ev = gather_evidence(bundle)
        symptoms = observe_symptoms(ev)
        reason = ev.incomplete_reason()
        if reason is None:
            return Diagnosis(findings=[*find_causes(ev), *symptoms])
        local = find_local_causes(ev.intact_part())
        if local:
            partial = [f.model_copy(update={"summary": f"{f.summary} (partial evidence: {reason})"}) for f in local]
            return Diagnosis(findings=[*partial, *symptoms])
        return Diagnosis(findings=symptoms, abstain=Abstention(reason=reason))
