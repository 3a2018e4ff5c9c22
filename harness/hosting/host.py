"""Hosting a diagnoser: from a ``--diagnoser`` spec and a :class:`~diageval.hosting.policy.HostPolicy` to
slots that run it in boxes. The face of :mod:`diageval.hosting` (``Host.open``).

The harness's side of the trust boundary, in one place:

* a ``cmd:`` spec is resolved here from its text alone (name and version; see the registry);
* any other spec (``module:attr``, an entry point) is resolved **inside** a sandboxed worker, which
  reports name, version and origin back: the harness never imports a diagnoser it did not write;
* the role (reference baseline, self-test) and the hand-over (labels for ``prior`` and ``oracle``, public
  words for ``leak``) come from the harness's own table (:mod:`diageval.hosting.handover`), never from the
  diagnoser, and :meth:`Host.handover` is the one place a hand-over is built;
* what the box shows besides the system and Python: :mod:`diageval.hosting.spec_paths`;
* no box, no diagnosis: without a sandbox :meth:`Host.open` raises ``SandboxUnavailable`` unless the
  policy turns the sandbox off (``--no-sandbox``).

The worker that answered the identification is kept and becomes the first slot, so the import is paid
once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from diageval.hosting.attempt import Slot
from diageval.hosting.box_policy import run_policy, run_roots
from diageval.hosting.errors import DiagnoserSpecError
from diageval.hosting.handover import BuiltinRole, builtin_role
from diageval.hosting.policy import HostPolicy
from diageval.hosting.process_groups import LiveGroups
from diageval.hosting.sandbox import Isolation, choose_isolation
from diageval.hosting.spec_paths import SpecPaths, spec_paths

if TYPE_CHECKING:
    from diageval.cases.load import CaseSet


class Host:
    """One diagnoser, resolved and ready to run in boxes under one policy. Use :meth:`open`, then
    :meth:`slot` (one per job) and :meth:`close` (or ``with``)."""

    def __init__(self, *, spec: str, name: str, version: str, origin: str, kind: Literal["in_process", "command"],
                 role: BuiltinRole, isolation: Isolation, paths: SpecPaths, policy: HostPolicy,
                 claims: list[str] | None = None, spare: Any = None):
        self.spec, self.name, self.version, self.origin, self.kind = spec, name, version, origin, kind
        self.role, self.isolation, self.paths, self.policy = role, isolation, paths, policy
        self.claims = claims  # the taxonomy ids of the causes it declares it can claim (run.json)
        self._spare = spare  # the identifying worker, handed to the first slot

    @classmethod
    def open(cls, spec: str, policy: HostPolicy) -> "Host":
        """Resolve ``spec`` (in a box unless it is ``cmd:``). Raises a ``HostError``: ``DiagnoserSpecError``,
        ``SpecPathError``, ``SandboxUnavailable`` or ``WorkerStartError``, with the reason."""
        from diageval.hosting.registry import CMD_PREFIX, diagnoser_entry_points, resolve_command

        spec = spec.strip()
        if not spec:
            raise DiagnoserSpecError("empty diagnoser spec; expected a name (see `diageval diagnosers list`), module:attr or cmd:COMMAND")
        roots = run_roots(runs_dir=policy.runs_dir, cases_dir=policy.cases_dir)
        paths = spec_paths(spec, roots)
        isolation = choose_isolation(run_policy(roots, policy, visible=paths.visible))
        role = builtin_role(spec, diagnoser_entry_points().get(spec, []))
        common = dict(spec=spec, role=role, isolation=isolation, paths=paths, policy=policy)
        if spec.startswith(CMD_PREFIX):
            r = resolve_command(spec)
            return cls(name=r.name, version=r.version, origin=r.origin, kind="command", **common)
        from diageval.hosting.worker import WorkerExecutor

        worker = WorkerExecutor(paths.spec, isolation=isolation, python_path=paths.python_path, policy=policy)
        identity = worker.describe()  # a diagnoser that needs the network is refused in the worker, before it is built
        return cls(name=identity["name"], version=identity["version"], origin=identity["origin"], kind="in_process",
                   claims=identity.get("claims"), spare=worker, **common)

    @property
    def reference(self) -> bool:
        return self.role.reference

    @property
    def self_test(self) -> bool:
        return self.role.self_test

    @property
    def sandboxed(self) -> bool:
        return self.isolation.kind != "none"

    def limits_note(self) -> str:
        """How this machine enforces the box limits (cgroups or rlimits), for run.json."""
        box = self.isolation.new_box()
        try:
            return box.groups.describe()
        finally:
            box.remove()

    def handover(self, case_set: "CaseSet", bundle_cases: dict[str, str] | None = None,
                 bundle_values: dict[str, dict[str, str]] | None = None) -> dict[str, Any] | None:
        """What the harness's own table lets this diagnoser receive: the labeled corpus with the map of this
        run's bundle ids to case ids and to the factor value words each regression or fleet bundle shows
        (``prior``, ``oracle``), public words (``leak``), else nothing."""
        kind = self.role.handover
        if kind == "corpus":
            from diageval.hosting.corpus import ReferenceCorpus

            data = ReferenceCorpus.from_case_set(case_set, bundle_cases, bundle_values).model_dump(mode="json")
        elif kind == "vocabulary":
            from diageval.hosting.corpus import PublicVocabulary

            data = PublicVocabulary.build(case_set.taxonomy).model_dump(mode="json")
        else:
            return None
        return {"kind": kind, "data": data}

    def slot(self, *, live: LiveGroups | None = None, log_path: Path | None = None,
             handover: dict[str, Any] | None = None) -> Slot:
        """A fresh slot (the identifying worker first); ``handover`` only as :attr:`role` allows."""
        if handover is not None and handover.get("kind") != self.role.handover:
            raise ValueError(f"refusing to hand {handover.get('kind')!r} to {self.spec!r} (its role: {self.role.handover})")
        live = live or LiveGroups()
        if self.kind == "command":
            from diageval.hosting.command import CommandDiagnoser, CommandExecutor

            return CommandExecutor(CommandDiagnoser(self.paths.spec[len("cmd:"):].strip()), isolation=self.isolation,
                                   live=live, policy=self.policy)
        from diageval.hosting.worker import WorkerExecutor

        ex, self._spare = self._spare, None
        if ex is None:
            ex = WorkerExecutor(self.paths.spec, isolation=self.isolation, python_path=self.paths.python_path,
                                policy=self.policy)
        ex.adopt(live, log_path)
        if handover is not None:
            ex.prepare(handover)
        return ex

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
            self._spare = None

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def list_diagnosers(policy: HostPolicy) -> list[dict[str, Any]]:
    """``diageval diagnosers list``: every registered diagnoser, constructed inside a box (listing
    constructs each one, which runs its code), as rows of name, version, origin, role, claims, error."""
    from diageval.hosting.worker import list_in_box

    roots = run_roots(runs_dir=policy.runs_dir, cases_dir=policy.cases_dir)
    return list_in_box(choose_isolation(run_policy(roots, policy)))
