"""The one protocol every diagnoser implements, and the errors an adapter may raise.

A diagnoser is a class with ``name``, ``version`` and ``diagnose(bundle) -> Diagnosis``. It is
constructed with no arguments and sees only the evidence bundle, never the case or its labels.

Which diagnosers are reference baselines (``null``, ``prior``, ``oracle``, ``leak``, ``symptoms``), which
one is a self-test kept off the ranking (``oracle``), and which receive anything through ``prepare``
(``prior`` and ``oracle`` the labeled corpus, ``leak`` public words) is the harness's own table
(``diageval.run.handover``), never an attribute a diagnoser sets.
"""

from __future__ import annotations

from importlib import metadata
from typing import ClassVar, Protocol, runtime_checkable

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosis import Diagnosis


@runtime_checkable
class Diagnoser(Protocol):
    name: ClassVar[str]
    version: ClassVar[str]

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis: ...


class DiagnoserUnavailable(Exception):
    """Raised at construction when a diagnoser cannot run here (an optional dependency is missing)."""


class DiagnoserFailed(Exception):
    """Raised by an adapter when the analyser it wraps failed on this bundle.

    The case ends ``diagnoser_error`` (the set of statuses is closed), with ``"<status>: <message>"`` (e.g.
    ``hta_error: ...``) as its error text; it is the diagnoser's failure, counted as misses, never a crash
    of the run.
    """

    def __init__(self, status: str, message: str):
        self.status = status
        super().__init__(message)


def installed_version(distribution: str) -> str:
    """The installed version of an adapter's outside package, or ``missing`` (its diagnoser's version
    string carries it, so a run records which release of the tool was judged)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "missing"
