"""The calibration record: how each graded cause's rungs read when verified, written from truth records.

Reads the verifications stored in the truth records of one or more ``$DIAGEVAL_HOME`` folders (each from
its own ``diageval run`` or ``diageval verify``: a fresh-clone CI's ``.diageval`` is the usual one), groups
the built-in corpus' positive cases by their labeled cause, and prints, per rung: the verified ratio
(median over the homes, with its lowest and highest reading), the pairs the test took, the difficulty the
ratio measured (hard below z 3, easy from 10: ``recording/truth.py``) and how many verifies manifested.
Then the manifestation test's power at the floor sd for ratios near the limit
(``manifest_test.power``), which is what a near-limit rung is aimed by. With ``--write PAGE`` it writes
the whole page (``docs/calibration.md``), method and numbers, so nothing on it is typed by hand.

Usage: python benchmarks/calibration_record.py HOME [HOME...] [--write docs/calibration.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from diageval.cases.load import load_case_set
from diageval.recording.manifest_test import RECORDING_SHIFT_SD, power
from diageval.recording.truth import EASY_FROM_Z, HARD_BELOW_Z, TruthRecord, Verification

POWER_RATIOS = (1.2, 1.25, 1.3, 1.35, 1.4, 1.5)
POWER_MIN_RATIO = 1.2

METHOD = f"""\
# Calibration record

Written by `python benchmarks/calibration_record.py HOME... --write docs/calibration.md` from the truth records
of the named homes (each a `$DIAGEVAL_HOME` after a `diageval run` or `diageval verify`); nothing on this
page is typed by hand. Run it again after a fresh-clone CI (its clone's `.diageval`) to bring it up to date.

How a rung is aimed (the method; [cases.md](cases.md) has the test itself): a positive case counts only if
the manifestation test carries it, and the test's power at a true ratio is `manifest_test.power(ratio, sd,
min_ratio)`. A rung meant to sit near the detection limit (tag `near-limit`) is aimed where the power stays
high on a day that reads it 0.1 lower and where it stays under the hard line (z {HARD_BELOW_Z:g}) when a
verify's estimate comes out high. Build it from a fault whose cost scales with the machine's speed (a slower
rank, more rows, a shared core, more ops, more data to decode): a fixed sleep shrinks as a ratio when a loaded
machine stretches the healthy step, and grows on a quiet one. Causes a version or configuration brings have no
severity knob: their rungs are the same change on another workload, two or more per cause at different ratios,
so one rung moving across the hard line between runs still leaves the cause graded.
"""


def verifications(home: Path) -> dict[str, tuple[datetime, Verification]]:
    """case id -> (when it was recorded, its verification) under ``home`` (the newest record of each case)."""
    newest: dict[str, tuple[datetime, Verification]] = {}
    for path in sorted((home / "bundles").glob("*.truth.json")):
        record = TruthRecord.model_validate_json(path.read_text())
        if record.role != "case" or record.verification is None:
            continue
        if record.case_id not in newest or newest[record.case_id][0] < record.recorded:
            newest[record.case_id] = (record.recorded, record.verification)
    return newest


def rung_rows(homes: list[Path]) -> tuple[dict[str, list[dict]], list[datetime]]:
    """cause -> one row per positive case verified in at least one home, ordered by median ratio; and when the
    verifications shown were recorded."""
    per_home = [{case_id: v for case_id, (_, v) in verifications(h).items()} for h in homes]
    when = [t for h in homes for t, _ in verifications(h).values()]
    corpus = load_case_set()
    rows: dict[str, list[dict]] = defaultdict(list)
    for loaded in corpus.cases:
        case = loaded.case
        if case.labels.expect != "diagnose" or not case.labels.causes:
            continue
        seen = [v[case.id] for v in per_home if case.id in v]
        if not seen:
            continue
        ratios = [v.ratio for v in seen]
        rows[case.labels.causes[0].category].append({
            "case": case.id,
            "near_limit": "near-limit" in case.tags,
            "ratio": statistics.median(ratios),
            "low": min(ratios),
            "high": max(ratios),
            "pairs": "/".join(str(v.repeats) for v in seen),
            "difficulty": "/".join(v.difficulty for v in seen),
            "manifested": sum(v.manifested for v in seen),
            "verifies": len(seen),
        })
    for cause_rows in rows.values():
        cause_rows.sort(key=lambda r: r["ratio"])
    return dict(sorted(rows.items())), when


def render(homes: list[Path]) -> str:
    rows, when = rung_rows(homes)
    span = f"{min(when):%Y-%m-%d} to {max(when):%Y-%m-%d}" if when else "none"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    load = os.getloadavg()[0]
    n_rungs = sum(len(r) for r in rows.values())
    out = [f"## Rungs as verified\n",
           f"Printed {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC at {commit} from {len(homes)} home(s) whose "
           f"verifications were recorded {span}; "
           f"{n_rungs} positive cases under {len(rows)} causes. Ratio: the test's estimate, median over the homes "
           f"[lowest, highest]; pairs and difficulty per home. A cause whose lowest rung is `hard` in every home "
           f"places a detection limit in every run.\n",
           "| cause | case | ratio [low, high] | pairs | difficulty | manifested |",
           "|---|---|---|---|---|---|"]
    for cause, cause_rows in rows.items():
        for r in cause_rows:
            name = r["case"] + (" (near-limit)" if r["near_limit"] else "")
            out.append(f"| `{cause}` | `{name}` | {r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}] | {r['pairs']} "
                       f"| {r['difficulty']} | {r['manifested']}/{r['verifies']} |")
    out += ["", "## The test's power near the limit", "",
            f"`manifest_test.power` at the recording-level floor sd {RECORDING_SHIFT_SD} and min_ratio "
            f"{POWER_MIN_RATIO} (20,000 simulated verifies each; machine load when printed {load:.1f}):", "",
            "| true ratio | " + " | ".join(f"{r:g}" for r in POWER_RATIOS) + " |",
            "|---|" + "---|" * len(POWER_RATIOS),
            "| power | " + " | ".join(f"{power(r, RECORDING_SHIFT_SD, POWER_MIN_RATIO):.2f}" for r in POWER_RATIOS)
            + " |", "",
            f"Difficulty is (ratio - 1) / noise: hard below {HARD_BELOW_Z:g}, easy from {EASY_FROM_Z:g}; "
            f"at the floor sd a ratio of {1 + HARD_BELOW_Z * RECORDING_SHIFT_SD:.2f} is the hard line.", ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("homes", nargs="+", type=Path)
    parser.add_argument("--write", type=Path, help="write the whole page (method and numbers) here")
    args = parser.parse_args()
    missing = [h for h in args.homes if not (h / "bundles").is_dir()]
    if missing:
        parser.error(f"no bundles/ folder under {', '.join(map(str, missing))}: name a $DIAGEVAL_HOME")
    body = render(args.homes)
    if args.write:
        args.write.write_text(METHOD + "\n" + body)
        print(f"wrote {args.write}")
    else:
        print(body)


if __name__ == "__main__":
    main()
