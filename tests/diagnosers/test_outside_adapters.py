"""The outside-tool adapters (tbprofiler, gpu-idle, changepoint, flightrecorder) on synthetic bundles and
hand-made Flight Recorder dumps: their mappings, abstentions and statuses."""

from __future__ import annotations

import json
import pickle
import sys

import pytest
from synthetic_traces import StepShape, build_bundle

from diageval.bundle.model import EvidenceBundle
from diageval.hosting.registry import resolve_diagnoser


def _diagnoser(name):
    resolved = resolve_diagnoser(name)
    try:
        return resolved.factory()
    except Exception as exc:  # the extra is not installed here
        pytest.skip(f"{name} unavailable: {exc}")


def test_each_adapter_declares_what_it_can_claim():
    claims = {n: resolve_diagnoser(n).claims for n in ("tbprofiler", "gpu-idle", "changepoint", "flightrecorder")}
    assert claims["flightrecorder"] == ("comm.collective_hang",)
    assert claims["tbprofiler"] == ("input.dataloader_starvation",)
    assert set(claims["gpu-idle"]) == {"input.dataloader_starvation", "launch.kernel_launch_overhead"}
    assert claims["changepoint"] == ("compute.straggler_rank",)


@pytest.mark.parametrize("name, module, package, install", [
    ("changepoint", "ruptures", "ruptures", "pip install 'diageval[changepoint]'"),
    ("tbprofiler", "torch_tb_profiler.profiler.data", "torch-tb-profiler", "pip install 'diageval[tbprofiler]'"),
    ("otava", "otava.analysis", "apache-otava", "pip install 'diageval[otava]'"),
    ("traceml", "traceml_ai.diagnostics.step_time.api", "traceml-ai", "pip install 'diageval[traceml]'"),
    ("hta-tracediff", "hta.trace_diff", "HolisticTraceAnalysis (traceinsight)", "pip install 'diageval[hta]'"),
])
def test_an_adapter_without_its_package_is_unavailable_and_says_what_to_install(monkeypatch, name, module, package,
                                                                                 install):
    """One message for every adapter whose outside package cannot be imported (``require_module``): the
    diagnoser, the package it needs and the line that installs it."""
    from diageval.diagnosers.base import DiagnoserUnavailable

    factory = resolve_diagnoser(name).factory
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    with pytest.raises(DiagnoserUnavailable) as caught:
        factory()
    assert str(caught.value).startswith(f"the {name} diagnoser needs {package} (")
    assert str(caught.value).endswith(f"install it with: {install}")


# --- tbprofiler ------------------------------------------------------------------------------------


def starved(rank: int, step: int) -> StepShape:
    return StepShape(data_us=20_000.0, compute_us=4000.0)


def _recategorise_data_waits(root, cat):
    import gzip

    for path in root.glob("rank*/trace.json.gz"):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        for e in trace["traceEvents"]:
            if e.get("name", "").startswith("enumerate(DataLoader)"):
                e["cat"] = cat
        path.write_bytes(gzip.compress(json.dumps(trace).encode()))


def test_tbprofiler_maps_the_dataloader_recommendation_to_starvation(tmp_path):
    # torch 1.x wrote the DataLoader wait as an operator: the plugin (0.4.3) counts it there
    d = _diagnoser("tbprofiler")
    root = build_bundle(tmp_path / "b", shape=starved)
    _recategorise_data_waits(root, "cpu_op")
    diagnosis = d.diagnose(EvidenceBundle.open(root))
    assert [f.category for f in diagnosis.causes] == ["input.dataloader_starvation"]
    assert diagnosis.causes[0].ranks is None and diagnosis.causes[0].confidence == 0.5


def test_tbprofiler_does_not_see_data_waits_written_as_user_annotations(tmp_path):
    # torch 2.x writes them as user_annotation, which the plugin's event factory drops: the tool's behaviour
    d = _diagnoser("tbprofiler")
    diagnosis = d.diagnose(EvidenceBundle.open(build_bundle(tmp_path / "b", shape=starved)))
    assert diagnosis.causes == [] and diagnosis.abstain is None


