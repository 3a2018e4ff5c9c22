"""Score one case: a verdict on every cause claim, an outcome for every labeled cause.

The rules are design.md's "Scoring"; what it leaves open is decided here:

* A cause claim asserts its cause only at confidence >= :data:`~diageval.scoring.results.FOUND_CONFIDENCE`
  (0.5). Below that it says the cause is more likely absent than present: its verdict is ``hedge``, it
  finds nothing and misleads nobody, and it enters the proper score alone (its probability is an event of
  skill, Brier and calibration like any other). So recall, top-1, localisation, F1, detection limits,
  precision, the misleading and false-alarm rates count asserted claims only, and the top claim is the
  most confident asserted one. A claim at exactly 0.5 asserts.
* Claims are judged in descending confidence (ties: the order the diagnosis lists them), so when two
  claims name the same labeled cause the more confident one takes the credit and the other is a
  ``duplicate``. ``ClaimVerdict.index`` is the claim's position in ``diagnosis.findings``.
* On a healthy control (``expect: healthy``) every cause claim is a ``false_alarm``, a symptom named as
  a cause included: the run has nothing to diagnose, and the false-alarm rate counts exactly these.
* A claim naming any ``symptom.*`` id, a taxonomy symptom, or one of the case's labeled symptoms is a
  ``symptom_as_cause``. Any other category that is not a labeled cause is a ``wrong_cause``: an unknown
  id included (the reason says it is not in the taxonomy), and every cause claim on an
  ``expect: abstain`` case (its evidence is insufficient by design, so a cause claim is a guess; the
  reason says so).
* Ranks: a claim on a labeled category is ``correct`` when the label names no ranks, the claim names no
  ranks, or the claimed ranks are a non-empty subset of the labeled ranks; otherwise ``mislocated`` (still
  credited as found). Localisation is strict: a found cause whose label names ranks is ``localized`` only
  if its credited claim named a non-empty subset of the labeled ranks, so naming every rank of a one-rank
  cause is not localising it, and a diagnoser that never names ranks gets credit for the cause but not
  for localising it. Labels without ranks have ``localized = None`` (not applicable).
* When a case labels the same category twice (e.g. on different ranks), a claim takes the first
  uncredited label whose ranks it fits (subset), else the first uncredited one (``mislocated``); a claim for a
  category whose every label is already credited is a ``duplicate``. Only credited causes have
  duplicates: repeating a wrong claim repeats the mislead and each repeat is judged on its own.
* Step ranges are recorded but not scored: the design credits categories and ranks only.
* Grounding (issue 41): each labeled cause's outcome says whether the claim that found it cites evidence that
  overlaps where the fault acted (:mod:`diageval.scoring.grounding`): ``grounded`` True, False (missed, or
  found citing nothing or off the mark) or None (the label localises nothing to check a citation against).
  Grounding is judged beside the verdict and changes no verdict, count or forecast.
* ``ok`` versus ``abstained`` is read from the diagnosis (``abstain`` set or not), whatever status the
  caller passed. A diagnoser failure (``diagnoser_error``, ``timeout``, ``invalid_output``) has no
  diagnosis: no verdicts, and every labeled cause is missed. ``cap_hit`` (an agent stopped by a cap) is scored as
  an abstention whose reason names the cap, and keeps its status. ``harness_error`` and ``invalid`` cases are
  never scored: no verdicts and no outcomes.
* ``claimed_impact`` is the sum of the credited claims' ``impact`` (capped at 1; ``None`` if none of
  them states one): the measured impact is the whole injection's effect. Every claim keeps the impact it
  stated (``ClaimVerdict.impact``), so a wrong claim's stated impact is judged too (its true impact is 0;
  :mod:`diageval.scoring.tallies`).
* Forecasts (the events of the headline score, :class:`~diageval.scoring.results.Forecast`) are built by
  :func:`forecasts_of`; a failed diagnosis said nothing, so its forecasts are those of ``null``
  (every probability 0, no abstention).
* Factors (issue 24; regression and fleet cases). A claim's verdict is about its cause, as on one job: the
  factor value a finding names is judged apart, by the ``factor`` events of both scores (issue 39; one
  per factor value of the fleet a finding names or a label names: "the slowdown sits behind this value",
  whatever the cause) and by factor precision and recall (:mod:`diageval.scoring.tallies`). So a claim
  naming the right cause behind the wrong host is ``correct`` for its cause and a false factor statement;
  the wrong cause behind the right host is a wrong cause and a true factor statement; a symptom finding
  that names a factor value (a tool that localises a slowdown without naming its mechanism: change points,
  trace diffs) states that value at its confidence. An abstention's ``factors`` are judged by the
  ``aliased`` events: right where the case labels them aliased, false elsewhere.
* ``claimed_magnitude`` is the magnitude stated by the most confident asserted claim that states one
  (any verdict: a regression claimed on a noise-only pair is judged against the ratio measured there);
  the magnitude error compares it with the verification's measured ratio.

Size: ~400 lines: one case's verdicts, outcomes, forecasts and factor events read together (each rule above
is a few lines of the one pass over a diagnosis's claims); split, they would pass the same judged claims around.
"""

