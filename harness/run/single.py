"""``diageval diagnose``: run one diagnoser on one bundle folder and show what it claims. No scoring.

Meant for people developing a diagnoser, and run exactly as in a run (decided here): in a sandbox, on a
private checked copy of the bundle, with the timeout and the output limits; what the diagnoser printed
(an in-process diagnoser's traceback included) is passed through afterwards, made inert
(:func:`diageval.inert.inert`: no control sequence of its reaches the terminal). ``prior`` and ``oracle`` get
the corpus of ``--cases`` and ``leak`` its public words; no bundle is mapped to a case here, so
``oracle`` abstains.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosis import Diagnosis
from diageval.inert import inert
from diageval.hosting import STDERR_NAME, STDOUT_NAME, Attempt, Host, HostPolicy, remove_stale_boxes


def diagnose_bundle(spec: str, bundle_dir: Path, policy: HostPolicy) -> Attempt:
    """Raises ``BundleError`` (not a bundle) or a ``HostError`` (the spec, the sandbox, a bundle whose files
    differ from bundle.json) before the diagnosis. ``policy.cases_dir``: the corpus ``prior`` and
    ``oracle`` receive and the box hides (default: the built-in one)."""
    from diageval.cases.load import load_case_set
    from diageval.paths import default_cases_dir

    bundle = EvidenceBundle.open(Path(bundle_dir))  # a clear BundleError before anything runs
    remove_stale_boxes()
    policy = policy.model_copy(update={"cases_dir": policy.cases_dir or default_cases_dir()})
    with Host.open(spec, policy) as host:
        handover = host.handover(load_case_set(policy.cases_dir)) if host.role.handover else None
        slot = host.slot(handover=handover)
        try:
            with tempfile.TemporaryDirectory(prefix=f"diageval-diagnose-{os.getpid()}-") as tmp:  # remove_stale_boxes
                attempt = slot.diagnose(bundle.root, Path(tmp), bundle_id=secrets.token_hex(16))
                for name in (STDOUT_NAME, STDERR_NAME):
                    path = Path(tmp) / name
                    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
                    if text:
                        sys.stderr.write(inert(text if text.endswith("\n") else text + "\n"))  # its words: inert
        finally:
            slot.close()
    return attempt


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
