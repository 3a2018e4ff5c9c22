"""`diageval bundle import` on evidence that lies (issue 40 item 4): each defect the importer can name is repaired
or refused, what it did is printed and recorded in the bundle; no defect input gives a traceback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from synthetic_traces import build_bundle

from diageval.bundle.import_repairs import REPORT_NAME, read_report
from diageval.bundle.importer import TraceImportError, import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.cli import main
from diageval.recording.faults import FAULTS
from diageval.recording.faults.bundle_edits import EvidenceEditError

DEFECTS = ["zero_timestamps", "merge_rank_traces", "drop_distributed_info", "duplicate_events", "drop_flow_events",
           "truncate_gzip", "rename_comm_kernels", "device_clock_offset"]
PARAMS = {"zero_timestamps": {"zeroed_rank": 1, "zeroed_share": 0.5}, "merge_rank_traces": {"merged_into_rank": 0},
          "duplicate_events": {"duplicated_rank": 1}, "truncate_gzip": {"cut_gzip_rank": 1, "kept_gzip_fraction": 0.5},
          "device_clock_offset": {"device_clock_rank": 1, "device_clock_offset_us": -500.0}}


def _edit(name: str, bundle: Path) -> None:
    info = FAULTS[name]
    info.load()(info.params_model.model_validate(PARAMS.get(name, {}))).apply(bundle)


def _doc(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _write(path: Path, doc: dict) -> None:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def _keys(events: list) -> list[str]:
    return sorted(json.dumps(e, sort_keys=True) for e in events)


def _traces(bundle: Path) -> list[Path]:
    return sorted(bundle.glob("rank*/trace.json.gz"))


@pytest.fixture()
def bundle(tmp_path) -> Path:
    """Two ranks as two processes (host pids 1 and 2), each with a GPU (device pids 0 and 7) whose kernels link to
    their launches by correlation id; the ids collide across ranks (5), as each process counts its own."""
    root = build_bundle(tmp_path / "b", n_steps=6)
    for rank, host, device, corrs in ((0, 1, 0, (4, 5)), (1, 2, 7, (5, 6))):
        path = root / f"rank{rank}" / "trace.json.gz"
        doc = _doc(path)
        for e in doc["traceEvents"]:
            e["pid"] = host
        for i, c in enumerate(corrs):
            ts = 2000.0 + 100 * i
            doc["traceEvents"] += [
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host, "tid": 1, "ts": ts,
                 "dur": 5, "args": {"correlation": c}},
                {"ph": "X", "cat": "kernel", "name": "gemm", "pid": device, "tid": 7, "ts": ts + 10, "dur": 50,
                 "args": {"correlation": c, "device": device}},
                {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": c, "pid": host, "tid": 1, "ts": ts},
                {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": c, "pid": device, "tid": 7, "ts": ts + 10, "bp": "e"}]
        doc["traceEvents"].append({"ph": "M", "name": "process_name", "pid": device, "tid": 0,
                                   "args": {"name": f"GPU {device}"}})
        _write(path, doc)
    return root


def test_merged_ranks_are_split_into_one_trace_per_process(bundle, tmp_path):
    originals = {r: _doc(bundle / f"rank{r}" / "trace.json.gz")["traceEvents"] for r in (0, 1)}
    _edit("merge_rank_traces", bundle)
    out = import_traces([bundle / "rank0" / "trace.json.gz"], tmp_path / "imported")

    b = EvidenceBundle.open(out)
    assert sorted(b.trace_paths()) == [0, 1] and b.env.world_size == 2 and b.verify_checksums() == []
    for r in (0, 1):  # each piece is its rank's trace again: its host events, its device's kernels and flows
        piece = b.load_trace(r)
        assert _keys(piece["traceEvents"]) == _keys(originals[r])
        assert "rank" not in piece["distributedInfo"] and piece["distributedInfo"]["world_size"] == 2
    assert sorted({s.rank for s in b.steps()}) == [0, 1]
    (note,) = read_report(out).notes
    assert (note.kind, note.action, note.ranks, note.count) == ("ranks_merged", "repaired", [0, 1], 2)


def test_merged_ranks_whose_kernels_cannot_be_told_apart_are_refused(bundle, tmp_path):
    for rank, pid in ((0, 0), (1, 7)):  # each GPU's kernels only under the id both processes launched
        path = bundle / f"rank{rank}" / "trace.json.gz"
        doc = _doc(path)
        doc["traceEvents"] = [e for e in doc["traceEvents"] if (e.get("args") or {}).get("correlation", 5) == 5
                              and e.get("id", 5) == 5]
        _write(path, doc)
    _edit("merge_rank_traces", bundle)
    with pytest.raises(TraceImportError) as err:
        import_traces([bundle / "rank0" / "trace.json.gz"], tmp_path / "imported")
    msg = str(err.value)
    assert str(bundle / "rank0" / "trace.json.gz") in msg and "pids 1, 2" in msg and "on pid 0" in msg
    assert "--no-repair" in msg and not (tmp_path / "imported").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no scratch left behind


def test_no_repair_imports_merged_ranks_as_given_and_says_so(bundle, tmp_path):
    _edit("merge_rank_traces", bundle)
    src = bundle / "rank0" / "trace.json.gz"
    out = import_traces([src], tmp_path / "imported", repair=False)
    b = EvidenceBundle.open(out)
    assert sorted(b.trace_paths()) == [0] and (out / "rank0" / "trace.json.gz").read_bytes() == src.read_bytes()
    (note,) = read_report(out).notes
    assert (note.kind, note.action, note.ranks, note.count) == ("ranks_merged", "kept_as_given", [0], 2)


def test_duplicated_events_are_dropped(bundle, tmp_path):
    original = _doc(bundle / "rank1" / "trace.json.gz")["traceEvents"]
    _edit("duplicate_events", bundle)
    out = import_traces(_traces(bundle), tmp_path / "imported")
    b = EvidenceBundle.open(out)
    assert _keys(b.load_trace(1)["traceEvents"]) == _keys(original)
    assert (out / "rank0" / "trace.json.gz").read_bytes() == (bundle / "rank0" / "trace.json.gz").read_bytes()
    assert [s.step for s in b.steps() if s.rank == 1] == list(range(6))
    (note,) = read_report(out).notes
    assert (note.kind, note.action, note.ranks) == ("events_duplicated", "repaired", [1])
    assert note.count == sum(1 for e in original if e.get("ph") != "M")


def test_duplicated_steps_that_differ_are_refused(bundle, tmp_path):
    _edit("duplicate_events", bundle)
    path = bundle / "rank1" / "trace.json.gz"
    doc = _doc(path)
    markers = [e for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")]
    markers[-1]["ts"] += 3.0  # the second capture's copy of the last step has its own time
    _write(path, doc)
    with pytest.raises(TraceImportError) as err:
        import_traces(_traces(bundle), tmp_path / "imported")
    msg = str(err.value)
    assert str(path) in msg and "ProfilerStep#5" in msg and "differ" in msg and not (tmp_path / "imported").exists()
    out = import_traces(_traces(bundle), tmp_path / "as-given", repair=False)  # as given, on request
    (note,) = read_report(out).notes
    assert (note.kind, note.action, note.ranks) == ("events_duplicated", "kept_as_given", [1])


def test_events_at_ts_zero_are_counted_reported_and_kept(bundle, tmp_path):
    _edit("zero_timestamps", bundle)
    src = bundle / "rank1" / "trace.json.gz"
    zeroed = sum(1 for e in _doc(src)["traceEvents"] if e.get("ph") == "X" and e.get("ts") == 0)
    out = import_traces(_traces(bundle), tmp_path / "imported")
    assert (out / "rank1" / "trace.json.gz").read_bytes() == src.read_bytes()
    (note,) = read_report(out).notes
    assert (note.kind, note.action, note.ranks, note.count) == ("timestamps_lost", "reported", [1], zeroed)
    assert zeroed > 2


def test_an_intact_import_has_no_report(bundle, tmp_path):
    out = import_traces(_traces(bundle), tmp_path / "imported")
    assert not (out / REPORT_NAME).exists() and read_report(out) is None


def test_cli_prints_a_line_per_repair(bundle, tmp_path):
    _edit("duplicate_events", bundle)
    _edit("zero_timestamps", bundle)
    res = CliRunner().invoke(main, ["bundle", "import", *map(str, _traces(bundle)), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("bundle ")
    assert lines[1].startswith("repaired: ranks [1]: ") and "exact copies" in lines[1]
    assert lines[2].startswith("reported: ranks [1]: ") and "ts 0" in lines[2]


@pytest.mark.parametrize("defect", DEFECTS)
@pytest.mark.parametrize("repair", [True, False])
def test_no_traceback_on_any_defect(bundle, tmp_path, defect, repair):
    try:
        _edit(defect, bundle)
    except EvidenceEditError:  # a GPU-only defect on this CPU-shaped trace: nothing to break
        pytest.skip(f"{defect} does not apply")
    args = ["bundle", "import", *map(str, _traces(bundle)), "--out", str(tmp_path / "o")]
    res = CliRunner().invoke(main, args + ([] if repair else ["--no-repair"]))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    if res.exit_code:
        assert "trace.json.gz" in res.output  # a refusal names the file
    elif (tmp_path / "o" / REPORT_NAME).exists():  # evidence about the evidence, no label: no fault's name in it
        text = (tmp_path / "o" / REPORT_NAME).read_text()
        assert not [name for name in FAULTS if name in text]
