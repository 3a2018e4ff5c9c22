"""A case's bundle cut down to an evidence tier (:mod:`diageval.cases.tiers`), for ``diageval run --evidence``.

The tier bundle is an evidence edit of the finished bundle, derived by the one function that derives
bundles from bundles (:func:`diageval.recording.derive_bundle`: copy, edit, fresh ``bundle.json``
with the files present and their checksums, atomic), the way the cache derives ``cases/noise/`` from
their recording. Why not a filter inside the private copy a diagnoser gets (``diageval.hosting``)? That
copy's one job is to check the cached bundle and hand it over unchanged; cutting it there would make a
second place that rewrites ``bundle.json``, and the tier bundle would exist only inside a box, where the
benchmark that measures each tier's bytes cannot read it.

The tier bundle sits beside the bundle it comes from (in the cache's ``evidence/`` folder, or beside a
recorded case's import) under an opaque name: a hash of the tier, :data:`TIER_FILTER_VERSION` and the
source's ``bundle.json`` sha256, so a source recorded again gets a new tier bundle and a tier is cut
once per source. Every file the tier keeps must match the source's ``bundle.json`` entry (size and
sha256): the cut never hides a damaged cached file (:class:`TierSourceDamaged`).

A regression's or fleet's bundle (:mod:`diageval.bundle.fleet`) is cut run by run: ``fleet.json`` (the runs'
names, metadata, start times and roles: what every tier needs to say which run is which, and no measurement)
is kept at every tier, as ``bundle.json`` is, and each ``runs/<name>/`` keeps what its tier keeps of a job's
bundle, its own ``bundle.json`` rewritten to list the files kept. Before (version 1) every file of a fleet
counted as ``full``: below it a fleet's bundle was empty while its labels were still expected at ``one-rank``
and ``traces``.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import msgspec

from pydantic import BaseModel, ConfigDict, Field

from diageval.bundle.fleet import FLEET_NAME, RUNS_DIR, describe_fleet_files
from diageval.bundle.model import MANIFEST_NAME, BundleManifest
from diageval.cases.tiers import FULL, ONE_RANK, TIERS, EvidenceTier, tier_index
from diageval.errors import DiagevalError
from diageval.fileio import atomic_write_text

TIER_FILTER_VERSION = 2  # bump when tier_of_path changes: tier bundles are then cut again
_RANK = re.compile(r"^rank(\d+)$")


class TierSourceDamaged(DiagevalError):
    """A file of the bundle a tier is cut from does not match its ``bundle.json`` (names the file)."""


def tier_of_path(rel: str) -> EvidenceTier:
    """The lowest tier holding the bundle file ``rel`` (a path relative to the bundle, ``/``-separated); a fleet's
    ``fleet.json`` and each run's ``bundle.json`` at every tier, a run's other files as the same file of a job's."""
    if rel == FLEET_NAME:
        return TIERS[0]
    run_file = _run_file(rel)
    if run_file is not None:
        return TIERS[0] if run_file == MANIFEST_NAME else tier_of_path(run_file)
    first = rel.split("/", 1)[0]
    if rel == "steps.jsonl":
        return "steps"
    if rel == "metrics.jsonl":
        return "metrics"
    m = _RANK.match(first)
    if m and "/" in rel:
        return "one-rank" if int(m.group(1)) == ONE_RANK else "traces"
    if first == "logs" and "/" in rel:
        return "traces"
    return "full"  # flight_recorder/ and anything not named above


def _run_file(rel: str) -> str | None:
    """``rel`` inside its run's bundle when it is a fleet run's file (``runs/<name>/<path>``), else None."""
    parts = rel.split("/", 2)
    return parts[2] if len(parts) == 3 and parts[0] == RUNS_DIR and parts[1] else None


def keeps(tier: EvidenceTier, rel: str) -> bool:
    return tier_index(tier_of_path(rel)) <= tier_index(tier)


