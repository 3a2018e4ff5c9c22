"""``diageval report RUN_DIR... --html FILE``: one self-contained HTML page over runs on one case set.

Sections: the leaderboard (sortable), skill by part (evidence kind, cause family, split: the markdown board's
per-part view, :mod:`diageval.reports.parts`) and by split with the gaps between splits, recall and
misleading rate per cause x diagnoser, detection curves,
reliability diagrams, confusion matrices, every case with every diagnoser's claims (filterable by
verdict and diagnoser), and the paired comparison when exactly two runs are given.

Size: ~450 lines, over the ~400 the project aims at: one function per section of one page, each small; the
page's data (html_data.py) and pictures (plots.py) are already apart, and a section split further would only
move its few lines away from the template that shows them.

Self-contained: the CSS, the few lines of JavaScript (sorting and filtering only) and the SVG pictures
are inlined; the page fetches nothing (no font, script, image or style from anywhere). Without
JavaScript every table and picture is still there; only sorting and filtering need it.

Decided here (the design is silent):

* The leaderboard's columns, labels, directions and number formats are the metric table's board
  (:data:`~diageval.scoring.metrics.BOARD`), its rows in the markdown board's order (ranked by the
  headline metrics, self-tests last) with the same marks; the headline columns are shaded. A cell reads
  ``value [lo, hi]`` with ``n`` under it; undefined reads ``–``.
* What a diagnoser wrote is its own words: every text the page shows passes :func:`diageval.inert.inert`
  (control and bidi characters written as ``\\uXXXX``, then HTML-escaped by the template), and a claim
  embeds at most :data:`CLAIM_TEXT_CAP` characters of summary, of evidence (items until the budget is
  spent, the rest counted) and of reason each, saying where the whole text is (the case's
  ``diagnosis.json`` or ``results.jsonl`` in the run folder). Why 1,000: the longest summary of the rules
  diagnoser on 12 cached bundles is 88 characters and its longest evidence 320 (two items), so 1,000 is
  a paragraph a person reads in a table cell and ~10x what a real diagnoser writes; the page, which a
  diagnosis of 16 MiB (the output limit) would otherwise carry whole per claim, holds at most ~3,000
  characters per claim.
* Cost: a table of what each diagnoser spent per case (:data:`~diageval.scoring.metrics.COST`, the markdown
  board's cost table) and the skill-against-cost figure (:func:`~diageval.reports.plots.skill_against_cost`:
  seconds per case for every run, dollars per case for the runs with prices; the Pareto front marked).
* Trajectories: under each case, every agent's record of it (``cases/<id>/trajectory.json``,
  :mod:`diageval.diagnosers.agent_record`): its usage, how it ended, and its turns with their tool calls, in a
  collapsed block. A model's words and its tools' answers are untrusted like a claim's: inert, then escaped, and
  cut to :data:`TRAJECTORY_TEXT_CAP` characters each (the record keeps 2,000), the first
  :data:`TRAJECTORY_TURNS_SHOWN` turns shown and the rest counted, each cut naming the file that holds the
  whole. Why 300 and 20: a tool's answer is a table of a few rows, and its first 300 characters say which tool
  read what; the scripted investigation takes 3 turns and the agents ITBench reports 10-30 steps, so 20 turns
  show an investigation's course; the page then holds at most ~20 x (300 + 3 x 600) characters (~40 kB) per
  agent per case.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import markupsafe

from diageval import __version__
from diageval.cases.taxonomy import is_symptom_id
from diageval.inert import clipped, inert
from diageval.reports import plots
from diageval.reports.detection_limits import limit_text, summary_limits
from diageval.reports.html_data import (
    ABSTAIN_ROW,
    HEALTHY_ROW,
    ReportInputs,
    ReportRun,
    case_groups,
    misleading_rate,
)
from diageval.reports.leaderboard import cost_cells, has_agent_cost, is_ranked, marks, null_skill_text
from diageval.reports.parts import gap_label, parts, split_columns, split_rows
from diageval.scoring.metrics import BOARD, COST, HEADLINE, METRICS, MetricValue
from diageval.scoring.results import MISLEADING_VERDICTS
from diageval.scoring.summary import DETECTION_MIN_CASES

TEMPLATES = Path(__file__).parent / "templates"
VERDICTS = ("correct", "mislocated", "symptom_as_cause", "wrong_cause", "false_alarm", "duplicate", "hedge")
NO_CLAIM = "no_claim"
CLAIM_TEXT_CAP = 1_000
"""Characters of a claim's summary, of its evidence and of its reason the page embeds (module docstring)."""
TRAJECTORY_TEXT_CAP = 300
"""Characters of a turn's words, of a tool call's arguments and of its result the page embeds (module docstring)."""
TRAJECTORY_TURNS_SHOWN = 20
"""Turns of an agent's record shown per case (the rest counted; module docstring)."""


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    better: str  # "higher" | "lower"
    digits: str
    headline: bool


