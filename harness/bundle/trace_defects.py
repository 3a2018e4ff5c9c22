"""What a trace itself says is inconsistent about it: evidence that is present but wrong (issue 40).

An observer of the readers' one pass (:class:`DefectObserver`, fed ``TimedWindow``s like ``rules``' work collector
and ``trace stats``' collector), so recognising these costs no read of its own. Each finding follows from what the
trace holds, never from a case:

* **Several processes' steps in one file.** The training loop of one rank runs in one process, so its
  ``ProfilerStep#N`` markers (the host's: ``user_annotation``; the device's copy sits on the GPU's pid) carry one
  ``pid``. Markers under two or more pids are several ranks' traces merged
  into one file (TraceLens #577): per-step shares mix ranks, and the file stands for more than its rank.
* **Steps recorded twice.** One process runs step N once. The same ``ProfilerStep#N`` twice on one pid is a
  restarted profiler that wrote its events again (or a file appended twice): every count in the step doubles.
* **Events stamped at zero.** Steps of one process follow each other, so two different ``ProfilerStep#N`` of one
  pid never start at the same instant: two that do (in practice at ``ts`` 0) were stamped by a writer that lost
  their times (pytorch #188481). Where no step marker was hit: a timed event at ``ts`` exactly 0 is the trace's
  origin, and a trace can hold a few that really start there (a stack of nested ops opening together, or
  a tool's trace rebased to start at 0), but the rest of the recording then goes on from there. Two or more at 0
  that end before the first event stamped after 0 begins, by a gap longer than everything after it spans (Kineto
  stamps relative to a base months back: the gap is months, the recording seconds), cannot be the same
  recording's start: they lost their times too.

* **Device clock behind the host's** (:func:`clock_disagreement`, on the measured steps): a device event
  cannot start before the runtime call that launched it (``launch -> kernel`` by ``correlation``). A step where
  the 10th percentile of launch-to-start delay is negative had a tenth of its device work start before it was
  launched: the host's and the device's clocks disagree (CUPTI's conversion to the host clock off), and
  device time cannot be placed against host time. None of the 26 real traces in ``../shared/real-traces`` has
  such a step (their lowest step p10 is 0.0 us). A device clock *ahead* of the host's only lengthens the
  delays: causality does not show it.

What it cannot see: flow events (``ph`` s/f) and the file's header are not fed to observers; a missing
``distributedInfo`` is already ``rank``/``world_size`` None in the readers' summaries, and a cut gzip is their
``truncated``.
"""

from __future__ import annotations

from itertools import compress
from typing import Any

import numpy as np

from diageval.bundle.kineto import STEP_MARKER_CATEGORIES, profiler_step_number

MIN_ZEROED = 2  # one event at the origin can be genuine; two that end before the rest begins cannot both be