from __future__ import annotations

from diageval.cases.model import Case, CauseLabel
from diageval.cases.taxonomy import Taxonomy, is_symptom_id
from diageval.diagnosers.agent_record import Usage
from diageval.diagnosis import Abstention, Diagnosis, FactorRef, Finding, blamable_refs
from diageval.scoring.grounding import grounded
from diageval.scoring.results import (
    ABSTAINING_STATUSES,
    ANSWERED_STATUSES,
    FAILED_STATUSES,
    FOUND_CONFIDENCE,
    SCORING_VERSION,
    CaseResult,
    CauseOutcome,
    ClaimVerdict,
    EvidenceFacts,
    Forecast,
    Status,
)


def score_case(
    case: Case,
    diagnosis: Diagnosis | None,
    *,
    taxonomy: Taxonomy,
    status: Status = "ok",
    seconds: float | None = None,
    error: str | None = None,
    usage: Usage | None = None,
    evidence: EvidenceFacts = EvidenceFacts(),
) -> CaseResult:
    """Judge ``diagnosis`` against ``case``'s labels (see the module docstring for the rules). ``evidence``: what
    recording found the case's evidence to be, copied into the result; of it, ``shown_values`` (the factor value
    words the case's bundle showed, ``name=value`` -> drawn word, issue 39) is the one fact judged: the case is
    judged in them (:meth:`~diageval.cases.model.Case.with_shown_values`)."""
    case = case.with_shown_values(evidence.shown_values)
    if status in ABSTAINING_STATUSES:  # cap_hit: scored as an abstention naming the cap; the status stays
        if diagnosis is not None:
            raise ValueError(f"case {case.id}: status {status!r} means there is no diagnosis to score, yet one was given")
        diagnosis = Diagnosis(abstain=Abstention(reason=f"{status}: {error or 'no reason given'}"[:2000]))
    elif status in ANSWERED_STATUSES:
        if diagnosis is None:
            raise ValueError(f"case {case.id}: status {status!r} needs a diagnosis (got None)")
        status = "abstained" if diagnosis.abstain is not None else "ok"
    elif diagnosis is not None:
        raise ValueError(f"case {case.id}: status {status!r} means there is no diagnosis to score, yet one was given")

    base = dict(
        scoring_version=SCORING_VERSION,
        case_id=case.id,
        status=status,
        expect=case.labels.expect,
        difficulty=evidence.difficulty,
        evidence=case.evidence_kind,
        tags=list(case.tags),
        split=case.split,
        device_family=case.device_family,
        case_kind=case.kind,
        world_size=case.world_size,
        fleet_factors=len(fleet_values(case)),
        blamable=_slots(case),
        aliased=[factor_key(ref) for ref in case.labels.aliased],
        measured_magnitude=evidence.measured_magnitude,
        categories=[label.category for label in case.labels.causes],
        measured_impact=evidence.measured_impact,
        manifestation=evidence.manifestation,
        seconds=seconds,
        usage=usage,
        bundle_id=evidence.bundle_id,
        bundle_sha256=evidence.bundle_sha256,
        shown_values=dict(evidence.shown_values),
        rank_draw=evidence.rank_draw,
        error=error,
        taxonomy_causes=len(taxonomy.causes),
    )
    if status in FAILED_STATUSES:
        why = f"no diagnosis ({status}{': ' + error if error else ''})"
        outcomes = _with_grounding(case, [_missed(label, why) for label in case.labels.causes], {})
        return CaseResult(**base, outcomes=outcomes, forecasts=forecasts_of(case, [], None, taxonomy))
    if diagnosis is None:  # harness_error or invalid: never scored
        return CaseResult(**base)

    claims = sorted(
        ((i, f) for i, f in enumerate(diagnosis.findings) if f.kind == "cause"),
        key=lambda item: (-item[1].confidence, item[0]),
    )
    verdicts, credit = _judge_claims(case, claims, taxonomy)
    outcomes = _outcomes(case, diagnosis, verdicts, credit, claims)
    asserted = [f for _, f in claims if f.confidence >= FOUND_CONFIDENCE]

    credited_impacts = [f.impact for i, f in claims if i in credit.values() and f.impact is not None]
    magnitudes = [f.magnitude for f in asserted if f.magnitude is not None]
    return CaseResult(
        **base,
        verdicts=verdicts,
        outcomes=outcomes,
        observed_symptoms=[f.category for f in diagnosis.findings if f.kind == "symptom"],
        abstained=diagnosis.abstain is not None,
        abstain_reason=diagnosis.abstain.reason if diagnosis.abstain else None,
        top_claim=asserted[0].category if asserted else None,
        claimed_impact=min(1.0, sum(credited_impacts)) if credited_impacts else None,
        claimed_magnitude=magnitudes[0] if magnitudes else None,
        forecasts=forecasts_of(case, [f for _, f in claims], diagnosis.abstain, taxonomy,
                               [f for f in diagnosis.findings if f.factor is not None]),
    )


