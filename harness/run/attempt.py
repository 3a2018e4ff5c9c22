"""One diagnoser's attempt at one bundle, as the run pipeline sees it before scoring.

An executor (the worker hosting an in-process diagnoser, or a ``cmd:`` program) turns a bundle into an
:class:`Attempt`; the pipeline saves its diagnosis and hands it to scoring. The statuses are the subset
of the scoring statuses a diagnoser can cause; ``abstained`` is read from the diagnosis by scoring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, model_validator

from diageval.diagnosis import Diagnosis

AttemptStatus = Literal["ok", "diagnoser_error", "timeout", "invalid_output"]


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


class Executor(Protocol):
    """Runs the diagnoser on one bundle. ``case_dir`` is where it may keep stdout/stderr for that case."""

    def attempt(self, bundle_dir: Path, case_dir: Path, timeout: float) -> Attempt: ...

    def close(self) -> None: ...
