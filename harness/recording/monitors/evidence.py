"""Evidence for a monitor's run: the case recorded again with the monitor installed, under its own key.

``diageval run --diagnoser NAME`` for a monitor of the registry (:data:`~diageval.recording.monitors.MONITORS`)
prepares each case as every run does (the plain bundle and, for a positive case, its manifestation check,
both cached and shared with every other diagnoser) and then records the case once more with the monitor
in the job: that bundle, with the monitor's raw output in ``monitor/``, is the one its adapter gets. Its
cache key (:func:`monitored_key`) is the plain key plus the monitor's name, its tool's installed version
and the sources of its in-job part (its registry module and what that imports: no case names it, so the
plain key does not read it), so the plain bundles never change and a change to the monitor re-records
its bundles only. The manifestation check is the plain recording's: a monitor run is judged on the same
verified cases.

Which cases a monitor can be judged on (:func:`not_monitorable`): only live recordings. A recorded case
(a real job's traces) ran elsewhere, with no monitor in it; a case whose evidence is an edit of the
finished bundle (a trace dropped or cut, a clock skewed) is labeled by what the edited bundle still
shows, while a monitor watches the live job, which the edit does not touch; a regression or a fleet is
judged across several runs, while a monitor watches one job. Such a case ends ``unavailable`` with the
reason (:data:`UNWATCHABLE` first): reported apart, never scored or blamed on the monitor, and the run
keeps as many results as every other run on the board (which compares runs with equal counts).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from diageval.cases.load import LoadedCase
from diageval.cases.model import Case
from diageval.recording.monitors import MONITORS, MonitorInfo
from diageval.recording.policy import EvidenceFn, RecordingPolicy
UNWATCHABLE = "in-job monitor:"  # how an unavailable case's error starts when no monitor can watch it


def monitored_key(case: Case, device: str, monitor: MonitorInfo) -> str:
    """The cache key of ``case`` recorded with ``monitor`` installed (see the module docstring)."""
    from importlib import metadata

    from diageval.recording.cache import cache_key, modules_code_version

    try:
        version = metadata.version(monitor.distribution)
    except metadata.PackageNotFoundError:
        version = "missing"
    code = modules_code_version([monitor.impl.partition(":")[0]])  # the in-job part no case's key reads
    payload = f"{cache_key(case, device)}|monitor={monitor.name}|{monitor.distribution}={version}|code={code}"
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def not_monitorable(case: Case) -> str | None:
    """Why ``case`` cannot be judged with an in-job monitor; None when it can."""
    from diageval.recording.faults import FAULTS

    if case.recorded is not None:
        return "a real job's traces: no live job to install an in-job monitor into"
    if getattr(case, "fleet", None) is not None:
        return "a regression or fleet: several runs judged together, while an in-job monitor watches one job"
    edits = [f.name for f in case.faults if FAULTS[f.name].load().stage == "bundle"]
    if edits:
        return "its evidence is an edit of the finished bundle; an in-job monitor watches the live job, which the edit leaves unchanged"
    return None


def ensure_monitored_bundle(case: Case, device: str, monitor: MonitorInfo, *, force: bool = False,
                            cache_dir: Path | None = None) -> Path:
    """The cached bundle of ``case`` recorded with ``monitor`` (recorded now if missing or ``force``)."""
    from diageval.bundle.model import MANIFEST_NAME
    from diageval.fileio import append_jsonl
    from diageval.paths import bundle_cache_dir
    from diageval.recording.cache import bundles_root
    from diageval.recording.record import record_case

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    key = monitored_key(case, device, monitor)
    folder = bundles_root(cache) / key
    if force or not (folder / MANIFEST_NAME).is_file():
        record_case(case, folder, device=device, monitor=monitor.name)
        append_jsonl(cache / "index.jsonl", {"case_id": case.id, "role": f"monitor:{monitor.name}", "key": key, "repeat": 0,
                                             "device": device, "recorded": datetime.now(timezone.utc).isoformat()})
    return folder


def monitored_evidence(base: EvidenceFn, name: str) -> EvidenceFn:
    """An evidence function for the pipeline: ``base`` (the plain evidence and its verification), then the
    bundle of the case recorded with the monitor ``name`` in its place (in the policy's cache)."""
    monitor = MONITORS[name]

    def prepare(loaded: LoadedCase, policy: RecordingPolicy) -> Any:
        from diageval.bundle.model import MANIFEST_NAME, EvidenceBundle
        from diageval.fileio import sha256_file
        from diageval.recording.draw import drawn_case
        from diageval.recording.record import resolve_device

        from diageval.recording.recorded import EvidenceUnavailable

        why = not_monitorable(loaded.case)
        if why:  # the pipeline's status: unavailable, with the reason
            raise EvidenceUnavailable(f"{UNWATCHABLE} {why}")
        prepared = base(loaded, policy)
        draw = prepared.draw  # the monitored job is drawn as the plain one (its labels follow it)
        case = drawn_case(loaded.case, draw) if draw is not None else loaded.case
        folder = ensure_monitored_bundle(case, resolve_device(policy.device, case), monitor, force=policy.force,
                                         cache_dir=policy.cache_dir)
        return prepared.model_copy(update={"bundle_dir": folder, "bundle_id": EvidenceBundle.open(folder).bundle_id,
                                           "manifest_sha256": sha256_file(folder / MANIFEST_NAME)})

    return prepare
