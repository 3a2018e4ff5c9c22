"""The HTML report's pictures: matplotlib figures as inline SVG, and heat colours for table cells.

Every function takes plain numbers (what :mod:`diageval.reports.html_data` gathered) and returns SVG
markup or a colour; nothing here reads files. Figures are built with :class:`matplotlib.figure.Figure`
(no pyplot, no global figure state) and the Agg-free SVG backend; text stays text in the SVG
(``svg.fonttype: none``: smaller, searchable, drawn in the page's font), and the SVG's internal ids are
salted with the figure's name so that several figures inlined in one page never share an id.

Decided here (the design is silent):

* Detection curves: measured impact (the fraction of step time the injection cost) is cut into five
  equal-width bins over [0, 1]; a point is the recall of one diagnoser over that cause's labeled
  instances whose case falls in the bin, with n (labeled causes) printed under the bin. Equal widths,
  not quantiles: the axis means the same for every cause and every corpus. Diagnosers are nudged apart
  sideways (a few hundredths of a bin) so that equal values stay visible. A diagnoser's detection limit,
  where the summary defines one, is a dashed vertical line in its colour.
* Skill against cost: one panel per cost (seconds per case for every diagnoser; dollars per case where a run
  has prices), a point per diagnoser at (mean cost per case, skill), its interval as a vertical bar. The Pareto
  front (no other diagnoser is at least as good on both and better on one) is joined by a step line and its
  points filled; the others are hollow. Cost on a log axis: diagnosers differ by orders of magnitude in time.
* Reliability diagrams: the summary's calibration bins (every (case, taxonomy cause) pair; the pairs
  stated at 0 in a bin of their own); a point is (mean stated probability, share labeled) of a bin, its
  area grows with the number of pairs, and the number is printed beside it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from diageval.inert import inert

IMPACT_BINS = 5
MARKERS = "osD^vP*Xh<>p"


@dataclass(frozen=True)
class DetectionPoint:
    """One labeled cause of one case, as a diagnoser fared on it."""

    impact: float
    found: bool


@dataclass(frozen=True)
class Detection:
    """One diagnoser on one cause: every labeled instance with a measured impact, and its detection limit."""

    points: list[DetectionPoint]
    limit: float | None


@dataclass(frozen=True)
class ReliabilityPoint:
    """One calibration bin: mean stated probability, share of its pairs that are labeled causes, pairs."""

    probability: float
    observed: float
    pairs: int


def _svg(fig: Figure, name: str) -> str:
    """The figure as an SVG element (no XML prologue), ids salted with ``name``."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
        FigureCanvasSVG(fig).print_svg(buf, metadata=dict.fromkeys(("Date", "Creator", "Format", "Type")))
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _grid(n: int, cols: int) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return math.ceil(n / cols), cols


def impact_bin(impact: float) -> int:
    return min(max(int(math.floor(impact * IMPACT_BINS)), 0), IMPACT_BINS - 1)


def plot_text(name: str) -> str:
    """A diagnoser's name as a figure's label or title: one inert line (:func:`diageval.inert.inert`), its
    ``$`` escaped so that matplotlib never parses it as mathtext (a malformed formula would stop the page)."""
    return inert(name, newlines=False).replace("$", r"\$")


def detection_curves(by_cause: Mapping[str, Mapping[str, Detection]], diagnosers: Sequence[str]) -> str:
    """One panel per cause: recall per measured-impact bin, one line per diagnoser (see the module docstring)."""
    causes = list(by_cause)
    rows, cols = _grid(len(causes), 3)
    fig = Figure(figsize=(4.2 * cols, 3.3 * rows), layout="constrained")
    width = 1.0 / IMPACT_BINS
    centres = [(b + 0.5) * width for b in range(IMPACT_BINS)]
    for k, cause in enumerate(causes):
        ax = fig.add_subplot(rows, cols, k + 1)
        counts = [0] * IMPACT_BINS
        for d_index, name in enumerate(diagnosers):
            detection = by_cause[cause].get(name)
            points = detection.points if detection is not None else []
            found, total = [0] * IMPACT_BINS, [0] * IMPACT_BINS
            for p in points:
                b = impact_bin(p.impact)
                total[b] += 1
                found[b] += p.found
            counts = [max(c, t) for c, t in zip(counts, total)]
            nudge = (d_index - (len(diagnosers) - 1) / 2) * width * 0.04
            xs = [centres[b] + nudge for b in range(IMPACT_BINS) if total[b]]
            ys = [found[b] / total[b] for b in range(IMPACT_BINS) if total[b]]
            ax.plot(xs, ys, marker=MARKERS[d_index % len(MARKERS)], label=plot_text(name), linewidth=1.2, markersize=5,
                    color=f"C{d_index % 10}")
            if detection is not None and detection.limit is not None:
                ax.axvline(detection.limit, color=f"C{d_index % 10}", linestyle="--", linewidth=1)
        ax.set_title(cause, fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.08, 1.08)
        ax.set_xticks([b * width for b in range(IMPACT_BINS + 1)])
        ax.tick_params(labelsize=7)
        for b, c in enumerate(counts):
            ax.text(centres[b], -0.06, f"n={c}" if c else "", ha="center", va="bottom", fontsize=6, color="0.35")
        ax.set_xlabel("measured impact (fraction of step time)", fontsize=7)
        ax.set_ylabel("recall", fontsize=7)
        ax.grid(alpha=0.3)
    if causes:
        handles, labels = fig.axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 7), fontsize=8, frameon=False)
    return _svg(fig, "detection")


