"""`diageval bundle import`: wrapping users' own Kineto traces into evidence bundles."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diageval.bundle.importer import TraceImportError, import_traces, profiler_steps
from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stream import event_from_dict
from diageval.cli import main


def write_trace(path: Path, *, rank: int | None = None, world_size: int | None = None, backend: str | None = None,
                gpu: str | None = None, kernels: bool = False, steps: int = 0, base_ns: int | None = None) -> Path:
    """A minimal Kineto-shaped trace: ProfilerStep spans of 10 ms, optional kernel events."""
    events = []
    for i in range(steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 3}",
                       "pid": 1, "tid": 1, "ts": 1000.0 + i * 10_000, "dur": 10_000})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                       "ts": 1100.0 + i * 10_000, "dur": 500})
    if kernels:
        events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1200.0, "dur": 50})
    trace: dict = {"schemaVersion": 1, "traceEvents": events}
    dist = {k: v for k, v in {"rank": rank, "world_size": world_size, "backend": backend}.items() if v is not None}
    if dist:
        trace["distributedInfo"] = dist
    if gpu:
        trace["deviceProperties"] = [{"id": 0, "name": gpu}]
    if base_ns is not None:
        trace["baseTimeNanoseconds"] = base_ns
    data = json.dumps(trace).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def test_ranks_env_and_steps_from_the_traces(tmp_path):
    src = tmp_path / "src"
    write_trace(src / "a.json", rank=1, world_size=4, backend="nccl", gpu="NVIDIA H100", steps=3, base_ns=10**18)
    write_trace(src / "b.json.gz", rank=0, world_size=4, backend="nccl", kernels=True, steps=3, base_ns=10**18)
    out = import_traces([src], tmp_path / "bundle")

    b = EvidenceBundle.open(out)
    assert b.manifest.origin == "imported"
    assert sorted(b.trace_paths()) == [0, 1]
    assert b.env.device == "cuda" and b.env.gpu_name == "NVIDIA H100"
    assert b.env.world_size == 4 and b.env.backend == "nccl"
    assert b.verify_checksums() == []
    # a .gz input is copied byte for byte; a .json input is gzipped and still parses to the same JSON
    assert (out / "rank0" / "trace.json.gz").read_bytes() == (src / "b.json.gz").read_bytes()
    assert b.load_trace(1) == json.loads((src / "a.json").read_bytes())
    steps = b.steps()
    assert [(s.rank, s.step) for s in steps] == [(0, 3), (0, 4), (0, 5), (1, 3), (1, 4), (1, 5)]
    # epoch seconds: baseTimeNanoseconds (1e9 s) + ts 1000 us
    assert steps[0].t_start == pytest.approx(1e9 + 0.001) and steps[0].duration == pytest.approx(0.010)


def test_rank_from_file_name_then_in_order(tmp_path):
    write_trace(tmp_path / "rank-3.Jul_15.pt.trace.json", steps=0)
    write_trace(tmp_path / "sampled_rank-1.json.gz")
    write_trace(tmp_path / "worker.json")
    write_trace(tmp_path / "other.json")
    out = import_traces(
        [tmp_path / "rank-3.Jul_15.pt.trace.json", tmp_path / "sampled_rank-1.json.gz",
         tmp_path / "worker.json", tmp_path / "other.json"],
        tmp_path / "bundle",
    )
    b = EvidenceBundle.open(out)
    assert sorted(b.trace_paths()) == [0, 1, 2, 3]
    assert b.env.device == "cpu" and b.env.gpu_name is None and b.env.backend is None
    assert b.env.world_size == 4  # no distributedInfo: highest rank + 1
    assert not (out / "steps.jsonl").exists()  # no ProfilerStep markers: nothing invented
    assert b.load_trace(0) == json.loads((tmp_path / "worker.json").read_bytes())


def test_cpu_trace_is_cpu_and_world_size_may_exceed_traces(tmp_path):
    write_trace(tmp_path / "t.json", rank=34, world_size=300, backend="gloo", steps=1)
    b = EvidenceBundle.open(import_traces([tmp_path / "t.json"], tmp_path / "bundle"))
    assert b.env.device == "cpu" and b.env.world_size == 300 and list(b.trace_paths()) == [34]


def test_same_traces_same_bundle_id(tmp_path):
    write_trace(tmp_path / "src" / "t.json.gz", rank=0)
    a = EvidenceBundle.open(import_traces([tmp_path / "src"], tmp_path / "a"))
    b = EvidenceBundle.open(import_traces([tmp_path / "src"], tmp_path / "b"))
    assert a.bundle_id == b.bundle_id
    write_trace(tmp_path / "src2" / "t.json.gz", rank=1)
    assert EvidenceBundle.open(import_traces([tmp_path / "src2"], tmp_path / "c")).bundle_id != a.bundle_id


def test_duplicate_rank_names_both_files(tmp_path):
    write_trace(tmp_path / "x.json", rank=0)
    write_trace(tmp_path / "y.json", rank=0)
    with pytest.raises(TraceImportError, match=r"y\.json.*rank 0.*x\.json"):
        import_traces([tmp_path], tmp_path.parent / f"{tmp_path.name}-out")
    assert not (tmp_path.parent / f"{tmp_path.name}-out").exists()


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("broken.json", b"{\"traceEvents\": [", "not valid JSON"),
        ("list.json", b"[1, 2]", "traceEvents"),
        ("fake.json.gz", b"not gzip at all", "cannot read"),
    ],
)
def test_invalid_trace_names_the_file_and_leaves_nothing(tmp_path, name, content, expected):
    bad = tmp_path / "src" / name
    bad.parent.mkdir()
    bad.write_bytes(content)
    write_trace(tmp_path / "src" / "ok.json", rank=0)
    with pytest.raises(TraceImportError) as err:
        import_traces([tmp_path / "src"], tmp_path / "out")
    assert str(bad) in str(err.value) and expected in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no bundle, no temp folder


def test_bad_inputs(tmp_path):
    with pytest.raises(TraceImportError, match="no such file"):
        import_traces([tmp_path / "missing.json"], tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceImportError, match="no trace files"):
        import_traces([tmp_path / "empty"], tmp_path / "out")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(TraceImportError, match="not a trace file"):
        import_traces([tmp_path / "notes.txt"], tmp_path / "out")
    write_trace(tmp_path / "a.json", rank=0, world_size=2)
    write_trace(tmp_path / "b.json", rank=1, world_size=8)
    with pytest.raises(TraceImportError, match="disagree on distributedInfo.world_size"):
        import_traces([tmp_path / "a.json", tmp_path / "b.json"], tmp_path / "out")
    with pytest.raises(TraceImportError, match="given twice"):
        import_traces([tmp_path / "a.json", tmp_path / "a.json"], tmp_path / "out")
    write_trace(tmp_path / "neg.json", rank=-1)
    with pytest.raises(TraceImportError, match=r"neg\.json: distributedInfo\.rank"):
        import_traces([tmp_path / "neg.json"], tmp_path / "out")


def test_refuses_to_overwrite(tmp_path):
    write_trace(tmp_path / "t.json", rank=0)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(TraceImportError, match="already exists"):
        import_traces([tmp_path / "t.json"], tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert EvidenceBundle.open(import_traces([tmp_path / "t.json"], tmp_path / "empty")).trace_paths()


def test_profiler_steps_ignore_gpu_annotations_and_keep_first_duplicate():
    events = [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 5},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 10, "dur": 20},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 99, "dur": 1},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#x", "ts": 0, "dur": 1},
    ]
    steps = profiler_steps([event_from_dict(e) for e in events], None)
    assert steps == [(1, pytest.approx(10e-6), pytest.approx(30e-6))]


def test_cli_import_and_error(tmp_path):
    write_trace(tmp_path / "src" / "rank0.json", rank=0, world_size=1, steps=2)
    runner = CliRunner()
    ok = runner.invoke(main, ["bundle", "import", str(tmp_path / "src"), "--out", str(tmp_path / "b")])
    assert ok.exit_code == 0, ok.output
    assert "ranks [0]" in ok.output and EvidenceBundle.open(tmp_path / "b").verify_checksums() == []
    again = runner.invoke(main, ["bundle", "import", str(tmp_path / "src"), "--out", str(tmp_path / "b")])
    assert again.exit_code == 1 and "already exists" in again.output


def test_rank_in_a_file_name_cannot_make_a_huge_world(tmp_path):
    write_trace(tmp_path / "rank1000000000.json")
    with pytest.raises(TraceImportError, match=r"world size 1000000001 \(rank 1000000000 of .*rank1000000000\.json"
                                               r" \+ 1\) is over the limit of 1048576 ranks, with 1 trace file\(s\)"
                                               r" present; .* --max-world-size"):
        import_traces([tmp_path / "rank1000000000.json"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # a declared world size is checked the same way; a lower limit refuses a smaller job
    write_trace(tmp_path / "big" / "t.json", rank=0, world_size=5000)
    with pytest.raises(TraceImportError, match=r"world size 5000 \(distributedInfo.world_size of .*t\.json\) is over"
                                               r" the limit of 4096"):
        import_traces([tmp_path / "big"], tmp_path / "out", max_world_size=4096)
    assert EvidenceBundle.open(import_traces([tmp_path / "big"], tmp_path / "out")).env.world_size == 5000


def test_rank_outside_the_declared_world_is_refused(tmp_path):
    write_trace(tmp_path / "a.json", rank=0, world_size=2)
    write_trace(tmp_path / "rank-7.json", world_size=2)
    with pytest.raises(TraceImportError, match=r"rank-7\.json: rank 7 is outside the job: a\.json declares"
                                               r" distributedInfo.world_size = 2 \(expected ranks 0..1\)"):
        import_traces([tmp_path / "a.json", tmp_path / "rank-7.json"], tmp_path / "out")


def test_decompressed_size_cap_refuses_a_gzip_bomb_cleanly(tmp_path):
    """A trace that inflates past the cap is refused after reading that much (not held), naming the flag."""
    head = gzip.compress(b'{"traceEvents": [')
    spaces = gzip.compress(b" " * (16 << 20), compresslevel=9)
    bomb = tmp_path / "src" / "bomb.json.gz"
    bomb.parent.mkdir()
    bomb.write_bytes(head + spaces * 192)  # 3 GiB of JSON, 3 MB on disk
    with pytest.raises(TraceImportError, match=r"bomb\.json\.gz: decompresses to more than 33554432 bytes of JSON"
                                               r" .*raise the limit with --max-trace-gib"):
        import_traces([bomb], tmp_path / "out", max_trace_bytes=32 << 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    runner = CliRunner()
    res = runner.invoke(main, ["bundle", "import", str(bomb), "--out", str(tmp_path / "b"), "--max-trace-gib", "0.03"])
    assert res.exit_code == 1 and "--max-trace-gib" in res.output and not (tmp_path / "b").exists()


def test_zero_bomb_and_bad_text_are_named(tmp_path):
    zeros = tmp_path / "zeros.json.gz"
    zeros.write_bytes(gzip.compress(bytes(16 << 20), compresslevel=9) * 192)  # 3 GiB of NUL bytes
    with pytest.raises(TraceImportError, match=r"zeros\.json\.gz: not a Chrome trace: .* at byte 0$"):
        import_traces([zeros], tmp_path / "out")
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"traceEvents": [{"name": "caf\xe9"}]}')
    with pytest.raises(TraceImportError, match=r"latin1\.json: not UTF-8 .* at byte 30$"):
        import_traces([bad], tmp_path / "out")
    deep = tmp_path / "deep.json"
    deep.write_text('{"traceEvents": [{"args": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    with pytest.raises(TraceImportError, match=r"deep\.json: JSON nested deeper than Python's recursion limit"):
        import_traces([deep], tmp_path / "out")


def test_truncated_gzip_is_refused_with_the_reason(tmp_path):
    src = write_trace(tmp_path / "t.json.gz", rank=0, steps=200)
    packed = src.read_bytes()
    src.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(TraceImportError, match=r"t\.json\.gz: not valid JSON: the trace is cut short \(compressed"):
        import_traces([src], tmp_path / "out")
