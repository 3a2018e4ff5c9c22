"""Strategies that try to game the score, simulated on the built-in corpus without recording anything.

Scoring works on (case, diagnosis) pairs, so each strategy is a function case -> diagnosis; the
``label-blind`` ones never look at the case's labels (the priors look only at the corpus' label counts,
like the ``prior`` baseline, and are computed from the live corpus, so the table follows it; the
metadata-stratum ones also read what a bundle's metadata says: evidence kind, device, world-size bucket,
and count the labels of the *other* cases of the case's stratum, leave-one-out; the ``visible stratum``
ones read everything a boxed diagnoser can read without opening a trace: case kind, workload shape, world
size, the trace files present, a fleet's or regression's metadata (:data:`VISIBLE`), at least
:data:`MIN_PEERS` other cases a stratum, and some state fleet values too). The ``split over ranks``
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
from diageval.reports.board_gate import factor_counts, label_counts, null_closed_forms, rank_counts
from diageval.reports.leaderboard import rank_key
from diageval.scoring.summary import DiagnoserInfo, Summary, summarize
from diageval.scoring.verdicts import blamable_values, score_case

Strategy = Callable[[Case], Diagnosis]


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "honest", "label-blind", "in-sample", "knows the answer" (games how it is stated), "misleading", "null",
    # "open: corpus" (label-blind, reads what the corpus gives away: printed, not held to 0)
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
    """The same claims, each made once per rank of the job (one claim naming rank r, for every r); findings
    that are not cause claims (a symptom naming a factor value) are kept as they are."""
    def diagnose(case: Case) -> Diagnosis:
        d = strategy(case)
        if d.abstain is not None:
            return d
        return Diagnosis(findings=[_claim(f.category, f.confidence, [r]) for f in d.findings if f.kind == "cause"
                                   for r in range(case.world_size)] + [f for f in d.findings if f.kind != "cause"])
    return diagnose


def rank_base_rates(cases: list[Case]) -> dict[tuple[str, int], float]:
    """P_kr / M_kr for every (cause, rank position) some label names: the ranks' climatology."""
    true, slots = rank_counts(cases)
    return {kr: true[kr] / slots[kr] for kr in slots if true[kr]}


def fleet_values(case: Case) -> list[FactorRef]:
    """Every (factor, value) pair of a regression's or fleet's runs (none for one job)."""
    if case.fleet is None:
        return []
    return sorted({FactorRef(name=k, value=v) for run in case.fleet.runs for k, v in run.metadata.items()},
                  key=lambda ref: (ref.name, ref.value))


def factor_base_rates(cases: list[Case]) -> dict[str, float]:
    """F_f / M_f per factor name: the factor's climatology."""
    true, slots = factor_counts(cases)
    return {name: true[name] / slots[name] for name in sorted(slots)}


def _factor_statements(rates: dict[str, float]) -> Callable[[Case], list[Finding]]:
    """Every blamable value of a fleet at its factor name's rate, as a symptom naming it (a statement about the
    value alone)."""
    return lambda case: [Finding(category="symptom.slow_step", kind="symptom", confidence=rates[ref.name], factor=ref)
                         for ref in blamable_values(case) if rates.get(ref.name, 0) > 0]


def _prior_spray_with_rank_rates(cases: list[Case], taxonomy: Taxonomy) -> Strategy:
    """The base-rate spray (every cause and factor value at its base rate), plus every labeled rank position r
    of k on every job with a rank r, at its ranks' base rate capped at k's (a claim on k's rank r states k too,
    at the same confidence): climatology in the headline (skill exactly 0), and in the rank-credited score
    wherever no cap binds (docs/scoring.md has the closed form)."""
    spray, ranks, rates = _prior_spray(cases, taxonomy), rank_base_rates(cases), base_rates(cases)

    def diagnose(case: Case) -> Diagnosis:
        findings = [_claim(k, min(q, rates[k]), [r]) for (k, r), q in ranks.items() if r < case.world_size]
        return Diagnosis(findings=spray(case).findings + findings)
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


MIN_PEERS = 5
"""The fewest other cases a visible stratum must hold for a strategy to use its rates (issue 39 item 3); with
fewer it falls back to the next coarser stratum, and at the end to the other cases of the whole corpus."""


