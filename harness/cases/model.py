"""Labeled cases (``cases/<area>/<name>.yaml``): the strict pydantic model of one case file.

A case is plain data (``yaml.safe_load``, no includes, no code). This model checks shapes and what a single
file can know by itself (unknown fields, kebab-case ids, label kinds by prefix, step ranges inside the
workload); :mod:`diageval.cases.load` checks the rest against the taxonomy and the plugin registries.

Conventions decided here (the design is silent):
* step ranges are half-open ``[start, stop)`` like Python's ``range``: ``steps: [10, 40]`` on a 40-step
  workload means steps 10..39;
* a case with ``expect: healthy`` or ``expect: abstain`` labels no cause; it may still have faults
  (a confounder is a benign anomaly injected into a healthy run; an abstain case removes evidence);
* ``manifest`` is required for ``expect: diagnose`` (a positive case counts only if its injection is
  measurably there) and forbidden otherwise.
* A case's evidence is either injected (``workload`` + ``faults``: recorded live here, verified against
  its healthy twin) or recorded (``recorded``: a real job's traces, named by data-folder path and
  sha256 with their provenance, labeled from measurements written in the case). Exactly one of
  ``workload`` and ``recorded``. A recorded case has no faults and no manifest (nothing was injected);
  its ``recorded.measured`` figures are what ``diageval trace stats`` prints for its files (a test
  re-derives them); its ``faults`` may only be evidence edits (a derived case: part of the real traces
  removed, e.g. their device events, applied to the imported bundle), and ``recorded.rationale`` says how they lead to the labels. The trace files are
  never in the repository: the harness finds them under the data folder (``paths.real_traces_dir``).
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diageval.cases.taxonomy import TAXONOMY_ID_PATTERN
from diageval.fileio import sha256_text

CASE_ID_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"

ManifestMetric = Literal[
    "step_time_median",
    "step_time_mean",
    "step_time_p90",
    "rank_step_time_median",  # the median step time of one rank (``manifest.rank``), others ignored
]


class _Strict(BaseModel):
    """Unknown fields refused, and strict types: YAML's ``true`` is not the integer 1 and ``"30"`` is not the
    number 30 (a lax model would accept both, so a typo could still validate). An integer is accepted where
    a float is expected. Step ranges are written as YAML lists, so those fields accept a list for their
    tuple (``Field(strict=False)``); their items stay strict."""

    model_config = ConfigDict(extra="forbid", strict=True)


class WorkloadSpec(_Strict):
    name: str = Field(description="A registered workload (harness/recording/workloads/__init__.py)")
    world_size: int = Field(1, ge=1, le=64, description="Number of ranks")
    steps: int = Field(ge=2, le=10_000, description="Training steps to run")
    params: dict[str, Any] = Field(default_factory=dict, description="Workload parameters")


class FaultSpec(_Strict):
    name: str = Field(description="A registered fault injector")
    params: dict[str, Any] = Field(default_factory=dict, description="Injector parameters")


class CauseLabel(_Strict):
    category: str = Field(pattern=TAXONOMY_ID_PATTERN, description="A cause id of the taxonomy")
    ranks: list[int] | None = Field(None, description="Ranks where the cause sits; null = all or not rank-specific")
    steps: tuple[int, int] | None = Field(None, strict=False, description="Half-open step range [start, stop)")

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v: list[int] | None) -> list[int] | None:
        if v is not None:
            if not v:
                raise ValueError("an empty list; leave ranks out to mean 'all ranks'")
            if any(r < 0 for r in v):
                raise ValueError("ranks are >= 0")
            if len(set(v)) != len(v):
                raise ValueError("ranks repeat")
        return v

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and not (0 <= v[0] < v[1]):
            raise ValueError("expected [start, stop) with 0 <= start < stop")
        return v


class Labels(_Strict):
    causes: list[CauseLabel] = Field(default_factory=list)
    symptoms: list[str] = Field(default_factory=list, description="Symptom ids the cause produces")
    expect: Literal["diagnose", "healthy", "abstain"]

    @model_validator(mode="after")
    def _expect_matches_causes(self) -> "Labels":
        if self.expect == "diagnose" and not self.causes:
            raise ValueError("causes: a case with expect: diagnose needs at least one labeled cause")
        if self.expect != "diagnose" and self.causes:
            raise ValueError(f"causes: a case with expect: {self.expect} labels no cause; remove them or use expect: diagnose")
        return self


class ManifestationCheck(_Strict):
    metric: ManifestMetric
    min_ratio: float = Field(gt=1.0, description="Injected / healthy-twin metric must reach this")
    rank: int | None = Field(None, ge=0, description="Only for rank_step_time_median")

    @model_validator(mode="after")
    def _rank_only_for_rank_metric(self) -> "ManifestationCheck":
        if self.metric == "rank_step_time_median" and self.rank is None:
            raise ValueError("rank_step_time_median needs a rank")
        if self.metric != "rank_step_time_median" and self.rank is not None:
            raise ValueError("rank is only for rank_step_time_median")
        return self


class TraceSource(_Strict):
    """Where a recorded trace file comes from."""

    repository: str = Field(min_length=1, description="Public repository (owner/name) the file was copied from")
    commit: str = Field(pattern=r"^[0-9a-f]{7,40}$", description="Commit of that repository")
    path: str = Field(min_length=1, description="Path of the file in that repository")
    licence: str = Field(min_length=1, description="The file's licence (SPDX id)")


class RecordedFile(_Strict):
    path: str = Field(min_length=1, description="Relative to the data folder (--data / $DIAGEVAL_DATA)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    rank: int = Field(ge=0, description="The rank this trace belongs to")
    source: TraceSource

    @field_validator("path")
    @classmethod
    def _inside_data_folder(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"expected a path relative to the data folder, without '..', got {v!r}")
        return v


class MeasuredFile(_Strict):
    file: str = Field(description="One of recorded.files[].path")
    figures: dict[str, str] = Field(min_length=1, description="`diageval trace stats` line name -> the value it prints")


class Measured(_Strict):
    command: str = Field(min_length=1, description="The one command a reviewer runs to re-derive the figures")
    figures: list[MeasuredFile] = Field(min_length=1)


DEVICE_MAKERS: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu only",),
    "nvidia": ("nvidia", "tesla", "quadro", "geforce", "a100", "h100", "b200"),
    "amd": ("amd", "instinct", "mi300", "mi250"),
    "mtia": ("mtia",),
}
"""Device families by words of a recorded case's ``hardware``, in order (the first that matches)."""


