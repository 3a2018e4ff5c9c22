"""Evidence tiers: the files each keeps, the bundle derived for it, each tier's label rule, and a run on a tier."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from run_fakes import FakeEvidence, make_case, make_case_set, run_with

from diageval.bundle.model import BundleEnv, BundleManifest, EvidenceBundle, describe_files, rank_trace_files
from diageval.cases.model import Case
from diageval.cases.taxonomy import load_taxonomy
from diageval.cases.tiers import CAUSE_TIERS, TIERS, case_under_tier, label_shown, traced_ranks
from diageval.fileio import sha256_file
from diageval.run.evidence_tiers import TierSourceDamaged, evidence_size, tier_bundle, tier_bytes, tier_of_path
from diageval.run.grade import rescore_run
from diageval.run.store import RunFolderConflict, RunStore

FILES = {  # a two-rank bundle with one file of every kind, and the lowest tier that holds it
    "steps.jsonl": "steps",
    "metrics.jsonl": "metrics",
    "rank0/trace.json.gz": "one-rank",
    "rank1/trace.json.gz": "traces",
    "logs/rank0.log": "traces",
    "logs/rank1.log": "traces",
    "flight_recorder/rank_0": "full",
    "flight_recorder/rank_1": "full",
}


def _bundle(root: Path) -> Path:
    for i, rel in enumerate(FILES):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel == "steps.jsonl":
            path.write_text("".join(json.dumps({"rank": r, "step": s, "t_start": s, "t_end": s + 0.5}) + "\n"
                                    for s in range(5) for r in range(2)))
        else:
            path.write_bytes(bytes([i]) * (100 * (i + 1)))
    manifest = BundleManifest(bundle_id="b" * 32, created=datetime.now(timezone.utc),
                              env=BundleEnv(device="cpu", world_size=2, torch="2.13.0", python="3.11"),
                              files=describe_files(root))
    (root / "bundle.json").write_text(manifest.model_dump_json())
    return root


def test_every_taxonomy_cause_has_a_lowest_tier():
    assert sorted(CAUSE_TIERS) == sorted(load_taxonomy().causes)


def test_the_cli_offers_exactly_the_tiers():
    from diageval.cli import run_cmd

    option = next(p for p in run_cmd.params if p.name == "evidence")
    assert tuple(option.type.choices) == TIERS and option.default == "full"


def test_each_file_kind_belongs_to_its_tier():
    assert {rel: tier_of_path(rel) for rel in FILES} == FILES
    assert tier_of_path("rank12/trace.json") == "traces" and tier_of_path("anything-else.bin") == "full"


@pytest.mark.parametrize("tier", TIERS)
def test_a_tier_bundle_holds_its_files_and_a_consistent_manifest(tmp_path, tier):
    source = _bundle(tmp_path / "evidence" / "src")
    cut = tier_bundle(source, tier)
    want = {rel for rel, lowest in FILES.items() if TIERS.index(lowest) <= TIERS.index(tier)}
    present = {p.relative_to(cut).as_posix() for p in cut.rglob("*") if p.is_file()} - {"bundle.json"}
    bundle = EvidenceBundle.open(cut)
    assert present == want == {f.path for f in bundle.manifest.files}
    assert bundle.verify_checksums() == []
    if tier == "full":
        assert cut == source
    else:
        assert cut.parent == source.parent and cut.name != source.name and bundle.bundle_id != "b" * 32
        assert tier_bundle(source, tier) == cut  # cut once per source
    full = BundleManifest.model_validate_json((source / "bundle.json").read_bytes())
    assert evidence_size(cut, source).bytes == tier_bytes(full)[tier]
    assert evidence_size(cut, source).steps == 5


def test_a_damaged_source_is_named_not_cut(tmp_path):
    source = _bundle(tmp_path / "evidence" / "src")
    (source / "metrics.jsonl").write_bytes(b"changed")
    with pytest.raises(TierSourceDamaged, match="metrics.jsonl"):
        tier_bundle(source, "metrics")
    assert sorted(p.name for p in source.parent.iterdir()) == ["src"]


def test_traced_ranks_agrees_with_the_edits_that_remove_traces(tmp_path):
    from diageval.recording.faults.bundle_edits import DropRankTrace, SampleRankTraces
    from diageval.recording.faults.params import DropRankTraceParams, SampleRankTracesParams

    for name, params, edit in (
            ("drop_rank_trace", {"missing_rank": 0}, DropRankTrace(DropRankTraceParams(missing_rank=0))),
            ("sample_rank_traces", {"traced_ranks": [1]}, SampleRankTraces(SampleRankTracesParams(traced_ranks=[1])))):
        folder = _bundle(tmp_path / name)
        edit.apply(folder)
        case = Case.model_validate({**make_case("t", expect="abstain").model_dump(), "faults": [{"name": name, "params": params}]})
        assert traced_ranks(case) == set(rank_trace_files(folder)) == {1}


def _positive(cause: str, ranks=None, faults=()) -> Case:
    case = make_case("c", cause=cause, ranks=ranks)
    return case if not faults else Case.model_validate({**case.model_dump(), "faults": [*case.model_dump()["faults"], *faults]})


def _shown(tier: str, **kw) -> set[str]:
    return {cause for cause in CAUSE_TIERS if label_shown(_positive(cause, **kw), _positive(cause, **kw).labels.causes[0], tier) is None}


ONE_RANK_CAUSES = {"input.dataloader_starvation", "checkpoint.blocking_save", "launch.kernel_launch_overhead",
                   "host.device_sync", "memory.allocator_churn", "measurement.profiler_overhead", "compile.recompilation",
                   "compute.numeric_precision"}


def test_steps_shows_no_cause_so_every_positive_expects_abstention():
    assert _shown("steps") == set()
    scored = case_under_tier(_positive("compute.straggler_rank", ranks=[1]), "steps")
    assert (scored.labels.expect, scored.labels.causes, scored.manifest) == ("abstain", [], None)
    assert scored.labels.symptoms == ["symptom.slow_step"]


def test_metrics_shows_cpu_contention_only():
    assert _shown("metrics") == {"host.cpu_contention"}
    assert _shown("metrics", ranks=[1]) == {"host.cpu_contention"}  # the rank is named by its CPU share
    assert case_under_tier(_positive("host.cpu_contention", ranks=[1]), "metrics").labels.expect == "diagnose"


def test_one_rank_shows_rank_0s_trace_causes_and_not_other_ranks():
    assert _shown("one-rank") == ONE_RANK_CAUSES | {"host.cpu_contention"}
    assert _shown("one-rank", ranks=[0]) == ONE_RANK_CAUSES | {"host.cpu_contention"}
    assert _shown("one-rank", ranks=[1]) == {"host.cpu_contention"}  # a cause on rank 1 leaves nothing in rank 0's trace
    untraced = [{"name": "sample_rank_traces", "params": {"traced_ranks": [1]}}]
    assert _shown("one-rank", faults=untraced) == {"host.cpu_contention"}  # no rank 0 trace in the bundle at all
    reason = label_shown(_positive("host.device_sync", ranks=[1]), _positive("host.device_sync", ranks=[1]).labels.causes[0], "one-rank")
    assert "rank 0" in reason


def test_traces_and_full_show_every_cause():
    assert _shown("traces") == _shown("traces", ranks=[1]) == set(CAUSE_TIERS)
    assert _shown("full") == set(CAUSE_TIERS)
    case = _positive("compute.load_imbalance", ranks=[1])
    assert case_under_tier(case, "full") is case and case_under_tier(case, "traces") is case


def test_a_case_keeps_the_labels_its_tier_shows():
    case = Case.model_validate({**make_case("m").model_dump(), "labels": {
        "expect": "diagnose", "causes": [{"category": "host.device_sync", "ranks": None},
                                         {"category": "compute.straggler_rank", "ranks": [1]}]}})
    scored = case_under_tier(case, "one-rank")
    assert scored.labels.expect == "diagnose" and [c.category for c in scored.labels.causes] == ["host.device_sync"]
    assert case.labels.causes[1].category == "compute.straggler_rank"  # the case itself is untouched


@pytest.mark.parametrize("expect", ["healthy", "abstain"])
def test_cases_without_causes_are_scored_as_they_are(expect):
    case = make_case("h", expect=expect)
    assert all(case_under_tier(case, tier) is case for tier in TIERS)


def test_a_run_on_a_tier_gets_the_cut_bundle_and_is_scored_under_the_tier(tmp_path):
    case_set = make_case_set([make_case("s1", ranks=[1]), make_case("s2", expect="healthy")])
    evidence = FakeEvidence(tmp_path / "bundles")
    common = dict(cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs", evidence_fn=evidence, progress=None,
                  cuda_device_count=lambda: 0, timeout=5.0)
    out = run_with("oracle", case_set, evidence="steps", **common)
    assert "-steps-" in out.run_dir.name and out.info.evidence_tier == "steps"
    results = {r.case_id: r for r in RunStore(out.run_dir).read_results()}
    assert results["s1"].expect == "abstain" and results["s2"].expect == "healthy"
    assert out.summary.metrics.abstention_recall.value == 1.0  # the oracle is handed the labels as scored
    source = evidence.root / FakeEvidence.bundle_id("s1")
    cut = tier_bundle(source, "steps")
    assert results["s1"].bundle_sha256 == sha256_file(cut / "bundle.json")
    assert [f.path for f in EvidenceBundle.open(cut).manifest.files] == ["steps.jsonl"]
    sizes = RunStore(out.run_dir).read_info().evidence_sizes
    assert sizes["s1"].bytes == (cut / "steps.jsonl").stat().st_size and sizes["s1"].steps == 4

    before = RunStore(out.run_dir).read_results()
    rescore_run(out.run_dir, case_set=case_set)
    assert RunStore(out.run_dir).read_results() == before  # re-scoring applies the same tier

    full = run_with("oracle", case_set, **common)
    assert full.info.evidence_tier == "full" and "-steps-" not in full.run_dir.name
    assert {r.case_id: r.expect for r in RunStore(full.run_dir).read_results()}["s1"] == "diagnose"
    with pytest.raises(RunFolderConflict, match="evidence tier"):
        run_with("oracle", case_set, evidence="metrics", run_id=out.run_dir.name, **common)


def _fleet_source(root: Path) -> Path:
    """A two-run regression bundle whose runs are the two-rank bundle above (every kind of file in each)."""
    from diageval.bundle.fleet import FleetRunInfo, start_times, write_fleet

    starts = start_times([0, 1])
    runs = [FleetRunInfo(name=name, metadata={"version": version}, start=start, role=role, bundle=f"runs/{name}")
            for name, version, start, role in (("job-a1", "v1", starts[0], "baseline"), ("job-b2", "v2", starts[1], "candidate"))]
    members = {r.name: _bundle(root / "members" / r.name) for r in runs}
    write_fleet(root / "evidence" / "src", runs, members)
    return root / "evidence" / "src"


@pytest.mark.parametrize("tier", TIERS)
def test_a_fleet_is_cut_run_by_run(tmp_path, tier):
    """Issue 44 item 4: below full a regression's or fleet's bundle was empty (fleet.json and the runs counted as
    full) while its labels were still expected at one-rank and traces. Each run now keeps its tier's files."""
    from diageval.bundle.fleet import read_fleet

    source = _fleet_source(tmp_path)
    cut = tier_bundle(source, tier)
    bundle = EvidenceBundle.open(cut)
    assert bundle.verify_checksums() == []
    fleet = read_fleet(bundle)
    assert fleet is not None and [r.name for r in fleet.runs] == ["job-a1", "job-b2"]
    want = {rel for rel, lowest in FILES.items() if TIERS.index(lowest) <= TIERS.index(tier)}
    listed = {f.path for f in bundle.manifest.files}
    for run in fleet.runs:
        run_bundle = fleet.open_run(run.name)
        present = {p.relative_to(run_bundle.root).as_posix() for p in run_bundle.root.rglob("*") if p.is_file()}
        assert present - {"bundle.json"} == want == {f.path for f in run_bundle.manifest.files}
        assert run_bundle.verify_checksums() == []
        assert {f"runs/{run.name}/{rel}" for rel in present} <= listed  # the run's manifest too: the private copy holds it
    assert "fleet.json" in listed
    size = evidence_size(cut, source)  # what the signal-value table reads: the runs' bytes and steps, not 0 and None
    assert size.bytes == sum(f.size for f in bundle.manifest.files) and size.steps == 2 * 5
    if tier == "steps":
        assert 0 < size.bytes < evidence_size(source).bytes
    if tier == "one-rank":
        assert all(set(fleet.open_run(r.name).trace_paths()) == {0} for r in fleet.runs)


