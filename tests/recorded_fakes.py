"""A recorded case as plain data (one trace file, healthy), for the tests of recorded cases and of data fetch."""

from __future__ import annotations

from typing import Any


def recorded_case(path: str = "job/rank0.json.gz", sha: str = "0" * 64, **over: Any) -> dict[str, Any]:
    """The case file's data: a recorded job whose one file is ``path`` with checksum ``sha``; ``over`` replaces
    top-level fields."""
    return {
        "id": "rec-case",
        "title": "a recorded case",
        "recorded": {
            "job": "a job", "hardware": "a GPU", "framework": "torch", "world_size": 1,
            "files": [{"path": path, "sha256": sha, "rank": 0,
                       "source": {"repository": "o/r", "commit": "abcdef1", "path": "t.json.gz", "licence": "MIT"}}],
            "measured": {"command": f"diageval trace stats {path}", "figures": [{"file": path, "figures": {"steps": "4"}}]},
            "rationale": "because",
        },
        "labels": {"expect": "healthy"},
        **over,
    }
