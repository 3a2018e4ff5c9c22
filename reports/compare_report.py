"""Markdown of a two-run comparison (``diageval compare``): one row per metric and a verdict per headline metric.

Decided here (the design is silent):

* Rows, labels, directions and number formats come from the metric table
  (:data:`~diageval.scoring.metrics.METRICS`). Cells: A and B read as point values (their own intervals
  are in ``--json``); the difference reads ``+0.12 [+0.03, +0.21]`` with signs, so its direction is read
  without arithmetic; an undefined value reads ``–``.
* The verdict of a headline metric (:data:`~diageval.scoring.metrics.HEADLINE`: skill, skill with rank
  credit) says whether the 95% interval of B − A excludes 0 and, if it does and the paired randomisation
  test agrees (:attr:`~diageval.scoring.compare.MetricComparison.clearly_worse`, the gate of
  ``--fail-if-worse``), which run is better; an interval touching 0 reads as no clear difference, and so
  does an interval the randomisation test does not back (it gives its p-value).
* At most :data:`DROPPED_SHOWN` dropped cases are named (all of them are in ``--json``).
* Each run's diagnoser and spec are escaped (:func:`diageval.inert.markdown_inert`): text, never markup.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from diageval.inert import inert, markdown_inert
from diageval.scoring.compare import TIE_TOLERANCE, Comparison, DroppedCase, MetricComparison, RunSide
from diageval.scoring.metrics import HEADLINE, METRICS

TEMPLATES = Path(__file__).parent / "templates"
DROPPED_SHOWN = 10


def _digits(metric: str) -> str:
    return METRICS[metric].digits if metric in METRICS else ".2f"


def _label(metric: str) -> str:
    return METRICS[metric].label if metric in METRICS else metric


def _value(v: float | None, digits: str) -> str:
    return "–" if v is None else format(v, digits)


def _signed(v: float, digits: str) -> str:
    return format(0.0 if abs(v) <= TIE_TOLERANCE else v, "+" + digits)  # no "-0.00" from float noise


def format_difference(metric: str, m: MetricComparison) -> str:
    if m.difference is None:
        return "–"
    d = _digits(metric)
    text = _signed(m.difference, d)
    return text + (f" [{_signed(m.ci[0], d)}, {_signed(m.ci[1], d)}]" if m.ci is not None else "")


def _percent(p: float | None) -> str:
    return "–" if p is None else f"{p:.0%}"


def _p_better(m: MetricComparison) -> str:
    """P(B better), with the share of ties when there are any (identical runs read "0% (100% ties)")."""
    if m.p_b_better is None or m.p_b_worse is None:
        return "–"
    ties = 1.0 - m.p_b_better - m.p_b_worse
    return _percent(m.p_b_better) + (f" ({_percent(ties)} ties)" if ties >= 0.005 else "")  # shown once it reads >= 1%


def _n(m: MetricComparison) -> str:
    return str(m.a.n) if m.a.n == m.b.n else f"{m.a.n}/{m.b.n}"


def headline_verdict(metric: str, m: MetricComparison, cases: int) -> str:
    """One line: B − A with its interval, and whether the interval excludes 0 (which run is better)."""
    label = _label(metric)
    if m.difference is None:
        undefined = [f"{side} (n={mv.n})" for side, mv in (("A", m.a), ("B", m.b)) if mv.value is None]
        return f"{label}: undefined for {' and '.join(undefined)}: not compared."
    head = f"{label} ({m.better} is better): B − A = {format_difference(metric, m)}"
    if m.ci is None:
        why = "no resample" if m.resamples == 0 else "no interval"
        return f"{head}; {why} defines it for both runs: no verdict."
    if not m.excludes_zero:
        return (f"{head}; the interval includes 0: no clear difference on {cases} cases "
                f"(B better in {_percent(m.p_b_better)}, worse in {_percent(m.p_b_worse)} of resamples).")
    b_better = (m.difference > 0) == (m.better == "higher")
    word, share = ("better", m.p_b_better) if b_better else ("worse", m.p_b_worse)
    p = m.p_swap_better if b_better else m.p_swap_worse
    if not (m.clearly_better if b_better else m.clearly_worse):
        return (f"{head}; the interval excludes 0, but swapping the runs' results case by case gives a difference "
                f"as large in p = {p:.3f} of swaps: no clear difference on {cases} cases.")
    test = f", randomisation p = {p:.3f}" if p is not None else ""
    return f"{head}; the interval excludes 0: B is {word} (B {word} in {_percent(share)} of resamples{test})."


def _dropped_text(dropped: list[DroppedCase]) -> str:
    def status(s: str | None) -> str:
        return s or "no result"

    shown = [f"{d.case_id} (A {status(d.status_a)}, B {status(d.status_b)})" for d in dropped[:DROPPED_SHOWN]]
    more = f", and {len(dropped) - DROPPED_SHOWN} more (see --json)" if len(dropped) > DROPPED_SHOWN else ""
    return ", ".join(shown) + more


def comparison_rows(c: Comparison) -> list[dict[str, str]]:
    """One row of cells per metric (label with its better-direction arrow, A, B, B − A, P(B better), n):
    the table of the markdown comparison and of the HTML report's compare section."""
    rows = []
    for metric, m in c.metrics.items():
        d = _digits(metric)
        arrow = "↑" if m.better == "higher" else "↓"
        rows.append({
            "label": f"{_label(metric)} {arrow}",
            "a": _value(m.a.value, d),
            "b": _value(m.b.value, d),
            "diff": format_difference(metric, m),
            "p": _p_better(m),
            "n": _n(m),
        })
    return rows


def _side(side: RunSide) -> dict[str, str]:
    """A run as the markdown names it: its diagnoser and spec escaped, its folder (in a code span) one inert line."""
    return {"diagnoser": markdown_inert(side.diagnoser), "spec": markdown_inert(side.spec),
            "run_dir": inert(side.run_dir, newlines=False), "status": side.status}


def render_comparison(c: Comparison) -> str:
    """The markdown a person reads: the run pair, what was dropped, the metric table, the headline verdicts."""
    rows = comparison_rows(c)
    notes = [f"run {side} is marked {s.status}: its results may be incomplete."
             for side, s in (("A", c.a), ("B", c.b)) if s.status != "complete"]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    return env.get_template("compare.md.j2").render(
        a=_side(c.a),
        b=_side(c.b),
        cases=c.cases,
        case_set=c.case_set_hash[:12],
        taxonomy_version=c.taxonomy_version,
        resamples=c.bootstrap.resamples,
        seed=c.bootstrap.seed,
        dropped=c.dropped,
        dropped_text=_dropped_text(c.dropped),
        notes=notes,
        rows=rows,
        verdicts=[headline_verdict(k, c.metrics[k], c.cases) for k in HEADLINE if k in c.metrics],
    )
