"""What the tests that kill or start processes ask of /proc."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Running: a killed child whose parent is gone may linger as a zombie until init reaps it, and counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
