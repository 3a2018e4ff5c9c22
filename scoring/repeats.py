"""Repeats (issue 41 item 4): the same cases diagnosed K times (``diageval run --repeats K``), judged for
consistency.

Decided here:

* The cases of the repeats view are those scored in every repeat (a case whose evidence failed, or that a
  repeat has not reached yet, is left out of it; ``cases`` says how many are in).
* **Skill over repeats**: each case's tallies averaged over its repeats (its loss is the mean of its repeats'
  losses), then skill as the headline defines it, with its interval from the bootstrap over cases: the case is
  the unit resampled, so the interval says how much the corpus, not the repeats, moves the number. Skill of
  each repeat alone is listed beside it.
* **Per-case verdict**, from each repeat's verdicts (status, and every cause claim's category and verdict):

  - *stable*: every repeat has the same verdicts;
  - *catastrophic*: right in one repeat and confidently wrong in another. Right: every labeled cause found and
    no misleading claim (a healthy control: no cause claimed; an abstain case: abstained). Confidently wrong:
    some misleading claim, which scoring only gives a claim asserted at confidence >= 0.5 (a hedge is never
    wrong): the diagnoser stated a wrong answer as more likely than not;
  - *flaky*: the rest (the verdicts change, never from right to confidently wrong).

* **Consistency**: the share of the view's cases that are stable, with its Jeffreys interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from diageval.scoring.intervals import jeffreys
from diageval.scoring.metrics import METRICS, MetricValue, Resampled
from diageval.scoring.results import MISLEADING_VERDICTS, CaseResult
from diageval.scoring.tallies import TallyTable, tally_table

RepeatVerdict = Literal["stable", "flaky", "catastrophic"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CaseRepeats(_Model):
    verdict: RepeatVerdict
    right: int = Field(description="Repeats that were right on the case")
    wrong: int = Field(description="Repeats that were confidently wrong (a misleading claim at confidence >= 0.5)")
    statuses: list[str] = Field(description="Each repeat's status, in repeat order")


class RepeatsSummary(_Model):
    repeats: int = Field(description="K: how many times each case was diagnosed")
    cases: int = Field(description="Cases scored in every repeat (the view's cases)")
    skill: MetricValue = Field(description="Skill with each case's events averaged over its repeats; the interval "
                                           "from the bootstrap over cases")
    skill_per_repeat: list[float | None] = Field(description="Skill of each repeat alone, over the view's cases")
    stable: int
    flaky: int
    catastrophic: int
    consistency: MetricValue = Field(description="Stable cases / cases, with its Jeffreys interval")
    by_case: dict[str, CaseRepeats]


def _signature(r: CaseResult) -> tuple:
    return (r.status, r.abstained, tuple(sorted((v.category, v.verdict) for v in r.verdicts)))


def right(r: CaseResult) -> bool:
    """Right on the case: every labeled cause found and nothing misleading (a control: no claim; abstain: abstained)."""
    if any(v.verdict in MISLEADING_VERDICTS for v in r.verdicts):
        return False
    if r.expect == "abstain":
        return r.abstained
    return all(o.outcome == "found" for o in r.outcomes)


def confidently_wrong(r: CaseResult) -> bool:
    return any(v.verdict in MISLEADING_VERDICTS for v in r.verdicts)


def case_verdict(results: Sequence[CaseResult]) -> CaseRepeats:
    rights, wrongs = sum(map(right, results)), sum(map(confidently_wrong, results))
    if len({_signature(r) for r in results}) == 1:
        verdict: RepeatVerdict = "stable"
    elif rights and wrongs:
        verdict = "catastrophic"
    else:
        verdict = "flaky"
    return CaseRepeats(verdict=verdict, right=rights, wrong=wrongs, statuses=[r.status for r in results])


def summarize_repeats(repeats: Sequence[Sequence[CaseResult]], *, n_boot: int = 1000, seed: int = 0) -> RepeatsSummary:
    """The repeats view of K repeats' results (the first is the run's own ``results.jsonl``)."""
    by_repeat = [{r.case_id: r for r in results if r.scored} for results in repeats]
    common = sorted(set.intersection(*(set(d) for d in by_repeat))) if by_repeat else []
    k = len(repeats)
    tables = _tables([[d[c] for c in common] for d in by_repeat])
    skill_spec = {"skill": METRICS["skill"]}
    per_repeat = [Resampled(t, 0, seed).metrics(skill_spec)["skill"].value for t in tables]
    mean = TallyTable(common, tables[0].columns, np.mean([t.values for t in tables], axis=0)) if tables else None
    skill = (Resampled(mean, n_boot, seed).metrics(skill_spec)["skill"] if mean is not None and len(mean)
             else MetricValue(value=None, ci=None, n=0))
    by_case = {c: case_verdict([d[c] for d in by_repeat]) for c in common}
    stable = sum(v.verdict == "stable" for v in by_case.values())
    if common:
        lo, hi = jeffreys(float(stable), float(len(common)))[0]
        consistency = MetricValue(value=stable / len(common), ci=(float(lo), float(hi)), n=len(common))
    else:
        consistency = MetricValue(value=None, ci=None, n=0)
    return RepeatsSummary(
        repeats=k, cases=len(common), skill=skill, skill_per_repeat=per_repeat, stable=stable,
        flaky=sum(v.verdict == "flaky" for v in by_case.values()),
        catastrophic=sum(v.verdict == "catastrophic" for v in by_case.values()),
        consistency=consistency, by_case=by_case)


def _tables(repeats: list[list[CaseResult]]) -> list[TallyTable]:
    """One tally table per repeat over the same cases and the same columns (one table of every repeat's results,
    cut back into repeats: a cause family claimed in one repeat only gets its column in all)."""
    if not repeats or not repeats[0]:
        return []
    tagged = [r.model_copy(update={"case_id": f"{r.case_id}\t{i:04d}"}) for i, rs in enumerate(repeats) for r in rs]
    whole = tally_table(tagged)
    out = []
    for i in range(len(repeats)):
        rows = np.array([cid.endswith(f"\t{i:04d}") for cid in whole.case_ids])
        part = whole.subset(rows)
        out.append(TallyTable([c.split("\t")[0] for c in part.case_ids], part.columns, part.values))
    return out
