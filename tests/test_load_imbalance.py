"""The ``load_imbalance`` fault: its params checks, what its injector hands each rank, and the evidence
that tells it apart from a straggler in recorded bundles (operator input shapes differ across ranks
under load imbalance, and are the same under a straggler)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stream import StreamState, iter_trace_events
from diageval.cases.load import check_case
from diageval.cases.model import Case
from diageval.cases.taxonomy import load_taxonomy
from diageval.recording.faults import FAULTS

COMPUTE_OPS = {"aten::mm", "aten::addmm", "aten::scaled_dot_product_attention"}


def _case(faults, *, workload="mlp_ddp", world_size=2, steps=10, params=None, case_id="imbalance-test") -> Case:
    return Case.model_validate({
        "id": case_id, "title": "t",
        "workload": {"name": workload, "world_size": world_size, "steps": steps, "params": params or {}},
        "faults": faults, "labels": {"expect": "healthy"},
    })


def _fault(**params):
    return {"name": "load_imbalance", "params": params}


@pytest.mark.parametrize("params, field, message", [
    ({"target_rank": 2, "work_factor": 2}, "faults[0].params.target_rank", "out of range for world_size 2"),
    ({"target_rank": 0, "work_factor": 2, "start_step": 10}, "faults[0].params.start_step", "not before the workload's 10 steps"),
    ({"target_rank": 0, "work_factor": 1.0}, "faults[0].params.work_factor", "greater than 1"),
    ({"target_rank": 0, "work_factor": 9}, "faults[0].params.work_factor", "less than or equal to 8"),
    ({"target_rank": 0, "work_factor": 2, "rank": 1}, "faults[0].params.rank", "unknown field"),
    ({"work_factor": 2}, "faults[0].params.target_rank", "required"),
])
def test_bad_params_are_rejected_with_field_and_reason(params, field, message):
    problems = check_case(_case([_fault(**params)]), "x.yaml", load_taxonomy())
    assert any(p.field == field and message in p.message for p in problems), problems


def test_a_single_rank_has_nothing_to_be_uneven_with():
    problems = check_case(_case([_fault(target_rank=0, work_factor=2)], world_size=1), "x.yaml", load_taxonomy())
    assert any("world_size >= 2" in p.message for p in problems), problems


def test_registered_as_the_load_imbalance_cause():
    assert FAULTS["load_imbalance"].injects == ("compute.load_imbalance",)
    assert FAULTS["load_imbalance"].load().stage == "live"


def _ctx(rank: int):
    from diageval.recording.context import RankContext

    return RankContext(rank=rank, world_size=2, steps=10, device="cpu", backend="gloo", scratch_dir=Path("."))


def _injected(dataset, rank: int, **params):
    info = FAULTS["load_imbalance"]
    return info.load()(info.params_model(**params), _ctx(rank)).dataset(dataset)


def test_only_the_target_rank_gets_larger_batches_from_its_step():
    from diageval.recording.workloads.base import SyntheticBatches
    from diageval.recording.workloads.params import TransformerParams
    from diageval.recording.workloads.transformer import TokenBatches

    rows = SyntheticBatches(6, (10, 4), classes=3, seed=1, prep_seconds=0)
    heavy = _injected(rows, 1, target_rank=1, work_factor=2.5, start_step=2)
    assert len(heavy) == 6
    assert [heavy[i][0].shape[0] for i in range(4)] == [10, 10, 25, 25]  # more rows from step 2
    assert heavy[1][0].equal(rows[1][0])  # before start_step: the very same batch
    assert _injected(rows, 0, target_rank=1, work_factor=2.5) is rows  # not the target rank: untouched

    tokens = TokenBatches(6, TransformerParams(batch_size=3), seed=2, prep_seconds=0)
    longer = _injected(tokens, 1, target_rank=1, work_factor=2.0)
    for i in range(4):
        assert longer[i][0].shape == (3, 2 * tokens[i][0].shape[1])  # same sequences per batch, twice as long


def test_a_dataset_that_cannot_grow_is_refused_with_a_reason():
    with pytest.raises(TypeError, match="has no resized"):
        _injected(list(range(5)), 0, target_rank=0, work_factor=2)


def _compute_shapes(path: Path) -> Counter:
    """How often each (op, input dims) pair occurs in one rank's trace, over its compute ops."""
    state = StreamState()
    return Counter((e.name, str(e.decoded_args().get("Input Dims"))) for e in iter_trace_events(path, state)
                   if e.ph == "X" and e.name in COMPUTE_OPS)


def _record(case: Case, dest: Path) -> dict[int, Counter]:
    from diageval.recording.record import record_case

    record_case(case, dest, device="cpu")
    bundle = EvidenceBundle.open(dest)
    return {rank: _compute_shapes(path) for rank, path in bundle.trace_paths().items()}


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["transformer_lm", "mlp_ddp"])
def test_recorded_imbalance_differs_in_shapes_across_ranks_and_a_straggler_does_not(workload, tmp_path: Path):
    params = {"trace_steps": 3}
    uneven = _record(_case([_fault(target_rank=1, work_factor=2.0)], workload=workload, steps=5, params=params),
                     tmp_path / "uneven")
    slow = _record(_case([{"name": "slow_rank", "params": {"target_rank": 1, "slowdown_factor": 2.0}}],
                         workload=workload, steps=5, params=params), tmp_path / "slow")
    assert uneven[0] and uneven[1]
    assert slow[0] == slow[1]  # a straggler runs the very same ops on the very same shapes
    assert uneven[0] != uneven[1]
    assert sum(uneven[0].values()) == sum(uneven[1].values())  # the same ops, on different shapes
    assert not set(uneven[0]) & set(uneven[1])  # every compute op of the heavier rank takes larger inputs
