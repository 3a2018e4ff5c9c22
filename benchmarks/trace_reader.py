"""Speed and memory of the shared trace reader, against gunzip alone and ``json.load`` of the same file.

    python benchmarks/trace_reader.py [TRACE_OR_BUNDLE ...]

With no argument it reads the real traces in the real-traces folder (``$DIAGEVAL_DATA``, else
shared/real-traces beside the checkout). Prints, per file: events, MB of JSON, MB/s of inflating alone
(the ceiling for a .gz), of the reader alone (``iter_trace_events``), of ``summarize_trace`` (the rules
diagnoser's reader + aggregation) and of ``json.load``, and the peak Python heap of the reader and of
``json.load`` (tracemalloc; it slows both, so speed and memory are measured in separate passes). Each
speed is the fastest of three runs: on a shared machine other work only ever slows a run down.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
import tracemalloc
import zlib
from pathlib import Path

from diageval.bundle.trace_stream import StreamState, iter_trace_events
from diageval.bundle.trace_summary import summarize_trace
from diageval.paths import real_traces_dir

REAL = real_traces_dir()
REPEAT = 3


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


def _read_all(path: Path) -> int:
    state = StreamState()
    for _ in iter_trace_events(path, state):
        pass
    return state.json_bytes


def _gunzip(path: Path) -> None:
    if path.suffix != ".gz":
        return
    z = zlib.decompressobj(wbits=31)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            z.decompress(block)


def _best_seconds(fn) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


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
        print(f"no trace files found (looked in {', '.join(argv) or REAL})", file=sys.stderr)
        return 1
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          "(above the CPU count: other work shared the cores)")
    print(f"{'file':44s} {'events':>8s} {'MB json':>8s} {'gunzip':>7s} {'reader':>7s} {'summary':>7s} {'json':>7s}"
          f" {'reader MB':>9s} {'json MB':>8s}")
    totals = {"bytes": 0.0, "gunzip": 0.0, "reader": 0.0, "summary": 0.0, "json": 0.0}
    for path in files:
        n_bytes = _read_all(path)
        s = summarize_trace(path)
        secs = {
            "gunzip": _best_seconds(lambda: _gunzip(path)),
            "reader": _best_seconds(lambda: _read_all(path)),
            "summary": _best_seconds(lambda: summarize_trace(path)),
            "json": _best_seconds(lambda: _json_load(path)),
        }
        peak_reader = _peak_mb(lambda: _read_all(path))
        peak_json = _peak_mb(lambda: _json_load(path))
        totals["bytes"] += n_bytes
        for k, v in secs.items():
            totals[k] += v
        rate = {k: (f"{n_bytes / v / 1e6:7.1f}" if v > 1e-6 and (k != "gunzip" or path.suffix == ".gz") else "      -")
                for k, v in secs.items()}
        name = "/".join(path.parts[-2:])[-44:]
        print(f"{name:44s} {s.n_events:8d} {n_bytes / 1e6:8.2f} {rate['gunzip']} {rate['reader']} {rate['summary']}"
              f" {rate['json']} {peak_reader:9.1f} {peak_json:8.1f}")
    mb = totals["bytes"] / 1e6
    print(f"all {len(files)} files, {mb:.1f} MB of JSON: " + ", ".join(
        f"{k} {mb / totals[k]:.1f} MB/s" for k in ("reader", "summary", "json") if totals[k] > 0
    ) + " (MB/s of decompressed JSON; gunzip column: .gz files only)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
