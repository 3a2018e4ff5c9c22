"""Where the real traces recorded by others are: ``$DIAGEVAL_DATA``, else ``<repo>/../shared/real-traces``.

Tests that use them skip, saying why, when neither exists.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def real_traces_dir() -> Path | None:
    for candidate in (os.environ.get("DIAGEVAL_DATA"), REPO.parent / "shared" / "real-traces"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def real_trace_folders() -> list[Path]:
    """Every folder holding trace files (one job each), e.g. hta/trace_filter, gpu-jobs/kineto-resnet50-workers0."""
    root = real_traces_dir()
    if root is None:
        return []
    return sorted({p.parent for p in root.rglob("*.json.gz")})