def _judge_claims(
    case: Case, claims: list[tuple[int, Finding]], taxonomy: Taxonomy
) -> tuple[list[ClaimVerdict], dict[int, int]]:
    """Verdicts in judging order, and which claim (finding index) credited which label (label index)."""
    labels = case.labels.causes
    credit: dict[int, int] = {}  # label index -> finding index
    verdicts: list[ClaimVerdict] = []

    for index, claim in claims:
        def verdict(kind: str, reason: str) -> None:
            verdicts.append(ClaimVerdict(index=index, category=claim.category, verdict=kind, confidence=claim.confidence,
                                         ranks=claim.ranks, impact=claim.impact,
                                         factor=factor_key(claim.factor) if claim.factor else None, reason=reason))

        cat = claim.category
        if claim.confidence < FOUND_CONFIDENCE:
            verdict("hedge", f"confidence {claim.confidence:.2f} < {FOUND_CONFIDENCE}: states that {cat} is more likely "
                             "absent; scored by the proper score (skill, Brier) alone, never found or misleading")
            continue
        if case.labels.expect == "healthy":
            verdict("false_alarm", f"the run is a healthy control: no cause is present, yet {cat} was claimed")
            continue
        if is_symptom_id(cat) or taxonomy.kind_of(cat) == "symptom" or cat in case.labels.symptoms:
            labeled = " (a labeled symptom of this case)" if cat in case.labels.symptoms else ""
            verdict("symptom_as_cause", f"{cat} is a symptom{labeled}, not a cause")
            continue
        matching = [li for li, label in enumerate(labels) if label.category == cat]
        if not matching:
            verdict("wrong_cause", _wrong_cause_reason(case, cat, taxonomy))
            continue
        open_labels = [li for li in matching if li not in credit]
        if not open_labels:
            first = credit[matching[0]]
            verdict("duplicate", f"{cat} was already credited to claim #{first}; neither credit nor penalty")
            continue
        fitting = [li for li in open_labels if _ranks_fit(labels[li], claim)]
        if fitting:
            li = fitting[0]
            credit[li] = index
            verdict("correct", f"{cat} is a labeled cause{_rank_note(labels[li], claim)}")
        else:
            li = open_labels[0]
            credit[li] = index
            verdict("mislocated", f"{cat} is a labeled cause, but claimed ranks {claim.ranks} are not a subset of "
                                  f"labeled ranks {labels[li].ranks}; credited as found, not localised")
    return verdicts, credit


