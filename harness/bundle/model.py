"""Evidence bundles: the folder a diagnoser reads, and its ``bundle.json`` manifest.

Layout (see the design)::

    bundle.json            schema_version, opaque bundle_id, created, env, files with sha256 and size
    rank<N>/trace.json.gz  torch.profiler (Kineto) Chrome trace of a window of steps, one per rank
    steps.jsonl            one line per rank per step: rank, step, t_start, t_end (seconds, epoch)
    metrics.jsonl          periodic host/device samples
    logs/rank<N>.log       what the training script printed

A bundle holds no case id, label, fault name or fault parameter anywhere (guarded by tests).
Bundles imported from a user's own traces (``diageval bundle import``) may lack steps, metrics and logs;
readers treat every file but ``bundle.json`` as optional.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from diageval.errors import DiagevalError
from diageval.fileio import read_jsonl, sha256_file

BUNDLE_SCHEMA_VERSION = 1
# No job has this many ranks; a bundle.json or trace claiming more is damaged or hostile, and every reader
# that loops over ranks (missing-rank checks) stays bounded by it.
WORLD_SIZE_LIMIT = 1 << 24
MANIFEST_NAME = "bundle.json"
_RANK_DIR = re.compile(r"^rank(\d+)$")


class BundleEnv(BaseModel):
    model_config = ConfigDict(extra="allow")

    torch: str | None = None
    python: str | None = None
    device: str = Field(description="cpu or cuda")
    gpu_name: str | None = None
    world_size: int = Field(ge=1, le=WORLD_SIZE_LIMIT, description="Ranks of the job (readers loop over them: bounded)")
    host: str | None = None
    backend: str | None = Field(None, description="torch.distributed backend: gloo, nccl or null")


class BundleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Relative to the bundle folder, '/'-separated")
    sha256: str
    size: int = Field(ge=0)


class BundleManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = BUNDLE_SCHEMA_VERSION
    bundle_id: str = Field(description="Opaque; says nothing about the case")
    created: datetime
    env: BundleEnv
    files: list[BundleFile] = Field(default_factory=list)
    origin: str = Field("recorded", description="'recorded' by diageval or 'imported' from existing traces")


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    rank: int
    step: int
    t_start: float
    t_end: float

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


class BundleError(DiagevalError):
    """A bundle folder that cannot be read (missing or invalid bundle.json, bad checksums)."""


class EvidenceBundle:
    """Read access to one bundle folder. Cheap to construct: files are opened only when asked for."""

    def __init__(self, root: Path, manifest: BundleManifest):
        self.root = Path(root)
        self.manifest = manifest

    @classmethod
    def open(cls, root: Path) -> "EvidenceBundle":
        root = Path(root)
        path = root / MANIFEST_NAME
        if not path.is_file():
            raise BundleError(f"{root}: not an evidence bundle (no {MANIFEST_NAME})")
        try:
            manifest = BundleManifest.model_validate_json(path.read_bytes())
        except ValueError as exc:
            raise BundleError(f"{path}: invalid bundle manifest: {exc}") from exc
        return cls(root, manifest)

    @property
    def bundle_id(self) -> str:
        return self.manifest.bundle_id

    @property
    def env(self) -> BundleEnv:
        return self.manifest.env

    @property
    def world_size(self) -> int:
        return self.manifest.env.world_size

    def trace_paths(self) -> dict[int, Path]:
        """Rank -> trace file, for the ranks whose trace is present (a missing rank is simply absent)."""
        return rank_trace_files(self.root)

    def open_trace(self, rank: int) -> IO[bytes]:
        path = self.trace_paths()[rank]
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")

    def load_trace(self, rank: int) -> dict[str, Any]:
        with self.open_trace(rank) as fh:
            return json.load(fh)

    def steps(self) -> list[StepRecord]:
        path = self.root / "steps.jsonl"
        if not path.is_file():
            return []
        return [StepRecord.model_validate(row) for row in read_jsonl(path)]

    def metrics(self) -> list[dict[str, Any]]:
        path = self.root / "metrics.jsonl"
        return list(read_jsonl(path)) if path.is_file() else []

    def log_paths(self) -> dict[int, Path]:
        logs = self.root / "logs"
        out: dict[int, Path] = {}
        if logs.is_dir():
            for f in logs.glob("rank*.log"):
                m = re.match(r"^rank(\d+)\.log$", f.name)
                if m:
                    out[int(m.group(1))] = f
        return dict(sorted(out.items()))

    def iter_files(self) -> Iterator[Path]:
        """Every file in the bundle folder, manifest included."""
        yield from sorted(p for p in self.root.rglob("*") if p.is_file())

    def verify_checksums(self) -> list[str]:
        """Problems with the files listed in bundle.json (missing, wrong size or hash); empty = intact."""
        problems = []
        for f in self.manifest.files:
            p = self.root / f.path
            if not p.is_file():
                problems.append(f"{f.path}: missing")
            elif p.stat().st_size != f.size or sha256_file(p) != f.sha256:
                problems.append(f"{f.path}: size or sha256 differs from bundle.json")
        return problems


def describe_files(root: Path) -> list[BundleFile]:
    """BundleFile entries for every file under ``root`` except the manifest itself."""
    root = Path(root)
    return [
        BundleFile(path=p.relative_to(root).as_posix(), sha256=sha256_file(p), size=p.stat().st_size)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MANIFEST_NAME
    ]


def rank_trace_files(bundle_dir: Path) -> dict[int, Path]:
    """Rank -> its trace file (``rank<N>/trace.json.gz`` or ``trace.json``) in a bundle folder, by rank, for
    the ranks that have one; also for a folder whose ``bundle.json`` is not written yet (evidence edits)."""
    out: dict[int, Path] = {}
    for d in Path(bundle_dir).iterdir():
        m = _RANK_DIR.match(d.name)
        if m and d.is_dir():
            for name in ("trace.json.gz", "trace.json"):
                if (d / name).is_file():
                    out[int(m.group(1))] = d / name
                    break
    return dict(sorted(out.items()))
