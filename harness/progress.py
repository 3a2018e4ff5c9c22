"""Progress of ``record``, ``verify`` and ``run``: a live bar on a terminal, plain lines elsewhere.

On a terminal (the stream is a TTY, as rich decides it: ``TERM=dumb`` and ``NO_COLOR`` still get a bar,
``TTY_COMPATIBLE=0`` gets lines) each phase (``record``, ``verify``, ``evidence``, ``diagnose``) has one
bar with the count done, the rate (items per second, or seconds per item when slower than one a
second), the time elapsed and the time left, and the item in progress; notes print above the bars.
Anywhere else (a CI log, a pipe, a file) every event is the one plain line it always was, so logs stay
greppable and diffable: ``[3/16] case-id`` when an item begins, ``evidence [ 3/16] case-id  ready  6.52 s``
when a run's case ends, ``diagnose [ 3/16] ok 2, abstained 1  6.52 s`` (:meth:`Progress.tally`: counts only)
when a diagnosis ends, so that nothing written while a box is alive names the case it holds.

Every line and bar text goes through :func:`diageval.inert.inert`: a status or an error may carry a
diagnoser's words, and a terminal must not act on their control sequences.

Decided here: the time left is rich's estimate from the recent rate (its speed window), which on a
corpus of uneven cases swings; it is a hint, the count is the fact. Sub-steps of an item (verify's
"twin 2/3") replace the item's text on a terminal instead of scrolling.
"""

from __future__ import annotations

import sys
import threading
from typing import Literal, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import (
    Progress as RichProgress,
)
from rich.text import Text

from diageval.inert import inert

Stream = TextIO | Literal["stderr"] | None


class _RateColumn(ProgressColumn):
    """Items per second, or seconds per item when slower than one a second (recordings take seconds)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if not speed:
            return Text("–/s", style="progress.data.speed")
        text = f"{speed:.1f}/s" if speed >= 1 else f"{1 / speed:.1f} s/item"
        return Text(text, style="progress.data.speed")


class Progress:
    """Counts items per phase. ``stream``: where to write (``"stderr"`` = whatever ``sys.stderr`` is at
    each write, None = silent). ``live``: force the bar on or off (default: on when the stream is a
    terminal). Use as a context manager, or call :meth:`close`, so a live bar is taken down."""

    def __init__(self, stream: Stream = "stderr", *, live: bool | None = None):
        self.stream = stream
        self._lock = threading.Lock()
        self._bar: RichProgress | None = None
        self._tasks: dict[str, TaskID] = {}
        if stream is None:
            return
        console = Console(file=self._file(), stderr=stream == "stderr")
        if live if live is not None else console.is_terminal:
            self._bar = RichProgress(
                TextColumn("{task.fields[phase]:>8}"),
                BarColumn(),
                MofNCompleteColumn(),
                _RateColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=console,
                redirect_stdout=False,
                redirect_stderr=False,
            )

    def _file(self) -> TextIO:
        return sys.stderr if self.stream == "stderr" else self.stream  # type: ignore[return-value]

    @property
    def live(self) -> bool:
        return self._bar is not None

    # --- events -----------------------------------------------------------------------------------

    def line(self, text: str) -> None:
        """A note that stays: above the bars on a terminal, a line elsewhere."""
        if self.stream is None:
            return
        text = inert(text)
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(text, markup=False, highlight=False)
            else:
                print(text, file=self._file(), flush=True)

    def __call__(self, text: str) -> None:
        """A passing status (a sub-step of the item in progress): the bar's text on a terminal, a line elsewhere.
        Makes a Progress usable wherever a ``Callable[[str], None]`` progress is expected."""
        if self._bar is not None and self._tasks:
            with self._lock:
                self._bar.update(list(self._tasks.values())[-1], description=inert(text, newlines=False))
        else:
            self.line(text)

    def started(self, phase: str, i: int, total: int, text: str) -> None:
        """Item ``i`` of ``total`` (from 1) begins; plain: ``[i/total] text``."""
        if self._bar is None:
            self.line(f"[{i}/{total}] {text}")
            return
        with self._lock:
            self._bar.update(self._task(phase, total), total=total, description=inert(text, newlines=False))

    def advance(self, phase: str) -> None:
        """One item of ``phase`` is done (plain: nothing; :meth:`started` printed its line)."""
        if self._bar is not None:
            with self._lock:
                self._bar.advance(self._task(phase, None))

    def step(self, phase: str, i: int, total: int, item: str, status: str, seconds: float | None) -> None:
        """Item ``i`` of ``total`` has ended with ``status``; plain: one line with phase, count, item, status, time."""
        secs = f"{seconds:7.2f} s" if seconds is not None else ""
        self._ended(phase, i, total, f"{item:<40} {status:<15} {secs}", f"{item}: {status}")

    def tally(self, phase: str, i: int, total: int, counts: dict[str, int], seconds: float | None) -> None:
        """Item ``i`` of ``total`` has ended; plain: one line with phase, count, how many ended with each
        status so far and the item's time. Names no item: while other items are still going (a run's
        diagnoses, each in its box), a line read through a pipe or a log must not say which item is which."""
        so_far = ", ".join(f"{status} {n}" for status, n in sorted(counts.items()))
        secs = f"  {seconds:7.2f} s" if seconds is not None else ""
        self._ended(phase, i, total, f"{so_far}{secs}", so_far)

    def _ended(self, phase: str, i: int, total: int, plain: str, described: str) -> None:
        """Item ``i`` of ``total`` has ended: plain, one line ``phase [i/total] plain``; on a bar, ``described``."""
        if self._bar is None:
            width = len(str(total))
            self.line(f"{phase:>8} [{i:>{width}}/{total}] {plain}")
            return
        with self._lock:
            self._bar.update(self._task(phase, total), total=total, completed=i,
                             description=inert(described, newlines=False))

    def _task(self, phase: str, total: int | None) -> TaskID:
        assert self._bar is not None
        if phase not in self._tasks:
            if not self._tasks:
                self._bar.start()  # the live display (and its refresh thread) only once there is something to count
            self._tasks[phase] = self._bar.add_task("", total=total, phase=phase)
        return self._tasks[phase]

    # --- life -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Take the live bars down (they stay printed as they ended); idempotent."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
