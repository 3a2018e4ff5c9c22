"""Real-size traces: import, ``trace stats``, ``rules`` (and ``hta``) on a trace of a given size, with peak memory.

    python benchmarks/big_trace.py [--sizes 100 400] [--source TRACE] [--workdir DIR] [--hta-max-mb 100]

For each size (MB of trace JSON) it builds, once, a Kineto trace by repeating a real one (default: the A100
rank-0 trace in the real-traces folder, ``gpu-jobs/hta-negative-queue``): every copy's timestamps start
after the previous copy ends, and its step numbers, flow ids and correlation ids are offset, so the result
reads like one long job. Traces are written under ``--workdir`` (default ``/tmp/diageval-big-trace``), never
in the repo, and reused by later runs. Then each measurement runs in its own process (wall seconds, MB/s
of trace JSON, and peak RSS from ``wait4``):

    gunzip       inflating the imported ``trace.json.gz`` alone: the ceiling for any reader of the bundle
    reader       the shared trace reader (``iter_trace_events``) over the plain JSON, events discarded
    json.loads   the same bytes decoded whole (seconds exclude reading the file; RSS includes the bytes)
    orjson       the same with orjson.loads, when installed
    import       ``diageval bundle import`` of the plain JSON (reads it once, gzips it into the bundle)
    trace stats  ``diageval trace stats BUNDLE``, when this checkout has that command
    rules        the rules diagnoser on the bundle (reads its gzipped trace), in the measured process: the
                 sandbox of ``diageval diagnose`` reaps its processes in their own pid namespace, so their
                 CPU time and RSS never reach ``wait4``
    hta          the same for hta, when traceinsight is installed and the trace is at most ``--hta-max-mb``
                 (HTA held 13.9 GB for 452 MB in issue 14)

The machine may be shared: the load average is printed before and after each size, and every row of one
size is measured in the same minutes, so compare rows within a column rather than with other days'
numbers. Every row runs ``--repeat`` times (default 3; hta once) and shows the median seconds and the
largest peak RSS. Beside wall-clock MB/s it prints MB per CPU-second (user + system time of the process
and its children, or of the decode alone for reader/json.loads/orjson): on a loaded machine a process
gets a fraction of a core, and CPU time is what the code costs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diageval.paths import real_traces_dir

DEFAULT_SOURCE = Path("gpu-jobs/hta-negative-queue/rank0.json.gz")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = ("correlation", "External id")

_READER = """
import json, sys, time
from diageval.bundle.trace_stream import StreamState, iter_trace_events
state = StreamState()
t, c = time.perf_counter(), time.process_time()
for _ in iter_trace_events(sys.argv[1], state):
    pass
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "events": state.n_events,
                  "truncated": state.truncated}))
