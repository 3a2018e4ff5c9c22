"""Label support: does the evidence a case is scored on hold each labeled cause where the label puts it?

Manifestation (:mod:`diageval.recording.verify`) asks whether the step got slower. That does not say
the slowdown is the labeled cause on the labeled rank: on 2 cores, competitors bound to one rank's core
pushed the *other* rank's DataLoader workers aside (the labeled rank's ops ran at the twin's speed), and a
starved loader beside a 6x straggler had time to keep up (1.6-7 ms of wait in 112 ms steps). This module
reads the traces of the case's recordings and of its healthy twin's (every repeat the verification
recorded) through the shared per-step reader (:func:`diageval.bundle.trace_summary.summarize_trace`)
and checks each labeled cause on its own, with the measure that cause produces:

* **Rank-local causes** (:data:`RANK_LOCAL`: a straggler, load imbalance, CPU contention, a blocking
  checkpoint): a rank's *own time* per step, the step less the time it waited inside collectives and
  for data (its compute plus host time no op explains, such as a blocking write). The labeled rank's own
  time must exceed the twin's (same rank, same steps; the median over repeat pairs of case over twin, so that
  the machine's drift between pairs cancels) by more than the twin's spread; and, for every
  labeled rank and every other rank, the labeled rank's own time *relative to the other's in the same
  recording* must exceed that ratio in the twin's recordings by more than the twin's spread of it: the
  effect is on the labeled rank and did not land on another one instead. The peers of a straggler wait
  inside the collective, so their own time stays at the twin's. The second comparison is within a
  recording because both ranks of a recording run at once, on the machine as it is then: the machine's
  drift between recordings, which moves a rank's own time 38% between two healthy recordings of a CI run
  (and made a contention case whose labeled rank stretched +39% and its peer +3% read as "stretched
  alike" when the two ranks' excesses over the twin were compared), cancels in the ratio.
* **Causes measured as a share of the step** (:data:`SHARE_MEASURES`: a starved loader's data wait,
  a stalled collective's time inside collectives): on each labeled rank (every rank when the label names
  none) the share of the step that measure takes must exceed the twin's share by more than the twin's
  spread of that share. A share, not a time: a wait that grows from 2 to 7 ms while the step grows from
  30 to 112 ms is not what slows it.
* **Launch overhead** (:data:`COUNT_MEASURES`) by the host ops per step on each labeled rank (every rank
  when none is named): more than the twin's by more than its spread. A count, not a time: the same work
  dispatched as many more ops is the cause, and a count does not move with the machine's load, while
  time in short ops does (on a loaded machine a descheduled op's self time passes any "short" bound:
  measured, 16-way slicing showed 1% of the step in short ops against the twin's 10%).

Each cause is checked on its own within a two-cause recording, with its own measure (own time excludes
the data wait, so a starved loader does not count as a straggler's stretch, and the reverse).

Thresholds (no number here is fitted to a case):

* The twin's spread of a measure is the largest, over its ranks, of the rank's range over the twin's
  repeats, relative to its median for times and counts, absolute for shares: each rank is compared with
  the same rank of the twin, so how far that rank's measure moves from one healthy recording to the next
  is the noise of the comparison. Not the range over ranks too: a healthy job's ranks differ
  systematically (the rank that computes less waits longer in the collective; measured on a loaded
  machine, the twin's collective share ranged 43 points over ranks and repeats). It is floored at
  :data:`~diageval.recording.truth.NOISE_FLOOR` (5%, relative for times; 5 points of the step for
  shares), the floor the manifestation check puts under a range of few repeats.
* At most :data:`MAX_PAIRS` repeat pairs are read (the first ones): each pair costs a trace summary per rank
  of both recordings (measured under a load of 20 on 2 cores: 6 pairs of an MLP case took 30 s to check),
  and three repeats times the ranks already give the twin's spread six values.
* Case and twin values are medians over repeats of each repeat's median per step over the traced steps
  inside the cause's labeled step range (a step descheduled on a loaded machine moves a mean, not a
  median), except for a cause that stalls one step in several (:data:`PERIODIC`: a blocking checkpoint),
  whose cost is only in the mean.

Which causes are checked (:func:`needs_check`): every rank-local cause, and every cause of a case with
more than one; on the shown recording also a one-cause case's starved DataLoader (:func:`_shown_only`). The
cause of a one-cause case measured as a share of the step is the case's whole step-time effect, which the
manifestation check measures; reading every trace of every repeat to see it again would
cost CI time (a launch case's traces take 2-6 s to summarise per verify on 2 cores) for no new question.

What is not checked says so (``checked: false`` with the reason) and raises no problem: causes without
a measure here (a collective hang ends the job: its steps are not comparable; exposed communication and
the GPU-only causes), a labeled rank whose trace the evidence does not hold, traces that cover none of
the labeled steps.

A healthy control's or confounder's shown recording is checked here too (:func:`control_support`): on every rank,
as if a straggler were labeled there.

The recording a diagnoser is shown (repeat 0) is checked on its own too (:func:`shown_support`): the median over
pairs can hold a label that the one shown pair does not.

Size: ~520 lines because the positive cases' checks, the shown recording's and the controls' share the per-rank
means, the twin's spreads and the within-recording lift; split, the other checks would import this module's internals.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_summary import StepSummary, summarize_trace
from diageval.cases.model import Case, CauseLabel
from diageval.recording.truth import NOISE_FLOOR

RANK_LOCAL = frozenset({
    "compute.straggler_rank", "compute.load_imbalance", "host.cpu_contention", "checkpoint.blocking_save",
})
"""Causes that sit on the ranks their label names, measured by those ranks' own time."""

