"""The board's sanity gate (``.ci/check_board``): what the reference diagnosers must score, whatever the
diagnosers under test do. A failure means the board itself is wrong (scoring, labels or bundles).

Skill is measured against climatology (docs/scoring.md), so its reference points have closed forms that
follow from the labels alone, and the gate checks each against what the run folders hold. The counts are
taken by a plain loop over the case files the null run was made from (its scored cases): N cases, n_k
labeled k, A expecting abstention, L values labeled aliased, per factor name f the values F_f a label blames
among the M_f the cases could blame, per (cause k, rank position r) the cases P_kr whose labels of k name r
among the M_kr where k's ranks are judged and the job has a rank r:

* ``oracle``: skill 1 and skill (ranks) 1;
* ``null``: skill = 1 − (Σ_k n_k + A + Σ_f F_f + L) / R, R = Σ_k n_k (1 − n_k / N) + A + Σ_f F_f (1 − F_f / M_f)
  + L, and skill (ranks) = 1 − (the same + Σ P_kr) / (R + Σ P_kr (1 − P_kr / M_kr)), against its summary.json;
  to 1e-9 (a bug in the references, or in null's events, of any family fails it);
* the base-rate spray: every cause at n_k / N and every blamable factor value at F_f / M_f on each of the null
  run's scored cases, scored by the scoring code (:func:`~diageval.scoring.verdicts.score_case`,
  :func:`~diageval.scoring.summary.summarize`): skill 0, to 1e-9;
* the spray with ranks: the same plus, on every job, each labeled rank position r of k the job has at
  q_kr = min(P_kr / M_kr, n_k / N) (a claim on k's rank states k too): skill 0, and skill (ranks)
  1 − (R + Σ (M_kr q_kr² − 2 q_kr P_kr + P_kr)) / R_ranked (0 where no cap binds); to 1e-9 (a bug in how rank
  or factor statements are read fails it, which null, stating nothing, cannot show);
* ``leak``: exactly null's skill and skill (ranks) (the bundles hold no label words);
* ``symptoms``: below null's skill (naming symptoms as causes is worse than saying nothing).

A reference run missing from the folders fails its check, as do case files that changed since the null
run (another case-set hash).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from diageval.cases.load import CaseLoadError, CaseSet, load_case_set
from diageval.cases.model import Case
from diageval.diagnosis import Diagnosis, Finding
from diageval.errors import DiagevalError
from diageval.run.store import LoadedRun, RunReadError, RunStore
from diageval.scoring.results import CaseResult
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.verdicts import blamable_values, score_case

EXACT = 1e-9
"""Closed forms and the scoring code must agree to this (float rounding of sums over a few hundred cases)."""

GATE_CHECKS = (
    ("oracle", "skill == 1 and skill (ranks) == 1: the labels, stated at confidence 1, score perfectly"),
    ("null", "skill and skill (ranks) == 1 − (null's loss) / R from its cases' labels: saying nothing scores what "
             "the closed forms say"),
    ("base-rate spray", "skill == 0 on null's cases: every cause and factor value at its base rate is the zero of "
                        "the scale"),
    ("base-rate spray with ranks", "skill == 0 and skill (ranks) == its closed form on null's cases: every labeled "
                                   "rank position at its base rate too"),
    ("leak", "skill == null's, exactly: the bundles hold no label words, so the leak finds nothing"),
    ("symptoms", "skill < null's: naming symptoms as causes is worse than saying nothing"),
)


class GateError(DiagevalError):
    """Run folders the gate cannot read."""


def _load(run_dirs: list[Path]) -> dict[str, tuple[Summary, LoadedRun]]:
    out = {}
    for d in run_dirs:
        store = RunStore(Path(d))
        try:
            summary, loaded = store.read_summary(), store.load()
        except RunReadError as err:
            raise GateError(str(err)) from None
        out[summary.diagnoser.name] = (summary, loaded)
    return out


@dataclass(frozen=True)
class LabelCounts:
    """What the closed forms are computed from (module docstring), counted from case files."""

    cases: int
    labeled: dict[str, int]                        # n_k
    abstain: int                                   # A
    aliased: int                                   # L
    factor_true: dict[str, int]                    # F_f
    factor_slots: dict[str, int]                   # M_f
    rank_true: dict[tuple[str, int], int]          # P_kr (only the positions some label names)
    rank_slots: dict[tuple[str, int], int]         # M_kr

    @property
    def reference(self) -> float:
        n = self.cases
        return (sum(nk * (1 - nk / n) for nk in self.labeled.values()) + self.abstain + self.aliased
                + sum(f * (1 - f / self.factor_slots[name]) for name, f in self.factor_true.items()))

    @property
    def reference_ranked(self) -> float:
        return self.reference + sum(p * (1 - p / self.rank_slots[kr]) for kr, p in self.rank_true.items())

    @property
    def null_loss(self) -> float:
        return sum(self.labeled.values()) + self.abstain + self.aliased + sum(self.factor_true.values())

    def rate(self, category: str) -> float:
        return self.labeled[category] / self.cases

    def rank_rate(self, category: str, rank: int) -> float:
        """q_kr: the position's base rate, capped at the cause's (a claim on k's rank r states k as well)."""
        return min(self.rank_true[category, rank] / self.rank_slots[category, rank], self.rate(category))


def factor_counts(cases: list[Case]) -> tuple[Counter, Counter]:
    """Per factor name f: F_f, the values a label puts a cause behind, and M_f, the values the cases could blame
    (:func:`~diageval.scoring.verdicts.blamable_values`) with the labeled ones (module docstring)."""
    true: Counter = Counter()
    slots: Counter = Counter()
    for case in cases:
        behind = {label.factor for label in case.labels.causes if label.factor is not None}
        for ref in set(blamable_values(case)) | behind:
            slots[ref.name] += 1
            true[ref.name] += ref in behind
    return true, slots


def rank_counts(cases: list[Case]) -> tuple[Counter, Counter]:
    """Per (cause k, rank position r): P_kr, the cases whose labels of k name r, and M_kr, the cases where k's ranks
    are judged (no label of k names no ranks) and the job has a rank r; every position, those no label names too."""
    true: Counter = Counter()
    slots: Counter = Counter()
    labeled = {label.category for case in cases for label in case.labels.causes}
    for case in cases:
        for k in labeled:
            mine = [label for label in case.labels.causes if label.category == k]
            if any(label.ranks is None for label in mine):
                continue  # a label of k naming no ranks: k's ranks are not judged on this case
            truth = {r for label in mine for r in label.ranks}
            for r in set(range(case.world_size)) | truth:
                slots[k, r] += 1
                true[k, r] += r in truth
    return true, slots


def label_counts(cases: list[Case]) -> LabelCounts:
    """The counts of the closed forms, by a plain loop over the cases' labels (module docstring)."""
    labeled = Counter(k for c in cases for k in {label.category for label in c.labels.causes})
    factor_true, factor_slots = factor_counts(cases)
    rank_true, rank_slots = rank_counts(cases)
    positions = {kr for kr, p in rank_true.items() if p}
    return LabelCounts(cases=len(cases), labeled=dict(labeled),
                       abstain=sum(c.labels.expect == "abstain" for c in cases),
                       aliased=sum(len(set(c.labels.aliased)) for c in cases),
                       factor_true=dict(factor_true), factor_slots=dict(factor_slots),
                       rank_true={kr: rank_true[kr] for kr in positions}, rank_slots={kr: rank_slots[kr] for kr in positions})


def null_closed_forms(counts: LabelCounts) -> tuple[float | None, float | None]:
    """Null's skill and skill (ranks) from the label counts (None where the reference is 0)."""
    ranked_loss = counts.null_loss + sum(counts.rank_true.values())
    return (None if counts.reference <= 0 else 1 - counts.null_loss / counts.reference,
            None if counts.reference_ranked <= 0 else 1 - ranked_loss / counts.reference_ranked)


def rank_spray_closed_form(counts: LabelCounts) -> float | None:
    """The spray with ranks' skill (ranks): its headline loss is R; each labeled position states q_kr on M_kr
    events of which P_kr are true."""
    loss = counts.reference
    for (k, r), p in counts.rank_true.items():
        q, m = counts.rank_rate(k, r), counts.rank_slots[k, r]
        loss += m * q * q - 2 * q * p + p
    return None if counts.reference_ranked <= 0 else 1 - loss / counts.reference_ranked


def _null_cases(run: LoadedRun) -> tuple[CaseSet | None, list[Case], str]:
    """The case files of the null run's scored cases, or None and why they cannot be read."""
    try:
        case_set = load_case_set(Path(run.info.cases_dir))
    except (CaseLoadError, OSError, ValueError) as err:
        return None, [], f"the case files at {run.info.cases_dir} cannot be read: {str(err).splitlines()[0]}"
    if case_set.hash != run.info.case_set_hash:
        return None, [], (f"the case files at {run.info.cases_dir} changed since the run (case-set hash "
                          f"{case_set.hash[:12]}, the run's {run.info.case_set_hash[:12]})")
    # each case as it was scored: its labels' ranks where its recording's draw put them, its factor values in the
    # words its bundle showed (issues 44 and 39); the closed forms count those labels, as the scorer did
    return case_set, [case_set.get(r.case_id).case.with_rank_draw(r.rank_draw).with_shown_values(r.shown_values)
                      for r in run.results if r.scored], ""


def spray_skills(case_set: CaseSet, cases: list[Case], counts: LabelCounts, *, ranks: bool
                 ) -> tuple[float | None, float | None]:
    """The base-rate spray (with its rank positions when ``ranks``) scored by the scoring code on ``cases``."""
    symptom = case_set.taxonomy.symptoms[0] if case_set.taxonomy.symptoms else "symptom.slow_step"
    causes = [Finding(category=k, kind="cause", confidence=counts.rate(k)) for k in sorted(counts.labeled)]
    factor = {name: counts.factor_true.get(name, 0) / m for name, m in counts.factor_slots.items() if m}
    results = []
    for case in cases:
        findings = causes + [Finding(category=symptom, kind="symptom", confidence=factor[ref.name], factor=ref)
                             for ref in blamable_values(case) if factor.get(ref.name, 0) > 0]
        if ranks:
            findings += [Finding(category=k, kind="cause", confidence=counts.rank_rate(k, r), ranks=[r])
                         for k, r in sorted(counts.rank_true) if r < case.world_size]
        results.append(score_case(case, Diagnosis(findings=findings), taxonomy=case_set.taxonomy))
    m = summarize(results, diagnoser=DiagnoserInfo(spec="base-rate spray", name="base-rate spray"),
                  case_set_hash=case_set.hash, taxonomy_version=case_set.taxonomy.version, n_boot=0).metrics
    return m.skill.value, m.skill_ranked.value


def _close(value: float | None, expected: float | None) -> bool:
    return value is not None and expected is not None and abs(value - expected) <= EXACT


def check_board(run_dirs: list[Path]) -> list[tuple[str, bool, str]]:
    """(check, passed, what was measured) for each line of :data:`GATE_CHECKS`."""
    runs = _load(run_dirs)
    summaries = {name: s for name, (s, _) in runs.items()}
    case_set, cases, why = _null_cases(runs["null"][1]) if "null" in runs else (None, [], "")
    counts = label_counts(cases) if case_set is not None else None

    def skill(name: str) -> float | None:
        return summaries[name].metrics.skill.value if name in summaries else None

    out = []
    for name, rule in GATE_CHECKS:
        check = f"{name}: {rule}"
        if name.startswith("base-rate spray"):
            if "null" not in runs:
                out.append((check, False, "no null run among the folders: its cases define the spray"))
            elif counts is None:
                out.append((check, False, f"skill None ({why})"))
            else:
                ranks = name.endswith("with ranks")
                value, ranked = spray_skills(case_set, cases, counts, ranks=ranks)
                note = f"{counts.cases} cases, {len(counts.labeled)} labeled causes"
                if not ranks:
                    out.append((check, _close(value, 0.0), f"skill {value!r} ({note})"))
                else:
                    expected = rank_spray_closed_form(counts)
                    out.append((check, _close(value, 0.0) and _close(ranked, expected),
                                f"skill {value!r}, skill (ranks) {ranked!r}; closed form {expected!r} ({note}, "
                                f"{len(counts.rank_true)} labeled rank positions)"))
            continue
        if name not in summaries:
            out.append((check, False, f"no {name} run among the folders"))
            continue
        m = summaries[name].metrics
        measured = f"skill {m.skill.value!r}, skill (ranks) {m.skill_ranked.value!r}"
        if name == "oracle":
            ok = m.skill.value == 1.0 and m.skill_ranked.value == 1.0
        elif name == "null":
            if counts is None:
                ok, measured = False, measured + f"; no closed form ({why})"
            else:
                expected, expected_ranked = null_closed_forms(counts)
                ok = _close(m.skill.value, expected) and _close(m.skill_ranked.value, expected_ranked)
                measured += f"; closed form {expected!r}, skill (ranks) {expected_ranked!r}"
        elif name == "leak":
            null = summaries.get("null")
            ok = null is not None and (m.skill.value, m.skill_ranked.value) == (
                null.metrics.skill.value, null.metrics.skill_ranked.value)
            measured += f"; null's skill {skill('null')!r}"
        else:
            ok = m.skill.value is not None and skill("null") is not None and m.skill.value < skill("null")
            measured += f"; null's skill {skill('null')!r}"
        out.append((check, ok, measured))
    return out
