"""Causes named from the time table of a rank (``diageval.bundle.attribution``; issue 38).

On a host-only (CPU) rank the table splits the main thread's time and names input made inline (``input work``:
Python before the step's first op, no DataLoader) and dispatch (``launch``: short gaps between ops, where the op count
does not name it) against ``HOST_CAUSE_SHARE``; where its occurrences are too few, the job's step log is asked whether
a part recurs (``logged_share``). The rest of this note is the GPU's.

Each rank's steps (or the windows of a step-less trace) are split into device work and, for every device-idle
instant, what the launching threads were doing. A host-side cause is the idle it explains:

* ``data wait`` (the loop waiting on its DataLoader) and ``input work`` (before the step's first device work,
  the launching thread in CPU ops that queue none: decoding, resizing, tokenising inline in the step):
  ``input.dataloader_starvation``; CPU work after the first kernel (``cpu work``: the model's own bookkeeping,
  post-processing) is shown in the table and named as nothing;
* ``sync``: ``host.device_sync``; ``memory`` (cudaFree/hipFree, raw allocations): ``memory.allocator_churn``;
* ``launch`` (idle in short gaps, or while an op dispatches, the next kernel having found an empty queue):
  ``launch.kernel_launch_overhead``, when the rank's kernels also start a median under ``QUEUE_EMPTY_DELAY_US``
  after their launch (the host does not run ahead of the device for most of the step: the gaps are the rule,
  not the few places where a deep queue ran dry).

Confidence is ``graded_confidence(share, ATTRIBUTED_CAUSE_SHARE, se)``: smooth in the margin over its uncertainty.
A share is claimed only when told from its absence (``ABSENCE_SIGMAS`` standard errors above zero); a share
that would matter but is not told from its absence is "too little evidence" (``thin_parts``), as is a table
whose idle the trace cannot explain (``untraced``: the host outside every recorded op).
"""

from __future__ import annotations

from pydantic import BaseModel

from diageval.bundle.attribution import (HOST_OCCURRENCE, HOST_WHAT, OCCURRENCE, WHAT, UnitAttribution,
                                         ratio_standard_error, share_rows)
from diageval.bundle.attribution import TimeShare
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.host_sync import WHAT as BLOCKING_WHAT
from diageval.diagnosers.rules.host_sync import SYNC_KINDS
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import (
    claimable,
    graded_confidence,
    lower_edge,
    median,
    median_standard_error,
    robust_sigma,
)
from diageval.diagnosis import Finding

# On a host-only (CPU) trace the table names what the older judges cannot see: input made inline with no DataLoader
# marker (``input work``), and dispatch measured as the main thread's time between ops (``launch``) where the op
# count does not already name it (a few hundred ops a step, a window of part of one). A DataLoader wait stays with
# ``data_wait`` (the same share of wall time against the same cut, with its persistence over steps: one way of
# judging it); sync and memory hold no device calls on a CPU. Both against thresholds.HOST_CAUSE_SHARE.
HOST_CAUSE_OF_PART = {"input work": "input.dataloader_starvation", "launch": "launch.kernel_launch_overhead"}
CAUSE_OF_PART = {
    "data wait": "input.dataloader_starvation",
    "input work": "input.dataloader_starvation",
    "sync": "host.device_sync",
    "memory": "memory.allocator_churn",
    "launch": "launch.kernel_launch_overhead",
}
SUMMARY = {
    "data wait": "the device idles while the loop waits for its next batch (DataLoader __next__): {share:.0%} of the time",
    "input work": "before each step's first device work the device idles while the launching thread runs CPU work"
                  " that queues nothing on it (input made inline in the step: decoding, resizing, tokenising):"
                  " {share:.0%} of the time",
    "sync": "the host blocks in {calls} while the device idles: {share:.0%} of the time",
    "memory": "the host frees or allocates device memory (cudaFree/hipFree, raw allocations) while the device idles:"
              " {share:.0%} of the time",
    "launch": "the host cannot keep the device fed: it idles {share:.0%} of the time in short gaps, each kernel"
              " starting a median {delay:.0f} us after its launch (an empty queue)",
}


HOST_SUMMARY = {
    "launch": "the main thread spends {share:.0%} of the time between the model's ops, in gaps of at most 1 ms (per-op"
              " dispatch: the Python and framework time between many small ops)",
    "input work": "before each step's first op the main thread runs Python outside the model's ops (input made inline"
                  " in the step: decoding, resizing, tokenising): {share:.0%} of the time",
}


