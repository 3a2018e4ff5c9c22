"""Strategies that try to game the score, simulated on the built-in corpus without recording anything.

Scoring works on (case, diagnosis) pairs, so each strategy is a function case -> diagnosis; the
``label-blind`` ones never look at the case's labels (the priors look only at the corpus' label counts,
like the ``prior`` baseline, and are computed from the live corpus, so the table follows it; the
metadata-stratum ones also read what a bundle's metadata says: evidence kind, device, world-size bucket,
and count the labels of the *other* cases of the case's stratum, leave-one-out). The ``split over ranks``
variants name each cause on every rank of the job, one claim per rank. The ``in-sample`` row counts the
case's own labels too: it is what the stratum base rates would earn if the case were known, shown for
scale, not a strategy. The others know the right answer and game how it is stated. Every strategy's
results are summarised and ranked with the leaderboard's own key
(:func:`diageval.reports.leaderboard.rank_key`).

    python tests/gaming_strategies.py        # prints the table: strategy, skill, rank
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from diageval.cases.load import load_case_set
from diageval.cases.model import Case
from diageval.cases.taxonomy import Taxonomy
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding
from diageval.reports.leaderboard import rank_key
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.verdicts import score_case

Strategy = Callable[[Case], Diagnosis]


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "honest", "label-blind", "in-sample", "knows the answer" (games how it is stated), "misleading", "null"
    strategy: Strategy


def _claim(category: str, confidence: float, ranks=None) -> Finding:
    return Finding(category=category, kind="cause", confidence=confidence, ranks=ranks)


def _perfect(confidence: float, *, every_rank: bool = False) -> Strategy:
    """Names each labeled cause (on its labeled ranks, behind its labeled factor value) at ``confidence``;
    abstains where the case expects it, naming the aliased factor values."""
    def diagnose(case: Case) -> Diagnosis:
        if case.labels.expect == "abstain":
            return Diagnosis(abstain=Abstention(reason="evidence insufficient", factors=list(case.labels.aliased)))
        all_ranks = list(range(case.world_size))
        return Diagnosis(findings=[Finding(category=c.category, kind="cause", confidence=confidence, factor=c.factor,
                                           ranks=all_ranks if every_rank and c.ranks else c.ranks)
                                   for c in case.labels.causes])
    return diagnose


def _modest(case_ids: list[str]) -> Strategy:
    """An honest diagnoser that finds the cause of every other positive case (at 0.6) and misses the rest,
    never abstains, and stays quiet on healthy controls."""
    found = set(case_ids[::2])

    def diagnose(case: Case) -> Diagnosis:
        if case.id not in found:
            return Diagnosis()
        return Diagnosis(findings=[_claim(c.category, 0.6, c.ranks) for c in case.labels.causes])
    return diagnose


def _junk_padded(taxonomy: Taxonomy) -> Strategy:
    """Perfect at 0.9, plus every other taxonomy id claimed as a cause at 0.01."""
    perfect = _perfect(0.9)

    def diagnose(case: Case) -> Diagnosis:
        d = perfect(case)
        if d.abstain is not None:
            return d
        named = {f.category for f in d.findings}
        junk = [_claim(c, 0.01) for c in taxonomy.causes + taxonomy.symptoms if c not in named]
        return Diagnosis(findings=d.findings + junk)
    return diagnose


def _spray(taxonomy: Taxonomy, confidence: float) -> Strategy:
    return lambda case: Diagnosis(findings=[_claim(c, confidence) for c in taxonomy.causes])


def _split_over_ranks(strategy: Strategy) -> Strategy:
    """The same claims, each made once per rank of the job (one claim naming rank r, for every r)."""
    def diagnose(case: Case) -> Diagnosis:
        d = strategy(case)
        if d.abstain is not None:
            return d
        return Diagnosis(findings=[_claim(f.category, f.confidence, [r]) for f in d.findings if f.kind == "cause"
                                   for r in range(case.world_size)])
    return diagnose


def rank_base_rates(cases: list[Case]) -> dict[str, float]:
    """Per cause k: the labeled ranks of k over the (case, rank) events of k a rank-credited score judges
    (the ranks of every case that does not label k without ranks): the ranks' climatology."""
    true: Counter = Counter()
    slots: Counter = Counter()
    for case in cases:
        for k in {c.category for c in case.labels.causes} | {c.category for cs in cases for c in cs.labels.causes}:
            mine = [c for c in case.labels.causes if c.category == k]
            if any(c.ranks is None for c in mine):
                continue
            true[k] += len({r for c in mine for r in c.ranks})
            slots[k] += case.world_size
    return {k: true[k] / slots[k] for k in slots if slots[k]}


