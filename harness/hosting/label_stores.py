"""What a box must never show, wherever it lies: the harness's label stores and its own log.

The hidden roots of a run (its cache, runs and cases) are known; copies of them are not. A bundle cache
copied beside a diagnoser's script, an old run folder under ``~/bin``, a checkout's cases inside a
package folder, or the file the harness writes its progress to (which names each case as it goes) would
all show the labels to a box that binds the folder they are in. So before any folder outside the
Python installation is bound, :func:`refusal` looks through it for

* a truth file (``*.truth.json``) or a cache index (``index.jsonl``) of a bundle cache,
* a case file (a ``.yaml``/``.yml`` with a top-level ``labels:``),
* a run folder (``run.json`` beside ``results.jsonl``),
* the file the harness's stdout or stderr is (same device and inode), where its progress goes,

and says what it found. A folder too large to look through (over :data:`MAX_ENTRIES`) is refused too:
it cannot be shown to hold nothing.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

MAX_ENTRIES = 20_000
CASE_YAML = re.compile(rb"^labels\s*:", re.MULTILINE)
CASE_SNIFF_BYTES = 1 << 16


def harness_outputs() -> set[tuple[int, int]]:
    """(device, inode) of the regular files this process's stdout and stderr write to."""
    out = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.add((st.st_dev, st.st_ino))
    return out


def refusal(path: Path, outputs: set[tuple[int, int]] | None = None) -> str | None:
    """Why ``path`` (a file or a folder) may not be shown in a box, or None."""
    outputs = harness_outputs() if outputs is None else outputs
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return _file_refusal(p, st, outputs)
    seen = 0
    stack = [p]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = {e.name for e in entries}
        if "run.json" in names and "results.jsonl" in names:
            return f"{folder} is a run folder (run.json, results.jsonl)"
        for e in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return f"{p} holds more than {MAX_ENTRIES} files and folders: too many to check that it holds no labels"
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    why = _file_refusal(Path(e.path), e.stat(follow_symlinks=False), outputs)
                    if why:
                        return why
            except OSError:
                continue
    return None


def _file_refusal(p: Path, st: os.stat_result, outputs: set[tuple[int, int]]) -> str | None:
    if (st.st_dev, st.st_ino) in outputs:
        return f"{p} is where this diageval process writes its output (its progress names the cases)"
    if p.name.endswith(".truth.json"):
        return f"{p} is a bundle cache's truth file"
    if p.name == "index.jsonl":
        return f"{p} looks like a bundle cache's index"
    if p.suffix in (".yaml", ".yml") and stat.S_ISREG(st.st_mode):
        try:
            with open(p, "rb") as fh:
                head = fh.read(CASE_SNIFF_BYTES)
        except OSError:
            return None
        if CASE_YAML.search(head):
            return f"{p} looks like a labeled case (a top-level labels:)"
    return None
