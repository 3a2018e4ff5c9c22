"""``convnet_allreduce``: a small conv net on synthetic images; after backward the gradients are
flattened into one buffer, averaged with a single ``all_reduce`` and copied back (no DDP).

The second block is densely connected (as in DenseNet: it reads half of the stem's channels and its
output is concatenated to the stem's), so slicing and concatenation ops and their backward are part of
every healthy trace.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from diageval.recording.context import RankContext
from diageval.recording.workloads.base import SyntheticBatches, TrainingSetup, training_setup
from diageval.recording.workloads.params import ConvParams


class DenseConvNet(nn.Module):
    def __init__(self, p: ConvParams):
        super().__init__()
        c = p.channels
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.half = c // 2
        self.grow = nn.Sequential(nn.Conv2d(self.half, c, 3, padding=1), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * c * (p.image_size // 4) ** 2, 64), nn.ReLU(), nn.Linear(64, p.classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.cat([x, self.grow(x[:, : self.half])], dim=1)
        return self.head(self.pool(x))


def build(params: ConvParams, ctx: RankContext, injection) -> TrainingSetup:
    torch.manual_seed(0)
    device = torch.device(ctx.device)
    model = injection.model(DenseConvNet(params)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=params.lr, momentum=0.9)
    dataset = injection.dataset(
        SyntheticBatches(ctx.steps, (params.batch_size, 3, params.image_size, params.image_size),
                         params.classes, seed=ctx.rank + 1, prep_seconds=params.batch_prep_ms / 1000)
    )
    world = ctx.world_size

    def train_step(batch) -> torch.Tensor:
        x, y = (t.to(device, non_blocking=True) for t in batch)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat /= world
        for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(synced)
        optimizer.step()
        return loss.detach()

    return training_setup(dataset, params, ctx, train_step, model, optimizer)