class RecordedEvidence(_Strict):
    """A real job's traces as a case's evidence, with their provenance and the measurements behind the labels."""

    job: str = Field(min_length=1, description="What the job was")
    hardware: str = Field(min_length=1)
    framework: str = Field(min_length=1, description="Framework and versions, as far as the traces say")
    world_size: int = Field(ge=1, le=1_000_000, description="Ranks in the job (may exceed the traces present)")
    files: list[RecordedFile] = Field(min_length=1)
    measured: Measured
    rationale: str = Field(min_length=1, description="How the measured figures lead to the labels")

    @model_validator(mode="after")
    def _consistent(self) -> "RecordedEvidence":
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("files: a path is listed twice")
        ranks = [f.rank for f in self.files]
        if len(set(ranks)) != len(ranks):
            raise ValueError("files: two files claim the same rank")
        for i, f in enumerate(self.files):
            if f.rank >= self.world_size:
                raise ValueError(f"files[{i}].rank: {f.rank} is out of range for world_size {self.world_size}")
        for i, m in enumerate(self.measured.figures):
            if m.file not in paths:
                raise ValueError(f"measured.figures[{i}].file: {m.file!r} is not one of files[].path")
        return self


class Requires(_Strict):
    device: Literal["any", "cuda"] = "any"
    min_devices: int = Field(1, ge=1, description="CUDA devices needed when device is cuda")


