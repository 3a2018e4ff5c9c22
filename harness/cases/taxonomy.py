"""The versioned taxonomy of causes and symptoms (``cases/taxonomy.yaml``)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diageval.paths import default_taxonomy_path

TAXONOMY_ID_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"


class TaxonomyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=TAXONOMY_ID_PATTERN, description="Dotted id, e.g. comm.collective_stall")
    kind: Literal["cause", "symptom"]
    definition: str = Field(min_length=1, description="One line: what it means")
    evidence: str = Field(min_length=1, description="What in the evidence distinguishes it")
    symptoms: list[str] = Field(default_factory=list, description="For a cause: symptoms it usually produces")


class Taxonomy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    entries: list[TaxonomyEntry]

    @model_validator(mode="after")
    def _consistent(self) -> "Taxonomy":
        seen: set[str] = set()
        for e in self.entries:
            if e.id in seen:
                raise ValueError(f"duplicate taxonomy id {e.id!r}")
            seen.add(e.id)
        for e in self.entries:
            if e.kind == "symptom" and e.symptoms:
                raise ValueError(f"{e.id}: only causes list symptoms")
            if e.kind == "symptom" and not e.id.startswith("symptom."):
                raise ValueError(f"{e.id}: symptom ids live under 'symptom.'")
            if e.kind == "cause" and e.id.startswith("symptom."):
                raise ValueError(f"{e.id}: ids under 'symptom.' must have kind symptom")
            for s in e.symptoms:
                if s not in seen:
                    raise ValueError(f"{e.id}: lists unknown symptom {s!r}")
        return self

    @cached_property
    def by_id(self) -> dict[str, TaxonomyEntry]:
        return {e.id: e for e in self.entries}

    def get(self, category: str) -> TaxonomyEntry | None:
        return self.by_id.get(category)

    def kind_of(self, category: str) -> Literal["cause", "symptom"] | None:
        entry = self.by_id.get(category)
        return entry.kind if entry else None

    @property
    def causes(self) -> list[str]:
        return [e.id for e in self.entries if e.kind == "cause"]

    @property
    def symptoms(self) -> list[str]:
        return [e.id for e in self.entries if e.kind == "symptom"]


def is_symptom_id(category: str) -> bool:
    return category.startswith("symptom.")


def load_taxonomy(path: Path | None = None) -> Taxonomy:
    from diageval.cases.strict_yaml import read_yaml

    path = Path(path) if path else default_taxonomy_path()
    return Taxonomy.model_validate(read_yaml(path))  # a YamlProblem names the file