def trace_files(case: Case) -> int:
    """The rank traces a case's bundle holds (what a directory listing shows): the world size, less the ranks an
    evidence edit removes or never writes; a recorded job's files; a fleet's over its runs."""
    if case.fleet is not None:
        return sum(len(r.recorded.files) if r.recorded else case.world_size for r in case.fleet.runs)
    if case.recorded is not None:
        return len(case.recorded.files)
    present = case.world_size
    for f in case.faults:
        if f.name == "drop_rank_trace":
            present -= 1
        elif isinstance(f.params.get("traced_ranks"), list):
            present = len(f.params["traced_ranks"])
    return present


def workload_shape(case: Case) -> str:
    """The job a bundle shows without its trace (its logs and env name the script and its sizes)."""
    if case.workload is None:
        return "recorded"
    params = ",".join(f"{k}={v}" for k, v in sorted(case.workload.params.items()))
    return f"{case.workload.name}({params}) steps={case.workload.steps}"


def fleet_signature(case: Case) -> str:
    """What fleet.json shows besides the runs' traces: how many runs, the factor names, and for a regression the
    factors its candidate changes."""
    if case.fleet is None:
        return "-"
    runs = case.fleet.runs
    names = sorted({k for r in runs for k in r.metadata})
    changed = ""
    if case.kind == "regression":
        base = next((r for r in runs if r.role == "baseline"), runs[0])
        cand = next((r for r in runs if r.role == "candidate"), runs[-1])
        changed = " changes " + ",".join(sorted(k for k in names if base.metadata.get(k) != cand.metadata.get(k)))
    return f"{len(runs)} runs of {','.join(names)}{changed}"


VISIBLE = {
    "case kind": lambda c: (c.kind,),
    "workload shape": lambda c: (workload_shape(c),),
    "world size": lambda c: (c.world_size,),
    "trace files": lambda c: (trace_files(c), c.world_size),
    "fleet metadata": lambda c: (c.kind, fleet_signature(c)),
    "every visible feature": lambda c: (c.kind, *metadata_stratum(c), workload_shape(c), c.world_size, trace_files(c),
                                        fleet_signature(c)),
}
"""Strata of what a boxed diagnoser reads without opening a trace (issue 39 item 3), each a function of the case
that uses no label. ``every visible feature`` falls back through :data:`COARSER`."""
COARSER = [VISIBLE["every visible feature"],
           lambda c: (c.kind, *metadata_stratum(c), workload_shape(c), c.world_size),
           lambda c: (c.kind, *metadata_stratum(c)),
           VISIBLE["case kind"]]


def _peers(cases: list[Case], case: Case, keys) -> list[Case]:
    """The other cases of ``case``'s finest stratum (over ``keys``, finest first) that holds MIN_PEERS of them;
    the whole corpus' other cases when none does."""
    others = [c for c in cases if c.id != case.id]
    for key in keys:
        mine = key(case)
        peers = [c for c in others if key(c) == mine]
        if len(peers) >= MIN_PEERS:
            return peers
    return others


def factor_rates(peers: list[Case]) -> tuple[dict[str, float], float]:
    """Over ``peers``' fleets: per factor name, the share of its values a label puts a cause behind; and for the
    regressions, the share of the values their candidate changes that a label names."""
    true: Counter = Counter()
    slots: Counter = Counter()
    changed_true = changed_slots = 0
    for case in peers:
        labeled = {(c.factor.name, c.factor.value) for c in case.labels.causes if c.factor}
        for ref in fleet_values(case):
            slots[ref.name] += 1
            true[ref.name] += (ref.name, ref.value) in labeled
        for ref in changed_values(case):
            changed_slots += 1
            changed_true += (ref.name, ref.value) in labeled
    return {k: true[k] / n for k, n in slots.items()}, (changed_true / changed_slots if changed_slots else 0.0)


def changed_values(case: Case) -> list[FactorRef]:
    """A regression's candidate values that differ from its baseline's (none for a fleet or one job)."""
    if case.kind != "regression" or case.fleet is None:
        return []
    return case.fleet.changed_values()