CHECKS_VERSION = 1
"""The label checks' version, kept in each verification they judged (``Verification.checks``): raise it when a check
changes what it refuses, and a home's stored verifications are made again (their recordings reused) instead of
keeping a verdict the new check would not give. 1: the shown recording's check of a one-cause starved DataLoader."""

SHARE_MEASURES = {
    "input.dataloader_starvation": "data wait",
    "comm.collective_stall": "time in collectives",
}
"""Causes measured by the share of the step one kind of time takes, and that kind."""

COUNT_MEASURES = {"launch.kernel_launch_overhead": "host ops per step"}
"""Causes measured by a count per step against the twin's, and that count."""

PERIODIC = frozenset({"checkpoint.blocking_save"})
"""Causes that cost one step in several: measured by the mean per step, the others by the median."""

MAX_PAIRS = 3
"""Repeat pairs (twin, case) read at most: the first ones."""


class RankMeans(BaseModel):
    """One rank of one recording: means per step over the steps looked at (milliseconds)."""

    steps: int
    step_ms: float
    own_ms: float = Field(description="Step less the time inside collectives and waiting for data")
    own_median_ms: float = Field(description="The same, the median over the steps")
    data_wait_ms: float
    collective_ms: float
    host_ops: float = Field(description="Ops on the training thread")

    def share(self, kind: str) -> float:
        value = {"data wait": self.data_wait_ms, "time in collectives": self.collective_ms}[kind]
        return value / self.step_ms if self.step_ms > 0 else 0.0


class CauseSupport(BaseModel):
    """Whether the evidence holds one labeled cause where its label puts it."""

    category: str
    ranks: list[int] | None
    measure: str | None = Field(description="own time, the share of the step of one kind of time, or a count per "
                                            "step; None when not checked")
    checked: bool
    supported: bool = Field(description="True when not checked")
    detail: str = Field(description="The numbers behind the verdict, or why it was not checked")


def _rank_means(steps: Sequence[StepSummary], step_range: tuple[int, int]) -> RankMeans | None:
    kept = [s for s in steps if step_range[0] <= s.number < step_range[1]]
    if not kept:
        return None

    def mean_ms(values) -> float:
        return statistics.fmean(values) / 1000.0

    return RankMeans(
        steps=len(kept),
        step_ms=mean_ms(s.dur_us for s in kept),
        own_ms=mean_ms(max(0.0, s.dur_us - s.collective_us - s.data_wait_us) for s in kept),
        own_median_ms=statistics.median(max(0.0, s.dur_us - s.collective_us - s.data_wait_us) for s in kept) / 1000.0,
        data_wait_ms=mean_ms(s.data_wait_us for s in kept),
        collective_ms=mean_ms(s.collective_us for s in kept),
        host_ops=statistics.fmean(s.host_ops for s in kept),
    )