def metric_columns() -> list[Column]:
    """The leaderboard's metric columns: the board of the metric table, in its order, with its labels,
    directions, formats and headline marks."""
    return [Column(m, METRICS[m].label, METRICS[m].better, METRICS[m].digits, METRICS[m].headline) for m in BOARD]


def _num(v: float | None, digits: str = ".2f") -> str:
    return "–" if v is None else format(v, digits)


def _cell(m: MetricValue, digits: str = ".2f", *, heat: str | None = None) -> dict:
    """A table cell of a metric; ``heat`` ("higher" or "lower" is better) adds its background and text colours."""
    ci = f"[{format(m.ci[0], digits)}, {format(m.ci[1], digits)}]" if m.ci is not None and m.value is not None else ""
    cell = {"text": _num(m.value, digits), "ci": ci, "n": m.n, "sort": "" if m.value is None else repr(m.value)}
    if heat is not None:
        cell["bg"], cell["fg"] = plots.heat_colour(m.value, reverse=heat == "lower")
    return cell


def _roles(run: ReportRun) -> list[str]:
    return marks(run.summary.diagnoser)


def leaderboard(inputs: ReportInputs, columns: list[Column]) -> list[dict]:
    rows, rank = [], 0
    for run in inputs.runs:
        s = run.summary
        ranked = is_ranked(s.diagnoser)
        rank += ranked
        rows.append({
            "rank": rank if ranked else None,
            "name": s.diagnoser.name,
            "version": s.diagnoser.version or "",
            "roles": _roles(run),
            "scored": s.counts.scored,
            "statuses": ", ".join(f"{k} {v}" for k, v in s.counts.statuses.items()),
            "cells": [_cell(getattr(s.metrics, c.key), c.digits) for c in columns],
        })
    return rows


def part_view(inputs: ReportInputs) -> dict:
    """Skill per part and per split, per diagnoser in the leaderboard's order; the parts whose order of
    diagnosers differs from the board's, with the pairs that swap."""
    summaries = [run.summary for run in inputs.runs]
    names = [run.name for run in inputs.runs]
    board_parts = parts(summaries, [is_ranked(s.diagnoser) for s in summaries])
    splits, gaps = split_columns(summaries)

    def cell(m: MetricValue | None) -> dict:
        if m is None:  # the run has no such part
            return {"text": "–", "ci": "", "n": "", "sort": "", "bg": "#eeeeee", "fg": "#555555"}
        return _cell(m, heat="higher")

    return {
        "parts": [{"label": p.label, "size": p.size + (" †" if p.small else ""), "differs": bool(p.inversions),
                   "small": p.small} for p in board_parts],
        "rows": [{"name": name, "cells": [cell(p.cells[i]) for p in board_parts]} for i, name in enumerate(names)],
        "swaps": [{"label": p.label, "pairs": [f"{names[j]} above {names[i]}" for i, j in p.inversions]}
                  for p in board_parts if p.inversions],
        "split_headers": [f"split {n}" for n in splits] + [f"gap {gap_label(splits, g)}" for g in gaps],
        "split_rows": [{"name": name, "cells": [cell(v) for v in [*row.splits, *row.gaps]]}
                       for name, row in zip(names, split_rows(summaries))],
    }


def heatmap(inputs: ReportInputs) -> list[dict]:
    """Rows: each labeled cause, then healthy controls and abstain cases; per diagnoser recall and misleading rate."""
    rows = []
    for group, case_ids in case_groups(inputs.runs).items():
        cells = []
        for run in inputs.runs:
            cat = run.summary.by_category.get(group)
            cells.append({"recall": _cell(cat.recall, heat="higher") if cat is not None else None,
                          "misleading": _cell(misleading_rate(run, case_ids), heat="lower")})
        rows.append({"group": group, "cases": len(case_ids), "cause": group not in (HEALTHY_ROW, ABSTAIN_ROW),
                     "cells": cells})
    return rows


