"""Regression and fleet cases (issue 24): the case schema, its checks, and each run as a recordable member."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from diageval.cases.load import CaseLoadError, load_case
from diageval.cases.model import Case
from diageval.cases.taxonomy import load_taxonomy
from diageval.diagnosis import FactorRef

HOSTS = ["node-01", "node-02", "node-03", "node-07"]


def fleet_case(**overrides) -> dict:
    runs = [{"name": f"job-{i:02d}", "metadata": {"host": HOSTS[i % 4], "version": "v2.5.0" if i < 4 else "v2.5.1"},
             "start": i} for i in range(8)]
    data = {
        "id": "fleet-example", "title": "t", "kind": "fleet",
        "workload": {"name": "mlp_ddp", "world_size": 1, "steps": 10, "params": {}},
        "fleet": {"runs": runs, "faults": [{"where": {"name": "host", "value": "node-07"},
                                            "faults": [{"name": "cpu_contention",
                                                        "params": {"contended_rank": 0, "duty_cycle": 0.8}}]}]},
        "labels": {"causes": [{"category": "host.cpu_contention", "factor": {"name": "host", "value": "node-07"}}],
                   "expect": "diagnose"},
        "manifest": {"metric": "step_time_median", "min_ratio": 1.3},
    }
    data.update(overrides)
    return data


def regression_case(**overrides) -> dict:
    data = fleet_case(kind="regression", id="regression-example")
    data["fleet"] = {"runs": [{"name": "job-base", "metadata": {"version": "v2.5.0"}, "start": 0, "role": "baseline"},
                              {"name": "job-cand", "metadata": {"version": "v2.5.1"}, "start": 1, "role": "candidate"}],
                     "faults": [{"where": {"name": "version", "value": "v2.5.1"},
                                 "faults": [{"name": "cpu_contention", "params": {"contended_rank": 0, "duty_cycle": 0.8}}]}]}
    data["labels"] = {"causes": [{"category": "host.cpu_contention", "factor": {"name": "version", "value": "v2.5.1"}}],
                      "expect": "diagnose"}
    data.update(overrides)
    return data


def load(tmp_path: Path, data: dict):
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_case(path, load_taxonomy()).case


def problems(tmp_path: Path, data: dict) -> str:
    with pytest.raises(CaseLoadError) as err:
        load(tmp_path, data)
    return str(err.value)


def test_a_fleet_case_loads_and_its_members_share_recordings(tmp_path):
    case = load(tmp_path, fleet_case())
    assert case.kind == "fleet" and case.evidence_kind == "injected" and case.world_size == 1
    members = case.fleet_members()
    assert [run.name for run, _ in members] == [f"job-{i:02d}" for i in range(8)]
    faulty = {run.name for run, m in members if m.faults}
    assert faulty == {"job-03", "job-07"}  # the node-07 runs
    # runs with one spec are one member (one cached recording), whichever case they come from
    assert len({m.id for _, m in members}) == 2
    assert all(m.kind == "job" and m.labels.expect == "healthy" and m.id.startswith("member-") for _, m in members)
    assert "fleet-example" not in {m.id for _, m in members}
    other = load(tmp_path, fleet_case(id="another-fleet"))
    assert {m.spec_hash() for _, m in other.fleet_members()} == {m.spec_hash() for _, m in members}


def test_workload_overrides_make_a_member_of_their_own(tmp_path):
    data = fleet_case()
    data["fleet"]["runs"][0]["workload_params"] = {"hidden": 96}
    case = load(tmp_path, data)
    first = case.fleet_members()[0][1]
    assert first.workload.params["hidden"] == 96
    assert len({m.id for _, m in case.fleet_members()}) == 3


def test_a_regression_case_loads(tmp_path):
    case = load(tmp_path, regression_case())
    assert case.kind == "regression"
    assert [r.role for r in case.fleet.ordered()] == ["baseline", "candidate"]
    assert [bool(m.faults) for _, m in case.fleet_members()] == [False, True]


def test_aliased_factors_are_checked_against_the_runs(tmp_path):
    data = fleet_case()
    for run in data["fleet"]["runs"]:  # every node-07 run is also v2.5.1, and only they are
        run["metadata"]["version"] = "v2.5.1" if run["metadata"]["host"] == "node-07" else "v2.5.0"
    data["labels"] = {"expect": "abstain", "aliased": [{"name": "host", "value": "node-07"},
                                                       {"name": "version", "value": "v2.5.1"}]}
    data.pop("manifest")
    case = load(tmp_path, data)
    assert case.fleet.aliased_with(FactorRef(name="host", value="node-07")) == [FactorRef(name="version", value="v2.5.1")]
    not_aliased = copy.deepcopy(data)
    not_aliased["labels"]["aliased"][1] = {"name": "host", "value": "node-01"}
    assert "not held by exactly the runs" in problems(tmp_path, not_aliased)


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d["fleet"]["runs"].pop(), "fleet.runs", "8 to 16 runs"),
    (lambda d: d["fleet"]["runs"][1].update(name="job-00"), "fleet.runs", "share a name"),
    (lambda d: d["fleet"]["runs"][1].update(start=0), "fleet.runs", "share a start order"),
    (lambda d: d["fleet"]["runs"][2]["metadata"].pop("version"), "fleet.runs[2].metadata", "same factors"),
    (lambda d: d["fleet"]["runs"][2]["metadata"].update(host="node 07"), "fleet.runs[2].metadata", "opaque words"),
    (lambda d: d["fleet"]["faults"][0]["where"].update(value="node-99"), "fleet.faults[0].where.value", "no run has"),
    (lambda d: d["labels"]["causes"][0].pop("factor"), "labels.causes[0].factor", "names the factor value"),
    (lambda d: d["labels"]["causes"][0]["factor"].update(value="node-01"), "labels.causes[0].factor", "no fleet.faults entry"),
    (lambda d: d.update(faults=[{"name": "cpu_contention", "params": {}}]), "faults", "leave the case-level faults empty"),
    (lambda d: d.pop("manifest"), "manifest", "required for expect: diagnose"),
    (lambda d: d["fleet"]["faults"][0]["faults"][0]["params"].pop("duty_cycle"),
     "fleet.faults[0].faults[0].params.duty_cycle", "required field is missing"),
    (lambda d: d["fleet"]["faults"][0]["faults"][0].update(name="no_such_fault"), "fleet.faults[0].faults[0].name", "unknown fault"),
    (lambda d: d["fleet"]["faults"][0]["faults"][0].update(name="clock_offset"), "fleet.faults[0].faults[0].name", "edits a finished bundle"),
    (lambda d: d["fleet"]["runs"][0].update(role="baseline"), "fleet.runs", "regression cases only"),
    (lambda d: d["fleet"]["runs"][0].update(workload_params={"hidden": "wide"}), "fleet.runs[0].workload_params.hidden", "expected an integer"),
    (lambda d: d.update(kind="job"), "fleet", "only cases of kind regression or fleet"),
    (lambda d: d.pop("fleet"), "fleet", "needs fleet:"),
])
def test_a_bad_fleet_case_names_the_field(tmp_path, edit, field, expected):
    data = fleet_case()
    edit(data)
    text = problems(tmp_path, data)
    assert f": {field}: " in text and expected in text, text


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d["fleet"]["runs"][0]["metadata"].update(version="v2.5.1"), "differs from its baseline in no declared factor"),
    (lambda d: d["fleet"]["runs"][1].update(role="baseline"), "one each"),
    (lambda d: d["fleet"]["runs"].append({"name": "job-x", "metadata": {"version": "v3"}, "start": 2}), "exactly 2 runs"),
])
def test_a_bad_regression_case_is_refused(tmp_path, edit, expected):
    data = regression_case()
    edit(data)
    assert expected in problems(tmp_path, data)


def two_factor_regression(**overrides) -> dict:
    """A release: the candidate moves the version and a config together; the fault sits behind the config."""
    data = regression_case()
    data["fleet"]["runs"][0]["metadata"] = {"version": "v2.5.0", "loader_workers": "4"}
    data["fleet"]["runs"][1]["metadata"] = {"version": "v2.5.1", "loader_workers": "2"}
    data["fleet"]["faults"][0]["where"] = {"name": "loader_workers", "value": "2"}
    data["labels"]["causes"][0]["factor"] = {"name": "loader_workers", "value": "2"}
    data.update(overrides)
    return data


def test_a_regression_may_change_two_factors_and_names_the_one_at_fault(tmp_path):
    case = load(tmp_path, two_factor_regression())
    assert case.fleet.changed_values() == [FactorRef(name="loader_workers", value="2"),
                                           FactorRef(name="version", value="v2.5.1")]
    assert case.labels.causes[0].factor == FactorRef(name="loader_workers", value="2")


def test_a_regression_label_names_a_value_its_candidate_changes(tmp_path):
    data = two_factor_regression()
    data["fleet"]["runs"][1]["metadata"]["loader_workers"] = "4"  # the config no longer moves: the fault is on both runs
    data["fleet"]["faults"][0]["where"]["value"] = "4"
    data["labels"]["causes"][0]["factor"]["value"] = "4"
    text = problems(tmp_path, data)
    assert "case.yaml: labels.causes[0].factor: loader_workers = '4' is not a value the candidate (job-cand) changes; " \
           "expected one of version = 'v2.5.1'" in text, text


def test_a_regression_whose_changes_cannot_be_told_apart_abstains_naming_them(tmp_path):
    data = two_factor_regression(labels={"expect": "abstain", "aliased": [{"name": "loader_workers", "value": "2"},
                                                                          {"name": "version", "value": "v2.5.1"}]})
    data.pop("manifest")
    case = load(tmp_path, data)
    assert set(case.labels.aliased) == set(case.fleet.changed_values())
    data["labels"]["aliased"][1] = {"name": "version", "value": "v2.5.0"}  # the baseline's: not a change
    assert "labels.aliased[1]: version = 'v2.5.0' is not a value the candidate (job-cand) changes" in problems(tmp_path, data)


def test_a_healthy_regression_may_change_two_factors_or_none(tmp_path):
    healthy = two_factor_regression(labels={"expect": "healthy"})
    healthy["fleet"]["faults"] = []
    healthy.pop("manifest")
    assert len(load(tmp_path, healthy).fleet.changed_values()) == 2
    healthy["fleet"]["runs"][1]["metadata"] = dict(healthy["fleet"]["runs"][0]["metadata"])  # the same job twice
    assert load(tmp_path, healthy).fleet.changed_values() == []


def test_a_case_is_judged_in_the_words_its_bundle_showed(tmp_path):
    case = load(tmp_path, two_factor_regression())
    shown = case.with_shown_values({"loader_workers=2": "7", "loader_workers=4": "1", "version=v2.5.1": "v9.0.3"})
    assert shown.labels.causes[0].factor == FactorRef(name="loader_workers", value="7")
    assert [r.metadata for r in shown.fleet.runs] == [{"version": "v2.5.0", "loader_workers": "1"},
                                                      {"version": "v9.0.3", "loader_workers": "7"}]
    assert shown.fleet.faults[0].where == FactorRef(name="loader_workers", value="7")
    assert case.with_shown_values({}) is case


def test_labels_aliased_needs_abstain():
    with pytest.raises(ValueError, match="only a case with expect: abstain"):
        Case.model_validate(fleet_case(labels={"expect": "healthy", "aliased": [{"name": "host", "value": "node-07"},
                                                                                {"name": "version", "value": "v2.5.1"}]}))


def test_job_cases_are_unchanged():
    data = {"id": "j", "title": "t", "workload": {"name": "mlp_ddp", "steps": 10}, "labels": {"expect": "healthy"}}
    case = Case.model_validate(data)
    assert case.kind == "job" and case.fleet is None and case.healthy_twin().faults == []


def test_the_fleet_spec_hash_covers_runs_and_faults(tmp_path):
    a = Case.model_validate(fleet_case())
    data = fleet_case()
    data["fleet"]["runs"][0]["metadata"]["host"] = "node-02"
    assert Case.model_validate(data).spec_hash() != a.spec_hash()
    assert Case.model_validate(fleet_case(title="other")).spec_hash() == a.spec_hash()