class RecordingSteps(BaseModel):
    """Every rank's per-step trace summary of one recording (read once, looked at per cause)."""

    ranks: dict[int, list[StepSummary]]

    @classmethod
    def read(cls, folder: Path) -> "RecordingSteps":
        bundle = EvidenceBundle.open(folder)
        return cls(ranks={rank: summarize_trace(path).steps for rank, path in sorted(bundle.trace_paths().items())})

    def means(self, step_range: tuple[int, int]) -> dict[int, RankMeans]:
        out = {}
        for rank, steps in self.ranks.items():
            m = _rank_means(steps, step_range)
            if m is not None:
                out[rank] = m
        return out


def _spread(twin: list[dict[int, RankMeans]], value, *, relative: bool) -> float:
    """The largest over ranks of the rank's range of ``value(RankMeans)`` over the twin's repeats (relative to
    its median when ``relative``), floored at NOISE_FLOOR."""
    widest = 0.0
    for rank in {r for rec in twin for r in rec}:
        widest = max(widest, _range([value(rec[rank]) for rec in twin if rank in rec], relative=relative))
    return max(widest, NOISE_FLOOR)


EXPECTED_RANGE = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078,
                  11: 3.173, 12: 3.258}
"""d2(n): the expected range of n draws from a normal distribution, in standard deviations (the control-chart
constant). The range of n repeats grows with n while the medians compared against it grow more precise, so a
verify that needed 9 pairs was held to a spread 2.6 times wider than one decided on 2: in a fresh-clone CI (ci20)
``straggler-near-limit-rank0`` manifested after 9 pairs with its labeled rank's own time +87% over the twin's and
the other rank's -1%, and was refused because one slow twin recording among the 9 made the twin's range 91%."""


def _range(values: list[float], *, relative: bool) -> float:
    """One measure's spread over the twin's repeats: the range two repeats would show (the range of all of them
    times d2(2) / d2(n), :data:`EXPECTED_RANGE`), relative to the median when ``relative``; 0 under two values."""
    if len(values) < 2:
        return 0.0
    n = min(len(values), max(EXPECTED_RANGE))
    width = (max(values) - min(values)) * EXPECTED_RANGE[2] / EXPECTED_RANGE[n]
    if not relative:
        return width
    mid = statistics.median(values)
    return width / mid if mid > 0 else 0.0


def relative_spread(values: Sequence[float]) -> float:
    """The spread of one measure over healthy recordings (:func:`_range`, relative to its median), floored at
    NOISE_FLOOR: how far one healthy recording's value moves from another's, the margin an effect must exceed.
    The verification of a regression (its baseline's recordings) and of a fleet (its fault-free runs) holds what a
    diagnoser is shown to it too (:mod:`diageval.recording.fleet_verify`)."""
    return max(_range(list(values), relative=True), NOISE_FLOOR)


def _per_rank(recordings: list[dict[int, RankMeans]], value) -> dict[int, float]:
    """Rank -> median over the recordings that hold the rank of ``value(RankMeans)``."""
    ranks = sorted({r for rec in recordings for r in rec})
    return {r: statistics.median(value(rec[r]) for rec in recordings if r in rec) for r in ranks}


def _rank_list(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))