def test_a_damaged_fleet_run_is_named_not_cut(tmp_path):
    source = _fleet_source(tmp_path)
    (source / "runs" / "job-b2" / "steps.jsonl").write_bytes(b"changed")
    with pytest.raises(TierSourceDamaged, match="job-b2/steps.jsonl"):
        tier_bundle(source, "traces")


def test_fleet_files_belong_to_the_tier_of_the_same_file_in_a_job():
    assert tier_of_path("fleet.json") == "steps" and tier_of_path("runs/job-a1/bundle.json") == "steps"
    assert {rel: tier_of_path(f"runs/job-a1/{rel}") for rel in FILES} == FILES


def _regression(behind_candidate: list[dict]) -> Case:
    """A float64 regression (numeric precision behind version v2, lowest tier one-rank) on 2 ranks, with
    ``behind_candidate`` evidence edits added behind the same version."""
    return Case.model_validate({
        "id": "r", "title": "fake regression", "kind": "regression",
        "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 8},
        "fleet": {"runs": [{"name": "job-a1", "metadata": {"version": "v1"}, "start": 0, "role": "baseline"},
                           {"name": "job-b2", "metadata": {"version": "v2"}, "start": 1, "role": "candidate"}],
                  "faults": [{"where": {"name": "version", "value": "v2"},
                              "faults": [{"name": "wider_numbers", "params": {}}, *behind_candidate]}]},
        "labels": {"expect": "diagnose", "symptoms": ["symptom.slow_step"],
                   "causes": [{"category": "compute.numeric_precision", "factor": {"name": "version", "value": "v2"}}]},
        "manifest": {"metric": "step_time_median", "min_ratio": 1.2}})


def test_a_fleets_expectation_per_tier_follows_the_runs_behind_its_label():
    plain = _regression([])
    assert [case_under_tier(plain, t).labels.expect for t in TIERS] == ["abstain", "abstain", "diagnose", "diagnose", "diagnose"]
    assert traced_ranks(plain, plain.labels.causes[0]) == {0, 1}
    # the candidate's evidence keeps rank 1's trace only: its one-rank cut holds no trace of the labeled runs
    sampled = _regression([{"name": "sample_rank_traces", "params": {"traced_ranks": [1]}}])
    assert traced_ranks(sampled, sampled.labels.causes[0]) == {1}
    assert case_under_tier(sampled, "one-rank").labels.expect == "abstain"
    assert "rank 0" in label_shown(sampled, sampled.labels.causes[0], "one-rank")
    assert case_under_tier(sampled, "traces").labels.expect == "diagnose"
