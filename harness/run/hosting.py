"""Hosting a diagnoser: from a ``--diagnoser`` spec to executors that run it in boxes.

The harness's side of the trust boundary, in one place:

* a ``cmd:`` spec is resolved here from its text alone (name and version; see the registry);
* any other spec (``module:attr``, an entry point) is resolved **inside** a sandboxed worker, which
  reports name, version and origin back: the harness never imports a diagnoser it did not write;
* the role (reference baseline, self-test) and the hand-over (labels for ``prior`` and ``oracle``, public
  words for ``leak``) come from the harness's own table (:mod:`diageval.run.handover`), never from the
  diagnoser;
* what the box shows besides the system and Python: :mod:`diageval.run.spec_paths`.

The worker that answered the identification is kept and becomes the first job slot's executor, so the
import is paid once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from diageval.diagnosis import DEFAULT_LIMITS, DiagnosisLimits
from diageval.run.box_policy import HiddenRoots, run_policy
from diageval.run.handover import BuiltinRole, builtin_role
from diageval.run.process_groups import LiveGroups
from diageval.run.sandbox import Isolation, choose_isolation
from diageval.run.spec_paths import SpecPaths, spec_paths


@dataclass
class HostedDiagnoser:
    spec: str
    name: str
    version: str
    origin: str
    kind: Literal["in_process", "command"]
    role: BuiltinRole
    isolation: Isolation
    paths: SpecPaths
    limits: DiagnosisLimits = DEFAULT_LIMITS
    claims: list[str] | None = None  # the taxonomy ids of the causes it declares it can claim (run.json)
    _spare: Any = field(default=None, repr=False)  # the identifying worker, handed to the first executor

    @property
    def reference(self) -> bool:
        return self.role.reference

    @property
    def self_test(self) -> bool:
        return self.role.self_test

    def executor(self, *, live: LiveGroups, log_path: Path | None, handover: dict[str, Any] | None = None) -> Any:
        """A fresh executor (the identifying worker first); ``handover`` only as :attr:`role` allows."""
        if handover is not None and handover.get("kind") != self.role.handover:
            raise ValueError(f"refusing to hand {handover.get('kind')!r} to {self.spec!r} (its role: {self.role.handover})")
        if self.kind == "command":
            from diageval.run.command import CommandDiagnoser, CommandExecutor

            return CommandExecutor(CommandDiagnoser(self.paths.spec[len("cmd:"):].strip()), isolation=self.isolation,
                                   live=live, limits=self.limits)
        from diageval.run.worker import WorkerExecutor

        ex, self._spare = self._spare, None
        if ex is None:
            ex = WorkerExecutor(self.paths.spec, isolation=self.isolation, python_path=self.paths.python_path,
                                limits=self.limits)
        ex.adopt(live, log_path)
        if handover is not None:
            ex.prepare(handover)
        return ex

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
            self._spare = None


def host_diagnoser(
    spec: str,
    *,
    roots: HiddenRoots,
    isolation: Literal["auto", "none"] = "auto",
    allow_network: bool = False,
    limits: DiagnosisLimits = DEFAULT_LIMITS,
) -> HostedDiagnoser:
    """Resolve ``spec`` (in a box unless it is ``cmd:``); raises ``DiagnoserSpecError``,
    ``SpecPathError`` or ``WorkerStartError`` with the reason."""
    from diageval.run.registry import CMD_PREFIX, DiagnoserSpecError, diagnoser_entry_points, resolve_command

    spec = spec.strip()
    if not spec:
        raise DiagnoserSpecError("empty diagnoser spec; expected a name (see `diageval diagnosers list`), module:attr or cmd:COMMAND")
    paths = spec_paths(spec, roots)
    chosen = choose_isolation(isolation, run_policy(roots, allow_network=allow_network, visible=paths.visible))
    role = builtin_role(spec, diagnoser_entry_points().get(spec, []))
    if spec.startswith(CMD_PREFIX):
        r = resolve_command(spec)
        return HostedDiagnoser(spec, r.name, r.version, r.origin, "command", role, chosen, paths, limits)
    from diageval.run.worker import WorkerExecutor

    worker = WorkerExecutor(paths.spec, isolation=chosen, python_path=paths.python_path, limits=limits)
    identity = worker.describe()
    if identity.get("needs_network") and not allow_network:
        worker.close()
        raise DiagnoserSpecError(
            f"{identity['name']} needs the network (it says needs_network: it calls a model endpoint), and this "
            "run keeps diagnosers offline: run again with --allow-network"
        )
    return HostedDiagnoser(spec, identity["name"], identity["version"], identity["origin"], "in_process", role, chosen,
                           paths, limits, claims=identity.get("claims"), _spare=worker)