class TierFilter:
    """The evidence edit that keeps ``tier``'s files (the shape of a ``BundleFault``: ``apply(folder)``)."""

    def __init__(self, tier: EvidenceTier):
        tier_index(tier)
        self.tier = tier

    def apply(self, bundle_dir: Path) -> None:
        root = Path(bundle_dir)
        for path in sorted(root.rglob("*"), reverse=True):  # files before their folders
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel != MANIFEST_NAME and not keeps(self.tier, rel):
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        for run_manifest in sorted((root / RUNS_DIR).glob(f"*/{MANIFEST_NAME}")):  # a fleet's runs list what they keep
            run = BundleManifest.model_validate_json(run_manifest.read_bytes())
            kept = [f for f in run.files if (run_manifest.parent / f.path).is_file()]
            atomic_write_text(run_manifest, run.model_copy(update={"files": kept}).model_dump_json(indent=2) + "\n")


def tier_bundle(source: Path, tier: EvidenceTier) -> Path:
    """The bundle ``source`` cut to ``tier`` (derived now unless already there); ``full`` is ``source``."""
    from diageval.fileio import sha256_file
    from diageval.recording import derive_bundle

    source = Path(source)
    if tier_index(tier) == tier_index(FULL):
        return source
    digest = sha256_file(source / MANIFEST_NAME)
    name = hashlib.sha256(f"tier:{TIER_FILTER_VERSION}:{tier}:{digest}".encode()).hexdigest()[:32]
    dest = source.parent / name
    if (dest / MANIFEST_NAME).is_file():
        return dest
    derive_bundle(source, dest, [TierFilter(tier)])
    if (dest / FLEET_NAME).is_file():  # the runs' own manifests are files of the fleet's (describe_files skips them)
        manifest = BundleManifest.model_validate_json((dest / MANIFEST_NAME).read_bytes())
        atomic_write_text(dest / MANIFEST_NAME,
                          manifest.model_copy(update={"files": describe_fleet_files(dest)}).model_dump_json(indent=2) + "\n")
    _check_against_source(source, dest)
    return dest


def _check_against_source(source: Path, dest: Path) -> None:
    listed = {f.path: f for f in BundleManifest.model_validate_json((source / MANIFEST_NAME).read_bytes()).files}
    for f in BundleManifest.model_validate_json((dest / MANIFEST_NAME).read_bytes()).files:
        want = listed.get(f.path)
        if want is not None and _run_file(f.path) == MANIFEST_NAME:
            continue  # a run's manifest, rewritten to the files kept (each of them checked here on its own)
        if want is None or (want.size, want.sha256) != (f.size, f.sha256):
            shutil.rmtree(dest, ignore_errors=True)
            why = "not listed in its bundle.json" if want is None else "size or sha256 differs from its bundle.json"
            raise TierSourceDamaged(f"{source / f.path}: {why}")


class EvidenceSize(BaseModel):
    """What one case's bundle (as the diagnoser got it) weighs: bytes, and steps in its step log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bytes: int = Field(ge=0, description="Sum of the sizes bundle.json lists")
    steps: int | None = Field(None, ge=0, description="Distinct steps in the full bundle's steps.jsonl; None without one")


def evidence_size(bundle_dir: Path, full_bundle_dir: Path | None = None) -> EvidenceSize:
    """Bytes of ``bundle_dir`` and steps logged in ``full_bundle_dir`` (default: the same bundle); a regression's or
    fleet's steps are its runs' together (each run's ``runs/<name>/steps.jsonl``)."""
    manifest = BundleManifest.model_validate_json((Path(bundle_dir) / MANIFEST_NAME).read_bytes())
    full = Path(full_bundle_dir or bundle_dir)
    logs = [full / "steps.jsonl"] if (full / "steps.jsonl").is_file() else sorted(full.glob(f"{RUNS_DIR}/*/steps.jsonl"))
    steps = None
    if logs:
        # only the step number of each row (a 1024-rank job logs 30,000 rows; json.loads of each took ~1 s a run)
        decoder = msgspec.json.Decoder(_StepRow)
        steps = sum(len({decoder.decode(line).step for line in log.read_bytes().splitlines() if line.strip()})
                    for log in logs)
    return EvidenceSize(bytes=sum(f.size for f in manifest.files), steps=steps)


class _StepRow(msgspec.Struct):
    """A step log row, as far as its step number."""

    step: object = None


def tier_bytes(manifest: BundleManifest) -> dict[str, int]:
    """Bytes each tier keeps of a full bundle, from its ``bundle.json`` alone (no copy)."""
    return {t: sum(f.size for f in manifest.files if keeps(t, f.path)) for t in TIERS}
