"""Signal value: each diagnoser's skill per evidence tier against what the tier's evidence weighs.

A platform team asks which signal to collect first. Runs of one diagnoser on several tiers
(``diageval run --evidence TIER``; :mod:`diageval.cases.tiers`) answer it: this module reads every run's
tier (``run.json``), its skill (``summary.json``, with its interval and n) and the bytes of the bundles
its diagnoser got (``run.json``'s ``evidence_sizes``), and renders a markdown table, an HTML table and a
plot (skill against bytes per case, one line per diagnoser).

Decided here (the issue is silent):

* The leaderboard ranks full-evidence runs only; runs on a smaller tier appear here, not on the board
  (:func:`split_by_tier`), so a diagnoser never sits on the board twice.
* Bytes per case is the mean over the run's cases with a recorded size; bytes per step divides the
  bytes of the cases whose full bundle logged steps by those steps (recorded cases may log none).
* "Which signal first", per diagnoser: the cheapest tier whose skill interval reaches the best tier's
  point value (more evidence buys nothing this corpus can tell), and the step up the ladder with the
  largest skill gain. Gains are differences of point values; the intervals beside them say whether a gain
  is larger than the corpus can resolve (no paired interval is computed here).
* In-job monitors (issue 27 item 5): a monitor's run is a full-evidence run (on the board); its cost is
  not bytes but the job's slowdown, measured by ``benchmarks/monitor_overhead.py`` (monitor on vs off,
  interleaved) into ``monitor-overhead.json`` beside the run folders (:data:`OVERHEAD_FILE`, model
  :class:`OverheadMeasurement`). A run whose diagnoser that file names gets its slowdown, with its
  interval and n, beside its skill in a table of its own.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from diageval.cases.tiers import FULL, TIERS
from diageval.inert import inert, markdown_inert
from diageval.run.store import RunInfo, RunReadError, RunStore
from diageval.scoring.metrics import MetricValue


OVERHEAD_FILE = "monitor-overhead.json"  # beside the run folders (their parent folder)


class MonitorOverhead(BaseModel):
    """One monitor's slowdown of the job: monitored / plain time per step, over interleaved pairs."""

    model_config = ConfigDict(extra="forbid")

    monitor: str = Field(description="the monitor's name, which is its diagnoser's")
    slowdown: float = Field(description="median over pairs of monitored / plain job time per step")
    ci: tuple[float, float] = Field(description="95% bootstrap interval of that median")
    n: int = Field(ge=1, description="pairs")


class OverheadMeasurement(BaseModel):
    """What ``benchmarks/monitor_overhead.py --json`` writes."""

    model_config = ConfigDict(extra="forbid")

    case: str = Field(description="the case recorded, with and without each monitor")
    method: str = Field(description="how the pairs were made, in words")
    monitors: list[MonitorOverhead]


