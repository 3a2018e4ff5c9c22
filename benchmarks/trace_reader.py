"""Speed and memory of the shared trace reader, against gunzip alone and ``json.load`` of the same file.

    python benchmarks/trace_reader.py [TRACE_OR_BUNDLE ...]
    python benchmarks/trace_reader.py --stages TRACE     # where the reader's time goes, stage by stage
    python benchmarks/trace_reader.py --side-by-side TRACE [--repeat 3]   # json.loads vs reader vs summary
    python benchmarks/trace_reader.py --real-shapes [--sizes 450 1000]   # issue 43: the real trace repeated
    python benchmarks/trace_reader.py --interleaved BUNDLE [--repeat 3]  # json.loads and rules in one process
    python benchmarks/trace_reader.py --phases BUNDLE [--repeat 2]   # where rules' CPU time goes, phase by phase
    python benchmarks/trace_reader.py --peaks BUNDLE ...   # rules' and the summary's peak memory, bundle by bundle

With no argument it reads the real traces in the real-traces folder (``$DIAGEVAL_DATA``, else
shared/real-traces beside the checkout). Prints, per file: events, MB of JSON, MB/s of inflating alone
(the ceiling for a .gz), of the reader alone (``iter_trace_events``), of ``summarize_trace`` (the rules
diagnoser's reader + aggregation) and of ``json.load``, and the peak Python heap of the reader and of
``json.load`` (tracemalloc; it slows both, so speed and memory are measured in separate passes). Each
speed is the fastest of three runs: on a shared machine other work only ever slows a run down.

``--side-by-side TRACE [--repeat N]`` is issue 26's comparison on one (big) trace, measured in one run: ``json.loads``
of its bytes (the file read first, not timed), the shared reader alone, ``summarize_trace`` (what ``rules``
reads each trace with, its per-step arithmetic observer included) and ``summarize_trace`` with an unlimited
column budget (one read, memory growing with the trace). Each runs in a process of its own, in rounds (one
of each per round, so that a change of the machine's load hits every row alike); printed per row: the median
wall and CPU seconds, the largest peak RSS (``wait4``), how many times the trace was read, and the ratio of
each to ``json.loads``' in the same rounds. ``benchmarks/big_trace.py --build-one SOURCE 452 OUT`` makes the
452 MB trace of issue 26.

``--real-shapes [--sizes 450 1000] [--repeat 3]`` is issue 43's measurement: the A100 rank-0 trace of the real-traces
folder repeated to each size (written in ``--workdir``, default under the temp folder, and deleted after), the rows
above less the unlimited one plus ``typed decode`` (msgspec decoding the whole file at once into the reader's
``TraceEvent`` structs: what a compiled parser does with no window, no bound on memory and no Python per event) and
``rules`` (the whole rules diagnoser on a bundle imported from the trace, which holds it gzipped: inflating is part
of its time, not of ``json.loads``'), each row in its own process, in rounds; ratios of CPU seconds to
``json.loads`` and to the typed decode within each round (their median, and the lowest round's), the load average
after each round.

``--interleaved BUNDLE [--repeat 3]``: in one process, ``json.loads`` of a one-rank bundle's trace (inflated first,
untimed) and the whole ``rules`` diagnoser on the bundle (its gzipped trace), interleaved round by round; CPU and
wall seconds and their ratios per round, the lowest and the median (issue 43's target is this ratio), and the ratio of
each row's fastest round (on a shared machine other work only slows a run down).
``benchmarks/big_trace.py --build-one SOURCE 450 OUT`` then ``diageval bundle import OUT --out BUNDLE`` makes the
450 MB one.

``--phases BUNDLE [--repeat 2]``: the whole ``rules`` diagnoser on a one-rank bundle, its CPU seconds split by phase
(each phase's own time, a phase called inside another counted once, in the inner one): the reader (inflating and
decoding, ``iter_trace_windows``), the timed windows the collectors share (``timed_window``), each collector and observer
of the read (the summary's columns, ``trace stats``' collector, the time attribution's, the work and defect observers),
the steps' build and measurement, the attribution's split, and the rest (freeing each window's events, rules' own
judges). Timers around each call cost well under a percent of the total.

``--peaks BUNDLE ...``: per one-rank bundle, its trace's ``summary`` row and the ``rules`` row above (each its own
process): CPU and wall seconds, peak RSS, reads of the trace. Memory against the trace's size, for sizes whose
``json.loads`` row would not fit in memory (it needs ~6x the trace).

``--stages`` times the reader's stages alone on one file, in wall seconds and CPU seconds (on a loaded
machine a process gets a fraction of a core; CPU time is what the code costs): the decompressed source
alone, msgspec decoding the very windows the reader cuts (typed and generic), the reader yielding
windows (no per-event generator step), and ``iter_trace_events`` itself.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

import msgspec

from diageval.bundle import trace_stream
from diageval.bundle.importer import import_traces
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


def _cut_windows(path: Path) -> list[bytes]:
    """The byte windows the reader hands to msgspec for ``path``, captured by reading it once."""
    windows: list[bytes] = []
    decode = trace_stream._decode_events

    def spy(data, buffer, index):
        windows.append(bytes(data))
        return decode(data, buffer, index)

    trace_stream._decode_events = spy
    try:
        for _ in iter_trace_events(path, StreamState()):
            pass
    finally:
        trace_stream._decode_events = decode
    return windows


def stages(path: Path) -> int:
    n_bytes = _read_all(path)
    windows = _cut_windows(path)
    generic = msgspec.json.Decoder()

    def source() -> None:
        src = trace_stream._Source(path, StreamState(), None)
        while src.read(trace_stream.CHUNK_BYTES):
            pass
        src.close()

    def windows_only() -> None:
        state = StreamState()
        buffer = trace_stream._Buffer(trace_stream._Source(path, state, None), path)
        for _ in trace_stream._read_document(buffer, state):
            pass
        buffer.source.close()

    rows = [
        ("source (read, gunzip when .gz)", source),
        ("msgspec: decode the windows (TraceEvent)", lambda: [trace_stream._EVENTS.decode(w) for w in windows]),
        ("msgspec: decode the windows (generic)", lambda: [generic.decode(w) for w in windows]),
        ("reader: windows, no per-event yield", windows_only),
        ("reader: iter_trace_events", lambda: _read_all(path)),
        ("json.load of the whole file", lambda: _json_load(path)),
    ]
    print(f"{path}: {n_bytes / 1e6:.1f} MB of JSON in {len(windows)} windows; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; best of {REPEAT}")
    print(f"{'stage':44s} {'wall s':>7s} {'MB/s':>7s} {'cpu s':>7s} {'MB/cpu-s':>8s}")
    for name, fn in rows:
        wall = cpu = float("inf")
        for _ in range(REPEAT):
            w, c = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = min(wall, time.perf_counter() - w), min(cpu, time.process_time() - c)
        print(f"{name:44s} {wall:7.2f} {n_bytes / wall / 1e6:7.1f} {cpu:7.2f} {n_bytes / cpu / 1e6:8.1f}")
    return 0


_CHILD = """
import json, sys, time
from pathlib import Path
path, what = Path(sys.argv[1]), sys.argv[2]
if what in ("json.loads", "typed decode"):
    data = path.read_bytes()
    if data[:2] == b"\\x1f\\x8b":  # a .gz: inflated before the clock starts, like the file read
        import gzip
        data = gzip.decompress(data)
    if what == "typed decode":  # the whole document at once into the reader's own typed events (msgspec)
        import msgspec
        from diageval.bundle.trace_stream import TraceEvent
        class Doc(msgspec.Struct):
            traceEvents: list[TraceEvent] = []
        decode = msgspec.json.Decoder(Doc).decode
        t, c = time.perf_counter(), time.process_time()
        n = len(decode(data).traceEvents)
    else:
        t, c = time.perf_counter(), time.process_time()
        n = len(json.loads(data)["traceEvents"])
    reads = 1
