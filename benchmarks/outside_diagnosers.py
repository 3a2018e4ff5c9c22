"""Seconds per bundle and outcome of the outside adapters (tbprofiler, gpu-idle, changepoint,
flightrecorder) on the real traces and on any bundle folders given.

    python benchmarks/outside_diagnosers.py [BUNDLE_DIR ...] [--repeats 3] [--diagnosers a,b]

Real traces come from $DIAGEVAL_DATA, else ../shared/real-traces: every folder holding ``*.json.gz`` is
imported into a temporary bundle. Each bundle is diagnosed ``--repeats`` times by one instance per
adapter (its library already imported); printed: median and max seconds, then ok (findings), abstain
(reason) or the adapter's status.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed
from diageval.hosting.registry import resolve_diagnoser

ADAPTERS = "tbprofiler,gpu-idle,changepoint,flightrecorder"


def real_trace_folders() -> list[Path]:
    root = None
    for candidate in (os.environ.get("DIAGEVAL_DATA"), Path(__file__).resolve().parents[2] / "shared" / "real-traces"):
        if candidate and Path(candidate).is_dir():
            root = Path(candidate)
            break
    return sorted({p.parent for p in root.rglob("*.json.gz")}) if root else []


def outcome_of(diagnoser, bundle: EvidenceBundle) -> str:
    try:
        d = diagnoser.diagnose(bundle)
    except DiagnoserFailed as exc:
        return f"{exc.status}: {str(exc)[:100]}"
    if d.abstain:
        return f"abstain: {d.abstain.reason[:100]}"
    return "ok: " + (", ".join(f"{f.category} ({f.kind} {f.confidence:.2f}{' ranks ' + str(f.ranks) if f.ranks else ''})"
                               for f in d.findings) or "no findings")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundles", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--diagnosers", default=ADAPTERS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        targets = [(f"real:{d.parent.name}/{d.name}", import_traces([d], Path(tmp) / f"{d.parent.name}-{d.name}"))
                   for d in real_trace_folders()]
        targets += [(f"bundle:{p.name[:12]}", p) for p in args.bundles]
        for name in args.diagnosers.split(","):
            try:
                diagnoser = resolve_diagnoser(name).factory()
            except Exception as exc:
                print(f"\n{name}: unavailable: {exc}")
                continue
            print(f"\n{name}\n{'bundle':<48} {'median s':>9} {'max s':>7}  outcome")
            for label, path in targets:
                bundle = EvidenceBundle.open(path)
                times = []
                for _ in range(max(1, args.repeats)):
                    start = time.perf_counter()
                    outcome = outcome_of(diagnoser, bundle)
                    times.append(time.perf_counter() - start)
                print(f"{label:<48} {statistics.median(times):>9.2f} {max(times):>7.2f}  {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
