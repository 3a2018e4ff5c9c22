"""A diagnoser that kills the Ray worker hosting it, for the executor tests (``tests/executors/test_executors.py``).

Its instruction is the first line of the bundle's ``logs/rank0.log`` (the run fakes write it there):
``kill-worker-once DIR`` kills the Ray worker the first time (a marker file in the folder DIR says it did)
and claims a straggler after; ``kill-worker DIR`` kills it every time; anything else claims a straggler.
It finds the worker by walking up its parents to the first process whose command line starts ``ray::``
(a Ray worker's title), so it works only unsandboxed (``isolation="none"``): a box has its own PID namespace.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosis import Diagnosis, Finding


def _ray_worker_pid() -> int:
    pid = os.getppid()
    while pid > 1:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if cmdline.startswith(b"ray::"):
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("not running under a Ray worker")


class LostWorkerDiagnoser:
    name = "lost-worker"
    version = "1"

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        log = bundle.root / "logs" / "rank0.log"
        what = log.read_text().splitlines()[0].strip() if log.is_file() else ""
        if what.startswith("kill-worker"):
            how, folder = what.split(maxsplit=1)
            marker = Path(folder) / bundle.manifest.bundle_id
            if how == "kill-worker" or not marker.exists():
                marker.touch()
                os.kill(_ray_worker_pid(), signal.SIGKILL)
        return Diagnosis(findings=[Finding(category="compute.straggler_rank", confidence=0.7, ranks=[1])])