def _ranks_fit(label: CauseLabel, claim: Finding) -> bool:
    """The claim does not contradict the label's ranks: either names none, or the claim's are a subset."""
    if label.ranks is None or not claim.ranks:
        return True
    return set(claim.ranks) <= set(label.ranks)


def localizes(label: CauseLabel, claim_ranks: list[int] | None) -> bool:
    """Strict localisation: the claim names ranks and every one of them is a labeled rank."""
    return label.ranks is not None and bool(claim_ranks) and set(claim_ranks) <= set(label.ranks)


def _rank_note(label: CauseLabel, claim: Finding) -> str:
    if label.ranks is None:
        return " (the label names no ranks)"
    if not claim.ranks:
        return f" (the claim names no ranks; labeled ranks {label.ranks}, so not localised)"
    return f"; claimed ranks {claim.ranks} are among labeled ranks {label.ranks}"


def _wrong_cause_reason(case: Case, category: str, taxonomy: Taxonomy) -> str:
    if taxonomy.kind_of(category) is None:
        return f"{category} is not in taxonomy {taxonomy.version}"
    if case.labels.expect == "abstain":
        return f"the evidence is insufficient by design (expect: abstain), so claiming {category} is a guess"
    labeled = ", ".join(label.category for label in case.labels.causes)
    return f"{category} is not a labeled cause of this case (labeled: {labeled})"


def _missed(label: CauseLabel, why: str) -> CauseOutcome:
    return CauseOutcome(category=label.category, ranks=label.ranks, factor=_label_factor(label), outcome="missed",
                        reason=f"missed: {why}")


def factor_key(ref: FactorRef) -> str:
    """How a factor value is written in results and event ids: ``name=value``."""
    return f"{ref.name}={ref.value}"


def _label_factor(label: CauseLabel) -> str | None:
    return factor_key(label.factor) if label.factor is not None else None


def fleet_values(case: Case) -> list[FactorRef]:
    """Every (factor, value) pair of the case's runs: what a forecast over the fleet's factor values ranges over
    (none for one job's evidence)."""
    if case.fleet is None:
        return []
    return sorted({FactorRef(name=k, value=v) for run in case.fleet.runs for k, v in run.metadata.items()},
                  key=lambda ref: (ref.name, ref.value))


def blamable_values(case: Case) -> list[FactorRef]:
    """The factor values the case could blame, read from its runs alone (no label): the possible answers to
    "where", which the factor climatology ranges over (docs/scoring.md). A value held by every run cannot set
    slow runs apart from fast ones, and on a regression only the candidate can be slow, so a value is
    blamable when some run lacks it and (regression) the candidate holds it. None for one job's evidence."""
    return blamable_refs(case.fleet.runs) if case.fleet is not None else []


