"""Evidence for a recorded case: a real job's trace files, checked and imported into a cached bundle.

``import_recorded(loaded, data_dir=..., cache_dir=...)`` (called by ``recording.prepare``) finds every
file the case names under the data folders (``paths.data_dirs``: ``--data`` or ``$DIAGEVAL_DATA``, else the
user cache folder ``diageval data fetch`` fills, then ``../shared/real-traces`` where it exists), checks its sha256, and imports them with the bundle
importer's public ``import_traces`` (the same path as ``diageval bundle import``). The bundle is cached under the bundle
cache's ``evidence/`` folder, keyed by the files' checksums (never the case id), so two cases on the
same traces share one bundle and a second run imports nothing.

* A file that is absent: :class:`EvidenceUnavailable` listing every absent file and the folders searched.
  The run pipeline reports the case ``unavailable``, apart from every other status and never blamed on
  a diagnoser (the repository ships no copy of others' traces; ``diageval data fetch`` downloads them).
* A case with evidence edits (``faults``: bundle faults only, e.g. ``drop_device_events``) is the plain
  import of its files (cached under the key without edits, shared with a case on the same files) copied
  and edited, under a key that adds the edits.
* A file whose sha256 differs: :class:`EvidenceChecksumError` naming the file, the expected and the
  actual checksum (a different file under the same name must not be judged against these labels).
* Nothing the public case file pins reaches the bundle (issue 44 item 1): the importer keeps a gzipped
  trace byte for byte and names the bundle by its traces' checksums, so ``bundle.json`` listed the very
  sha256 the case file pins and a diagnoser shipping the public case files looked the case up from it
  (measured: +0.139 over null). :func:`reissue` therefore writes each trace again from a fresh draw
  (compressed anew with a drawn gzip time stamp, and a drawn run of whitespace after the JSON document,
  which every JSON reader skips), so neither the file's nor its content's sha256 is the pinned one or one
  computable from the case file, and gives the bundle a random id. The trace's events are untouched:
  a real trace's content is public evidence (anyone holding the public traces can still recognise them;
  ranking claims rest on the held-out split, README).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path

from diageval.cases.load import LoadedCase
from diageval.errors import DiagevalError
from diageval.fileio import sha256_file

IMPORT_VERSION = "recorded-2"  # bump when the importer's output for the same files changes


class EvidenceUnavailable(DiagevalError):
    """Some trace file of a recorded case is not in the data folder."""


class EvidenceChecksumError(DiagevalError):
    """A trace file of a recorded case is there but is not the file the case names."""


def _folders(data_dir: Path | Sequence[Path]) -> list[Path]:
    return [Path(data_dir)] if isinstance(data_dir, (str, Path)) else [Path(d) for d in data_dir]


def absent_files(loaded: LoadedCase, data_dir: Path | Sequence[Path]) -> list[str]:
    """The paths of the case's trace files found in none of the folders (existence only, no checksum)."""
    folders = _folders(data_dir)
    return [f.path for f in loaded.case.recorded_files() if not any((d / f.path).is_file() for d in folders)]


def unavailable_cases(cases: Iterable[LoadedCase], data_dir: Path | Sequence[Path]) -> list[str]:
    """Ids of the cases among ``cases`` made of real traces (recorded jobs, recorded regressions' runs) with a
    trace file absent from every folder, in order."""
    return [lc.case.id for lc in cases if lc.case.recorded_files() and absent_files(lc, data_dir)]


def locate_files(loaded: LoadedCase, data_dir: Path | Sequence[Path]) -> list[Path]:
    """The case's trace files, checked; rank order as in the case. ``data_dir``: one folder or several,
    searched in order (a file is taken from the first folder holding it with the named sha256)."""
    recorded = loaded.case.recorded
    if recorded is None:
        raise ValueError(f"case {loaded.case.id} is not a recorded case")
    folders = _folders(data_dir)
    missing = absent_files(loaded, folders)
    if missing:
        where = ", ".join(str(d) if d.is_dir() else f"{d} (no such folder)" for d in folders)
        raise EvidenceUnavailable(
            f"{len(missing)} of {len(recorded.files)} trace file(s) not found under {where}: {', '.join(missing)}"
            " (`diageval data fetch` downloads them; --data or $DIAGEVAL_DATA names another folder)"
        )
    paths = []
    for f in recorded.files:
        checked = []  # (path, its sha256) of every folder's copy tried, until one is the named file
        for path in (d / f.path for d in folders if (d / f.path).is_file()):
            checked.append((path, sha256_file(path)))
            if checked[-1][1] == f.sha256:
                paths.append(path)
                break
        else:
            path, actual = checked[0]
            raise EvidenceChecksumError(
                f"{path}: sha256 {actual} differs from {f.sha256} named by {loaded.path} (recorded.files, path {f.path});"
                " the file is not the trace this case was labeled from"
            )
    return paths