def read_overhead(runs_root: Path) -> dict[str, MonitorOverhead]:
    """The slowdowns in ``runs_root/OVERHEAD_FILE`` by monitor name; {} without the file. Raises ValueError
    naming the file when it is there but not an :class:`OverheadMeasurement`."""
    path = Path(runs_root) / OVERHEAD_FILE
    if not path.is_file():
        return {}
    try:
        measured = OverheadMeasurement.model_validate_json(path.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{path}: not a monitor overhead measurement ({exc})") from None
    return {m.monitor: m for m in measured.monitors}


@dataclass(frozen=True)
class TierPoint:
    """One run: a diagnoser on one tier."""

    diagnoser: str
    tier: str
    skill: MetricValue
    cases: int  # scored cases
    bytes_per_case: float | None
    bytes_per_step: float | None
    sized: int  # cases with a recorded size
    overhead: MonitorOverhead | None = None  # an in-job monitor's slowdown of the job, when measured


def split_by_tier(run_dirs: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """(runs on the full bundle, runs on a smaller tier), each in the order given; an unreadable
    ``run.json`` counts as full (the leaderboard then names the problem)."""
    full, tiered = [], []
    for d in run_dirs:
        store = RunStore(Path(d))
        try:
            tier = store.read_info().evidence_tier if store.info_path.is_file() else FULL
        except (RunReadError, ValueError, OSError):
            tier = FULL
        (full if tier == FULL else tiered).append(Path(d))
    return full, tiered


def _point(run_dir: Path) -> TierPoint:
    store = RunStore(run_dir)
    info: RunInfo = store.read_info()
    summary = store.read_summary()
    sizes = list(info.evidence_sizes.values())
    stepped = [s for s in sizes if s.steps]
    return TierPoint(
        diagnoser=inert(summary.diagnoser.name, newlines=False),  # its own words: shown, never acted on
        tier=info.evidence_tier,
        skill=summary.metrics.skill,
        cases=summary.counts.scored,
        bytes_per_case=sum(s.bytes for s in sizes) / len(sizes) if sizes else None,
        bytes_per_step=sum(s.bytes for s in stepped) / sum(s.steps for s in stepped) if stepped else None,
        sized=len(sizes),
        overhead=read_overhead(run_dir.parent).get(summary.diagnoser.name) if info.evidence_tier == FULL else None,
    )


def gather_points(run_dirs: Sequence[Path]) -> list[TierPoint]:
    """One point per run, by diagnoser then tier (ladder order)."""
    points = [_point(Path(d)) for d in run_dirs]
    return sorted(points, key=lambda p: (p.diagnoser, TIERS.index(p.tier)))


def _by_diagnoser(points: Sequence[TierPoint]) -> dict[str, list[TierPoint]]:
    out: dict[str, list[TierPoint]] = {}
    for p in points:
        out.setdefault(p.diagnoser, []).append(p)
    return out


def which_first(points: Sequence[TierPoint]) -> dict[str, str]:
    """Per diagnoser with two tiers or more: the answer in one line (see the module docstring)."""
    out = {}
    for name, pts in _by_diagnoser(points).items():
        scored = [p for p in pts if p.skill.value is not None]
        if len(scored) < 2:
            continue
        best = max(scored, key=lambda p: p.skill.value)
        enough = next(p for p in scored if p.skill.ci is not None and p.skill.ci[1] >= best.skill.value or p is best)
        gains = [(b.skill.value - a.skill.value, a, b) for a, b in zip(scored, scored[1:])]
        gain, a, b = max(gains, key=lambda g: g[0])
        step = (f"the largest gain is {a.tier} -> {b.tier} ({gain:+.3f} skill"
                + (f", {_kb(b.bytes_per_case - a.bytes_per_case)} more per case)" if None not in (a.bytes_per_case, b.bytes_per_case) else ")")
                if gain > 0 else "no step up the ladder raises its skill")
        out[name] = (f"the cheapest tier this corpus cannot tell from the best is {enough.tier} ({_skill(enough.skill)} "
                     f"against {best.tier}'s {best.skill.value:.3f}); {step}")
    return out


def _kb(b: float | None) -> str:
    """A size in B, kB or MB (1024s)."""
    if b is None:
        return "—"
    for unit, scale in (("MB", 1 << 20), ("kB", 1 << 10)):
        if abs(b) >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


def _skill(m: MetricValue) -> str:
    if m.value is None:
        return "—"
    return f"{m.value:.3f} [{m.ci[0]:.3f}, {m.ci[1]:.3f}]" if m.ci else f"{m.value:.3f}"


def _rows(points: Sequence[TierPoint]) -> list[list[str]]:
    return [[p.diagnoser, p.tier, _skill(p.skill), str(p.cases), _kb(p.bytes_per_case), _kb(p.bytes_per_step)]
            for p in points]


HEADER = ["diagnoser", "tier", "skill [95% interval]", "n (cases)", "bytes per case", "bytes per step"]
TIER_NOTE = ("Tiers (diageval.cases.tiers): steps = step log; metrics = + host metrics; one-rank = + rank 0's trace; "
             "traces = + every rank's trace and logs; full = + Flight Recorder dumps. A regression or fleet is cut run by "
             "run (its fleet.json at every tier); its steps are its runs' together. Labels a tier cannot show are "
             "scored as abstain-expected.")


MONITOR_HEADER = ["monitor", "skill [95% interval]", "n (cases)", "job slowdown [95% interval]", "n (pairs)"]
MONITOR_NOTE = ("In-job monitors run inside the recorded job; their cost is the job's slowdown (monitored / plain time "
                "per step, interleaved pairs; benchmarks/monitor_overhead.py), not bytes.")


def _monitor_rows(points: Sequence[TierPoint]) -> list[list[str]]:
    return [[p.diagnoser, _skill(p.skill), str(p.cases),
             f"{p.overhead.slowdown:.3f}x [{p.overhead.ci[0]:.3f}, {p.overhead.ci[1]:.3f}]", str(p.overhead.n)]
            for p in points if p.overhead is not None]


def monitor_markdown(points: Sequence[TierPoint]) -> str:
    """The monitors' table for the markdown report ('' when no run has a measured overhead)."""
    rows = _monitor_rows(points)
    if not rows:
        return ""
    lines = ["", "## In-job monitors: skill beside overhead", "", MONITOR_NOTE, "",
             "| " + " | ".join(MONITOR_HEADER) + " |", "|" + "---|" * len(MONITOR_HEADER)]
    return "\n".join(lines + ["| " + " | ".join([markdown_inert(r[0]), *r[1:]]) + " |" for r in rows]) + "\n"


def monitor_html(points: Sequence[TierPoint]) -> str:
    rows = _monitor_rows(points)
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in MONITOR_HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(inert(c))}</td>" for c in r) + "</tr>" for r in rows)
    return (f'<section id="monitor-overhead">\n<h2>In-job monitors: skill beside overhead</h2>\n<p>{html.escape(MONITOR_NOTE)}</p>\n'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n</section>\n")


def signal_value_markdown(points: Sequence[TierPoint]) -> str:
    """The section for the markdown report ('' without a run on a smaller tier), then the monitors' table."""
    if not any(p.tier != FULL for p in points):
        return monitor_markdown(points)
    lines = ["", "## Signal value: skill per evidence tier", "", TIER_NOTE, "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join([markdown_inert(r[0]), *r[1:]]) + " |" for r in _rows(points)]
    answers = which_first(points)
    if answers:
        lines += ["", "Which signal first:", ""] + [f"- {markdown_inert(name)}: {text}" for name, text in sorted(answers.items())]
    return "\n".join(lines) + "\n" + monitor_markdown(points)


def signal_value_plot(points: Sequence[TierPoint]) -> str:
    """Skill against bytes per case (log scale), one line per diagnoser, each point labeled with its tier."""
    from matplotlib.figure import Figure

    from diageval.reports.plots import MARKERS, _svg, plot_text

    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    for i, (name, pts) in enumerate(sorted(_by_diagnoser(points).items())):
        pts = [p for p in pts if p.skill.value is not None and p.bytes_per_case]
        if not pts:
            continue
        xs, ys = [p.bytes_per_case / 1024 for p in pts], [p.skill.value for p in pts]
        lo = [y - (p.skill.ci[0] if p.skill.ci else y) for p, y in zip(pts, ys)]
        hi = [(p.skill.ci[1] if p.skill.ci else y) - y for p, y in zip(pts, ys)]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker=MARKERS[i % len(MARKERS)], capsize=3, label=plot_text(name))
        for p, x, y in zip(pts, xs, ys):
            ax.annotate(p.tier, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("evidence per case (kB, log scale)")
    ax.set_ylabel("skill (95% interval)")
    ax.axhline(0.0, color="grey", linewidth=0.6)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _svg(fig, "signal-value")


def signal_value_html(points: Sequence[TierPoint]) -> str:
    """The HTML section ('' without a run on a smaller tier): the table, the plot, the answers."""
    if not any(p.tier != FULL for p in points):
        return monitor_html(points)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in _rows(points))
    answers = "".join(f"<li>{html.escape(n)}: {html.escape(t)}</li>" for n, t in sorted(which_first(points).items()))
    return (f'<section id="signal-value">\n<h2>Signal value: skill per evidence tier</h2>\n<p>{html.escape(TIER_NOTE)}</p>\n'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"
            f"<figure>{signal_value_plot(points)}</figure>\n"
            + (f"<p>Which signal first:</p><ul>{answers}</ul>\n" if answers else "") + "</section>\n" + monitor_html(points))


def insert_section(page: str, section: str) -> str:
    """``section`` placed before the page's case list (else before ``</body>``)."""
    if not section:
        return page
    for anchor in ('<section id="cases">', "</body>"):
        at = page.find(anchor)
        if at >= 0:
            return page[:at] + section + page[at:]
    return page + section
