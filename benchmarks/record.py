"""Recording the corpus: per-case wall seconds, and the whole corpus as `diageval record` does it; or where one
recording's time goes, phase by phase.

    python benchmarks/record.py [CASE_ID ...] [--repeats 1]
    python benchmarks/record.py --phases [--rounds 5] [--verify] CASE_ID ...
    python benchmarks/record.py --same-content A B

Each repeat prepares every case into a fresh, empty bundle cache (a temp folder), exactly as
``diageval record`` and a run's evidence step do: live cases are recorded, evidence edits are derived
from the cached recording of the case without its edits, recorded cases are imported from the data
folder, and cases that need CUDA are skipped with the reason on a machine without it. No verification
(a run verifies positive cases on top: see ``diageval verify``). The first recording in the process
also starts the forkserver (~3 s); it is timed apart as "warm-up".

``--phases``: each round records every named case once more (``ensure_bundle(..., force=True)`` into a temp cache,
rounds interleaved, the forkserver started before the first) and splits each recording at milestones the parent and
the ranks mark: probes wrap the recording's own functions (:data:`PARENT_PROBED` in this process; :data:`PROBED` in
each rank's parent, and so in the rank it forks, where multiprocessing runs this script again as ``__mp_main__``), so
nothing of the recording code changes. A milestone of the ranks is the
last rank's (they meet at barriers), so the phases of a recording add up to its whole time. A fleet case is recorded
as its first member (a fleet's recordings are its members'). ``--verify``: also each case's ``verify_case`` with one
pair (positive job cases only), split into its recordings, the manifestation test
(``compare``) and the label checks (``evidence_problems``).

``--same-content A B``: do two recordings hold the same evidence, times aside? A and B are two bundles, or two bundle
caches (each recording of A compared with B's of the same case id, role and repeat; a fleet's assembled bundle is left
out, its members are compared). For a recording code change that must not change what is recorded: record the same
cases with the old code and the new into two caches that share one ``draw.secret`` (so both draw the same ranks and
step counts), then compare. Same files; the same environment in ``bundle.json``; the same (rank, step) rows in
``steps.jsonl``; the same columns in ``metrics.jsonl``; the same log lines with their numbers masked; per trace the same
top-level fields, ``distributedInfo`` and ``deviceProperties`` and the same kinds of event (phase, category, name: the
profiled steps' names included); per Flight Recorder dump the same collectives in the same order. Kinds, not counts:
two recordings by the same code differ in how many ``aten::set_``/``aten::empty`` a step's DataLoader hand-over
runs (measured 14 and 10 in one fleet member's two recordings). Prints each difference; exit 1 if any.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from diageval.cases.load import load_case_set
from diageval.recording.prepare import prepare_evidence
from diageval.recording.record import device_problem, record_case


MARKS_ENV = "DIAGEVAL_BENCH_MARKS"  # the folder each process of a probed recording appends its marks to
PROBED = {  # what the ranks' probes wrap: module -> (attribute path, mark name)
    "diageval.recording.launcher": [("_rank_entry", "rank_parent")],
    "diageval.recording.rank_worker": [("run_rank", "rank"), ("_build_faults", "setup"),
                                       ("_dump_flight_recorder", "flight_recorder"), ("_write_evidence", "evidence")],
    "torch.utils.data.dataloader": [("_MultiProcessingDataLoaderIter._shutdown_workers", "loader_stop")],
    "torch.distributed": [("init_process_group", "init_pg"), ("barrier", "barrier"),
                          ("destroy_process_group", "destroy_pg")],
    "torch.profiler.profiler": [("_KinetoProfile.stop_trace", "stop_trace"),
                                ("_KinetoProfile.export_chrome_trace", "export")],
}
PARENT_PROBED = {  # the same in this process, the parent
    "diageval.recording.record": [("record_case", "record_case"), ("run_ranks", "run_ranks")],
    "diageval.recording.metrics": [("MetricsSampler.start", "sampler_start"), ("MetricsSampler.stop", "sampler_stop")],
    "diageval.recording.bundle_writer": [("finish_bundle", "finish_bundle"), ("write_info", "write_info")],
    "diageval.recording.verify": [("ensure_bundle", "verify_recording"), ("compare", "compare"),
                                  ("evidence_problems", "label_checks")],
}
# A recording's milestones in order (``name>``: a call began; ``name<``: it returned; for a call a rank makes more than
# once, its first call's marks carry ``#1``, the next ``#2``); each phase runs from one milestone to the next one the
# recording reached (a workload without DataLoader workers has no ``loader_stop``: its time goes to the phase before).
MILESTONES = [
    ("ensure_bundle>", "parent: cache key, spec split, temp folders"),
    ("run_ranks>", "start the ranks (forkserver fork, the main script run again)"),
    ("rank_parent>", "the rank's parent forks the rank, log redirected"),
    ("rank>", "rendezvous (FileStore, init_process_group)"),
    ("init_pg<", "the workload built (model, DDP, DataLoader and its workers)"),
    ("barrier#1>", "the setup barrier"),
    ("barrier#1<", "to the first step (profiler object, start)"),
    ("step0", "the steps"),
    ("last_step_end", "trace stop (the profiler's last step)"),
    ("stop_trace<", "trace export (plain JSON, scratch)"),
    ("export<", "flight recorder dump"),
    ("flight_recorder<", "to the DataLoader's workers stopped"),
    ("loader_stop<", "the last barrier, process group destroyed"),
    ("destroy_pg<", "the evidence written (step log, gzip of the trace)"),
    ("evidence<", "the rank exits, the launcher sees it"),
    ("run_ranks<", "the bundle: metrics stop, steps, manifest (hashes), rename"),
    ("record_case<", "the cache: scratch removed, truth record, index line"),
    ("ensure_bundle<", None),
]


def _mark(name: str) -> None:
    folder = os.environ.get(MARKS_ENV)
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as fh:
            fh.write(json.dumps({"mark": name, "t": time.time()}) + "\n")


def _wrap(module_name: str, path: str, name: str) -> None:
    import importlib

    owner = importlib.import_module(module_name)
    *outer, attr = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    inner = getattr(owner, attr)
    if getattr(inner, "_probed", False):
        return

    @functools.wraps(inner)
    def probed(*args, **kwargs):
        _mark(f"{name}>")
        try:
            return inner(*args, **kwargs)
        finally:
            _mark(f"{name}<")

    probed._probed = True
    setattr(owner, attr, probed)


def _install(probes: dict[str, list[tuple[str, str]]]) -> None:
    for module_name, wrapped in probes.items():
        for path, name in wrapped:
            _wrap(module_name, path, name)


if __name__ == "__mp_main__" and os.environ.get(MARKS_ENV):  # this script run again in a rank's parent (--phases)
    _install(PROBED)


def _milestones(folder: Path, bundle: Path) -> dict[str, float]:
    """Each milestone's time: the parent's marks, and each rank's (the last rank's where several reach it)."""
    per_process: list[dict[str, float]] = []
    for path in folder.glob("*.jsonl"):
        seen: dict[str, float] = {}
        counts: dict[str, int] = defaultdict(int)
        for line in path.read_text().splitlines():
            row = json.loads(line)
            base = row["mark"]
            counts[base] += 1
            seen.setdefault(base, row["t"])
            seen[f"{base[:-1]}#{counts[base]}{base[-1]}"] = row["t"]
        per_process.append(seen)
    out: dict[str, float] = {}
    for seen in per_process:
        for name, t in seen.items():
            out[name] = max(out.get(name, t), t)
    steps = [json.loads(line) for line in (bundle / "steps.jsonl").read_text().splitlines() if line.strip()]
    first = min(r["step"] for r in steps)
    out["step0"] = max(r["t_start"] for r in steps if r["step"] == first)
    out["last_step_end"] = max(r["t_end"] for r in steps)
    return out


def _case_to_record(case):
    """A fleet's first member (what a fleet records), else the case."""
    return case.fleet_members()[0][1] if case.fleet is not None and case.workload is not None else case


def phases(case_ids: list[str], rounds: int, verify: bool) -> None:
    from diageval.recording.cache import ensure_bundle
    from diageval.recording.verify import verify_case

    cases = [lc.case for lc in load_case_set().select(case_ids)]
    with tempfile.TemporaryDirectory() as tmp:
        marks = Path(tmp) / "marks"
        marks.mkdir()
        os.environ[MARKS_ENV] = str(marks)  # before the forkserver starts: its processes inherit it
        _install(PARENT_PROBED)
        cache = Path(tmp) / "cache"
        t = time.perf_counter()
        ensure_bundle(_case_to_record(cases[0]), "cpu", cache_dir=cache, force=True)
        print(f"warm-up (forkserver start + first recording): {time.perf_counter() - t:.2f}s")
        per: dict[str, dict[str, list[float]]] = {c.id: defaultdict(list) for c in cases}
        checks: dict[str, dict[str, list[float]]] = {c.id: defaultdict(list) for c in cases}
        for _ in range(rounds):
            for case in cases:
                _clear(marks)
                _mark("ensure_bundle>")
                _, folder, _ = ensure_bundle(_case_to_record(case), "cpu", cache_dir=cache, force=True)
                _mark("ensure_bundle<")
                ms = _milestones(marks, folder)
                reached = [(name, label) for name, label in MILESTONES if name in ms]
                for (a, label), (b, _) in zip(reached, reached[1:]):
                    per[case.id][label].append(ms[b] - ms[a])
                per[case.id]["whole recording"].append(ms["ensure_bundle<"] - ms["ensure_bundle>"])
                per[case.id]["outside the steps"].append(
                    ms["ensure_bundle<"] - ms["ensure_bundle>"] - (ms["last_step_end"] - ms["step0"]))
                if verify and case.manifest is not None and case.fleet is None:
                    checks[case.id]["verify_case, 1 pair"].append(_timed_verify(verify_case, case, cache, marks))
                    for name in ("verify_recording", "compare", "label_checks"):
                        ms = _spans(marks)
                        checks[case.id][name].append(ms.get(name, 0.0))
        os.environ.pop(MARKS_ENV)
    load = os.getloadavg()
    print(f"{rounds} round(s), load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; median seconds (n per case)")
    labels = [label for _, label in MILESTONES if label] + ["outside the steps", "whole recording"]
    print(f"{'phase':64} " + " ".join(f"{c.id[:22]:>22}" for c in cases) + f" {'all':>7}")
    for label in labels:
        cells = [per[c.id].get(label, []) for c in cases]
        every = [x for cell in cells for x in cell]
        print(_row(label, cells) + (f" {statistics.median(every):>7.3f}" if every else ""))
    if verify:
        for label in ("verify_case, 1 pair", "verify_recording", "compare", "label_checks"):
            print(_row(label, [checks[c.id].get(label, []) for c in cases]))


def _row(label: str, cells: list[list[float]]) -> str:
    """A table row: per case, the median of its seconds and how many (``-``: none)."""
    return f"{label:64} " + " ".join(f"{statistics.median(cell):>18.3f} n={len(cell):<2}" if cell else f"{'-':>22}"
                                     for cell in cells)


def _clear(marks: Path) -> None:
    """Forget the marks of the recording before (each process appends to its own file)."""
    for f in marks.iterdir():
        f.unlink()


def _spans(marks: Path) -> dict[str, float]:
    """Seconds the parent spent inside each probed call, summed over its calls (this process's marks)."""
    out: dict[str, float] = defaultdict(float)
    opened: dict[str, float] = {}
    path = marks / f"{os.getpid()}.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        row = json.loads(line)
        name, edge = row["mark"][:-1], row["mark"][-1]
        if edge == ">":
            opened.setdefault(name, row["t"])
        elif name in opened:
            out[name] += row["t"] - opened.pop(name)
    return out


def _timed_verify(verify_case, case, cache: Path, marks: Path) -> float:
    _clear(marks)
    t = time.perf_counter()
    verify_case(case, repeats=1, device="cpu", cache_dir=cache, force=True)
    return time.perf_counter() - t


def content_differences(a: Path, b: Path) -> list[str]:
    """How the bundles ``a`` and ``b`` differ, their times aside (``--same-content``)."""
    import gzip
    import pickle
    import re

    def files(root: Path) -> list[str]:
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def rows(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    out = []
    if files(a) != files(b):
        return [f"files: {sorted(set(files(a)) ^ set(files(b)))} in one only"]
    manifest_a, manifest_b = (json.loads((x / "bundle.json").read_text()) for x in (a, b))
    if manifest_a["env"] != manifest_b["env"]:
        out.append(f"bundle.json env: {manifest_a['env']} != {manifest_b['env']}")
    for name in files(a):
        pa, pb = a / name, b / name
        if name == "steps.jsonl":
            same = [(r["rank"], r["step"], sorted(r)) for r in rows(pa)] == [(r["rank"], r["step"], sorted(r)) for r in rows(pb)]
        elif name == "metrics.jsonl":  # a scope's columns (a rank is sampled from its second sample: a short job may have none)
            ca, cb = ({r["scope"]: tuple(sorted(r)) for r in rows(x)} for x in (pa, pb))
            same = all(ca[k] == cb[k] for k in ca.keys() & cb.keys()) and "host" in ca and "host" in cb
        elif name.endswith(".log"):
            same = [re.sub(r"\d+(\.\d+)?", "#", line) for line in pa.read_text().splitlines()] == \
                [re.sub(r"\d+(\.\d+)?", "#", line) for line in pb.read_text().splitlines()]
        elif name.endswith("trace.json.gz"):
            ta, tb = (json.loads(gzip.decompress(x.read_bytes())) for x in (pa, pb))
            fields = ("distributedInfo", "deviceProperties", "schemaVersion", "record_shapes", "displayTimeUnit")
            same = sorted(ta) == sorted(tb) and all(ta.get(k) == tb.get(k) for k in fields) and \
                {(e.get("ph"), e.get("cat"), e.get("name")) for e in ta["traceEvents"]} == \
                {(e.get("ph"), e.get("cat"), e.get("name")) for e in tb["traceEvents"]}
        elif "flight_recorder/" in name:
            fa, fb = (pickle.loads(x.read_bytes()) for x in (pa, pb))  # noqa: S301 - dumps this checkout recorded
            keys = ("profiling_name", "process_group", "input_sizes", "output_sizes", "input_dtypes", "is_p2p")
            same = all(fa.get(k) == fb.get(k) for k in ("version", "pg_config", "comm_lib_version")) and \
                [tuple(str(e.get(k)) for k in keys) for e in fa["entries"]] == \
                [tuple(str(e.get(k)) for k in keys) for e in fb["entries"]]
        else:
            same = name == "bundle.json" or pa.read_bytes() == pb.read_bytes()
        if not same:
            out.append(f"{name}: differs")
    return out


def same_content(a: Path, b: Path) -> int:
    def recordings(cache: Path) -> dict[tuple, Path]:
        out = {}
        for line in (cache / "index.jsonl").read_text().splitlines():
            row = json.loads(line)
            folder = cache / "evidence" / row["key"]
            if not (folder / "fleet.json").is_file():
                out[(row["case_id"], row["role"], row["repeat"])] = folder
        return out

    pairs = {"": (a, b)} if (a / "bundle.json").is_file() else None
    if pairs is None:
        ra, rb = recordings(a), recordings(b)
        pairs = {" ".join(map(str, k)): (ra[k], rb[k]) for k in sorted(ra.keys() & rb.keys())}
        print(f"{len(pairs)} recordings in both ({len(ra.keys() ^ rb.keys())} in one only)")
    bad = 0
    for who, (x, y) in pairs.items():
        problems = content_differences(x, y)
        bad += bool(problems)
        print(f"{who or x.name}: " + ("same content" if not problems else "; ".join(problems)))
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case_ids", nargs="*")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--phases", action="store_true", help="where each named case's recording time goes")
    ap.add_argument("--rounds", type=int, default=5, help="--phases: recordings of each case (interleaved rounds)")
    ap.add_argument("--verify", action="store_true", help="--phases: also time a one-pair verify of each case")
    ap.add_argument("--same-content", nargs=2, type=Path, metavar=("A", "B"),
                    help="compare two bundles or two bundle caches, times aside")
    args = ap.parse_args()
    if args.same_content:
        raise SystemExit(same_content(*args.same_content))
    if args.phases:
        if not args.case_ids:
            ap.error("--phases needs case ids")
        phases(args.case_ids, args.rounds, args.verify)
        return
    cases = load_case_set().select(args.case_ids)
    runnable = [lc for lc in cases if lc.case.recorded is not None or device_problem("auto", lc.case) is None]
    for lc in cases:
        if lc not in runnable:
            print(f"skipped {lc.case.id}: {device_problem('auto', lc.case)}")
    with tempfile.TemporaryDirectory() as tmp:
        first = next(lc for lc in runnable if lc.case.recorded is None)
        t = time.perf_counter()
        record_case(first.case, Path(tmp) / "warmup", device="cpu")
        print(f"warm-up (forkserver start + first case): {time.perf_counter() - t:.2f}s")
        print(f"{'case':40} {'median_s':>9} {'min_s':>7} {'max_s':>7}")
        per_case: dict[str, list[float]] = {lc.case.id: [] for lc in runnable}
        totals = []
        for i in range(args.repeats):
            cache = Path(tmp) / f"cache-{i}"
            start = time.perf_counter()
            for lc in runnable:
                t = time.perf_counter()
                prepare_evidence(lc, device="auto", verify=False, cache_dir=cache)
                per_case[lc.case.id].append(time.perf_counter() - t)
            totals.append(time.perf_counter() - start)
        for case_id, times in per_case.items():
            print(f"{case_id:40} {statistics.median(times):>9.2f} {min(times):>7.2f} {max(times):>7.2f}", flush=True)
        print(f"whole corpus: {len(runnable)} cases prepared ({len(cases) - len(runnable)} skipped) in "
              f"{statistics.median(totals):.1f} s (median of {args.repeats}; min {min(totals):.1f}, max {max(totals):.1f})")


if __name__ == "__main__":
    main()