class RankTable(BaseModel):
    rank: int
    rows: dict[str, TimeShare]
    units: list[UnitAttribution]
    delay_us: float | None  # median over units of the unit's median launch-to-start delay
    delay_ratio: float  # QUEUE_EMPTY_DELAY_US / delay (1 at the cut, larger = emptier queue)
    se_delay_ratio: float
    host_events: int
    host_only: bool = False  # no device events: the table splits the main thread's time (attribution._attribute_host)
    log_typical_us: dict[str, float] = {}  # part -> the step log's typical step its share was checked against

    @property
    def causes(self) -> dict[str, str]:
        return HOST_CAUSE_OF_PART if self.host_only else CAUSE_OF_PART

    @property
    def cut(self) -> float:
        return T.HOST_CAUSE_SHARE if self.host_only else T.ATTRIBUTED_CAUSE_SHARE

    def separated(self, part: str) -> bool:
        r = self.rows[part]
        return r.share > 0 and r.share >= T.ABSENCE_SIGMAS * r.se

    def confidence(self, part: str) -> float:
        r = self.rows[part]
        c = graded_confidence(r.share, self.cut, r.se)
        if part == "launch" and not self.host_only:  # a CPU has no queue to find empty (thresholds.HOST_CAUSE_SHARE)
            c = round(c * graded_confidence(self.delay_ratio, 1.0, self.se_delay_ratio), 3)
        return c


def measure_tables(ev: RunEvidence) -> list[RankTable]:
    out = []
    for rank in sorted(ev.attribution):
        att = ev.attribution[rank]
        units = [u for u in att.units if u.dur_us > 0]
        rows = {r.part: r for r in share_rows(att)}
        if not rows or rank not in ev.traces:
            continue
        steps = [st for st in ev.units(rank) if st.gpu is not None and st.gpu.launch_delay_median_us is not None]
        delays = [st.gpu.launch_delay_median_us for st in steps]
        ratios = [T.QUEUE_EMPTY_DELAY_US / max(d, 1e-3) for d in delays]
        host_only = not ev.traces[rank].has_device
        checked = {}
        if host_only:  # the log is asked where the occurrences are too few to tell the part from none (logged_share)
            checked = {part: c for part in HOST_CAUSE_OF_PART if rows[part].share < T.ABSENCE_SIGMAS * rows[part].se
                       for c in [logged_share(ev, rank, units, part)] if c}
            rows = {**rows, **{part: c[0] for part, c in checked.items()}}
        out.append(RankTable(
            rank=rank, rows=rows, units=units, log_typical_us={p: c[1] for p, c in checked.items()},
            delay_us=median(delays) if delays else None,
            delay_ratio=median(ratios) if ratios else 0.0,
            se_delay_ratio=median_standard_error(ratios),
            host_events=sum(u.host_events for u in units),
            host_only=host_only,
        ))
    return out


def logged_share(ev: RunEvidence, rank: int, units: list[UnitAttribution], part: str) -> tuple[TimeShare, float] | None:
    """A host-only rank's ``part`` over profiled steps, checked against the job's step log (``steps.jsonl``, at least
    ``MIN_PATTERN_STEPS`` rows): what recurs, with the log's spread as its error, and the log's typical step.

    The table's own error asks whether the part could be a one-off of the profiled steps (one occurrence: an error as
    large as itself). The log answers it by measurement: a one-off in a profiled step makes that step longer than the
    job's typical one (the median logged step, spread ``robust_sigma``) by its size, so at most the step's excess
    over the typical step can be a one-off; the rest recurs. The recurring share's error is the log's spread (one
    sigma per profiled step, in quadrature) or the recurring share's spread over the profiled steps, whichever is
    larger. A recording without step markers (a window started by hand) is checked the same way against the steps it
    can touch (``_window_logged_share``). None where the log cannot say (too few rows, or windows cut from the log).

    Asked only where the occurrences cannot separate the part (``measure_tables``): subtracting the excess over the
    median step is right for a rare one-off and wrong for a part that recurs in every other step (the median then
    falls between the short and the long steps), which many occurrences already show."""
    rows = ev.step_log.get(rank, [])
    if len(rows) < T.MIN_PATTERN_STEPS or (ev.windowed(rank) and not recording(ev, rank)) or not units:
        return None
    durations = logged_durations(ev, rank)
    if len(durations) < T.MIN_PATTERN_STEPS:
        return None
    typical, sigma = median(durations), robust_sigma(durations)
    total = sum(u.dur_us for u in units)
    if recording(ev, rank):
        return _window_logged_share(units, part, durations, typical, sigma), typical
    recurring = [max(0.0, u.parts[part].us - max(0.0, u.dur_us - typical)) if part in u.parts else 0.0 for u in units]
    share = sum(recurring) / total
    n = len(units)
    se = sigma * n ** 0.5 / total
    se = max(se, ratio_standard_error(recurring, [u.dur_us for u in units]))
    occurrences = sum(u.parts[part].occurrences for u in units if part in u.parts)
    return TimeShare(part=part, us=sum(recurring), share=share, se=se, occurrences=occurrences, units=n), typical


