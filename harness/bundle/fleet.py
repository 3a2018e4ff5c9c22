"""Fleet evidence (issue 24): a regression pair or a fleet of runs as one bundle folder.

Layout of the case's bundle folder::

    bundle.json            the ordinary manifest; its ``files`` list every file below, the runs' too, with
                           sha256 and size, so the integrity check covers the whole fleet
    fleet.json             schema_version and the runs: name, metadata (factor -> value), start time (ISO),
                           role (baseline | candidate, regressions only) and bundle (``runs/<name>``)
    runs/<name>/           one ordinary evidence bundle per run (bundle.json, steps.jsonl, metrics.jsonl,
                           rank<N>/trace.json.gz, logs/)

``fleet.json`` holds no label, fault word or case id: run names and metadata are the case's opaque words
(a test greps them), start times are the case's start order on a schedule (:func:`start_times`), not the
moment each member was recorded. A bundle without ``fleet.json`` is one job's evidence: :func:`read_fleet`
returns None for it.
"""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from diageval.bundle.model import MANIFEST_NAME, BundleEnv, BundleError, BundleFile, BundleManifest, EvidenceBundle
from diageval.diagnosis import FactorRef, check_fleet_runs
from diageval.fileio import atomic_write_text, sha256_file

FLEET_NAME = "fleet.json"
FLEET_SCHEMA_VERSION = 1
RUNS_DIR = "runs"
RUN_NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
MAX_RUNS = 64  # cases hold 2-16; a fleet.json claiming more is damaged or hostile
# The schedule fleet.json gives the runs: the first starts at FLEET_EPOCH, each next one RUN_SPACING later.
FLEET_EPOCH = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
RUN_SPACING = timedelta(minutes=30)


class FleetRunInfo(BaseModel):
    """One run as fleet.json describes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=RUN_NAME_PATTERN, max_length=32, description="Opaque run name")
    metadata: dict[str, str] = Field(min_length=1, description="Factor name -> value (opaque words)")
    start: datetime = Field(description="When the run started (ISO 8601, UTC)")
    role: Literal["baseline", "candidate"] | None = Field(None, description="Regressions: which run is which")
    bundle: str = Field(description="The run's bundle folder, relative to the fleet bundle: runs/<name>")

    @field_validator("metadata")
    @classmethod
    def _factor_words(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            FactorRef(name=name, value=value)  # the words a diagnosis names a factor by
        return v

    @model_validator(mode="after")
    def _bundle_path(self) -> "FleetRunInfo":
        if self.bundle != f"{RUNS_DIR}/{self.name}":
            raise ValueError(f"bundle: expected {RUNS_DIR}/{self.name!s} for run {self.name!r}, got {self.bundle!r}")
        return self


class Fleet(BaseModel):
    """fleet.json: the runs of a regression or a fleet, read through :func:`read_fleet`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = FLEET_SCHEMA_VERSION
    runs: list[FleetRunInfo] = Field(min_length=2, max_length=MAX_RUNS)
    _root: Path | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _consistent(self) -> "Fleet":
        if self.schema_version != FLEET_SCHEMA_VERSION:
            raise ValueError(f"schema_version: expected {FLEET_SCHEMA_VERSION}, got {self.schema_version}")
        check_fleet_runs(self.runs)
        roles = [r.role for r in self.runs if r.role is not None]
        if roles and (len(self.runs) != 2 or sorted(roles) != ["baseline", "candidate"]):
            raise ValueError("runs: roles are for a regression: exactly two runs, one baseline and one candidate")
        return self

    @property
    def is_regression(self) -> bool:
        return any(r.role is not None for r in self.runs)

    @property
    def factors(self) -> list[str]:
        """The factor names every run's metadata gives a value."""
        return sorted(self.runs[0].metadata)

    def values(self, factor: str) -> list[str]:
        """The values ``factor`` takes across the runs, sorted."""
        return sorted({r.metadata[factor] for r in self.runs})

    def runs_with(self, ref: FactorRef) -> list[FleetRunInfo]:
        return [r for r in self.runs if r.metadata.get(ref.name) == ref.value]

    def ordered(self) -> list[FleetRunInfo]:
        """The runs by start time."""
        return sorted(self.runs, key=lambda r: (r.start, r.name))

    def run(self, name: str) -> FleetRunInfo:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no run {name!r} in {FLEET_NAME}; runs: {', '.join(r.name for r in self.runs)}")

    def role(self, role: Literal["baseline", "candidate"]) -> FleetRunInfo:
        for r in self.runs:
            if r.role == role:
                return r
        raise KeyError(f"{FLEET_NAME} has no {role} run (it is not a regression pair)")

    def open_run(self, name: str) -> EvidenceBundle:
        """The run's own evidence bundle (``runs/<name>``)."""
        if self._root is None:
            raise BundleError("this fleet was not read from a bundle folder; use read_fleet(bundle)")
        info = self.run(name)
        return EvidenceBundle.open(self._root / info.bundle)


