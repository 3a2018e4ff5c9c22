"""Scripted models for the ``agent`` diagnoser: test doubles of a chat model, served by
``fake_openai_server.FakeChatServer(model=...)`` (the ``agent`` tests, ``benchmarks/agent_corpus.py``).

* :func:`investigate`, the baseline investigator (below);
* :func:`label_hunter`, the red team given the agent's tools: it hunts for the labels instead of diagnosing (its
  docstring).

The investigator is a baseline, not a label oracle: it sees only the conversation (the tools' answers), asks the
real tools over MCP in the box, and answers by one plain rule, so a wrong or leaky tool answer shows in its diagnosis.

Its turns:

1. ``overview``;
2. a fleet or regression bundle (the overview lists runs): ``fleet_runs``, then it abstains (this baseline reads one
   job's time; naming a factor value is beyond it). A job: ``step_table``, and ``trace_summary`` and
   ``time_table`` of each of the first :data:`MAX_RANKS` ranks with a trace;
3. ``compare_ranks`` (the busiest inspected rank against the least busy) and ``top_ops`` of the busiest;
4. the answer, by the rule:

* **attributed share**: for each inspected rank, the share of its profiled time each host-side part takes while
  the device idles: from the rank's time table when its trace has device events (``data wait`` and ``input work``:
  ``input.dataloader_starvation``; ``sync``: ``host.device_sync``; ``memory``: ``memory.allocator_churn``;
  ``launch``: ``launch.kernel_launch_overhead``, the table's parts as ``rules`` names them), else from the trace
  summary's columns summed over the steps (``data_wait``, ``sync``). The cause with the largest share over
  :data:`SHARE` on some rank is claimed, on the ranks where it is over :data:`SHARE`, confidence ``0.5 + share``
  (at most 0.9);
* **rank against rank**: when ``compare_ranks`` shows the busier rank's median busy time (host busy on a trace
  without device events, device busy with) over ``1 + SHARE`` times the other's: ``compute.straggler_rank`` on the
  busier rank, confidence ``0.5 + (ratio - 1)`` (at most 0.9);
* healthy (no finding) otherwise.

Each claim cites the ranks it was read on and the span of steps the tools showed for them (for the share, the
steps where the part was over :data:`SHARE` of the step when the summary has the column).

:data:`SHARE` is a tenth: a part under a tenth of the time buys under an 11% speed-up removed, inside the
run-to-run spread of the step times these jobs show (the corpus' healthy twins spread 5-12%); a tenth is also the
issue's example rule. It is not fitted to any case.
"""

from __future__ import annotations

import json
from typing import Any

from fake_openai_server import ToolCalls

from diageval.diagnosers.rules.attributed import CAUSE_OF_PART

SHARE = 0.1
MAX_RANKS = 7  # 1 + 2 * 7 = 15 calls: under the agent's 16 tool calls a turn
SUMMARY_PARTS = {"data_wait": "input.dataloader_starvation", "sync": "host.device_sync"}
MAX_CONFIDENCE = 0.9


def _calls(body: dict) -> list[tuple[str, dict, Any]]:
    """(tool, arguments, parsed answer or None) for every tool call of the conversation so far, in order."""
    asked: dict[str, tuple[str, dict]] = {}
    out = []
    for m in body["messages"]:
        for c in m.get("tool_calls") or []:
            try:
                args = json.loads(c["function"]["arguments"] or "{}")
            except ValueError:
                args = {}
            asked[c["id"]] = (c["function"]["name"], args)
        if m.get("role") == "tool" and m.get("tool_call_id") in asked:
            name, args = asked[m["tool_call_id"]]
            try:
                parsed = json.loads(m["content"])
            except (TypeError, ValueError):  # a refusal, an error, or an answer cut at the tool's limit
                parsed = None
            out.append((name, args, parsed))
    return out


def _first(calls: list, name: str) -> Any:
    return next((p for n, _, p in calls if n == name), None)


