"""What the parent tells each rank process to do (a picklable, label-free description)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class RankPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rank: int
    world_size: int
    steps: int
    device: str  # "cpu" or "cuda"
    workload: str
    workload_params: dict[str, Any]
    live_faults: list[tuple[str, dict[str, Any]]]  # (registry name, params), in case order
    store_path: Path  # FileStore for init_process_group; fresh per recording
    bundle_dir: Path  # the temporary bundle folder; the rank writes rank<N>/trace.json.gz here
    scratch_dir: Path  # private scratch: raw trace, per-rank step log, checkpoints
    collective_timeout_s: float | None = None  # the process group's timeout; None = torch's default
    monitor: str | None = None  # an in-job monitor of diageval.recording.monitors.MONITORS to install, by name