def test_tbprofiler_recommendation_thresholds_are_the_plugins():
    from diageval.diagnosers.tbprofiler import recommendations

    assert recommendations({"dataloader": 0.05, "communication": 0.10, "min_gpu_utilization": 0.5}) == []
    got = dict(recommendations({"dataloader": 0.06, "communication": 0.11, "min_gpu_utilization": 0.49}))
    assert set(got) == {"input.dataloader_starvation", "symptom.long_collective", "symptom.low_utilization"}


def test_tbprofiler_abstains_when_a_rank_is_unreadable_and_nothing_is_found(tmp_path):
    d = _diagnoser("tbprofiler")
    diagnosis = d.diagnose(EvidenceBundle.open(build_bundle(tmp_path / "b", missing_ranks=(1,))))
    assert diagnosis.abstain is not None and "[1]" in diagnosis.abstain.reason


# --- gpu-idle --------------------------------------------------------------------------------------


def test_gpu_idle_abstains_on_traces_without_gpu_kernels(tmp_path):
    d = _diagnoser("gpu-idle")
    diagnosis = d.diagnose(EvidenceBundle.open(build_bundle(tmp_path / "b")))
    assert diagnosis.abstain is not None and "no GPU kernels" in diagnosis.abstain.reason


def test_gpu_idle_findings_map_to_the_taxonomy():
    from diageval.diagnosers.gpu_idle import merge_findings

    results = {0: [{"cause": "dataloader", "confidence": 0.7, "evidence": "e"}, {"cause": "h2d_copy", "confidence": 0.9}],
               1: [{"cause": "smallbatch", "confidence": 1.0, "evidence": "e"}]}
    found = {f.category: f for f in merge_findings(results)}
    assert set(found) == {"input.dataloader_starvation", "launch.kernel_launch_overhead"}
    assert found["input.dataloader_starvation"].ranks == [0] and found["input.dataloader_starvation"].confidence == 0.7
    assert found["launch.kernel_launch_overhead"].ranks == [1]


def _starved_gpu_bundle(tmp_path, device: str | None):
    """A starved single-rank run with short GPU kernels inside every step, on ``device`` (None: not named)."""
    import gzip

    root = build_bundle(tmp_path / "b", world_size=1, shape=starved)
    path = root / "rank0" / "trace.json.gz"
    trace = json.loads(gzip.decompress(path.read_bytes()))
    steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    for s in steps:
        trace["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": s["ts"] + 10, "dur": 5})
    trace["deviceProperties"] = [{"id": 0, "name": device}] if device else []
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return EvidenceBundle.open(root)


def test_gpu_idle_runs_the_tool_on_a_gpu_trace(tmp_path):
    diagnosis = _diagnoser("gpu-idle").diagnose(_starved_gpu_bundle(tmp_path, "NVIDIA A100-SXM4-80GB"))
    assert "input.dataloader_starvation" in [f.category for f in diagnosis.causes]


@pytest.mark.parametrize("device", ["AMD Instinct MI250X", "NVIDIA GeForce RTX 2080 Ti", None])
def test_gpu_idle_abstains_on_a_device_its_thresholds_were_not_measured_on(tmp_path, device):
    """gpu-idle's thresholds are the A100's: on another device, or one the trace does not name, it abstains
    with the reason instead of judging the trace against an A100."""
    diagnosis = _diagnoser("gpu-idle").diagnose(_starved_gpu_bundle(tmp_path, device))
    assert diagnosis.abstain is not None and diagnosis.causes == []
    assert "A100" in diagnosis.abstain.reason
    assert (device or "names no device") in diagnosis.abstain.reason


def test_gpu_idle_calibration_check():
    from diageval.diagnosers.gpu_idle import outside_calibration

    assert outside_calibration(["NVIDIA A100-PG509-200"]) is None
    assert "MI250" in outside_calibration(["AMD Instinct MI250X"])
    assert "no deviceProperties" in outside_calibration([])


# --- changepoint -----------------------------------------------------------------------------------