def check_rank_local(label: CauseLabel, case: list[dict[int, RankMeans]], twin: list[dict[int, RankMeans]]) -> CauseSupport:
    """The labeled ranks' own time stretched beyond the twin's spread, more than any other rank's."""
    base = dict(category=label.category, ranks=label.ranks, measure="own time")
    labeled = list(label.ranks or [])
    own = (lambda m: m.own_ms) if label.category in PERIODIC else (lambda m: m.own_median_ms)
    in_case = _per_rank(case, own)
    in_twin = _per_rank(twin, own)
    missing = [r for r in labeled if r not in in_case or r not in in_twin]
    if not labeled or missing:
        why = "the label names no rank" if not labeled else f"no trace of rank(s) {_rank_list(missing)} in the labeled steps"
        return CauseSupport(**base, checked=False, supported=True, detail=f"not checked: {why}")
    spread = _spread(twin, own, relative=True)
    excess = {r: e for r in in_case if r in in_twin and (e := _paired_excess(case, twin, own, r)) is not None}
    numbers = "; ".join(f"rank {r} {in_case[r]:.1f} ms vs twin {in_twin[r]:.1f} ms ({excess[r]:+.0%} pair by pair)"
                        for r in sorted(excess))
    detail = f"own time per step: {numbers}; twin spread {spread:.0%}"
    if any(r not in excess for r in labeled):
        return CauseSupport(**base, checked=False, supported=True,
                            detail=f"not checked: no pair of recordings holds a positive own time of rank(s) {_rank_list(labeled)}")
    weakest = min(excess[r] for r in labeled)
    if weakest <= spread:
        low = [r for r in labeled if excess[r] <= spread]
        return CauseSupport(**base, checked=True, supported=False,
                            detail=f"labeled rank(s) {_rank_list(low)} not stretched beyond the twin's spread: {detail}")
    landed, lifts = [], []
    for other in sorted(r for r in excess if r not in labeled):
        for rank in labeled:
            lift, lift_spread = _relative_lift(case, twin, own, rank, other)
            if lift is None:
                continue
            lifts.append(f"rank {rank} over rank {other} {lift:+.0%} against the twin (spread {lift_spread:.0%})")
            if lift <= lift_spread and other not in landed:
                landed.append(other)
    if lifts:
        detail = f"{detail}; within a recording: {', '.join(lifts)}"
    if landed:
        return CauseSupport(**base, checked=True, supported=False,
                            detail=f"rank(s) {_rank_list(landed)}, not labeled, stretched as much as the labeled "
                                   f"rank(s) (within the twin's spread): {detail}")
    return CauseSupport(**base, checked=True, supported=True, detail=detail)


def _paired_excess(case: list[dict[int, RankMeans]], twin: list[dict[int, RankMeans]], value, rank: int) -> float | None:
    """How much ``rank``'s ``value`` in the case exceeds the twin's, pair by pair: the median over the pairs (``case[i]``,
    ``twin[i]``: twin ``i`` was recorded right before case ``i``) of their ratio, less 1; None when no pair holds the
    rank with a positive twin value. Pair by pair because the machine's speed drifts between pairs, and a
    comparison of medians over repeats takes that drift for an effect or hides one under it: in a fresh-clone CI
    (ci23) ``contention-mlp-one-part-time-rank1``'s labeled rank 1 ran +22% over the twin by medians and its peer
    -21% (the case's recordings had drawn a faster machine); pair by pair rank 1 was +68%."""
    ratios = [value(c[rank]) / value(t[rank]) for c, t in zip(case, twin) if rank in c and rank in t and value(t[rank]) > 0]
    return statistics.median(ratios) - 1.0 if ratios else None


def _relative_lift(case: list[dict[int, RankMeans]], twin: list[dict[int, RankMeans]], value, rank: int,
                   other: int) -> tuple[float | None, float]:
    """How much more ``rank``'s ``value`` exceeds ``other``'s in the case's recordings than in the twin's: the
    median over recordings of value(rank) / value(other), case over twin, less 1; and the twin's spread of that
    ratio (its range over the twin's repeats relative to its median, floored at NOISE_FLOOR). None when no
    recording of either holds both ranks with a positive value."""
    def ratios(recordings: list[dict[int, RankMeans]]) -> list[float]:
        return [value(rec[rank]) / value(rec[other]) for rec in recordings
                if rank in rec and other in rec and value(rec[other]) > 0]

    in_case, in_twin = ratios(case), ratios(twin)
    if not in_case or not in_twin:
        return None, NOISE_FLOOR
    return statistics.median(in_case) / statistics.median(in_twin) - 1.0, relative_spread(in_twin)


