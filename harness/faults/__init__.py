"""The fault-injector registry: name -> FaultInfo. Importing this module never imports torch."""

from __future__ import annotations

from diageval.plugin import FaultInfo

FAULTS: dict[str, FaultInfo] = {}
