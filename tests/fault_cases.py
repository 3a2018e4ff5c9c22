"""A job case made in a test for the faults it runs: what recording's tests check a fault's params on
(``check_case``) and record its injector with (``record_case``)."""

from __future__ import annotations

from diageval.cases.model import Case


def fault_case(faults: list[dict], *, workload: str = "mlp_ddp", world_size: int = 2, steps: int = 10,
               params: dict | None = None) -> Case:
    """A job case of ``workload`` that runs ``faults`` (each ``{"name": ..., "params": {...}}``), labeled healthy:
    neither the params checks nor a recording read the labels."""
    return Case.model_validate({
        "id": "fault-test", "title": "t",
        "workload": {"name": workload, "world_size": world_size, "steps": steps, "params": params or {}},
        "faults": faults, "labels": {"expect": "healthy"},
    })
