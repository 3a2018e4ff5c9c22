"""Evidence that lies (issue 40): the defect edits, their presence checks, and rules recognising each defect."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from synthetic_traces import StepShape, build_bundle

from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_defects import DefectObserver
from diageval.bundle.trace_summary import summarize_trace
from diageval.cases.load import load_case_set
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
from diageval.recording.faults import FAULTS
from diageval.recording.faults.bundle_edits import EvidenceEditError

DEFECTS = ["zero_timestamps", "merge_rank_traces", "drop_distributed_info", "duplicate_events", "drop_flow_events",
           "truncate_gzip", "rename_comm_kernels", "device_clock_offset"]


def _edit(name: str, bundle: Path, **params):
    info = FAULTS[name]
    edit = info.load()(info.params_model.model_validate(params))
    edit.apply(bundle)
    return edit


def _doc(bundle: Path, rank: int) -> dict:
    return json.loads(gzip.decompress((bundle / f"rank{rank}" / "trace.json.gz").read_bytes()))


def _write(bundle: Path, rank: int, doc: dict) -> None:
    (bundle / f"rank{rank}" / "trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))


def _findings(bundle: Path, rank: int) -> list[str]:
    obs = DefectObserver()
    summarize_trace(bundle / f"rank{rank}" / "trace.json.gz", observers=[obs])
    return obs.findings()


@pytest.fixture()
def bundle(tmp_path) -> Path:
    root = build_bundle(tmp_path / "b", shape=lambda r, k: StepShape(compute_us=14000 if r == 1 and k >= 3 else 4000), n_steps=12)
    doc = _doc(root, 1)  # two processes: rank 1's events under its own pid, as two ranks' processes have
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and "pid" in e:
            e["pid"] = 2
    doc["traceEvents"] += [{"ph": "s", "cat": "fwdbwd", "id": 7, "pid": 2, "tid": 1, "ts": 1.0, "name": "fwdbwd"},
                           {"ph": "f", "cat": "fwdbwd", "id": 7, "pid": 2, "tid": 1, "ts": 2.0, "name": "fwdbwd"}]
    _write(root, 1, doc)
    return root


def test_defect_edits_are_registered_as_edits_that_inject_no_cause():
    for name in DEFECTS:
        assert FAULTS[name].injects == () and FAULTS[name].load().stage == "bundle"


def test_an_intact_trace_has_no_defect(bundle):
    assert _findings(bundle, 0) == [] and _findings(bundle, 1) == []


def test_zero_timestamps_is_present_and_recognised(bundle):
    edit = _edit("zero_timestamps", bundle, zeroed_rank=1, zeroed_share=0.5)
    edit.check_present(bundle)
    timed = [e for e in _doc(bundle, 1)["traceEvents"] if e.get("ph") == "X"]
    assert abs(sum(e["ts"] == 0 for e in timed) - len(timed) / 2) <= 1
    assert any("times were lost" in f for f in _findings(bundle, 1)) and _findings(bundle, 0) == []


def test_merged_ranks_are_present_and_recognised(bundle):
    edit = _edit("merge_rank_traces", bundle, merged_into_rank=0)
    edit.check_present(bundle)
    assert not (bundle / "rank1").exists()
    assert any("from 2 processes" in f for f in _findings(bundle, 0))


def test_duplicated_events_are_present_and_recognised(bundle):
    edit = _edit("duplicate_events", bundle, duplicated_rank=0)
    edit.check_present(bundle)
    assert any("recorded twice" in f for f in _findings(bundle, 0)) and _findings(bundle, 1) == []


def test_defects_are_the_same_when_the_readers_names_start_again(bundle, monkeypatch):
    """The observer decides once per (category, name) id which pairs are step markers; a read whose ids start again
    (a fresh ``Names`` past ``NAMES_LIMIT``) must not reuse the old ids' decisions."""
    from diageval.bundle import trace_stats

    _edit("merge_rank_traces", bundle, merged_into_rank=0)
    _edit("duplicate_events", bundle, duplicated_rank=0)
    whole = _findings(bundle, 0)
    assert any("from 2 processes" in f for f in whole) and any("recorded twice" in f for f in whole)
    monkeypatch.setattr(trace_stats, "NAMES_LIMIT", 3)  # a fresh Names every few pairs
    assert _findings(bundle, 0) == whole


