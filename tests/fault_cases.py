"""A job case made in a test for the faults it runs: what recording's tests check a fault's params on
(``check_case``) and record its injector with (``record_case``), or write as a one-case corpus for the CLI
(``write_case_file``)."""

from __future__ import annotations

from pathlib import Path

import yaml

from diageval.cases.model import Case


def fault_case(faults: list[dict], *, workload: str = "mlp_ddp", world_size: int = 2, steps: int = 10,
               params: dict | None = None, case_id: str = "fault-test", labels: dict | None = None,
               manifest: dict | None = None) -> Case:
    """A job case of ``workload`` that runs ``faults`` (each ``{"name": ..., "params": {...}}``), labeled healthy
    unless ``labels`` says otherwise: neither the params checks nor a recording read the labels."""
    return Case.model_validate({
        "id": case_id, "title": "t",
        "workload": {"name": workload, "world_size": world_size, "steps": steps, "params": params or {}},
        "faults": faults, "labels": labels or {"expect": "healthy"},
        **({"manifest": manifest} if manifest else {}),
    })


def write_case_file(case: Case, cases_dir: Path, room: str = "t") -> Path:
    """``case`` as the YAML file a contributor would write, in ``cases_dir/room/`` (what ``--cases cases_dir``
    loads); returns the file. Written from the validated model, so the file holds what the test built."""
    folder = cases_dir / room
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.id}.yaml"
    path.write_text(yaml.safe_dump(case.model_dump(mode="json", exclude_defaults=True), sort_keys=False))
    return path
