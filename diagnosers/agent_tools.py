"""The tools the ``agent`` diagnoser's model calls: plain functions over ONE bundle folder, served over MCP by
:mod:`diageval.diagnosers.agent_mcp` inside the diagnoser's box.

Every tool reads through the bundle readers every built-in shares (``EvidenceBundle``, ``summarize_trace``,
``trace_stats``, the streaming trace reader, ``read_fleet``); none parses a trace its own way. A tool answers a
JSON-able dict, cut to :data:`MAX_RESULT_CHARS` (a model's context is the budget), or raises
:class:`ToolRefused` with a message the model reads.

Confinement: :class:`BundleTools` is built on one folder (the box's private bundle copy) and resolves every path
a model names inside it (:meth:`BundleTools.inside`): an absolute path, a ``..`` that climbs out, or a link that
leads out is refused, whatever lies there. A fleet run is addressed by its name, through ``fleet.json``'s own
validated ``runs/<name>`` folders. The box is the outer wall (it shows nothing but the bundle copy); this is the
inner one, so a tool never becomes a way to read the Python installation or the system the box shows.

Times: steps and windows are in milliseconds; a window is given relative to a step's start (the model reads
steps from ``step_table``), so no tool needs the trace's own clock.
"""

from __future__ import annotations

import functools
import json
import os
from bisect import bisect_right
from collections import defaultdict
from pathlib import Path
from typing import Any

from diageval.bundle import kineto as K
from diageval.bundle.attribution import HOST_WHAT, WHAT
from diageval.bundle.fleet import read_fleet
from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stats import trace_stats as _trace_stats
from diageval.bundle.trace_stream import StreamState, iter_trace_windows
from diageval.bundle.trace_summary import TraceSummary, summarize_trace

MAX_RESULT_CHARS = 12_000
"""What one tool answer may hold (~3,000 tokens at 4 characters a token): a model that wants more asks again
with a narrower question (one rank, one step, an offset)."""
MAX_READ_CHARS = 8_000
MAX_EVENTS = 200
TOP_DEFAULT = 10


class ToolRefused(ValueError):
    """A tool call the bundle cannot answer (a path outside it, a rank it does not hold): the model reads why."""


