"""``diageval diagnose``: run one diagnoser on one bundle folder and show what it claims. No scoring.

Meant for people developing a diagnoser, and run exactly as in a run (decided here): in a sandbox, on a
private checked copy of the bundle, with the timeout and the output limits; what the diagnoser printed
(an in-process diagnoser's traceback included) is passed through afterwards. ``prior`` and ``oracle`` get
the corpus of ``--cases`` and ``leak`` its public words; no bundle is mapped to a case here, so
``oracle`` abstains.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosis import DEFAULT_LIMITS, Diagnosis, DiagnosisLimits
from diageval.run.attempt import Attempt
from diageval.run.box_policy import run_roots
from diageval.run.case_box import STDERR_NAME, STDOUT_NAME
from diageval.run.hosting import host_diagnoser
from diageval.run.process_groups import LiveGroups
from diageval.run.sandbox import remove_stale_boxes


def diagnose_bundle(spec: str, bundle_dir: Path, *, timeout: float, cases_dir: Path | None = None,
                    allow_network: bool = False, limits: DiagnosisLimits = DEFAULT_LIMITS,
                    isolation: Literal["auto", "none"] = "auto") -> Attempt:
    """Raises ``BundleError`` (not a bundle), ``BundleIntegrityError`` (files differ from bundle.json),
    ``DiagnoserSpecError``, ``SpecPathError`` or ``WorkerStartError`` before the diagnosis."""
    from diageval.paths import default_cases_dir

    bundle = EvidenceBundle.open(Path(bundle_dir))  # a clear BundleError before anything runs
    remove_stale_boxes()
    roots = run_roots(runs_dir=None, cases_dir=cases_dir or default_cases_dir())
    hosted = host_diagnoser(spec, roots=roots, isolation=isolation, allow_network=allow_network, limits=limits)
    try:
        ex = hosted.executor(live=LiveGroups(), log_path=None, handover=_handover(hosted.role.handover, cases_dir))
        try:
            with tempfile.TemporaryDirectory(prefix="diageval-diagnose-") as tmp:
                attempt = ex.attempt(bundle.root, Path(tmp), timeout, bundle_id=secrets.token_hex(16))
                for name in (STDOUT_NAME, STDERR_NAME):
                    path = Path(tmp) / name
                    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
                    if text:
                        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        finally:
            ex.close()
    finally:
        hosted.close()
    return attempt


def _handover(kind: str | None, cases_dir: Path | None) -> dict[str, Any] | None:
    if kind == "corpus":
        from diageval.cases.load import load_case_set
        from diageval.run.corpus import ReferenceCorpus

        return {"kind": kind, "data": ReferenceCorpus.from_case_set(load_case_set(cases_dir)).model_dump(mode="json")}
    if kind == "vocabulary":
        from diageval.cases.taxonomy import load_taxonomy
        from diageval.paths import default_taxonomy_path
        from diageval.run.corpus import PublicVocabulary

        return {"kind": kind, "data": PublicVocabulary.build(load_taxonomy(default_taxonomy_path(cases_dir))).model_dump(mode="json")}
    return None


def format_diagnosis(diagnosis: Diagnosis) -> str:
    """The findings as a person reads them: causes first (most confident first), then symptoms."""
    lines = []
    if diagnosis.abstain is not None:
        lines.append(f"abstains: {diagnosis.abstain.reason}")
    ordered = sorted(diagnosis.findings, key=lambda f: (f.kind != "cause", -f.confidence))
    for f in ordered:
        where = []
        if f.ranks is not None:
            where.append(f"ranks {f.ranks}")
        if f.steps is not None:
            where.append(f"steps [{f.steps[0]}, {f.steps[1]})")
        if f.impact is not None:
            where.append(f"impact {f.impact:.0%}")
        lines.append(f"{f.kind:<7} {f.category:<32} confidence {f.confidence:.2f}" + (f"  ({', '.join(where)})" if where else ""))
        if f.summary:
            lines.append(f"        {f.summary}")
        for e in f.evidence:
            lines.append(f"        - {e}")
    if not lines:
        lines.append("no findings: the diagnoser claims nothing")
    return "\n".join(lines)
