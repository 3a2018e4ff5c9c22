"""In-job monitors (issue 27 item 4): what a monitor is handed, its own cache entry, the pipeline's
monitor path, and each adapter's mapping from its tool's output to the taxonomy.

One test records (``tests/monitor_probe.py``: a 6-step, two-rank case with a probe monitor, ~10 s); the
rest use synthetic monitor output. The adapters' tests skip, saying which extra to install, when their
tool is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from diageval.cases.load import load_case_set
from diageval.diagnosers.base import DiagnoserFailed
from diageval.recording.monitors import MONITORS, monitor_for_spec
from diageval.recording.monitors.hooks import HIDDEN_ENV_PREFIX, MONITOR_DIR, PhaseClock, scrub_environment
from locations import REPO



class _Bundle:
    """What an adapter reads of a bundle: its folder."""

    def __init__(self, root: Path):
        self.root = root


# --- the registry, its diagnosers, the file names both sides use ---------------------------------------


def test_every_monitor_has_a_diagnoser_of_its_name_and_the_file_names_agree():
    from diageval.diagnosers import monitors as adapters
    from diageval.diagnosers.monitors import nvrx_straggler, traceml
    from diageval.recording.monitors import nvrx as nvrx_job
    from diageval.recording.monitors import traceml as traceml_job

    names = {e.name: e.value for e in entry_points(group="diageval.diagnosers")}
    for name in MONITORS:
        assert name in names, f"monitor {name} has no diagnoser entry point of its name"
        assert names[name].startswith("diageval.diagnosers.monitors."), names[name]
    assert adapters.MONITOR_DIR == MONITOR_DIR
    assert nvrx_straggler.REPORTS_FILE == nvrx_job.REPORTS_FILE
    assert Path(traceml_job.rows_file(3)).match(traceml.ROWS_GLOB)
    assert monitor_for_spec(" traceml ") is MONITORS["traceml"]
    assert monitor_for_spec("rules") is None and monitor_for_spec("mypkg.mod:traceml") is None


# --- what a monitor is handed ---------------------------------------------------------------------------


def test_the_environment_scrub_removes_every_diageval_variable(monkeypatch):
    monkeypatch.setenv("DIAGEVAL_CASES", "/somewhere/cases")
    monkeypatch.setenv("DIAGEVAL_HOME", "/somewhere/home")
    monkeypatch.setenv("KEEP_ME", "1")
    gone = scrub_environment()
    assert set(gone) >= {"DIAGEVAL_CASES", "DIAGEVAL_HOME"}
    assert not [k for k in os.environ if k.startswith(HIDDEN_ENV_PREFIX)] and os.environ["KEEP_ME"] == "1"


@pytest.mark.slow
def test_a_probe_monitor_in_a_recorded_job_is_handed_nothing_of_the_case(tmp_path):
    """Every route a monitor is handed, recorded by a probe in a real two-rank job with a live fault."""
    env = {**os.environ, "DIAGEVAL_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "monitor_probe.py"), str(tmp_path / "out"), "--case-named",
                           "straggler-rank1"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    case = load_case_set(None).select(["straggler-rank1"])[0].case
    words = {case.id, case.title}
    for fault in case.faults:
        words.add(fault.name)
        words.update(fault.params)  # parameter names
    words.update(c.category for c in case.labels.causes)
    words.update(case.labels.symptoms)
    seen_any = False
    for rank in (0, 1):
        path = tmp_path / "out" / "probe" / MONITOR_DIR / f"probe-rank{rank}.json"
        seen = json.loads(path.read_text())
        seen_any = True
        assert seen["context_fields"] == ["device", "out_dir", "rank", "world_size"]
        assert seen["context"]["rank"] == str(rank) and seen["context"]["world_size"] == "2"
        assert not [k for k in seen["environ"] if k.startswith(HIDDEN_ENV_PREFIX)], "a DIAGEVAL_* variable reached the monitor"
        assert seen["argv"] == seen["argv"][:1], f"argv reached the monitor: {seen['argv']}"
        assert seen["out_dir_listing"] == []
        text = json.dumps({k: v for k, v in seen.items() if k != "steps"}).lower()
        leaked = sorted(w for w in words if w.lower() in text)
        assert not leaked, f"the monitor was handed {leaked}"
        steps = seen["steps"]
        assert [s["step"] for s in steps] == list(range(6)) and not seen["failed"]
        assert all(s["forward_ms"] and s["backward_ms"] is not None and s["optimizer_ms"] for s in steps), steps
    assert seen_any


# --- a monitor run's evidence and the pipeline ---------------------------------------------------------


def test_a_monitored_recording_has_its_own_cache_key_per_monitor():
    from diageval.recording.cache import cache_key
    from diageval.recording.monitors.evidence import monitored_key

    case = load_case_set(None).select(["straggler-rank1"])[0].case
    keys = {cache_key(case, "cpu"), *(monitored_key(case, "cpu", m) for m in MONITORS.values())}
    assert len(keys) == 1 + len(MONITORS)


def test_cases_no_monitor_can_watch_end_unavailable_saying_why_and_tiers_are_refused():
    from diageval.recording import CaseEnd, RecordingPolicy, prepare_case
    from diageval.recording.monitors.evidence import UNWATCHABLE, not_monitorable
    from diageval.run.pipeline import RunError, _for_monitor

    cases = load_case_set(None).cases
    calls = []
    policy = _for_monitor("traceml", RecordingPolicy(device="cpu"), "full")
    assert policy == RecordingPolicy(device="cpu", monitor="traceml")
    why = {lc.case.id: not_monitorable(lc.case) for lc in cases}
    recorded = [lc for lc in cases if lc.case.recorded is not None]
    fleets = [lc for lc in cases if getattr(lc.case, "fleet", None) is not None]
    assert recorded and all("real job" in why[lc.case.id] for lc in recorded)
    assert all("fleet" in why[lc.case.id] for lc in fleets)
    assert any(w and "edit of the finished bundle" in w for w in why.values())
    for lc in recorded[:1] + fleets[:1]:  # every case stays: the board compares runs with equal counts
        end = prepare_case(lc, policy, prepare=lambda loaded, p: calls.append(loaded))
        assert isinstance(end, CaseEnd) and end.status == "unavailable" and end.error.startswith(UNWATCHABLE)
    assert calls == []  # refused before any evidence is made
    assert _for_monitor("rules", policy, "steps").monitor is None
    with pytest.raises(RunError, match="in-job monitor"):
        _for_monitor("nvrx-straggler", RecordingPolicy(), "steps")


def test_the_phase_clock_times_forward_backward_and_optimizer_through_public_hooks():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    clock = PhaseClock()
    clock.attach()
    try:
        clock.start()
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        opt.step()
        phases = clock.phases(0)
    finally:
        clock.detach()
    assert phases.forward_ms is not None and phases.backward_ms is not None and phases.optimizer_ms is not None
    assert phases.forward_ms + phases.backward_ms + phases.optimizer_ms <= phases.step_ms
    clock.start()
    model(torch.randn(4, 8))  # detached: not timed
    assert clock.phases(1).forward_ms is None


# --- the adapters ---------------------------------------------------------------------------------------


def _write(folder: Path, name: str, rows: list[dict]) -> None:
    (folder / MONITOR_DIR).mkdir(parents=True, exist_ok=True)
    (folder / MONITOR_DIR / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def _nvrx_report(a: int, b: int, relative: dict, individual: dict) -> dict:
    return {"steps": [a, b], "straggler_sections_relative": relative, "straggler_sections_individual": individual,
            "straggler_gpus_relative": [], "straggler_gpus_individual": []}


def test_nvrx_adapter_claims_the_rank_its_reports_flag_with_their_consistency(tmp_path):
    pytest.importorskip("nvidia_resiliency_ext", reason="nvrx-straggler needs pip install 'diageval[nvrx]'")
    from diageval.diagnosers.monitors.nvrx_straggler import REPORTS_FILE, NvrxStragglerDiagnoser

    reports = [_nvrx_report(0, 5, {"forward": [0]}, {})]  # one noisy window flags rank 0
    reports += [_nvrx_report(a, a + 5, {"forward": [1]}, {"step": [0, 1]}) for a in range(5, 30, 5)]
    _write(tmp_path, REPORTS_FILE, reports)
    found = NvrxStragglerDiagnoser().diagnose(_Bundle(tmp_path)).findings
    by = {(f.category, tuple(f.ranks or ())): f for f in found}
    assert by[("compute.straggler_rank", (1,))].confidence == pytest.approx(5 / 6, abs=1e-3)
    assert by[("compute.straggler_rank", (1,))].steps == (5, 30)
    assert by[("compute.straggler_rank", (0,))].confidence < 0.5  # a hedge, not a claim
    assert by[("symptom.slow_step", (0, 1))].kind == "symptom"


def test_nvrx_adapter_abstains_without_reports_and_fails_on_a_monitor_error(tmp_path):
    pytest.importorskip("nvidia_resiliency_ext", reason="nvrx-straggler needs pip install 'diageval[nvrx]'")
    from diageval.diagnosers.monitors.nvrx_straggler import NvrxStragglerDiagnoser

    (tmp_path / MONITOR_DIR).mkdir()
    assert NvrxStragglerDiagnoser().diagnose(_Bundle(tmp_path)).abstain is not None
    (tmp_path / MONITOR_DIR / "error-rank1.txt").write_text("RuntimeError: boom")
    with pytest.raises(DiagnoserFailed, match="boom") as err:
        NvrxStragglerDiagnoser().diagnose(_Bundle(tmp_path))
    assert err.value.status == "monitor_error"


def _traceml_rows(world: int, steps: int, slow: dict[int, dict[str, float]]) -> list[dict]:
    rows = []
    for r in range(world):
        for s in range(steps):
            ms = {"input_wait": 1.0, "forward": 10.0, "backward": 20.0, "optimizer_step": 2.0}
            ms.update(slow.get(r, {}))
            ms["traced_step_time"] = ms["forward"] + ms["backward"] + ms["optimizer_step"] + 1.0
            rows.append({"rank": r, "world_size": world, "step": s, "cpu_ms": ms})
    return rows


@pytest.mark.parametrize("slow, expect", [
    # rank 1's forward is slow; rank 0 waits for its gradients in backward, as DDP makes it
    ({1: {"forward": 60.0}, 0: {"backward": 70.0}}, ("compute.straggler_rank", [1])),
    ({0: {"input_wait": 80.0}, 1: {"input_wait": 80.0}}, ("input.dataloader_starvation", None)),
    ({}, None),
])
def test_traceml_adapter_maps_its_step_time_diagnosis(tmp_path, slow, expect):
    pytest.importorskip("traceml_ai", reason="traceml needs pip install 'diageval[traceml]'")
    from diageval.diagnosers.monitors.traceml import TraceMLDiagnoser

    for r, rows in enumerate([_traceml_rows(2, 24, slow)]):
        _write(tmp_path, f"traceml-rank{r}.jsonl", rows)
    diagnosis = TraceMLDiagnoser().diagnose(_Bundle(tmp_path))
    claims = [(f.category, f.ranks) for f in diagnosis.findings if f.confidence >= 0.5]
    assert diagnosis.abstain is None
    assert claims == ([expect] if expect else []), [f.summary for f in diagnosis.findings]


# --- on a GPU (scripts/gpu-check.sh runs the gpu-marked tests) ------------------------------------------


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_devices() < 1, reason="needs a CUDA device")
def test_gpu_nvrx_detector_in_a_cuda_job_reports_section_and_gpu_scores(tmp_path):
    """On CUDA the in-job monitor uses nvrx's own Detector (CUPTI kernel timing): its reports carry GPU scores."""
    pytest.importorskip("nvidia_resiliency_ext", reason="nvrx-straggler needs pip install 'diageval[nvrx]'")
    from diageval.diagnosers.monitors.nvrx_straggler import REPORTS_FILE, NvrxStragglerDiagnoser
    from diageval.recording.record import record_case

    case = load_case_set(None).get("mlp-healthy-gpu").case
    small = case.model_copy(update={"workload": case.workload.model_copy(update={"steps": 12})})
    record_case(small, tmp_path / "b", device="cuda", monitor="nvrx-straggler")
    folder = tmp_path / "b" / MONITOR_DIR
    errors = {p.name: p.read_text() for p in folder.glob("error-rank*.txt")}
    assert not errors, errors
    reports = [json.loads(line) for line in (folder / REPORTS_FILE).read_text().splitlines()]
    assert len(reports) >= 2
    assert all(r["gpu_relative_perf_scores"] for r in reports), reports
    assert all(set(r["section_relative_perf_scores"]) == {"forward", "step"} for r in reports), reports
    assert NvrxStragglerDiagnoser().diagnose(_Bundle(tmp_path / "b")).abstain is None