def check_share(label: CauseLabel, kind: str, case: list[dict[int, RankMeans]], twin: list[dict[int, RankMeans]]) -> CauseSupport:
    """On each labeled rank (every rank when none is named) the cause's share of the step beyond the twin's."""
    base = dict(category=label.category, ranks=label.ranks, measure=f"share of the step: {kind}")
    in_case = _per_rank(case, lambda m: m.share(kind))
    in_twin = _per_rank(twin, lambda m: m.share(kind))
    ranks = list(label.ranks) if label.ranks else sorted(set(in_case) & set(in_twin))
    missing = [r for r in ranks if r not in in_case or r not in in_twin]
    if not ranks or missing:
        why = "no rank traced in the labeled steps" if not ranks else f"no trace of rank(s) {_rank_list(missing)} in the labeled steps"
        return CauseSupport(**base, checked=False, supported=True, detail=f"not checked: {why}")
    spread = _spread(twin, lambda m: m.share(kind), relative=False)
    numbers = "; ".join(f"rank {r} {in_case[r]:.0%} vs twin {in_twin[r]:.0%}" for r in ranks)
    detail = f"{kind} as a share of the step: {numbers}; twin spread {spread * 100:.0f} points"
    low = [r for r in ranks if in_case[r] - in_twin[r] <= spread]
    if low:
        return CauseSupport(**base, checked=True, supported=False,
                            detail=f"rank(s) {_rank_list(low)}: {kind} does not stand out against the twin: {detail}")
    return CauseSupport(**base, checked=True, supported=True, detail=detail)


def check_count(label: CauseLabel, kind: str, case: list[dict[int, RankMeans]], twin: list[dict[int, RankMeans]]) -> CauseSupport:
    """On each labeled rank (every rank when none is named) the count per step beyond the twin's spread."""
    base = dict(category=label.category, ranks=label.ranks, measure=kind)
    in_case = _per_rank(case, lambda m: m.host_ops)
    in_twin = _per_rank(twin, lambda m: m.host_ops)
    ranks = list(label.ranks) if label.ranks else sorted(set(in_case) & set(in_twin))
    missing = [r for r in ranks if r not in in_case or r not in in_twin]
    if not ranks or missing:
        why = "no rank traced in the labeled steps" if not ranks else f"no trace of rank(s) {_rank_list(missing)} in the labeled steps"
        return CauseSupport(**base, checked=False, supported=True, detail=f"not checked: {why}")
    spread = _spread(twin, lambda m: m.host_ops, relative=True)
    numbers = "; ".join(f"rank {r} {in_case[r]:.0f} vs twin {in_twin[r]:.0f}" for r in ranks)
    detail = f"{kind}: {numbers}; twin spread {spread:.0%}"
    low = [r for r in ranks if in_twin[r] <= 0 or in_case[r] / in_twin[r] - 1.0 <= spread]
    if low:
        return CauseSupport(**base, checked=True, supported=False,
                            detail=f"rank(s) {_rank_list(low)}: {kind} not above the twin's: {detail}")
    return CauseSupport(**base, checked=True, supported=True, detail=detail)


def needs_check(case: Case, label: CauseLabel, *, shown: bool = False) -> str | None:
    """Why ``label`` of ``case`` is not checked here, or None when it is (see the module docstring). ``shown``: the
    check of the one recording a diagnoser is shown (:func:`shown_support`), which also checks a one-cause case's
    data wait where a DataLoader feeds the job (:func:`_shown_only`)."""
    if label.category in RANK_LOCAL:
        return None
    if label.category not in SHARE_MEASURES and label.category not in COUNT_MEASURES:
        return "no measure of this cause here"
    if len(case.labels.causes) < 2 and not (shown and _shown_only(case, label)):
        return "the case's one cause, measured by the manifestation check"
    return None


def _shown_only(case: Case, label: CauseLabel) -> bool:
    """A one-cause case's starved DataLoader, checked on the shown recording though the manifestation check measures
    the case's step time: the step time is every step's, from the step log, and a DataLoader's prefetching workers
    can have a profiled step's batch ready while the steps around it wait. Measured on a fresh CI's cache (the
    inference cases of issue 38): denoise-convnet-starved-loader's one profiled step waited 0% of the step against
    its twin's 7% while its logged steps ran 1.8x the twin's; every other one-cause DataLoader case's shown recording
    held its wait by 22 to 74 points over the twin (``python benchmarks/label_support.py HOME``). Not where the input
    is prepared inline on the main thread (the inference workload's ``input: inline``): that wait is not a data
    wait the trace marks (0% in case and twin alike), so the measure cannot see it. The count and the collective
    measures stay with the manifestation check: the count does not depend on which steps are traced, and a
    collective stall's time is the step's whole effect on every rank (a near-limit stall's shown recording held it
    by 9-12 points, inside a twin spread of about 10)."""
    return (label.category == "input.dataloader_starvation" and case.workload is not None
            and case.workload.params.get("input", "loader") != "inline")


