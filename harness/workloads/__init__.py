"""The workload registry: name -> WorkloadInfo. Importing this module never imports torch."""

from __future__ import annotations

from diageval.plugin import WorkloadInfo

WORKLOADS: dict[str, WorkloadInfo] = {}
