"""Hand-built cases and diagnoses for the scoring, metrics and report tests (no recording, no corpus)."""

from __future__ import annotations

from diageval.cases.model import Case
from diageval.diagnosis import Diagnosis, FactorRef, Finding


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


CONTENTION = "host.cpu_contention"
PROFILER = "measurement.profiler_overhead"
SLOW_RANK = {"name": "slow_rank", "params": {"target_rank": 1, "slowdown_factor": 4.0}}


def fleet_metadata(i: int) -> dict[str, str]:
    host = f"node-0{i // 2 + 1}"  # node-01 .. node-04, two runs each
    return {"host": host, "version": f"v{i % 2 + 1}", "rack": "r2" if host == "node-04" else "r1"}


def fleet_case(case_id: str, *, behind: FactorRef | None = None, expect: str = "diagnose",
               aliased: list[FactorRef] = (), category: str = CONTENTION) -> Case:
    """8 runs: host node-01..04 (two runs each), version v1/v2, rack r2 only on node-04 (aliased with it):
    8 factor values."""
    runs = [{"name": f"job-{i:02d}", "metadata": fleet_metadata(i), "start": i} for i in range(8)]
    where = behind or (aliased[0] if aliased else None)
    data = {
        "id": case_id, "title": f"hand-built fleet {case_id}", "kind": "fleet",
        "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 20},
        "fleet": {"runs": runs, "faults": [{"where": where.model_dump(), "faults": [SLOW_RANK]}]
                  if where is not None else []},
        "labels": {"causes": [{"category": category, "factor": behind.model_dump()}] if expect == "diagnose" else [],
                   "expect": expect, "aliased": [a.model_dump() for a in aliased]},
    }
    if expect == "diagnose":
        data["manifest"] = {"metric": "step_time_median", "min_ratio": 1.3}
    return Case.model_validate(data)


def regression_case(case_id: str) -> Case:
    runs = [{"name": "job-a", "metadata": {"host": "node-01", "version": "v1"}, "start": 0, "role": "baseline"},
            {"name": "job-b", "metadata": {"host": "node-01", "version": "v2"}, "start": 1, "role": "candidate"}]
    v2 = FactorRef(name="version", value="v2")
    return Case.model_validate({
        "id": case_id, "title": "hand-built regression", "kind": "regression",
        "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 20},
        "fleet": {"runs": runs, "faults": [{"where": v2.model_dump(), "faults": [SLOW_RANK]}]},
        "labels": {"causes": [{"category": PROFILER, "factor": v2.model_dump()}], "expect": "diagnose"},
        "manifest": {"metric": "step_time_median", "min_ratio": 1.3},
    })