def cause_support(label: CauseLabel, workload_steps: int, case: Sequence[RecordingSteps],
                  twin: Sequence[RecordingSteps]) -> CauseSupport:
    """One labeled cause against the case's recordings and its twin's (see the module docstring)."""
    step_range = label.steps if label.steps is not None else (0, workload_steps)
    pairs = [(c, t) for c, t in zip((rec.means(step_range) for rec in case), (rec.means(step_range) for rec in twin))
             if c and t]  # pair i: twin i, then case i (the checks compare some measures pair by pair)
    return _check_means(label, step_range, [c for c, _ in pairs], [t for _, t in pairs])


def _check_means(label: CauseLabel, step_range: tuple[int, int], case_means: list[dict[int, RankMeans]],
                 twin_means: list[dict[int, RankMeans]]) -> CauseSupport:
    """One labeled cause, with its measure, against the twin's recordings (``case_means[i]`` paired with
    ``twin_means[i]`` where a check compares pair by pair)."""
    if not case_means or not twin_means:
        return CauseSupport(category=label.category, ranks=label.ranks, measure=None, checked=False, supported=True,
                            detail=f"not checked: the traces hold none of the labeled steps [{step_range[0]}, {step_range[1]})")
    if label.category in RANK_LOCAL:
        return check_rank_local(label, case_means, twin_means)
    if label.category in COUNT_MEASURES:
        return check_count(label, COUNT_MEASURES[label.category], case_means, twin_means)
    return check_share(label, SHARE_MEASURES[label.category], case_means, twin_means)


Recordings = Sequence[Path] | Sequence[RecordingSteps]
"""Bundle folders, or their per-step summaries already read (a verify reads them once for both checks)."""


def read_recordings(recordings: Recordings) -> list[RecordingSteps]:
    """The per-step summaries of the first :data:`MAX_PAIRS` recordings (those already read kept as they are)."""
    return [r if isinstance(r, RecordingSteps) else RecordingSteps.read(r) for r in list(recordings)[:MAX_PAIRS]]


def label_support(case: Case, injected: Recordings, healthy: Recordings) -> list[CauseSupport]:
    """Every labeled cause of ``case`` checked against its recordings (``injected``) and its healthy twin's
    (``healthy``), one per repeat (the first :data:`MAX_PAIRS` of each are read)."""
    if not injected or not healthy:
        raise ValueError(f"case {case.id}: label support needs the case's and its twin's recordings "
                         f"(got {len(injected)} and {len(healthy)})")
    needed = _any_checked(case)
    case_steps = read_recordings(injected) if needed else []
    twin_steps = read_recordings(healthy) if needed else []
    steps = case.workload.steps if case.workload is not None else 0
    return _each_cause(case, lambda c: cause_support(c, steps, case_steps, twin_steps))


def shown_support(case: Case, shown: Path | RecordingSteps, twins: Recordings) -> list[CauseSupport]:
    """Every labeled cause :func:`label_support` checks, checked on the ONE recording a diagnoser is shown
    (``shown``: the case's repeat 0, the case recording of the verification's pair 0) against the twin's recordings
    (``twins``, in pair order; the first :data:`MAX_PAIRS` read), with the same measures and bars: the labeled rank's
    own time against its own pair's twin (twin 0) and against its peers in the shown recording relative to the twins',
    a share or a count against the twins' median, each beyond the twins' spread. :func:`label_support` takes the
    median over pairs, so a label holds there while the one pair the diagnoser gets may sit inside the noise.

    The causes :func:`needs_check` leaves to the manifestation check (a one-cause case's share or count cause) are
    not checked here either, but for a starved DataLoader (:func:`_shown_only`): measured on the cached corpus (85
    verified public job cases), the four such causes checking all of them would have refused were inline-input decode
    cases whose wait is on the main thread, which the data-wait share does not see (0% in case and twin alike); with
    the one-step inference profiles of issue 38 came one shown recording without its DataLoader's wait."""
    needed = _any_checked(case, shown=True)
    in_case = read_recordings([shown])[0] if needed else None  # type: ignore[list-item]
    twin_steps = read_recordings(twins) if needed else []
    steps_total = case.workload.steps if case.workload is not None else 0

    def check(c: CauseLabel) -> CauseSupport:
        step_range = c.steps if c.steps is not None else (0, steps_total)
        in_shown = in_case.means(step_range)
        return _check_means(c, step_range, [in_shown] if in_shown else [],
                            [m for m in (t.means(step_range) for t in twin_steps) if m])

    return _each_cause(case, check, shown=True)


