"""Reading a monitor's raw output from a bundle: the one place the adapters open ``monitor/`` files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed
from diageval.diagnosers.monitors import MONITOR_DIR

ERROR_TAIL_CHARS = 2000


def monitor_folder(bundle: EvidenceBundle) -> Path:
    """The bundle's ``monitor/`` folder; a monitor that failed in the job fails the case (``monitor_error``)."""
    folder = Path(bundle.root) / MONITOR_DIR
    if not folder.is_dir():
        raise DiagnoserFailed("monitor_missing", f"the bundle has no {MONITOR_DIR}/ folder: it was not recorded with a monitor")
    errors = sorted(folder.glob("error-rank*.txt"))
    if errors:
        text = errors[0].read_text(encoding="utf-8", errors="replace")[-ERROR_TAIL_CHARS:]
        raise DiagnoserFailed("monitor_error", f"the monitor failed in the job ({errors[0].name}): {text}")
    return folder


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a file, one per line; a line cut short (a job killed mid-write) ends the list."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows
