"""What a person reads when ``diageval run`` ends: what ran, how cases ended, the main metrics."""

from __future__ import annotations

from diageval.inert import inert
from diageval.reports.leaderboard import format_metric, has_agent_cost
from diageval.run.pipeline import RunOutcome
from diageval.scoring.metrics import BOARD, COST, METRICS

SHOWN_UNAVAILABLE = 5  # unavailable cases named in the headline; the rest counted


def format_run_outcome(outcome: RunOutcome, *, fetch_command: str = "diageval data fetch") -> str:
    """The headline a person reads when a run ends: what ran, how cases ended, the main metrics; recorded
    cases without their trace files are named once, with ``fetch_command``, the command that gets them."""
    s, m = outcome.summary, outcome.info
    c = outcome.counts
    statuses = ", ".join(f"{k} {v}" for k, v in s.counts.statuses.items())
    lines = [
        f"run {outcome.run_dir} ({m.status}): {inert(m.diagnoser.name, newlines=False)} "
        f"{inert(m.diagnoser.version, newlines=False)} on case set "
        f"{m.case_set_hash[:12]} (taxonomy {m.taxonomy_version})",
        f"this invocation: {c['prepared']} prepared, {c['diagnosed']} diagnosed"
        + (f" (over {m.repeats} repeats)" if m.repeats > 1 else "") + f", {c['resumed']} already done, "
        f"{c['skipped']} skipped",
        f"{s.counts.cases} results, {s.counts.scored} scored: {statuses}",
    ]
    unwatched = [r for r in outcome.results if r.status == "unavailable" and (r.error or "").startswith("in-job monitor:")]
    if unwatched:  # diageval.recording.monitors.evidence.UNWATCHABLE: no live job for an in-job monitor to watch
        lines.append(f"{len(unwatched)} unavailable to an in-job monitor (real jobs' traces, evidence edits, fleets: "
                     "no live job to watch); reported apart, never scored")
    absent = sorted(r.case_id for r in outcome.results if r.status == "unavailable" and r not in unwatched)
    if absent:  # one line: the evidence lines above and results.jsonl name every one
        named = ", ".join(absent[:SHOWN_UNAVAILABLE]) + (
            f" and {len(absent) - SHOWN_UNAVAILABLE} more" if len(absent) > SHOWN_UNAVAILABLE else "")
        lines.append(f"{len(absent)} unavailable (recorded traces not on this machine: {named}); "
                     f"get them with `{fetch_command}`, then run again")
    lines.append("")
    width = max(len(METRICS[key].label) for key in (*BOARD, *COST))
    for key in BOARD:  # the leaderboard's columns, from the metric table
        lines.append(f"  {METRICS[key].label:<{width}}  {format_metric(getattr(s.metrics, key), METRICS[key].digits)}")
    if has_agent_cost(s):  # an agent's spend per case (the board's cost table)
        lines += [f"  {METRICS[key].label:<{width}}  {format_metric(getattr(s.metrics, key), METRICS[key].digits)}"
                  for key in COST if key not in BOARD]
    if s.repeats is not None:
        r = s.repeats
        lines.append(f"\nrepeats: {r.repeats} over {r.cases} cases: skill {format_metric(r.skill)}; {r.stable} stable, "
                     f"{r.flaky} flaky, {r.catastrophic} catastrophic; consistency {format_metric(r.consistency)}")
    if m.diagnoser.self_test:
        lines.append("\n(self-test: this diagnoser reads the labels; it checks the harness and is never ranked)")
    if m.isolation == "none":
        lines.append(f"\n(no sandbox: {m.isolation_note}; the diagnoser could read the labels, so this run is never ranked)")
    lines.append(f"\nintervals: 95% (Jeffreys for proportions; for the rest the hull of the BCa bootstrap over cases and a jackknife-t interval); full metrics "
                 f"in {outcome.run_dir / 'summary.json'}")
    return "\n".join(lines)