def _any_checked(case: Case, *, shown: bool = False) -> bool:
    """Whether any labeled cause of ``case`` is checked here (:func:`needs_check`): else no trace need be read."""
    return any(needs_check(case, c, shown=shown) is None for c in case.labels.causes)


def _each_cause(case: Case, check: Callable[[CauseLabel], CauseSupport], *, shown: bool = False) -> list[CauseSupport]:
    """``check`` of every labeled cause :func:`needs_check` leaves here; the others say why they are not checked."""
    return [check(c) if (why := needs_check(case, c, shown=shown)) is None else
            CauseSupport(category=c.category, ranks=c.ranks, measure=None, checked=False, supported=True,
                         detail=f"not checked: {why}")
            for c in case.labels.causes]


CONTROL_PATTERNS = ("compute.straggler_rank",)
"""The causes whose pattern a healthy control's or confounder's shown evidence is checked for, on every rank, with the
bar a label of it must clear (:func:`check_rank_local`, the measure straggler, load imbalance and contention labels
share): the rank's own time beyond the twin's by more than the twin's spread, and beyond every other rank's in the
same recording by more than the twin's spread of that ratio. And, since a diagnoser sees the ranks and not the twin,
the rank's own time in the shown recording beyond every other rank's by more than that spread: measured at load
~12, mlp-ddp-healthy's rank 1 passed both halves (+133% over the twin, +154% over its peer against the twin's
ratio, whose twins had rank 1 at a third of rank 0) while in the recording itself it computed 14.7 ms a step to
rank 0's 16.9. The red team's control at load ~6 showed rank 0 computing 22.7 ms (of 153) longer than rank 1 on 7
of 7 steps, and a straggler claim on it was scored a false alarm.

Both halves, as for a label: each alone is a bar of about one spread (the spread is the range two recordings
would show, about 1.1 sd), which a recording exchangeable with its twins passes about one time in five per rank
(the within-recording half: 19% at three twins in a normal model of each rank's own time; both halves: 6-8% when
the noise is near the 5% floor, 2% when it is below it). The cost: on a loaded machine the half against the twin
sees little (at load ~12 on 2 cores the twin's own time moved 153% and 161% between recordings in
mlp-ddp-healthy and one-rank-late-once). The share and count measures are not checked: a confounder's benign
look-alike (a quick save, a slow but hidden loader) moves them against its twin by design.

And the excess must matter: the rank's own time beyond every other rank's by at least :data:`MATERIAL_SHARE` of its
step in the shown recording, the smallest slowdown worth naming (the rules' ``MIN_CAUSE_SHARE`` and their fleet
reasoning use the same tenth). Without it, a quiet spread let a few percent through: in a CI at load ~10,
convnet-healthy was refused for rank 0 computing 5.4 ms a step to rank 1's 4.9, and one-rank-late-once for 17.3 ms to
16.4; the red team's control (22.7 ms of a 153 ms step, 15%) stays refused.

What the median does not see: a cost on half the steps or fewer. quick-frequent-checkpoint (rank 0 saves every 2
steps, 6 of the 12 traced) was refused in two CI runs and passed in others; measured in 6 recordings (one CI's, five
fresh ones at load 1-6), each save cost rank 0 3.3-13.3 ms of own time, 12-35% of the step averaged over the traced
steps, in every one, and the check refused 1 of the 6: the median of 12 steps, half of them saves, is the midpoint of
the slowest plain step and the fastest save, and crosses the bars by chance. Not the first write (every save in the
window costs) and not the drawn step count (a 2-step period puts 6 saves in any 12-step window, and the shown
recording and its twins share the draw). The evidence holds a material save, so that case's healthy label is wrong
(its saves are dear at any storage speed tried: 5.1 and 8.3 ms a save at 4000 MB/s); the case, not this check, had to
change: it now saves every 10 steps, a few percent of the run (held its label against 3 twins after the change). A mean-based pattern (``checkpoint.blocking_save``, as its label is measured) would see it but, measured on the
21 cached controls, also refuses one-rank-late-once (one paused step dominates a 12-step mean) and
mlp-ddp-healthy-in-process-loading (+17%), whose labels are right."""