def _per_rank(calls: list, name: str) -> dict[int, dict]:
    return {a["rank"]: p for n, a, p in calls if n == name and isinstance(p, dict) and "rank" in a}


def _median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if v else 0.0


def _busy_column(summaries: dict[int, dict]) -> str:
    has_device = any(s.get("devices") or any(r.get("device_busy") for r in s.get("steps", []))
                     for s in summaries.values())
    return "device_busy" if has_device else "host_busy"


def _span(steps: list[int]) -> list[int] | None:
    return [min(steps), max(steps) + 1] if steps else None


def investigate(body: dict) -> object:
    """The next reply of the scripted model to the conversation ``body`` (see the module docstring)."""
    calls = _calls(body)
    overview = _first(calls, "overview")
    if not calls:
        return ToolCalls([("overview", {})], content="Reading the bundle's overview.")
    if not isinstance(overview, dict):
        return json.dumps({"findings": [], "abstain": {"reason": "the overview tool gave no readable answer"}})
    if overview.get("fleet_runs"):
        if _first(calls, "fleet_runs") is None:
            return ToolCalls([("fleet_runs", {})])
        return json.dumps({"findings": [], "abstain": {
            "reason": "a fleet or regression: this baseline reads one job's time, not which run's factor is slow"}})
    ranks = list(overview.get("ranks_with_trace") or [])[:MAX_RANKS]
    if not any(n == "step_table" for n, _, _ in calls):
        return ToolCalls([("step_table", {})] + [(tool, {"rank": r}) for r in ranks
                                                  for tool in ("trace_summary", "time_table")])
    summaries = _per_rank(calls, "trace_summary")
    busy = _busy_column(summaries)
    medians = {r: _median([row.get(busy) or 0.0 for row in s.get("steps", [])]) for r, s in summaries.items()}
    if len(medians) >= 2 and not any(n == "compare_ranks" for n, _, _ in calls):
        slow, fast = max(medians, key=medians.get), min(medians, key=medians.get)
        return ToolCalls([("compare_ranks", {"rank_a": slow, "rank_b": fast}),
                          ("top_ops", {"rank": slow, "kind": "kernel" if busy == "device_busy" else "host",
                                       "limit": 5})])
    return json.dumps({"findings": _share_claims(summaries, _per_rank(calls, "time_table"))
                       + _straggler_claims(_first(calls, "compare_ranks"), busy, summaries, _first(calls, "top_ops"))})


def _share_claims(summaries: dict[int, dict], tables: dict[int, dict]) -> list[dict]:
    shares: dict[str, dict[int, float]] = {}  # cause -> rank -> share
    hot_steps: dict[str, dict[int, list[int]]] = {}
    for rank in sorted(set(summaries) | set(tables)):
        table = tables.get(rank) or {}
        parts = (table.get("parts") or []) if table.get("has_device_events") else []  # the rule reads device tables
        steps = (summaries.get(rank) or {}).get("steps") or []
        if parts:
            for p in parts:
                cause = CAUSE_OF_PART.get(p.get("part"))
                if cause:
                    by_rank = shares.setdefault(cause, {})
                    by_rank[rank] = by_rank.get(rank, 0.0) + float(p.get("share") or 0)
        else:
            total = sum(float(s.get("ms") or 0) for s in steps)
            for column, cause in SUMMARY_PARTS.items():
                if total > 0:
                    shares.setdefault(cause, {})[rank] = sum(float(s.get(column) or 0) for s in steps) / total
        for column, cause in SUMMARY_PARTS.items():
            hot_steps.setdefault(cause, {})[rank] = [s["step"] for s in steps
                                                     if s.get("ms") and float(s.get(column) or 0) > SHARE * s["ms"]]
    best = max(((share, cause) for cause, by_rank in shares.items() for share in by_rank.values()), default=None)
    if best is None or best[0] <= SHARE:
        return []
    share, cause = best
    ranks = sorted(r for r, s in shares[cause].items() if s > SHARE)
    steps = sorted({n for r in ranks for n in hot_steps.get(cause, {}).get(r, [])}) or sorted(
        {row["step"] for r in ranks for row in (summaries.get(r) or {}).get("steps", [])})
    span = _span(steps)
    return [{"category": cause, "kind": "cause", "confidence": round(min(MAX_CONFIDENCE, 0.5 + share), 3),
             "ranks": ranks, "steps": span, "cites": {"ranks": ranks, "steps": span},
             "summary": f"{share:.0%} of rank {ranks[0]}'s profiled time is {cause}'s part (over a tenth)"}]


