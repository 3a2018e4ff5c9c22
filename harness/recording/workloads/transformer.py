"""``transformer_lm``: a small decoder-only transformer language model (token and position embeddings,
pre-norm blocks of causal self-attention and a GELU MLP, no biases (as in GPT-style models trained
today), a tied output head) trained for next-token
prediction with DistributedDataParallel.

Data: variable-length token sequences, bucketed by length and right-padded, as length-bucketing
samplers do. Batch ``i`` belongs to a length bucket drawn from a seed shared by every rank (a bucketing
sampler built with the same seed everywhere), so on any one step all ranks pad to the same length
``L_i`` in ``[min_seq_len, max_seq_len]`` and do the same amount of work; across steps the length (and
so the shapes of every op) varies. Within a batch the first sequence is ``L_i`` tokens long and the
others between ``3/4 L_i`` and ``L_i``; the tail of each is padding whose targets are ``-100``
(ignored by the loss). Right padding needs no attention mask beyond the causal one: a real token only
attends to earlier positions, which are all real. Token contents differ per rank (seeded by rank) and
follow a noisy affine recurrence over the vocabulary, so the loss really goes down.

Positions use a fixed sinusoidal table (a non-persistent buffer), so a batch may be longer than the
lengths the run was configured with (``TokenBatches.resized``).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset

from diageval.recording.context import RankContext
from diageval.recording.workloads.base import TrainingSetup, training_setup
from diageval.recording.workloads.params import TransformerParams

POSITIONS = 4096  # rows of the sinusoidal position table: the longest sequence any batch may hold
PAD_TARGET = -100  # cross_entropy's default ignore_index


class TokenBatches(Dataset):
    """``length`` batches of ``(tokens, targets)``, both ``[batch_size, L_i]`` int64; see the module docstring.

    ``length_scale`` multiplies every bucket length (1.0 in a normal run); batch ``i`` is the same every
    run for the same (seed, length_scale).
    """

    def __init__(self, length: int, p: TransformerParams, seed: int, prep_seconds: float, length_scale: float = 1.0):
        self.length = length
        self.p = p
        self.seed = seed
        self.prep_seconds = prep_seconds
        self.length_scale = length_scale

    def __len__(self) -> int:
        return self.length

    def bucket_length(self, index: int) -> int:
        """The padded length of batch ``index``: the same on every rank (its seed ignores the rank)."""
        gen = torch.Generator().manual_seed(7_919 * index + 17)
        n = int(torch.randint(self.p.min_seq_len, self.p.max_seq_len + 1, (1,), generator=gen))
        return max(2, round(n * self.length_scale))

    def resized(self, factor: float) -> "TokenBatches":
        """The same stream with every sequence ``factor`` times as long (more tokens per rank per step)."""
        return TokenBatches(self.length, self.p, self.seed, self.prep_seconds, self.length_scale * factor)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = time.perf_counter()
        p = self.p
        width = self.bucket_length(index)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        lengths = torch.randint((3 * width) // 4, width + 1, (p.batch_size,), generator=gen)
        lengths[0] = width
        seq = torch.empty(p.batch_size, width + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(0, p.vocab, (p.batch_size,), generator=gen)
        noise = torch.randint(0, 3, (p.batch_size, width), generator=gen)
        for t in range(width):
            seq[:, t + 1] = (seq[:, t] * 5 + 3 + noise[:, t]) % p.vocab
        tokens = seq[:, :-1].clone()
        targets = seq[:, 1:].clone()
        padding = torch.arange(width).unsqueeze(0) >= lengths.unsqueeze(1)
        tokens[padding] = 0
        targets[padding] = PAD_TARGET
        left = self.prep_seconds - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return tokens, targets


def _sinusoids(rows: int, dim: int) -> torch.Tensor:
    pos = torch.arange(rows, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10_000.0) / dim))
    table = torch.zeros(rows, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, bias=False)
        self.attn = CausalSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim, bias=False), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DecoderLM(nn.Module):
    def __init__(self, p: TransformerParams):
        super().__init__()
        self.embed = nn.Embedding(p.vocab, p.dim)
        self.register_buffer("positions", _sinusoids(POSITIONS, p.dim), persistent=False)
        self.blocks = nn.Sequential(*[Block(p.dim, p.heads, p.mlp_ratio) for _ in range(p.layers)])
        self.norm = nn.LayerNorm(p.dim, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.positions[: tokens.shape[1]]
        x = self.norm(self.blocks(x))
        return x @ self.embed.weight.t()  # tied output head: logits over the vocabulary


def build(params: TransformerParams, ctx: RankContext, injection) -> TrainingSetup:
    torch.manual_seed(0)  # identical initial weights on every rank
    device = torch.device(ctx.device)
    model = injection.model(DecoderLM(params)).to(device)
    # The position table is a fixed buffer, identical on every rank: nothing to broadcast each step.
    ddp = DistributedDataParallel(model, device_ids=[device.index] if ctx.is_cuda else None, broadcast_buffers=False)
    # fused: one optimizer op per step instead of a dozen per parameter tensor (CPU fused AdamW exists since torch 2.4)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=params.lr, weight_decay=0.01, fused=True)
    dataset = injection.dataset(
        TokenBatches(ctx.steps, params, seed=ctx.rank + 1, prep_seconds=params.batch_prep_ms / 1000)
    )

    def train_step(batch) -> torch.Tensor:
        tokens, targets = (t.to(device, non_blocking=True) for t in batch)
        logits = ddp(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_TARGET)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return training_setup(dataset, params, ctx, train_step, model, optimizer)
