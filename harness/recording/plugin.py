"""Registry entries for workloads and fault injectors.

Registries are plain dicts built explicitly in ``diageval.recording.workloads`` and ``diageval.recording.faults`` (no
registration by import side effect). An entry carries its name, a one-line summary, a strict pydantic
params model and the import path of its implementation, which is imported only when a case is
recorded: validating cases never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from diageval.cases.model import WorkloadSpec

# A fault's extra check of its params against the workload: returns (field, message) pairs.
FaultCheck = Callable[[BaseModel, "WorkloadSpec"], list[tuple[str, str]]]


def _no_check(params: BaseModel, workload: "WorkloadSpec") -> list[tuple[str, str]]:
    return []


def _no_ops(params: dict[str, Any]) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class PluginInfo:
    name: str
    summary: str
    params_model: type[BaseModel]
    impl: str  # "package.module:attribute"

    def load(self) -> Any:
        module, _, attr = self.impl.partition(":")
        return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class WorkloadInfo(PluginInfo):
    pass


@dataclass(frozen=True)
class FaultInfo(PluginInfo):
    check: FaultCheck = field(default=_no_check)
    # The taxonomy causes this injector produces (none for a benign confounder or an evidence edit). Public,
    # like the name: the ``leak`` baseline greps bundles for fault names and points them at these causes.
    injects: tuple[str, ...] = ()
    # The op or kernel names (as a trace names them) the fault acts through, from its params; none for a fault that
    # slows what is there (a slower rank, a slower network) rather than adding an op. Scoring's grounding reads it.
    ops: Callable[[dict[str, Any]], tuple[str, ...]] = field(default=_no_ops)
