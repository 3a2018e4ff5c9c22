"""``inference``: serving-shaped jobs: a model in eval mode run forward only (``torch.inference_mode``, no
DDP, no optimizer), in the shapes real inference and one-step profiles have (issue 38).

* ``model`` picks the network, built by the training workloads' own classes (:class:`~.mlp.TabularMlp`,
  :class:`~.convnet.DenseConvNet`, :class:`~.transformer.DecoderLM`) with ``width`` as their hidden size,
  channels or model width.
* ``calls_per_step`` is the inner loop: each step holds that many dependent forward calls. For ``lm`` it is
  a greedy generation loop (each call reads the prompt and every token generated so far, no KV cache, and
  appends the argmax token); for ``mlp`` and ``convnet`` it is a denoising-shaped loop (each call's output
  moves the input the next call reads by a small scheduler update, as a sampler's steps do). With
  ``trace_steps: 1`` the profile is one step holding N calls, as a profiled request or image generation is.
* ``input`` says where a request's data is prepared. ``loader``: ready tensors come through the workloads'
  ``DataLoader`` (:func:`~.base.make_loader`, prefetching workers), as a batch-inference job reads them.
  ``inline``: no DataLoader; each request arrives encoded (zlib-compressed bytes: a raw image, a feature row,
  text) and the step decodes it on the main thread before the model's first op: ``zlib`` inflation (no op in
  the trace), then for ``convnet`` a resize from ``raw_image_size`` to ``image_size``
  (``F.interpolate``), for ``lm`` tokenizing (bytes looked up in a vocabulary table in Python, no op), for
  ``mlp`` parsing float32 features. A serving loop or a script that preprocesses in its own loop does this.

Requests are a real ``Dataset`` either way, so live faults that wrap the dataset
(:class:`~diageval.recording.faults.data.DataloaderStarvation`) make preparing one slower wherever it is
prepared: in the loader's workers, or inline on the main thread.

The job saves no checkpoint (``checkpoint_every`` defaults past any run) and logs the mean of its output
where a training job logs its loss.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from diageval.recording.context import RankContext
from diageval.recording.workloads.base import SyntheticBatches, TrainingSetup, make_loader
from diageval.recording.workloads.convnet import DenseConvNet
from diageval.recording.workloads.mlp import TabularMlp
from diageval.recording.workloads.params import ConvParams, InferenceParams, MlpParams, TransformerParams
from diageval.recording.workloads.transformer import DecoderLM, TokenBatches

POOL = 4  # distinct encoded requests an inline source cycles through (encoding is setup work, not the step's)


def _build_model(p: InferenceParams) -> torch.nn.Module:
    if p.model == "mlp":
        return TabularMlp(MlpParams(in_features=p.in_features, hidden=p.width, layers=p.layers))
    if p.model == "convnet":
        return DenseConvNet(ConvParams(image_size=p.image_size, channels=p.width))
    return DecoderLM(_lm_params(p))


def _lm_params(p: InferenceParams) -> TransformerParams:
    return TransformerParams(batch_size=p.batch_size, vocab=p.vocab, dim=p.width, heads=p.heads, layers=p.layers,
                             min_seq_len=p.prompt_len, max_seq_len=p.prompt_len)


class ReadyRequests(Dataset):
    """``loader`` input: request ``i`` as a ready tensor (images, feature rows or prompt tokens)."""

    def __init__(self, p: InferenceParams, length: int, seed: int):
        self.p = p
        if p.model == "lm":
            self.inner: Dataset = TokenBatches(length, _lm_params(p), seed=seed, prep_seconds=p.batch_prep_ms / 1000)
        else:
            shape = (p.batch_size, 3, p.image_size, p.image_size) if p.model == "convnet" else (p.batch_size, p.in_features)
            self.inner = SyntheticBatches(length, shape, 10, seed=seed, prep_seconds=p.batch_prep_ms / 1000)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.inner[index][0]  # the inputs; the labels or targets are a training job's


class EncodedRequests(Dataset):
    """``inline`` input: request ``i`` as the encoded bytes a client sends (one of :data:`POOL`, made at setup)."""

    def __init__(self, p: InferenceParams, length: int, seed: int):
        rng = random.Random(seed)
        self.length = length
        if p.model == "convnet":
            size = p.batch_size * 3 * p.raw_image_size ** 2
        elif p.model == "mlp":
            size = p.batch_size * p.in_features * 4
        else:
            size = p.batch_size * p.prompt_len
        # 4 bits of entropy a byte, as in decoded media (faults/data.py's payloads); text stays printable
        raw = [bytes(rng.choices(range(16), k=size)) for _ in range(POOL)]
        if p.model == "mlp":  # float32 features, one row per sample
            raw = [torch.rand(size // 4, generator=torch.Generator().manual_seed(seed + i)).numpy().tobytes()
                   for i in range(POOL)]
        elif p.model == "lm":
            raw = [bytes(97 + b for b in r) for r in raw]
        self.pool = [zlib.compress(r, 6) for r in raw]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> bytes:
        return self.pool[index % POOL]


def _decoder(p: InferenceParams, device: torch.device):
    """What the step does to an encoded request before the model's first op (``inline`` input)."""
    table = {b: (b * 7 + 3) % p.vocab for b in range(256)}  # a byte-level vocabulary

    def decode(blob: bytes) -> torch.Tensor:
        raw = zlib.decompress(blob)
        if p.model == "lm":
            ids = [table[b] for b in raw]  # tokenizing: Python work, no op
            return torch.tensor(ids, dtype=torch.long).view(p.batch_size, p.prompt_len).to(device)
        if p.model == "mlp":
            return torch.frombuffer(bytearray(raw), dtype=torch.float32).view(p.batch_size, p.in_features).to(device)
        pixels = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(p.batch_size, 3, p.raw_image_size, p.raw_image_size)
        image = pixels.to(device).float().div_(15.0)
        return F.interpolate(image, size=(p.image_size, p.image_size), mode="bilinear", align_corners=False)

    return decode