def read_fleet(bundle: EvidenceBundle) -> Fleet | None:
    """The fleet of a regression or fleet bundle; None for one job's bundle (no fleet.json).

    Raises :class:`BundleError` naming the file and the field for a fleet.json that is not valid JSON, does
    not fit the schema, or names a run whose folder is missing.
    """
    path = bundle.root / FLEET_NAME
    if not path.is_file():
        return None
    try:
        fleet = Fleet.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(x) for x in first["loc"]) or "<file>"
        raise BundleError(f"{path}: {field}: {first['msg']} ({exc.error_count()} problem(s))") from exc
    except ValueError as exc:
        raise BundleError(f"{path}: not valid JSON: {exc}") from exc
    for i, r in enumerate(fleet.runs):
        if not (bundle.root / r.bundle / MANIFEST_NAME).is_file():
            raise BundleError(f"{path}: runs[{i}].bundle: {r.bundle} holds no {MANIFEST_NAME}")
    fleet._root = bundle.root
    return fleet


def start_times(orders: list[int]) -> list[datetime]:
    """The start time fleet.json gives each run from its start order: the runs in order, ``RUN_SPACING`` apart
    from :data:`FLEET_EPOCH`, whatever moment each member bundle was recorded or taken from the cache."""
    rank = {o: i for i, o in enumerate(sorted(orders))}
    return [FLEET_EPOCH + rank[o] * RUN_SPACING for o in orders]


def describe_fleet_files(root: Path) -> list[BundleFile]:
    """Every file under ``root`` except its own top-level manifest (the runs' manifests included): a fleet bundle's
    ``files`` (``describe_files`` leaves every ``bundle.json`` out, the runs' too)."""
    return [BundleFile(path=p.relative_to(root).as_posix(), sha256=sha256_file(p), size=p.stat().st_size)
            for p in sorted(root.rglob("*")) if p.is_file() and p.relative_to(root).as_posix() != MANIFEST_NAME]


def write_fleet(dest: Path, runs: list[FleetRunInfo], members: dict[str, Path], env: BundleEnv | None = None) -> BundleManifest:
    """Assemble a fleet bundle at ``dest`` (an empty or absent folder): each run's member bundle copied to
    ``runs/<name>``, ``fleet.json``, then ``bundle.json`` listing every file with its sha256. ``env`` defaults
    to the first run's. Returns the manifest; the caller renames the folder into place."""
    fleet = Fleet(runs=runs)  # validates names, metadata and roles before anything is copied
    missing = [r.name for r in runs if r.name not in members]
    if missing:
        raise BundleError(f"no member bundle for run(s) {', '.join(missing)}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    first_env = None
    for r in runs:
        source = Path(members[r.name])
        member = EvidenceBundle.open(source)
        first_env = first_env or member.env
        shutil.copytree(source, dest / r.bundle)
    payload = json.loads(fleet.model_dump_json())
    atomic_write_text(dest / FLEET_NAME, json.dumps(payload, indent=2) + "\n")
    manifest = BundleManifest(bundle_id=uuid.uuid4().hex, created=datetime.now(timezone.utc), env=env or first_env,
                              files=describe_fleet_files(dest))
    atomic_write_text(dest / MANIFEST_NAME, manifest.model_dump_json(indent=2) + "\n")
    return manifest
