"""``scale_out``: an N-rank bundle (16 to 4096 ranks) derived from a recorded 2-rank one (issue 26 item 2).

The jobs whose stragglers and hangs matter run on hundreds to thousands of ranks; recording them here is
out of reach (2 cores), but their evidence is mostly many copies of one healthy rank around a few odd ones.
So the edit keeps one recorded rank whole (``kept_rank``: the culprit of a positive case, any rank of a
healthy one) and places it at ``kept_at_rank`` of the scaled job; every other rank is a copy of the other
recorded rank (``copied_rank``). The kept rank's position is a parameter that the case author draws (a
case names it in its labels), never rank 0 or N-1 by construction, and nothing in the bundle marks it: it
goes through the same transformations as every copy.

What each scaled rank gets, from its source rank (decided here, the issue being silent on the numbers):

* **Clock skew per host.** Ranks sit ``RANKS_PER_HOST`` to a host (8, a GPU node) and share its clock;
  each host's clock is off by a draw from a normal law of standard deviation ``HOST_CLOCK_SD_MS`` = 1 ms,
  what NTP keeps hosts on one local network within ("better than one millisecond accuracy in local area
  networks", RFC 5905's design goal as summarised by the NTP project; chrony on a LAN does better). The
  offset moves the trace (as ``clock_offset`` does, ``baseTimeNanoseconds`` semantics included), the
  rank's ``steps.jsonl`` rows, its per-rank metric samples, its log's Kineto stamps and its Flight
  Recorder times, so the evidence of one rank stays consistent with itself.
* **Per-rank noise.** Every timestamp of a rank's trace (starts and ends alike) goes through a random
  monotone warp of time: knots every ``WARP_KNOT_US`` (1 ms) move by independent normal draws of standard
  deviation ``WARP_SD_US``, clipped to ``WARP_CLIP_US``, and time is interpolated linearly between them.
  A monotone map keeps every nesting and order of the trace (an op stays inside its parent, a step's ops
  inside its marker), while an op's duration is scaled by the local slope: its log-ratio to the source has
  a standard deviation of sqrt(2)·WARP_SD_US / WARP_KNOT_US = 0.28, the median |log ratio| 0.19 measured
  between the two ranks of the healthy 2-rank MLP recording (``mlp-ddp-healthy``: 5354 cpu_ops matched by
  step, name and order; a normal law has median |x| = 0.674 sd). Sums over a step telescope, so a step's
  figures (busy time, time in collectives) stay within 2·WARP_CLIP_US of the source's: the copies keep
  the job's step-level behaviour (in DDP every rank waits for the slowest in each all_reduce) and differ
  op by op, so no two copies are byte-identical. The step log's rows go through the same warp.
* **Identity.** ``distributedInfo`` (rank, world size, the process group's ranks), a fresh ``trace_id``,
  the rank in ``traceName`` and in the log's ``rank R/W`` line, a process id per rank (thread ids keep
  their distance to it), a host name per host; Flight Recorder dumps name the scaled group.
* **Short windows.** Each trace keeps ``window_steps`` profiled steps from ``window_first_step`` (as
  ``trace_window``; the step log keeps every step), so that a 1024-rank bundle stays tens of MB.
* **Sampling.** With ``traced_ranks`` only those ranks' traces are written, as ``sample_rank_traces``
  leaves a bundle (every rank's step log, metrics, log and dump stay).

* **Logs.** Every scaled rank's log is the copied rank's, renumbered and moved onto its host's clock like
  the rest of its evidence, the kept rank's included: a log of its own was the one log unlike the 1000 copies
  and named the culprit without a look at its trace (issue 44: the true rank in 7 of 7 scale bundles). What
  the kept rank did shows in its trace, step log and metrics; its printed lines (losses, a failure message)
  are the copied rank's, as on every other rank.

* **Draws.** Every draw above (clock offsets, process ids and the trace ids made from them, warps) mixes a
  fresh seed, drawn at each derivation and kept nowhere, into the case's ``jitter_seed``: the case file is
  public, and draws from its seed alone could be computed from it and matched against a bundle's trace ids
  and process ids (issue 44). Nothing a label says follows them.

Host-scope metric samples (one host's, as recorded) are kept as they are; per-rank metric values are the
source rank's (the warp moves only their times).
"""

from __future__ import annotations

