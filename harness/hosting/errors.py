"""Every way hosting a diagnoser can fail before or around a diagnosis, under one base, :class:`HostError`.

What the *diagnoser* does wrong on a case (crashes, hangs, writes nonsense, breaks a box limit) is not an
error here: it is that case's :class:`~diageval.hosting.attempt.Attempt` status. These are the failures
that stop hosting itself: a spec that names nothing, a path a box may not show, no sandbox where one is
required, a worker that cannot start, a cached bundle that no longer matches its manifest.
"""

from __future__ import annotations

from pathlib import Path

from diageval.errors import DiagevalError


class HostError(DiagevalError):
    """A diagnoser cannot be hosted (or a bundle handed to it) as asked; the message says why."""


class DiagnoserSpecError(HostError):
    """A ``--diagnoser`` spec that names nothing runnable (unknown name, bad import string, not a diagnoser)."""


class SpecPathError(HostError):
    """A diagnoser spec that needs a path its box may not show."""


class SandboxUnavailable(HostError):
    """No box can start here, and the policy requires one (the default: only ``--no-sandbox`` runs without)."""


class WorkerStartError(HostError):
    """The diagnoser could not be started in a worker (import error, DiagnoserUnavailable, ...)."""


class BundleIntegrityError(HostError):
    """A cached bundle whose files do not match its ``bundle.json``; the message names the file."""

    def __init__(self, bundle_dir: Path, rel: str, problem: str):
        super().__init__(f"bundle {bundle_dir}: {rel}: {problem}")
        self.rel = rel
