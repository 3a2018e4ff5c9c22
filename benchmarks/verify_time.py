"""Where a verify's time goes (issue 22 item 6: the whole corpus verified in <= 5 min on 2 cores), read from a bundle
cache that a verify, a run or ``manifestation_calibration.py`` filled; nothing is recorded.

Every recording appends a line to the cache's ``index.jsonl`` when it is published, so the time from one line to
the next is what the next recording cost end to end (the parent's work before it, starting the ranks, the
workload's setup, its steps, the trace export, writing the bundle, and, at a case's boundary, the previous case's
test and label checks). The steps' own span (first ``t_start`` to last ``t_end`` in the bundle's ``steps.jsonl``)
is split from the rest. Gaps over ``--max-gap`` seconds (another phase of a CI run, a pause) are left out. The
floors printed at the end are what the same recordings would have cost had every case stopped after one pair, and
after ``LOOKS[0]`` pairs (the first look): the measured cost of the first one (or ``LOOKS[0]``) recordings of each
case id and role (a twin, a case, a regression's baseline and candidate; a healthy case's one recording), summed.
A recording whose cost was not timed (the first, or one after a long gap) counts its steps' span alone.

Usage: python benchmarks/verify_time.py CACHE [--max-gap 30]
CACHE is a bundle cache folder (holding ``index.jsonl`` and ``evidence/``), e.g. ``$DIAGEVAL_HOME/bundles`` or a
``manifestation_calibration.py`` round folder.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import Counter
from datetime import datetime
from pathlib import Path

from diageval.recording.manifest_test import LOOKS


def quantiles(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=10) if len(xs) > 1 else [xs[0]] * 9
    return f"median {statistics.median(xs):.2f} s (10th-90th percentile {q[0]:.2f}-{q[-1]:.2f}), sum {sum(xs):.0f} s"


def step_span(folder: Path) -> float | None:
    """First step start to last step end of a recorded bundle; None for one without a step log."""
    path = folder / "steps.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    return max(r["t_end"] for r in rows) - min(r["t_start"] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cache", type=Path)
    ap.add_argument("--max-gap", type=float, default=30.0)
    args = ap.parse_args()
    index = args.cache / "index.jsonl"
    if not index.is_file():
        raise SystemExit(f"{index}: no such file (expected a bundle cache folder holding index.jsonl)")
    rows = [json.loads(line) for line in index.read_text().splitlines() if line.strip()]
    stamps = [datetime.fromisoformat(r["recorded"]).timestamp() for r in rows]
    costs, spans, rest, skipped = [], [], [], 0
    per_case: Counter = Counter()
    cost_of: dict[str, float] = {}  # key -> its measured cost (or its steps' span when not timed)
    for prev, row, stamp in zip([None] + stamps, rows, stamps):
        span = step_span(args.cache / "evidence" / row["key"])
        gap = stamp - prev if prev is not None else math.inf
        if gap > args.max_gap or span is None or span > gap:  # the first, a pause, a derived bundle, or a cached one
            if span is not None:
                cost_of.setdefault(row["key"], span)
            skipped += prev is not None
            continue
        cost_of[row["key"]] = gap
        costs.append(gap)
        spans.append(span)
        rest.append(gap - span)
        per_case[row["case_id"]] += 1
    if not costs:
        raise SystemExit(f"{index}: no recording followed another within {args.max_gap:.0f} s")
    print(f"{args.cache}: {len(rows)} index lines, {len(costs)} recordings timed ({skipped} left out: the first, "
          f"derived or cached bundles, gaps over {args.max_gap:.0f} s)")
    print(f"  a recording end to end: {quantiles(costs)}")
    print(f"  its steps:              {quantiles(spans)}")
    print(f"  the rest (start, setup, trace export, bundle, tests): {quantiles(rest)}")
    print(f"  share of the time outside the steps: {sum(rest) / sum(costs):.0%}")
    print(f"  {len(per_case)} case ids (twins count under their case's id)")
    for pairs in sorted({1, LOOKS[0]}):
        n, total = first_recordings(rows, cost_of, pairs)
        print(f"  every case stopping after {pairs} pair(s): {n} recordings, {total:.0f} s (the first {pairs} recording(s) of "
              f"each case id and role, at their measured cost)")


def first_recordings(rows: list[dict], cost_of: dict[str, float], per_role: int) -> tuple[int, float]:
    """(recordings, seconds) of the first ``per_role`` recordings of each (case id, role) in index order."""
    seen: Counter = Counter()
    n, total = 0, 0.0
    for row in rows:
        who = (row["case_id"], row["role"])
        if seen[who] < per_role and row["key"] in cost_of:
            seen[who] += 1
            n += 1
            total += cost_of[row["key"]]
    return n, total


if __name__ == "__main__":
    main()
