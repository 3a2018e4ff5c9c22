"""``mlp_ddp``: a small tabular MLP classifier wrapped in DistributedDataParallel (gradients bucketed
and all-reduced during backward).

Column 0 of each input row is a hashed categorical feature (embedded), the other columns are dense
features; the two are concatenated and go through a gated first layer (GLU: one half of its output
gates the other), then ReLU layers. Besides being a common shape of model, this puts slicing and
concatenation ops (and their backward) into every healthy trace, so their mere presence says nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from diageval.recording.context import RankContext
from diageval.recording.workloads.base import SyntheticBatches, TrainingSetup, training_setup
from diageval.recording.workloads.params import MlpParams


class TabularMlp(nn.Module):
    def __init__(self, p: MlpParams):
        super().__init__()
        self.hidden = p.hidden
        self.embed = nn.Embedding(p.vocab, p.embed_dim)
        self.gated = nn.Linear(p.in_features - 1 + p.embed_dim, 2 * p.hidden)
        layers: list[nn.Module] = []
        for _ in range(p.layers - 1):
            layers += [nn.Linear(p.hidden, p.hidden), nn.ReLU()]
        layers.append(nn.Linear(p.hidden, p.classes))
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = (x[:, 0].abs() * 100).long() % self.embed.num_embeddings
        h = self.gated(torch.cat([x[:, 1:], self.embed(ids)], dim=1))
        return self.body(h[:, : self.hidden] * torch.sigmoid(h[:, self.hidden:]))


def build(params: MlpParams, ctx: RankContext, injection) -> TrainingSetup:
    torch.manual_seed(0)  # identical initial weights on every rank
    device = torch.device(ctx.device)
    model = injection.model(TabularMlp(params)).to(device)
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

    return training_setup(dataset, params, ctx, train_step, model, optimizer)
