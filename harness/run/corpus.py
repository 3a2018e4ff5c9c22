"""The corpus view handed to reference diagnosers through ``prepare(corpus)``.

Decided here (the design says only that reference diagnosers get "the corpus"):

* the view is plain data, a pydantic model, so the harness can send it as JSON to the worker process
  that hosts the diagnoser;
* it holds the whole case set (not only the cases selected for a run), so that ``prior`` claims the same
  thing whether a run covers one case or all of them, and a resumed run stays consistent;
* ``bundle_cases`` maps the opaque ``bundle_id`` of every bundle the harness prepared for this run to its
  case id: the only way ``oracle`` can tell which case a bundle belongs to;
* ``fault_names`` are the registered fault injectors plus any fault a case names, for ``leak`` to grep.

The harness builds it only for diagnosers marked ``reference``; no other diagnoser ever receives it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from diageval.cases.model import Case
from diageval.cases.taxonomy import Taxonomy

if TYPE_CHECKING:
    from diageval.cases.load import CaseSet


class ReferenceCorpus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: list[Case]
    taxonomy: Taxonomy
    bundle_cases: dict[str, str] = Field(default_factory=dict, description="bundle_id -> case id, for this run's bundles")
    fault_names: list[str] = Field(default_factory=list)

    @classmethod
    def from_case_set(cls, case_set: "CaseSet", bundle_cases: dict[str, str] | None = None) -> "ReferenceCorpus":
        from diageval.recording.faults import FAULTS

        cases = [lc.case for lc in case_set.cases]
        faults = set(FAULTS) | {f.name for c in cases for f in c.faults}
        return cls(cases=cases, taxonomy=case_set.taxonomy, bundle_cases=dict(bundle_cases or {}), fault_names=sorted(faults))

    def case(self, case_id: str) -> Case | None:
        for c in self.cases:
            if c.id == case_id:
                return c
        return None
