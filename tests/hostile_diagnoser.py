"""A diagnoser that attacks its box instead of diagnosing (issue 25): ``python hostile_diagnoser.py MODE OUT``.

Every attack is bounded, so that on a machine where a limit is missing it still ends by itself:

* ``forkbomb``: start up to 2,000 sleeping processes as fast as it can;
* ``diskfill``: write up to 600 MiB into its output folder;
* ``tmpfill``: write up to 600 MiB into /tmp;
* ``memhog``: allocate (and touch) up to 3 GiB;
* ``secrets``: print the names of the environment variables it can see (and claim nothing).

Whatever survives writes an empty diagnosis to OUT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20


def forkbomb() -> None:
    children = []
    for _ in range(2000):
        children.append(subprocess.Popen(["sleep", "20"]))


def fill(folder: Path) -> None:
    chunk = b"x" * (8 * MIB)
    for i in range(75):
        with open(folder / f"fill-{i}.bin", "wb") as fh:
            fh.write(chunk)


def memhog() -> None:
    held = []
    for _ in range(3 * 1024 // 64):
        held.append(bytearray(64 * MIB))  # zero-filled pages are touched by bytearray()


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "forkbomb":
        forkbomb()
    elif mode == "diskfill":
        fill(out.parent)
    elif mode == "tmpfill":
        fill(Path("/tmp"))
    elif mode == "memhog":
        memhog()
    elif mode == "secrets":
        print(json.dumps(sorted(os.environ)))
    out.write_text(json.dumps({"findings": []}))


if __name__ == "__main__":
    main()
