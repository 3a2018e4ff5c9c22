"""Grounded claims (issue 41 item 5): a found cause is *grounded* when the evidence its claim cites overlaps
where the fault acted.

A finding may cite its evidence (:class:`~diageval.diagnosis.Citation`: ranks, a step range, op or kernel
names). Where the fault acted, per dimension, from the case alone (labels never reach a diagnoser; this is
scoring):

* ranks: the label's ranks, out of the job's ``world_size`` ranks;
* steps: the label's step range, out of the steps the evidence spans: ``[0, workload steps)`` for an injected
  job, else ``[0, the furthest stop the label or the citation names)``;
* ops: the op or kernel names the injected fault acts through (the fault registry's ``ops``, e.g.
  ``aten::item`` for a ``.item()`` sync); faults that slow what is there (a slower rank) add no op.

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

from typing import TYPE_CHECKING

from diageval.cases.load import fault_ops
from diageval.diagnosis import Citation

if TYPE_CHECKING:
    from diageval.cases.model import Case, CauseLabel


def localised(case: "Case", label: "CauseLabel") -> bool:
    """Whether the label localises the fault in some dimension grounding judges (ranks, steps, ops)."""
    return _rank_universe_shrinks(case, label) or _steps_localised(case, label) or bool(fault_ops(case))


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
    ops = fault_ops(case)
    if cites.ops and ops:
        names = [name.lower() for name in dict.fromkeys(cites.ops)]
        hits = sum(any(op.lower() in name for op in ops) for name in names)
        judged.append(_overlaps(hits, len(names), None, None))
    return bool(judged) and all(judged)