# --- overhead beside skill in the report -----------------------------------------------------------------


def test_the_report_shows_a_measured_monitor_overhead_beside_its_skill(tmp_path):
    from run_fakes import FakeEvidence, make_case, make_case_set, run_with

    from diageval.reports.report import report_runs
    from diageval.reports.signal_value import (OVERHEAD_FILE, MonitorOverhead, OverheadMeasurement, gather_points,
                                               signal_value_html)

    case_set = make_case_set([make_case("v1", ranks=[1]), make_case("v3", expect="healthy")])
    common = dict(cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs", evidence_fn=FakeEvidence(tmp_path / "bundles"),
                  progress=None, cuda_device_count=lambda: 0, timeout=5.0)
    dirs = [run_with("null", case_set, run_id="null", **common).run_dir,
            run_with("null", case_set, evidence="steps", run_id="null-steps", **common).run_dir]
    assert "In-job monitors" not in report_runs(dirs)  # nothing measured, no table
    # "null" stands in for a monitor's diagnoser: the table matches runs to measurements by diagnoser name
    measured = OverheadMeasurement(case="c", method="m", monitors=[MonitorOverhead(monitor="null", slowdown=1.07, ci=(1.01, 1.15), n=8)])
    (tmp_path / "runs" / OVERHEAD_FILE).write_text(measured.model_dump_json())
    markdown = report_runs(dirs)
    section = markdown.partition("## In-job monitors: skill beside overhead")[2]
    rows = [line for line in section.splitlines() if line.startswith("| null |")]
    assert len(rows) == 1 and "1.070x [1.010, 1.150] | 8 |" in rows[0]  # the full-evidence run only
    assert 'id="monitor-overhead"' in signal_value_html(gather_points(dirs))
    (tmp_path / "runs" / OVERHEAD_FILE).write_text("{}")
    with pytest.raises(ValueError, match=OVERHEAD_FILE):
        gather_points(dirs)