def test_dropped_headers_flows_and_cut_gzip_are_present(bundle):
    _edit("drop_distributed_info", bundle).check_present(bundle)
    assert all("distributedInfo" not in _doc(bundle, r) for r in (0, 1))
    _edit("drop_flow_events", bundle).check_present(bundle)
    assert not any(e.get("ph") in ("s", "f") for e in _doc(bundle, 1)["traceEvents"])
    _edit("truncate_gzip", bundle, cut_gzip_rank=1, kept_gzip_fraction=0.5).check_present(bundle)
    assert summarize_trace(bundle / "rank1" / "trace.json.gz").truncated  # the reader says so, no exception


def test_an_edit_that_finds_nothing_to_break_refuses(bundle):
    edit = _edit("rename_comm_kernels", bundle)  # a CPU trace holds no NCCL kernel
    with pytest.raises(EvidenceEditError, match="no ncclDevKernel_"):
        edit.check_present(bundle)
    merged = _edit("merge_rank_traces", build_bundle(bundle.parent / "same-pid", n_steps=12), merged_into_rank=0)
    with pytest.raises(EvidenceEditError, match="1 process"):  # both ranks under one pid: indistinguishable
        merged.check_present(bundle.parent / "same-pid")


def test_renamed_nccl_kernels_are_renamed(bundle):
    doc = _doc(bundle, 0)
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
                               "pid": 0, "tid": 7, "ts": 5.0, "dur": 3.0})
    _write(bundle, 0, doc)
    _edit("rename_comm_kernels", bundle).check_present(bundle)
    assert "ncclDevKernel_AllReduce_RING_LL_Sum_float" in {e.get("name") for e in _doc(bundle, 0)["traceEvents"]}


@pytest.mark.parametrize("name,params", [("zero_timestamps", {"zeroed_rank": 1, "zeroed_share": 0.5}),
                                         ("duplicate_events", {"duplicated_rank": 1})])
