"""Seconds per bundle for the ``hta`` diagnoser, and what it concludes, on real traces and any bundles given.

    python benchmarks/hta_real_traces.py [BUNDLE_DIR ...] [--repeats 3]

Every folder of ../shared/real-traces/hta is imported into a temporary bundle (``diageval bundle
import``); bundle folders given on the command line (e.g. recorded ones under .diageval/bundles) are
added as they are. Each is diagnosed ``--repeats`` times by one ``HTADiagnoser`` (HTA already imported);
the table shows the median and max seconds, the outcome (ok / abstain / hta_error) and the findings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed, DiagnoserUnavailable
from diageval.paths import real_traces_dir

REAL_TRACES = real_traces_dir() / "hta"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundles", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    try:
        from diageval.diagnosers.hta_adapter import HTADiagnoser

        diagnoser = HTADiagnoser()
    except DiagnoserUnavailable as exc:
        print(f"hta unavailable: {exc}")
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        targets: list[tuple[str, Path]] = []
        if REAL_TRACES.is_dir():
            for d in sorted(p for p in REAL_TRACES.iterdir() if p.is_dir()):
                targets.append((f"real:{d.name}", import_traces([d], Path(tmp) / d.name)))
        else:
            print(f"(no real traces at {REAL_TRACES})")
        targets += [(f"bundle:{p.name[:12]}", p) for p in args.bundles]

        print(f"{'bundle':<32} {'device':<6} {'ranks':>5} {'median s':>9} {'max s':>7}  outcome")
        for label, path in targets:
            bundle = EvidenceBundle.open(path)
            times, outcome = [], ""
            for _ in range(max(1, args.repeats)):
                start = time.perf_counter()
                try:
                    d = diagnoser.diagnose(bundle)
                    outcome = (
                        f"abstain: {d.abstain.reason}" if d.abstain else
                        "ok: " + (", ".join(f"{f.category} ({f.kind}, conf {f.confidence:.2f})" for f in d.findings) or "no findings")
                    )
                except DiagnoserFailed as exc:
                    outcome = f"{exc.status}: {exc}"
                times.append(time.perf_counter() - start)
            print(f"{label:<32} {bundle.env.device:<6} {len(bundle.trace_paths()):>5} "
                  f"{statistics.median(times):>9.2f} {max(times):>7.2f}  {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