class DefectObserver:
    """Sees every timed event once (``add_window``); :meth:`findings` says what is inconsistent."""

    def __init__(self) -> None:
        self.timed = 0
        self.zeroed = 0
        self.zeroed_end = 0.0  # the latest end of an event stamped 0
        self.first_after_zero: float | None = None  # the earliest start of an event stamped after 0
        self.last_end = 0.0  # the latest end of an event stamped after 0
        self.step_pids: dict[str, set[int]] = {}  # pid -> ProfilerStep numbers seen
        self.repeated: dict[str, int] = {}  # pid -> markers seen a second time
        self.step_starts: dict[tuple[str, float], int] = {}  # (pid, ts) -> the first step number starting there
        self.same_start: list[tuple[int, int, float]] = []  # (step, other step, ts): two steps of a pid at one instant
        self._names: Any = None  # the Names whose ids _numbers and _is_step describe
        self._numbers: list[int | None] = []
        self._is_step = np.zeros(0, dtype=bool)

    def add_window(self, window: Any) -> None:
        """``window``: a ``trace_stats.TimedWindow`` (not imported: ``trace_stats`` feeds this observer too)."""
        if not len(window):
            return
        self.timed += len(window)
        first, last = window.span()
        if first > 0.0:  # the common window: nothing at 0, every timed start after it (a NaN start is neither)
            self.last_end = max(self.last_end, last)
            self.first_after_zero = first if self.first_after_zero is None else min(self.first_after_zero, first)
        else:
            self._around_zero(window)
        numbers = self._step_numbers(window.names)
        ids = window.ids
        is_step = self._is_step[ids]
        if not np.count_nonzero(is_step):
            return
        for i, ev in zip(ids[is_step].tolist(), compress(window.events, is_step.tolist())):
            number = numbers[i]
            pid = str(ev.pid)
            seen = self.step_pids.setdefault(pid, set())
            if number in seen:
                self.repeated[pid] = self.repeated.get(pid, 0) + 1
            seen.add(number)
            other = self.step_starts.setdefault((pid, float(ev.ts)), number)
            if other != number and len(self.same_start) < 1000:
                self.same_start.append((other, number, float(ev.ts)))

    def _around_zero(self, window: Any) -> None:
        """The times of a window that starts at or before 0: its events at 0, and those after it."""
        ts = window.ts
        at_zero = ts == 0.0
        n_zero = int(at_zero.sum())
        if n_zero:
            self.zeroed += n_zero
            self.zeroed_end = max(self.zeroed_end, float(window.ends()[at_zero].max()))
        after = ts > 0.0
        later = ts[after]
        if later.size:
            self.last_end = max(self.last_end, float(window.ends()[after].max()))
            first = float(later.min())
            self.first_after_zero = first if self.first_after_zero is None else min(self.first_after_zero, first)

    def _step_numbers(self, names: Any) -> list[int | None]:
        """Per (category, name) id of ``names`` (a ``trace_stats.Names``): its ProfilerStep number when the pair is a
        host step marker, else None (the device's copy of a marker, gpu_user_annotation on the GPU's pid, is no
        step); ``self._is_step`` the same as a mask. Decided once per id, so that a window's other events cost no
        Python."""
        if names is not self._names:  # a fresh Names (a new read, or past its limit): its ids start again at 0
            self._names, self._numbers, self._is_step = names, [], np.zeros(0, dtype=bool)
        keys = names.keys
        if len(self._numbers) < len(keys):
            new = [profiler_step_number(name) if cat in STEP_MARKER_CATEGORIES and isinstance(name, str) else None
                   for cat, name in keys[len(self._numbers):]]
            self._numbers += new
            self._is_step = np.concatenate([self._is_step, np.array([n is not None for n in new], dtype=bool)])
        return self._numbers

    def findings(self) -> list[str]:
        """What the trace says is wrong with it, one sentence each; empty when nothing is."""
        out = []
        pids = sorted(p for p, s in self.step_pids.items() if s)
        if len(pids) > 1:
            out.append(f"ProfilerStep markers from {len(pids)} processes (pids {', '.join(pids[:8])}) in one file:"
                       " several ranks' traces merged, so per-step figures mix ranks")
        repeated = sum(self.repeated.values())
        if repeated:
            out.append(f"{repeated} ProfilerStep markers recorded twice by the same process: events duplicated"
                       " (a restarted profiler), so counts and times inside those steps are doubled")
        if self.same_start:
            a, b, ts = self.same_start[0]
            out.append(f"{len(self.same_start)} ProfilerStep markers start at the same instant as another step of"
                       f" their process (#{a} and #{b} at ts {ts:g}): their times were lost, so steps cannot be placed")
        elif (self.zeroed >= MIN_ZEROED and self.first_after_zero is not None
                and self.first_after_zero - self.zeroed_end > self.last_end - self.first_after_zero):
            out.append(f"{self.zeroed} of {self.timed} timed events stamped ts 0, long before the rest of the"
                       " recording begins: their times were lost, so where they ran is unknown")
        return out


def clock_disagreement(steps: list[Any]) -> str | None:
    """What is wrong when the device's clock runs behind the host's, from steps' ``launch_delay_p10_us``
    (``trace_stats.StepStats``; None entries and steps without launches skipped); None when nothing is."""
    p10 = [s.launch_delay_p10_us for s in steps if s is not None and s.launch_delay_p10_us is not None]
    early = [d for d in p10 if d < 0.0]
    if not early:
        return None
    return (f"in {len(early)} of {len(p10)} steps a tenth of the device events start before the call that launched "
            f"them (by up to {-min(early):.0f} us): the device's clock disagrees with the host's, so device time"
            " cannot be placed against host time")


__all__ = ["DefectObserver", "MIN_ZEROED", "clock_disagreement"]