def fleet_values(case: Case) -> list[FactorRef]:
    """Every (factor, value) pair of a regression's or fleet's runs (none for one job)."""
    if case.fleet is None:
        return []
    return sorted({FactorRef(name=k, value=v) for run in case.fleet.runs for k, v in run.metadata.items()},
                  key=lambda ref: (ref.name, ref.value))


def factor_base_rate(cases: list[Case]) -> float:
    """The values a label puts a cause behind over every fleet value of the corpus: the factor's climatology."""
    true = sum(len({(c.factor.name, c.factor.value) for c in case.labels.causes if c.factor}) for case in cases)
    slots = sum(len(fleet_values(case)) for case in cases)
    return true / slots if slots else 0.0


def _prior_spray_with_rank_rates(cases: list[Case], taxonomy: Taxonomy) -> Strategy:
    """Every cause at its base rate, on every rank of the job at its ranks' base rate, and every factor value of
    a fleet at the factor's base rate (a symptom naming it: a statement about the value alone): climatology for
    both scores (skill and skill (ranks) exactly 0, when the ranks' rates are below the causes')."""
    rates, ranks, factor = base_rates(cases), rank_base_rates(cases), factor_base_rate(cases)

    def diagnose(case: Case) -> Diagnosis:
        findings = [_claim(c, rates[c]) for c in taxonomy.causes if c in rates]
        findings += [_claim(c, q, [r]) for c, q in ranks.items() if q > 0 for r in range(case.world_size)]
        findings += [Finding(category="symptom.slow_step", kind="symptom", confidence=factor, factor=ref)
                     for ref in fleet_values(case)] if factor > 0 else []
        return Diagnosis(findings=findings)
    return diagnose


def _abstain_naming_every_value(case: Case) -> Diagnosis:
    """Abstains everywhere, naming every factor value of a fleet as aliased."""
    return Diagnosis(abstain=Abstention(reason="always", factors=fleet_values(case)))


def _perfect_every_value(confidence: float) -> Strategy:
    """The labeled causes at ``confidence`` behind their values, plus the first cause behind every other value
    of the fleet at ``confidence`` too; abstains naming the aliased values where the case expects it."""
    perfect = _perfect(confidence)

    def diagnose(case: Case) -> Diagnosis:
        d = perfect(case)
        if d.abstain is not None or not case.labels.causes or case.fleet is None:
            return d
        first = case.labels.causes[0].category
        named = {c.factor for c in case.labels.causes}
        return Diagnosis(findings=d.findings + [Finding(category=first, kind="cause", confidence=confidence, factor=ref)
                                                for ref in fleet_values(case) if ref not in named])
    return diagnose


def world_size_bucket(world_size: int) -> str:
    return "1" if world_size == 1 else "2" if world_size == 2 else "3-8" if world_size <= 8 else ">8"


def metadata_stratum(case: Case) -> tuple[str, str, str]:
    """What a bundle's metadata says about the job: imported or recorded here, CPU or GPU, world-size bucket."""
    device = "cpu" if case.evidence_kind == "injected" and case.requires.device == "any" else "gpu"
    return case.evidence_kind, device, world_size_bucket(case.world_size)


def _stratum_rates(cases: list[Case], *, leave_one_out: bool, abstain: bool) -> Strategy:
    """Every cause at its base rate over the case's metadata stratum (the other cases of it, leave-one-out);
    with ``abstain``, abstains where most of those cases expect abstention."""
    by_stratum: dict[tuple, list[Case]] = {}
    for case in cases:
        by_stratum.setdefault(metadata_stratum(case), []).append(case)

    def diagnose(case: Case) -> Diagnosis:
        peers = [c for c in by_stratum[metadata_stratum(case)] if not (leave_one_out and c.id == case.id)]
        if not peers:
            return Diagnosis()
        if abstain and sum(c.labels.expect == "abstain" for c in peers) > len(peers) / 2:
            return Diagnosis(abstain=Abstention(reason="the stratum mostly abstains"))
        return Diagnosis(findings=[_claim(k, q) for k, q in base_rates(peers).items()])
    return diagnose


