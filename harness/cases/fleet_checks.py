"""Checks of a regression or fleet case that need the plugin registries (issue 24).

:func:`diageval.cases.load.check_case` hands such a case here: each run's workload (the base workload with
the run's overrides) must be valid for its workload plugin, each fault behind a factor must be registered
with valid params and fit the workload, and a recorded run's files must be imported traces only. Problems
name the field as the case file writes it (``fleet.faults[1].faults[0].params.target_rank``): each is a
field with a message, or a field prefix with the ValidationError under it, which the loader words.
"""

from __future__ import annotations

from pydantic import ValidationError

from diageval.cases.model import Case

Issue = tuple[str, "str | ValidationError"]


def check_fleet(case: Case) -> list[Issue]:
    from diageval.recording.faults import FAULTS
    from diageval.recording.workloads import WORKLOADS

    assert case.fleet is not None
    problems: list[Issue] = []
    if case.workload is None:  # a recorded regression or fleet: nothing to register
        return problems
    workload = WORKLOADS.get(case.workload.name)
    if workload is None:
        return [("workload.name", f"unknown workload {case.workload.name!r}; registered: {', '.join(sorted(WORKLOADS))}")]
    try:
        workload.params_model.model_validate(case.workload.params, strict=True)
    except ValidationError as err:
        problems.append(("workload.params", err))
    for i, run in enumerate(case.fleet.runs):
        if not run.workload_params:
            continue
        try:
            workload.params_model.model_validate({**case.workload.params, **run.workload_params}, strict=True)
        except ValidationError as err:
            problems.append((f"fleet.runs[{i}].workload_params", err))
    for i, ff in enumerate(case.fleet.faults):
        for j, spec in enumerate(ff.faults):
            field = f"fleet.faults[{i}].faults[{j}]"
            fault = FAULTS.get(spec.name)
            if fault is None:
                problems.append((f"{field}.name", f"unknown fault {spec.name!r}; registered: {', '.join(sorted(FAULTS))}"))
                continue
            if fault.load().stage != "live":
                problems.append((f"{field}.name", f"{spec.name!r} edits a finished bundle; a fault behind a factor value "
                                                  "acts in the live runs that have it"))
                continue
            try:
                params = fault.params_model.model_validate(spec.params, strict=True)
            except ValidationError as err:
                problems.append((f"{field}.params", err))
                continue
            for sub, message in fault.check(params, case.workload):
                problems.append((f"{field}.params.{sub}", message))
    return problems
