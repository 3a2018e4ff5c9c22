"""The markdown leaderboard: one row per run, every number with its interval and n.

Decided here (the design is silent):

* Runs are comparable only on the same case set: the same case-set hash, taxonomy version and number of
  results. A run that stopped early has fewer results and is refused rather than ranked on a subset.
* Ranking: F1 (higher first; undefined last), then misleading rate (lower first; undefined last), then
  diagnoser name. Self-test diagnosers (the oracle reads labels) are listed after the ranked rows,
  unranked. Reference diagnosers (baselines) are ranked like any other and marked, so a real diagnoser
  is seen to beat them or not.
* Cells read ``value [lo, hi] n=N``; an undefined metric reads ``–`` with its n. Rates use two
  decimals, seconds three significant digits.
"""

from __future__ import annotations

import math
from pathlib import Path

import jinja2

from diageval.scoring.metrics import MetricValue
from diageval.scoring.summary import Summary

TEMPLATES = Path(__file__).parent / "templates"

COLUMNS: list[tuple[str, str]] = [
    ("f1", "F1 ↑"),
    ("precision", "precision ↑"),
    ("recall", "recall ↑"),
    ("misleading_rate", "misleading ↓"),
    ("false_alarm_rate", "false alarms ↓"),
    ("abstention_accuracy", "abstention ↑"),
    ("top1_accuracy", "top-1 ↑"),
    ("localization_accuracy", "localisation ↑"),
    ("brier", "Brier ↓"),
    ("ece", "ECE ↓"),
    ("seconds_per_case", "s/case ↓"),
]


class LeaderboardError(ValueError):
    """Summaries that cannot share a leaderboard."""


def format_metric(m: MetricValue, digits: str = ".2f") -> str:
    if m.value is None:
        return f"– n={m.n}"
    text = format(m.value, digits)
    if m.ci is not None:
        text += f" [{format(m.ci[0], digits)}, {format(m.ci[1], digits)}]"
    return f"{text} n={m.n}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def check_comparable(summaries: list[Summary]) -> None:
    """Raise :class:`LeaderboardError` unless every summary is on the same case set."""
    if not summaries:
        raise LeaderboardError("no runs to compare")
    for field, get in (
        ("case-set hash", lambda s: s.case_set_hash),
        ("taxonomy version", lambda s: s.taxonomy_version),
        ("number of results", lambda s: s.counts.cases),
    ):
        values = {get(s) for s in summaries}
        if len(values) > 1:
            each = "; ".join(f"{s.diagnoser.name}: {get(s)}" for s in summaries)
            raise LeaderboardError(f"runs made on different case sets cannot share a leaderboard: "
                                   f"the {field} differs ({each})")


def _rank_key(s: Summary) -> tuple:
    f1, mis = s.metrics.f1.value, s.metrics.misleading_rate.value
    return (f1 is None, -(f1 or 0.0), mis is None, mis if mis is not None else math.inf, s.diagnoser.name)


def _row(s: Summary, rank: str) -> dict:
    name = s.diagnoser.name + (f" {s.diagnoser.version}" if s.diagnoser.version else "")
    marks = [m for m, on in (("self-test", s.diagnoser.self_test), ("reference", s.diagnoser.reference)) if on]
    label = f"{name} *({', '.join(marks)})*" if marks else f"**{name}**"
    cells = [format_metric(getattr(s.metrics, key), ".3g" if key == "seconds_per_case" else ".2f")
             for key, _ in COLUMNS]
    return {"rank": rank, "diagnoser": _cell(label), "scored": s.counts.scored, "cells": [_cell(c) for c in cells]}


def render_leaderboard(summaries: list[Summary]) -> str:
    """Markdown leaderboard of runs on one case set; raises :class:`LeaderboardError` otherwise."""
    check_comparable(summaries)
    ranked = sorted((s for s in summaries if not s.diagnoser.self_test), key=_rank_key)
    unranked = sorted((s for s in summaries if s.diagnoser.self_test), key=lambda s: s.diagnoser.name)
    rows = [_row(s, str(i)) for i, s in enumerate(ranked, 1)] + [_row(s, "–") for s in unranked]

    categories = sorted({c for s in summaries for c in s.by_category})
    recall_rows = [
        {"diagnoser": r["diagnoser"],
         "cells": [_cell(format_metric(s.by_category[c].recall)) if c in s.by_category else "–" for c in categories]}
        for r, s in zip(rows, ranked + unranked)
    ]
    first = summaries[0]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    return env.get_template("leaderboard.md.j2").render(
        cases=first.counts.cases,
        invalid=first.counts.invalid,
        case_set=first.case_set_hash[:12],
        taxonomy_version=first.taxonomy_version,
        resamples=sorted({s.bootstrap.resamples for s in summaries}),
        headers=[h for _, h in COLUMNS],
        rows=rows,
        categories=categories,
        recall_rows=recall_rows,
    )
