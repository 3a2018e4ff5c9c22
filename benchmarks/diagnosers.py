"""Diagnosers side by side on the corpus: quality (F1, misleading rate, false alarms) and speed.

    python benchmarks/diagnosers.py [--cases DIR] [--diagnosers rules,symptoms,hta,prior,null]
                                    [--runs-dir DIR] [--device cpu] [--jobs 1]

Each diagnoser goes through the normal ``diageval run`` pipeline (recordings are cached and shared, so
only the first diagnoser pays for them); the table prints each metric's point estimate with its
bootstrap 95% interval, n = scored cases and the case-set hash. Diagnosers that cannot run here (e.g.
``hta`` without traceinsight installed) are listed as unavailable, not silently dropped.

``trace MB/s`` is each diagnoser's throughput: the decompressed trace JSON of the bundles it diagnosed
divided by its own seconds on them (reference diagnosers that read no trace show what they skipped).
It also measures the rules diagnoser's trace reader alone: every trace of every bundle the runs used,
read once with ``summarize_trace``; bytes/s are of decompressed JSON (and of gzip bytes on disk).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_summary import summarize_trace
from diageval.cases.load import load_case_set
from diageval.diagnosers.base import DiagnoserUnavailable
from diageval.paths import default_cases_dir
from diageval.hosting import HostError
from diageval.run.pipeline import RunError, RunOptions, run_diagnoser
from diageval.scoring.metrics import BOARD, METRICS

COLUMNS = [(key, METRICS[key].label) for key in BOARD]  # the leaderboard's columns, from the metric table


def _fmt(metric) -> str:
    if metric is None or metric.value is None:
        return "n/a"
    if metric.ci is None:
        return f"{metric.value:.3f}"
    return f"{metric.value:.3f} [{metric.ci[0]:.2f},{metric.ci[1]:.2f}]"


def trace_json_bytes(bundle_dir: Path) -> int:
    """Decompressed size of a bundle's traces (gzip's trailer holds it mod 2**32; traces here are smaller)."""
    total = 0
    for path in EvidenceBundle.open(bundle_dir).trace_paths().values():
        if path.suffix == ".gz":
            with open(path, "rb") as fh:
                fh.seek(-4, 2)
                total += int.from_bytes(fh.read(4), "little")
        else:
            total += path.stat().st_size
    return total


def throughput(results, sizes: dict[str, int]) -> str:
    """MB of trace JSON per second of diagnoser time over the cases it answered."""
    seconds = sum(r.seconds or 0.0 for r in results if r.bundle_id in sizes)
    size = sum(sizes[r.bundle_id] for r in results if r.bundle_id in sizes and r.seconds)
    return f"{size / seconds / 1e6:.1f}" if seconds > 0 else "n/a"


def run_all(names: list[str], cases_dir: Path, runs_dir: Path, device: str, jobs: int):
    case_set = load_case_set(cases_dir)
    rows, bundles = [], set()
    for name in names:
        try:
            started = time.perf_counter()
            outcome = run_diagnoser(
                name, case_set, RunOptions(cases_dir=cases_dir, out_dir=runs_dir, device=device, jobs=jobs,
                                           run_id=f"bench-{name}-{case_set.hash[:8]}"),
            )
        except (HostError, DiagnoserUnavailable, RunError) as exc:
            rows.append((name, None, f"unavailable: {exc}", []))
            continue
        rows.append((name, outcome.summary, f"{time.perf_counter() - started:.1f} s wall", outcome.results))
        for r in outcome.results:
            if getattr(r, "bundle_id", None):
                bundles.add(r.bundle_id)
    return case_set, rows, bundles


def reader_speed(bundle_dirs: list[Path]) -> tuple[int, int, int, float]:
    """(traces, json bytes, gzip bytes, seconds) for reading every trace once."""
    n = json_bytes = disk = 0
    seconds = 0.0
    for d in bundle_dirs:
        for path in EvidenceBundle.open(d).trace_paths().values():
            s = summarize_trace(path)
            n += 1
            json_bytes += s.json_bytes
            disk += s.bytes_on_disk
            seconds += s.parse_seconds
    return n, json_bytes, disk, seconds


def _bundle_dirs(bundle_ids: set[str]) -> list[Path]:
    """The cached bundle folders the runs diagnosed."""
    from diageval.paths import bundle_cache_dir
    from diageval.recording.cache import bundles_root

    root = bundles_root(bundle_cache_dir())
    if not root.is_dir():
        return []
    found = []
    for p in sorted(root.iterdir()):
        if (p / "bundle.json").is_file() and EvidenceBundle.open(p).bundle_id in bundle_ids:
            found.append(p)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=None)
    ap.add_argument("--diagnosers", default="rules,symptoms,hta,prior,null")
    ap.add_argument("--runs-dir", type=Path, default=None,
                    help="Where the runs go (default: .diageval/bench-runs/<UTC time>, a fresh set every time)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    cases_dir = args.cases or default_cases_dir()
    runs_dir = args.runs_dir or Path(".diageval/bench-runs") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    case_set, rows, bundle_ids = run_all(args.diagnosers.split(","), cases_dir, runs_dir, args.device, args.jobs)

    print(f"\ncase set {case_set.hash[:12]} ({cases_dir}), taxonomy {case_set.taxonomy.version}; runs in {runs_dir}")
    print("each metric: point estimate [bootstrap 95% interval over cases]; n = scored cases")
    dirs = _bundle_dirs(bundle_ids)
    sizes = {EvidenceBundle.open(d).bundle_id: trace_json_bytes(d) for d in dirs}
    header = ["diagnoser", "n"] + [label for _, label in COLUMNS] + ["trace MB/s"]
    table = [header]
    for name, summary, note, results in rows:
        if summary is None:
            table.append([name, "-"] + ["-"] * (len(COLUMNS) + 1))
            print(f"  {name}: {note}", file=sys.stderr)
            continue
        m = summary.metrics
        table.append(
            [name, str(summary.counts.scored)] + [_fmt(getattr(m, key)) for key, _ in COLUMNS] + [throughput(results, sizes)]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))

    n, jb, disk, sec = reader_speed(dirs)
    if n and sec > 0:
        print(
            f"\ntrace reader (trace_summary, one pass): {n} traces in {len(dirs)} cached bundles,"
            f" {jb / 1e6:.1f} MB JSON ({disk / 1e6:.1f} MB gzip) in {sec:.2f} s:"
            f" {jb / sec / 1e6:.1f} MB/s JSON, {disk / sec / 1e6:.2f} MB/s gzip"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