def test_rules_names_the_defect_and_judges_only_the_sound_traces(bundle, name, params):
    """A straggler on rank 1 whose own trace is wrong: rules says what is wrong and claims nothing about rank 1."""
    before = RulesDiagnoser().diagnose(EvidenceBundle.open(bundle))
    assert any(f.category == "compute.straggler_rank" and f.confidence >= 0.5 for f in before.findings)
    _edit(name, bundle, **params)
    from diageval.bundle.model import BundleManifest, describe_files  # a fresh manifest, as derive_bundle writes
    m = BundleManifest.model_validate_json((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").unlink()
    (bundle / "bundle.json").write_text(m.model_copy(update={"files": describe_files(bundle)}).model_dump_json())
    d = RulesDiagnoser().diagnose(EvidenceBundle.open(bundle))
    assert not any(f.kind == "cause" and f.confidence >= 0.5 for f in d.findings)
    text = (d.abstain.reason if d.abstain else "") + " ".join(f.summary for f in d.findings)
    assert "rank1 trace inconsistent" in text


def test_defect_cases_are_valid_and_cover_every_usable_defect():
    cases = [lc.case for lc in load_case_set().cases if "defect" in lc.case.tags]
    assert len(cases) >= 16
    used = {f.name for c in cases for f in c.faults}
    assert set(DEFECTS) - used == {"rename_comm_kernels"}  # NCCL kernels need two GPUs (a 1-GPU box records none)
    assert {c.labels.expect for c in cases} == {"diagnose", "healthy", "abstain"}


def test_the_board_shows_confidently_wrong_under_defect_as_a_part_of_its_own():
    from scoring_helpers import LOADER, STRAGGLER, cause, diag, make_case

    from diageval.cases.taxonomy import load_taxonomy
    from diageval.reports.parts import parts
    from diageval.scoring.summary import DiagnoserInfo, summarize
    from diageval.scoring.verdicts import score_case

    tax = load_taxonomy()

    def defect(case):
        return case.model_copy(update={"tags": ["defect"]})

    results = [
        score_case(defect(make_case("d1", [{"category": LOADER}])), diag(cause(STRAGGLER, 0.9)), taxonomy=tax),  # wrong
        score_case(defect(make_case("d2", [{"category": LOADER}])), diag(cause(LOADER, 0.9)), taxonomy=tax),
        score_case(defect(make_case("d3")), diag(cause(STRAGGLER, 0.4)), taxonomy=tax),  # a hedge: not a claim
        score_case(defect(make_case("d4", expect="abstain")), diag(abstain="rank1 trace inconsistent"), taxonomy=tax),
        score_case(make_case("h1"), diag(cause(STRAGGLER, 0.9)), taxonomy=tax),  # wrong, but not a defect case
    ]
    s = summarize(results, diagnoser=DiagnoserInfo(spec="t", name="t", version="0"), case_set_hash="x",
                  taxonomy_version=tax.version, n_boot=200)
    m = s.metrics.defect_wrong_rate
    assert m.value == pytest.approx(1 / 4) and m.n == 4 and m.ci[0] < 0.25 < m.ci[1]
    assert s.by_tag["defect"].cases == 4 and s.by_tag["defect"].metrics.defect_wrong_rate.value == pytest.approx(1 / 4)
    (part,) = [p for p in parts([s], [True]) if p.kind == "tag"]
    assert part.label == "defect cases" and part.size == "4 cases"


EDGE_PARAMS = [  # every defect edit, and the extremes of its params
    ("zero_timestamps", {"zeroed_rank": 1, "zeroed_share": 0.5}),
    ("zero_timestamps", {"zeroed_rank": 0, "zeroed_share": 1.0}),
    ("merge_rank_traces", {"merged_into_rank": 1}),
    ("drop_distributed_info", {}),
    ("duplicate_events", {"duplicated_rank": 0}),
    ("drop_flow_events", {}),
    ("truncate_gzip", {"cut_gzip_rank": 0, "kept_gzip_fraction": 0.5}),
    ("truncate_gzip", {"cut_gzip_rank": 1, "kept_gzip_fraction": 0.001}),  # the gzip header alone
]


@pytest.mark.parametrize("name,params", EDGE_PARAMS)
def test_no_diageval_reader_prints_a_traceback_on_a_defect_bundle(bundle, tmp_path, name, params):
    """The bundle derived as the cache derives it; trace stats (table, JSON), the bundle checks and rules on it:
    each answers or refuses with a clear error, never an exception."""
    from click.testing import CliRunner

    from diageval.cli import main
    from diageval.recording.cache import derive_bundle

    info = FAULTS[name]
    out = tmp_path / "derived"
    derive_bundle(bundle, out, [info.load()(info.params_model.model_validate(params))])
    b = EvidenceBundle.open(out)
    assert b.verify_checksums() == []
    runner = CliRunner()
    for args in (["trace", "stats", str(out)], ["trace", "stats", "--json", str(out)],
                 *(["trace", "stats", str(p)] for p in b.trace_paths().values()),
                 ["diagnose", "-d", "rules", "--no-sandbox", str(out)]):
        res = runner.invoke(main, args)
        assert res.exception is None or isinstance(res.exception, SystemExit), (args, res.output, res.exception)
        assert "Traceback" not in res.output, (args, res.output)


def test_trace_stats_says_what_is_wrong_with_the_evidence(bundle):
    from diageval.bundle.trace_stats import trace_stats
    from diageval.bundle.trace_stats_table import format_table

    assert trace_stats(bundle / "rank0" / "trace.json.gz").defects == []
    _edit("duplicate_events", bundle, duplicated_rank=1)
    _edit("merge_rank_traces", bundle, merged_into_rank=0)
    stats = trace_stats(bundle / "rank0" / "trace.json.gz")
    assert any("from 2 processes" in d for d in stats.defects) and any("recorded twice" in d for d in stats.defects)
    assert "evidence defect" in format_table(stats)


def test_the_devices_copy_of_a_step_marker_is_not_another_process(bundle):
    """Kineto copies each ProfilerStep onto the GPU's timeline (gpu_user_annotation, the device's pid): one rank."""
    doc = _doc(bundle, 0)
    doc["traceEvents"] += [{**e, "cat": "gpu_user_annotation", "pid": 0, "tid": 7} for e in doc["traceEvents"]
                           if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")]
    _write(bundle, 0, doc)
    assert _findings(bundle, 0) == []


@pytest.mark.parametrize("offset_us,disagrees", [(-50.0, True), (50.0, False)])
def test_a_device_clock_behind_the_hosts_is_recognised_by_causality(tmp_path, offset_us, disagrees):
    """Kernels start 10 us after their launch; moved 50 us earlier they start before it (impossible): named by
    trace stats and rules. Moved later, only the delays grow: nothing the evidence can tell."""
    from gpu_traces import gpu_trace

    from diageval.bundle.trace_stats import trace_stats
    from diageval.diagnosers.rules.inputs import gather_evidence

    root = build_bundle(tmp_path / "b", n_steps=6)
    gpu_trace(root / "rank0" / "trace.json.gz", steps=6, delay_us=10.0)
    assert trace_stats(root / "rank0" / "trace.json.gz").defects == []
    edit = _edit("device_clock_offset", root, device_clock_rank=0, device_clock_offset_us=offset_us)
    edit.check_present(root)
    said = trace_stats(root / "rank0" / "trace.json.gz").defects
    assert any("clock disagrees" in d for d in said) == disagrees, said
    from diageval.bundle.model import BundleManifest, describe_files
    m = BundleManifest.model_validate_json((root / "bundle.json").read_text())
    (root / "bundle.json").unlink()
    (root / "bundle.json").write_text(m.model_copy(update={"files": describe_files(root)}).model_dump_json())
    ev = gather_evidence(EvidenceBundle.open(root))
    assert ("clock disagrees" in ev.defects.get(0, "")) == disagrees and 1 not in ev.defects
    with pytest.raises(EvidenceEditError, match="no device event"):  # a CPU trace: nothing to move
        _edit("device_clock_offset", root, device_clock_rank=1, device_clock_offset_us=-5.0).check_present(root)


@pytest.mark.parametrize("origin_us,lost", [(0.0, False), (5.6e12, True)])
def test_events_at_zero_are_lost_times_only_far_from_the_recording(tmp_path, origin_us, lost):
    """No step markers: two short events at ts 0 on a trace rebased to start at 0 (the rest right after) are its
    start; the same two on a Kineto trace stamped months after its base lost their times."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": t, "ts": 0, "dur": 3} for t in (1, 2)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": origin_us + 5 + 10 * i, "dur": 4}
           for i in range(50)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    obs = DefectObserver()
    summarize_trace(path, observers=[obs])
    assert any("stamped ts 0" in f for f in obs.findings()) == lost


def test_with_only_the_device_clock_off_rules_still_reads_the_hosts_wait_for_data(tmp_path):
    from gpu_traces import gpu_trace

    from diageval.bundle.model import BundleManifest, describe_files

    root = build_bundle(tmp_path / "b", world_size=1, n_steps=8, step_log=False)
    gpu_trace(root / "rank0" / "trace.json.gz", steps=8, wait_us=4_000.0)
    _edit("device_clock_offset", root, device_clock_rank=0, device_clock_offset_us=-50.0)
    m = BundleManifest.model_validate_json((root / "bundle.json").read_text())
    (root / "bundle.json").unlink()
    (root / "bundle.json").write_text(m.model_copy(update={"files": describe_files(root)}).model_dump_json())
    d = RulesDiagnoser().diagnose(EvidenceBundle.open(root))
    (f,) = [f for f in d.findings if f.kind == "cause" and f.confidence >= 0.5]
    assert f.category == "input.dataloader_starvation" and "clock disagrees" in f.summary
