"""fleet.json and the fleet bundle (issue 24): written, read back, checked, and refused with the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diageval.bundle.fleet import FLEET_EPOCH, FleetRunInfo, read_fleet, start_times, write_fleet
from diageval.bundle.model import BundleEnv, BundleError, EvidenceBundle
from diageval.diagnosis import FactorRef
from diageval.fileio import write_jsonl
from diageval.recording.bundle_writer import write_info


def member(root: Path, step_s: float) -> Path:
    root.mkdir(parents=True)
    write_jsonl(root / "steps.jsonl", [{"rank": 0, "step": s, "t_start": 100 + s * step_s, "t_end": 100 + (s + 1) * step_s}
                                       for s in range(5)])
    write_info(root, BundleEnv(device="cpu", world_size=1))
    return root


def runs(n: int = 3) -> list[FleetRunInfo]:
    starts = start_times(list(range(n)))
    return [FleetRunInfo(name=f"job-{i}", metadata={"host": f"node-0{i % 2}", "version": "v1"}, start=starts[i],
                         bundle=f"runs/job-{i}") for i in range(n)]


def test_a_written_fleet_reads_back_and_opens_each_run(tmp_path):
    members = {f"job-{i}": member(tmp_path / f"m{i}", 0.1 * (i + 1)) for i in range(3)}
    manifest = write_fleet(tmp_path / "fleet", runs(), members)
    bundle = EvidenceBundle.open(tmp_path / "fleet")
    assert bundle.verify_checksums() == []
    listed = {f.path for f in manifest.files}
    assert {"fleet.json", "runs/job-0/bundle.json", "runs/job-2/steps.jsonl"} <= listed
    fleet = read_fleet(bundle)
    assert fleet is not None and not fleet.is_regression
    assert fleet.factors == ["host", "version"] and fleet.values("host") == ["node-00", "node-01"]
    assert [r.name for r in fleet.runs_with(FactorRef(name="host", value="node-01"))] == ["job-1"]
    assert fleet.ordered()[0].start == FLEET_EPOCH
    run = fleet.open_run("job-2")
    assert run.steps()[0].duration == pytest.approx(0.3)
    with pytest.raises(KeyError, match="no run 'job-9'"):
        fleet.open_run("job-9")
    # a changed run file is caught by the fleet bundle's own integrity check
    (tmp_path / "fleet" / "runs" / "job-1" / "steps.jsonl").write_text("{}\n")
    assert bundle.verify_checksums() == ["runs/job-1/steps.jsonl: size or sha256 differs from bundle.json"]


def test_a_job_bundle_has_no_fleet(tmp_path):
    assert read_fleet(EvidenceBundle.open(member(tmp_path / "one", 0.1))) is None


def test_regression_roles(tmp_path):
    pair = [r.model_copy(update={"role": role}) for r, role in zip(runs(2), ("baseline", "candidate"))]
    write_fleet(tmp_path / "pair", pair, {f"job-{i}": member(tmp_path / f"m{i}", 0.1) for i in range(2)})
    fleet = read_fleet(EvidenceBundle.open(tmp_path / "pair"))
    assert fleet.is_regression and fleet.role("candidate").name == "job-1"


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d["runs"][0].update(bundle="runs/elsewhere"), "runs.0: Value error, bundle: expected runs/job-0"),
    (lambda d: d["runs"][0].update(extra="x"), "runs.0.extra: Extra inputs are not permitted"),
    (lambda d: d["runs"][1]["metadata"].pop("version"),
     "runs[1].metadata: expected the same factors as runs[0] (host, version), got host"),
    (lambda d: d["runs"][1].update(name="job-0", bundle="runs/job-0"), "runs: two runs share a name"),
    (lambda d: d["runs"][1].update(role="candidate"), "roles are for a regression"),
    (lambda d: d.update(schema_version=9), "schema_version: expected 1"),
    (lambda d: d["runs"][0]["metadata"].update(host="a b"), "runs.0.metadata"),
])
def test_a_bad_fleet_json_is_refused_naming_the_field(tmp_path, edit, expected):
    write_fleet(tmp_path / "f", runs(), {f"job-{i}": member(tmp_path / f"m{i}", 0.1) for i in range(3)})
    path = tmp_path / "f" / "fleet.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(BundleError, match="fleet.json") as err:
        read_fleet(EvidenceBundle.open(tmp_path / "f"))
    assert expected in str(err.value)


def test_a_missing_run_folder_or_bad_json_is_refused(tmp_path):
    write_fleet(tmp_path / "f", runs(), {f"job-{i}": member(tmp_path / f"m{i}", 0.1) for i in range(3)})
    (tmp_path / "f" / "runs" / "job-1" / "bundle.json").unlink()
    with pytest.raises(BundleError, match=r"runs\[1\].bundle: runs/job-1 holds no bundle.json"):
        read_fleet(EvidenceBundle.open(tmp_path / "f"))
    (tmp_path / "f" / "fleet.json").write_text("{not json")
    with pytest.raises(BundleError, match="fleet.json"):
        read_fleet(EvidenceBundle.open(tmp_path / "f"))


def test_write_fleet_refuses_a_run_without_a_member(tmp_path):
    with pytest.raises(BundleError, match="no member bundle for run"):
        write_fleet(tmp_path / "f", runs(), {"job-0": member(tmp_path / "m0", 0.1)})


def test_start_times_follow_the_start_order():
    times = start_times([5, 0, 9])
    assert times[1] < times[0] < times[2] and times[1] == FLEET_EPOCH
