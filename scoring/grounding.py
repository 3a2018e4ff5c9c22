"""Grounded claims (issue 41 item 5): a found cause is *grounded* when the evidence its claim cites overlaps
where the fault acted.

A finding may cite its evidence (:class:`~diageval.diagnosis.Citation`: ranks, a step range, op or kernel
names). Where the fault acted, per dimension, from the case alone (labels never reach a diagnoser; this is
scoring):

* ranks: the label's ranks, out of the job's ``world_size`` ranks;
* steps: the label's step range, out of the steps the evidence spans: ``[0, workload steps)`` for an injected
  job, else ``[0, the furthest stop the label or the citation names)``;
* ops: the op or kernel names the injected fault acts through (the fault registry's ``ops``, e.g.
  ``aten::item`` for a ``.item()`` sync); faults that slow what is there (a slower rank) add no op. On a recorded
  case (a real job's traces), the names its figures measured (:func:`figure_ops`, below).

The figures of a recorded case (``recorded.measured``: the lines ``diageval trace stats`` prints for its files,
quoted in the case file, from which its labels were read) name where the fault acted when a line measured a
named set of calls or ops, it measures the labeled cause's mechanism, and it measured time the device lost:

* the lines and the names they measure (:data:`FIGURE_NAMES`): ``blocking: sync`` the synchronize calls,
  ``blocking: sync_copy`` the synchronous copies, ``blocking: pageable_copy`` the async copy calls and the copies
  whose host side is pageable (Kineto names them ``... Pageable ...``), ``blocking: free`` cudaFree/hipFree and
  the like, ``DataLoader wait`` the loop's ``enumerate(DataLoader)...__next__``; the names are the trace readers'
  own (``diageval.bundle.kineto``), so a figure and the op a diagnoser cites are named alike;
* the cause each line measures (:data:`CAUSE_FIGURES`): host/device sync the three blocking lines, allocator churn
  ``blocking: free``, a starved loader ``DataLoader wait``. Other lines (launches per step, allocations per step,
  device time by kernel class, host threads) count every launch, allocation or kernel of the job, healthy or
  not, or name no op: they say how much, not where, and ground nothing;
* a line's time (the device idle during the blocking calls; the wait) is over zero and at least half of the
  largest among the cause's lines of that file: a case quotes lines to rule causes out too (``DataLoader wait:
  0.0 us``), and a line beside one many times larger (15 syncs idling the device 107 us beside pageable copies
  idling it 93 ms a step) is not where the fault acted, so citing its calls grounds nothing;
* only the figures of the files of the label's ranks (every file when the label names no rank).

The ``steps`` line lists the steps the figures were measured over: every profiled step of the trace, so a step
citation inside it is the blind citation the half rule below refuses; a recorded case's steps are judged only
where its label gives a range.

A label *localises* the fault in ranks or steps only when what it labels is at most half of that dimension
(``2 |L| <= |U|``). Beyond that a blind citation lands in the fault more often than not: a fault from step 5
to the end of a 30-step run holds 25 of 30 steps, and a diagnoser that always cites the last step would hit
it every time without looking. Such a dimension is not judged (most of the corpus' step labels run from the
fault's onset to the end: time rarely localises them; ranks do).

A cited dimension *overlaps* the label's when both hold:

1. at least half of what it cites is where the fault acted (``|C ∩ L| >= |C| / 2``): most of what it points at
   shows the fault;
2. for ranks and steps, its share of hits beats the base rate (``|C ∩ L| / |C| > |L| / |U|``): citing ranks or
   steps at random, or all of them, hits at the base rate on average, so a citation that does no better says
   nothing about where the fault is. Citing every rank, or every step, is never grounded (its share is exactly
   the base rate). Ops have no known universe; rule 1 alone bounds them (citing every op name of a trace puts
   the fault's op among hundreds: far under half).

A cited op overlaps when its name holds one of the fault's op names (``aten::item`` in ``aten::item``; a cited
``aten`` holds none).

A found cause is grounded when its credited claim cites at least one dimension the label localises and every
such dimension it cites overlaps (a citation that points at the right rank and the wrong steps is not grounded).
Dimensions the label does not localise are not judged (citing them neither helps nor hurts). A labeled cause whose label localises no dimension cannot
be judged: ``grounded`` is None for it and grounded recall leaves it out; otherwise ``grounded`` is False for a
missed cause and for a found one whose claim cites nothing or cites off the mark.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from diageval.bundle import kineto as K
from diageval.cases.load import fault_ops
from diageval.diagnosis import Citation

if TYPE_CHECKING:
    from diageval.cases.model import Case, CauseLabel

FIGURE_NAMES: dict[str, tuple[str, ...]] = {
    "blocking: sync": tuple(sorted(K.SYNC_NAMES)),
    "blocking: sync_copy": tuple(sorted(K.SYNC_COPY_NAMES)),
    "blocking: pageable_copy": (*sorted(K.ASYNC_COPY_NAMES), K.PAGEABLE_MARK),
    "blocking: free": tuple(sorted(K.FREE_NAMES)),
    "DataLoader wait": (K.DATALOADER_NEXT_PREFIX,),
}
"""``diageval trace stats`` lines that measure named calls or ops -> those names (module docstring)."""

CAUSE_FIGURES: dict[str, tuple[str, ...]] = {
    "host.device_sync": ("blocking: sync", "blocking: sync_copy", "blocking: pageable_copy"),
    "memory.allocator_churn": ("blocking: free",),
    "input.dataloader_starvation": ("DataLoader wait",),
}
"""Cause -> the lines of :data:`FIGURE_NAMES` that measure its mechanism."""

_TIME = re.compile(r"([0-9.]+) (ms|us)")


def _figure_us(line: str, value: str) -> float:
    """The time a line measured, in us: the device idle during a blocking line's calls, else the line's first time."""
    idle = re.compile(r"device idle meanwhile " + _TIME.pattern)
    found = (idle if line.startswith("blocking:") else _TIME).search(value)
    if found is None:
        return 0.0
    return float(found.group(1)) * (1e3 if found.group(2) == "ms" else 1.0)


def figure_ops(case: "Case", label: "CauseLabel") -> tuple[str, ...]:
    """The call and op names a recorded case's figures measured where ``label``'s cause acted (module docstring);
    () for a case without figures or a cause no figure measures."""
    lines = CAUSE_FIGURES.get(label.category, ())
    recorded = [case.recorded] + [r.recorded for r in (case.fleet.runs if case.fleet is not None else [])]
    out: list[str] = []
    for rec in (r for r in recorded if r is not None and lines):
        rank_of = {f.path: f.rank for f in rec.files}
        for measured in rec.measured.figures:
            if label.ranks is not None and rank_of.get(measured.file) not in label.ranks:
                continue
            times = {line: _figure_us(line, measured.figures[line]) for line in lines if line in measured.figures}
            top = max(times.values(), default=0.0)
            out += [name for line, us in times.items() if us > 0 and 2 * us >= top for name in FIGURE_NAMES[line]]
    return tuple(dict.fromkeys(out))


def _ops(case: "Case", label: "CauseLabel") -> tuple[str, ...]:
    return tuple(dict.fromkeys(fault_ops(case) + figure_ops(case, label)))


def localised(case: "Case", label: "CauseLabel") -> bool:
    """Whether the label localises the fault in some dimension grounding judges (ranks, steps, ops)."""
    return _rank_universe_shrinks(case, label) or _steps_localised(case, label) or bool(_ops(case, label))


def _rank_universe_shrinks(case: "Case", label: "CauseLabel") -> bool:
    return label.ranks is not None and 2 * len(set(label.ranks)) <= case.world_size


def _step_universe(case: "Case", label: "CauseLabel", cited_stop: int = 0) -> int:
    known = case.workload.steps if case.workload is not None else 0
    return max(known, label.steps[1] if label.steps is not None else 0, cited_stop)


def _steps_localised(case: "Case", label: "CauseLabel") -> bool:
    return label.steps is not None and 2 * (label.steps[1] - label.steps[0]) <= _step_universe(case, label)


def _overlaps(hits: int, cited: int, labeled: int | None, universe: int | None) -> bool:
    """Rules 1 and 2 of the module docstring (rule 2 only where the universe is known)."""
    if cited == 0 or 2 * hits < cited:
        return False
    if labeled is None or universe is None or universe <= 0:
        return True
    return hits * universe > labeled * cited


def grounded(case: "Case", label: "CauseLabel", cites: Citation | None) -> bool | None:
    """Whether a claim citing ``cites`` grounds the found cause ``label`` (None: the label localises nothing)."""
    if not localised(case, label):
        return None
    if cites is None:
        return False
    judged = []
    if cites.ranks and _rank_universe_shrinks(case, label):
        cited, labeled = set(cites.ranks), set(label.ranks or ())
        judged.append(_overlaps(len(cited & labeled), len(cited), len(labeled), max(case.world_size, max(cited) + 1)))
    if cites.steps is not None and label.steps is not None and _steps_localised(case, label):
        (a, b), (la, lb) = cites.steps, label.steps
        hits = max(0, min(b, lb) - max(a, la))
        judged.append(_overlaps(hits, b - a, lb - la, _step_universe(case, label, b)))
    ops = _ops(case, label)
    if cites.ops and ops:
        names = [name.lower() for name in dict.fromkeys(cites.ops)]
        hits = sum(any(op.lower() in name for op in ops) for name in names)
        judged.append(_overlaps(hits, len(names), None, None))
    return bool(judged) and all(judged)
