"""scale_out (issue 26 item 2): an N-rank bundle from a 2-rank one, on small synthetic bundles (fast)."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest
from synthetic_traces import StepShape, build_bundle

from diageval.bundle.model import EvidenceBundle
from diageval.cases.model import Case, WorkloadSpec
from diageval.cases.tiers import traced_ranks
from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
from diageval.recording.cache import derive_bundle
from diageval.recording.faults import FAULTS
from diageval.recording.faults import params as p
from diageval.recording.faults.scale_out import RANKS_PER_HOST, WARP_CLIP_US

W2 = WorkloadSpec(name="mlp_ddp", world_size=2, steps=30)


def _straggler(rank: int, step: int) -> StepShape:
    return StepShape(compute_us=32000.0) if rank == 1 else StepShape()


def _base(tmp_path: Path, shape=None) -> Path:
    root = build_bundle(tmp_path / "base", **({"shape": shape} if shape else {}), n_steps=12)
    rows = [{"time": 1.79e9 + i, "scope": "rank", "rank": r, "cpu_percent": 90.0} for r in (0, 1) for i in range(3)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "logs").mkdir()
    (root / "flight_recorder").mkdir()
    for r in (0, 1):
        (root / "logs" / f"rank{r}.log").write_text(f"rank {r}/2 on cpu (gloo): 30 steps\n")
        dump = {"version": "2.10", "pg_config": {"": {"ranks": "[0, 1]"}}, "entries": [
            {"time_created_ns": 1_790_000_000_000_000_000 + r, "profiling_name": "gloo:all_gather", "output_sizes": [[2, 1]]}]}
        (root / "flight_recorder" / f"rank_{r}").write_bytes(pickle.dumps(dump, protocol=2))
    return root


def _scaled(tmp_path: Path, base: Path, **params) -> Path:
    info = FAULTS["scale_out"]
    defaults = dict(scaled_world_size=16, kept_rank=1, kept_at_rank=11, copied_rank=0, window_first_step=2, window_steps=8)
    edit = info.load()(info.params_model.model_validate({**defaults, **params}))
    dest = tmp_path / "scaled"
    derive_bundle(base, dest, [edit])
    return dest


def _trace(bundle: Path, rank: int) -> dict:
    return json.loads(gzip.decompress((bundle / f"rank{rank}" / "trace.json.gz").read_bytes()))


def test_a_scaled_straggler_is_found_at_its_drawn_rank_and_every_rank_is_consistent(tmp_path):
    scaled = _scaled(tmp_path, _base(tmp_path, _straggler))
    b = EvidenceBundle.open(scaled)
    assert b.world_size == 16 and b.verify_checksums() == []
    assert sorted(b.trace_paths()) == list(range(16))
    assert {s.rank for s in b.steps()} == set(range(16))
    diagnosis = RulesDiagnoser().diagnose(b)
    assert [(c.category, c.ranks) for c in diagnosis.causes] == [("compute.straggler_rank", [11])]
    raws = set()
    for rank in range(16):
        doc = _trace(scaled, rank)
        assert doc["distributedInfo"]["rank"] == rank and doc["distributedInfo"]["world_size"] == 16
        steps = sorted(int(e["name"].split("#")[1]) for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
        assert steps == list(range(2, 10))
        raws.add(json.dumps(doc["traceEvents"]))
        # the warp is monotone: every op stays inside its step marker, with a positive duration
        markers = [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") == "cpu_op":
                assert e["dur"] > 0
                assert any(lo <= e["ts"] and e["ts"] + e["dur"] <= hi for lo, hi in markers)
        assert (scaled / "logs" / f"rank{rank}.log").read_text().startswith(f"rank {rank}/16 ")
        dump = pickle.loads((scaled / "flight_recorder" / f"rank_{rank}").read_bytes())
        assert dump["pg_config"][""]["ranks"] == str(list(range(16))) and dump["entries"][0]["output_sizes"] == [[16, 1]]
    assert len(raws) == 16  # jittered: no two ranks' events are the same


def test_no_rank_log_marks_the_kept_rank(tmp_path):
    """Issue 44: the kept rank's own log was the only one unlike the copies (its losses, its failure line), which
    named the culprit of 7 of 7 scale bundles without a look at a trace. Every scaled rank's log is now the copied
    rank's: with the rank and world size taken out, all 16 read the same."""
    base = _base(tmp_path, _straggler)
    (base / "logs" / "rank1.log").write_text("rank 1/2 on cpu (gloo): 30 steps\nstep 0 loss 2.3026\nstep 5 failed: stalled\n")
    (base / "logs" / "rank0.log").write_text("rank 0/2 on cpu (gloo): 30 steps\nstep 0 loss 2.2991\ntraining done\n")
    scaled = _scaled(tmp_path, base)  # kept rank 1 at rank 11, copies of rank 0
    texts = {(scaled / "logs" / f"rank{r}.log").read_text().replace(f"rank {r}/16", "rank R/16") for r in range(16)}
    assert texts == {"rank R/16 on cpu (gloo): 30 steps\nstep 0 loss 2.2991\ntraining done\n"}


