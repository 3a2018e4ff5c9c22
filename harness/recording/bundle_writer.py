"""Assemble a bundle folder from what the ranks wrote, and publish it atomically.

The ranks write their gzipped traces and logs straight into a temporary folder next to the destination;
:func:`finish_bundle` adds ``steps.jsonl``, ``metrics.jsonl`` and ``bundle.json`` and renames the folder
into place, so a crash at any point leaves no half bundle under the destination name.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from diageval.bundle.model import MANIFEST_NAME, BundleEnv, BundleManifest, describe_files
from diageval.fileio import atomic_write_text, write_jsonl


def merge_step_logs(scratch_dir: Path, world_size: int) -> list[dict[str, Any]]:
    rows = []
    for rank in range(world_size):
        path = scratch_dir / f"steps.rank{rank}.jsonl"
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: (r["step"], r["rank"]))


def bundle_env(device: str, world_size: int, backend: str) -> BundleEnv:
    import torch

    gpu_name = torch.cuda.get_device_name(0) if device == "cuda" else None
    return BundleEnv(
        torch=torch.__version__, python=platform.python_version(), device=device, gpu_name=gpu_name,
        world_size=world_size, host=socket.gethostname(), backend=backend,
    )


def write_info(bundle_dir: Path, env: BundleEnv) -> BundleManifest:
    manifest = BundleManifest(
        bundle_id=uuid.uuid4().hex, created=datetime.now(timezone.utc), env=env, files=describe_files(bundle_dir),
    )
    atomic_write_text(bundle_dir / MANIFEST_NAME, manifest.model_dump_json(indent=2) + "\n")
    return manifest


def finish_bundle(tmp_dir: Path, dest: Path, *, steps: list[dict], metrics: list[dict], env: BundleEnv,
                  bundle_faults: list[Any]) -> BundleManifest:
    """Write the remaining files into ``tmp_dir``, apply evidence faults, write the manifest, rename to ``dest``."""
    write_jsonl(tmp_dir / "steps.jsonl", steps)
    write_jsonl(tmp_dir / "metrics.jsonl", metrics)
    for fault in bundle_faults:
        fault.apply(tmp_dir)
    manifest = write_info(tmp_dir, env)
    if dest.exists():
        shutil.rmtree(dest)
    tmp_dir.rename(dest)
    return manifest
