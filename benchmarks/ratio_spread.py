"""How far a case's verified ratio moves from one verify to the next: the measurement behind
``diageval.recording.verify.RUN_TO_RUN_MARGIN``.

Reads the verifications stored in the truth records of several ``$DIAGEVAL_HOME`` folders (each from its
own run of ``diageval verify`` or ``diageval run``, e.g. fresh-clone CI runs), keeps the cases verified in
all of them with the same recipe (the same cache key: case, parameters and recording code), and prints the
quantiles of each run's ratio over the case's median ratio, then the cases whose worst run came within the
margin of their min_ratio.

Usage: python benchmarks/ratio_spread.py HOME HOME [HOME...]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from diageval.recording.truth import TruthRecord
from diageval.recording.verify import RUN_TO_RUN_MARGIN


def verified_ratios(home: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(case id, cache key) -> (ratio, min_ratio) of each positive case verified under ``home``."""
    found = {}
    for path in sorted((home / "bundles").glob("*.truth.json")):
        record = TruthRecord.model_validate_json(path.read_text())
        if record.role == "case" and record.verification is not None:
            found[(record.case_id, record.key)] = (record.verification.ratio, record.verification.min_ratio)
    return found


def main() -> None:
    homes = [Path(h) for h in sys.argv[1:]]
    if len(homes) < 2:
        sys.exit(__doc__)
    runs = [verified_ratios(h) for h in homes]
    common = sorted(set.intersection(*(set(r) for r in runs)))
    relative = []
    worst = {}  # recipe -> (worst ratio, min_ratio as the last HOME has it)
    for recipe in common:
        ratios = [r[recipe][0] for r in runs]
        median = statistics.median(ratios)
        relative += [x / median for x in ratios]
        worst[recipe] = (min(ratios), runs[-1][recipe][1])
    if not relative:
        sys.exit("no case was verified under every HOME")
    relative.sort()
    print(f"{len(common)} cases verified in all {len(homes)} runs; n = {len(relative)} (case, run) ratios")
    print("run's ratio / case's median ratio, quantiles:")
    for q in (0.01, 0.025, 0.05, 0.10, 0.25, 0.50):
        print(f"  {q:6.3f}  {relative[min(len(relative) - 1, int(q * len(relative)))]:.3f}")
    close = [(recipe, w, m) for recipe, (w, m) in worst.items() if w < RUN_TO_RUN_MARGIN * m]
    print(f"cases whose worst run came under {RUN_TO_RUN_MARGIN} x min_ratio: {len(close)}")
    for (case_id, _), w, m in sorted(close, key=lambda t: t[1] / t[2]):
        print(f"  {case_id:40s} worst ratio {w:.2f}  min_ratio {m:.2f}  ({w / m:.2f} x)")


if __name__ == "__main__":
    main()
