"""The ``load_imbalance`` fault (its params are checked in test_faults.py's table): what its injector hands each
rank, and the evidence that tells it apart from a straggler in recorded bundles (operator input shapes differ
across ranks under load imbalance, and are the same under a straggler)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from fault_cases import fault_case

from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stream import StreamState, iter_trace_events
from diageval.cases.model import Case
from diageval.recording.faults import FAULTS

COMPUTE_OPS = {"aten::mm", "aten::addmm", "aten::scaled_dot_product_attention"}


def _fault(**params):
    return {"name": "load_imbalance", "params": params}


def test_registered_as_the_load_imbalance_cause():
    assert FAULTS["load_imbalance"].injects == ("compute.load_imbalance",)
    assert FAULTS["load_imbalance"].load().stage == "live"


def _ctx(rank: int):
    from diageval.recording.context import RankContext

    return RankContext(rank=rank, world_size=2, steps=10, device="cpu", backend="gloo", scratch_dir=Path("."))


def _injected(dataset, rank: int, **params):
    info = FAULTS["load_imbalance"]
    return info.load()(info.params_model(**params), _ctx(rank)).dataset(dataset)


def test_only_the_heavier_rank_gets_larger_batches_from_its_step():
    from diageval.recording.workloads.base import SyntheticBatches
    from diageval.recording.workloads.params import TransformerParams
    from diageval.recording.workloads.transformer import TokenBatches

    rows = SyntheticBatches(6, (10, 4), classes=3, seed=1, prep_seconds=0)
    heavy = _injected(rows, 1, heavier_rank=1, work_factor=2.5, from_step=2)
    assert len(heavy) == 6
    assert [heavy[i][0].shape[0] for i in range(4)] == [10, 10, 25, 25]  # more rows from step 2
    assert heavy[1][0].equal(rows[1][0])  # before from_step: the very same batch
    assert _injected(rows, 0, heavier_rank=1, work_factor=2.5) is rows  # not the target rank: untouched

    tokens = TokenBatches(6, TransformerParams(batch_size=3), seed=2, prep_seconds=0)
    longer = _injected(tokens, 1, heavier_rank=1, work_factor=2.0)
    for i in range(4):
        assert longer[i][0].shape == (3, 2 * tokens[i][0].shape[1])  # same sequences per batch, twice as long


def test_a_dataset_that_cannot_grow_is_refused_with_a_reason():
    with pytest.raises(TypeError, match="has no resized"):
        _injected(list(range(5)), 0, heavier_rank=0, work_factor=2)


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


@pytest.fixture(scope="module", params=["transformer_lm", "mlp_ddp"])
def uneven_and_slow(request, tmp_path_factory) -> tuple[Path, Path]:
    """A load-imbalance bundle and a straggler bundle of the same workload (rank 1 heavier / slower)."""
    from diageval.recording.record import record_case

    out = tmp_path_factory.mktemp(request.param)
    params = {"trace_steps": 3}
    record_case(fault_case([_fault(heavier_rank=1, work_factor=2.0)], workload=request.param, steps=5, params=params),
                out / "uneven", device="cpu")
    record_case(fault_case([{"name": "slow_rank", "params": {"target_rank": 1, "slowdown_factor": 2.0}}],
                      workload=request.param, steps=5, params=params), out / "slow", device="cpu")
    return out / "uneven", out / "slow"


def _shapes_per_rank(root: Path) -> dict[int, Counter]:
    return {rank: _compute_shapes(path) for rank, path in EvidenceBundle.open(root).trace_paths().items()}


@pytest.mark.slow
def test_recorded_imbalance_differs_in_shapes_across_ranks_and_a_straggler_does_not(uneven_and_slow):
    uneven, slow = (_shapes_per_rank(root) for root in uneven_and_slow)
    assert uneven[0] and uneven[1]
    assert slow[0] == slow[1]  # a straggler runs the very same ops on the very same shapes
    assert uneven[0] != uneven[1]
    assert sum(uneven[0].values()) == sum(uneven[1].values())  # the same ops, on different shapes
    assert not set(uneven[0]) & set(uneven[1])  # every compute op of the heavier rank takes larger inputs


@pytest.mark.slow
def test_rules_measure_the_extra_arithmetic_of_the_heavier_rank_only(uneven_and_slow):
    """What the rules' load-imbalance analyser measures from shapes (not times): deterministic."""
    from diageval.diagnosers.rules.inputs import gather_evidence
    from diageval.diagnosers.rules.load_imbalance import imbalance_table, measure_work

    tables = {}
    for name, root in zip(("uneven", "slow"), uneven_and_slow):
        ev = gather_evidence(EvidenceBundle.open(root))
        tables[name] = imbalance_table(ev, measure_work(ev))
        assert len(tables[name]) == 3  # every traced step
    assert all(row.heavy_rank == 1 and row.excess >= 0.9 for row in tables["uneven"])  # twice the rows or tokens
    assert all(row.excess == 0.0 for row in tables["slow"])  # same shapes: exactly the same arithmetic


