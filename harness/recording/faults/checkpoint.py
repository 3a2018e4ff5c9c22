"""Blocking checkpoint: rank 0 saves synchronously, every ``save_every_steps`` steps, to slow storage.

Healthy workloads already checkpoint (rank 0, every ``checkpoint_every`` steps, fast local file) and
log "saved checkpoint ... in 0.01s". This injector adds saves on its own cadence from ``start_step``
and throttles the file they are written to (``write_mb_per_s``), like a slow network filesystem. Every
save, the workload's included, goes through the throttled file once the fault is active. The training
thread blocks in the write; the trace shows a gap at the end of the step on rank 0, and the other ranks
wait for rank 0 inside the next step's collective.
"""

from __future__ import annotations

import time
from typing import IO

from diageval.recording.faults.base import LiveFault


class _ThrottledFile:
    """Write-through file wrapper that takes ``len(data) / bytes_per_s`` seconds per write."""

    def __init__(self, inner: IO[bytes], bytes_per_s: float):
        self.inner = inner
        self.bytes_per_s = bytes_per_s

    def write(self, data: bytes) -> int:
        start = time.perf_counter()
        n = self.inner.write(data)
        left = len(data) / self.bytes_per_s - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return n

    def flush(self) -> None:
        self.inner.flush()


class BlockingCheckpoint(LiveFault):
    def _active(self, step: int) -> bool:
        return self.ctx.rank == 0 and step >= self.params.start_step

    def checkpoint_due(self, step: int) -> bool:
        return self._active(step) and (step + 1) % self.params.save_every_steps == 0

    def checkpoint_file(self, fh: IO[bytes], step: int) -> IO[bytes]:
        if self._active(step):
            return _ThrottledFile(fh, self.params.write_mb_per_s * 1e6)
        return fh