def reliability_diagrams(bins_by_diagnoser: Mapping[str, Sequence[ReliabilityPoint]]) -> str:
    """One panel per diagnoser: stated probability against how often the event was true."""
    names = list(bins_by_diagnoser)
    rows, cols = _grid(len(names), 4)
    fig = Figure(figsize=(3.0 * cols, 3.0 * rows), layout="constrained")
    for k, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, k + 1)
        ax.plot([0, 1], [0, 1], linestyle="--", color="0.6", linewidth=1)
        points = bins_by_diagnoser[name]
        stated = sum(p.pairs for p in points if p.probability > 0)
        if points:
            ax.scatter([p.probability for p in points], [p.observed for p in points],
                       s=[18 + 40 * math.log10(1 + p.pairs) for p in points], color="C0", alpha=0.75, zorder=3)
            ax.plot([p.probability for p in points], [p.observed for p in points], color="C0", linewidth=1)
            for p in points:
                ax.annotate(str(p.pairs), (p.probability, p.observed), textcoords="offset points", xytext=(5, 4),
                            fontsize=7, color="0.25")
        ax.set_title(f"{plot_text(name)} ({stated} pairs stated > 0)", fontsize=9)
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=7)
        ax.set_xlabel("stated probability", fontsize=7)
        ax.set_ylabel("share that are labeled causes", fontsize=7)
        ax.grid(alpha=0.3)
    return _svg(fig, "reliability")


@dataclass(frozen=True)
class CostPoint:
    """One diagnoser: its mean cost per case and its skill with the skill's interval."""

    name: str
    cost: float
    skill: float
    ci: tuple[float, float] | None


def pareto_front(points: Sequence[CostPoint]) -> list[CostPoint]:
    """The points no other point dominates (cost no higher and skill no lower, one of them strictly), by cost."""
    def dominated(p: CostPoint) -> bool:
        return any(q.cost <= p.cost and q.skill >= p.skill and (q.cost < p.cost or q.skill > p.skill) for q in points)
    return sorted((p for p in points if not dominated(p)), key=lambda p: (p.cost, -p.skill))


def skill_against_cost(panels: Mapping[str, Sequence[CostPoint]]) -> str:
    """One panel per cost (its axis label -> the diagnosers' points), the Pareto front marked (module docstring)."""
    shown = {label: list(points) for label, points in panels.items() if points}
    if not shown:
        return ""
    fig = Figure(figsize=(4.6 * len(shown), 3.6), layout="constrained")
    for k, (label, points) in enumerate(shown.items()):
        ax = fig.add_subplot(1, len(shown), k + 1)
        front = pareto_front(points)
        on_front = {id(p) for p in front}
        for p in points:
            filled = id(p) in on_front
            if p.ci is not None:
                ax.plot([p.cost, p.cost], list(p.ci), color="0.6", linewidth=1, zorder=1)
            ax.scatter([p.cost], [p.skill], s=36, zorder=3, color="C0" if filled else "white", edgecolors="C0")
            ax.annotate(plot_text(p.name), (p.cost, p.skill), textcoords="offset points", xytext=(5, 4), fontsize=7)
        if len(front) > 1:
            ax.step([p.cost for p in front], [p.skill for p in front], where="post", color="C0", linewidth=1,
                    linestyle="--", label="Pareto front")
            ax.legend(fontsize=7, frameon=False)
        if all(p.cost > 0 for p in points):
            ax.set_xscale("log")
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel("skill", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    return _svg(fig, "cost")


def heat_colour(value: float | None, *, reverse: bool = False) -> tuple[str, str]:
    """(background, text colour) for a cell holding a rate in [0, 1]; grey for undefined. ``reverse``: low
    is good (misleading rate), so the colour scale runs the other way."""
    if value is None:
        return "#eeeeee", "#555555"
    v = min(max(value, 0.0), 1.0)
    r, g, b, _ = matplotlib.colormaps["RdYlGn"](1.0 - v if reverse else v)
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return matplotlib.colors.to_hex((r, g, b)), "#000000" if luminance > 0.5 else "#ffffff"


def count_colour(count: int, largest: int) -> tuple[str, str]:
    """(background, text colour) for a count in a confusion matrix (white for 0)."""
    if count <= 0 or largest <= 0:
        return "#ffffff", "#999999"
    r, g, b, _ = matplotlib.colormaps["Blues"](0.15 + 0.85 * count / largest)
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return matplotlib.colors.to_hex((r, g, b)), "#000000" if luminance > 0.5 else "#ffffff"
