"""The bundle cache: recorded bundles under opaque keys, with their ground truth kept one folder above.

Cache layout (under ``bundle_cache_dir()``, or ``cache_dir``)::

    evidence/<key>/        an evidence bundle; ``key`` is opaque and says nothing about the case
    <key>.truth.json       case id, repeat, and the Verification (ground truth): OUTSIDE the bundle
    index.jsonl            one line per recording: case id, role (case, twin or base), repeat -> key
                           (for people; lookups recompute keys)

Bundles sit one folder below the truth files, so a diagnoser handed a bundle folder finds only other
opaque bundles beside it, not the labels.

``key`` hashes the case's recording spec (workload and faults, not labels or title), the recording code
version (a hash of the recording, workload and fault sources), the resolved device, the torch version
and the repeat number. Repeat 0 is the bundle diagnosers see; repeats 1.. exist only to measure noise in
verification. A healthy twin has the same spec as a healthy control of the same workload, so they
share cache entries.

A case whose faults include evidence edits (``BundleFault``: a trace dropped, a clock skewed, ...) is
not recorded again: its bundle is derived from the cached recording of the same case without those edits
(its "base", recorded first if missing, under the base's own key, so the base case shares it), copied,
edited and given a fresh manifest and bundle id. ``force`` re-derives it from the base; it does not
re-record the base (force the case without the edits for that).
"""

from __future__ import annotations

import functools
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from diageval.cases.model import Case
from diageval.fileio import append_jsonl, atomic_write_text
from diageval.recording.draw import RecordingDraw
from diageval.recording.truth import TruthRecord

_HARNESS = Path(__file__).resolve().parent.parent
# The sources that shape a recording, relative to the package root: a change to any of them re-records.
RECORDING_SOURCES = ("recording", "bundle/model.py")
# Modules of recording/ that judge recordings but never shape one: a change to them re-verifies (prepare
# re-verifies a record its test did not make), it does not re-record.
VERIFICATION_ONLY = ("recording/verify.py", "recording/truth.py", "recording/manifest_test.py",
                     "recording/stored_checks.py", "recording/label_support.py")


def recording_code_version() -> str:
    """sha256 over the sources that shape a recording (paths and bytes, sorted). Every cache lookup needs it
    (several a case); the files are read again only when one's size or modification time changed."""
    files: list[Path] = []
    for name in RECORDING_SOURCES:
        p = _HARNESS / name
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    sources = []
    for f in files:
        rel = f.relative_to(_HARNESS).as_posix()
        if rel not in VERIFICATION_ONLY:
            st = f.stat()
            sources.append((str(f), rel, st.st_size, st.st_mtime_ns))
    return _sources_hash(tuple(sources))