def changed_name_rates(peers: list[Case]) -> dict[str, float]:
    """Over ``peers``' regressions, per factor name: the share of the changed values of that name a label names."""
    true: Counter = Counter()
    slots: Counter = Counter()
    for case in peers:
        labeled = {c.factor for c in case.labels.causes if c.factor}
        for ref in changed_values(case):
            slots[ref.name] += 1
            true[ref.name] += ref in labeled
    return {k: true[k] / n for k, n in slots.items()}


def _changed_values_by_name(cases: list[Case]) -> Strategy:
    """"Name the candidate's differing value", calibrated: the base rates of the case's visible stratum, and each
    value a regression's candidate changes at the rate its factor name's changed values are labeled on the other
    regressions (leave-one-out). With one differing factor per regression (the corpus before issue 39 item 2) that
    rate was the share of positive regressions; with two or more, the factor name must say which one is at fault."""
    def diagnose(case: Case) -> Diagnosis:
        peers = _peers(cases, case, COARSER)
        rates = changed_name_rates([c for c in cases if c.id != case.id])
        findings = [_claim(k, q) for k, q in base_rates(peers).items()]
        findings += [Finding(category="symptom.slow_step", kind="symptom", confidence=rates[ref.name], factor=ref)
                     for ref in changed_values(case) if rates.get(ref.name, 0) > 0]
        return Diagnosis(findings=findings)
    return diagnose


def name_the_differing_values(case: Case) -> Diagnosis:
    """Reads no trace: every value the regression's candidate changes, stated at 1.0 as where the slowdown sits."""
    return Diagnosis(findings=[Finding(category="symptom.slow_step", kind="symptom", confidence=1.0, factor=ref)
                               for ref in changed_values(case)])


def _visible_stratum_rates(cases: list[Case], keys, *, abstain: bool = False, factors: str = "") -> Strategy:
    """Every cause at its base rate over the case's visible stratum (its other cases, at least MIN_PEERS, else a
    coarser stratum); with ``abstain``, abstains where most of them expect abstention; with ``factors`` "names",
    every fleet value at its factor name's rate over the stratum, "changed", a regression's changed values at
    the stratum's rate for changed values (statements about the value: a symptom finding naming it)."""
    def diagnose(case: Case) -> Diagnosis:
        peers = _peers(cases, case, keys)
        if abstain and sum(c.labels.expect == "abstain" for c in peers) > len(peers) / 2:
            return Diagnosis(abstain=Abstention(reason="the stratum mostly abstains"))
        findings = [_claim(k, q) for k, q in base_rates(peers).items()]
        if factors:
            by_name, changed = factor_rates(peers)
            refs = [(ref, by_name.get(ref.name, 0.0)) for ref in fleet_values(case)] if factors == "names" else \
                [(ref, changed) for ref in changed_values(case)]
            findings += [Finding(category="symptom.slow_step", kind="symptom", confidence=q, factor=ref)
                         for ref, q in refs if q > 0]
        return Diagnosis(findings=findings)
    return diagnose


def visible_entries(cases: list[Case]) -> list[Entry]:
    """The label-blind strategies of the visible strata (leave-one-out, at least MIN_PEERS other cases)."""
    out = [Entry(f"visible stratum: {name} (leave-one-out)", "label-blind",
                 _visible_stratum_rates(cases, [key] if name != "every visible feature" else COARSER))
           for name, key in VISIBLE.items()]
    out += [Entry("visible stratum: every visible feature, abstain where it mostly abstains (leave-one-out)",
                  "label-blind", _visible_stratum_rates(cases, COARSER, abstain=True)),
            Entry("visible stratum: every visible feature, fleet values at their factor's rate (leave-one-out)",
                  "label-blind", _visible_stratum_rates(cases, COARSER, factors="names")),
            Entry("visible stratum: every visible feature, a regression's changed values at their rate (leave-one-out)",
                  "label-blind", _visible_stratum_rates(cases, COARSER, factors="changed")),
            Entry("visible stratum: every visible feature, a regression's changed values at their factor name's rate "
                  "(leave-one-out)", "label-blind", _changed_values_by_name(cases))]
    return out


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
    """Every taxonomy cause at the share of cases it is labeled on, and every blamable factor value of a fleet at
    its factor name's base rate: the corpus' climatology, skill exactly 0."""
    rates = base_rates(cases)
    claims = [_claim(c, rates[c]) for c in taxonomy.causes if c in rates]
    factors = _factor_statements(factor_base_rates(cases))
    return lambda case: Diagnosis(findings=claims + factors(case))


