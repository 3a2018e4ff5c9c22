"""What the harness hands to the few built-ins its own table names (:mod:`diageval.hosting.handover`).

* :class:`ReferenceCorpus` (the labels) to ``prior`` and ``oracle``;
* :class:`PublicVocabulary` (public words, no labels) to ``leak``.

Decided here (the design says only that reference diagnosers get "the corpus"):

* the view is plain data, a pydantic model, so the harness can send it as JSON to the worker process
  that hosts the diagnoser;
* it holds the whole case set (not only the cases selected for a run), so that ``prior`` claims the same
  thing whether a run covers one case or all of them, and a resumed run stays consistent;
* ``bundle_cases`` maps the opaque ``bundle_id`` of every bundle the harness prepared for this run to its
  case id: the only way ``oracle`` can tell which case a bundle belongs to;
* ``bundle_cases`` keys are the random ids of this run's private bundle copies, not the cached ids;
* ``bundle_values`` maps the same ids, for a regression or fleet bundle, to the factor value words it shows
  (``name=value`` -> the drawn word, issue 39): ``oracle`` names its labels' values in them.

No other diagnoser ever receives either, whatever it declares about itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from diageval.cases.model import Case
from diageval.cases.taxonomy import Taxonomy

if TYPE_CHECKING:
    from diageval.cases.load import CaseSet


class FaultWords(BaseModel):
    """A registered fault injector's public words: its name, its parameter names, the causes it injects."""

    model_config = ConfigDict(extra="forbid")

    name: str
    params: list[str]
    injects: list[str]


class PublicVocabulary(BaseModel):
    """What ``leak`` greps bundles for: public words only, no case id and no label. Each word points at
    the taxonomy ids it would reveal (a fault's name and parameter names at the causes it injects)."""

    model_config = ConfigDict(extra="forbid")

    taxonomy: Taxonomy
    faults: list[FaultWords]

    @classmethod
    def build(cls, taxonomy: Taxonomy) -> "PublicVocabulary":
        from diageval.recording import FAULTS

        faults = [FaultWords(name=name, params=sorted(info.params_model.model_fields), injects=list(info.injects))
                  for name, info in sorted(FAULTS.items())]
        return cls(taxonomy=taxonomy, faults=faults)


class ReferenceCorpus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: list[Case]
    taxonomy: Taxonomy
    bundle_cases: dict[str, str] = Field(default_factory=dict, description="bundle_id -> case id, for this run's bundles")
    bundle_values: dict[str, dict[str, str]] = Field(default_factory=dict, description="bundle_id -> the factor value "
                                                     "words a regression or fleet bundle shows ('name=value' -> word)")

    @classmethod
    def from_case_set(cls, case_set: "CaseSet", bundle_cases: dict[str, str] | None = None,
                      bundle_values: dict[str, dict[str, str]] | None = None) -> "ReferenceCorpus":
        cases = [lc.case for lc in case_set.cases]
        return cls(cases=cases, taxonomy=case_set.taxonomy, bundle_cases=dict(bundle_cases or {}),
                   bundle_values={k: dict(v) for k, v in (bundle_values or {}).items()})

    def case(self, case_id: str) -> Case | None:
        for c in self.cases:
            if c.id == case_id:
                return c
        return None
