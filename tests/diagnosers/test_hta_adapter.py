"""The ``hta`` adapter end to end: availability, CPU bundles, HTA failures, silence."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pandas as pd
import pytest

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed, DiagnoserUnavailable

DATALOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_unavailable_without_hta(monkeypatch):
    from diageval.diagnosers.hta_adapter import HTADiagnoser

    monkeypatch.setitem(sys.modules, "hta.trace_analysis", None)  # makes `import hta.trace_analysis` fail
    with pytest.raises(DiagnoserUnavailable, match=r"pip install 'diageval\[hta\]'"):
        HTADiagnoser()


def test_registered_as_entry_point():
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="diageval.diagnosers") if e.name == "hta"]
    assert [e.value for e in eps] == ["diageval.diagnosers.hta_adapter:HTADiagnoser"]


# --- with HTA installed ----------------------------------------------------------------------------


def cpu_trace(rank: int, *, steps: int, step_us: float, load_us: float | None, world_size: int = 2) -> dict:
    """A CPU-only gloo trace shaped like torch.profiler's: ProfilerStep spans, the DataLoader's __next__
    (cat user_annotation) at the start of each step, then forward/backward operators filling the rest."""
    pid = tid = 1000 + rank
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": "python"}}]
    ext = 0

    def x(cat: str, name: str, ts: float, dur: float, tid: int = tid) -> None:
        nonlocal ext
        ext += 1
        events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                       "args": {"External id": ext, "Record function id": 0, "Ev Idx": ext}})

    t = 1_000.0
    for s in range(steps):
        x("user_annotation", f"ProfilerStep#{s + 2}", t, step_us)
        cursor = t + 5
        if load_us is not None:
            x("user_annotation", DATALOADER_NEXT, cursor, load_us)
            cursor += load_us + 5
        remaining = t + step_us - 5 - cursor
        x("user_annotation", "## forward ##", cursor, remaining / 2 - 1)
        for name in ("aten::linear", "aten::relu", "aten::mse_loss"):
            x("cpu_op", name, cursor, remaining / 6 - 2)
            cursor += remaining / 6
        for name in ("autograd::engine::evaluate_function: AddmmBackward0", "aten::mm"):
            x("cpu_op", name, cursor, remaining / 4 - 2, tid=tid + 1)  # backward runs on its own thread
            cursor += remaining / 4
        t += step_us + 10
    return {"schemaVersion": 1, "deviceProperties": [],
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world_size},
            "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}


def cpu_bundle(tmp_path: Path, name: str, **kw) -> EvidenceBundle:
    src = tmp_path / f"{name}-src"
    src.mkdir()
    for r in (0, 1):
        # compact JSON, as some exporters write it: HTA's own rank regex ('"rank":\\s+N') would miss it
        (src / f"rank{r}.json").write_text(json.dumps(cpu_trace(r, **kw), separators=(",", ":")))
    return EvidenceBundle.open(import_traces([src], tmp_path / name))


@pytest.fixture
def hta_diagnoser():
    pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis not installed (pip install 'diageval[hta]')")
    from diageval.diagnosers.hta_adapter import HTADiagnoser

    return HTADiagnoser()


def test_cpu_bundle_starved_input_pipeline(hta_diagnoser, tmp_path):
    b = cpu_bundle(tmp_path, "starved", steps=6, step_us=20_000, load_us=15_000)
    d = hta_diagnoser.diagnose(b)
    assert d.abstain is None
    [f] = d.causes
    assert f.category == "input.dataloader_starvation" and f.ranks is None
    assert 0.6 <= f.impact <= 0.8  # the load is 75% of each step
    assert [e.split(":")[0] for e in f.evidence] == ["rank0/trace.json.gz", "rank1/trace.json.gz"]


def test_cpu_bundle_healthy_input_pipeline(hta_diagnoser, tmp_path):
    b = cpu_bundle(tmp_path, "healthy", steps=6, step_us=20_000, load_us=1_000)
    d = hta_diagnoser.diagnose(b)
    assert d.abstain is None and d.findings == []


def test_cpu_bundle_without_data_loading_abstains(hta_diagnoser, tmp_path):
    b = cpu_bundle(tmp_path, "noload", steps=4, step_us=10_000, load_us=None)
    d = hta_diagnoser.diagnose(b)
    assert d.findings == [] and d.abstain is not None and "no HTA analysis applies" in d.abstain.reason


def test_the_critical_path_breakdown_is_htas_own(hta_diagnoser, tmp_path):
    """The adapter's graph computes ``bound_by`` once per distinct (type, name, stream) instead of once per edge
    as a pandas row: the table must be HTA's own, to the cell."""
    from hta.analyzers.critical_path_analysis import CPGraph

    from diageval.diagnosers import hta_adapter

    b = cpu_bundle(tmp_path, "cp", steps=5, step_us=20_000, load_us=12_000)
    with hta_adapter._quiet_hta():
        t = hta_adapter._load_trace({r: str(p) for r, p in b.trace_paths().items()})
        graph = hta_adapter._kernel_optional_cpgraph()(t, t, 0, data_load_events=hta_adapter.DATA_LOAD_EVENTS)
        assert graph.critical_path()
        ours = graph.get_critical_path_breakdown()
        htas = CPGraph.get_critical_path_breakdown(graph)
    assert set(htas["bound_by"]) >= {"cpu_bound", "data_loading"}  # the table has something to get wrong
    pd.testing.assert_frame_equal(ours, htas)


