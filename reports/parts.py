"""The per-part view of a board: each diagnoser's skill over each part of the corpus, and where a part orders
the diagnosers otherwise than the pooled board.

A pooled leaderboard can rank first a diagnoser that is worse on whole subsystems (its lead elsewhere
outweighs them), so the board shows the parts apart. The parts, each read off the summaries:

* evidence kind: ``injected`` (reproduced and verified here) and ``recorded`` (real jobs' traces), when
  the runs hold both (``Summary.by_evidence``: the full metric set over those cases, against their own
  base rates);
* cause family: ``comm``, ``compute``, ... (``Summary.by_family``: skill over the events of the family's
  causes on every case, against the family's base rates);
* split: a case's ``split:`` (``Summary.by_split``), when some case names one; the gap between splits is
  :func:`split_rows`' business;
* device family of the evidence: ``cpu``, ``nvidia``, ``amd``, ... (``Summary.by_device``), when the runs
  hold more than one;
* case kind: ``job``, ``regression``, ``fleet`` (``Summary.by_kind``), when the runs hold more than one: where
  in a fleet is judged on the regression and fleet cases;
* a part tag: ``defect`` (cases whose evidence is present but wrong, ``Summary.by_tag``), when some case has it.

A part of fewer than :data:`SMALL_PART` cases is *small* (``Part.small``): its skill is against its own base
rates, and a cause labeled on one of its n cases adds 1 − 1/n to the reference, so the reference shrinks as
(n − 1) / n and the same answers read on another scale than the board's; renderers mark it.

Decided here (the design is silent):

* The order a part is compared with is the board's (:func:`~diageval.reports.leaderboard.rank_key`, over
  the ranked runs: self-tests and runs without a sandbox are shown, never ordered). A pair is *inverted* in a part when the board
  puts A above B and the part's skill puts B strictly above A (point values; a part where either is
  undefined says nothing about the pair). The inversions are point facts: each cell keeps its interval,
  and a swap between two cells whose intervals overlap widely is noise a reader can see.
* Rows are in the board's order; columns are evidence kinds, then families (sorted), then splits, then
  device families, then case kinds, then part tags.
"""

from __future__ import annotations

from dataclasses import dataclass

from diageval.scoring.metrics import MetricValue
from diageval.scoring.summary import Summary

EVIDENCE_KINDS = ("injected", "recorded")
CASE_KINDS = ("job", "regression", "fleet")
SMALL_PART = 8
"""A part of fewer cases is marked: its reference is on another scale than the board's (module docstring)."""


@dataclass(frozen=True)
class Part:
    kind: str  # "evidence", "family", "split", "device", "kind" or "tag"
    name: str
    size: str  # what the part holds, as a reader reads it ("96 cases", "17 labeled")
    cells: list[MetricValue | None]  # per summary, in the order given; None: the run has no such part
    inversions: list[tuple[int, int]]  # (i, j): the board puts summary i above j, this part j above i
    cases: int | None = None  # the part's cases (None for a family part: it holds every case)

    @property
    def label(self) -> str:
        return {"evidence": self.name, "family": f"{self.name}.*", "split": f"split {self.name}",
                "device": f"on {self.name}", "kind": f"{self.name} cases", "tag": f"{self.name} cases"}[self.kind]

    @property
    def small(self) -> bool:
        """Fewer than :data:`SMALL_PART` cases: a skill on another scale than the board's."""
        return self.cases is not None and self.cases < SMALL_PART


def _subsets(s: Summary, kind: str) -> dict:
    return {"evidence": s.by_evidence, "split": s.by_split, "device": s.by_device, "kind": s.by_kind, "tag": s.by_tag}[kind]


def _skill(s: Summary, kind: str, name: str) -> MetricValue | None:
    if kind == "family":
        fam = s.by_family.get(name)
        return None if fam is None else fam.skill
    sub = _subsets(s, kind).get(name)
    return None if sub is None else sub.metrics.skill


def _cases(summaries: list[Summary], kind: str, name: str) -> int | None:
    if kind == "family":
        return None
    return next((_subsets(s, kind)[name].cases for s in summaries if name in _subsets(s, kind)), None)


def _size(summaries: list[Summary], kind: str, name: str) -> str:
    if kind == "family":
        return next((f"{s.by_family[name].labeled} labeled" for s in summaries if name in s.by_family), "")
    cases = _cases(summaries, kind, name)
    return "" if cases is None else f"{cases} cases"


def inversions(values: list[float | None], ranked: list[int]) -> list[tuple[int, int]]:
    """Pairs (i, j) of ``ranked`` (indices in board order) with i above j on the board and values[j] > values[i]."""
    out = []
    for a, i in enumerate(ranked):
        for j in ranked[a + 1:]:
            vi, vj = values[i], values[j]
            if vi is not None and vj is not None and vj > vi:
                out.append((i, j))
    return out


def parts(summaries: list[Summary], ranked_runs: list[bool]) -> list[Part]:
    """Every part of the runs' corpus (module docstring); ``summaries`` in the board's order, ``ranked_runs``
    whether each takes a rank (:func:`~diageval.reports.leaderboard.is_ranked`)."""
    ranked = [i for i, on in enumerate(ranked_runs) if on]
    names: list[tuple[str, str]] = []
    kinds = [k for k in EVIDENCE_KINDS if any(k in s.by_evidence for s in summaries)]
    if len(kinds) > 1:
        names += [("evidence", k) for k in kinds]
    names += [("family", f) for f in sorted({f for s in summaries for f in s.by_family})]
    names += [("split", p) for p in sorted({p for s in summaries for p in s.by_split})]
    devices = sorted({d for s in summaries for d in s.by_device})
    if len(devices) > 1:
        names += [("device", d) for d in devices]
    case_kinds = [k for k in CASE_KINDS if any(k in s.by_kind for s in summaries)]
    if len(case_kinds) > 1:
        names += [("kind", k) for k in case_kinds]
    names += [("tag", t) for t in sorted({t for s in summaries for t in s.by_tag})]
    out = []
    for kind, name in names:
        cells = [_skill(s, kind, name) for s in summaries]
        values = [None if c is None else c.value for c in cells]
        out.append(Part(kind=kind, name=name, size=_size(summaries, kind, name), cells=cells,
                        inversions=inversions(values, ranked), cases=_cases(summaries, kind, name)))
    return out


@dataclass(frozen=True)
class SplitRow:
    splits: list[MetricValue | None]  # skill per split, in ``split_names`` order
    gaps: list[MetricValue | None]    # per gap column


def split_columns(summaries: list[Summary]) -> tuple[list[str], list[str]]:
    """The splits of the runs, and the gap columns: with two splits one gap (first − second), with more one
    per split (that split − the others)."""
    names = sorted({p for s in summaries for p in s.by_split})
    if len(names) < 2:
        return names, []
    return names, names[:1] if len(names) == 2 else names


def split_rows(summaries: list[Summary]) -> list[SplitRow]:
    names, gaps = split_columns(summaries)
    return [SplitRow(splits=[s.by_split[n].metrics.skill if n in s.by_split else None for n in names],
                     gaps=[s.split_gaps.get(g) for g in gaps]) for s in summaries]


def gap_label(names: list[str], split: str) -> str:
    if len(names) == 2:
        other = names[1] if split == names[0] else names[0]
        return f"{split} − {other}"
    return f"{split} − the rest"
