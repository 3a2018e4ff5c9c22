"""Evidence for a case: its recorded bundle (cached) and the ground truth of its injection.

``prepare_evidence(loaded)`` is what the run pipeline calls. It returns the case's bundle folder,
recording it only when the cache has none, and, for a positive case, the :class:`Verification` that its
injection manifested (see :mod:`diageval.verify`).

Cache layout (under ``bundle_cache_dir()``, or ``cache_dir``)::

    evidence/<key>/        an evidence bundle; ``key`` is opaque and says nothing about the case
    <key>.truth.json       case id, repeat, and the Verification (ground truth): OUTSIDE the bundle
    index.jsonl            one line per recording: case id, role (case or twin), repeat -> key
                           (for people; lookups recompute keys)

Bundles sit one folder below the truth files, so a diagnoser handed a bundle folder finds only other
opaque bundles beside it, not the labels.

``key`` hashes the case's recording spec (workload and faults, not labels or title), the recording code
version (a hash of the recording, workload and fault sources), the resolved device, the torch version
and the repeat number. Repeat 0 is the bundle diagnosers see; repeats 1.. exist only to measure noise in
verification. A healthy twin has the same spec as a healthy control of the same workload, so they
share cache entries.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from typing import Literal

from pydantic import BaseModel, Field

from diageval.case import Case, LoadedCase
from diageval.fileio import append_jsonl, atomic_write_text, sha256_file

_HARNESS = Path(__file__).resolve().parent
RECORDING_SOURCES = ("recording", "workloads", "faults", "bundle.py")


class Verification(BaseModel):
    """Whether a positive case's injection showed, measured against its healthy twin."""

    metric: str = Field(description="The case's manifest metric")
    min_ratio: float
    injected: float = Field(description="Median over repeats of the metric with the faults (seconds)")
    healthy: float = Field(description="Median over repeats of the metric of the healthy twin (seconds)")
    ratio: float = Field(description="injected / healthy")
    noise: float = Field(
        description="Relative spread of the healthy twin's metric over repeats: (max - min) / median. "
        "A ratio whose excess over 1 is not well above this is not trustworthy."
    )
    repeats: int
    manifested: bool = Field(
        description="ratio >= min_ratio and (with 2+ repeats) every injected repeat above every healthy one"
    )
    impact: float | None = Field(
        description="Measured fraction of step time lost: 1 - healthy/injected mean step time over the "
        "labeled steps (medians over repeats)"
    )


class PreparedEvidence(BaseModel):
    case_id: str
    bundle_dir: Path
    bundle_id: str
    manifest_sha256: str
    verification: Verification | None = Field(description="None for healthy and abstain cases")


class TruthRecord(BaseModel):
    """What the cache knows about a recording that must never be inside the bundle."""

    case_id: str
    role: Literal["case", "twin"] = Field("case", description="twin: the case's healthy twin (faults removed)")
    key: str
    repeat: int
    recorded: datetime
    verification: Verification | None = None


def recording_code_version() -> str:
    """sha256 over the sources that shape a recording (paths and bytes, sorted)."""
    h = hashlib.sha256()
    files: list[Path] = []
    for name in RECORDING_SOURCES:
        p = _HARNESS / name
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    for f in files:
        h.update(f.relative_to(_HARNESS).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def cache_key(case: Case, device: str, repeat: int = 0, *, code_version: str | None = None) -> str:
    import torch

    payload = {
        "spec": case.spec_hash(),
        "code": code_version or recording_code_version(),
        "device": device,
        "torch": torch.__version__,
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


def ensure_bundle(case: Case, device: str, *, repeat: int = 0, force: bool = False,
                  cache_dir: Path | None = None, role: Literal["case", "twin"] = "case") -> tuple[str, Path, bool]:
    """The cached bundle of ``case`` (recorded now if missing or ``force``): (key, folder, recorded_now).

    ``device`` must already be resolved (``cpu`` or ``cuda``). ``role`` says, in the truth file and the
    index, whether ``case`` is a case or the healthy twin of the case with that id (twins keep the id).
    Twins of different cases with the same workload share one entry: its truth names the first.
    """
    from diageval.bundle import MANIFEST_NAME
    from diageval.paths import bundle_cache_dir
    from diageval.recording.record import record_case

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    key = cache_key(case, device, repeat)
    folder = bundles_root(cache) / key
    if not force and (folder / MANIFEST_NAME).is_file():
        return key, folder, False
    record_case(case, folder, device=device)
    previous = read_truth(cache, key)
    if previous is None or previous.case_id != case.id or previous.role != role or force:
        write_truth(cache, TruthRecord(case_id=case.id, role=role, key=key, repeat=repeat,
                                       recorded=datetime.now(timezone.utc)))
    append_jsonl(cache / "index.jsonl", {"case_id": case.id, "role": role, "key": key, "repeat": repeat,
                                         "device": device, "recorded": datetime.now(timezone.utc).isoformat()})
    return key, folder, True


def prepare_evidence(loaded: LoadedCase, *, device: str = "auto", force: bool = False, verify: bool = True,
                     cache_dir: Path | None = None) -> PreparedEvidence:
    """Record (or reuse) the case's bundle; for a positive case also verify that its injection manifested.

    Verification reuses a stored one unless ``force``; it records ``DEFAULT_REPEATS`` repeats of the case
    and of its healthy twin (all cached). Raises ``RecordingError`` when a recording fails.
    """
    from diageval.bundle import MANIFEST_NAME, EvidenceBundle
    from diageval.paths import bundle_cache_dir
    from diageval.recording.record import resolve_device
    from diageval.verify import DEFAULT_REPEATS, verify_case

    case = loaded.case
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    resolved = resolve_device(device, case)
    verification = None
    verified_now = False
    if verify and case.labels.expect == "diagnose":
        truth = read_truth(cache, cache_key(case, resolved))
        if truth is not None and truth.verification is not None and not force:
            verification = truth.verification
        else:  # records every repeat, repeat 0 (the bundle returned below) included
            verification = verify_case(case, repeats=DEFAULT_REPEATS, device=resolved, cache_dir=cache, force=force)
            verified_now = True
    key, folder, _ = ensure_bundle(case, resolved, force=force and not verified_now, cache_dir=cache)
    bundle = EvidenceBundle.open(folder)
    return PreparedEvidence(
        case_id=case.id, bundle_dir=folder, bundle_id=bundle.bundle_id,
        manifest_sha256=sha256_file(folder / MANIFEST_NAME), verification=verification,
    )


def record_cases(case_ids: list[str], *, cases_dir: Path | None = None, device: str = "auto", force: bool = False,
                 cache_dir: Path | None = None, progress=None) -> list[tuple[str, Path, bool]]:
    """Record (or reuse) the bundles of the named cases: (case id, bundle folder, recorded now)."""
    from diageval.case import load_case_set
    from diageval.recording.record import resolve_device

    case_set = load_case_set(cases_dir)
    out = []
    chosen = case_set.select(case_ids)
    for n, lc in enumerate(chosen, 1):
        if progress:
            progress(f"[{n}/{len(chosen)}] {lc.case.id}")
        dev = resolve_device(device, lc.case)
        _, folder, fresh = ensure_bundle(lc.case, dev, force=force, cache_dir=cache_dir)
        out.append((lc.case.id, folder, fresh))
    return out
