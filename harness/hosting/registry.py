"""Turn a ``--diagnoser`` spec into something the harness can run.

Three spec forms, tried in this order:

* ``cmd:COMMAND``  an external program (see :mod:`diageval.hosting.command`); ``{bundle}`` and
  ``{out}`` in COMMAND are replaced by the bundle folder and the file to write the diagnosis to;
* ``module:attr``  an import string naming a diagnoser class (or an already built instance); as with
  ``python -m``, modules in the current directory can be named;
* ``NAME``         an entry point in the group ``diageval.diagnosers``. Built-ins are registered there the
  same way third-party packages register theirs. Only the requested entry point is loaded, so a plugin
  whose optional dependency is missing never breaks resolution of the others.

Where it runs: :func:`resolve_diagnoser` and :func:`list_diagnosers` import diagnoser code, so the
harness calls them only inside a sandboxed worker (:mod:`diageval.hosting.host`,
:mod:`diageval.hosting.worker_process`); in its own process it uses only :func:`resolve_command` (a ``cmd:``
spec is plain text) and :func:`diagnoser_entry_points` (metadata, nothing loaded). Resolution loads the
class but does not construct it: construction may be costly or raise
:class:`~diageval.diagnosers.base.DiagnoserUnavailable`. :func:`list_diagnosers` does construct each
one, to report which ones can run here. ``reference`` and ``self_test`` come from the harness's own
table (:mod:`diageval.hosting.handover`), never from the diagnoser's attributes.

Decided here (the design is silent):

* a diagnoser's display ``name`` is its class attribute ``name`` (falling back to the entry-point name);
* ``origin`` is ``built-in`` for entry points shipped by diageval itself, ``plugin <dist> <version>`` for
  other packages, ``import <module>`` for import strings and ``command`` for ``cmd:`` specs;
* ``claims`` is the diagnoser's class attribute ``claims`` (the taxonomy ids of the causes it can ever
  claim), ``None`` when it does not declare one (it may claim anything); ``needs_network`` its class
  attribute of that name (default False): such a diagnoser talks to a service and runs only when the
  run allows network access;
* a ``cmd:`` diagnoser's name is ``cmd-<program>`` and its version a hash of the full command, so that
  editing the command is a new version (a resumed run refuses to mix the two).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import PurePath
from typing import Any, Literal

from diageval.hosting.handover import builtin_role
from diageval.diagnosers.base import OPTIONAL_MEMBERS  # the protocol's defaults: metadata, no diagnoser is loaded
from diageval.hosting.errors import DiagnoserSpecError

ENTRY_POINT_GROUP = "diageval.diagnosers"
CMD_PREFIX = "cmd:"
_IMPORT_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")



@dataclass(frozen=True)
class ResolvedDiagnoser:
    """Everything the harness needs to know about a diagnoser before running it.

    ``factory`` builds a fresh diagnoser (in-process kinds) and may raise ``DiagnoserUnavailable``;
    for ``kind == "command"`` it builds a :class:`~diageval.hosting.command.CommandDiagnoser`.
    """

    name: str
    spec: str
    version: str
    origin: str
    reference: bool
    self_test: bool
    kind: Literal["in_process", "command"]
    factory: Callable[[], Any] = field(repr=False, compare=False)
    claims: tuple[str, ...] | None = None
    needs_network: bool = False


@dataclass(frozen=True)
class DiagnoserListing:
    """One row of ``diageval diagnosers list``."""

    name: str
    origin: str
    version: str | None = None
    reference: bool = False
    self_test: bool = False
    error: str | None = None
    claims: tuple[str, ...] | None = None
    needs_network: bool = False

    @property
    def available(self) -> bool:
        return self.error is None


def resolve_diagnoser(spec: str) -> ResolvedDiagnoser:
    """Resolve a ``--diagnoser`` spec; raise :class:`DiagnoserSpecError` with a hint when it names nothing."""
    spec = spec.strip()
    if not spec:
        raise DiagnoserSpecError("empty diagnoser spec; expected a name (see `diageval diagnosers list`), module:attr or cmd:COMMAND")
    if spec.startswith(CMD_PREFIX):
        return resolve_command(spec)
    if ":" in spec:
        return _resolve_import(spec)
    return _resolve_entry_point(spec)


def diagnoser_entry_points() -> dict[str, list[EntryPoint]]:
    """Entry-point name -> the entry points registered under it (normally one), without loading any."""
    out: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        out.setdefault(ep.name, []).append(ep)
    return dict(sorted(out.items()))


def list_diagnosers() -> list[DiagnoserListing]:
    """Every registered diagnoser, each loaded and constructed once to tell whether it can run here.

    A diagnoser that fails to import or raises at construction is listed with its error, never raised.
    """
    rows = []
    for name, eps in diagnoser_entry_points().items():
        origin = _origin(eps[0])
        if len(eps) > 1:
            rows.append(DiagnoserListing(name=name, origin=origin, error=_ambiguous_message(name, eps)))
            continue
        try:
            resolved = _from_object(eps[0].load(), spec=name, origin=origin, fallback_name=name)
        except Exception as exc:  # an import error in a plugin must not break the listing
            rows.append(DiagnoserListing(name=name, origin=origin, error=_one_line(exc)))
            continue
        error = None
        try:
            resolved.factory()
        except Exception as exc:
            error = _one_line(exc)
        rows.append(
            DiagnoserListing(
                name=name,
                origin=origin,
                version=resolved.version,
                reference=resolved.reference,
                self_test=resolved.self_test,
                error=error,
                claims=resolved.claims,
                needs_network=resolved.needs_network,
            )
        )
    return rows


# --- the three spec forms --------------------------------------------------------------------------


def resolve_command(spec: str) -> ResolvedDiagnoser:
    from diageval.hosting.command import CommandDiagnoser

    command = spec[len(CMD_PREFIX):].strip()
    if not command:
        raise DiagnoserSpecError("cmd: needs a command, e.g. cmd:'my-tool {bundle} --out {out}'")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise DiagnoserSpecError(f"cmd: cannot parse the command {command!r}: {exc}") from None
    program = PurePath(argv[0]).name if argv else "command"
    # python my_diagnoser.py -> my_diagnoser: the interpreter says nothing about the diagnoser.
    if re.fullmatch(r"python[\d.]*", program) and len(argv) > 1 and not argv[1].startswith("-"):
        program = PurePath(argv[1]).stem
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", program).strip("-.") or "command"
    return ResolvedDiagnoser(
        name=f"cmd-{safe}",
        spec=spec,
        version=hashlib.sha256(command.encode("utf-8")).hexdigest()[:12],
        origin="command",
        reference=False,
        self_test=False,
        kind="command",
        factory=lambda: CommandDiagnoser(command),
    )


def _resolve_import(spec: str) -> ResolvedDiagnoser:
    if not _IMPORT_SPEC.match(spec):
        raise DiagnoserSpecError(f"{spec!r}: not an import string; expected package.module:ClassName (or cmd:COMMAND for a program)")
    module_name, _, attr_path = spec.partition(":")
    _make_cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DiagnoserSpecError(f"{spec!r}: cannot import module {module_name!r}: {exc}") from exc
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            members = [m for m in dir(module) if not m.startswith("_")]
            close = difflib.get_close_matches(part, members, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise DiagnoserSpecError(f"{spec!r}: module {module_name!r} has no attribute {attr_path!r}{hint}") from None
    return _from_object(obj, spec=spec, origin=f"import {module_name}", fallback_name=attr_path.rsplit(".", 1)[-1])


def _resolve_entry_point(spec: str) -> ResolvedDiagnoser:
    registered = diagnoser_entry_points()
    eps = registered.get(spec)
    if not eps:
        close = difflib.get_close_matches(spec, list(registered), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        known = ", ".join(registered) or "none (is diageval installed? `pip install -e .`)"
        raise DiagnoserSpecError(
            f"unknown diagnoser {spec!r}.{hint} Registered: {known}. "
            "Other forms: package.module:ClassName, or cmd:COMMAND for an external program."
        )
    if len(eps) > 1:
        raise DiagnoserSpecError(_ambiguous_message(spec, eps))
    ep = eps[0]
    try:
        obj = ep.load()
    except Exception as exc:
        raise DiagnoserSpecError(f"diagnoser {spec!r} ({ep.value}) failed to load: {_one_line(exc)}") from exc
    return _from_object(obj, spec=spec, origin=_origin(ep), fallback_name=spec)


# --- helpers ----------------------------------------------------------------------------------------


def _from_object(obj: Any, *, spec: str, origin: str, fallback_name: str) -> ResolvedDiagnoser:
    """A diagnoser class (constructed with no arguments) or an instance, checked against the protocol."""
    if not callable(getattr(obj, "diagnose", None)):
        raise DiagnoserSpecError(f"{spec!r} resolves to {obj!r}, which is not a diagnoser (expected a class with name, version and diagnose(bundle))")
    if isinstance(obj, type):
        factory: Callable[[], Any] = obj
    else:
        instance = obj
        factory = lambda: instance  # noqa: E731 - an instance is its own factory
    name = getattr(obj, "name", None) or fallback_name
    version = getattr(obj, "version", None)
    if not isinstance(name, str) or not isinstance(version, str) or not version:
        raise DiagnoserSpecError(f"{spec!r}: a diagnoser needs string attributes name and version (got name={name!r}, version={version!r})")
    role = builtin_role(spec, diagnoser_entry_points().get(spec, []))  # the harness's own table, never the diagnoser's say
    return ResolvedDiagnoser(
        name=name,
        spec=spec,
        version=version,
        origin=origin,
        reference=role.reference,
        self_test=role.self_test,
        kind="in_process",
        factory=factory,
        claims=_claims(obj, spec),
        needs_network=bool(getattr(obj, "needs_network", OPTIONAL_MEMBERS["needs_network"])),
    )


def _claims(obj: Any, spec: str) -> tuple[str, ...] | None:
    claims = getattr(obj, "claims", OPTIONAL_MEMBERS["claims"])
    if claims is None:
        return None
    if isinstance(claims, str) or not all(isinstance(c, str) for c in claims):
        raise DiagnoserSpecError(f"{spec!r}: claims must be a tuple of taxonomy ids (got {claims!r})")
    return tuple(claims)


def _make_cwd_importable() -> None:
    """Like ``python -m`` (and uvicorn's app strings): a module in the current directory can be named.

    The ``diageval`` console script does not put the current directory on ``sys.path`` by itself.
    """
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "plugin (unknown package)"
    if dist.name == "diageval":
        return "built-in"
    return f"plugin {dist.name} {dist.version}"


def _ambiguous_message(name: str, eps: list[EntryPoint]) -> str:
    where = "; ".join(f"{_origin(ep)} -> {ep.value}" for ep in eps)
    return f"diagnoser {name!r} is registered more than once ({where}); use the import string instead"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
