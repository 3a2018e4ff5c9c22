"""A box's control group is removed even when its killed processes take seconds to exit (CI at load 5-7 left
one behind when removal gave up after a second), and a group that never empties is given up on in the end."""

from __future__ import annotations

import errno
import time
from pathlib import Path

from diageval.hosting import limits


class _SlowGroup:
    """A group folder whose rmdir is refused (EBUSY) until ``busy_s`` after the first try; counts kills."""

    def __init__(self, tmp: Path, busy_s: float):
        self.dir = tmp
        (tmp / "cgroup.procs").write_text("")
        self.busy_s = busy_s
        self.first: float | None = None
        self.removed = False

    def rmdir(self) -> None:
        now = time.monotonic()
        self.first = self.first if self.first is not None else now
        if now - self.first < self.busy_s:
            raise OSError(errno.EBUSY, "Device or resource busy")
        self.removed = True

    def __truediv__(self, name: str) -> Path:
        return self.dir / name

    def __hash__(self) -> int:
        return id(self)


def test_a_group_busy_for_longer_than_a_second_is_still_removed(tmp_path):
    group = _SlowGroup(tmp_path, busy_s=1.5)
    limits._remove_groups({group}, patience_s=10)
    assert group.removed


def test_a_group_that_never_empties_is_left_once_the_patience_is_spent(tmp_path):
    group = _SlowGroup(tmp_path, busy_s=float("inf"))
    limits._remove_groups({group}, patience_s=0.3)
    assert not group.removed and group.first is not None
