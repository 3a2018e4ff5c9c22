"""Dataloader starvation: each batch takes longer to prepare than the step can hide.

The workload's own ``DataLoader`` workers already spend ``batch_prep_ms`` per batch (hidden by
prefetching in a healthy run); this injector makes them spend more from ``start_step`` on, so the main
thread waits inside ``DataLoader.__next__``: ``extra_prep_ms`` waited (storage, a remote source) and
``extra_decode_kib`` of zlib data inflated (decoding, CPU work whose time scales with the machine's speed, so
that a rung near the detection limit keeps its ratio on a slower or busier machine; a wait's ratio to the
step shrinks there). Worker processes are never traced, so the trace shows only a longer wait for the next
batch; with ``loader_workers: 0`` the batch is prepared inside ``__next__`` of the training process, as
pure-Python and zlib work that the profiler records no op for. The ``inference`` workload's ``inline`` input
has no DataLoader at all: its step reads each encoded request from the dataset on the main thread and decodes
it there, so the same extra work lands in the step before the model's first op, with no DataLoader marker
around it (the shape of a serving loop or a script that preprocesses in its own loop).
"""

from __future__ import annotations

import random
import time
import zlib
from typing import Any

from diageval.recording.faults.base import LiveFault


def encoded_payload(kib: int) -> bytes:
    """``kib`` KiB of data with 4 bits of entropy a byte (compressed to ~57%, as decoded media or text would
    be), zlib-compressed: the same bytes every run, so inflating them is the same work every run."""
    block = bytes(random.Random(0).choices(range(16), k=65536))
    raw = (block * (kib // 64 + 1))[: kib * 1024]
    return zlib.compress(raw, 6)


class _SlowerSource:
    """A dataset that answers like ``inner`` but more slowly from item ``first_slow`` on."""

    def __init__(self, inner: Any, extra_seconds: float, first_slow: int, decode_kib: int = 0):
        self.inner = inner
        self.extra_seconds = extra_seconds
        self.first_slow = first_slow
        self.payload = encoded_payload(decode_kib) if decode_kib else b""

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Any:
        item = self.inner[index]
        if index >= self.first_slow:
            if self.payload:
                zlib.decompress(self.payload)
            if self.extra_seconds:
                time.sleep(self.extra_seconds)
        return item


class DataloaderStarvation(LiveFault):
    def dataset(self, dataset: Any) -> Any:
        return _SlowerSource(dataset, self.params.extra_prep_ms / 1000, self.params.start_step,
                             self.params.extra_decode_kib)