"""
_WHOLE = """
import json, sys, time
decode = __import__(sys.argv[2]).loads
data = open(sys.argv[1], "rb").read()
t, c = time.perf_counter(), time.process_time()
doc = decode(data)
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "events": len(doc["traceEvents"])}))
"""
_GUNZIP = """
import json, sys, time, zlib
t, c = time.perf_counter(), time.process_time()
z = zlib.decompressobj(wbits=31)
n = 0
with open(sys.argv[1], "rb") as fh:
    while block := fh.read(1 << 20):
        n += len(z.decompress(block))
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "bytes": n}))
"""
_CLI = "from diageval.cli import main; main()"
# A diagnoser run in this process, not in the sandbox `diageval diagnose` uses: the box's processes are
# reaped inside their own pid namespace, so wait4 on the CLI sees neither their CPU time nor their RSS.
_DIAGNOSE = """
import json, sys, time
from pathlib import Path
from diageval.bundle.model import EvidenceBundle
from diageval.hosting.registry import resolve_diagnoser
diagnoser = resolve_diagnoser(sys.argv[1]).factory()
t = time.perf_counter()
d = diagnoser.diagnose(EvidenceBundle.open(Path(sys.argv[2])))
print(json.dumps({"seconds": time.perf_counter() - t, "findings": len(d.findings), "abstain": d.abstain is not None}))
"""


def build_trace(source: Path, target_mb: float, out: Path) -> tuple[int, int]:
    """Write ``out`` (plain JSON) of about ``target_mb`` MB from copies of ``source``; (bytes, events)."""
    with gzip.open(source) if source.name.endswith(".gz") else open(source, "rb") as fh:
        doc = json.load(fh)
    events = [e for e in doc.pop("traceEvents") if isinstance(e, dict)]
    try:
        import orjson

        dumps = orjson.dumps
    except ImportError:  # orjson only speeds the build up
        def dumps(obj):
            return json.dumps(obj, separators=(",", ":")).encode()
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + (e.get("dur") if isinstance(e.get("dur"), (int, float)) else 0) for e in timed) - t0
    steps = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    step_shift = max(steps) - min(steps) + 1 if steps else 0
    ids = [e["id"] for e in events if isinstance(e.get("id"), int)]
    ids += [e["args"][k] for e in events if isinstance(e.get("args"), dict) for k in _ID_ARGS
            if isinstance(e["args"].get(k), int)]
    id_shift = max(ids) + 1 if ids else 0

    target = int(target_mb * 1e6)
    tmp = out.with_name(out.name + ".part")
    n_bytes = n_events = 0
    with open(tmp, "wb") as fh:
        head = dumps(doc)[:-1] + b',"traceEvents":[\n'
        fh.write(head)
        n_bytes += len(head)
        copy = 0
        while n_bytes < target:
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += copy * (span + 1000)
                if (m := _STEP.match(str(e.get("name", "")))) is not None:
                    e["name"] = f"ProfilerStep#{int(m.group(1)) + copy * step_shift}"
                if isinstance(e.get("id"), int):
                    e["id"] += copy * id_shift
                if isinstance(e.get("args"), dict) and any(k in e["args"] for k in _ID_ARGS):
                    e["args"] = {k: v + copy * id_shift if k in _ID_ARGS and isinstance(v, int) else v
                                 for k, v in e["args"].items()}
                line = (b",\n" if n_events else b"") + dumps(e)
                fh.write(line)
                n_bytes += len(line)
                n_events += 1
            copy += 1
        fh.write(b"\n]}\n")
        n_bytes += 4
    os.replace(tmp, out)
    return n_bytes, n_events


def measure(argv: list[str], cwd: Path | None = None) -> dict:
    """Run ``argv``; wall seconds, peak RSS (MB), exit code, and its stdout parsed as JSON when it is."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    result = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
              "rc": proc.returncode}
    try:
        result.update(json.loads(text.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        pass
    if proc.returncode != 0:
        result["error"] = (errors.strip().splitlines() or ["(no stderr)"])[-1][:200]
    return result


def _has_module(name: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True).returncode == 0


def _has_trace_stats() -> bool:
    return subprocess.run([sys.executable, "-c", _CLI, "trace", "stats", "--help"], capture_output=True).returncode == 0


def median_of(argv: list[str], repeat: int) -> dict:
    """``repeat`` runs: the median seconds and CPU seconds, the largest peak RSS (a failed run is shown)."""
    runs = [measure(argv) for _ in range(repeat)]
    failed = [r for r in runs if r["rc"] != 0]
    if failed:
        return failed[0]
    def med(key: str) -> float:
        return statistics.median(r.get(key, r["wall"]) for r in runs)
    return runs[0] | {"seconds": med("seconds"), "cpu": med("cpu"), "rss_mb": max(r["rss_mb"] for r in runs),
                      "runs": len(runs)}


def run_size(trace: Path, n_bytes: int, work: Path, hta_max_mb: float, repeat: int,
             only: set[str]) -> dict[str, dict]:
    """The rows in ``only`` (import always runs: the others read its bundle; it is shown when asked for)."""
    rows: dict[str, dict] = {}
    py = sys.executable
    if "reader" in only:
        rows["reader"] = median_of([py, "-c", _READER, str(trace)], repeat)
    if "json.loads" in only:
        rows["json.loads"] = median_of([py, "-c", _WHOLE, str(trace), "json"], repeat)
    if "orjson" in only:
        rows["orjson"] = (median_of([py, "-c", _WHOLE, str(trace), "orjson"], repeat) if _has_module("orjson")
                          else {"skipped": "orjson not installed"})
    bundle = work / f"bundle-{n_bytes}"
    cli_import = [py, "-c", _CLI, "bundle", "import", str(trace), "--out", str(bundle)]
    imports = []
    for _ in range(repeat if "import" in only else 1):
        shutil.rmtree(bundle, ignore_errors=True)
        imports.append(measure(cli_import))
        if imports[-1]["rc"] != 0:
            rows["import"] = imports[-1]
            return rows
    rows["import"] = imports[0] | {"seconds": statistics.median(r["wall"] for r in imports),
                                   "cpu": statistics.median(r["cpu"] for r in imports),
                                   "rss_mb": max(r["rss_mb"] for r in imports)}
    if "import" not in only:
        del rows["import"]
    gz = next(bundle.glob("rank*/trace.json.gz"))
    if "gunzip" in only:
        rows["gunzip"] = median_of([py, "-c", _GUNZIP, str(gz)], repeat)
    if "trace stats" in only:
        rows["trace stats"] = (median_of([py, "-c", _CLI, "trace", "stats", str(bundle)], repeat)
                               if _has_trace_stats() else {"skipped": "no 'diageval trace stats' in this checkout"})
    if "rules" in only:
        rows["rules"] = median_of([py, "-c", _DIAGNOSE, "rules", str(bundle)], repeat)
    if "hta" not in only:
        pass
    elif not _has_module("hta"):
        rows["hta"] = {"skipped": "traceinsight not installed"}
    elif n_bytes / 1e6 > hta_max_mb:
        rows["hta"] = {"skipped": f"trace over --hta-max-mb {hta_max_mb:g}"}
    elif "hta" in only:
        rows["hta"] = measure([py, "-c", _DIAGNOSE, "hta", str(bundle)])
    shutil.rmtree(bundle, ignore_errors=True)
    return rows


ORDER = ["gunzip", "reader", "json.loads", "orjson", "import", "trace stats", "rules", "hta"]


def _cell(row: dict, n_bytes: int) -> str:
    if "skipped" in row:
        return f"skipped: {row['skipped']}"
    if row.get("rc"):
        return f"FAILED rc={row['rc']}: {row.get('error', '')}"
    seconds = row.get("seconds", row["wall"])
    cpu = row.get("cpu") or seconds
    return (f"{seconds:7.2f} s {n_bytes / seconds / 1e6:6.1f} MB/s {n_bytes / cpu / 1e6:6.1f} MB/cpu-s "
            f"{row['rss_mb']:6.0f} MB")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[100, 400], help="MB of trace JSON")
    ap.add_argument("--source", type=Path, default=None, help="a real Kineto trace to repeat")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "diageval-big-trace")
    ap.add_argument("--hta-max-mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each row (hta: one); the median is shown")
    ap.add_argument("--rows", nargs="+", choices=ORDER, default=ORDER, help="the measurements to make (default: all)")
    ap.add_argument("--build-one", nargs=3, metavar=("SOURCE", "MB", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build_one:  # in its own process, so that the measured children do not inherit its memory
        n_bytes, n_events = build_trace(Path(args.build_one[0]), float(args.build_one[1]), Path(args.build_one[2]))
        print(json.dumps({"bytes": n_bytes, "events": n_events}))
        return 0
    source = args.source or real_traces_dir() / DEFAULT_SOURCE
    if not source.is_file():
        print(f"source trace not found: {source} (set DIAGEVAL_DATA or pass --source)", file=sys.stderr)
        return 1
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"source {source}; traces in {args.workdir}; {os.cpu_count()} CPUs; "
          f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    columns: list[tuple[str, int, int, dict]] = []
    loads: list[tuple[float, float, float]] = []
    for size in args.sizes:
        trace = args.workdir / f"{source.name.split('.')[0]}-{size:g}MB.rank0.json"
        n_events = None
        if not trace.exists():
            built = measure([sys.executable, __file__, "--build-one", str(source), f"{size:g}", str(trace)])
            if built["rc"]:
                print(f"building {trace} failed: {built.get('error')}", file=sys.stderr)
                return 1
            n_events = built["events"]
            print(f"built {trace} ({built['bytes'] / 1e6:.0f} MB, {n_events} events) in {built['wall']:.0f} s")
        n_bytes = trace.stat().st_size
        rows = run_size(trace, n_bytes, args.workdir, args.hta_max_mb, args.repeat, set(args.rows))
        n_events = rows.get("reader", {}).get("events", n_events)
        columns.append((f"{size:g} MB", n_bytes, n_events or 0, rows))
        loads.append(os.getloadavg())
        print(f"measured {size:g} MB; load average now {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)

    width = 58
    print()
    heads = [f"{name}: {b / 1e6:.0f} MB JSON, {e} events" for name, b, e, _ in columns]
    print(f"{'':12s}" + "".join(f"{h:>{width}s}" for h in heads))
    print(f"{'':12s}" + "".join(f"{'seconds      MB/s   MB/cpu-s  peak RSS':>{width}s}" for _ in columns))
    for key in [k for k in ORDER if k in args.rows]:
        print(f"{key:12s}" + "".join(f"{_cell(rows.get(key, {'skipped': 'not run'}), b):>{width}s}"
                                     for _, b, _, rows in columns))
    print(f"\nload average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          "(1, 5, 15 min; above the CPU count means other work shared the cores)")
    print("load average (1, 5, 15 min) after each size: "
          + "; ".join(f"{name}: {' '.join(f'{x:.1f}' for x in la)}" for (name, _, _, _), la in zip(columns, loads)))
    print("reader, json.loads, orjson, gunzip: decode seconds and CPU only; import, stats, rules, hta: the whole"
          " command (CPU of it and its children); MB/s always of the trace's JSON bytes; median of --repeat runs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