def detection_svg(inputs: ReportInputs) -> str:
    """Recall against measured impact per cause (the summaries' detection tables), one line per diagnoser;
    a dashed line where a diagnoser's detection limit is measured (not where it is censored)."""
    by_cause: dict[str, dict[str, plots.Detection]] = {}
    for run in inputs.runs:
        limits = summary_limits(run.summary)
        for cause, d in run.summary.detection.items():
            limit = limits[cause].limit if limits[cause].state == "measured" else None
            by_cause.setdefault(cause, {})[run.name] = plots.Detection(
                points=[plots.DetectionPoint(p.impact, p.found) for p in d.points], limit=limit)
    if not any(d.points for per_run in by_cause.values() for d in per_run.values()):
        return ""
    return plots.detection_curves(dict(sorted(by_cause.items())), [r.name for r in inputs.runs])


def detection_limits_table(inputs: ReportInputs) -> list[dict]:
    """Per cause with a measured case: each diagnoser's detection limit, its interval and n (the markdown
    board's cells)."""
    per_run = [summary_limits(run.summary) for run in inputs.runs]
    causes = sorted({c for limits in per_run for c, d in limits.items() if d.cases})
    return [{"cause": c, "cells": [limit_text(limits[c]) if c in limits else "–" for limits in per_run]}
            for c in causes]


def reliability_svg(inputs: ReportInputs) -> str:
    """Stated probability against the share of labeled causes, over every (case, taxonomy cause) pair
    (the summaries' reliability tables), one panel per diagnoser."""
    return plots.reliability_diagrams({
        run.name: [plots.ReliabilityPoint(b.mean_probability, b.observed, b.pairs)
                   for b in run.summary.reliability if b.pairs and b.mean_probability is not None]
        for run in inputs.runs
    })


def confusion(run: ReportRun) -> dict:
    c = run.summary.confusion
    largest = max((x for row in c.matrix for x in row), default=0)
    rows = []
    for label, counts in zip(c.labels, c.matrix):
        cells = []
        for col, x in zip(c.labels, counts):
            bg, fg = plots.count_colour(x, largest)
            cells.append({"n": x, "bg": bg, "fg": fg, "diagonal": col == label, "symptom": is_symptom_id(col)})
        rows.append({"label": label, "symptom": is_symptom_id(label), "cells": cells, "total": sum(counts)})
    symptom_cases = sum(x for row in c.matrix for col, x in zip(c.labels, row) if is_symptom_id(col))
    return {"name": run.name, "labels": [{"id": l, "symptom": is_symptom_id(l)} for l in c.labels], "rows": rows,
            "symptom_cases": symptom_cases, "cases": sum(sum(r) for r in c.matrix)}


def _ranks(ranks: list[int] | None) -> str:
    return "all" if ranks is None else ",".join(map(str, ranks))


def _seconds(s: float | None) -> str:
    return "–" if s is None else format(s, ".3g")


def cases(inputs: ReportInputs) -> list[dict]:
    """Every case of the runs, in case-id order, with every diagnoser's outcome and claims."""
    ids = sorted({cid for run in inputs.runs for cid in run.results})
    out = []
    for cid in ids:
        loaded = None
        if inputs.case_set is not None:
            try:
                loaded = inputs.case_set.get(cid).case
            except KeyError:
                loaded = None
        first = next(run.results[cid] for run in inputs.runs if cid in run.results)
        impacts = {run.name: run.results[cid].measured_impact for run in inputs.runs if cid in run.results}
        measured = next((v for v in impacts.values() if v is not None), None)
        notes = []
        disagree = sorted(n for n, v in impacts.items() if v is not None and measured is not None and abs(v - measured) > 1e-9)
        if disagree:
            notes.append(f"measured impact differs in run(s) of {', '.join(disagree)}")
        labels = ([{"category": c.category, "ranks": _ranks(c.ranks), "steps": f"[{c.steps[0]}, {c.steps[1]})" if c.steps else "all"}
                   for c in loaded.labels.causes] if loaded is not None else
                  [{"category": o.category, "ranks": _ranks(o.ranks), "steps": "?"} for o in first.outcomes])
        outcomes, claims = [], []
        for run in inputs.runs:
            r = run.results.get(cid)
            if r is None:
                outcomes.append({"name": run.name, "status": "no result", "found": [], "scored": False})
                continue
            outcomes.append({
                "name": run.name, "status": r.status, "scored": r.scored, "seconds": _seconds(r.seconds),
                "found": [{"category": o.category, "found": o.outcome == "found", "localized": o.localized} for o in r.outcomes],
            })
            diagnosis = run.diagnoses.get(cid)
            claims.extend(_claim_rows(run, r, diagnosis))
        trajectories = [_trajectory(run, cid) for run in inputs.runs if cid in run.trajectories]
        repeats = [f"{run.name}: {v.verdict} over {len(v.statuses)} repeats (right {v.right}, confidently wrong "
                   f"{v.wrong})" for run in inputs.runs
                   if run.summary.repeats is not None and (v := run.summary.repeats.by_case.get(cid)) is not None]
        m = inputs.manifestations.get(cid)
        out.append({
            "id": cid,
            "title": loaded.title if loaded is not None else "",
            "expect": first.expect,
            "difficulty": first.difficulty,
            "tags": first.tags,
            "labels": labels,
            "symptoms": loaded.labels.symptoms if loaded is not None else [],
            "measured_impact": _num(measured),
            "manifestation": m,
            "notes": notes,
            "outcomes": outcomes,
            "claims": claims,
            "trajectories": trajectories,
            "repeats": repeats,
            "verdicts": sorted({c["verdict"] for c in claims}),
        })
    return out


