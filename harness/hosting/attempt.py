"""One diagnoser's attempt at one bundle, as the run pipeline sees it before scoring.

An executor (the worker hosting an in-process diagnoser, or a ``cmd:`` program) turns a bundle into an
:class:`Attempt`; the pipeline saves its diagnosis and hands it to scoring. The statuses are the subset
of the scoring statuses a diagnoser can cause; ``abstained`` is read from the diagnosis by scoring. ``cap_hit``:
an agent stopped by a cap on its turns, tokens, dollars or time (it says so: ``DiagnoserFailed("cap_hit", ...)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, model_validator

from diageval.diagnosis import Diagnosis

AttemptStatus = Literal["ok", "diagnoser_error", "timeout", "invalid_output", "cap_hit"]


class Attempt(BaseModel):
    status: AttemptStatus
    diagnosis: Diagnosis | None = None
    error: str | None = None
    seconds: float | None = None

    @model_validator(mode="after")
    def _diagnosis_iff_ok(self) -> "Attempt":
        if (self.status == "ok") != (self.diagnosis is not None):
            raise ValueError("an attempt has a diagnosis exactly when its status is ok")
        return self


class Slot(Protocol):
    """One place a hosted diagnoser runs, one case at a time (a long-lived worker in its box, or a ``cmd:``
    program in a fresh box per case). A run opens one per job."""

    def diagnose(self, bundle_dir: Path, case_dir: Path | None, *, bundle_id: str) -> Attempt:
        """Diagnose a private, checked copy of ``bundle_dir`` shown under ``bundle_id``; keep what the
        diagnoser printed in ``case_dir``. Raises ``BundleIntegrityError`` before anything runs when the
        bundle does not match its manifest; everything the diagnoser does wrong is the attempt's status."""
        ...

    def close(self) -> None: ...
