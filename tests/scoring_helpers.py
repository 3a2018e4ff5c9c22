"""Hand-built cases and diagnoses for the scoring, metrics and report tests (no recording, no corpus)."""

from __future__ import annotations

from diageval.cases.model import Case
from diageval.diagnosis import Diagnosis, Finding


def make_case(case_id: str, causes=(), *, expect=None, symptoms=(), world_size=2) -> Case:
    """A case labeled with ``causes`` (dicts of category/ranks); healthy when there are none."""
    expect = expect or ("diagnose" if causes else "healthy")
    data = {
        "id": case_id,
        "title": f"hand-built {case_id}",
        "workload": {"name": "mlp_ddp", "world_size": world_size, "steps": 40},
        "faults": [{"name": "slow_rank", "params": {}}] if expect != "healthy" else [],
        "labels": {"causes": list(causes), "symptoms": list(symptoms), "expect": expect},
    }
    if expect == "diagnose":
        data["manifest"] = {"metric": "step_time_median", "min_ratio": 1.3}
    return Case.model_validate(data)


def cause(category: str, confidence: float = 0.5, ranks=None, impact=None) -> Finding:
    return Finding(category=category, kind="cause", confidence=confidence, ranks=ranks, impact=impact)


def symptom(category: str, confidence: float = 0.5) -> Finding:
    return Finding(category=category, kind="symptom", confidence=confidence)


def diag(*findings: Finding, abstain: str | None = None) -> Diagnosis:
    return Diagnosis(findings=list(findings), abstain={"reason": abstain} if abstain else None)


STRAGGLER = "compute.straggler_rank"
STALL = "comm.collective_stall"
LOADER = "input.dataloader_starvation"
CHECKPOINT = "checkpoint.blocking_save"