def _steps_bundle(tmp_path, durations: dict[int, list[float]]):
    root = build_bundle(tmp_path / "b", n_steps=4, step_log=False)
    rows = [{"rank": r, "step": i, "t_start": 100.0 + i, "t_end": 100.0 + i + d} for r, ds in durations.items() for i, d in enumerate(ds)]
    (root / "steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    return EvidenceBundle.open(root)


def _noisy(base, n, seed):
    import random

    rng = random.Random(seed)
    return [base * (1 + 0.1 * rng.uniform(-1, 1)) for _ in range(n)]


def test_changepoint_names_the_rank_whose_steps_slow_down(tmp_path):
    d = _diagnoser("changepoint")
    bundle = _steps_bundle(tmp_path, {0: _noisy(0.01, 30, 1), 1: _noisy(0.01, 10, 2) + _noisy(0.03, 20, 3)})
    causes = d.diagnose(bundle).causes
    assert [(f.category, f.ranks, f.steps[0]) for f in causes] == [("compute.straggler_rank", [1], 10)]


def test_changepoint_claims_no_cause_when_every_rank_slows(tmp_path):
    d = _diagnoser("changepoint")
    bundle = _steps_bundle(tmp_path, {r: _noisy(0.01, 10, r) + _noisy(0.03, 20, 10 + r) for r in (0, 1)})
    diagnosis = d.diagnose(bundle)
    assert diagnosis.causes == []
    assert [(f.category, f.steps) for f in diagnosis.findings] == [("symptom.slow_step", (10, 30))]


def test_changepoint_finds_nothing_in_noise_and_abstains_on_short_runs(tmp_path):
    d = _diagnoser("changepoint")
    assert d.diagnose(_steps_bundle(tmp_path / "a", {0: _noisy(0.01, 30, 4), 1: _noisy(0.01, 30, 5)})).findings == []
    assert d.diagnose(_steps_bundle(tmp_path / "b", {0: [0.01] * 5})).abstain is not None


# --- flightrecorder --------------------------------------------------------------------------------


def _entry(seq, name, size=10):
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"gloo:{name}", "time_created_ns": seq,
            "input_sizes": [[size]], "input_dtypes": ["Float"], "output_sizes": [[size]], "output_dtypes": ["Float"],
            "state": "scheduled", "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": True, "timeout_ms": 3000, "is_p2p": False, "frames": []}


def _dump_bundle(tmp_path, per_rank: dict[int, list[str]], world_size=2):
    root = build_bundle(tmp_path / "b", world_size=world_size, n_steps=4)
    for rank, names in per_rank.items():
        dump = {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": str(list(range(world_size)))}},
                "pg_status": {}, "entries": [_entry(i + 1, n) for i, n in enumerate(names)]}
        path = root / "flight_recorder" / f"rank_{rank}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(pickle.dumps(dump))
    return EvidenceBundle.open(root)


def test_flightrecorder_names_a_collective_type_mismatch_and_its_culprit(tmp_path):
    d = _diagnoser("flightrecorder")
    bundle = _dump_bundle(tmp_path, {0: ["all_reduce", "broadcast"], 1: ["all_reduce", "all_reduce"]})
    [finding] = d.diagnose(bundle).causes
    assert finding.category == "comm.collective_hang" and finding.ranks == [1] and finding.confidence == 0.9
    assert any("COLLECTIVE_TYPE_MISMATCH" in e for e in finding.evidence)


def test_flightrecorder_finds_nothing_when_the_ranks_agree(tmp_path):
    d = _diagnoser("flightrecorder")
    assert d.diagnose(_dump_bundle(tmp_path, {0: ["all_reduce"] * 3, 1: ["all_reduce"] * 3})).findings == []


def test_flightrecorder_abstains_without_dumps_or_with_a_rank_missing(tmp_path):
    d = _diagnoser("flightrecorder")
    assert "no Flight Recorder" in d.diagnose(EvidenceBundle.open(build_bundle(tmp_path / "a"))).abstain.reason
    partial = d.diagnose(_dump_bundle(tmp_path / "p", {0: ["all_reduce"] * 2}))
    assert partial.abstain is not None and "[1]" in partial.abstain.reason
