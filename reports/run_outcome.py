"""What a person reads when ``diageval run`` ends: what ran, how cases ended, the main metrics."""

from __future__ import annotations

from diageval.reports.leaderboard import format_metric
from diageval.run.pipeline import RunOutcome

HEADLINE_METRICS = [
    ("f1", "F1", ".2f"),
    ("precision", "precision", ".2f"),
    ("recall", "recall", ".2f"),
    ("misleading_rate", "misleading", ".2f"),
    ("false_alarm_rate", "false alarms", ".2f"),
    ("abstention_accuracy", "abstention", ".2f"),
    ("top1_accuracy", "top-1", ".2f"),
    ("seconds_per_case", "s/case", ".3g"),
]


def format_run_outcome(outcome: RunOutcome) -> str:
    """The headline a person reads when a run ends: what ran, how cases ended, the main metrics."""
    s, m = outcome.summary, outcome.info
    c = outcome.counts
    statuses = ", ".join(f"{k} {v}" for k, v in s.counts.statuses.items())
    lines = [
        f"run {outcome.run_dir} ({m.status}): {m.diagnoser.name} {m.diagnoser.version} on case set "
        f"{m.case_set_hash[:12]} (taxonomy {m.taxonomy_version})",
        f"this invocation: {c['prepared']} prepared, {c['diagnosed']} diagnosed, {c['resumed']} already done, "
        f"{c['skipped']} skipped",
        f"{s.counts.cases} results, {s.counts.scored} scored: {statuses}",
        "",
    ]
    width = max(len(label) for _, label, _ in HEADLINE_METRICS)
    for key, label, digits in HEADLINE_METRICS:
        lines.append(f"  {label:<{width}}  {format_metric(getattr(s.metrics, key), digits)}")
    if m.diagnoser.self_test:
        lines.append("\n(self-test: this diagnoser reads the labels; it checks the harness and is never ranked)")
    lines.append(f"\nintervals: 95% bootstrap over cases; full metrics in {outcome.run_dir / 'summary.json'}")
    return "\n".join(lines)
