"""Speed of ``diageval trace stats`` on every real trace (issue 10 asks for >= 50 MB/s of JSON).

    python benchmarks/trace_stats_speed.py [--repeats N] [TRACE_OR_FOLDER ...]

With no argument it measures every ``*.json``/``*.json.gz`` under the data folder ($DIAGEVAL_DATA, else
../shared/real-traces). Per file: events, MB of JSON (decompressed), the median over ``--repeats`` of
the seconds ``trace_stats`` takes (stream + measure) and MB/s; and, for reference, the MB/s of the bare
streaming reader (``iter_trace_events``, nothing done per event) and of gunzip alone on the same file.
The last lines give the median and minimum MB/s over files and the total, with n. Timings on a shared,
loaded machine vary: run it with --repeats 3 or more and read the medians.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path

from diageval.bundle.trace_stats import trace_stats
from diageval.bundle.trace_stream import StreamState, iter_trace_events
from diageval.paths import real_traces_dir


def _files(args: list[str]) -> list[Path]:
    roots = [Path(a) for a in args] or [real_traces_dir()]
    out: list[Path] = []
    for root in roots:
        out += [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")))
    return out


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    files = _files(args.paths)
    if not files:
        raise SystemExit(f"no traces found (looked in {args.paths or real_traces_dir()})")
    print(f"{'trace':<60} {'events':>8} {'MB':>6} {'stats s':>8} {'MB/s':>6} {'reader MB/s':>11} {'gunzip MB/s':>11}")
    rates, total_mb, total_s = [], 0.0, 0.0
    for f in files:
        stats = trace_stats(f)  # warm the page cache, and the figures' size
        mb = stats.json_bytes / 1e6
        secs = statistics.median(_timed(lambda: trace_stats(f)) for _ in range(args.repeats))
        reader = statistics.median(
            _timed(lambda: [None for _ in iter_trace_events(f, StreamState())]) for _ in range(args.repeats)
        )
        opener = gzip.open if f.name.endswith(".gz") else open
        gunzip = _timed(lambda: opener(f, "rb").read())
        rate = mb / secs if secs else float("inf")
        rates.append(rate)
        total_mb += mb
        total_s += secs
        name = str(f.relative_to(f.parents[2])) if len(f.parents) > 2 else f.name
        print(f"{name[-60:]:<60} {stats.events:>8} {mb:>6.1f} {secs:>8.3f} {rate:>6.1f} {mb / reader:>11.1f} {mb / gunzip:>11.1f}")
    print(f"trace stats MB/s over n={len(files)} files: median {statistics.median(rates):.1f}, min {min(rates):.1f};"
          f" total {total_mb:.1f} MB in {total_s:.2f} s = {total_mb / total_s:.1f} MB/s ({args.repeats} repeats, medians)")


if __name__ == "__main__":
    main()
