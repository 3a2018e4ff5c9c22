"""The ``transformer_lm`` workload: its params model, its data (length buckets shared by the ranks,
padding ignored by the loss), that it learns, and that a recording carries steps and attention ops."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stream import StreamState, iter_trace_events
from diageval.cases.model import Case
from diageval.recording.workloads import WORKLOADS
from diageval.recording.workloads.params import TransformerParams


@pytest.mark.parametrize("params, message", [
    ({"dim": 64, "heads": 5}, "heads (5) must divide dim (64)"),
    ({"min_seq_len": 80, "max_seq_len": 40}, "min_seq_len (80) is above max_seq_len (40)"),
    ({"seq_len": 10}, "Extra inputs are not permitted"),
    ({"heads": 0}, "greater than or equal to 1"),
])
def test_bad_params_are_rejected_with_a_clear_message(params, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TransformerParams.model_validate(params)


def test_registered_with_its_params_model():
    assert WORKLOADS["transformer_lm"].params_model is TransformerParams


def test_batches_share_a_length_per_step_across_ranks_and_pad_with_ignored_targets():
    from diageval.recording.workloads.transformer import PAD_TARGET, TokenBatches

    p = TransformerParams(batch_size=5, min_seq_len=8, max_seq_len=40)
    ranks = [TokenBatches(20, p, seed=r + 1, prep_seconds=0) for r in range(2)]
    widths = []
    for i in range(20):
        (t0, y0), (t1, _) = ranks[0][i], ranks[1][i]
        assert t0.shape == t1.shape == y0.shape == (5, t0.shape[1])  # same padded length on both ranks
        assert 8 <= t0.shape[1] <= 40
        assert not t0.equal(t1)  # ranks read different data
        assert (y0[0] != PAD_TARGET).all()  # the first sequence fills its bucket
        widths.append(t0.shape[1])
    assert len(set(widths)) > 5  # the length varies from step to step
    longer = ranks[1].resized(2.0)
    assert [longer[i][0].shape[1] for i in range(5)] == [2 * w for w in widths[:5]]
    tokens, targets = ranks[0][3]
    assert (tokens[targets == PAD_TARGET] == 0).all()  # padding is token 0 and its targets are ignored


def test_the_model_learns_its_synthetic_language():
    import torch
    import torch.nn.functional as F

    from diageval.recording.workloads.transformer import PAD_TARGET, DecoderLM, TokenBatches

    torch.manual_seed(0)
    p = TransformerParams(batch_size=8, dim=32, heads=2, layers=1, vocab=64, min_seq_len=16, max_seq_len=24, lr=0.01)
    model = DecoderLM(p)
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr)
    data = TokenBatches(60, p, seed=1, prep_seconds=0)
    losses = []
    for i in range(60):
        tokens, targets = data[i]
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_TARGET)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def _attention_shapes(path: Path) -> Counter:
    state = StreamState()
    return Counter(str(e.decoded_args().get("Input Dims")) for e in iter_trace_events(path, state)
                   if e.name and "scaled_dot_product" in e.name and e.ph == "X")


@pytest.mark.slow
def test_a_recording_has_steps_and_attention_ops(tmp_path: Path):
    from diageval.recording.record import record_case

    case = Case.model_validate({
        "id": "lm-recording-test", "title": "t",
        "workload": {"name": "transformer_lm", "world_size": 2, "steps": 6, "params": {"trace_steps": 3}},
        "faults": [], "labels": {"expect": "healthy"},
    })
    record_case(case, tmp_path / "b", device="cpu")
    bundle = EvidenceBundle.open(tmp_path / "b")
    assert sorted((s.rank, s.step) for s in bundle.steps()) == [(r, i) for r in range(2) for i in range(6)]
    shapes = {}
    for rank, path in bundle.trace_paths().items():
        state = StreamState()
        names = Counter(e.name for e in iter_trace_events(path, state) if e.ph == "X")
        assert sum(n for k, n in names.items() if k and k.startswith("ProfilerStep#")) == 3
        assert names["aten::scaled_dot_product_attention"] == 3 * 2  # 3 traced steps x 2 blocks
        assert names["aten::embedding"] == 3
        assert state.header["distributedInfo"]["rank"] == rank
        shapes[rank] = _attention_shapes(path)
    assert shapes[0] == shapes[1]  # healthy: both ranks attend over the same shapes every step
