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
    model_config = ConfigDict(extra="forbid")


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
    steps: tuple[int, int] | None = Field(None, description="Half-open step range [start, stop)")

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


class Requires(_Strict):
    device: Literal["any", "cuda"] = "any"
    min_devices: int = Field(1, ge=1, description="CUDA devices needed when device is cuda")


class Case(_Strict):
    id: str = Field(pattern=CASE_ID_PATTERN, description="Unique, kebab-case; never shown to a diagnoser")
    title: str = Field(min_length=1)
    workload: WorkloadSpec
    faults: list[FaultSpec] = Field(default_factory=list, description="Empty = healthy control")
    labels: Labels
    manifest: ManifestationCheck | None = None
    requires: Requires = Field(default_factory=Requires)
    tags: list[str] = Field(default_factory=list)
    difficulty: Literal["easy", "medium", "hard"] = "medium"

    @model_validator(mode="after")
    def _internal(self) -> "Case":
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

    def healthy_twin(self) -> "Case":
        """The same case with its faults removed: the baseline for the manifestation check."""
        return self.model_copy(update={"faults": []})

    def spec_hash(self) -> str:
        """Hash of everything that shapes a recording (not title, tags or labels)."""
        payload = {"workload": self.workload.model_dump(), "faults": [f.model_dump() for f in self.faults]}
        return sha256_text(yaml.safe_dump(payload, sort_keys=True))