def _prior(cases: list[Case]) -> Strategy:
    """The ``prior`` baseline: the corpus' most frequent labeled cause, at its frequency, on every case."""
    counts = Counter(c.category for case in cases if case.labels.expect == "diagnose" for c in case.labels.causes)
    category, count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    claim = _claim(category, count / sum(counts.values()))
    return lambda case: Diagnosis(findings=[claim])


def base_rates(cases: list[Case]) -> dict[str, float]:
    """π_k: the share of the cases labeled with cause k (a case counts once per cause)."""
    counts = Counter(category for case in cases for category in {c.category for c in case.labels.causes})
    return {category: count / len(cases) for category, count in sorted(counts.items())}


def _prior_spray(cases: list[Case], taxonomy: Taxonomy) -> Strategy:
    """Every taxonomy cause at the share of cases it is labeled on (the corpus' base rates)."""
    rates = base_rates(cases)
    claims = [_claim(c, rates[c]) for c in taxonomy.causes if c in rates]
    return lambda case: Diagnosis(findings=claims)


def null_skill(cases: list[Case]) -> float:
    """Null's skill from the corpus' labels alone (docs/scoring.md): 1 − (Σ_k n_k + A) / R, with
    R = Σ_k n_k (1 − n_k / N) + A the climatological forecast's loss."""
    n = len(cases)
    counts = [rate * n for rate in base_rates(cases).values()]
    abstain = sum(c.labels.expect == "abstain" for c in cases)
    reference = sum(k * (1 - k / n) for k in counts) + abstain
    return 1 - (sum(counts) + abstain) / reference


def _symptoms_as_causes(confidence: float) -> Strategy:
    """Claims what it sees, the case's symptoms, as causes (an upper bound of what a symptom-namer sees)."""
    return lambda case: Diagnosis(findings=[_claim(s, confidence) for s in case.labels.symptoms])


def _mostly_misleading(taxonomy: Taxonomy, confidence: float) -> Strategy:
    """On a positive case: the labeled cause and two wrong causes, all at ``confidence`` (2 of 3 claims
    misleading); on healthy controls one wrong cause; never abstains."""
    def diagnose(case: Case) -> Diagnosis:
        labeled = [c.category for c in case.labels.causes]
        wrong = [c for c in taxonomy.causes if c not in labeled]
        if not labeled:
            return Diagnosis(findings=[_claim(wrong[0], confidence)])
        return Diagnosis(findings=[_claim(c, confidence) for c in labeled + wrong[:2]])
    return diagnose