class BundleTools:
    """The tools, bound to one bundle folder (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(os.path.realpath(root))
        self.bundle = EvidenceBundle.open(self.root)

    # --- confinement ------------------------------------------------------------------------------------

    def inside(self, relative: str, base: Path | None = None) -> Path:
        """``relative`` resolved inside the bundle (links followed), or :class:`ToolRefused`."""
        base = base or self.root
        if not isinstance(relative, str) or not relative or "\x00" in relative:
            raise ToolRefused("a path relative to the bundle folder is expected, e.g. 'logs/rank0.log'")
        if os.path.isabs(relative):
            raise ToolRefused(f"refused: {relative!r} is an absolute path; tools read only the bundle, by paths relative to it")
        resolved = Path(os.path.realpath(base / relative))
        if resolved != self.root and self.root not in resolved.parents:
            raise ToolRefused(f"refused: {relative!r} lies outside the bundle; tools read only the bundle")
        return resolved

    def _bundle(self, run: str | None) -> EvidenceBundle:
        if run is None or run == "":
            return self.bundle
        fleet = read_fleet(self.bundle)
        if fleet is None:
            raise ToolRefused("this bundle is one job (no fleet.json): leave 'run' empty")
        try:
            info = fleet.run(run)
        except KeyError as exc:
            raise ToolRefused(str(exc.args[0])) from None
        self.inside(info.bundle)  # fleet.json's own path, confined like any other
        return fleet.open_run(run)

    def _trace(self, rank: int, run: str | None) -> tuple[EvidenceBundle, Path]:
        bundle = self._bundle(run)
        paths = bundle.trace_paths()
        if rank not in paths:
            raise ToolRefused(f"no trace for rank {rank}; ranks with a trace: {sorted(paths)}")
        return bundle, self.inside(str(paths[rank].relative_to(self.root)))

    # --- the tools ------------------------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        """The bundle: environment, ranks with a trace and a log, its files with their sizes, fleet runs if any."""
        b = self.bundle
        fleet = read_fleet(b)
        files = [{"path": f.path, "bytes": f.size} for f in b.manifest.files]
        return {
            "environment": b.env.model_dump(mode="json"), "world_size": b.world_size, "origin": b.manifest.origin,
            "ranks_with_trace": sorted(b.trace_paths()), "ranks_with_log": sorted(b.log_paths()),
            "fleet_runs": [r.name for r in fleet.runs] if fleet else None,
            "files": files[:200], "files_total": len(files),
        }

    def read_file(self, path: str, offset: int = 0, max_chars: int = MAX_READ_CHARS) -> dict[str, Any]:
        """Text of one bundle file (a log, steps.jsonl, metrics.jsonl, fleet.json) from ``offset``."""
        target = self.inside(path)
        if not target.is_file():
            raise ToolRefused(f"{path!r} is not a file of the bundle")
        if target.name.endswith(".gz"):
            raise ToolRefused("a trace is read with the trace tools (trace_summary, top_ops, events_in_window)")
        max_chars = max(1, min(int(max_chars), MAX_READ_CHARS))
        with open(target, "rb") as fh:
            fh.seek(max(0, int(offset)))
            data = fh.read(max_chars + 1)
        text = data[:max_chars].decode("utf-8", errors="replace")
        return {"path": path, "offset": offset, "text": text, "more": len(data) > max_chars,
                "bytes": target.stat().st_size}

    def step_table(self, run: str | None = None) -> dict[str, Any]:
        """steps.jsonl per rank: each step's duration in ms, with each rank's median."""
        per_rank: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for s in self._bundle(run).steps():
            per_rank[s.rank].append((s.step, round(s.duration * 1e3, 2)))
        out = {}
        for rank, rows in sorted(per_rank.items()):
            rows.sort()
            ms = sorted(d for _, d in rows)
            out[str(rank)] = {"median_ms": ms[len(ms) // 2], "steps": {str(k): v for k, v in rows}}
        return {"ranks": out} if out else {"ranks": {}, "note": "no steps.jsonl in this bundle"}

    def trace_summary(self, rank: int, run: str | None = None) -> dict[str, Any]:
        """Per profiled step of one rank's trace: where the time went (ms)."""
        s = self._summary(rank, run)
        rows = [{"step": st.number, "ms": _ms(st.dur_us), "data_wait": _ms(st.data_wait_us),
                 "collective": _ms(st.collective_us), "host_busy": _ms(st.host_busy_us),
                 "unexplained": _ms(st.unexplained_us), "device_busy": _ms(st.device_busy_us),
                 "host_ops": st.host_ops, "short_ops": st.short_ops, "kernels": st.kernels, "sync": _ms(st.sync_us)}
                for st in s.steps]
        return {"rank": rank, "devices": s.devices, "truncated": s.truncated,
                "collectives": dict(list(s.collective_names.items())[:20]), "steps": rows}

    def trace_stats(self, rank: int, run: str | None = None) -> dict[str, Any]:
        """Per step device measurements of one rank's trace (``diageval trace stats``): busy share, idle gaps,
        launch delays, time by kernel class, blocking calls, exposed communication."""
        bundle, path = self._trace(rank, run)
        st = _stats(str(path))
        rows = [{"step": x.number, "ms": _ms(x.dur_us), "device_busy_share": round(x.device_busy_share, 3),
                 "device_idle": _ms(x.device_idle_us), "launches": x.launches,
                 "launch_delay_median_us": x.launch_delay_median_us,
                 "by_class_ms": {k: _ms(v) for k, v in x.device_us_by_class.items()},
                 "blocking_ms": {k: _ms(v.host_us) for k, v in x.blocking.items() if v.calls},
                 "dataloader_wait": _ms(x.dataloader_wait_us), "comm_exposed": _ms(x.comm_exposed_us),
                 "allocations": x.allocations} for x in st.steps]
        return {"rank": rank, "has_device_events": st.has_device_events, "whole_trace": st.whole_trace, "steps": rows}

    def time_table(self, rank: int, run: str | None = None) -> dict[str, Any]:
        """Where one rank's profiled time went, summed over its steps (``diageval trace stats``' time table): the
        device's work and, for every instant the device idled, what the launching threads were doing (waiting for
        data, blocked in a sync, freeing memory, dispatching...), each part's ms, share of the summed step time,
        its standard error and the occurrences it is made of. On a trace without device events (a CPU job) the
        main thread stands in for the device (its time in the model's ops, and what it did outside them)."""
        _, path = self._trace(rank, run)
        st = _stats(str(path))
        if not st.time_table:
            return {"rank": rank, "has_device_events": st.has_device_events, "parts": [],
                    "note": "no time table for this trace (no step, window or device events to split); see "
                            "trace_summary"}
        what = WHAT if st.has_device_events else HOST_WHAT
        return {"rank": rank, "has_device_events": st.has_device_events, "whole_trace": st.whole_trace,
                "units": st.time_table[0].units,
                "parts": [{"part": r.part, "ms": _ms(r.us), "share": round(r.share, 4), "se": round(r.se, 4),
                           "occurrences": r.occurrences, "what": what[r.part]} for r in st.time_table if r.us > 0]}

    def top_ops(self, rank: int, step: int | None = None, kind: str = "host", limit: int = TOP_DEFAULT,
                run: str | None = None) -> dict[str, Any]:
        """The names that took the most time in one step (or every profiled step): host ops (``kind='host'``)
        or device kernels (``kind='kernel'``), by total duration, with their counts."""
        if kind not in ("host", "kernel"):
            raise ToolRefused("kind is 'host' or 'kernel'")
        cats = K.HOST_OP_CATEGORIES if kind == "host" else K.DEVICE_CATEGORIES
        windows = self._step_windows(rank, run, step)
        per_step: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
        starts = [w[1] for w in windows]
        for ev, t in self._events(rank, run, cats):
            i = bisect_right(starts, t) - 1
            if i < 0 or t >= windows[i][2] or (ev.name or "").startswith(K.PROFILER_STEP_PREFIX):
                continue
            cell = per_step[windows[i][0]][_short_name(ev.name or "?", kind)]
            cell[0] += float(ev.dur)
            cell[1] += 1
        limit = max(1, min(int(limit), 50))
        out = {}
        for number, names in sorted(per_step.items()):
            top = sorted(names.items(), key=lambda kv: -kv[1][0])[:limit]
            out[str(number)] = [{"name": n, "ms": _ms(v[0]), "count": int(v[1])} for n, v in top]
        return {"rank": rank, "kind": kind, "steps": out}

    def compare_ranks(self, rank_a: int, rank_b: int, run: str | None = None) -> dict[str, Any]:
        """Two ranks side by side: the median of each per-step column, and the steps where they differ most."""
        a, b = self._summary(rank_a, run), self._summary(rank_b, run)
        cols = ("dur_us", "data_wait_us", "collective_us", "host_busy_us", "unexplained_us", "device_busy_us")
        med = {c[:-3]: {"a": _ms(_median([getattr(s, c) for s in a.steps])), "b": _ms(_median([getattr(s, c) for s in b.steps]))}
               for c in cols}
        by_b = {s.number: s for s in b.steps}
        diffs = sorted(((s.number, s.dur_us - by_b[s.number].dur_us) for s in a.steps if s.number in by_b),
                       key=lambda x: -abs(x[1]))[:10]
        return {"rank_a": rank_a, "rank_b": rank_b, "median_ms": med,
                "largest_step_differences_ms": [{"step": n, "a_minus_b": _ms(d)} for n, d in diffs]}

    def events_in_window(self, rank: int, step: int, offset_ms: float = 0.0, length_ms: float = 10.0,
                         run: str | None = None, limit: int = 50) -> dict[str, Any]:
        """The complete events of one rank that overlap a window starting ``offset_ms`` after ``step`` began,
        ``length_ms`` long: name, category, thread, start (ms from the step's start) and duration (ms)."""
        windows = {w[0]: w for w in self._step_windows(rank, run, step)}
        _, lo_abs, _ = windows[step]
        lo, hi = lo_abs + float(offset_ms) * 1e3, lo_abs + (float(offset_ms) + max(0.0, float(length_ms))) * 1e3
        limit = max(1, min(int(limit), MAX_EVENTS))
        found, total = [], 0
        for ev, t in self._events(rank, run, None):
            end = t + max(0.0, float(ev.dur))
            if end < lo or t >= hi:
                continue
            total += 1
            if len(found) < limit:
                found.append({"name": (ev.name or "?")[:120], "cat": ev.cat, "tid": str(ev.tid)[:20],
                              "start_ms": round((t - lo_abs) / 1e3, 3), "ms": _ms(float(ev.dur))})
        found.sort(key=lambda e: e["start_ms"])
        return {"rank": rank, "step": step, "window_ms": [offset_ms, offset_ms + length_ms], "events": found,
                "events_total": total}

    def fleet_runs(self) -> dict[str, Any]:
        """A regression or fleet bundle's runs: name, metadata (factor -> value), start, role, median step ms."""
        fleet = read_fleet(self.bundle)
        if fleet is None:
            return {"fleet": False, "note": "one job's bundle: no fleet.json"}
        rows = []
        for r in fleet.ordered():
            steps = sorted(s.duration * 1e3 for s in fleet.open_run(r.name).steps())
            rows.append({"name": r.name, "metadata": r.metadata, "start": r.start.isoformat(), "role": r.role,
                         "median_step_ms": round(steps[len(steps) // 2], 2) if steps else None, "steps": len(steps)})
        return {"fleet": True, "regression": fleet.is_regression, "factors": fleet.factors, "runs": rows}

    # --- helpers ----------------------------------------------------------------------------------------

    def _summary(self, rank: int, run: str | None) -> TraceSummary:
        _, path = self._trace(rank, run)
        return _summarize(str(path))

    def _step_windows(self, rank: int, run: str | None, step: int | None) -> list[tuple[int, float, float]]:
        """(number, start, end) of the rank's profiled steps in the trace's own clock (us), one step or all."""
        s = self._summary(rank, run)
        wins = [(st.number, st.start_us - s.base_time_us, st.start_us - s.base_time_us + st.dur_us) for st in s.steps]
        if step is not None:
            wins = [w for w in wins if w[0] == step]
            if not wins:
                raise ToolRefused(f"rank {rank}'s trace has no profiled step {step}; steps: "
                                  f"{[st.number for st in s.steps][:50]}")
        if not wins:
            raise ToolRefused(f"rank {rank}'s trace has no ProfilerStep markers")
        return sorted(wins, key=lambda w: w[1])

    def _events(self, rank: int, run: str | None, cats: frozenset[str] | None):
        """(event, start) of the rank's complete events with numeric times (of ``cats`` when given), streamed."""
        _, path = self._trace(rank, run)
        for window in iter_trace_windows(path, StreamState()):
            for ev in window:
                if ev.ph != "X" or (cats is not None and ev.cat not in cats):
                    continue
                if isinstance(ev.ts, (int, float)) and isinstance(ev.dur, (int, float)):
                    yield ev, float(ev.ts)


@functools.lru_cache(maxsize=64)
def _summarize(path: str) -> TraceSummary:
    return summarize_trace(Path(path))


@functools.lru_cache(maxsize=16)
def _stats(path: str):
    return _trace_stats(Path(path))


def _ms(us: float | None) -> float | None:
    return None if us is None else round(float(us) / 1e3, 3)


def _median(values: list[float]) -> float | None:
    v = sorted(values)
    return v[len(v) // 2] if v else None


def _short_name(name: str, kind: str) -> str:
    return (K.kernel_name_head(name) if kind == "kernel" else name)[:160]


def shortened(value: Any, limit: int = MAX_RESULT_CHARS) -> str:
    """``value`` as compact JSON text, cut to ``limit`` characters with the cut said."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    if len(text) <= limit:
        return text
    return text[:limit] + f"...[{len(text) - limit} characters cut]"