def recorded_bundle_key(loaded: LoadedCase, *, with_edits: bool = True) -> str:
    """Opaque cache key: the files' ranks and checksums, the import version and the case's evidence edits
    (their registry names and params; no case id). ``with_edits=False``: the key of the plain import."""
    files = sorted((f.rank, f.sha256) for f in loaded.case.recorded.files)
    data = {"files": files, "import": IMPORT_VERSION}
    if with_edits and loaded.case.faults:
        data["edits"] = [f.model_dump() for f in loaded.case.faults]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def import_recorded(loaded: LoadedCase, *, data_dir: Path | None = None, cache_dir: Path | None = None,
                    force: bool = False) -> Path:
    """The case's bundle folder (imported now unless cached)."""
    import shutil
    import tempfile

    from diageval.bundle.importer import import_traces
    from diageval.bundle.model import MANIFEST_NAME
    from diageval.paths import bundle_cache_dir, data_dirs
    from diageval.recording.cache import bundles_root

    files = locate_files(loaded, data_dirs(data_dir))
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    if loaded.case.faults:  # a derived case: the plain import (shared with the case without edits), edited
        from diageval.recording.cache import derive_bundle, split_bundle_edits

        plain = import_recorded(LoadedCase(case=loaded.case.model_copy(update={"faults": []}), path=loaded.path,
                                           file_sha256=loaded.file_sha256), data_dir=data_dir, cache_dir=cache)
        folder = bundles_root(cache) / recorded_bundle_key(loaded)
        if force or not (folder / MANIFEST_NAME).is_file():
            derive_bundle(plain, folder, split_bundle_edits(loaded.case)[1])
        return folder
    folder = bundles_root(cache) / recorded_bundle_key(loaded)
    if force and folder.exists():
        shutil.rmtree(folder)
    if not (folder / MANIFEST_NAME).is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        # staging the files under rank-revealing names keeps the rank the case names (file names in the data
        # folder may not say it); the import is re-issued in the stage and renamed into place whole
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".stage-") as stage:
            staged = []
            for f, path in zip(loaded.case.recorded.files, files):
                link = Path(stage) / f"rank{f.rank}.{'json.gz' if path.name.endswith('.gz') else 'json'}"
                link.symlink_to(path.resolve())
                staged.append(link)
            # as given (no repair): a case's evidence is its files as its author labeled them; what the import
            # finds wrong with them is still recorded in the bundle (import_repairs)
            imported = import_traces(staged, Path(stage) / "bundle", repair=False)
            reissue(imported, secrets.randbits(63))
            if (folder / MANIFEST_NAME).is_file():  # another process imported it meanwhile: its bundle stays
                return folder
            if folder.exists():  # a folder without a manifest: a torn earlier attempt
                shutil.rmtree(folder)
            imported.rename(folder)
    return folder


MAX_PAD = 64  # the drawn whitespace after a trace's JSON document: 1 to 64 bytes


def reissue(bundle_dir: Path, seed: int) -> None:
    """Write every trace of the imported bundle at ``bundle_dir`` again from ``seed`` (module doc): the same
    JSON document followed by a drawn run of whitespace, gzipped with a drawn time stamp; then a manifest with a
    random bundle id and the new files' checksums."""
    import gzip
    import random
    import shutil
    import uuid

    from diageval.bundle.model import MANIFEST_NAME, BundleManifest, describe_files, rank_trace_files
    from diageval.fileio import atomic_write_text

    rng = random.Random(seed)
    for rank, trace in sorted(rank_trace_files(bundle_dir).items()):
        fresh = trace.with_name(trace.name + ".reissued")
        pad = "".join(rng.choice(" \n") for _ in range(rng.randint(1, MAX_PAD))).encode()
        with gzip.open(trace, "rb") as fin, open(fresh, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=rng.randint(1, 2**31 - 1)) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.write(pad)
        fresh.replace(trace)
    manifest = BundleManifest.model_validate_json((bundle_dir / MANIFEST_NAME).read_bytes())
    (bundle_dir / MANIFEST_NAME).unlink()
    manifest = manifest.model_copy(update={"bundle_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                                           "files": describe_files(bundle_dir)})
    atomic_write_text(bundle_dir / MANIFEST_NAME, manifest.model_dump_json(indent=2) + "\n")