def _trajectory(run: ReportRun, case_id: str) -> dict:
    """One agent's record of one case as the page shows it (module docstring: what is cut, and why)."""
    from diageval.run.store import RunStore

    record = run.trajectories[case_id]
    where = str(RunStore(run.root).trajectory_path(case_id))
    u = record.usage
    usage = (f"{u.turns} turns, {u.tool_calls} tool calls, {u.prompt_tokens:,} prompt tokens ({u.cached_tokens:,} "
             f"cached), {u.completion_tokens:,} completion tokens"
             + (f", ${u.dollars:.4f}" if u.dollars is not None else ", no price") + f", {u.seconds:.1f} s"
             + (" (tokens estimated: the endpoint sent no usage)" if u.estimated else ""))

    def cut(text: str) -> str:
        return clipped(text, TRAJECTORY_TEXT_CAP, where)

    turns = [{"turn": t.turn, "content": cut(t.content),
              "calls": [{"name": cut(c.name), "arguments": cut(c.arguments), "result": cut(c.result), "error": c.is_error}
                        for c in t.tool_calls]}
             for t in record.turns[:TRAJECTORY_TURNS_SHOWN]]
    more = len(record.turns) - len(turns)
    return {"name": run.name, "model": record.model, "usage": usage,
            "ended": record.ended + (f" ({record.cap} cap)" if record.cap else ""),
            "detail": cut(record.detail or ""), "turns": turns,
            "more": f"… {more} more turn(s) in {where}" if more > 0 else ""}


def cost_view(inputs: ReportInputs) -> dict:
    """The cost table (the markdown board's) and the skill-against-cost figure (module docstring)."""
    def points(metric: str) -> list[plots.CostPoint]:
        out = []
        for run in inputs.runs:
            cost, skill = getattr(run.summary.metrics, metric), run.summary.metrics.skill
            if cost.value is not None and skill.value is not None:
                out.append(plots.CostPoint(run.name, cost.value, skill.value, skill.ci))
        return out

    svg = plots.skill_against_cost({"seconds per case (mean)": points("seconds_per_case"),
                                    "dollars per case (mean)": points("dollars_per_case")})
    return {"svg": svg, "headers": [METRICS[m].label for m in COST] + ["cap hits"],
            "agents": any(has_agent_cost(run.summary) for run in inputs.runs),
            "rows": [{"name": run.name, "cells": cost_cells(run.summary)} for run in inputs.runs]}


def _evidence_shown(items: list[str], where: str) -> list[str]:
    """A claim's evidence items until :data:`CLAIM_TEXT_CAP` characters are spent; the rest counted."""
    shown, left = [], CLAIM_TEXT_CAP
    for k, item in enumerate(items):
        if left <= 0:
            shown.append(f"… {len(items) - k} more item(s) in {where}")
            break
        shown.append(clipped(item, left, where))
        left -= len(item)
    return shown