def _straggler_claims(compared: Any, busy: str, summaries: dict[int, dict], top: Any) -> list[dict]:
    if not isinstance(compared, dict):
        return []
    med = (compared.get("median_ms") or {}).get(busy) or {}
    a, b = float(med.get("a") or 0), float(med.get("b") or 0)
    if min(a, b) <= 0 or max(a, b) <= (1 + SHARE) * min(a, b):
        return []
    slow = compared["rank_a"] if a > b else compared["rank_b"]
    ratio = max(a, b) / min(a, b)
    span = _span([row["step"] for row in (summaries.get(slow) or {}).get("steps", [])])
    first = next(iter((top or {}).get("steps", {}).values()), []) if isinstance(top, dict) else []
    busiest = f"; its top op: {first[0]['name']}" if first else ""
    return [{"category": "compute.straggler_rank", "kind": "cause",
             "confidence": round(min(MAX_CONFIDENCE, 0.5 + (ratio - 1)), 3), "ranks": [slow], "steps": span,
             "cites": {"ranks": [slow], "steps": span},
             "summary": f"rank {slow} is busy {max(a, b):.1f} ms a step against {min(a, b):.1f} ms{busiest}"}]


HUNT_BATCH = 16  # the agent runs at most 16 tool calls a turn


def label_hunter(targets: list[str], causes: list[str]):
    """A model that hunts for the labels with the tools instead of diagnosing. It asks, :data:`HUNT_BATCH` calls a
    turn until all are asked: every file the overview lists (traces are refused by ``read_file``: their op and kernel
    names come from ``top_ops``, host and kernel, and ``trace_summary`` of the first :data:`MAX_RANKS` traced
    ranks), every label store it can name (``targets``: the case files and the bundle cache, by absolute and by
    relative path), the process's environment and a fleet run named ``../../..``; then it claims, at full
    confidence, every cause id of ``causes`` that any tool answer holds. Reading no evidence, it can only score
    when a tool hands it a label."""

    def model(body: dict):
        calls = _calls(body)
        overview = _first(calls, "overview")
        if not calls:
            return ToolCalls([("overview", {})])
        asks: list[tuple[str, dict]] = []
        if isinstance(overview, dict):
            asks += [("read_file", {"path": f["path"]}) for f in overview.get("files", [])
                     if not f["path"].endswith(".gz")]
            for rank in (overview.get("ranks_with_trace") or [])[:MAX_RANKS]:
                asks += [("top_ops", {"rank": rank, "kind": kind, "limit": 50}) for kind in ("host", "kernel")]
                asks.append(("trace_summary", {"rank": rank}))
        asks += [("read_file", {"path": t}) for t in targets]
        asks += [("read_file", {"path": "../" * depth + t.lstrip("/")}) for t in targets for depth in (3, 8)]
        asks += [("read_file", {"path": "/proc/self/environ"}), ("step_table", {"run": "../../.."})]
        asked = len(calls) - 1
        if asked < len(asks):
            return ToolCalls(asks[asked:asked + HUNT_BATCH])
        seen = " ".join(m.get("content") or "" for m in body["messages"] if m.get("role") == "tool")
        found = [c for c in causes if c in seen]
        return json.dumps({"findings": [{"category": c, "kind": "cause", "confidence": 1.0,
                                         "summary": "named by a tool's answer"} for c in found]})

    return model