def _causes_only_spray(cases: list[Case], taxonomy: Taxonomy) -> Strategy:
    """Every taxonomy cause at its base rate and no factor value: below 0 by the factors' climatology."""
    rates = base_rates(cases)
    claims = [_claim(c, rates[c]) for c in taxonomy.causes if c in rates]
    return lambda case: Diagnosis(findings=claims)


def _per_value_word_spray(cases: list[Case], taxonomy: Taxonomy) -> Strategy:
    """The base-rate spray with one rate per factor value word (``version=v2.5.0``) instead of per factor name,
    counted leave-one-out (the case's own labels never counted): a label-blind strategy that reads value words
    reused across cases. On the case files' words it beat the base rates (``v2.5.0`` was the labeled value in 17 of
    the 26 cases that showed it); bundles show words drawn per assembly (:func:`builtin_corpus`), so a word a case
    shares with another is chance (issue 39 item 2)."""
    rates = base_rates(cases)
    claims = [_claim(c, rates[c]) for c in taxonomy.causes if c in rates]
    true: Counter = Counter()
    slots: Counter = Counter()
    for case in cases:
        for ref in blamable_values(case):
            slots[ref] += 1
            true[ref] += any(c.factor == ref for c in case.labels.causes)

    def diagnose(case: Case) -> Diagnosis:
        findings = list(claims)
        for ref in blamable_values(case):
            own = any(c.factor == ref for c in case.labels.causes)
            n, k = slots[ref] - 1, true[ref] - own
            if n > 0 and k > 0:
                findings.append(Finding(category="symptom.slow_step", kind="symptom", confidence=k / n, factor=ref))
        return Diagnosis(findings=findings)
    return diagnose


def _per_kind_factor_spray(cases: list[Case], taxonomy: Taxonomy) -> Strategy:
    """The base-rate spray with its factor rates per (case kind, factor name), counted on the other cases of the
    kind (leave-one-out): a label-blind strategy that reads the case kind. A regression's candidate differs from
    its baseline in one factor, so its one blamable value is nearly always the answer (issue 39 item 2, a corpus
    property: measured, not held to 0)."""
    rates = base_rates(cases)
    claims = [_claim(c, rates[c]) for c in taxonomy.causes if c in rates]

    def diagnose(case: Case) -> Diagnosis:
        others = [c for c in cases if c.kind == case.kind and c.id != case.id]
        return Diagnosis(findings=claims + _factor_statements(factor_base_rates(others))(case))
    return diagnose


def _where_wrong(case: Case) -> list[FactorRef]:
    """For each labeled value, another blamable value of the same factor, else any other blamable value, else any
    other value of the runs (a regression's one blamable value leaves only the shared or the baseline's)."""
    labeled = {c.factor for c in case.labels.causes}
    out = []
    for label in case.labels.causes:
        if label.factor is None:
            continue
        blamable = [v for v in blamable_values(case) if v not in labeled]
        same = [v for v in blamable if v.name == label.factor.name]
        rest = [v for v in fleet_values(case) if v not in labeled]
        if same or blamable or rest:
            out.append((same or blamable or rest)[0])
    return out


def _no_factor(confidence: float) -> Strategy:
    """Knows the cause and says nothing about where: each labeled cause at ``confidence``, no factor value;
    abstains where the case expects it, naming no value."""
    def diagnose(case: Case) -> Diagnosis:
        if case.labels.expect == "abstain":
            return Diagnosis(abstain=Abstention(reason="evidence insufficient"))
        return Diagnosis(findings=[_claim(c.category, confidence, c.ranks) for c in case.labels.causes])
    return diagnose


def _wrong_location(confidence: float) -> Strategy:
    """Knows the cause and blames the wrong value everywhere: each labeled cause at ``confidence`` behind another
    blamable value of its factor; abstains where the case expects it, naming values that are not aliased."""
    def diagnose(case: Case) -> Diagnosis:
        if case.labels.expect == "abstain":
            aliased = set(case.labels.aliased)
            return Diagnosis(abstain=Abstention(reason="evidence insufficient",
                                                factors=[v for v in blamable_values(case) if v not in aliased][:2]))
        wrong = iter(_where_wrong(case))
        return Diagnosis(findings=[Finding(category=c.category, kind="cause", confidence=confidence, ranks=c.ranks,
                                           factor=next(wrong, None) if c.factor is not None else None)
                                   for c in case.labels.causes])
    return diagnose