import gzip
import io
import pickle
import re
import secrets
import shutil
import uuid
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from diageval.bundle.model import BundleEnv, rank_trace_files
from diageval.fileio import read_jsonl, write_jsonl
from diageval.recording.faults.base import BundleFault
from diageval.recording.faults.bundle_edits import (
    EvidenceEditError,
    _PlainUnpickler,
    read_trace,
    shift_log_stamps,
    shift_trace_clock,
    window_trace,
)

RANKS_PER_HOST = 8
HOST_CLOCK_SD_MS = 1.0
WARP_KNOT_US = 1000.0
WARP_SD_US = 200.0  # sqrt(2) * 200 / 1000 = 0.28: the measured per-op spread between ranks (module doc)
WARP_CLIP_US = 450.0  # under half a knot: slopes stay >= 0.1, so the warp is strictly monotone
_RANK_LINE = re.compile(r"\brank (\d+)/(\d+)\b")
_RANK_NAME = re.compile(r"rank\d+")
_TIMED, _LASTS, _OWN_PID, _META = 1, 2, 4, 8  # what a source event carries that a scaled rank changes
_THREAD_NAME = re.compile(r"\bthread (\d+)")
_PID_TID = re.compile(r"(?<= )(\d+):(\d+)(?= )")  # Kineto's log lines: "USDT:<date> <time> pid:tid file:line]"


