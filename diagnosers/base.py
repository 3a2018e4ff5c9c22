"""The one protocol every diagnoser implements, and the errors an adapter may raise.

A diagnoser is a class with ``name``, ``version`` and ``diagnose(bundle) -> Diagnosis``. It is
constructed with no arguments and sees only the evidence bundle, never the case or its labels.

Which diagnosers are reference baselines (``null``, ``prior``, ``oracle``, ``leak``, ``symptoms``), which
one is a self-test kept off the ranking (``oracle``), and which receive anything through ``prepare``
(``prior`` and ``oracle`` the labeled corpus, ``leak`` public words) is the harness's own table
(``diageval.hosting.handover``), never an attribute a diagnoser sets.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType
from typing import ClassVar, Protocol, runtime_checkable

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosis import Diagnosis


@runtime_checkable
class Diagnoser(Protocol):
    """What ``--diagnoser`` loads: a class constructed with no arguments.

    Required: ``name``, ``version``, ``diagnose``. Optional, read by the harness with these defaults when a
    class does not define them (:data:`OPTIONAL_MEMBERS`): ``claims``, ``needs_network``, ``prepare``.
    """

    name: ClassVar[str]
    """The diagnoser's display name (the board's row); ``cmd:`` diagnosers get ``cmd-<program>``."""

    version: ClassVar[str]
    """Its version: a run refuses to resume with another, so results of two versions never mix."""

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        """Findings about one bundle (or an abstention). Raise :class:`DiagnoserFailed` when the tool it
        wraps failed on this bundle; anything else it raises is the case's ``diagnoser_error``."""
        ...


class DiagnoserExtras(Protocol):
    """The optional members of a diagnoser, each read by the harness only where it says (never ``reference``
    or ``self_test``: those are the harness's own table, ``diageval.hosting.handover``)."""

    claims: ClassVar[tuple[str, ...] | None]
    """The taxonomy ids of the causes it can ever claim (``diageval diagnosers list``, run.json, and the
    board's recall on its own field). Default None: it may claim any cause."""

    needs_network: ClassVar[bool]
    """True for a diagnoser that calls a service (a model endpoint): a run refuses it unless
    ``--allow-network``. Default False."""

    def prepare(self, handover: object) -> None:
        """Called once, before the first diagnosis, only for the built-ins the harness's table names:
        ``prior`` and ``oracle`` get the labeled corpus, ``leak`` the public vocabulary. Never called on
        any other diagnoser, whatever it declares."""
        ...


TRAJECTORY_NAME = "trajectory.json"
"""A diagnoser's own account of its work on a case (an agent's turns, tokens, dollars and tool calls), written in its
working folder; the harness keeps it beside the case's diagnosis. Its format: ``diageval.diagnosers.agent_record``."""

OPTIONAL_MEMBERS: dict[str, object] = {"claims": None, "needs_network": False}  # the defaults the harness reads


class DiagnoserUnavailable(Exception):
    """Raised at construction when a diagnoser cannot run here (an optional dependency is missing)."""


class DiagnoserFailed(Exception):
    """Raised by an adapter when the analyser it wraps failed on this bundle.

    The case ends ``diagnoser_error`` (the set of statuses is closed: ``invalid_output`` for an answer that is
    no diagnosis, ``cap_hit`` for an agent stopped by a cap on its turns, tokens, dollars or time, and
    ``diagnoser_error`` for anything else), with ``"<status>: <message>"`` (e.g.
    ``hta_error: ...``) as its error text; it is the diagnoser's failure, counted as misses, never a crash
    of the run.
    """

    def __init__(self, status: str, message: str):
        self.status = status
        super().__init__(message)


def require_module(module: str, diagnoser: str, package: str, install_hint: str) -> ModuleType:
    """Import the outside package an adapter wraps, at its construction: where ``module`` cannot be imported the
    ``diagnoser`` is unavailable here (``DiagnoserUnavailable``), and the message says which ``package`` it needs
    and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DiagnoserUnavailable(f"the {diagnoser} diagnoser needs {package} ({exc}); install it with: {install_hint}") from exc


def installed_version(distribution: str) -> str:
    """The installed version of an adapter's outside package, or ``missing`` (its diagnoser's version
    string carries it, so a run records which release of the tool was judged)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "missing"
