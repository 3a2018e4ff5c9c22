"""What a workload builds inside a rank, and the pieces the built-in workloads share.

A workload's ``build(params, ctx, injection)`` returns a :class:`TrainingSetup`; the rank worker
(:mod:`diageval.recording.rank_worker`) owns the training loop, so every workload logs, checkpoints and
is timed the same way. ``injection`` lets live faults wrap the dataset and the model before training
starts (see :class:`diageval.recording.faults.base.LiveFault`).

Synthetic data is produced by a real ``Dataset`` read through a real ``DataLoader`` with worker
processes: each item is one whole batch (``batch_size=None``), deterministic per (rank, index), and costs
``batch_prep_ms`` of worker time, as decoding would. Labels come from a fixed random projection of the
inputs, so the loss really goes down.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from diageval.recording.context import RankContext
from diageval.recording.workloads.params import CommonParams


class SyntheticBatches(Dataset):
    """``length`` batches of ``shape``-shaped inputs and class labels; batch ``i`` is the same every run."""

    def __init__(self, length: int, shape: tuple[int, ...], classes: int, seed: int, prep_seconds: float):
        self.length = length
        self.shape = shape
        self.classes = classes
        self.seed = seed
        self.prep_seconds = prep_seconds
        gen = torch.Generator().manual_seed(1234)
        features = 1
        for s in shape[1:]:
            features *= s
        self.projection = torch.randn(features, classes, generator=gen)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = time.perf_counter()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        x = torch.randn(self.shape, generator=gen)
        y = (x.flatten(1) @ self.projection).argmax(dim=1)
        left = self.prep_seconds - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return x, y

    def resized(self, factor: float) -> "SyntheticBatches":
        """The same stream with ``factor`` times as many rows per batch (more samples on this rank per step)."""
        rows = max(1, round(self.shape[0] * factor))
        return SyntheticBatches(self.length, (rows, *self.shape[1:]), self.classes, self.seed, self.prep_seconds)


def make_loader(dataset: Dataset, params: CommonParams, ctx: RankContext) -> DataLoader:
    workers = params.loader_workers
    return DataLoader(
        dataset,
        batch_size=None,  # every item already is a batch
        shuffle=False,
        num_workers=workers,
        prefetch_factor=2 if workers else None,
        pin_memory=ctx.is_cuda,
        persistent_workers=False,
        # Ranks are started by a forkserver, so their default start method is forkserver too, which would
        # start a second server (a fresh interpreter importing torch, ~3 s). Workers fork from the rank, as
        # on any Linux training job; safe because ranks run one intra-op thread.
        multiprocessing_context="fork" if workers else None,
    )


@dataclass
class TrainingSetup:
    """A built workload: the rank worker calls ``train_step`` once per step on each batch of ``loader`` (a forward-only
    step in the ``inference`` workload)."""

    loader: Iterable[Any]  # a DataLoader, or a plain iterable when the step prepares its own input (inference's inline input)
    train_step: Callable[[Any], torch.Tensor]  # returns the detached loss
    state_dict: Callable[[], dict[str, Any]]  # what a checkpoint saves


def training_setup(dataset: Dataset, params: CommonParams, ctx: RankContext, train_step: Callable[[Any], torch.Tensor],
                   model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> TrainingSetup:
    """What every training workload hands the shared step loop: its batches through :func:`make_loader`, its step,
    and the state a checkpoint saves (the model's and the optimizer's)."""
    return TrainingSetup(
        loader=make_loader(dataset, params, ctx),
        train_step=train_step,
        state_dict=lambda: {"model": model.state_dict(), "optimizer": optimizer.state_dict()},
    )