def strategies(cases: list[Case], taxonomy: Taxonomy) -> list[Entry]:
    positives = sorted(c.id for c in cases if c.labels.expect == "diagnose")
    return [
        Entry("honest: perfect at 0.9", "honest", _perfect(0.9)),
        Entry("honest: finds half, at 0.6", "honest", _modest(positives)),
        Entry("null: says nothing", "null", lambda case: Diagnosis()),
        Entry("spray every cause at 0.05", "label-blind", _spray(taxonomy, 0.05)),
        Entry("spray every cause at 0.1", "label-blind", _spray(taxonomy, 0.1)),
        Entry("spray every cause at 0.5", "label-blind", _spray(taxonomy, 0.5)),
        Entry("spray every cause at 1.0", "label-blind", _spray(taxonomy, 1.0)),
        Entry("always abstain", "label-blind", lambda case: Diagnosis(abstain=Abstention(reason="always"))),
        Entry("always abstain, naming every factor value", "label-blind", _abstain_naming_every_value),
        Entry("prior (most frequent cause)", "label-blind", _prior(cases)),
        Entry("prior spray (every cause at its base rate)", "label-blind", _prior_spray(cases, taxonomy)),
        Entry("spray every cause at 0.05, split over ranks", "label-blind", _split_over_ranks(_spray(taxonomy, 0.05))),
        Entry("prior spray, split over ranks", "label-blind", _split_over_ranks(_prior_spray(cases, taxonomy))),
        Entry("prior spray with the ranks' base rates", "label-blind", _prior_spray_with_rank_rates(cases, taxonomy)),
        Entry("metadata-stratum base rates (leave-one-out)", "label-blind",
              _stratum_rates(cases, leave_one_out=True, abstain=False)),
        Entry("metadata-stratum base rates, abstain where it mostly abstains (leave-one-out)", "label-blind",
              _stratum_rates(cases, leave_one_out=True, abstain=True)),
        Entry("metadata-stratum base rates, split over ranks (leave-one-out)", "label-blind",
              _split_over_ranks(_stratum_rates(cases, leave_one_out=True, abstain=False))),
        Entry("metadata-stratum base rates (in-sample)", "in-sample",
              _stratum_rates(cases, leave_one_out=False, abstain=True)),
        Entry("perfect plus junk at 0.01", "knows the answer", _junk_padded(taxonomy)),
        Entry("perfect at 0.01", "knows the answer", _perfect(0.01)),
        Entry("perfect, every rank named", "knows the answer", _perfect(0.9, every_rank=True)),
        Entry("perfect, every factor value named", "knows the answer", _perfect_every_value(0.9)),
        Entry("symptoms as causes at 0.9", "misleading", _symptoms_as_causes(0.9)),
        Entry("symptoms as causes at 0.3", "misleading", _symptoms_as_causes(0.3)),
        Entry("2 of 3 claims wrong, at 0.9", "misleading", _mostly_misleading(taxonomy, 0.9)),
        Entry("2 of 3 claims wrong, at 0.7", "misleading", _mostly_misleading(taxonomy, 0.7)),
        Entry("2 of 3 claims wrong, at 1/3", "misleading (calibrated)", _mostly_misleading(taxonomy, 1 / 3)),
    ]


def builtin_corpus() -> tuple[list[Case], Taxonomy]:
    case_set = load_case_set()
    return [lc.case for lc in case_set.cases], case_set.taxonomy


def summaries(n_boot: int = 0) -> list[tuple[Entry, Summary]]:
    """Every strategy's summary on the built-in corpus, in leaderboard order."""
    cases, taxonomy = builtin_corpus()
    out = []
    for entry in strategies(cases, taxonomy):
        results = [score_case(case, entry.strategy(case), taxonomy=taxonomy) for case in cases]
        info = DiagnoserInfo(spec=entry.name, name=entry.name)
        out.append((entry, summarize(results, diagnoser=info, case_set_hash="builtin", taxonomy_version=taxonomy.version,
                                     n_boot=n_boot)))
    return sorted(out, key=lambda es: rank_key(es[1]))


def table(n_boot: int = 1000) -> str:
    rows = summaries(n_boot)
    cases, taxonomy = builtin_corpus()
    rates = base_rates(cases)
    strata = Counter(metadata_stratum(c) for c in cases)
    lines = [f"gaming table: {len(cases)} built-in cases, {len(taxonomy.causes)} taxonomy causes, ranked by the "
             "leaderboard's key (skill, then skill with rank credit); skill 0 = every cause at its base rate",
             f"null's skill from the labels alone: 1 - (Σ n_k + A) / R = {null_skill(cases):.4f} "
             f"(λ = {sum(rates.values()):.3f} labeled causes per case, max π = {max(rates.values(), default=0):.3f}, "
             f"{sum(c.labels.expect == 'abstain' for c in cases)} abstain cases); {len(strata)} metadata strata "
             f"(evidence kind, device, world-size bucket)",
             "", "| rank | strategy | kind | skill [95% CI] | skill (ranks) | F1 | factor P | factor R | Brier | ECE |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for i, (entry, s) in enumerate(rows, 1):
        m = s.metrics
        ci = f" [{m.skill.ci[0]:.2f}, {m.skill.ci[1]:.2f}]" if m.skill.ci else ""
        factor = " | ".join("–" if v.value is None else f"{v.value:.2f}" for v in (m.factor_precision, m.factor_recall))
        lines.append(f"| {i} | {entry.name} | {entry.kind} | {m.skill.value:.3f}{ci} | {m.skill_ranked.value:.3f} | "
                     f"{m.f1.value:.2f} | {factor} | {m.brier.value:.3f} | {m.ece.value:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
