"""``flightrecorder``: PyTorch's Flight Recorder analyser (``torch.distributed.flight_recorder``, the
library behind ``python -m torch.distributed.flight_recorder.fr_trace``) run on a bundle's dumps.

A bundle may hold ``flight_recorder/rank_<N>``: each rank's Flight Recorder buffer in torch's dump
format (a pickle; the recorder writes one per rank at exit, success or failure). The analyser's own
``read_dump`` loads them and its ``build_db`` matches every collective across ranks, as ``fr_trace``
does. Pickles run code when loaded: this module loads them only inside the diagnoser's process (the
sandbox, where the harness runs diagnosers), never in the harness.

Mapping (outside verdict -> taxonomy):

=====================================================  ==========================================
analyser verdict                                       finding
=====================================================  ==========================================
a collective fails its check (``pass_check`` False):   ``comm.collective_hang``, cause, confidence
type or size mismatch, or ranks missing from it        0.9, ranks = the culprits it names (the keys
                                                       of ``mismatch_collectives`` and
                                                       ``missing_ranks``), evidence = its message
every collective matches on every rank                 no finding (the dumps show no desync)
=====================================================  ==========================================

Confidence 0.9: the analyser states a desync as a fact from the ranks' own records, but a dump can be
incomplete (a rank killed before it dumped); never 1. It names culprits relative to the first rank it
reads (with two ranks, the one that differs from rank 0), which the localisation score then judges.

Never claims: anything but ``comm.collective_hang``. Flight Recorder holds collectives, not time spent
in them (gloo records no start or completion times), so a rank that stalls and then enters the same
collective late looks like every other rank here: the analyser finds nothing.

Decided here:

* No dump in the bundle: abstain (the job kept no Flight Recorder buffer; nothing to analyse).
* Dumps for fewer ranks than ``world_size``: analysed with the analyser's own best-effort mode
  (``--allow-incomplete-ranks``); with no finding, abstain (the missing rank may be the culprit).
* Workaround, torch 2.13 with gloo: the dump's ``pg_config`` names the default group ``""`` while its
  entries name it ``"0"``, and ``build_db`` then fails with a KeyError. When a dump's ``pg_config`` has
  the single key ``""`` and its entries name one group, the key is renamed to that group's name.
* The analyser's logging is captured (it prints its verdicts); the mismatch lines become evidence.
  An exception inside it is ``DiagnoserFailed("flightrecorder_error")``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from pathlib import Path
from typing import Any, ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed, DiagnoserUnavailable
from diageval.diagnosis import Abstention, Diagnosis, Finding

INSTALL_HINT = "install torch >= 2.8 (torch.distributed.flight_recorder)"
DUMP_FOLDER = "flight_recorder"
DUMP_PREFIX = "rank_"
HANG_CONFIDENCE = 0.9
_DUMP_NAME = re.compile(rf"^{DUMP_PREFIX}(\d+)$")


def _torch_version() -> str:
    try:
        import torch

        return torch.__version__.split("+")[0]
    except ImportError:
        return "missing"


def dump_paths(bundle: EvidenceBundle) -> dict[int, Path]:
    """Rank -> its Flight Recorder dump, for the ranks that have one."""
    folder = bundle.root / DUMP_FOLDER
    out = {}
    if folder.is_dir():
        for p in folder.iterdir():
            m = _DUMP_NAME.match(p.name)
            if m and p.is_file():
                out[int(m.group(1))] = p
    return dict(sorted(out.items()))


class FlightRecorderDiagnoser:
    """Collective desyncs found by torch's Flight Recorder analyser (see the module docstring)."""

    name = "flightrecorder"
    version = f"1+torch-{_torch_version()}"
    claims: ClassVar[tuple[str, ...]] = ("comm.collective_hang",)

    def __init__(self) -> None:
        try:  # its import warns on stderr that tabulate is missing (it only formats debug tables)
            with contextlib.redirect_stderr(io.StringIO()):
                from torch.distributed.flight_recorder.components import builder, loader  # noqa: F401
        except ImportError as exc:
            raise DiagnoserUnavailable(f"the flightrecorder diagnoser needs torch's Flight Recorder analyser ({exc}); {INSTALL_HINT}") from exc

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        paths = dump_paths(bundle)
        if not paths:
            return Diagnosis(abstain=Abstention(reason="the bundle has no Flight Recorder dumps (flight_recorder/rank_<N>)"))
        incomplete = len(paths) < bundle.world_size
        try:
            db, log = _analyse(paths, incomplete)
        except Exception as exc:
            raise DiagnoserFailed("flightrecorder_error", f"the Flight Recorder analyser failed: {type(exc).__name__}: {exc}") from exc
        findings = findings_from_db(db, log)
        if not findings and incomplete:
            missing = sorted(set(range(bundle.world_size)) - set(paths))
            return Diagnosis(abstain=Abstention(reason=f"no desync in the dumps present, but ranks {missing} left no dump"))
        return Diagnosis(findings=findings)


def _analyse(paths: dict[int, Path], incomplete: bool) -> tuple[Any, str]:
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dump

    details = {}
    version = ""
    for rank, path in paths.items():
        dump = read_dump(DUMP_PREFIX, str(path))
        _name_default_group(dump)
        details[path.name] = dump
        version = version or str(dump["version"])
    folder = str(next(iter(paths.values())).parent)
    args = JobConfig().parse_args([folder, "--prefix", DUMP_PREFIX] + (["--allow-incomplete-ranks"] if incomplete else []))
    captured = io.StringIO()
    fr_logger = logging.getLogger("Flight Recorder")  # FlightRecorderLogger's, with its own stream handler
    saved = fr_logger.handlers[:], fr_logger.propagate
    handler = logging.StreamHandler(captured)
    fr_logger.handlers, fr_logger.propagate = [handler], False
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            db = build_db(details, args, version)
    finally:
        fr_logger.handlers, fr_logger.propagate = saved
    return db, captured.getvalue()


def _name_default_group(dump: dict[str, Any]) -> None:
    """The gloo workaround in the module docstring: ``pg_config`` key ``""`` -> the entries' group name."""
    config = dump.get("pg_config") or {}
    names = {e["process_group"][0] for e in dump.get("entries", []) if e.get("process_group")}
    if list(config) == [""] and len(names) == 1:
        config[names.pop()] = config.pop("")


def findings_from_db(db: Any, log: str = "") -> list[Finding]:
    """One ``comm.collective_hang`` finding for the first collective that fails the analyser's check."""
    for coll in db.collectives:
        if coll.pass_check:
            continue
        culprits = set(coll.missing_ranks or ()) | set((coll.mismatch_collectives or {}).keys())
        lines = [ln.strip() for ln in log.splitlines() if "Culprit" in ln or "missing" in ln.lower()]
        summary = (f"collective #{coll.collective_seq_id} ({coll.collective_name}) of group {coll.pg_desc} does not "
                   f"match across ranks; culprit ranks {sorted(culprits) or 'not named'}")
        return [Finding(
            category="comm.collective_hang", kind="cause", confidence=HANG_CONFIDENCE,
            ranks=sorted(culprits) or None, summary=summary,
            evidence=[f"{DUMP_FOLDER}/: {ln}" for ln in lines[:5]] or [f"{DUMP_FOLDER}/: {summary}"],
        )]
    return []