class ScaleOut(BundleFault):
    def bundle_env(self, env: BundleEnv) -> BundleEnv:
        return env.model_copy(update={"world_size": self.params.scaled_world_size})

    def recorded_rank(self, rank: int) -> int:
        """The kept rank where it was placed, a copy of the other recorded rank everywhere else (a copy's warp
        keeps each step's figures within 2 * WARP_CLIP_US of its source's)."""
        return self.params.kept_rank if rank == self.params.kept_at_rank else self.params.copied_rank

    def apply(self, bundle_dir: Path) -> None:
        p = self.params
        bundle_dir = Path(bundle_dir)
        traces = rank_trace_files(bundle_dir)
        for r in (p.kept_rank, p.copied_rank):
            if r not in traces:
                raise EvidenceEditError(f"{bundle_dir}: no trace of rank {r} to scale out (ranks traced: {sorted(traces)})")
        sources = {r: _Source(bundle_dir, r, traces[r], p.window_first_step, p.window_steps) for r in (p.kept_rank, p.copied_rank)}
        n = p.scaled_world_size
        traced = set(range(n)) if p.traced_ranks is None else set(p.traced_ranks)
        seed = [p.jitter_seed, secrets.randbits(63)]  # the case's seed and a fresh one per derivation (module doc)
        rng = np.random.default_rng(seed)
        host_offsets_us = rng.normal(0.0, HOST_CLOCK_SD_MS * 1000.0, size=(n + RANKS_PER_HOST - 1) // RANKS_PER_HOST)
        pids = rng.choice(np.arange(1000, 4_000_000), size=n, replace=False)
        for folder in [bundle_dir / f"rank{r}" for r in traces] + [bundle_dir / "logs", bundle_dir / "flight_recorder"]:
            if folder.is_dir():
                shutil.rmtree(folder)
        step_rows: list[dict[str, Any]] = []
        metric_rows: list[dict[str, Any]] = []
        for rank in range(n):
            src = sources[p.kept_rank if rank == p.kept_at_rank else p.copied_rank]
            rank_rng = np.random.default_rng([*seed, rank])
            warp = _Warp(src.span_us, rank_rng)
            skew_us = float(host_offsets_us[rank // RANKS_PER_HOST])
            identity = _Identity(rank, n, int(pids[rank]), src.pid, rank // RANKS_PER_HOST)
            if rank in traced:
                _write_trace(bundle_dir / f"rank{rank}" / "trace.json.gz", src, warp, skew_us, identity)
            step_rows += _moved_rows(src.steps, rank, src.base_us, warp, skew_us, ("t_start", "t_end"))
            metric_rows += _moved_rows(src.metrics, rank, src.base_us, warp, skew_us, ("time",))
            copied = sources[p.copied_rank]  # every rank's log from one source (module doc: Logs)
            if copied.log is not None:
                log = _RANK_LINE.sub(lambda m: f"rank {rank}/{n}", identity.renumber(copied.log))
                (bundle_dir / "logs").mkdir(exist_ok=True)
                (bundle_dir / "logs" / f"rank{rank}.log").write_text(shift_log_stamps(log, skew_us / 1e6))
            if src.dump is not None:
                (bundle_dir / "flight_recorder").mkdir(exist_ok=True)
                (bundle_dir / "flight_recorder" / f"rank_{rank}").write_bytes(_scaled_dump(src.dump, round(skew_us * 1000), n))
        step_rows.sort(key=lambda row: (row.get("step", 0), row["rank"]))
        if (bundle_dir / "steps.jsonl").is_file():
            write_jsonl(bundle_dir / "steps.jsonl", step_rows)
        metrics = bundle_dir / "metrics.jsonl"
        if metrics.is_file():
            host_rows = [row for row in read_jsonl(metrics) if row.get("scope") != "rank"]
            write_jsonl(metrics, sorted(host_rows + metric_rows, key=lambda row: row.get("time", 0.0)))


class _Source:
    """One recorded rank's evidence, read once: its windowed trace, step rows, metric rows, log, dump."""

    def __init__(self, bundle_dir: Path, rank: int, trace: Path, first: int, count: int):
        self.doc = read_trace(trace)
        window_trace(self.doc, first, count, trace)
        base = self.doc.get("baseTimeNanoseconds")
        self.base_us = base / 1000.0 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
        stamps = [e["ts"] for e in self.doc["traceEvents"] if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
        if not stamps:
            raise EvidenceEditError(f"{trace}: no timed events to scale out")
        self.span_us = (min(stamps), max(stamps))
        self.events = [e for e in self.doc["traceEvents"] if isinstance(e, dict)]
        self.ts = np.array([e["ts"] if isinstance(e.get("ts"), (int, float)) else np.nan for e in self.events])
        self.dur = np.array([e["dur"] if isinstance(e.get("dur"), (int, float)) else 0.0 for e in self.events])
        self.kinds = [(_TIMED if isinstance(e.get("ts"), (int, float)) else 0)
                      | (_LASTS if isinstance(e.get("dur"), (int, float)) else 0)
                      | (_OWN_PID if isinstance(e.get("pid"), int) and not isinstance(e.get("pid"), bool) else 0)
                      | (_META if e.get("ph") == "M" and isinstance(e.get("args"), dict) else 0) for e in self.events]
        pids = [e.get("pid") for e in self.doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
        numeric = [x for x in pids if isinstance(x, int) and not isinstance(x, bool)]
        self.pid = max(set(numeric), key=numeric.count) if numeric else None
        steps, metrics = bundle_dir / "steps.jsonl", bundle_dir / "metrics.jsonl"
        self.steps = [r for r in read_jsonl(steps) if r.get("rank") == rank] if steps.is_file() else []
        self.metrics = ([r for r in read_jsonl(metrics) if r.get("scope") == "rank" and r.get("rank") == rank]
                        if metrics.is_file() else [])
        log = bundle_dir / "logs" / f"rank{rank}.log"
        self.log = log.read_text() if log.is_file() else None
        dump = bundle_dir / "flight_recorder" / f"rank_{rank}"
        self.dump = dump.read_bytes() if dump.is_file() else None


class _Warp:
    """A random monotone map of a rank's time (microseconds of its trace clock); see the module doc."""

    def __init__(self, span: tuple[float, float], rng: np.random.Generator):
        lo, hi = span
        knots = max(2, int((hi - lo) / WARP_KNOT_US) + 2)
        self.x = lo + WARP_KNOT_US * np.arange(knots)
        self.dy = np.clip(rng.normal(0.0, WARP_SD_US, size=knots), -WARP_CLIP_US, WARP_CLIP_US)

    def __call__(self, t: np.ndarray) -> np.ndarray:
        return t + np.interp(t, self.x, self.dy)


class _Identity:
    """Who a scaled rank is: its rank, world size, process id (thread ids keep their distance to it), host."""

    def __init__(self, rank: int, world: int, pid: int, source_pid: int | None, host: int):
        self.rank, self.world, self.pid, self.source_pid, self.host = rank, world, pid, source_pid, host

    def pid_of(self, value: Any) -> Any:
        if self.source_pid is None or not isinstance(value, int) or isinstance(value, bool):
            return value
        return value - self.source_pid + self.pid

    def metadata_args(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """A metadata event's args with the ids they quote moved (``thread 32079 (pt_gloo_runloop)``)."""
        if name == "process_sort_index":
            return {**args, "sort_index": self.pid_of(args.get("sort_index"))}
        if name == "thread_name" and isinstance(args.get("name"), str):
            return {**args, "name": _THREAD_NAME.sub(lambda m: f"thread {self.pid_of(int(m.group(1)))}", args["name"])}
        return args

    def renumber(self, text: str) -> str:
        """A log's process and thread ids (Kineto's ``pid:tid``) moved like the trace's."""
        if self.source_pid is None:
            return text
        return _PID_TID.sub(lambda m: f"{self.pid_of(int(m.group(1)))}:{self.pid_of(int(m.group(2)))}", text)


def _write_trace(path: Path, src: _Source, warp: _Warp, skew_us: float, who: _Identity) -> None:
    probe = {k: v for k, v in src.doc.items() if k == "baseTimeNanoseconds"}
    probe["traceEvents"] = [{"ts": src.span_us[0]}]
    shift_trace_clock(probe, skew_us)  # the skewed host's clock, as Kineto writes it: a new base, or ts moved
    warped = warp(src.ts)
    new_dur = np.round(warp(src.ts + src.dur) - warped, 3).tolist()
    new_ts = np.round(warped + (probe["traceEvents"][0]["ts"] - src.span_us[0]), 3).tolist()
    shift = who.pid - src.pid if src.pid is not None else 0
    out = []
    for e, t, d, kind in zip(src.events, new_ts, new_dur, src.kinds):
        e = dict(e)
        if kind & _TIMED:
            e["ts"] = t
        if kind & _LASTS:
            e["dur"] = d
        if kind & _OWN_PID:
            e["pid"] += shift
            if isinstance(e.get("tid"), int) and e["tid"] > 0:  # tid 0: a process-wide metadata row
                e["tid"] += shift
            if kind & _META:
                e["args"] = who.metadata_args(e["name"], e["args"])
        out.append(e)
    doc = {k: v for k, v in src.doc.items() if k != "traceEvents"}
    dist = doc.get("distributedInfo")
    if isinstance(dist, dict):
        group = list(range(who.world))
        doc["distributedInfo"] = {**dist, "rank": who.rank, "world_size": who.world, "pg_config": [
            {**pg, "pg_size": who.world, "ranks": group} if isinstance(pg, dict) else pg for pg in dist.get("pg_config") or []]}
    if "trace_id" in doc:
        doc["trace_id"] = np.random.default_rng([who.pid, who.rank]).bytes(16).hex().upper()
    if isinstance(doc.get("traceName"), str):
        doc["traceName"] = _RANK_NAME.sub(f"rank{who.rank}", doc["traceName"])
    if isinstance(doc.get("host_name"), str):
        doc["host_name"] = f"{doc['host_name']}-{who.host:04d}"
    if "baseTimeNanoseconds" in probe:
        doc["baseTimeNanoseconds"] = probe["baseTimeNanoseconds"]
    path.parent.mkdir(parents=True, exist_ok=True)
    # one event a line, as Kineto writes them (line-oriented readers and greps stay cheap)
    events = b",\n".join(map(msgspec.json.encode, out))
    raw = msgspec.json.encode(doc)[:-1] + (b',' if doc else b'') + b'\n"traceEvents":[\n' + events + b"\n]}"
    path.write_bytes(gzip.compress(raw, compresslevel=1))


def _moved_rows(rows: list[dict[str, Any]], rank: int, base_us: float, warp: _Warp, skew_us: float,
                keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Step-log or metric rows of the source rank, as the scaled rank's: warped, skewed, renumbered."""
    out = [{**row, "rank": rank} for row in rows]
    for key in keys:
        timed = [i for i, row in enumerate(rows) if isinstance(row.get(key), (int, float))]
        t_us = np.array([rows[i][key] * 1e6 - base_us for i in timed])
        moved = ((warp(t_us) - t_us + skew_us) / 1e6).tolist() if timed else []
        for i, delta in zip(timed, moved):
            out[i][key] = rows[i][key] + delta
    return out


def _scaled_dump(data: bytes, offset_ns: int, world: int) -> bytes:
    """A Flight Recorder dump of the scaled group: times moved, the group's ranks and all_gather outputs widened."""
    try:
        dump = _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise EvidenceEditError(f"not a Flight Recorder dump ({exc})") from exc
    if not isinstance(dump, dict):
        return data
    for pg in (dump.get("pg_config") or {}).values():
        if isinstance(pg, dict) and "ranks" in pg:
            pg["ranks"] = str(list(range(world)))
    for entry in dump.get("entries", []):
        for key, value in entry.items():
            if key.startswith("time_") and key.endswith("_ns") and isinstance(value, int):
                entry[key] = value + offset_ns
        if "all_gather" in str(entry.get("profiling_name", "")) and isinstance(entry.get("output_sizes"), list):
            entry["output_sizes"] = [[world, *s[1:]] if isinstance(s, list) and s else s for s in entry["output_sizes"]]
    return pickle.dumps(dump, protocol=2)
