"""Speed and memory of the rules diagnoser's one-pass trace reader, against ``json.load`` of the same file.

    python benchmarks/trace_reader.py [TRACE_OR_BUNDLE ...]

With no argument it reads the real traces in ../shared/real-traces. Prints, per file: events, MB of
JSON, seconds and MB/s for ``summarize_trace`` (stream + aggregate), seconds for a plain ``json.load``,
and the peak Python heap of each (tracemalloc; it slows both, so speed and memory are measured in
separate passes).
"""

from __future__ import annotations

import gzip
import json
import sys
import time
import tracemalloc
from pathlib import Path

from diageval.bundle.trace_summary import summarize_trace
from diageval.paths import real_traces_dir

REAL = real_traces_dir()


def _files(args: list[str]) -> list[Path]:
    roots = [Path(a) for a in args] or [REAL]
    out: list[Path] = []
    for root in roots:
        if root.is_file():
            out.append(root)
        else:
            out += sorted(
                p for p in root.rglob("*")
                if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name != "bundle.json"
            )
    return out


def _json_load(path: Path) -> None:
    with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as fh:
        json.load(fh)


def _peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def main(argv: list[str]) -> int:
    files = _files(argv)
    if not files:
        print("no trace files found", file=sys.stderr)
        return 1
    print(f"{'file':48s} {'events':>8s} {'MB json':>8s} {'reader s':>9s} {'MB/s':>7s} {'json.load s':>11s}"
          f" {'reader MB':>9s} {'json MB':>8s}")
    total_bytes = total_s = 0.0
    for path in files:
        s = summarize_trace(path)
        started = time.perf_counter()
        _json_load(path)
        load_s = time.perf_counter() - started
        peak_reader = _peak_mb(lambda: summarize_trace(path))
        peak_json = _peak_mb(lambda: _json_load(path))
        total_bytes += s.json_bytes
        total_s += s.parse_seconds
        name = "/".join(path.parts[-2:])[-48:]
        print(f"{name:48s} {s.n_events:8d} {s.json_bytes / 1e6:8.2f} {s.parse_seconds:9.3f} {s.bytes_per_second / 1e6:7.1f}"
              f" {load_s:11.3f} {peak_reader:9.1f} {peak_json:8.1f}")
    print(f"all: {total_bytes / 1e6:.1f} MB of JSON in {total_s:.2f} s = {total_bytes / total_s / 1e6:.1f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
