"""``diageval report``: read each run's ``summary.json``, render the leaderboard, write and publish it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from diageval.fileio import atomic_write_text
from diageval.reports.leaderboard import LeaderboardError, render_leaderboard
from diageval.scoring.summary import SCHEMA_VERSION, Summary
from diageval.validation import field_path


class ReportError(Exception):
    """A run folder without a readable summary, or runs that cannot be compared."""


def load_summary(run_dir: Path) -> Summary:
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise ReportError(f"{run_dir}: no summary.json (an unfinished run? `diageval score {run_dir}` rebuilds it)")
    try:
        data = json.loads(path.read_bytes())
    except json.JSONDecodeError as err:
        raise ReportError(f"{path}: not JSON: {err}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(data, dict) and version != SCHEMA_VERSION:
        raise ReportError(f"{path}: summary schema version {version!r}, this diageval reads {SCHEMA_VERSION} (its "
                          f"headline is skill, a proper score; docs/scoring.md): re-score the run with "
                          f"`diageval score {run_dir}`")
    try:
        return Summary.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{field_path(e['loc']) or '<top level>'}: {e['msg']}"
                             for e in err.errors(include_url=False)[:5])
        raise ReportError(f"{path}: not a diageval summary: {problems}") from None


def report_runs(run_dirs: list[Path], output: Path | None = None, step_summary: Path | None = None) -> str:
    """Render the leaderboard of ``run_dirs``; write it to ``output`` (atomically) and append it to
    ``step_summary`` (default ``$GITHUB_STEP_SUMMARY``, when set). Returns the markdown."""
    summaries = [load_summary(d) for d in run_dirs]
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