def test_op_work_from_input_shapes():
    from diageval.diagnosers.rules.load_imbalance import op_work

    assert op_work("aten::mm", {"Input Dims": [[8, 4], [4, 3]]}) == 8 * 4 * 3
    assert op_work("aten::addmm", {"Input Dims": [[3], [8, 4], [4, 3]]}) == 8 * 4 * 3
    assert op_work("aten::bmm", {"Input Dims": [[2, 8, 4], [2, 4, 3]]}) == 2 * 8 * 4 * 3
    q = [2, 4, 16, 8]  # batch, heads, length, head dim
    assert op_work("aten::_scaled_dot_product_flash_attention_for_cpu", {"Input Dims": [q, q, q]}) == 2 * 2 * 4 * 16 * 16 * 8
    assert op_work("aten::_scaled_dot_product_flash_attention_for_cpu_backward", {"Input Dims": [q, q, q, q]}) == 2 * 2 * 4 * 16 * 16 * 8
    assert op_work("aten::scaled_dot_product_attention", {"Input Dims": [q, q, q]}) == 0  # its kernel is counted
    assert op_work("aten::convolution", {"Input Dims": [[2, 3, 8, 8], [16, 3, 3, 3], [16]]}) == 2 * 8 * 8 * 16 * 3 * 3 * 3
    assert op_work("aten::linear", {"Input Dims": [[8, 4], [3, 4], [3]]}) == 0  # its addmm is counted
    assert op_work("aten::mm", {"Input Dims": [[], [4, 3]]}) == 0  # shapes not recorded


def _row(n, heavy=1, excess=1.0, extra_us=3000.0, explained_us=2500.0, step_us=10000.0):
    from diageval.diagnosers.rules.load_imbalance import ImbalanceRow

    return ImbalanceRow(number=n, step_us=step_us, heavy_rank=heavy, excess=excess, extra_us=extra_us,
                        explained_us=explained_us)


def _evidence():
    from diageval.diagnosers.rules.inputs import RunEvidence

    return RunEvidence(world_size=2)


def test_judge_names_the_heavier_rank_when_its_extra_work_costs_time():
    from diageval.diagnosers.rules.load_imbalance import judge_load_imbalance

    (f,) = judge_load_imbalance([_row(n) for n in range(8)], _evidence())
    assert f.category == "compute.load_imbalance" and f.ranks == [1] and f.steps == (0, 8)
    assert f.impact == pytest.approx(0.3)


@pytest.mark.parametrize("rows, why", [
    ([_row(n, excess=0.0) for n in range(8)], "same arithmetic on every rank (a straggler, or balanced)"),
    ([_row(n, excess=0.05) for n in range(8)], "5% more arithmetic cannot cost a tenth of a step"),
    ([_row(n, extra_us=500.0) for n in range(8)], "the extra work costs 5% of the step"),
    ([_row(n, heavy=n % 2) for n in range(8)], "the heavier rank alternates (balanced over steps)"),
    ([_row(n) for n in range(2)], "too few steps"),
])
def test_judge_stays_quiet(rows, why):
    from diageval.diagnosers.rules.load_imbalance import judge_load_imbalance

    assert judge_load_imbalance(rows, _evidence()) == [], why


def test_a_straggler_claim_is_dropped_only_when_the_extra_work_explains_it():
    from diageval.diagnosers.rules.load_imbalance import explains_straggler
    from diageval.diagnosis import Finding

    claim = Finding(category="compute.straggler_rank", confidence=0.9, ranks=[1])
    assert explains_straggler([_row(n) for n in range(8)], claim)
    # the heavier rank is also far slower than its extra work explains: a straggler as well
    assert not explains_straggler([_row(n, explained_us=600.0) for n in range(8)], claim)
    # the straggler is the lighter rank
    assert not explains_straggler([_row(n) for n in range(8)], claim.model_copy(update={"ranks": [0]}))
    # same shapes on every rank: nothing to explain it with
    assert not explains_straggler([_row(n, excess=0.0) for n in range(8)], claim)
