"""A bundle on its way to another machine: packed here by content key, unpacked there, checked on arrival.

The key is the sha256 of the bundle's ``bundle.json``, which lists every file with its size and sha256.
Packing reads ``bundle.json`` and each plain file it lists (no link is followed; a listed file that is
missing or not a plain file is left out); unpacking writes them to a fresh folder and refuses a package
whose ``bundle.json`` does not hash to its key (damaged on the way: :class:`TransferDamaged`). The files
themselves are then checked by the one integrity check there is: the private copy a slot makes for its
diagnoser (the hosting room's private copy), so a file changed in the cache, or left
out here, is the same ``BundleIntegrityError`` naming the file on a Ray worker as in a local run.

A bundle that is kept where it arrives (a recording coming back to this machine's cache, a cached one seeded
into a recorder's private cache) is received whole: :func:`receive_bundle` unpacks it beside its place,
checks every file against ``bundle.json`` and only then moves it into place.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath

from diageval.bundle.model import MANIFEST_NAME, BundleError, BundleManifest

Packed = dict[str, bytes]  # relative path -> content, bundle.json included


class TransferDamaged(BundleError):
    """A package whose ``bundle.json`` does not match its content key, or that names a path outside the bundle."""


def pack_bundle(bundle_dir: Path) -> Packed:
    """``bundle.json`` and every plain file it lists. An unreadable ``bundle.json`` packs alone (the
    receiving private copy names it)."""
    bundle_dir = Path(bundle_dir)
    manifest_bytes = (bundle_dir / MANIFEST_NAME).read_bytes()
    packed: Packed = {MANIFEST_NAME: manifest_bytes}
    try:
        manifest = BundleManifest.model_validate_json(manifest_bytes)
    except ValueError:
        return packed
    for f in manifest.files:
        data = _read_plain(bundle_dir, f.path)
        if data is not None:
            packed[f.path] = data
    return packed


def unpack_bundle(packed: Packed, key: str, dest: Path) -> Path:
    """Write ``packed`` under ``dest`` (must not exist) after checking ``bundle.json`` against ``key``."""
    manifest = packed.get(MANIFEST_NAME)
    if manifest is None or hashlib.sha256(manifest).hexdigest() != key:
        raise TransferDamaged(f"the bundle's {MANIFEST_NAME} arrived with another sha256 than its key {key[:16]}")
    dest = Path(dest)
    dest.mkdir(parents=True)
    for rel, data in packed.items():
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
            raise TransferDamaged(f"the package names a path outside the bundle: {rel!r}")
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dest


def receive_bundle(packed: Packed, key: str, dest: Path) -> bool:
    """Unpack ``packed`` as the folder ``dest``, checked against ``key`` and every file against ``bundle.json``
    (else :class:`TransferDamaged`, naming the files, and nothing is left behind). True when it was put in place;
    False when ``dest`` already holds a bundle (kept as it is: the first arrival wins)."""
    import shutil

    from diageval.bundle.model import EvidenceBundle
    from diageval.fileio import owned_temp_dir

    dest = Path(dest)
    if (dest / MANIFEST_NAME).is_file():
        return False
    tmp = owned_temp_dir(dest.parent, ".arriving-")
    try:
        folder = unpack_bundle(packed, key, tmp / "bundle")
        try:
            problems = EvidenceBundle.open(folder).verify_checksums()
        except BundleError as exc:
            problems = [str(exc)]
        if problems:
            raise TransferDamaged(f"the bundle {key[:16]} arrived damaged: " + "; ".join(problems))
        if (dest / MANIFEST_NAME).is_file():
            return False
        if dest.exists():  # a folder without a manifest: an interrupted write, replaced
            shutil.rmtree(dest)
        folder.rename(dest)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_plain(root: Path, rel: str) -> bytes | None:
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        return None
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read()