@functools.lru_cache(maxsize=16)
def _sources_hash(sources: tuple[tuple[str, str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for path, rel, _, _ in sources:
        h.update(rel.encode())
        h.update(Path(path).read_bytes())
    return h.hexdigest()


@functools.cache
def torch_version() -> str:
    """The installed torch's version, from its distribution's metadata (importing torch to read
    ``torch.__version__`` costs seconds on 2 cores, in every run that only reads the cache); the same string
    for pip and conda builds (``2.13.0+cpu``); ``torch.__version__`` where torch is not an installed
    distribution (a source tree on the path)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        import torch

        return torch.__version__


def cache_key(case: Case, device: str, repeat: int = 0, *, code_version: str | None = None) -> str:
    payload = {
        "spec": case.spec_hash(),
        "code": code_version or recording_code_version(),
        "device": device,
        "torch": torch_version(),
        "repeat": repeat,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def bundles_root(cache: Path) -> Path:
    """The folder holding the cached bundle folders (one level below the truth files)."""
    return cache / "evidence"


def truth_path(cache: Path, key: str) -> Path:
    return cache / f"{key}.truth.json"


def read_truth(cache: Path, key: str) -> TruthRecord | None:
    path = truth_path(cache, key)
    if not path.is_file():
        return None
    return TruthRecord.model_validate_json(path.read_text(encoding="utf-8"))


def write_truth(cache: Path, record: TruthRecord) -> None:
    atomic_write_text(truth_path(cache, record.key), record.model_dump_json(indent=2) + "\n")


def note_draw(cache: Path, key: str, draw: RecordingDraw | None) -> None:
    """Keep ``draw`` (what the recording of a job case drew, recording/draw.py) in the truth record of the bundle
    ``key``, outside the bundle, when it is not there yet."""
    truth = read_truth(cache, key)
    if draw is not None and truth is not None and truth.draw != draw:
        write_truth(cache, truth.model_copy(update={"draw": draw}))


def ensure_bundle(case: Case, device: str, *, repeat: int = 0, force: bool = False,
                  cache_dir: Path | None = None, role: Literal["case", "twin", "base"] = "case") -> tuple[str, Path, bool]:
    """The cached bundle of ``case`` (recorded now if missing or ``force``): (key, folder, recorded_now).

    ``device`` must already be resolved (``cpu`` or ``cuda``). ``role`` says, in the truth file and the
    index, whether ``case`` is a case or the healthy twin of the case with that id (twins keep the id).
    Twins of different cases with the same workload share one entry: its truth names the first. ``base``:
    the live part of a case with evidence edits, recorded for its verification; it writes no truth file
    (its key is the key of any case with the same live spec, whose truth and verification must stay).
    """
    from diageval.bundle.model import MANIFEST_NAME
    from diageval.paths import bundle_cache_dir
    from diageval.recording.record import record_case

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    key = cache_key(case, device, repeat)
    folder = bundles_root(cache) / key
    if not force and (folder / MANIFEST_NAME).is_file():
        return key, folder, False
    live_case, edits = split_bundle_edits(case)
    if edits:  # evidence edits run on the cached recording of the same case without them: no re-recording
        base_key = cache_key(live_case, device, repeat)
        base = bundles_root(cache) / base_key
        if not (base / MANIFEST_NAME).is_file():
            record_case(live_case, base, device=device)
            append_jsonl(cache / "index.jsonl", {"case_id": case.id, "role": "base", "key": base_key, "repeat": repeat,
                                                 "device": device, "recorded": datetime.now(timezone.utc).isoformat()})
        derive_bundle(base, folder, edits)
    else:
        record_case(case, folder, device=device)
    if role != "base":  # a base's key may be another case's, whose truth (and verification) stays
        previous = read_truth(cache, key)
        if previous is None or previous.case_id != case.id or previous.role != role or force:
            write_truth(cache, TruthRecord(case_id=case.id, role=role, key=key, repeat=repeat,
                                           recorded=datetime.now(timezone.utc)))
    append_jsonl(cache / "index.jsonl", {"case_id": case.id, "role": role, "key": key, "repeat": repeat,
                                         "device": device, "recorded": datetime.now(timezone.utc).isoformat()})
    return key, folder, True


def split_bundle_edits(case: Case) -> tuple[Case, list]:
    """The case without its evidence edits, and those edits (instantiated), in case order."""
    from diageval.recording.faults import FAULTS

    live, edits = [], []
    for spec in case.faults:
        info = FAULTS[spec.name]
        impl = info.load()
        if impl.stage == "bundle":
            edits.append(impl(info.params_model.model_validate(spec.params)))
        else:
            live.append(spec)
    return case.model_copy(update={"faults": live}), edits


def derive_bundle(base: Path, dest: Path, edits: list) -> None:
    """Copy the bundle ``base`` to ``dest`` (replaced), apply ``edits``, write a fresh manifest; atomic."""
    import shutil
    import uuid

    from diageval.bundle.model import MANIFEST_NAME, BundleManifest, describe_files
    from diageval.fileio import owned_temp_dir
    from diageval.recording.faults.base import BundleFault
    from diageval.recording.record import TMP_PREFIX

    source = BundleManifest.model_validate_json((base / MANIFEST_NAME).read_text(encoding="utf-8"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = owned_temp_dir(dest.parent, TMP_PREFIX)
    try:
        shutil.copytree(base, tmp, dirs_exist_ok=True)
        (tmp / MANIFEST_NAME).unlink()
        env = source.env
        for edit in edits:
            edit.apply(tmp)
            env = edit.bundle_env(env) if isinstance(edit, BundleFault) else env  # a tier filter keeps the job
        for edit in edits:  # what each edit breaks is in the bundle (issue 40): checked once all are applied
            if isinstance(edit, BundleFault):
                edit.check_present(tmp)
        manifest = source.model_copy(update={"bundle_id": uuid.uuid4().hex, "created": datetime.now(timezone.utc),
                                             "env": env, "files": describe_files(tmp)})
        atomic_write_text(tmp / MANIFEST_NAME, manifest.model_dump_json(indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
