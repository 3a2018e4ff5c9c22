"""The ``inference`` workload: forward only in eval mode, its inner loop of calls, and its input prepared by a
DataLoader or inline on the main thread (where a slower input source then costs the step itself)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from diageval.recording.context import RankContext
from diageval.recording.faults.base import Injection
from diageval.recording.workloads import WORKLOADS
from diageval.recording.workloads.params import InferenceParams

CTX = RankContext(rank=0, world_size=1, steps=4, device="cpu", backend="gloo", scratch_dir=Path("/nonexistent"))
SMALL = {"batch_size": 4, "width": 16, "layers": 1, "in_features": 8, "image_size": 8, "raw_image_size": 12,
         "prompt_len": 4, "heads": 2, "loader_workers": 0}


def _build(injection: Injection | None = None, **params):
    from diageval.recording.workloads.inference import build

    return build(InferenceParams(**{**SMALL, **params}), CTX, injection or Injection([]))


def test_registered_with_its_params_model_and_bad_params_are_clear():
    assert WORKLOADS["inference"].params_model is InferenceParams
    with pytest.raises(ValidationError, match=r"heads \(3\) must divide width \(16\)"):
        InferenceParams(model="lm", width=16, heads=3)
    with pytest.raises(ValidationError, match="Input should be 'loader' or 'inline'"):
        InferenceParams(input="stream")
    assert InferenceParams().checkpoint_every > 10_000  # an inference job saves nothing


@pytest.mark.parametrize("model", ["mlp", "convnet", "lm"])
@pytest.mark.parametrize("source", ["loader", "inline"])
def test_every_model_runs_forward_only_from_either_input(model, source):
    import torch
    from torch.utils.data import DataLoader

    setup = _build(model=model, input=source, calls_per_step=3)
    assert isinstance(setup.loader, DataLoader) == (source == "loader")  # inline: no DataLoader at all
    out = setup.train_step(next(iter(setup.loader)))
    assert out.dim() == 0 and torch.isfinite(out)
    assert not out.requires_grad  # inference_mode: no graph kept for a backward


def test_generation_appends_one_token_per_call():
    import torch

    from diageval.recording.workloads.inference import _inner_loop, _lm_params
    from diageval.recording.workloads.transformer import DecoderLM

    p = InferenceParams(**{**SMALL, "model": "lm", "calls_per_step": 5})
    calls = []
    model = DecoderLM(_lm_params(p)).eval()
    model.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[1]))
    with torch.inference_mode():
        _inner_loop(p, model)(torch.zeros(4, 4, dtype=torch.long))
    assert calls == [4, 5, 6, 7, 8]  # each call reads the prompt and every token generated so far


def test_a_slower_inline_source_costs_the_step_on_the_main_thread(monkeypatch):
    """The dataloader_starvation fault wraps the request source, so with inline input its extra decoding runs in
    the training process, inside next() of the step's input, with no DataLoader in between."""
    import zlib

    from diageval.recording.faults.data import DataloaderStarvation
    from diageval.recording.faults.params import DataloaderStarvationParams

    inflated = []
    real = zlib.decompress
    monkeypatch.setattr(zlib, "decompress", lambda data, *a: inflated.append(len(data)) or real(data, *a))
    fault = DataloaderStarvation(DataloaderStarvationParams(extra_decode_kib=64, start_step=1), CTX)
    setup = _build(Injection([fault]), model="convnet", input="inline")
    requests = iter(setup.loader)
    setup.train_step(next(requests))
    assert len(inflated) == 1  # step 0: the request's own image only
    setup.train_step(next(requests))
    assert len(inflated) == 3  # step 1: the extra payload, then the image
