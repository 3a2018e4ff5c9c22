"""host.cpu_contention (diagnosers/rules/contention.py): a CPU rank whose matrix products took more wall time than the
process got CPU time was held off its cores; waiting, or a host with its cores free, is not contention."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from synthetic_traces import StepShape, build_bundle

from diageval.bundle.model import BundleManifest, EvidenceBundle, describe_files
from diageval.diagnosers.rules.contention import measure_contention
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
from diageval.diagnosers.rules.inputs import cpu_samples, gather_evidence


def with_shapes_and_metrics(root: Path, cpu_percent: float, clock_offset_s: float = 0.0) -> Path:
    """The bundle's matrix products given input shapes (record_shapes, so they count as arithmetic), and a
    metrics.jsonl of the rank's CPU every 100 ms over the steps (``clock_offset_s``: samples on another clock)."""
    path = root / "rank0" / "trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("name") == "aten::mm":
            e.setdefault("args", {})["Input Dims"] = [[64, 256], [256, 256]]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    steps = [json.loads(line) for line in (root / "steps.jsonl").read_text().splitlines()]
    t, end = steps[0]["t_start"] - 0.05 + clock_offset_s, steps[-1]["t_end"] + 0.1 + clock_offset_s
    rows = [{"time": t, "scope": "host", "cpu_percent": 90.0, "mem_used_bytes": 1}]
    while t < end:
        t += 0.1
        rows += [{"time": t, "scope": "rank", "rank": 0, "cpu_percent": cpu_percent, "rss_bytes": 1},
                 {"time": t, "scope": "host", "cpu_percent": 90.0, "mem_used_bytes": 1}]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = BundleManifest.model_validate_json((root / "bundle.json").read_text())
    manifest = manifest.model_copy(update={"files": describe_files(root)})
    (root / "bundle.json").write_text(manifest.model_dump_json(indent=1))
    return root


def bundle(tmp_path: Path, shape: StepShape, cpu_percent: float, **kw) -> EvidenceBundle:
    root = build_bundle(tmp_path / "b", lambda r, k: shape, world_size=1, n_steps=30)
    return EvidenceBundle.open(with_shapes_and_metrics(root, cpu_percent, **kw))


def causes(b: EvidenceBundle) -> dict[str, object]:
    return {f.category: f for f in RulesDiagnoser().diagnose(b).causes}


def test_ops_running_longer_than_the_process_gets_cpu_is_contention(tmp_path):
    # the products take ~82% of each step's wall time (3.8 of 4.65 ms); the process gets 35% of a core over them
    b = bundle(tmp_path, StepShape(compute_us=4000, comm_us=100, data_us=100, gap_us=100), cpu_percent=35.0)
    f = causes(b)["host.cpu_contention"]
    assert f.ranks == [0] and f.confidence >= 0.9
    assert 0.42 < f.impact < 0.52
    assert any("metrics.jsonl" in e for e in f.evidence) and any("trace.json" in e for e in f.evidence)


def test_a_rank_with_its_core_is_not_contended(tmp_path):
    b = bundle(tmp_path, StepShape(compute_us=4000, comm_us=100, data_us=100, gap_us=100), cpu_percent=85.0)
    assert "host.cpu_contention" not in causes(b)


def test_a_rank_that_waits_spends_no_cpu_and_is_not_contended(tmp_path):
    # a loop waiting for its data (or a disk, a peer) uses little CPU, but its products are a small part of the step
    b = bundle(tmp_path, StepShape(compute_us=600, data_us=6000, comm_us=100, gap_us=100), cpu_percent=12.0)
    assert "host.cpu_contention" not in causes(b)


def test_samples_on_another_clock_say_nothing(tmp_path):
    b = bundle(tmp_path, StepShape(compute_us=4000, comm_us=100, data_us=100, gap_us=100), cpu_percent=35.0,
               clock_offset_s=3600.0)
    assert measure_contention(gather_evidence(b)) == []
    assert "host.cpu_contention" not in causes(b)


def test_cpu_samples_keep_only_rank_rows_that_read_as_samples(tmp_path):
    root = build_bundle(tmp_path / "b", world_size=1, n_steps=3)
    rows = [{"time": 2.0, "scope": "rank", "rank": 0, "cpu_percent": 50.0}, {"time": 1.0, "scope": "rank", "rank": 0,
            "cpu_percent": 40.0}, {"time": 1.5, "scope": "host", "cpu_percent": 99.0},
            {"time": None, "scope": "rank", "rank": 0, "cpu_percent": 10.0}, {"scope": "rank", "rank": "0"},
            {"time": 3.0, "scope": "rank", "rank": 1, "cpu_percent": -5.0}]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = cpu_samples(EvidenceBundle.open(root))
    assert list(got) == [0] and [(s.time, s.share) for s in got[0]] == [(1.0, 0.4), (2.0, 0.5)]
