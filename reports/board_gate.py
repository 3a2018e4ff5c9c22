"""The board's sanity gate (``.ci/check_board``): what the reference diagnosers must score, whatever the
diagnosers under test do. A failure means the board itself is wrong (scoring, labels or bundles).

Skill is measured against climatology (docs/scoring.md), so its reference points have closed forms that
follow from the labels alone, and the gate checks each against what the run folders hold:

* ``oracle``: skill 1 and skill (ranks) 1;
* ``null``: skill = 1 − (Σ_k n_k + A) / R with R = Σ_k n_k (1 − n_k / N) + A, counted here by a plain loop
  over the null run's scored results (N cases, A of them expecting abstention, n_k labeled k), against
  the skill its summary.json holds; to 1e-9;
* the base-rate spray: every cause stated at n_k / N on each of the null run's scored cases, scored by
  the scoring code (:func:`~diageval.scoring.verdicts.score_case`, :func:`~diageval.scoring.summary.summarize`)
  against the case files the run was made from: skill 0, to 1e-9;
* ``leak``: exactly null's skill and skill (ranks) (the bundles hold no label words);
* ``symptoms``: below null's skill (naming symptoms as causes is worse than saying nothing).

A reference run missing from the folders fails its check, as do case files that changed since the null
run (another case-set hash).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from diageval.cases.load import CaseLoadError, load_case_set
from diageval.diagnosis import Diagnosis, Finding
from diageval.errors import DiagevalError
from diageval.run.store import LoadedRun, RunReadError, RunStore
from diageval.scoring.results import CaseResult
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.verdicts import score_case

EXACT = 1e-9
"""Closed forms and the scoring code must agree to this (float rounding of sums over a few hundred cases)."""

GATE_CHECKS = (
    ("oracle", "skill == 1 and skill (ranks) == 1: the labels, stated at confidence 1, score perfectly"),
    ("null", "skill == 1 − (Σ n_k + A) / R from its cases' labels: saying nothing scores what the closed form says"),
    ("base-rate spray", "skill == 0 on null's cases: every cause at its base rate is the zero of the scale"),
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


def null_skill_closed_form(results: list[CaseResult]) -> float | None:
    """1 − (Σ_k n_k + A) / R over the scored results, from their labels (None when R is 0)."""
    scored = [r for r in results if r.scored]
    n = len(scored)
    labeled = Counter(k for r in scored for k in set(r.categories))
    abstain = sum(r.expect == "abstain" for r in scored)
    reference = sum(nk * (1 - nk / n) for nk in labeled.values()) + abstain
    return None if reference <= 0 else 1 - (sum(labeled.values()) + abstain) / reference


def base_rate_spray_skill(run: LoadedRun) -> tuple[float | None, str]:
    """The spray's skill on the run's scored cases, scored by the scoring code (module docstring), and a note."""
    try:
        case_set = load_case_set(Path(run.info.cases_dir))
    except (CaseLoadError, OSError, ValueError) as err:
        return None, f"the case files at {run.info.cases_dir} cannot be read: {str(err).splitlines()[0]}"
    if case_set.hash != run.info.case_set_hash:
        return None, (f"the case files at {run.info.cases_dir} changed since the run (case-set hash "
                      f"{case_set.hash[:12]}, the run's {run.info.case_set_hash[:12]})")
    scored = [r for r in run.results if r.scored]
    rates = {k: c / len(scored) for k, c in Counter(k for r in scored for k in set(r.categories)).items()}
    spray = Diagnosis(findings=[Finding(category=k, kind="cause", confidence=p) for k, p in sorted(rates.items())])
    results = [score_case(case_set.get(r.case_id).case, spray, taxonomy=case_set.taxonomy) for r in scored]
    summary = summarize(results, diagnoser=DiagnoserInfo(spec="base-rate spray", name="base-rate spray"),
                        case_set_hash=case_set.hash, taxonomy_version=case_set.taxonomy.version, n_boot=0)
    return summary.metrics.skill.value, f"{len(scored)} cases, {len(rates)} labeled causes"


def check_board(run_dirs: list[Path]) -> list[tuple[str, bool, str]]:
    """(check, passed, what was measured) for each line of :data:`GATE_CHECKS`."""
    runs = _load(run_dirs)
    summaries = {name: s for name, (s, _) in runs.items()}

    def skill(name: str) -> float | None:
        return summaries[name].metrics.skill.value if name in summaries else None

    out = []
    for name, rule in GATE_CHECKS:
        check = f"{name}: {rule}"
        if name == "base-rate spray":
            if "null" not in runs:
                out.append((check, False, "no null run among the folders: its cases define the spray"))
                continue
            value, note = base_rate_spray_skill(runs["null"][1])
            out.append((check, value is not None and abs(value) <= EXACT, f"skill {value!r} ({note})"))
            continue
        if name not in summaries:
            out.append((check, False, f"no {name} run among the folders"))
            continue
        m = summaries[name].metrics
        measured = f"skill {m.skill.value!r}, skill (ranks) {m.skill_ranked.value!r}"
        if name == "oracle":
            ok = m.skill.value == 1.0 and m.skill_ranked.value == 1.0
        elif name == "null":
            expected = null_skill_closed_form(runs["null"][1].results)
            ok = expected is not None and m.skill.value is not None and abs(m.skill.value - expected) <= EXACT
            measured += f"; closed form {expected!r}"
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