def logged_durations(ev: RunEvidence, rank: int) -> list[float]:
    """The rank's step times (us) in the job's step log (``steps.jsonl``)."""
    return [(r.t_end - r.t_start) * 1e6 for r in ev.step_log.get(rank, []) if r.t_end > r.t_start]


def recording(ev: RunEvidence, rank: int) -> bool:
    """The rank's trace is one recording without step markers (a window started by hand), not logged steps."""
    return ev.windowed(rank) and ev.window_source.get(rank) != "step log"


def _window_logged_share(units: list[UnitAttribution], part: str, durations: list[float], typical: float,
                         sigma: float) -> TimeShare:
    """``part`` over a recording without step markers, checked against the step log (``logged_share``).

    Which logged steps the window lies in is not known, but a window of ``total`` touches at most
    ``total // shortest step + 2`` of them, and a one-off inside it lengthens those steps past the typical one by its
    size: at most the sum of that many of the log's largest excesses over the typical step can be a one-off, the rest
    of the part recurs in the job's steps. Its error is the log's spread, one sigma per step the window can touch, in
    quadrature. The share stays a share of the window, as the table's own is."""
    total = sum(u.dur_us for u in units)
    touched = min(len(durations), int(total // max(min(durations), 1.0)) + 2)
    one_off = sum(sorted((max(0.0, d - typical) for d in durations), reverse=True)[:touched])
    seen = sum(u.parts[part].us for u in units if part in u.parts)
    recurring = max(0.0, seen - one_off)
    occurrences = sum(u.parts[part].occurrences for u in units if part in u.parts)
    return TimeShare(part=part, us=recurring, share=recurring / total, se=sigma * touched ** 0.5 / total,
                     occurrences=occurrences, units=len(units))


def unseen_share(t: RankTable, ev: RunEvidence) -> float:
    """The share of the job's typical logged step that a recording without step markers does not cover (0 where the
    units are steps, or no step log of MIN_PATTERN_STEPS rows says how long a step is)."""
    durations = logged_durations(ev, t.rank)
    if not recording(ev, t.rank) or len(durations) < T.MIN_PATTERN_STEPS:
        return 0.0
    return max(0.0, 1.0 - sum(u.dur_us for u in t.units) / median(durations))


def thin_parts(t: RankTable, ev: RunEvidence) -> list[str]:
    """Why this rank's table cannot separate a cause from its absence (empty: it can)."""
    if t.host_events == 0:
        return [f"{unit_words(ev, t)} holds no host events (no CPU op, annotation or runtime call): what the launching"
                " thread did, and whether it covers a whole step, cannot be seen"]
    if t.host_only and (len(t.units) >= T.MIN_PATTERN_STEPS
                        or (not recording(ev, t.rank) and len(ev.step_log.get(t.rank, [])) >= T.MIN_PATTERN_STEPS)):
        # a host-only table of enough units: a share not told from none sits in a few of them, a one-off the units
        # show to be one (a stalled step is the step-time judges'), not a pattern too thin to see; profiled steps of a
        # job whose step log holds a pattern's steps: the log shows the step times beyond them (evidence.RankReach)
        return []
    out = []
    unseen = unseen_share(t, ev)
    if t.host_only and unseen >= lower_edge(t.cut):
        # a window that names nothing says nothing of the step it does not cover, where a cause's share could sit
        out.append(f"the recording covers {1 - unseen:.0%} of the step log's typical step: a cause could sit in the"
                   f" unseen {unseen:.0%}")
    for part in (*t.causes, "untraced"):
        r = t.rows[part]
        if r.share >= lower_edge(t.cut) and not t.separated(part):
            out.append(f"{part} {r.share:.0%} of the time from {r.occurrences} {occurrence_words(t, part)}"
                       f" (standard error {r.se:.0%}: not told from none)")
    return out


def unexplained(t: RankTable) -> str | None:
    """The idle the trace cannot explain, when it could hide a cause (the host outside every recorded op)."""
    r = t.rows["untraced"]
    # on a host-only trace the step-time judges read unrecorded host time (spikes: a blocking save sits there), so it
    # is theirs to name, not a reason to abstain before them
    if not t.host_only and t.separated("untraced") and graded_confidence(r.share, t.cut, r.se) >= 0.5:
        return (f"rank {t.rank}: the device idles {r.share:.0%} of the time (standard error {r.se:.0%}, {r.occurrences}"
                " device gaps) while the host is outside every recorded op: the trace does not show what it waited for")
    return None


def unit_words(ev: RunEvidence, t: RankTable) -> str:
    if recording(ev, t.rank):
        return "the span with device work (no step markers)"
    return f"{len(t.units)} {ev.unit_name(t.rank) if len(t.units) != 1 else ev.unit_name(t.rank, plural=False)}"


def occurrence_words(t: RankTable, part: str) -> str:
    return (HOST_OCCURRENCE if t.host_only else OCCURRENCE)[part]


def evidence_line(ev: RunEvidence, t: RankTable, part: str) -> str:
    r = t.rows[part]
    total = sum(u.dur_us for u in t.units)
    busy = t.rows["compute"].share + t.rows["communication"].share
    what, busy_words = ((HOST_WHAT[part], "main thread in the model's ops") if t.host_only
                         else (WHAT[part], "device busy"))
    line = (f"{ev.trace_file(t.rank)}: {what}: {r.us / 1e3:.1f} ms of {total / 1e3:.1f} ms over"
            f" {unit_words(ev, t)}"
            f" ({r.share:.0%}, standard error {r.se:.1%} from {r.occurrences} {occurrence_words(t, part)});"
            f" {busy_words} {busy:.0%}")
    if part in t.log_typical_us:
        line += (f"; the part that recurs: a traced step's excess over the step log's typical"
                 f" {t.log_typical_us[part] / 1e3:.1f} ms step could be a one-off, the rest recurs"
                 " (standard error from the log's spread)")
    if part == "launch" and t.delay_us is not None:
        line += f"; median launch-to-start delay {t.delay_us:.1f} us (an empty queue under {T.QUEUE_EMPTY_DELAY_US:.0f} us)"
    return line + " (diageval trace stats: time table)"


def _blocking_calls(ev: RunEvidence, ranks: list[int]) -> str:
    """What the synchronising calls are, by the kind that idles the device longest (trace_stats' blocking figures)."""
    idle: dict[str, float] = {}
    for rank in ranks:
        for st in ev.units(rank):
            for kind, b in (st.gpu.blocking.items() if st.gpu is not None else ()):
                if kind in SYNC_KINDS:
                    idle[kind] = idle.get(kind, 0.0) + b.device_idle_us
    top = max(sorted(idle), key=idle.get) if idle else None
    return BLOCKING_WHAT[top] if top else "synchronising calls"


def judge_attributed(tables: list[RankTable], ev: RunEvidence, named: dict[int, set[str]] | None = None
                     ) -> list[Finding]:
    """One finding per cause category, over the ranks whose table names it (the part that names it best per rank).
    ``named``: rank -> the categories the counting judges already name on it (a host-only rank's table does not name
    them again)."""
    named = named or {}
    hits: dict[str, list[tuple[RankTable, str, float]]] = {}
    for t in tables:
        best: dict[str, tuple[str, float]] = {}
        for part, category in t.causes.items():
            if t.host_only and category in named.get(t.rank, set()):
                continue
            if not t.separated(part):
                continue
            c = t.confidence(part)
            if claimable(c) and c > best.get(category, ("", -1.0))[1]:
                best[category] = (part, c)
        for category, (part, c) in best.items():
            hits.setdefault(category, []).append((t, part, c))
    findings = []
    for category, hit in hits.items():
        share = median([t.rows[p].share for t, p, _ in hit])
        part = max(hit, key=lambda h: h[2])[1]
        delay = median([t.delay_us for t, _, _ in hit if t.delay_us is not None] or [0.0])
        ranges = [ev.step_range(t.rank, ev.units(t.rank)[0], ev.units(t.rank)[-1]) for t, _, _ in hit if ev.units(t.rank)]
        ranges = [x for x in ranges if x is not None]
        findings.append(Finding(
            category=category,
            confidence=median([c for _, _, c in hit]),
            ranks=[t.rank for t, _, _ in hit],
            steps=(min(a for a, _ in ranges), max(b for _, b in ranges)) if ranges else None,
            impact=round(min(1.0, share), 3),
            summary=f"rank(s) {[t.rank for t, _, _ in hit]}: " + (HOST_SUMMARY if hit[0][0].host_only else SUMMARY)[part].format(
                share=share, delay=delay, calls=_blocking_calls(ev, [t.rank for t, _, _ in hit])),
            evidence=[evidence_line(ev, t, p) for t, p, _ in hit],
        ))
    return findings


__all__ = ["CAUSE_OF_PART", "HOST_CAUSE_OF_PART", "RankTable", "measure_tables", "thin_parts", "unexplained", "judge_attributed"]