else:
    import diageval.bundle.trace_summary as ts
    from diageval.bundle.trace_stream import StreamState, iter_trace_windows
    from diageval.diagnosers.rules.work import WorkCollector
    opened = []
    def counted(p, state, **kw):
        opened.append(1)
        return iter_trace_windows(p, state, **kw)
    ts.iter_trace_windows = counted
    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.rules.diagnoser import RulesDiagnoser
    t, c = time.perf_counter(), time.process_time()
    if what == "rules":  # the whole rules diagnoser on the bundle imported from the trace (its trace gzipped)
        RulesDiagnoser().diagnose(EvidenceBundle.open(path))
        n = None
    elif what == "reader":
        state = StreamState()
        n = sum(len(w) for w in counted(path, state))
    else:
        budget = {} if what == "summary" else {"max_entries": 1 << 62}
        summary = ts.summarize_trace(path, observers=[WorkCollector()], **budget)
        n = summary.n_events
    reads = len(opened)
seconds, cpu = time.perf_counter() - t, time.process_time() - c
digest = None
if what.startswith("summary"):  # the sliced and the one-read summary must be the same, figure for figure
    import hashlib
    digest = hashlib.sha256(summary.model_dump_json(exclude={"parse_seconds"}).encode()).hexdigest()[:16]
