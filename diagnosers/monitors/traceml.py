"""``traceml``: TraceML's step-time diagnosis (``traceml-ai``) of the telemetry its monitor sent from inside
the job (``monitor/traceml-rank<N>.jsonl``: per rank and step, input wait, forward, backward, optimizer
step and the step after the batch arrived, CPU milliseconds; ``diageval.recording.monitors.traceml``).

Here, as TraceML's aggregator does outside the training processes, the rows become its
``StepTimeSourceRow``\\ s, its ``StepTimeAnalyzer`` aligns them into one window over the whole job, and
``diagnose_step_time_window`` with its summary policy (its default thresholds) returns its issues, each
with a kind, a severity (``info``, ``warn``, ``crit``) and the ranks it concerns.

Mapping (TraceML issue kind -> taxonomy):

=====================  ===========================================  ===================================
TraceML kind           finding                                      confidence
=====================  ===========================================  ===================================
``INPUT_BOUND``        ``input.dataloader_starvation``, cause       crit 0.8, warn 0.6
``INPUT_STRAGGLER``    ``input.dataloader_starvation``, cause,      crit 0.8, warn 0.6
                       its rank
``COMPUTE_STRAGGLER``  ``compute.straggler_rank``, cause, its rank  crit 0.8, warn 0.6
``STRAGGLER``          ``compute.straggler_rank``, cause, its rank  crit 0.6, warn 0.4 (TraceML: "cause
                                                                    not measured")
=====================  ===========================================  ===================================

TraceML states a severity, not a probability: ``crit`` is its score past twice its warning threshold,
so it gets the higher confidence; ``info`` issues are states, not findings. Not mapped, with why:
``COMPUTE_BOUND`` (the device busy with the model: the healthy state of a training job), ``BALANCED``,
``RESIDUAL_HEAVY`` (time outside the measured phases: TraceML does not say what it is),
``H2D_BOUND``/``H2D_STRAGGLER`` (host-to-device copies: no taxonomy cause names them). ``NO_DATA``,
``WARMUP`` and ``INCOMPLETE_DATA``: abstain with TraceML's reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import installed_version, require_module
from diageval.diagnosers.monitors.raw import monitor_folder, read_jsonl
from diageval.diagnosis import Abstention, Diagnosis, Finding

DISTRIBUTION = "traceml-ai"
INSTALL_HINT = "pip install 'diageval[traceml]'"
ROWS_GLOB = "traceml-rank*.jsonl"  # as diageval.recording.monitors.traceml writes them (a test checks)

CAUSES = {  # TraceML kind -> (taxonomy cause, confidence at crit, at warn)
    "INPUT_BOUND": ("input.dataloader_starvation", 0.8, 0.6),
    "INPUT_STRAGGLER": ("input.dataloader_starvation", 0.8, 0.6),
    "COMPUTE_STRAGGLER": ("compute.straggler_rank", 0.8, 0.6),
    "STRAGGLER": ("compute.straggler_rank", 0.6, 0.4),
}
ABSTAIN_KINDS = ("NO_DATA", "WARMUP", "INCOMPLETE_DATA")


class TraceMLDiagnoser:
    """TraceML's step-time diagnosis of its in-job telemetry (see the module docstring)."""

    name = "traceml"
    version = f"1+traceml-ai-{installed_version(DISTRIBUTION)}"
    claims: ClassVar[tuple[str, ...]] = ("compute.straggler_rank", "input.dataloader_starvation")

    def __init__(self) -> None:
        require_module("traceml_ai.diagnostics.step_time.api", self.name, DISTRIBUTION, INSTALL_HINT)

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        folder = monitor_folder(bundle)
        rows = [row for path in sorted(folder.glob(ROWS_GLOB)) for row in read_jsonl(path)]
        if not rows:
            return Diagnosis(abstain=Abstention(reason="TraceML's monitor sent no step telemetry"))
        result = traceml_diagnosis(rows)
        primary = result.primary
        if primary.kind in ABSTAIN_KINDS:
            return Diagnosis(abstain=Abstention(reason=f"TraceML {primary.status}: {primary.reason}"))
        return Diagnosis(findings=findings_from_issues(result.issues, _steps(rows)))


def traceml_diagnosis(rows: list[dict[str, Any]]) -> Any:
    """TraceML's summary diagnosis of the rows (its analyzer and rules, its summary policy)."""
    from traceml_ai.diagnostics.step_time.api import diagnose_step_time_window
    from traceml_ai.diagnostics.step_time.policy import SUMMARY_STEP_TIME_POLICY
    from traceml_ai.step_time.analysis import StepTimeAnalyzer
    from traceml_ai.step_time.model import StepTimeClockValues, StepTimeRepositorySnapshot, StepTimeSourceRow

    world = max(int(r.get("world_size", 1)) for r in rows)
    source = tuple(
        StepTimeSourceRow(source_id=i, global_rank=int(r["rank"]), step=int(r["step"]),
                          metrics={k: StepTimeClockValues(cpu_ms=float(v), gpu_ms=None) for k, v in r["cpu_ms"].items()})
        for i, r in enumerate(rows)
    )
    snapshot = StepTimeRepositorySnapshot(rows=source, global_ranks=tuple(range(world)), training_strategy="ddp")
    window = StepTimeAnalyzer().analyze(snapshot, window_size=None)
    return diagnose_step_time_window(window, policy=SUMMARY_STEP_TIME_POLICY)


def _steps(rows: list[dict[str, Any]]) -> tuple[int, int]:
    steps = [int(r["step"]) for r in rows]
    return min(steps), max(steps) + 1


def findings_from_issues(issues: Any, steps: tuple[int, int]) -> list[Finding]:
    """The module docstring's table over TraceML's issues (the strongest claim per cause and ranks)."""
    best: dict[tuple[str, tuple[int, ...]], Finding] = {}
    for issue in issues:
        mapped = CAUSES.get(issue.kind)
        if mapped is None or issue.severity not in ("crit", "warn"):
            continue
        cause, crit, warn = mapped
        ranks = tuple(sorted(int(r) for r in issue.ranks)) if issue.kind != "INPUT_BOUND" else ()
        conf = crit if issue.severity == "crit" else warn
        key = (cause, ranks)
        if key in best and best[key].confidence >= conf:
            continue
        best[key] = Finding(category=cause, kind="cause", confidence=conf, ranks=list(ranks) or None, steps=steps,
                            summary=f"TraceML {issue.status} ({issue.severity}): {issue.summary}"[:300],
                            evidence=[f"monitor/{ROWS_GLOB}: {issue.kind}" + (f", score {issue.score:.2f}" if issue.score is not None else "")])
    return list(best.values())
