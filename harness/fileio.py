"""Small file helpers shared by every step: atomic writes, hashing, JSON lines.

Every file diageval writes goes through :func:`atomic_write_bytes` (temp file in the same folder, then
``os.replace``), so a crash or Ctrl-C never leaves a half-written file behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from diageval.errors import DiagevalError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def append_jsonl(path: Path, obj: Any) -> None:
    """Append one JSON line and fsync it: a line is either wholly there or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(obj, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


class JsonLinesError(DiagevalError, ValueError):
    """A JSON-lines file with a line that is not a JSON object; ``torn`` when it is the unterminated last
    line (a writer killed mid-line). The message names the file and the line."""

    def __init__(self, message: str, *, line: int, torn: bool):
        super().__init__(message)
        self.line = line
        self.torn = torn


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSON-lines file. A line that is not one raises :class:`JsonLinesError`
    naming file and line, a torn last line included: it is reported, never silently dropped (the run
    store sets a torn line of ``results.jsonl`` aside on resume, see ``RunStore.set_aside_torn_tail``)."""
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    last = len(lines) - 1 if lines[-1].strip() else len(lines) - 2  # index of the last non-empty line
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        torn = i == last and not data.endswith(b"\n")
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            why = "torn (the writer stopped mid-line)" if torn else f"not valid JSON ({type(exc).__name__})"
            raise JsonLinesError(f"{path}: line {i + 1} is {why}", line=i + 1, torn=torn) from None
        if not isinstance(obj, dict):
            raise JsonLinesError(f"{path}: line {i + 1} is not a JSON object", line=i + 1, torn=False)
        yield obj


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def owned_temp_dir(parent: Path, prefix: str) -> Path:
    """A new temp folder ``<parent>/<prefix><pid>-<random>``: the pid of its owner is in its name, so
    that :func:`remove_stale_temp_dirs` can later tell a leftover (owner dead, e.g. SIGKILL) from one in use."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


def remove_stale_temp_dirs(parent: Path, prefix: str) -> list[Path]:
    """Remove the :func:`owned_temp_dir` folders under ``parent`` whose owner process is gone."""
    import re
    import shutil

    removed: list[Path] = []
    parent = Path(parent)
    if not parent.is_dir():
        return removed
    for d in parent.glob(f"{prefix}*"):
        m = re.match(rf"^{re.escape(prefix)}(\d+)-", d.name)
        if m and d.is_dir() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