print(json.dumps({"seconds": seconds, "cpu": cpu, "events": n, "reads": reads, "digest": digest}))
"""
SIDE_ROWS = {
    "json.loads": "json.loads of the bytes (read first, untimed)",
    "typed decode": "msgspec: the whole file at once into TraceEvent structs (read first, untimed)",
    "reader": "the shared reader alone (iter_trace_windows)",
    "summary": "summarize_trace + WorkCollector (rules' read)",
    "summary, one read": "the same, unlimited column budget",
    "rules": "RulesDiagnoser().diagnose of the bundle imported from the trace (gzipped), in the measured process",
}


def _child(path: Path, what: str) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), what], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{what} failed: {err.read().decode(errors='replace')[-500:]}")
        row = json.loads(out.read().decode().strip().splitlines()[-1])
    return row | {"rss_mb": usage.ru_maxrss / 1024}


def side_by_side(path: Path, repeat: int, rows_wanted: list[str] | None = None, bundle: Path | None = None) -> int:
    """The rows on ``path``; the ``rules`` row (only with ``bundle``, imported from ``path``) reads ``bundle``."""
    n_bytes = path.stat().st_size if not path.name.endswith(".gz") else _read_all(path)
    wanted = [w for w in SIDE_ROWS if (rows_wanted is None or w in rows_wanted) and (w != "rules" or bundle)]
    print(f"{path}: {n_bytes / 1e6:.1f} MB of JSON; {repeat} rounds, one process per row and round; "
          f"load average before {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    runs: dict[str, list[dict]] = {k: [] for k in wanted}
    loads = []
    for _ in range(repeat):
        for what in wanted:
            runs[what].append(_child(bundle if what == "rules" else path, what))
        loads.append(os.getloadavg()[0])
    base = runs["json.loads"]
    typed = runs.get("typed decode")
    for what in wanted:
        print(f"  {what}: {SIDE_ROWS[what]}")
    print(f"{'row':18s} {'wall s':>7s} {'cpu s':>7s} {'MB/cpu-s':>8s} {'peak MB':>8s} {'reads':>5s} {'wall/json':>9s}"
          f" {'cpu/json':>8s} {'min':>6s} {'json/cpu':>8s} {'cpu/typed':>9s}")
    for what in wanted:
        rows = runs[what]
        wall = statistics.median(r["seconds"] for r in rows)
        cpu = statistics.median(r["cpu"] for r in rows)
        # ratios per round (the same minutes), then their median
        r_wall = statistics.median(r["seconds"] / b["seconds"] for r, b in zip(rows, base))
        r_cpu = statistics.median(r["cpu"] / b["cpu"] for r, b in zip(rows, base))
        r_min = min(r["cpu"] / b["cpu"] for r, b in zip(rows, base))  # the round least disturbed by other work
        r_typed = f"{statistics.median(r['cpu'] / b['cpu'] for r, b in zip(rows, typed)):9.2f}" if typed else "        -"
        print(f"{what:18s} {wall:7.2f} {cpu:7.2f} {n_bytes / 1e6 / cpu:8.0f} {max(r['rss_mb'] for r in rows):8.0f}"
              f" {rows[0]['reads']:5d} {r_wall:9.2f} {r_cpu:8.3f} {r_min:6.3f} {1 / r_cpu:8.1f} {r_typed}")
    print(f"load average (1 min) after each round: {', '.join(f'{x:.1f}' for x in loads)}")
    digests = {what: sorted({r["digest"] for r in rs}) for what, rs in runs.items() if what.startswith("summary")}
    print(f"summary digests (sha256 of the summary less its parse_seconds): {digests}")
    events = {r["events"] for rs in runs.values() for r in rs if r["events"] is not None}
    print(f"events read by every row: {sorted(events)}; load average after "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; seconds and ratios are medians over the rounds, "
          "ratios taken within each round (min: the lowest round's); peak MB is the largest RSS of the process "
          "(interpreter included)")
    return 0


REAL_SHAPE = Path("gpu-jobs/hta-negative-queue/rank0.json.gz")  # the A100 rank-0 trace of issue 26 and 43
REAL_SIZES_MB = (450.0, 1000.0)


def real_shapes(sizes: list[float], repeat: int, workdir: Path) -> int:
    """Issue 43's rows on real traces' shape: the A100 rank-0 trace repeated (``benchmarks/big_trace.py``'s builder,
    timestamps, steps and ids shifted) to each size, written under ``workdir`` and deleted afterwards; per size, the
    side-by-side rows, each in its own process, with ratios to ``json.loads`` and to the typed decode of the whole file
    in the same rounds."""
    source = REAL / REAL_SHAPE
    if not source.is_file():
        print(f"source trace not found: {source} (set DIAGEVAL_DATA)", file=sys.stderr)
        return 1
    workdir.mkdir(parents=True, exist_ok=True)
    builder = Path(__file__).with_name("big_trace.py")
    for size in sizes:
        trace = workdir / f"a100-rank0-{size:g}MB.json"
        try:
            if not trace.exists():
                subprocess.run([sys.executable, str(builder), "--build-one", str(source), f"{size:g}", str(trace)],
                               check=True, stdout=subprocess.DEVNULL)
            bundle = workdir / f"a100-rank0-{size:g}MB-bundle"
            shutil.rmtree(bundle, ignore_errors=True)
            import_traces([trace], bundle)  # its trace gzipped, as a recorded or imported bundle holds it
            side_by_side(trace, repeat, ["json.loads", "typed decode", "reader", "summary", "rules"], bundle)
        finally:
            trace.unlink(missing_ok=True)
            shutil.rmtree(workdir / f"a100-rank0-{size:g}MB-bundle", ignore_errors=True)
        print(flush=True)
    return 0


def peaks(bundles: list[Path]) -> int:
    """``--peaks``: the summary of each bundle's one trace, then rules on the bundle, each in its own process."""
    print(f"load average before {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{'bundle':40s} {'MB':>6s} {'row':8s} {'cpu s':>7s} {'wall s':>7s} {'peak MB':>8s} {'reads':>5s}")
    for bundle in bundles:
        (trace,) = sorted(bundle.glob("rank*/trace.json*"))
        n_bytes = _read_all(trace) if trace.name.endswith(".gz") else trace.stat().st_size
        for what, path in (("summary", trace), ("rules", bundle)):
            row = _child(path, what)
            print(f"{str(bundle)[-40:]:40s} {n_bytes / 1e6:6.0f} {what:8s} {row['cpu']:7.2f} {row['seconds']:7.2f}"
                  f" {row['rss_mb']:8.0f} {row['reads']:5d}", flush=True)
    print(f"load average after {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


def interleaved(bundle: Path, repeat: int) -> int:
    """In this one process, ``repeat`` rounds of ``json.loads`` of the bundle's (one) trace, inflated before the clock
    starts, then ``rules`` on the bundle (its trace gzipped): CPU and wall seconds, the ratio within each round and
    the lowest round's. No RSS per row (one process holds both): ``--real-shapes`` gives that."""
    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.rules.diagnoser import RulesDiagnoser

    traces = sorted(EvidenceBundle.open(bundle).trace_paths().items())
    if len(traces) != 1:
        print(f"{bundle}: expected a bundle of one rank's trace, found {len(traces)}", file=sys.stderr)
        return 1
    raw = traces[0][1].read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    del raw
    print(f"{bundle}: {len(data) / 1e6:.1f} MB of JSON; {repeat} rounds in one process; load average before "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    cpu_ratios, wall_ratios = [], []
    cpu: dict[str, list[float]] = {"json.loads": [], "rules": []}
    for n in range(repeat):
        times = {}
        for what in ("json.loads", "rules"):
            w, c = time.perf_counter(), time.process_time()
            if what == "json.loads":
                json.loads(data)
            else:
                RulesDiagnoser().diagnose(EvidenceBundle.open(bundle))
            times[what] = (time.process_time() - c, time.perf_counter() - w)
            cpu[what].append(times[what][0])
        cpu_ratios.append(times["rules"][0] / times["json.loads"][0])
        wall_ratios.append(times["rules"][1] / times["json.loads"][1])
        print(f"round {n + 1}: json.loads {times['json.loads'][0]:.2f} cpu s {times['json.loads'][1]:.2f} wall s, "
              f"rules {times['rules'][0]:.2f} cpu s {times['rules'][1]:.2f} wall s; rules/json.loads cpu "
              f"{cpu_ratios[-1]:.3f} wall {wall_ratios[-1]:.3f}; load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"rules/json.loads: cpu min {min(cpu_ratios):.3f} median {statistics.median(cpu_ratios):.3f}; "
          f"wall min {min(wall_ratios):.3f} median {statistics.median(wall_ratios):.3f}")
    # other work on a shared machine only ever slows a run down: each row's fastest round is the nearest to its own cost
    print(f"fastest rounds: json.loads {min(cpu['json.loads']):.2f} cpu s, rules {min(cpu['rules']):.2f} cpu s; "
          f"ratio {min(cpu['rules']) / min(cpu['json.loads']):.3f}")
    return 0


def phases(bundle: Path, repeat: int) -> int:
    """``repeat`` rounds of ``rules`` on ``bundle``, each phase's own CPU seconds (see the module notes)."""
    import functools
    from collections import defaultdict

    import diageval.bundle.attribution as att
    import diageval.bundle.trace_defects as defects
    import diageval.bundle.trace_stats as stats
    import diageval.bundle.trace_summary as summary
    import diageval.diagnosers.rules.work as work
    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.rules.diagnoser import RulesDiagnoser

    own: dict[str, float] = defaultdict(float)
    inner: list[float] = []

    def timed(owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            c = time.process_time()
            inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - c
                own[label] += spent - inner.pop()
                if inner:
                    inner[-1] += spent
        setattr(owner, name, wrapper)

    windows = summary._windows

    def timed_windows(path, state):  # the reader: CPU time spent producing each window
        it = windows(path, state)
        while True:
            c = time.process_time()
            window = next(it, None)
            own["reader (inflate, decode)"] += time.process_time() - c
            if window is None:
                return
            yield window

    summary._windows = timed_windows
    for owner, name, label in [
        (summary, "timed_window", "timed windows"), (summary._Columns, "add_window", "summary columns"),
        (stats.StatsCollector, "add_window", "trace stats collector"),
        (att.AttributionCollector, "add_window", "attribution collector"),
        (work.WorkCollector, "add_window", "work observer"), (defects.DefectObserver, "add_window", "defect observer"),
        (summary, "_hull", "window spans"), (summary, "_build_steps", "steps' build"),
        (stats.StatsCollector, "measure", "steps' device measures"),
        (att.AttributionCollector, "attribute", "attribution split"),
    ]:
        timed(owner, name, label)
    print(f"{bundle}: rules, CPU seconds by phase; load average before "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    for n in range(repeat):
        own.clear()
        c = time.process_time()
        RulesDiagnoser().diagnose(EvidenceBundle.open(bundle))
        total = time.process_time() - c
        rest = total - sum(own.values())
        print(f"round {n + 1}: {total:.2f} cpu s; load {os.getloadavg()[0]:.1f}")
        for label, spent in [*sorted(own.items(), key=lambda kv: -kv[1]), ("rest (freeing windows, judges)", rest)]:
            print(f"  {label:32s} {spent:6.2f} {spent / total:6.1%}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--interleaved"] and len(argv) in (2, 4) and (len(argv) == 2 or argv[2] == "--repeat"):
        return interleaved(Path(argv[1]), int(argv[3]) if len(argv) == 4 else REPEAT)
    if argv[:1] == ["--phases"] and len(argv) in (2, 4) and (len(argv) == 2 or argv[2] == "--repeat"):
        return phases(Path(argv[1]), int(argv[3]) if len(argv) == 4 else 2)
    if argv[:1] == ["--peaks"] and len(argv) > 1:
        return peaks([Path(a) for a in argv[1:]])
    if argv[:1] == ["--real-shapes"]:
        import argparse

        ap = argparse.ArgumentParser(prog="trace_reader.py --real-shapes")
        ap.add_argument("--sizes", type=float, nargs="+", default=list(REAL_SIZES_MB), help="MB of trace JSON")
        ap.add_argument("--repeat", type=int, default=REPEAT)
        ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "diageval-trace-reader")
        args = ap.parse_args(argv[1:])
        return real_shapes(args.sizes, args.repeat, args.workdir)
    if argv[:1] == ["--stages"] and len(argv) == 2:
        return stages(Path(argv[1]))
    if argv[:1] == ["--side-by-side"] and len(argv) in (2, 4) and (len(argv) == 2 or argv[2] == "--repeat"):
        return side_by_side(Path(argv[1]), int(argv[3]) if len(argv) == 4 else REPEAT)
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
