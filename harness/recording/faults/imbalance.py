"""Load imbalance: one rank is handed more work per step than its peers, through its data.

Real jobs get here through their data, not their hardware: a length-bucketing sampler that is not
synchronised across ranks (one rank draws the long-sequence buckets), or shards of unequal size (one
rank's batches carry more rows). From ``from_step`` on, ``heavier_rank``'s batches are ``work_factor``
times as large along the workload's natural axis: the dataset's own ``resized(factor)`` decides which
(sequence length for token batches, rows for tabular and image batches). The rank then runs the same
ops as its peers on bigger inputs, so its compute between collectives is longer and its peers wait for
it inside them, as behind a straggler; unlike a straggler, the operators' input shapes differ across
ranks. Worker processes build the batches and are never traced; nothing else changes.
"""

from __future__ import annotations

from typing import Any

from diageval.recording.faults.base import LiveFault


class _FromIndex:
    """Answers like ``before`` for items below ``first``, like ``after`` from ``first`` on."""

    def __init__(self, before: Any, after: Any, first: int):
        self.before = before
        self.after = after
        self.first = first

    def __len__(self) -> int:
        return len(self.before)

    def __getitem__(self, index: int) -> Any:
        return (self.after if index >= self.first else self.before)[index]


class UnevenShards(LiveFault):
    def dataset(self, dataset: Any) -> Any:
        if self.ctx.rank != self.params.heavier_rank:
            return dataset
        if not hasattr(dataset, "resized"):
            raise TypeError(f"{type(dataset).__name__} has no resized(factor): this workload's batches cannot be "
                            "made larger on one rank (list this fault before faults that wrap the dataset)")
        return _FromIndex(dataset, dataset.resized(self.params.work_factor), self.params.from_step)
