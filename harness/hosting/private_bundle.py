"""The private copy of a bundle a diagnoser gets for one case, checked against ``bundle.json`` on the way.

A diagnoser never sees the cached bundle folder: its name is the cache key, which anyone can recompute
from the public case specs, and the folder sits in the cache beside the truth files. It gets a copy, made
just before its diagnosis, under a random folder name, in which

* every file ``bundle.json`` lists is copied and its size and sha256 checked in the same pass (one read
  of the cached file): a mismatch, a missing file or a listed path that is or passes through a symlink
  raises :class:`BundleIntegrityError` naming the file, and the pipeline makes that case a
  ``harness_error`` and records the cache entry again;
* files ``bundle.json`` does not list are not copied;
* ``bundle.json`` is rewritten with a ``bundle_id`` drawn at random for this run (so no id links a run's
  bundles to another run's ``results.jsonl``) and ``created`` set to the copy time (the recording time
  of cached bundles follows the order in which cases were first recorded);
* files are read-only (0444, folders 0555), on top of the read-only mount of the box.

Copying costs one write per byte besides the read the checksum needs anyway; measured in
``benchmarks/run_overhead.py``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

from diageval.bundle.model import MANIFEST_NAME, BundleManifest
from diageval.hosting.errors import BundleIntegrityError

CHUNK = 1 << 20



def private_copy(bundle_dir: Path, dest: Path, bundle_id: str) -> Path:
    """Copy ``bundle_dir`` to ``dest`` (must not exist) as described above; return ``dest``."""
    bundle_dir = Path(bundle_dir)
    try:
        manifest = BundleManifest.model_validate_json((bundle_dir / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError) as exc:
        raise BundleIntegrityError(bundle_dir, MANIFEST_NAME, f"unreadable: {exc}") from None
    dest = Path(dest)
    dest.mkdir(parents=True)
    try:
        for f in manifest.files:
            _copy_checked(bundle_dir, f.path, dest, f.size, f.sha256)
        copy = manifest.model_copy(update={"bundle_id": bundle_id, "created": datetime.now(timezone.utc)})
        (dest / MANIFEST_NAME).write_text(copy.model_dump_json(indent=2) + "\n", encoding="utf-8")
        _make_read_only(dest)
    except BaseException:
        remove_copy(dest)
        raise
    return dest


def remove_copy(dest: Path) -> None:
    """Remove a private copy (its read-only folders included)."""
    dest = Path(dest)
    if not dest.exists():
        return
    for d, dirs, _ in os.walk(dest):
        os.chmod(d, 0o755)
    shutil.rmtree(dest, ignore_errors=True)


def _copy_checked(root: Path, rel: str, dest: Path, size: int, sha256: str) -> None:
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts or not parts:
        raise BundleIntegrityError(root, rel, "a path outside the bundle")
    src = root
    for part in parts:  # no component may be a symlink: one pointing outside would hand out other files
        src = src / part
        if src.is_symlink():
            raise BundleIntegrityError(root, rel, f"{src.relative_to(root).as_posix()} is a symlink; bundles hold plain files only")
    try:
        fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise BundleIntegrityError(root, rel, "listed in bundle.json but missing") from None
    except OSError as exc:
        raise BundleIntegrityError(root, rel, f"cannot read: {exc.strerror or exc}") from None
    target = dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    n = 0
    with os.fdopen(fd, "rb") as fin:
        if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
            raise BundleIntegrityError(root, rel, "not a regular file")
        with open(target, "wb") as fout:
            while block := fin.read(CHUNK):
                h.update(block)
                n += len(block)
                if n > size:
                    break
                fout.write(block)
    if n != size or h.hexdigest() != sha256:
        raise BundleIntegrityError(root, rel, "size or sha256 differs from bundle.json (the cached file was changed)")


def _make_read_only(dest: Path) -> None:
    for d, dirs, files in os.walk(dest, topdown=False):
        for name in files:
            os.chmod(os.path.join(d, name), 0o444)
        os.chmod(d, 0o555)
