"""What a rank knows about itself while it records: passed to workload builders and fault injectors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RankContext:
    rank: int
    world_size: int
    steps: int
    device: str  # "cpu" or "cuda:<index>"
    backend: str  # "gloo" or "nccl"
    scratch_dir: Path  # private to this recording and outside the bundle (checkpoints go here)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")
