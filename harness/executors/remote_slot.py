"""The worker's side of the ``ray`` executor: one slot of the hosted diagnoser, opened on the node it runs on.

A plain class (the driver makes it a Ray actor; tests call it directly). :meth:`RemoteSlot.open` runs the
same :meth:`~diageval.hosting.Host.open` a local run does, on this node: the spec is resolved in a box
here, and where no box can start here the slot refuses (``SandboxUnavailable``, unless the run's policy
itself says ``--no-sandbox``), exactly as locally. Its answer is data, never an exception, so that the
driver can re-raise the right :class:`~diageval.hosting.HostError` naming the node.

:meth:`RemoteSlot.diagnose` unpacks the bundle it is handed (checked against its content key), lets the
slot diagnose it under the random id (the slot's private copy checks every file against ``bundle.json``)
with a local folder for what the diagnoser prints, and answers the attempt and those files: the driver,
the one writer of the run folder, keeps them. Nothing here knows a case id or a run folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from diageval.fileio import owned_temp_dir, remove_stale_temp_dirs
from diageval.hosting import STDERR_NAME, STDOUT_NAME
from diageval.hosting import BundleIntegrityError, HostError
from diageval.bundle.transfer import Packed, TransferDamaged, unpack_bundle
from diageval.hosting import HostPolicy
from diageval.hosting import LiveGroups

TEMP_PREFIX = "diageval-ray-"
KEPT = (STDOUT_NAME, STDERR_NAME)


class RemoteSlot:
    def __init__(self) -> None:
        self.host: Any = None
        self.slot: Any = None
        self.live = LiveGroups()
        self.work: Path | None = None

    def open(self, spec: str, policy_json: str, python_path: list[str], handover: dict[str, Any] | None) -> dict[str, Any]:
        """Resolve ``spec`` under the policy on this node and open one slot: ``{"ok": True, name, version,
        isolation, node}`` or ``{"ok": False, "type": <HostError subclass>, "error": ..., "node": ...}``.
        ``python_path``: the driver's folder of a ``module:attr`` diagnoser, used where this node has it."""
        from diageval.hosting import Host
        from diageval.hosting import remove_stale_boxes

        node = socket.gethostname()
        for p in python_path:
            if Path(p).is_dir() and p not in sys.path:
                sys.path.insert(0, p)
        try:
            remove_stale_boxes()
            remove_stale_temp_dirs(Path(tempfile.gettempdir()), TEMP_PREFIX)  # left by a worker that was killed
            self.host = Host.open(spec, HostPolicy.model_validate_json(policy_json))
            self.work = owned_temp_dir(Path(tempfile.gettempdir()), TEMP_PREFIX)
            self.slot = self.host.slot(live=self.live, log_path=self.work / "diagnoser.log", handover=handover)
        except HostError as exc:
            self.close()
            return {"ok": False, "type": type(exc).__name__, "error": str(exc), "node": node}
        return {"ok": True, "name": self.host.name, "version": self.host.version, "isolation": self.host.isolation.kind,
                "node": node, "log_path": str(self.work / "diagnoser.log")}

    def diagnose(self, packed: Packed, key: str, bundle_id: str) -> dict[str, Any]:
        """``{"attempt": ..., "kept": {name: bytes}}``, ``{"integrity": {"rel", "problem"}}`` (the bundle failed
        its checksums) or ``{"transfer": why}`` (the package arrived damaged)."""
        assert self.slot is not None and self.work is not None, "open() first"
        task_dir = Path(tempfile.mkdtemp(prefix="task-", dir=self.work))
        try:
            try:
                bundle = unpack_bundle(packed, key, task_dir / "bundle")
            except TransferDamaged as exc:
                return {"transfer": str(exc)}
            case_dir = task_dir / "case"
            try:
                attempt = self.slot.diagnose(bundle, case_dir, bundle_id=bundle_id)
            except BundleIntegrityError as exc:
                prefix = f"bundle {bundle}: {exc.rel}: "
                text = str(exc)
                return {"integrity": {"rel": exc.rel, "problem": text[len(prefix):] if text.startswith(prefix) else text}}
            kept = {name: (case_dir / name).read_bytes() for name in KEPT if (case_dir / name).is_file()}
            return {"attempt": attempt.model_dump(mode="json"), "kept": kept}
        finally:
            shutil.rmtree(task_dir, ignore_errors=True)

    def abort(self) -> None:
        """Kill every diagnoser process of this slot now (the run was interrupted)."""
        self.live.kill_all()

    def close(self) -> bytes:
        """Close the slot and the host; answer what the diagnoser printed outside any case."""
        log = b""
        try:
            if self.slot is not None:
                self.slot.close()
            if self.host is not None:
                self.host.close()
            if self.work is not None and (self.work / "diagnoser.log").is_file():
                log = (self.work / "diagnoser.log").read_bytes()
        finally:
            self.slot = self.host = None
            if self.work is not None:
                shutil.rmtree(self.work, ignore_errors=True)
                self.work = None
        return log

    def pid(self) -> int:
        return os.getpid()