class Case(_Strict):
    id: str = Field(pattern=CASE_ID_PATTERN, description="Unique, kebab-case; never shown to a diagnoser")
    title: str = Field(min_length=1)
    workload: WorkloadSpec | None = Field(None, description="Injected evidence: the workload recorded here")
    recorded: RecordedEvidence | None = Field(None, description="Recorded evidence: a real job's traces")
    faults: list[FaultSpec] = Field(default_factory=list, description="Empty = healthy control")
    labels: Labels
    manifest: ManifestationCheck | None = None
    requires: Requires = Field(default_factory=Requires)
    tags: list[str] = Field(default_factory=list)
    split: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                              description="The part of the corpus this case belongs to (e.g. public, or a private "
                                          "corpus' own name): `diageval report` shows each diagnoser's skill per "
                                          "split and the gap between splits; never shown to a diagnoser")

    @model_validator(mode="before")
    @classmethod
    def _difficulty_is_measured(cls, data: Any) -> Any:
        if isinstance(data, dict) and "difficulty" in data:
            raise ValueError(
                "difficulty: not a case field any more: a case's difficulty is measured (its injection's effect over "
                "its healthy twin's noise, `diageval verify`), not declared; remove this line"
            )
        return data

    @model_validator(mode="after")
    def _internal(self) -> "Case":
        if (self.workload is None) == (self.recorded is None):
            raise ValueError("workload: a case has exactly one of workload (injected evidence) and recorded (a real job's traces)")
        if self.recorded is not None:
            # faults: a recorded case injects nothing; it may list evidence edits (bundle faults: part of a
            # real trace removed, e.g. its device events), which the loader checks are edits and nothing else
            if self.manifest is not None:
                raise ValueError("manifest: a recorded case has no injection to check; its labels rest on recorded.measured")
            return self
        steps = self.workload.steps
        for i, c in enumerate(self.labels.causes):
            if c.steps is not None and c.steps[1] > steps:
                raise ValueError(f"labels.causes[{i}].steps: stop {c.steps[1]} is past the workload's {steps} steps")
        if self.labels.expect == "diagnose" and self.manifest is None:
            raise ValueError("manifest: required for expect: diagnose (how to tell the injection manifested)")
        if self.labels.expect != "diagnose" and self.manifest is not None:
            raise ValueError("manifest: only positive cases (expect: diagnose) have one")
        if self.labels.expect == "diagnose" and not self.faults:
            raise ValueError("faults: a positive case injects at least one fault")
        return self

    @property
    def evidence_kind(self) -> Literal["injected", "recorded"]:
        return "recorded" if self.recorded is not None else "injected"

    @property
    def device_family(self) -> str:
        """The kind of device the evidence comes from, for the board's per-device view (issue 23): a recorded
        case's by its hardware's maker (:data:`DEVICE_MAKERS`; ``unknown`` where the traces name none), an
        injected one by the device it is recorded on here (``cpu``, or ``nvidia`` for CUDA cases)."""
        if self.recorded is None:
            return "nvidia" if self.requires.device == "cuda" else "cpu"
        hardware = self.recorded.hardware.lower()
        for family, marks in DEVICE_MAKERS.items():
            if any(m in hardware for m in marks):
                return family
        return "unknown"

    @property
    def world_size(self) -> int:
        return self.recorded.world_size if self.recorded is not None else self.workload.world_size

    def healthy_twin(self) -> "Case":
        """The same case with its faults removed: the baseline for the manifestation check."""
        if self.recorded is not None:
            raise ValueError(f"case {self.id}: a recorded case has no healthy twin")
        return self.model_copy(update={"faults": []})

    def spec_hash(self) -> str:
        """Hash of everything that shapes a recording or an import (not title, tags or labels)."""
        if self.recorded is not None:
            payload = {"recorded": [(f.rank, f.sha256) for f in sorted(self.recorded.files, key=lambda f: f.rank)]}
            if self.faults:  # evidence edits of the real traces
                payload["faults"] = [f.model_dump() for f in self.faults]
            return sha256_text(yaml.safe_dump(payload, sort_keys=True))
        payload = {"workload": self.workload.model_dump(), "faults": [f.model_dump() for f in self.faults]}
        return sha256_text(yaml.safe_dump(payload, sort_keys=True))