def test_two_derivations_with_one_case_seed_draw_apart(tmp_path):
    """Issue 44: the trace ids, process ids and clock offsets of a scaled bundle came from the case's jitter_seed
    alone, which the public case file states, so they could be computed from it and matched. Each derivation now
    mixes a fresh seed in: the same case derived twice shares no trace id."""
    base = _base(tmp_path)
    for r in (0, 1):  # Kineto's trace id, as a recorded trace carries one
        doc = _trace(base, r)
        (base / f"rank{r}" / "trace.json.gz").write_bytes(gzip.compress(json.dumps({**doc, "trace_id": f"{r:032X}"}).encode()))
    derive_bundle(base, tmp_path / "base-ok", [])  # the manifest over the rewritten traces
    ids, pids = [], []
    for name in ("one", "two"):
        scaled = _scaled(tmp_path / name, tmp_path / "base-ok", jitter_seed=7)
        docs = [_trace(scaled, r) for r in range(16)]
        ids.append({d["trace_id"] for d in docs})
        pids.append({e["pid"] for d in docs for e in d["traceEvents"] if e.get("ph") == "X"})
    assert len(ids[0]) == 16 and not ids[0] & ids[1] and pids[0] != pids[1]


def test_copies_keep_the_step_level_figures_and_ranks_of_a_host_share_a_clock(tmp_path):
    base = _base(tmp_path)
    scaled = _scaled(tmp_path, base, jitter_seed=7)
    src = {e["name"]: e for e in _trace(base, 0)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    offsets = {}
    for rank in range(16):
        if rank == 11:
            continue
        mine = {e["name"]: e for e in _trace(scaled, rank)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
        for name, e in mine.items():
            assert abs(e["dur"] - src[name]["dur"]) <= 2 * WARP_CLIP_US + 1e-3
        offsets[rank] = min(e["ts"] for e in mine.values()) - min(e["ts"] for n, e in src.items() if n in mine)
    hosts = {}
    for rank, off in offsets.items():
        hosts.setdefault(rank // RANKS_PER_HOST, []).append(off)
    for offs in hosts.values():  # one clock per host: the ranks differ by their warps only
        assert max(offs) - min(offs) <= 2 * WARP_CLIP_US + 1e-3
    assert RulesDiagnoser().diagnose(EvidenceBundle.open(scaled)).causes == []


def test_sampled_ranks_keep_only_their_traces_and_everything_else(tmp_path):
    scaled = _scaled(tmp_path, _base(tmp_path, _straggler), traced_ranks=[3, 5, 14])
    b = EvidenceBundle.open(scaled)
    assert sorted(b.trace_paths()) == [3, 5, 14]
    assert {s.rank for s in b.steps()} == set(range(16))
    assert len(list((scaled / "flight_recorder").iterdir())) == 16
    case = Case(id="x", title="x", workload=W2, labels={"causes": [], "expect": "healthy"},
                faults=[{"name": "scale_out", "params": {"scaled_world_size": 16, "kept_rank": 1, "kept_at_rank": 11,
                                                          "copied_rank": 0, "window_first_step": 2, "window_steps": 8,
                                                          "traced_ranks": [3, 5, 14]}}])
    assert case.world_size == 16 and traced_ranks(case) == {3, 5, 14}


def test_params_are_checked_against_the_recording():
    good = dict(scaled_world_size=16, kept_rank=1, kept_at_rank=11, copied_rank=0, window_first_step=20, window_steps=5)
    assert p.check_scale_out(p.ScaleOutParams(**good), W2) == []
    bad = {**good, "kept_rank": 0, "kept_at_rank": 16, "traced_ranks": [2, 16], "window_first_step": 2}
    fields = sorted(f for f, _ in p.check_scale_out(p.ScaleOutParams(**bad), W2))
    assert fields == ["copied_rank", "kept_at_rank", "traced_ranks", "window_first_step"]
    with pytest.raises(ValueError):
        p.ScaleOutParams(**{**good, "traced_ranks": [3, 3]})
