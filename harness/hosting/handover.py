"""The harness's own list of built-in diagnosers with a role: which are baselines, which may see what.

A diagnoser never gets labels, or a place on the board as a reference, because it says so: an attribute
``reference = True`` on a third party's class means nothing. The harness decides from this table, by
the spec's entry point **metadata** (never by importing anything): a spec gets a built-in's role only
when it names exactly one entry point, registered by the ``diageval`` distribution itself, pointing at
the object the table names. A plugin that registers ``oracle`` too makes the name ambiguous (refused by
the registry), and ``package.module:OracleDiagnoser`` as an import string gets no role.

What each is handed, once, before its first diagnosis (inside its sandbox):

* ``corpus`` (``prior``, ``oracle``): the labeled case set and this run's map of (random) bundle id to
  case id, a :class:`~diageval.hosting.corpus.ReferenceCorpus`;
* ``vocabulary`` (``leak``): public words only, a :class:`~diageval.hosting.corpus.PublicVocabulary`
  (taxonomy ids, registered fault names and their parameter names, and the causes each fault injects);
  no case id and no label. ``leak`` must score exactly like ``null``: anything it finds, a bundle leaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Literal

Handover = Literal["corpus", "vocabulary"]
BUILTIN_DISTRIBUTION = "diageval"


@dataclass(frozen=True)
class BuiltinRole:
    target: str  # the entry point's value, exactly
    reference: bool = True
    self_test: bool = False
    handover: Handover | None = None


BUILTIN_ROLES: dict[str, BuiltinRole] = {
    "null": BuiltinRole("diageval.diagnosers.reference:NullDiagnoser"),
    "prior": BuiltinRole("diageval.diagnosers.reference:PriorDiagnoser", handover="corpus"),
    "oracle": BuiltinRole("diageval.diagnosers.reference:OracleDiagnoser", self_test=True, handover="corpus"),
    "leak": BuiltinRole("diageval.diagnosers.reference:LeakDiagnoser", handover="vocabulary"),
    "symptoms": BuiltinRole("diageval.diagnosers.symptoms:SymptomsDiagnoser"),
}

NO_ROLE = BuiltinRole(target="", reference=False)


def builtin_role(spec: str, entry_points: Sequence[EntryPoint]) -> BuiltinRole:
    """The role of ``spec`` per :data:`BUILTIN_ROLES`, or :data:`NO_ROLE`. ``entry_points``: those
    registered under the name ``spec`` (metadata only; nothing is loaded)."""
    role = BUILTIN_ROLES.get(spec.strip())
    if role is None:
        return NO_ROLE
    eps = list(entry_points)
    if len(eps) != 1:
        return NO_ROLE
    dist = getattr(eps[0], "dist", None)
    if dist is None or dist.name != BUILTIN_DISTRIBUTION or eps[0].value.replace(" ", "") != role.target:
        return NO_ROLE
    return role