MATERIAL_SHARE = 0.10
"""A control's rank-local excess that matters: a tenth of the step (see :data:`CONTROL_PATTERNS`)."""


def control_support(case: Case, shown: Path, twins: Sequence[Path]) -> list[CauseSupport]:
    """A healthy control's or confounder's shown recording (``shown``, its bundle) against its twin's recordings
    (``twins``, the first :data:`MAX_PAIRS` read): each of :data:`CONTROL_PATTERNS` on each rank, as if labeled there.
    A supported one is a pattern the evidence shows: the case's label (healthy) does not hold. One rank: the share
    measures only (:func:`_one_rank_support`)."""
    step_range = (0, case.workload.steps if case.workload is not None else 0)
    in_shown = RecordingSteps.read(shown).means(step_range)
    twin = [m for m in (RecordingSteps.read(f).means(step_range) for f in twins[:MAX_PAIRS]) if m]
    if not in_shown or not twin:
        return []
    if len(in_shown) < 2:
        return _one_rank_support(in_shown, twin)
    out = []
    for category, rank in ((c, r) for c in CONTROL_PATTERNS for r in sorted(in_shown)):
        # the shown recording against each twin recording (its excess: the median over them); the spreads over all
        support = check_rank_local(CauseLabel(category=category, ranks=[rank]), [in_shown] * len(twin), twin)
        own = (lambda m: m.own_ms) if category in PERIODIC else (lambda m: m.own_median_ms)
        floor = MATERIAL_SHARE * in_shown[rank].step_ms
        hidden = [f"rank {rank} {own(in_shown[rank]):.1f} ms against rank {o} {own(in_shown[o]):.1f} ms (spread {spread:.0%}, "
                  f"a tenth of the step {floor:.1f} ms)"
                  for o in sorted(in_shown) if o != rank
                  for spread in [_relative_lift([in_shown], twin, own, rank, o)[1]]
                  if own(in_shown[o]) <= 0 or own(in_shown[rank]) / own(in_shown[o]) - 1.0 <= spread
                  or own(in_shown[rank]) - own(in_shown[o]) < floor]
        if support.supported and support.checked and hidden:  # a diagnoser sees the ranks, not the twin
            support = support.model_copy(update={"supported": False, "detail": f"not longer than its peers in the shown "
                                                 f"recording by more than the twin's spread and a tenth of the step: "
                                                 f"{'; '.join(hidden)}; {support.detail}"})
        out.append(support)
    return out


def _one_rank_support(in_shown: dict[int, RankMeans], twin: list[dict[int, RankMeans]]) -> list[CauseSupport]:
    """A one-rank control's shown recording: each cause measured as a share of the step (:data:`SHARE_MEASURES`) as
    if labeled, with :func:`check_share`'s bar (above the twin's share by more than its spread) and the control's (by
    at least :data:`MATERIAL_SHARE` of the step). Not the other measures: with one rank there is no peer in the
    recording, and a rank's own time against the twin alone is a stretch the diagnoser, who sees no twin, cannot see
    (and on a loaded machine the twin's own time moves by more than a straggler's); a count (host ops per step) has no
    share of the step to call material, and a launch look-alike runs its many ops by design (deep-mlp-many-ops)."""
    (rank,) = in_shown
    out = []
    for category, kind in SHARE_MEASURES.items():
        support = check_share(CauseLabel(category=category, ranks=[rank]), kind, [in_shown], twin)
        excess = in_shown[rank].share(kind) - statistics.median(t[rank].share(kind) for t in twin if rank in t)
        if support.checked and support.supported and excess < MATERIAL_SHARE:
            support = support.model_copy(update={"supported": False, "detail": f"above the twin's by less than a tenth "
                                                 f"of the step ({excess * 100:.0f} points): {support.detail}"})
        out.append(support)
    return out


def label_problems(support: Sequence[CauseSupport]) -> list[str]:
    """One line per labeled cause its evidence does not support (empty when every checked cause holds)."""
    return [f"{s.category}{f' on rank(s) {_rank_list(s.ranks)}' if s.ranks else ''}: {s.detail}"
            for s in support if s.checked and not s.supported]
