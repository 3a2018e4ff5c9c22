"""The executors' vocabulary: which executor (:class:`ExecutorSpec`), what a task is (:class:`DiagnoseTask`) and
how one ends (the slot's :class:`~diageval.hosting.Attempt`, or a :class:`HarnessFailure`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from diageval.executors.registry import EXECUTORS
from diageval.hosting import Attempt, HostError


class ExecutorSpec(BaseModel):
    """``--executor local|ray[:ADDRESS]``: ``ray`` alone joins the cluster ``ray.init()`` finds (``$RAY_ADDRESS``)
    or starts a local one; ``ray:ADDRESS`` joins that one (``ray:auto``, ``ray:HOST:6379``, ``ray:ray://HOST:10001``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = "local"
    address: str | None = None

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        if kind not in EXECUTORS:
            raise ValueError(f"executor {kind!r}: expected one of {', '.join(EXECUTORS)}")
        return kind

    @classmethod
    def parse(cls, text: "str | ExecutorSpec") -> "ExecutorSpec":
        if isinstance(text, ExecutorSpec):
            return text
        kind, sep, address = str(text).strip().partition(":")
        if kind not in EXECUTORS:
            raise ValueError(f"executor {text!r}: expected {', '.join(EXECUTORS)} or ray:ADDRESS")
        if kind == "local" and sep:
            raise ValueError(f"executor {text!r}: local takes no address (ray:ADDRESS does)")
        if sep and not address.strip():
            raise ValueError(f"executor {text!r}: {kind}: needs an address after the colon (or plain {kind})")
        return cls(kind=kind, address=address.strip() or None)

    def __str__(self) -> str:
        return self.kind + (f":{self.address}" if self.address else "")


@dataclass(frozen=True)
class DiagnoseTask:
    """One bundle to diagnose. ``bundle_sha256`` is the sha256 of its ``bundle.json``, the key it travels by."""

    bundle_dir: Path
    bundle_sha256: str
    bundle_id: str  # what the diagnoser is shown (random per run)
    case_dir: Path | None  # where its stdout and stderr are kept


@dataclass(frozen=True)
class HarnessFailure:
    """A task that ended without a diagnosis through no fault of the diagnoser (``harness_error``).
    ``bundle_damaged``: the cached bundle failed its checksums (the caller records it again)."""

    error: str
    bundle_damaged: bool = False


Outcome = Attempt | HarnessFailure
OnDone = Callable[[int, Outcome], None]
OnPrepared = Callable[[int, Any, float], None]  # (index, the prepared evidence or the exception that replaces it,
# the seconds the recording task took where it ran)


class RecordingFailed(HostError):
    """A recording task on another machine failed, was lost twice, or sent back a damaged bundle."""
