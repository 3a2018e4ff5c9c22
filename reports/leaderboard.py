"""The markdown leaderboard: one row per run, every number with its interval and n.

Decided here (the design is silent):

* Runs are comparable only on the same case set: the same case-set hash, taxonomy version and number of
  results. A run that stopped early has fewer results and is refused rather than ranked on a subset.
* Ranking: by the headline metrics of :data:`~diageval.scoring.metrics.HEADLINE` in order (skill, then
  skill with rank credit; higher first, undefined last), then diagnoser name. Self-test diagnosers (the
  oracle reads labels) are listed after the ranked rows, unranked. Reference diagnosers (baselines) are
  ranked like any other and marked, so a real diagnoser is seen to beat them or not. Skill 0 is the
  corpus' base rates (every cause at the share of the cases labeled with it); ``null`` (saying nothing)
  scores below it, and the note under the board gives null's skill on these cases from the labels alone.
* Columns: the metrics of :data:`~diageval.scoring.metrics.BOARD`, labelled ``label ↑`` or ``label ↓``
  from the metric table. Cells read ``value [lo, hi] n=N``; an undefined metric reads ``–`` with its n.
* Marks after a diagnoser's name come from :func:`marks` (one entry per fact about the diagnoser that a
  reader must see next to its numbers: self-test, reference, ...).
* A diagnoser's name, version and declared claims are its own words: each is escaped
  (:func:`diageval.inert.markdown_inert`), so it reads as text, never as markdown or HTML.
* Below the board: skill by part (evidence kind, cause family, split, device, case kind;
  :mod:`diageval.reports.parts`), with the parts whose order of diagnosers differs from the board's marked ⇅
  and the swapped pairs listed, and the parts under ``SMALL_PART`` cases marked † with why their skill is on
  another scale (a board of so few cases, a tag subset's, says so under the board);
  skill by split and the gap between splits; recall by cause; and each cause's detection limit with its
  interval (:mod:`diageval.reports.detection_limits`: the measured impact at which the diagnoser finds the
  cause half the time; undefined until the corpus holds the cause at several severities, the cell then
  saying how many cases it has).
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from diageval.errors import DiagevalError
from diageval.inert import markdown_inert
from diageval.reports.detection_limits import limit_text, summary_limits
from diageval.reports.parts import SMALL_PART, gap_label, parts, split_columns, split_rows
from diageval.scoring.metrics import BOARD, COST, HEADLINE, METRICS, MetricValue
from diageval.scoring.summary import DETECTION_MIN_CASES, DiagnoserInfo, Summary

TAXONOMY_WORD = re.compile(r"[A-Za-z0-9_.\-]+")
"""A declared claim that reads as a taxonomy id is shown as code; anything else is escaped text."""

SWAPS_SHOWN = 8
"""Swapped pairs named per part (the rest are counted)."""

TEMPLATES = Path(__file__).parent / "templates"


def column_header(metric: str) -> str:
    spec = METRICS[metric]
    return f"{spec.label} {'↑' if spec.better == 'higher' else '↓'}"


class LeaderboardError(DiagevalError, ValueError):
    """Summaries that cannot share a leaderboard."""


def format_metric(m: MetricValue, digits: str = ".2f", *, n: bool = True) -> str:
    if m.value is None:
        return f"– n={m.n}" if n else "–"
    text = format(m.value, digits)
    if m.ci is not None:
        text += f" [{format(m.ci[0], digits)}, {format(m.ci[1], digits)}]"
    return f"{text} n={m.n}" if n else text


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
    name = markdown_inert(s.diagnoser.name + (f" {s.diagnoser.version}" if s.diagnoser.version else ""))
    shown = marks(s.diagnoser)
    label = f"{name} *({', '.join(shown)})*" if shown else f"**{name}**"
    cells = [format_metric(getattr(s.metrics, key), METRICS[key].digits) for key in BOARD]
    return {"rank": rank, "diagnoser": label, "scored": s.counts.scored, "cells": [_cell(c) for c in cells]}


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
    limits = [summary_limits(s) for s in ranked + unranked]
    detection_rows = [{"diagnoser": r["diagnoser"],
                       "cells": [_cell(limit_text(per_run[c])) if c in per_run else "–" for c in categories]}
                      for r, per_run in zip(rows, limits)]
    ordered = ranked + unranked
    names = [r["diagnoser"] for r in rows]
    board_parts = parts(ordered, [is_ranked(s.diagnoser) for s in ordered])
    part_rows = [{"diagnoser": name, "cells": [_cell(_part_cell(p.cells[i])) for p in board_parts]}
                 for i, name in enumerate(names)]
    part_headers = [_cell(f"{p.label} ({p.size}{' †' if p.small else ''}){' ⇅' if p.inversions else ''}")
                    for p in board_parts]
    swaps = [_swap_line(p.label, p.inversions, names) for p in board_parts if p.inversions]
    splits, gaps = split_columns(ordered)
    split_headers = [f"split {n} ({_split_size(ordered, n)})" for n in splits] + [f"gap {gap_label(splits, g)}" for g in gaps]
    split_table = [{"diagnoser": name, "cells": [_cell(_part_cell(v)) for v in [*row.splits, *row.gaps]]}
                   for name, row in zip(names, split_rows(ordered))]
    null_skill = null_skill_text(summaries)
    coverage_rows = [{"diagnoser": r["diagnoser"], "field": _field(s),
                      "own": format_metric(s.recall_claimable) if s.recall_claimable is not None else "–",
                      "all": format_metric(s.metrics.recall)}
                     for r, s in zip(rows, ranked + unranked)]
    first = summaries[0]
    cost_rows = [{"diagnoser": r["diagnoser"], "cells": cost_cells(s)} for r, s in zip(rows, ordered)]
    repeat_rows = [{"diagnoser": r["diagnoser"], **repeat_cells(s)} for r, s in zip(rows, ordered) if s.repeats]
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
        null_skill=null_skill,
        part_headers=part_headers,
        part_rows=part_rows,
        swaps=swaps,
        split_headers=split_headers,
        split_rows=split_table,
        small_part=SMALL_PART,
        small_parts=[p.label for p in board_parts if p.small],
        small_board=first.counts.scored if first.counts.scored < SMALL_PART else None,
        cost_headers=[column_header(m) for m in COST] + ["cap hits"],
        cost_rows=cost_rows if any(has_agent_cost(s) for s in ordered) else [],
        repeat_rows=repeat_rows,
    )


def has_agent_cost(s: Summary) -> bool:
    """Whether the run holds an agent's usage (tokens, turns) for some case."""
    return s.metrics.turns_per_case.n > 0


