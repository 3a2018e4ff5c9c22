"""``mlp_ddp``: a small MLP classifier wrapped in DistributedDataParallel (gradients bucketed and
all-reduced during backward)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from diageval.recording.context import RankContext
from diageval.workloads.base import SyntheticBatches, TrainingSetup, make_loader
from diageval.workloads.params import MlpParams


def _mlp(p: MlpParams) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = p.in_features
    for _ in range(p.layers):
        layers += [nn.Linear(width, p.hidden), nn.ReLU()]
        width = p.hidden
    layers.append(nn.Linear(width, p.classes))
    return nn.Sequential(*layers)


def build(params: MlpParams, ctx: RankContext, injection) -> TrainingSetup:
    torch.manual_seed(0)  # identical initial weights on every rank
    device = torch.device(ctx.device)
    model = injection.model(_mlp(params)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if ctx.is_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=params.lr, momentum=0.9)
    dataset = injection.dataset(
        SyntheticBatches(ctx.steps, (params.batch_size, params.in_features), params.classes,
                         seed=ctx.rank + 1, prep_seconds=params.batch_prep_ms / 1000)
    )

    def train_step(batch) -> torch.Tensor:
        x, y = (t.to(device, non_blocking=True) for t in batch)
        loss = F.cross_entropy(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return TrainingSetup(
        loader=make_loader(dataset, params, ctx),
        train_step=train_step,
        state_dict=lambda: {"model": model.state_dict(), "optimizer": optimizer.state_dict()},
    )
