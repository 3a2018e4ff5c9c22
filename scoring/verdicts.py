"""Score one case: a verdict on every cause claim, an outcome for every labeled cause.

The rules are design.md's "Scoring"; what it leaves open is decided here:

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
  ranks, or both name ranks and they overlap; otherwise ``mislocated`` (still credited as found).
  Localisation is stricter: a found cause whose label names ranks is ``localized`` only if its credited
  claim named overlapping ranks, so a diagnoser that never names ranks gets credit for the cause but
  not for localising it. Labels without ranks have ``localized = None`` (not applicable).
* When a case labels the same category twice (e.g. on different ranks), a claim takes the first
  uncredited label whose ranks it overlaps, else the first uncredited one (``mislocated``); a claim for a
  category whose every label is already credited is a ``duplicate``. Only credited causes have
  duplicates: repeating a wrong claim repeats the mislead and each repeat is judged on its own.
* Step ranges are recorded but not scored: the design credits categories and ranks only.
* ``ok`` versus ``abstained`` is read from the diagnosis (``abstain`` set or not), whatever status the
  caller passed. A diagnoser failure (``diagnoser_error``, ``timeout``, ``invalid_output``) has no
  diagnosis: no verdicts, and every labeled cause is missed. ``harness_error`` and ``invalid`` cases are
  never scored: no verdicts and no outcomes.
* ``claimed_impact`` is the sum of the credited claims' ``impact`` (capped at 1; ``None`` if none of
  them states one): the measured impact is the whole injection's effect, and only right claims are
  compared with it.
"""

from __future__ import annotations

from diageval.cases.model import Case, CauseLabel
from diageval.cases.taxonomy import Taxonomy, is_symptom_id
from diageval.diagnosis import Diagnosis, Finding
from diageval.scoring.results import (
    ANSWERED_STATUSES,
    FAILED_STATUSES,
    CaseResult,
    CauseOutcome,
    ClaimVerdict,
    Status,
)


def score_case(
    case: Case,
    diagnosis: Diagnosis | None,
    *,
    taxonomy: Taxonomy,
    status: Status = "ok",
    measured_impact: float | None = None,
    seconds: float | None = None,
    error: str | None = None,
    bundle_id: str | None = None,
    bundle_sha256: str | None = None,
) -> CaseResult:
    """Judge ``diagnosis`` against ``case``'s labels (see the module docstring for the rules)."""
    if status in ANSWERED_STATUSES:
        if diagnosis is None:
            raise ValueError(f"case {case.id}: status {status!r} needs a diagnosis (got None)")
        status = "abstained" if diagnosis.abstain is not None else "ok"
    elif diagnosis is not None:
        raise ValueError(f"case {case.id}: status {status!r} means there is no diagnosis to score, yet one was given")

    base = dict(
        case_id=case.id,
        status=status,
        expect=case.labels.expect,
        difficulty=case.difficulty,
        tags=list(case.tags),
        categories=[label.category for label in case.labels.causes],
        measured_impact=measured_impact,
        seconds=seconds,
        bundle_id=bundle_id,
        bundle_sha256=bundle_sha256,
        error=error,
    )
    if status in FAILED_STATUSES:
        why = f"no diagnosis ({status}{': ' + error if error else ''})"
        outcomes = [_missed(label, why) for label in case.labels.causes]
        return CaseResult(**base, outcomes=outcomes)
    if diagnosis is None:  # harness_error or invalid: never scored
        return CaseResult(**base)

    claims = sorted(
        ((i, f) for i, f in enumerate(diagnosis.findings) if f.kind == "cause"),
        key=lambda item: (-item[1].confidence, item[0]),
    )
    verdicts, credit = _judge_claims(case, claims, taxonomy)
    outcomes = _outcomes(case, diagnosis, verdicts, credit, claims)

    credited_impacts = [f.impact for i, f in claims if i in credit.values() and f.impact is not None]
    return CaseResult(
        **base,
        verdicts=verdicts,
        outcomes=outcomes,
        observed_symptoms=[f.category for f in diagnosis.findings if f.kind == "symptom"],
        abstained=diagnosis.abstain is not None,
        abstain_reason=diagnosis.abstain.reason if diagnosis.abstain else None,
        top_claim=claims[0][1].category if claims else None,
        claimed_impact=min(1.0, sum(credited_impacts)) if credited_impacts else None,
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
            verdicts.append(ClaimVerdict(index=index, category=claim.category, verdict=kind,
                                         confidence=claim.confidence, ranks=claim.ranks, reason=reason))

        cat = claim.category
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
            verdict("mislocated", f"{cat} is a labeled cause, but claimed ranks {claim.ranks} miss labeled ranks "
                                  f"{labels[li].ranks}; credited as found, not localised")
    return verdicts, credit


def _ranks_fit(label: CauseLabel, claim: Finding) -> bool:
    if label.ranks is None or claim.ranks is None:
        return True
    return bool(set(label.ranks) & set(claim.ranks))


def _rank_note(label: CauseLabel, claim: Finding) -> str:
    if label.ranks is None:
        return " (the label names no ranks)"
    if claim.ranks is None:
        return f" (the claim names no ranks; labeled ranks {label.ranks}, so not localised)"
    return f"; claimed ranks {claim.ranks} overlap labeled ranks {label.ranks}"


def _wrong_cause_reason(case: Case, category: str, taxonomy: Taxonomy) -> str:
    if taxonomy.kind_of(category) is None:
        return f"{category} is not in taxonomy {taxonomy.version}"
    if case.labels.expect == "abstain":
        return f"the evidence is insufficient by design (expect: abstain), so claiming {category} is a guess"
    labeled = ", ".join(label.category for label in case.labels.causes)
    return f"{category} is not a labeled cause of this case (labeled: {labeled})"


def _missed(label: CauseLabel, why: str) -> CauseOutcome:
    return CauseOutcome(category=label.category, ranks=label.ranks, outcome="missed", reason=f"missed: {why}")


def _outcomes(
    case: Case,
    diagnosis: Diagnosis,
    verdicts: list[ClaimVerdict],
    credit: dict[int, int],
    claims: list[tuple[int, Finding]],
) -> list[CauseOutcome]:
    by_index = {v.index: v for v in verdicts}
    claimed = sorted({f.category for _, f in claims})
    outcomes = []
    for li, label in enumerate(case.labels.causes):
        if li in credit:
            v = by_index[credit[li]]
            localized = None if label.ranks is None else (v.verdict == "correct" and v.ranks is not None)
            where = ""
            if localized is True:
                where = f", ranks {v.ranks} overlap labeled ranks {label.ranks}"
            elif localized is False:
                where = (f", but its ranks {v.ranks} miss labeled ranks {label.ranks}" if v.ranks is not None
                         else f", but it names no ranks (labeled ranks {label.ranks})")
            outcomes.append(CauseOutcome(category=label.category, ranks=label.ranks, outcome="found",
                                         localized=localized, claim_index=v.index,
                                         reason=f"found by claim #{v.index} ({v.verdict}, confidence {v.confidence:.2f}){where}"))
        elif diagnosis.abstain is not None:
            outcomes.append(_missed(label, f"the diagnoser abstained ({diagnosis.abstain.reason})"))
        elif not claims:
            outcomes.append(_missed(label, "the diagnoser claimed no cause"))
        else:
            outcomes.append(_missed(label, f"no claim names {label.category} (claimed: {', '.join(claimed)})"))
    return outcomes
