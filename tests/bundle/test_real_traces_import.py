"""Every real trace in ../shared/real-traces imports into a bundle with the right ranks, env and checksums."""

from __future__ import annotations

import gzip
import json

import pytest

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.fileio import sha256_file
from diageval.paths import real_traces_dir

REAL_TRACES = real_traces_dir() / "hta"
if not REAL_TRACES.is_dir():
    pytest.skip(f"real traces not found at {REAL_TRACES} (set DIAGEVAL_DATA, or put shared/ beside the repo)",
                allow_module_level=True)

TRACE_DIRS = sorted(p for p in REAL_TRACES.iterdir() if p.is_dir())

# What each folder's README row says about it (ranks present, device, world size from distributedInfo).
EXPECTED = {
    "trace_filter": {"ranks": [0, 1], "device": "cuda", "world_size": 128, "backend": "nccl"},
    "nccl_parser_config": {"ranks": [0], "device": "cuda", "world_size": 2, "backend": "nccl"},
    "critical_path_alexnet": {"ranks": [0], "device": "cuda", "world_size": 1, "backend": None},
    "cpu_only": {"ranks": [34], "device": "cpu", "world_size": 300, "backend": "gloo"},
}


@pytest.mark.parametrize("trace_dir", TRACE_DIRS, ids=lambda p: p.name)
def test_real_trace_imports(trace_dir, tmp_path):
    b = EvidenceBundle.open(import_traces([trace_dir], tmp_path / "bundle"))
    expected = EXPECTED.get(trace_dir.name)
    if expected is not None:
        assert sorted(b.trace_paths()) == expected["ranks"]
        assert b.env.device == expected["device"]
        assert b.env.world_size == expected["world_size"]
        assert b.env.backend == expected["backend"]
    assert b.verify_checksums() == []
    # every rank's trace is the original file, byte for byte (all real traces are gzipped)
    originals = {sha256_file(f) for f in trace_dir.iterdir() if f.name.endswith(".gz")}
    assert {sha256_file(p) for p in b.trace_paths().values()} == originals
    for rank, path in b.trace_paths().items():
        with gzip.open(path) as fh:
            trace = json.load(fh)
        dist_rank = (trace.get("distributedInfo") or {}).get("rank")
        assert dist_rank in (None, rank)
    if b.env.device == "cuda" and any(
        p.get("name") for t in [b.load_trace(r) for r in b.trace_paths()] for p in t.get("deviceProperties", [])
    ):
        assert b.env.gpu_name and "A100" in b.env.gpu_name
    for s in b.steps():
        assert s.rank in b.trace_paths() and s.t_end > s.t_start > 1.5e9  # epoch seconds, after 2017