def null_skill(cases: list[Case]) -> float:
    """Null's skill from the corpus' labels alone (docs/scoring.md): 1 − (Σ_k n_k + A + Σ_f F_f + L) / R."""
    return null_closed_forms(label_counts(cases))[0]


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
        Entry("prior spray (every cause and factor value at its base rate)", "label-blind", _prior_spray(cases, taxonomy)),
        Entry("prior spray, causes only (no factor value)", "label-blind", _causes_only_spray(cases, taxonomy)),
        Entry("spray every cause at 0.05, split over ranks", "label-blind", _split_over_ranks(_spray(taxonomy, 0.05))),
        Entry("prior spray, split over ranks", "label-blind", _split_over_ranks(_prior_spray(cases, taxonomy))),
        Entry("prior spray with the ranks' base rates", "label-blind", _prior_spray_with_rank_rates(cases, taxonomy)),
        Entry("metadata-stratum base rates (leave-one-out)", "label-blind",
              _stratum_rates(cases, leave_one_out=True, abstain=False)),
        Entry("metadata-stratum base rates, abstain where it mostly abstains (leave-one-out)", "label-blind",
              _stratum_rates(cases, leave_one_out=True, abstain=True)),
        Entry("metadata-stratum base rates, split over ranks (leave-one-out)", "label-blind",
              _split_over_ranks(_stratum_rates(cases, leave_one_out=True, abstain=False))),
        *visible_entries(cases),
        Entry("metadata-stratum base rates (in-sample)", "in-sample",
              _stratum_rates(cases, leave_one_out=False, abstain=True)),
        Entry("perfect plus junk at 0.01", "knows the answer", _junk_padded(taxonomy)),
        Entry("perfect at 0.01", "knows the answer", _perfect(0.01)),
        Entry("perfect, every rank named", "knows the answer", _perfect(0.9, every_rank=True)),
        Entry("perfect, every factor value named", "knows the answer", _perfect_every_value(0.9)),
        Entry("right causes at 0.9, no factor value", "knows the answer", _no_factor(0.9)),
        Entry("right causes at 0.9, the wrong factor value everywhere", "knows the answer", _wrong_location(0.9)),
        Entry("visible stratum: base rates per factor value word as bundles show them (leave-one-out)", "label-blind",
              _per_value_word_spray(cases, taxonomy)),
        Entry("factor base rates per case kind (leave-one-out)", "open: corpus", _per_kind_factor_spray(cases, taxonomy)),
        Entry("symptoms as causes at 0.9", "misleading", _symptoms_as_causes(0.9)),
        Entry("symptoms as causes at 0.3", "misleading", _symptoms_as_causes(0.3)),
        Entry("2 of 3 claims wrong, at 0.9", "misleading", _mostly_misleading(taxonomy, 0.9)),
        Entry("2 of 3 claims wrong, at 0.7", "misleading", _mostly_misleading(taxonomy, 0.7)),
        Entry("2 of 3 claims wrong, at 1/3", "misleading (calibrated)", _mostly_misleading(taxonomy, 1 / 3)),
    ]


def live_stratum(case: Case) -> tuple[str, int, str]:
    """What a job recorded here shows of its kind without analysis: workload family (its op names), world size, and
    whether it needed a GPU."""
    return case.workload.name, case.world_size, case.requires.device


def fingerprint_cases(cases: list[Case]) -> tuple[list[Case], list[str]]:
    """The live cases a CPU machine records (issue 44's in-box setting), and the ids of those whose
    :func:`live_stratum` holds one label set: what the job *is* singles those out, which no draw of a recording
    changes (only a held-out split does); the rest are what the draw must make unrecognisable. A job that fails
    (a collective hang) is left out: its step log ends where it failed and its log says why, which is its
    symptom, read by diagnosis, not a recording's step count."""
    from diageval.recording.draw import drawable
    from diageval.recording.faults import FAULTS

    live = [c for c in cases if drawable(c) and c.requires.device != "cuda"
            and not any(getattr(FAULTS[f.name].load(), "fails_job", False) for f in c.faults)]
    labels: dict[tuple, set] = {}
    for c in live:
        labels.setdefault(live_stratum(c), set()).add(tuple(sorted(label.category for label in c.labels.causes)))
    alone = sorted(c.id for c in live if len(labels[live_stratum(c)]) == 1)
    return [c for c in live if c.id not in alone], alone


