"""hta refuses, before reading anything, the bundles it could not analyse within a case's time or the memory it
may use (issue 26): the adapter abstains with the reason (diagnosers/hta_prechecks.py)."""

from __future__ import annotations

import gzip
import json

from diageval.diagnosers.hta_prechecks import (
    HTA_BYTES_PER_JSON_BYTE,
    memory_blocker,
    rank_count_blocker,
    trace_json_bytes,
    usable_memory,
)


def test_json_bytes_come_from_the_gzip_trailer_or_the_file_size(tmp_path):
    raw = json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": i, "dur": 1} for i in range(2000)]}).encode()
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "t.json").write_bytes(raw)
    assert trace_json_bytes(tmp_path / "t.json.gz") == len(raw)
    assert trace_json_bytes(tmp_path / "t.json") == len(raw)


def test_memory_blocker_compares_the_measured_ratio_with_what_the_process_may_use(tmp_path):
    raw = b'{"traceEvents": []}' + b" " * 100_000
    paths = {}
    for r in range(3):
        (tmp_path / f"r{r}.json").write_bytes(raw)
        paths[r] = str(tmp_path / f"r{r}.json")
    need = 3 * len(raw) * HTA_BYTES_PER_JSON_BYTE
    assert memory_blocker(paths, available=need) is None
    why = memory_blocker(paths, available=need - 1)
    assert why is not None and "3 traces" in why and "GB this process may use" in why
    assert 0 < usable_memory()


def test_rank_count_blocker_refuses_a_thousand_ranks_not_a_hundred():
    assert rank_count_blocker({r: f"rank{r}" for r in range(128)}) is None
    why = rank_count_blocker({r: f"rank{r}" for r in range(1024)})
    assert why is not None and "1024 ranks" in why