def cost_cells(s: Summary) -> list[str]:
    """The cost table's cells of one run: each metric of :data:`~diageval.scoring.metrics.COST`, then cap hits."""
    cells = [format_metric(getattr(s.metrics, key), METRICS[key].digits) for key in COST]
    return [_cell(c) for c in cells] + [str(s.counts.statuses.get("cap_hit", 0))]


CATASTROPHIC_SHOWN = 10
"""Catastrophic cases named per diagnoser under the repeats table (the rest are counted)."""


def repeat_cells(s: Summary) -> dict:
    """The repeats table's cells of one run with repeats (:mod:`diageval.scoring.repeats`)."""
    r = s.repeats
    assert r is not None
    each = ", ".join("–" if v is None else format(v, ".2f") for v in r.skill_per_repeat)
    bad = sorted(c for c, v in r.by_case.items() if v.verdict == "catastrophic")
    named = ", ".join(markdown_inert(c) for c in bad[:CATASTROPHIC_SHOWN])
    more = f" and {len(bad) - CATASTROPHIC_SHOWN} more" if len(bad) > CATASTROPHIC_SHOWN else ""
    return {"k": r.repeats, "cases": r.cases, "skill": _cell(format_metric(r.skill)), "each": each,
            "stable": r.stable, "flaky": r.flaky, "catastrophic": r.catastrophic,
            "consistency": _cell(format_metric(r.consistency)), "named": named + more}


def null_skill_text(summaries: list[Summary]) -> str:
    """Null's skill on the board's cases, from the labels alone (every summary of one case set has the same)."""
    value = summaries[0].reference.null_skill
    return "undefined" if value is None else format(value, ".3f")


def _part_cell(m: MetricValue | None) -> str:
    return "–" if m is None else format_metric(m, n=False)


def _split_size(summaries: list[Summary], split: str) -> str:
    return next((f"{s.by_split[split].cases} cases" for s in summaries if split in s.by_split), "")


def _swap_line(label: str, pairs: list[tuple[int, int]], names: list[str]) -> str:
    """One line per part whose order differs: which diagnoser passes which there."""
    shown = [f"{names[j]} above {names[i]}" for i, j in pairs[:SWAPS_SHOWN]]
    more = f", and {len(pairs) - SWAPS_SHOWN} more pair(s)" if len(pairs) > SWAPS_SHOWN else ""
    return f"{label}: " + "; ".join(shown) + more + " (the board has each pair the other way)"


def _field(s: Summary) -> str:
    """The causes a diagnoser declares it can claim, as the coverage table shows them."""
    claims = s.diagnoser.claims
    if claims is None:
        return "not declared"
    return ", ".join(f"`{c}`" if TAXONOMY_WORD.fullmatch(c) else markdown_inert(c) for c in claims) or "none"