def _claim_rows(run: ReportRun, r, diagnosis) -> list[dict]:
    from diageval.run.store import RunStore

    saved = str(RunStore(run.root).diagnosis_path(r.case_id))
    results = str(run.root / "results.jsonl")
    base = {"name": run.name, "status": r.status, "seconds": _seconds(r.seconds)}
    if not r.verdicts:
        if r.abstained:
            why = f"abstained: {r.abstain_reason}"
        elif r.error:
            why = r.error
        elif not r.scored:
            why = "not scored"
        else:
            why = "claimed no cause"
        symptoms = [f"observed {s}" for s in r.observed_symptoms]
        return [{**base, "verdict": NO_CLAIM, "misleading": False, "category": "", "confidence": "", "ranks": "",
                 "reason": clipped(why, CLAIM_TEXT_CAP, results), "summary": "", "evidence": _evidence_shown(symptoms, results),
                 "symptom": False}]
    rows = []
    for v in r.verdicts:
        finding = diagnosis.findings[v.index] if diagnosis is not None and v.index < len(diagnosis.findings) else None
        rows.append({
            **base,
            "verdict": v.verdict,
            "misleading": v.verdict in MISLEADING_VERDICTS,
            "category": v.category,
            "symptom": is_symptom_id(v.category),
            "confidence": f"{v.confidence:.2f}",
            "ranks": _ranks(v.ranks),
            "reason": clipped(v.reason, CLAIM_TEXT_CAP, results),
            "summary": clipped(finding.summary, CLAIM_TEXT_CAP, saved) if finding is not None else "",
            "evidence": _evidence_shown(list(finding.evidence), saved) if finding is not None else [],
        })
    return rows


def compare_section(inputs: ReportInputs) -> dict | None:
    """The paired comparison of the two runs (B = the second run given), or its refusal; None unless two runs."""
    if len(inputs.runs) != 2:
        return None
    from diageval.reports.compare_report import comparison_rows, headline_verdict
    from diageval.scoring.compare import CompareError, compare_runs

    a, b = inputs.given[0], inputs.given[1]
    try:
        c = compare_runs(a.loaded, b.loaded, common_cases=True)
    except CompareError as err:
        return {"error": str(err)}
    return {
        "a": c.a, "b": c.b, "cases": c.cases, "resamples": c.bootstrap.resamples, "seed": c.bootstrap.seed,
        "dropped": [f"{d.case_id} (A {d.status_a or 'no result'}, B {d.status_b or 'no result'})" for d in c.dropped],
        "rows": comparison_rows(c),
        "verdicts": [headline_verdict(k, c.metrics[k], c.cases) for k in HEADLINE if k in c.metrics],
        "error": None,
    }


def render_html(inputs: ReportInputs, *, generated: datetime | None = None) -> str:
    """The page (see the module docstring)."""
    columns = metric_columns()
    first = inputs.runs[0].summary
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             autoescape=True, trim_blocks=True, lstrip_blocks=True, finalize=_shown)
    return env.get_template("report.html.j2").render(
        version=__version__,
        generated=(generated or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC"),
        cases_total=first.counts.cases,
        invalid=first.counts.invalid,
        case_set=first.case_set_hash[:12],
        taxonomy_version=first.taxonomy_version,
        resamples=sorted({r.summary.bootstrap.resamples for r in inputs.runs}),
        runs=[{"name": r.name, "root": str(r.root), "status": r.info.status, "roles": _roles(r), "problems": r.problems}
              for r in inputs.runs],
        case_note=inputs.case_note,
        columns=columns,
        leaderboard=leaderboard(inputs, columns),
        null_skill=null_skill_text([r.summary for r in inputs.runs]),
        part_view=part_view(inputs),
        heatmap=heatmap(inputs),
        diagnosers=[r.name for r in inputs.runs],
        detection_svg=detection_svg(inputs),
        detection_limits=detection_limits_table(inputs),
        detection_min=DETECTION_MIN_CASES,
        headline=" then ".join(METRICS[m].label for m in HEADLINE),
        reliability_svg=reliability_svg(inputs),
        confusions=[confusion(r) for r in inputs.runs],
        cases=cases(inputs),
        verdicts=VERDICTS,
        no_claim=NO_CLAIM,
        compare=compare_section(inputs),
        cost=cost_view(inputs),
    )


def _shown(value: object) -> object:
    """Every text the template prints, made inert before it is escaped (markup the page builds, SVG, passes)."""
    return inert(value) if isinstance(value, str) and not isinstance(value, markupsafe.Markup) else value


def write_html_report(inputs: ReportInputs, output: Path, *, signal_value: str = "") -> str:
    """Render the page of ``inputs`` (:func:`~diageval.reports.html_data.gather`) and write it to ``output``
    atomically; returns the HTML. ``signal_value``: :func:`diageval.reports.signal_value.signal_value_html`'s
    section, placed before the case list."""
    from diageval.fileio import atomic_write_text
    from diageval.reports.signal_value import insert_section

    html = insert_section(render_html(inputs), signal_value)
    atomic_write_text(output, html)
    return html