def fingerprint_lookup(public: list[Case], drawn: bool) -> Strategy:
    """Issue 44's fingerprint: a diagnoser shipping the public case files matches a live bundle's workload family,
    world size, device and step count (``drawn``: against every count the draw rule allows each case,
    :func:`~diageval.recording.draw.step_choices`; else the declared count) and, where every matching public case
    carries one label set, claims it at 1.0 on the labeled ranks the matches agree on."""
    from diageval.recording.draw import step_choices

    counts = {c.id: step_choices(c) if drawn else [c.workload.steps] for c in public}

    def diagnose(shown: Case) -> Diagnosis:
        matches = [c for c in public if live_stratum(c) == live_stratum(shown) and shown.workload.steps in counts[c.id]]
        sets = {tuple(sorted(label.category for label in c.labels.causes)) for c in matches}
        if len(sets) != 1 or not next(iter(sets)):
            return Diagnosis(findings=[])
        ranks = {tuple((label.category, tuple(label.ranks or ())) for label in c.labels.causes) for c in matches}
        return Diagnosis(findings=[_claim(label.category, 1.0, label.ranks if len(ranks) == 1 else None)
                                   for label in matches[0].labels.causes])
    return diagnose


def claimable_counts(live: list[Case]) -> list[tuple[tuple, int, list[str]]]:
    """Each (stratum, step count) a drawn recording may show at which every live case that could have made it carries
    one label set: where :func:`fingerprint_lookup` claims on drawn evidence, whatever the draw."""
    from diageval.recording.draw import step_choices

    makers: dict[tuple, list[Case]] = {}
    for c in live:
        for n in step_choices(c):
            makers.setdefault((live_stratum(c), n), []).append(c)
    out = []
    for (stratum, n), cs in sorted(makers.items()):
        sets = {tuple(sorted(label.category for label in c.labels.causes)) for c in cs}
        if len(sets) == 1 and next(iter(sets)):
            out.append((stratum, n, [c.id for c in cs]))
    return out


def fingerprint_gain(cases: list[Case], taxonomy: Taxonomy, seed: int | None) -> tuple[float, list[str]]:
    """The fingerprint's skill over null's on ``cases`` as recordings drawn from ``seed`` show them (None: as the
    case files declare them, the evidence before the draw), and the cases it claimed on."""
    from diageval.recording.draw import draw_for, drawn_case

    shown = [c if seed is None else drawn_case(c, draw_for(c, seed * 100_003 + i)) for i, c in enumerate(cases)]
    strategy = fingerprint_lookup(cases, drawn=seed is not None)
    skill = {}
    claimed = []
    for name, diagnose in (("cheat", strategy), ("null", lambda c: Diagnosis(findings=[]))):
        results = []
        for c in shown:
            diagnosis = diagnose(c)
            if name == "cheat" and diagnosis.findings:
                claimed.append(c.id)
            results.append(score_case(c, diagnosis, taxonomy=taxonomy))
        summary = summarize(results, diagnoser=DiagnoserInfo(spec=name, name=name), case_set_hash="builtin",
                            taxonomy_version=taxonomy.version, n_boot=0)
        skill[name] = summary.metrics.skill.value
    return skill["cheat"] - skill["null"], claimed


DRAW_SEED = 39
"""The seed of the value words the simulation's bundles show (one draw per case, as an assembly draws them)."""


def builtin_corpus(*, shown: bool = True) -> tuple[list[Case], Taxonomy]:
    """The built-in corpus; with ``shown`` each regression and fleet in the factor value words a bundle of it shows
    (drawn per case from :data:`DRAW_SEED`, :func:`diageval.recording.fleet.draw_values`), since a strategy reads the
    bundle and is scored in its words; else in the case files' own words."""
    import random

    from diageval.recording.fleet import draw_values

    case_set = load_case_set()
    cases = [lc.case for lc in case_set.cases]
    if shown:
        rng = random.Random(DRAW_SEED)
        cases = [c.with_shown_values(draw_values(c, rng)) if c.fleet is not None else c for c in cases]
    return cases, case_set.taxonomy


