"""The markdown leaderboard: one row per run, every number with its interval and n.

Decided here (the design is silent):

* Runs are comparable only on the same case set: the same case-set hash, taxonomy version and number of
  results. A run that stopped early has fewer results and is refused rather than ranked on a subset.
* Ranking: by the headline metrics of :data:`~diageval.scoring.metrics.HEADLINE` in order (skill, then
  skill with rank credit; higher first, undefined last), then diagnoser name. Self-test diagnosers (the
  oracle reads labels) are listed after the ranked rows, unranked. Reference diagnosers (baselines) are
  ranked like any other and marked, so a real diagnoser is seen to beat them or not. Skill 0 is
  ``null``'s: a row below it does worse than saying nothing.
* Columns: the metrics of :data:`~diageval.scoring.metrics.BOARD`, labelled ``label ↑`` or ``label ↓``
  from the metric table. Cells read ``value [lo, hi] n=N``; an undefined metric reads ``–`` with its n.
* Marks after a diagnoser's name come from :func:`marks` (one entry per fact about the diagnoser that a
  reader must see next to its numbers: self-test, reference, ...).
* Below the board: recall by cause, and each cause's detection limit (undefined until the corpus holds
  the cause at several severities; the cell then says how many cases it has).
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from diageval.errors import DiagevalError
from diageval.scoring.metrics import BOARD, HEADLINE, METRICS, MetricValue
from diageval.scoring.summary import DETECTION_MIN_CASES, DiagnoserInfo, Summary

TEMPLATES = Path(__file__).parent / "templates"


def column_header(metric: str) -> str:
    spec = METRICS[metric]
    return f"{spec.label} {'↑' if spec.better == 'higher' else '↓'}"


class LeaderboardError(DiagevalError, ValueError):
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


def rank_key(s: Summary) -> tuple:
    """Headline metrics in order, better first (direction from the metric table), undefined last; then name."""
    key: list = []
    for metric in HEADLINE:
        v = getattr(s.metrics, metric).value
        key += [v is None, 0.0 if v is None else (-v if METRICS[metric].better == "higher" else v)]
    return (*key, s.diagnoser.name)


def is_ranked(d: DiagnoserInfo) -> bool:
    """Whether a run takes a rank: not a self-test (oracle reads the labels) and not run without a sandbox
    (``--no-sandbox``: the diagnoser could read the labels, so its score says nothing of it)."""
    return not d.self_test and d.isolation != "none"


def marks(d: DiagnoserInfo) -> list[str]:
    """What a reader must see next to a diagnoser's name."""
    return [mark for mark, on in (("self-test", d.self_test), ("reference", d.reference),
                                  ("no sandbox: isolation none", d.isolation == "none")) if on]


def _row(s: Summary, rank: str) -> dict:
    name = s.diagnoser.name + (f" {s.diagnoser.version}" if s.diagnoser.version else "")
    shown = marks(s.diagnoser)
    label = f"{name} *({', '.join(shown)})*" if shown else f"**{name}**"
    cells = [format_metric(getattr(s.metrics, key), METRICS[key].digits) for key in BOARD]
    return {"rank": rank, "diagnoser": _cell(label), "scored": s.counts.scored, "cells": [_cell(c) for c in cells]}


def _detection_cell(s: Summary, category: str) -> str:
    d = s.detection.get(category)
    if d is None:
        return "–"
    if d.limit is not None:
        return f"{d.limit:.2f} ({d.recall_above:.0%} of cases above)"
    if d.cases < DETECTION_MIN_CASES:
        return f"undefined ({d.cases} of {DETECTION_MIN_CASES} cases)"
    return "not reached"


def render_leaderboard(summaries: list[Summary]) -> str:
    """Markdown leaderboard of runs on one case set; raises :class:`LeaderboardError` otherwise."""
    check_comparable(summaries)
    ranked = sorted((s for s in summaries if is_ranked(s.diagnoser)), key=rank_key)
    unranked = sorted((s for s in summaries if not is_ranked(s.diagnoser)), key=lambda s: s.diagnoser.name)
    rows = [_row(s, str(i)) for i, s in enumerate(ranked, 1)] + [_row(s, "–") for s in unranked]

    categories = sorted({c for s in summaries for c in s.by_category})
    recall_rows = [
        {"diagnoser": r["diagnoser"],
         "cells": [_cell(format_metric(s.by_category[c].recall)) if c in s.by_category else "–" for c in categories]}
        for r, s in zip(rows, ranked + unranked)
    ]
    detection_rows = [{"diagnoser": r["diagnoser"], "cells": [_detection_cell(s, c) for c in categories]}
                      for r, s in zip(rows, ranked + unranked)]
    evidence_kinds = [k for k in ("injected", "recorded") if any(k in s.by_evidence for s in summaries)]
    evidence_rows = [{"diagnoser": r["diagnoser"],
                      "cells": [_evidence_cell(s, k) for k in evidence_kinds]}
                     for r, s in zip(rows, ranked + unranked)]
    coverage_rows = [{"diagnoser": r["diagnoser"], "field": _field(s),
                      "own": format_metric(s.recall_claimable) if s.recall_claimable is not None else "–",
                      "all": format_metric(s.metrics.recall)}
                     for r, s in zip(rows, ranked + unranked)]
    first = summaries[0]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    return env.get_template("leaderboard.md.j2").render(
        cases=first.counts.cases,
        invalid=first.counts.invalid,
        case_set=first.case_set_hash[:12],
        taxonomy_version=first.taxonomy_version,
        resamples=sorted({s.bootstrap.resamples for s in summaries}),
        headers=[column_header(m) for m in BOARD],
        headline=" then ".join(METRICS[m].label for m in HEADLINE),
        detection_rows=detection_rows,
        detection_min=DETECTION_MIN_CASES,
        rows=rows,
        categories=categories,
        recall_rows=recall_rows,
        coverage_rows=coverage_rows,
        evidence_kinds=evidence_kinds,
        evidence_rows=evidence_rows,
    )


def _evidence_cell(s: Summary, kind: str) -> str:
    """Skill over one kind of evidence, with its case count."""
    sub = s.by_evidence.get(kind)
    return "–" if sub is None else f"{format_metric(sub.metrics.skill)} ({sub.cases} cases)"


def _field(s: Summary) -> str:
    """The causes a diagnoser declares it can claim, as the coverage table shows them."""
    claims = s.diagnoser.claims
    if claims is None:
        return "not declared"
    return ", ".join(f"`{c}`" for c in claims) or "none"
