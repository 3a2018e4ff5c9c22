"""``diageval report``: read each run's ``summary.json``, render the leaderboard, write and publish it."""

from __future__ import annotations

import os
from pathlib import Path

from diageval.fileio import atomic_write_text
from diageval.reports.leaderboard import LeaderboardError, render_leaderboard
from diageval.run.store import RunReadError, RunStore


class ReportError(Exception):
    """A run folder without a readable summary, or runs that cannot be compared."""


def report_runs(run_dirs: list[Path], output: Path | None = None, step_summary: Path | None = None) -> str:
    """Render the leaderboard of ``run_dirs``; write it to ``output`` (atomically) and append it to
    ``step_summary`` (default ``$GITHUB_STEP_SUMMARY``, when set). Returns the markdown."""
    try:
        summaries = [RunStore(d).read_summary() for d in run_dirs]
    except RunReadError as err:
        raise ReportError(str(err)) from None
    try:
        markdown = render_leaderboard(summaries)
    except LeaderboardError as err:
        raise ReportError(f"{err} (runs: {', '.join(map(str, run_dirs))})") from None
    if output is not None:
        atomic_write_text(output, markdown)
    step_summary = step_summary or (Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None)
    if step_summary is not None:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
    return markdown