def summaries(n_boot: int = 0, on: list[Case] | None = None) -> list[tuple[Entry, Summary]]:
    """Every strategy's summary on the built-in corpus (or on the cases ``on``, a part of it: the strategies'
    rates still come from the whole corpus), in leaderboard order."""
    cases, taxonomy = builtin_corpus()
    out = []
    for entry in strategies(cases, taxonomy):
        results = [score_case(case, entry.strategy(case), taxonomy=taxonomy) for case in (cases if on is None else on)]
        info = DiagnoserInfo(spec=entry.name, name=entry.name)
        out.append((entry, summarize(results, diagnoser=info, case_set_hash="builtin", taxonomy_version=taxonomy.version,
                                     n_boot=n_boot)))
    return sorted(out, key=lambda es: rank_key(es[1]))


FLEET_KINDS = ("regression", "fleet")


def part_summaries(kinds: tuple[str, ...] = FLEET_KINDS, n_boot: int = 0) -> dict[str, Summary]:
    """Each label-blind strategy's summary over the built-in corpus' cases of ``kinds`` alone (against their own
    base rates, as the board's parts are), the strategy still built from the whole corpus."""
    cases, taxonomy = builtin_corpus()
    part = [c for c in cases if c.kind in kinds]
    out = {}
    for entry in strategies(cases, taxonomy):
        if entry.kind != "label-blind":
            continue
        results = [score_case(case, entry.strategy(case), taxonomy=taxonomy) for case in part]
        out[entry.name] = summarize(results, diagnoser=DiagnoserInfo(spec=entry.name, name=entry.name),
                                    case_set_hash="builtin", taxonomy_version=taxonomy.version, n_boot=n_boot)
    return out


def table(n_boot: int = 1000) -> str:
    rows = summaries(n_boot)
    cases, taxonomy = builtin_corpus()
    rates = base_rates(cases)
    strata = Counter(metadata_stratum(c) for c in cases)
    lines = [f"gaming table: {len(cases)} built-in cases, {len(taxonomy.causes)} taxonomy causes, ranked by the "
             "leaderboard's key (skill, then skill with rank credit); skill 0 = every cause at its base rate",
             f"null's skill from the labels alone: 1 - (Σ n_k + A + Σ F_f + L) / R = {null_skill(cases):.4f} "
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
    parts = part_summaries()
    part_cases = sum(c.kind in FLEET_KINDS for c in cases)
    lines += ["", f"the label-blind strategies on the {part_cases} regression and fleet cases alone (their own base "
                  "rates; ceiling 0.05)", "", "| strategy | skill | skill (ranks) |", "|---|---:|---:|"]
    for name, s in parts.items():
        m = s.metrics
        lines.append(f"| {name} | {m.skill.value:.3f} | {m.skill_ranked.value:.3f} |")
    lines += ["", differing_values_line(cases, taxonomy)]
    return "\n".join(lines)


def differing_values_line(cases: list[Case], taxonomy: Taxonomy) -> str:
    """Factor precision of "name the candidate's differing values" (each at 1.0, reading no trace) on the regressions
    whose candidate changes something, and how many changed values per regression (issue 39 item 2)."""
    regressions = [c for c in cases if c.kind == "regression" and changed_values(c)]
    results = [score_case(c, name_the_differing_values(c), taxonomy=taxonomy) for c in regressions]
    m = summarize(results, diagnoser=DiagnoserInfo(spec="differing", name="differing"), case_set_hash="builtin",
                  taxonomy_version=taxonomy.version, n_boot=0).metrics
    per_case = sum(len(changed_values(c)) for c in regressions) / len(regressions)
    return (f"name the candidate's differing values at 1.0, reading no trace, on {len(regressions)} regressions "
            f"({per_case:.2f} changed values each): factor P {m.factor_precision.value:.2f}, "
            f"factor R {m.factor_recall.value:.2f}")


if __name__ == "__main__":
    print(table())
