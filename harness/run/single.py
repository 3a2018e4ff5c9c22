"""``diageval diagnose``: run one diagnoser on one bundle folder and show what it claims. No scoring.

Meant for people developing a diagnoser, so decided here: an in-process diagnoser runs right in this
process (a crash shows its full traceback; no timeout), a ``cmd:`` diagnoser runs exactly as in a run
(timeout, output validated) with its stdout and stderr passed through afterwards. Reference diagnosers
get the corpus of ``--cases``; no bundle is mapped to a case here, so ``oracle`` abstains.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosis import Diagnosis
from diageval.run.attempt import Attempt
from diageval.run.registry import ResolvedDiagnoser


def diagnose_bundle(resolved: ResolvedDiagnoser, bundle_dir: Path, *, timeout: float, cases_dir: Path | None = None) -> Attempt:
    bundle = EvidenceBundle.open(Path(bundle_dir))  # a clear BundleError before anything runs
    if resolved.kind == "command":
        with tempfile.TemporaryDirectory(prefix="diageval-diagnose-") as tmp:
            r = resolved.factory().run(bundle.root, Path(tmp), timeout)
            for name, stream in (("stdout.txt", sys.stderr), ("stderr.txt", sys.stderr)):
                text = (Path(tmp) / name).read_text(encoding="utf-8", errors="replace")
                if text:
                    stream.write(text if text.endswith("\n") else text + "\n")
        return Attempt(status=r.status, diagnosis=r.diagnosis, error=r.error, seconds=r.seconds)

    import time

    diagnoser = resolved.factory()
    if resolved.needs_corpus and hasattr(diagnoser, "prepare"):
        from diageval.cases.load import load_case_set
        from diageval.run.corpus import ReferenceCorpus

        diagnoser.prepare(ReferenceCorpus.from_case_set(load_case_set(cases_dir)))
    start = time.perf_counter()
    result = diagnoser.diagnose(bundle)
    seconds = time.perf_counter() - start
    payload = result.model_dump(mode="json") if isinstance(result, Diagnosis) else result
    return Attempt(status="ok", diagnosis=Diagnosis.model_validate(payload), seconds=seconds)


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