def test_hta_raising_is_a_diagnoser_failure(hta_diagnoser, tmp_path, monkeypatch):
    from diageval.diagnosers import hta_adapter

    b = cpu_bundle(tmp_path, "b", steps=3, step_us=10_000, load_us=8_000)

    def broken(*args, **kwargs):
        raise KeyError("ts")

    monkeypatch.setattr(hta_adapter, "_kernel_optional_cpgraph", lambda: broken)
    with pytest.raises(DiagnoserFailed) as err:
        hta_diagnoser.diagnose(b)
    assert err.value.status == "hta_error"
    assert "critical path on rank 0" in str(err.value) and "KeyError" in str(err.value)


def test_hta_is_silent_and_leaves_logging_as_it_was(hta_diagnoser, tmp_path, capsys, caplog):
    b = cpu_bundle(tmp_path, "quiet", steps=4, step_us=10_000, load_us=8_000)
    before = logging.getLogger("hta").level
    with caplog.at_level(logging.DEBUG):
        hta_diagnoser.diagnose(b)
    assert capsys.readouterr().out == ""
    assert not [r for r in caplog.records if r.name.startswith("hta")]
    assert logging.getLogger("hta").level == before


def test_hta_leaves_the_root_logger_unconfigured(hta_diagnoser, tmp_path):
    # HTA's critical path calls logging.info() on the root logger when it merges the backward thread,
    # which would install a stderr handler on an unconfigured root for the rest of the process
    root = logging.getLogger()
    saved = root.handlers[:]
    for h in saved:
        root.removeHandler(h)
    try:
        hta_diagnoser.diagnose(cpu_bundle(tmp_path, "root", steps=4, step_us=10_000, load_us=8_000))
        assert root.handlers == [] and logging.root.manager.disable == logging.NOTSET
    finally:
        for h in saved:
            root.addHandler(h)


def test_empty_bundle_abstains(hta_diagnoser, tmp_path):
    b = cpu_bundle(tmp_path, "gone", steps=2, step_us=10_000, load_us=1_000)
    for p in b.trace_paths().values():
        p.unlink()
    assert "no trace files" in hta_diagnoser.diagnose(b).abstain.reason


def test_missing_rank_and_no_cause_abstains_but_a_found_cause_stands(hta_diagnoser, tmp_path):
    healthy = cpu_bundle(tmp_path, "h", steps=4, step_us=10_000, load_us=500)
    healthy.trace_paths()[1].unlink()
    d = hta_diagnoser.diagnose(healthy)
    assert d.causes == [] and "no trace for rank(s) 1 of 2" in d.abstain.reason
    starved = cpu_bundle(tmp_path, "s", steps=4, step_us=10_000, load_us=8_000)
    starved.trace_paths()[1].unlink()
    d = hta_diagnoser.diagnose(starved)
    assert d.abstain is None and [f.category for f in d.causes] == ["input.dataloader_starvation"]


def test_truncated_trace_is_left_out_not_a_failure(hta_diagnoser, tmp_path):
    b = cpu_bundle(tmp_path, "t", steps=4, step_us=10_000, load_us=500)
    path = b.trace_paths()[1]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    d = hta_diagnoser.diagnose(b)
    assert d.causes == [] and "rank1/trace.json.gz unreadable" in d.abstain.reason
    b.trace_paths()[0].write_bytes(b"\x1f\x8b garbage")
    d = hta_diagnoser.diagnose(b)
    assert d.abstain.reason.startswith("no readable trace") and "rank0" in d.abstain.reason


def test_hta_failing_on_readable_traces_is_a_diagnoser_failure(hta_diagnoser, tmp_path, monkeypatch):
    from diageval.diagnosers import hta_adapter

    b = cpu_bundle(tmp_path, "f", steps=3, step_us=10_000, load_us=500)

    def broken_loader(trace_files):
        raise ValueError("Trace files validation failed.")

    monkeypatch.setattr(hta_adapter, "_load_trace", broken_loader)
    with pytest.raises(DiagnoserFailed, match="HTA failed loading the traces: ValueError: Trace files validation"):
        hta_diagnoser.diagnose(b)