def _slots(case: Case) -> list[str]:
    """The factor climatology's slots of the case: its blamable values and every value a label blames (a label
    is a possible answer by definition; the built-in corpus' labels are all blamable already)."""
    labeled = {label.factor for label in case.labels.causes if label.factor is not None}
    return sorted({factor_key(ref) for ref in blamable_values(case)} | {factor_key(ref) for ref in labeled})


def _outcomes(
    case: Case,
    diagnosis: Diagnosis,
    verdicts: list[ClaimVerdict],
    credit: dict[int, int],
    claims: list[tuple[int, Finding]],
) -> list[CauseOutcome]:
    by_index = {v.index: v for v in verdicts}
    claimed = sorted({f.category for _, f in claims if f.confidence >= FOUND_CONFIDENCE})
    hedged = {}
    for _, f in claims:
        if f.confidence < FOUND_CONFIDENCE:
            hedged.setdefault(f.category, f.confidence)
    outcomes = []
    for li, label in enumerate(case.labels.causes):
        if li in credit:
            v = by_index[credit[li]]
            localized = None if label.ranks is None else localizes(label, v.ranks)
            where = ""
            if localized is True:
                where = f", ranks {v.ranks} are among labeled ranks {label.ranks}"
            elif localized is False:
                where = (f", but its ranks {v.ranks} are not a subset of labeled ranks {label.ranks}" if v.ranks
                         else f", but it names no ranks (labeled ranks {label.ranks})")
            outcomes.append(CauseOutcome(category=label.category, ranks=label.ranks, factor=_label_factor(label),
                                         outcome="found",
                                         localized=localized, claim_index=v.index, claimed_ranks=v.ranks,
                                         reason=f"found by claim #{v.index} ({v.verdict}, confidence {v.confidence:.2f}){where}"))
        elif diagnosis.abstain is not None:
            outcomes.append(_missed(label, f"the diagnoser abstained ({diagnosis.abstain.reason})"))
        elif label.category in hedged:
            outcomes.append(_missed(label, f"only a hedge names {label.category} (confidence "
                                           f"{hedged[label.category]:.2f} < {FOUND_CONFIDENCE})"))
        elif not claimed:
            outcomes.append(_missed(label, f"the diagnoser claimed no cause at confidence >= {FOUND_CONFIDENCE}"))
        else:
            outcomes.append(_missed(label, f"no claim names {label.category} (claimed: {', '.join(claimed)})"))
    return _with_grounding(case, outcomes, dict(claims))


def _with_grounding(case: Case, outcomes: list[CauseOutcome], findings: dict[int, Finding]) -> list[CauseOutcome]:
    """Each outcome (in label order) with whether its cause is grounded (a missed one: False where checkable)."""
    out = []
    for o, label in zip(outcomes, case.labels.causes):
        cites = findings[o.claim_index].cites if o.claim_index is not None else None
        verdict = grounded(case, label, cites)
        out.append(o.model_copy(update={"grounded": verdict if o.outcome == "found" or verdict is None else False}))
    return out


