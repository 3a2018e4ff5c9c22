"""``diageval report``: read each run's ``summary.json``, render the leaderboard, write and publish it.

The board's sanity gate (what the reference diagnosers must score) is :mod:`diageval.reports.board_gate`."""

from __future__ import annotations

import os
from pathlib import Path

from diageval.errors import DiagevalError
from diageval.fileio import atomic_write_text
from diageval.reports.leaderboard import LeaderboardError, render_leaderboard
from diageval.reports.signal_value import gather_points, signal_value_markdown, split_by_tier
from diageval.run.store import RunReadError, RunStore
from diageval.scoring.summary import Summary


def read_summaries(run_dirs: list[Path]) -> list[Summary]:
    """Each run's ``summary.json``; :class:`ReportError` names the file and the problem."""
    try:
        return [RunStore(d).read_summary() for d in run_dirs]
    except RunReadError as err:
        raise ReportError(str(err)) from None


class ReportError(DiagevalError):
    """A run folder without a readable summary, or runs that cannot be compared."""


def report_runs(run_dirs: list[Path], output: Path | None = None, step_summary: Path | None = None) -> str:
    """Render the leaderboard of ``run_dirs``; write it to ``output`` (atomically) and append it to
    ``step_summary`` (default ``$GITHUB_STEP_SUMMARY``, when set). Returns the markdown."""
    full, tiered = split_by_tier(run_dirs)  # runs on a smaller evidence tier: the signal-value table, not the board
    summaries = read_summaries(full or tiered)
    try:
        markdown = render_leaderboard(summaries) + skipped_note(run_dirs)
        if tiered:
            markdown += signal_value_markdown(gather_points(run_dirs))
    except LeaderboardError as err:
        raise ReportError(f"{err} (runs: {', '.join(map(str, run_dirs))})") from None
    if output is not None:
        atomic_write_text(output, markdown)
    step_summary = step_summary or (Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None)
    if step_summary is not None:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
    return markdown


def skipped_note(run_dirs: list[Path]) -> str:
    """A markdown line listing the cases the runs could not run on their machine (e.g. CUDA-only cases on a
    CPU box) with the reason: skipped, never failed or scored, and said so under the board."""
    skipped: dict[str, str] = {}
    for d in run_dirs:
        store = RunStore(d)
        if store.info_path.is_file():
            for s in store.read_info().skipped:
                skipped.setdefault(s.case_id, s.reason)
    if not skipped:
        return ""
    items = "; ".join(f"`{case}` ({reason})" for case, reason in sorted(skipped.items()))
    return f"\nSkipped on this machine, not scored: {len(skipped)} case(s): {items}.\n"