def _inner_loop(p: InferenceParams, model: torch.nn.Module):
    """``calls_per_step`` dependent forward calls (see the module docstring); returns the last output."""

    def generate(tokens: torch.Tensor) -> torch.Tensor:
        for _ in range(p.calls_per_step):
            logits = model(tokens)
            tokens = torch.cat([tokens, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        return tokens[:, -p.calls_per_step:].float()

    def denoise(x: torch.Tensor) -> torch.Tensor:
        out = x
        for _ in range(p.calls_per_step):
            out = model(x)
            shift = torch.tanh(out.mean(dim=1)).view(-1, *([1] * (x.dim() - 1)))
            x = x - shift / p.calls_per_step
        return out

    return generate if p.model == "lm" else denoise


def _requests(source: Dataset) -> Iterator[Any]:
    """The inline source read in order on the main thread: no DataLoader, no worker."""
    for i in range(len(source)):
        yield source[i]


def build(params: InferenceParams, ctx: RankContext, injection) -> TrainingSetup:
    torch.manual_seed(0)
    device = torch.device(ctx.device)
    model = injection.model(_build_model(params)).to(device).eval()
    seed = ctx.rank + 1
    run = _inner_loop(params, model)
    if params.input == "inline":
        source = injection.dataset(EncodedRequests(params, ctx.steps, seed))
        loader: Any = _requests(source)
        prepare = _decoder(params, device)
    else:
        loader = make_loader(injection.dataset(ReadyRequests(params, ctx.steps, seed)), params, ctx)

        def prepare(batch: torch.Tensor) -> torch.Tensor:
            return batch.to(device, non_blocking=True)

    def infer_step(request: Any) -> torch.Tensor:
        with torch.inference_mode():
            return run(prepare(request)).mean()

    return TrainingSetup(loader=loader, train_step=infer_step, state_dict=lambda: {"model": model.state_dict()})