def forecasts_of(case: Case, claims: list[Finding], abstention: Abstention | None, taxonomy: Taxonomy,
                 factor_findings: list[Finding] = ()) -> list[Forecast]:
    """The events of the headline score for one case (see :class:`~diageval.scoring.results.Forecast`).

    * One ``cause`` event per taxonomy cause that is labeled or claimed: probability = the highest
      confidence any claim gives it (0 if unclaimed), outcome = labeled.
    * One ``not_a_cause`` event per other id claimed as a cause (a symptom, an id outside the taxonomy):
      a false event at its highest confidence.
    * One ``rank`` event per (cause, rank), in the rank-credited score only, for each taxonomy cause that
      no label of the case names without ranks (a label without ranks means all ranks, or a cause that is
      not rank-specific: its ranks are not judged): one per rank a claim on the cause names or a label of
      it names; probability = the highest confidence of the claims on the cause that name the rank (a
      claim naming no ranks states nothing about ranks), outcome = a label of the cause names the rank.
      So naming every rank of an 8-rank job at 0.5 is eight statements, seven of them false.
    * One ``factor`` event per factor value that a finding (cause or symptom: ``factor_findings``) names or a
      label names, in both scores: probability = the highest confidence of the findings
      naming it, outcome = a label of the case sits behind it (any cause: the cause is judged by its own
      events). So naming every host of a fleet is as many statements as hosts, all but one false.
    * One ``aliased`` event per factor value the abstention names or the case labels aliased, in both
      scores: probability 1 when the diagnosis abstained naming it, else 0; outcome =
      labeled aliased.
    * One ``abstain`` event: probability 1 when the diagnoser abstained, else 0; outcome = the case
      expects abstention.

    ``claims`` are the cause claims (``kind: cause``) at every confidence; a healthy control has no labeled
    cause, so every claim on it is probability on a false event. Events are sorted by kind then id, so
    equal inputs give equal lists.
    """
    causes = set(taxonomy.causes)
    labels: dict[str, list[CauseLabel]] = {}
    for label in case.labels.causes:
        labels.setdefault(label.category, []).append(label)
    highest: dict[str, float] = {}
    for claim in claims:
        highest[claim.category] = max(highest.get(claim.category, 0.0), claim.confidence)

    out: list[Forecast] = []
    for cat in sorted(set(labels) | set(highest)):
        p = highest.get(cat, 0.0)
        kind = "cause" if cat in causes or cat in labels else "not_a_cause"
        out.append(Forecast(kind=kind, event=cat, probability=p, ranked_probability=p, outcome=cat in labels))
        if kind == "cause" and not any(label.ranks is None for label in labels.get(cat, [])):
            out += _rank_events(cat, labels.get(cat, []), [c for c in claims if c.category == cat])
    out += _factor_events(case, factor_findings)
    named = {factor_key(ref) for ref in abstention.factors} if abstention is not None else set()
    aliased = {factor_key(ref) for ref in case.labels.aliased}
    out += [Forecast(kind="aliased", event=f"aliased@{key}", probability=1.0 if key in named else 0.0,
                     ranked_probability=1.0 if key in named else 0.0, outcome=key in aliased)
            for key in sorted(named | aliased)]
    a = 1.0 if abstention is not None else 0.0
    out.append(Forecast(kind="abstain", event="abstain", probability=a, ranked_probability=a,
                        outcome=case.labels.expect == "abstain"))
    order = {"cause": 0, "rank": 1, "factor": 2, "aliased": 3, "not_a_cause": 4, "abstain": 5}
    return sorted(out, key=lambda f: (order[f.kind], f.event))


def _rank_events(category: str, labels: list[CauseLabel], claims: list[Finding]) -> list[Forecast]:
    """The (cause, rank) events of one cause whose labels (if any) all name ranks."""
    labeled = {r for label in labels for r in label.ranks or ()}
    stated: dict[int, float] = {}
    for claim in claims:
        for r in claim.ranks or ():
            stated[r] = max(stated.get(r, 0.0), claim.confidence)
    return [Forecast(kind="rank", event=f"{category}@{r}", probability=0.0, ranked_probability=stated.get(r, 0.0),
                     outcome=r in labeled)
            for r in sorted(labeled | set(stated))]


def _factor_events(case: Case, findings: list[Finding]) -> list[Forecast]:
    """The factor-value events: one per value a finding names or a label of the case names."""
    labeled = {factor_key(label.factor) for label in case.labels.causes if label.factor is not None}
    stated: dict[str, float] = {}
    for f in findings:
        if f.factor is not None:
            key = factor_key(f.factor)
            stated[key] = max(stated.get(key, 0.0), f.confidence)
    return [Forecast(kind="factor", event=f"factor@{key}", probability=stated.get(key, 0.0),
                     ranked_probability=stated.get(key, 0.0), outcome=key in labeled)
            for key in sorted(labeled | set(stated))]
