"""Dataloader starvation: each batch takes longer to prepare than the step can hide.

The workload's own ``DataLoader`` workers already spend ``batch_prep_ms`` per batch (hidden by
prefetching in a healthy run); this injector makes them spend ``extra_prep_ms`` more from ``start_step``
on, so the main thread waits inside ``DataLoader.__next__``. Worker processes are never traced, so the
trace shows only a longer wait for the next batch.
"""

from __future__ import annotations

import time
from typing import Any

from diageval.recording.faults.base import LiveFault


class _SlowerSource:
    """A dataset that answers like ``inner`` but more slowly from item ``first_slow`` on."""

    def __init__(self, inner: Any, extra_seconds: float, first_slow: int):
        self.inner = inner
        self.extra_seconds = extra_seconds
        self.first_slow = first_slow

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Any:
        item = self.inner[index]
        if index >= self.first_slow:
            time.sleep(self.extra_seconds)
        return item


class DataloaderStarvation(LiveFault):
    def dataset(self, dataset: Any) -> Any:
        return _SlowerSource(dataset, self.params.extra_prep_ms / 1000, self.params.start_step)
