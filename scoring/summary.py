"""Aggregate a run's CaseResults into ``summary.json``: counts, metrics with intervals, breakdowns.

Size: the model of ``summary.json`` (each section with the field descriptions its JSON Schema carries) and
the one small function that fills each section; they change together.

Decided here (the design is silent):

* Cases are sorted by id before resampling, so the intervals do not depend on the order results were
  appended to ``results.jsonl`` (parallel runs finish in any order). A case id that appears twice is an
  error, not something to average over.
* ``by_category`` covers every cause labeled in at least one scored case: recall and localisation over
  that cause's labels, precision over the claims naming it, F1 from those, each with its own interval
  from the same resamples as the overall metrics.
* ``by_evidence`` does the same over injected cases (reproduced on this machine, verified against their
  healthy twin) and recorded ones (real jobs' traces, labeled from measurements), so the two are seen
  apart as well as together.
* ``reference`` says what skill 0 is on this run: the climatological forecast (every cause at the share
  of the scored cases labeled with it, every value a case could blame at its factor's base rate, never
  abstaining), its loss R = Σ_k n_k (1 − n_k / N) + A + Σ_f F_f (1 − F_f / M_f) + L from the label counts, and
  null's loss and skill beside it (null scores 1 − (Σ_k n_k + A + Σ_f F_f + L) / R < 0).
* ``by_family`` is skill over the events of each cause family's causes (``comm``, ``compute``, ...), every
  case included (a false alarm of the family on a healthy control counts in it), relative to the
  family's own climatology Σ_{k in family} n_k (1 − n_k / N); families are those labeled or claimed.
* ``by_split`` repeats the full metric set over the cases of each split (a case's ``split:``; cases
  without one form the split ``(no split)``), when some case names a split, and ``split_gaps`` gives per
  split the skill over its cases minus the skill over the run's other cases, with the hull of the BCa and
  jackknife-t intervals of that difference over the same resamples (a diagnoser that generalises has a
  gap whose interval holds 0).
* ``by_kind`` repeats the full metric set over the cases of each case kind (``job``, ``regression``,
  ``fleet``), when the run holds more than one: where in a fleet (the factor events) is judged on the
  regression and fleet cases, and a reader sees it there apart from the jobs.
* ``by_device`` repeats the full metric set over the cases of each device family of the evidence (a
  case's ``device_family``: cpu, nvidia, amd, mtia, unknown), so a reader sees whether a diagnoser's skill
  on the CPU cases recorded here carries over to real GPU jobs.
* ``by_difficulty`` repeats the full metric set over the scored cases of each difficulty, in the same
  resamples as the overall metrics (each resample of the run, restricted to that difficulty's cases:
  the usual bootstrap of a sub-population, whose size varies from resample to resample as it would
  from corpus to corpus).
* ``reliability`` is the calibration table over every (case, taxonomy cause) pair: pairs stated at
  probability 0 (unclaimed) in a bin of their own, then ten equal-width bins over (0, 1]; per bin the
  pairs, their mean stated probability and the share of them that are labeled causes.
* ``detection`` is, per labeled cause, recall as a function of the measured impact (every case of that
  cause with a measured impact: its impact and whether it was found) and the detection limit with its
  interval, as :mod:`diageval.scoring.detection` defines it (the one definition the board and the HTML
  page show too): the impact where the isotonic found-rate curve crosses 50%. Fewer than
  :data:`DETECTION_MIN_CASES` cases and the limit is undefined (null) and says why.
* The confusion matrix has one entry per scored case: true = the labeled cause the top claim names if
  it names one, else the case's first labeled cause, or ``none`` for healthy and abstain cases;
  predicted = the top (highest-confidence) cause claim, or ``none`` when the diagnoser claimed no cause
  (abstained, failed, or said nothing). Labels are every category on either axis, sorted, then ``none``.
* ``schema_version`` 4 (this code) adds the factor metrics (factor precision and recall, magnitude error;
  issue 24); 3 measures skill against climatology instead of ``null`` and adds the
  reference, the per-family and per-split views; version 2 replaced version 1's headline (F1, then
  misleading rate) with skill. Reading an older summary fails with a message that says to re-score the
  run (``diageval score RUN_DIR``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from diageval.scoring.detection import DETECTION_MIN_CASES, detection_limit
from diageval.scoring.intervals import CONFIDENCE_LEVEL, clip_interval, jeffreys, ratio_interval
from diageval.scoring.metrics import (
    METRICS,
    MetricSpec,
    MetricValue,
    Resampled,
    category_metrics,
    family_skill,
    metrics_model,
)
from diageval.scoring.repeats import RepeatsSummary, summarize_repeats
from diageval.scoring.results import CaseResult
from diageval.scoring.tallies import (
    CALIBRATION_BINS,
    DEFECT_TAG,
    REFERENCE,
    REFERENCE_RANKED,
    TallyTable,
    category_column,
    cause_family,
    tally_table,
)

SCHEMA_VERSION = 4
DIFFICULTIES = ("easy", "medium", "hard")
NONE_LABEL = "none"
NO_SPLIT = "(no split)"
"""The split of the cases that name none (a split name cannot hold parentheses or spaces)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DiagnoserInfo(_Model):
    spec: str = Field(description="What --diagnoser was given")
    name: str
    version: str | None = None
    reference: bool = Field(False, description="A baseline (null, prior, symptoms, leak) or self-test")
    self_test: bool = Field(False, description="Reads labels (the oracle): shown, never ranked")
    isolation: Literal["bwrap", "none"] | None = Field(
        None, description="bwrap: the diagnoser ran sandboxed; none: it could read every file the user can (run.json says why)"
    )
    claims: list[str] | None = Field(None, description="Taxonomy ids of the causes it can claim; None = undeclared")


class Counts(_Model):
    cases: int = Field(description="Results in the run")
    scored: int = Field(description="Cases the metrics cover (every status but harness_error and invalid)")
    invalid: int = Field(description="Evidence that does not hold its label (an injection that did not manifest, a healthy control showing a cause): never scored")
    statuses: dict[str, int]
    expect: dict[str, int] = Field(description="Scored cases by what they expect: diagnose, healthy, abstain")


Metrics = metrics_model()
"""One field per metric of :data:`~diageval.scoring.metrics.METRICS`, in its order."""


class CategoryBreakdown(_Model):
    causes: int = Field(description="Labeled causes of this category in scored cases")
    claims: int = Field(description="Non-duplicate claims naming it")
    recall: MetricValue
    precision: MetricValue
    f1: MetricValue
    localization_accuracy: MetricValue


class SubsetBreakdown(_Model):
    """The full metric set over a subset of the scored cases (one difficulty, or one kind of evidence)."""

    cases: int
    metrics: Metrics


def _breakdowns(subsets: dict[str, Resampled]) -> dict[str, SubsetBreakdown]:
    """The full metric set over each named subset of the scored cases (its resampled table)."""
    return {name: SubsetBreakdown(cases=len(subset.table), metrics=Metrics(**subset.metrics()))
            for name, subset in subsets.items()}


class FamilyBreakdown(_Model):
    labeled: int = Field(description="Scored cases labeled with a cause of this family (a case once per cause)")
    skill: MetricValue = Field(description="Skill over the events of the family's causes, against the family's "
                                           "climatology")


class Reference(_Model):
    """What skill 0 is on this run: the climatological forecast over its scored cases."""

    cases: int = Field(description="N: scored cases")
    abstain_cases: int = Field(description="A: scored cases that expect abstention")
    labeled: dict[str, int] = Field(description="n_k: scored cases labeled with cause k (once per case)")
    loss: float = Field(description="R = Σ_k n_k (1 − n_k / N) + A + Σ_f F_f (1 − F_f / M_f) + L: the loss of "
                                    "stating every cause at its base rate n_k / N and every factor value a case could "
                                    "blame at its factor's base rate F_f / M_f on every case, never abstaining (skill 0)")
    loss_ranked: float = Field(description="The same for the rank-credited score, plus Σ_(k,r) P_kr (1 − P_kr / M_kr) "
                                           "per (cause, rank position) (skill (ranks) 0)")
    null_loss: float = Field(description="What saying nothing loses: Σ_k n_k + A + Σ_f F_f + L")
    null_skill: float | None = Field(description="1 − null_loss / loss: below 0 whenever a cause is labeled on "
                                                 "some but not all cases; null when loss is 0")


class Confusion(_Model):
    labels: list[str] = Field(description="Row and column labels; 'none' = no cause")
    matrix: list[list[int]] = Field(description="matrix[i][j]: cases whose true cause is labels[i] and top claim labels[j]")


class ReliabilityBin(_Model):
    lo: float = Field(description="Stated probabilities in (lo, hi]; the first bin is exactly 0")
    hi: float
    pairs: int = Field(description="(case, taxonomy cause) pairs stated in this bin")
    mean_probability: float | None = Field(description="Their mean stated probability; null when empty")
    observed: float | None = Field(description="The share of them that are labeled causes; null when empty")


class ImpactPoint(_Model):
    case_id: str
    impact: float = Field(description="The case's measured impact (fraction of step time)")
    found: bool


class Detection(_Model):
    cases: int = Field(description="Cases of this cause with a measured impact")
    limit: float | None = Field(description="The measured impact where the isotonic found-rate curve crosses 50% "
                                            "(state measured); the smallest case's impact (below), the largest's "
                                            "(not_reached); null when undefined")
    state: Literal["measured", "below", "not_reached", "undefined"] | None = Field(
        None, description="measured; below (the curve is at 50% from the smallest case); not_reached (never 50%); "
                          "undefined (too few cases). Null in a summary written before the limit had a state")
    ci: tuple[float, float | None] | None = Field(
        None, description="95% interval of the limit (inverted binomial tests, diageval.scoring.detection); an "
                          "upper end of null: not reached")
    recall_above: float | None = Field(description="Recall over the cases at impact >= limit (measured limits)")
    note: str = Field(description="How the limit was found, or why it is undefined")
    points: list[ImpactPoint] = Field(description="Recall as a function of impact: every case, by impact")


class BootstrapInfo(_Model):
    resamples: int
    seed: int
    level: float = CONFIDENCE_LEVEL
    unit: str = "case"
    intervals: str = ("Jeffreys at the effective sample size for proportions; for other ratios the hull of the BCa "
                      "bootstrap over cases, the jackknife-t interval and (for the metrics that judge diagnoses) the "
                      "bootstrap with a pseudo-case at each end, clipped to the metric's range")


class Summary(_Model):
    schema_version: Literal[4] = SCHEMA_VERSION
    diagnoser: DiagnoserInfo
    case_set_hash: str
    taxonomy_version: str
    counts: Counts
    metrics: Metrics
    by_category: dict[str, CategoryBreakdown]
    by_difficulty: dict[str, SubsetBreakdown]
    by_evidence: dict[str, SubsetBreakdown] = Field(
        default_factory=dict, description="injected (reproduced and verified) and recorded (real jobs' traces, "
        "measured) cases apart; the headline metrics are over both together")
    reference: Reference
    by_family: dict[str, FamilyBreakdown] = Field(
        description="Skill per cause family (the id's first segment), every case included")
    by_split: dict[str, SubsetBreakdown] = Field(
        description="The full metric set per split (the cases' `split:`); empty when no case names a split")
    by_device: dict[str, SubsetBreakdown] = Field(
        default_factory=dict, description="The full metric set per device family of the evidence (cpu, nvidia, amd, "
        "mtia, unknown: a case's `device_family`)")
    by_kind: dict[str, SubsetBreakdown] = Field(
        default_factory=dict, description="The full metric set per case kind (job, regression, fleet), when the run "
        "holds more than one")
    by_tag: dict[str, SubsetBreakdown] = Field(
        default_factory=dict, description="The full metric set over the cases of each part tag (`defect`: evidence "
        "present but wrong), when some case carries it")
    split_gaps: dict[str, MetricValue] = Field(
        description="Per split: skill over its cases minus skill over the run's other cases, with the interval "
                    "of that difference (n: the split's cases); empty with fewer than two splits")
    reliability: list[ReliabilityBin]
    detection: dict[str, Detection]
    confusion: Confusion
    bootstrap: BootstrapInfo
    recall_claimable: MetricValue | None = Field(
        None, description="Recall over the labeled causes the diagnoser declares it can claim (its field); null "
        "when it declares none. Beside recall over all causes, it judges a narrow tool on its field and "
        "keeps the gap visible")
    repeats: RepeatsSummary | None = Field(
        None, description="A run of --repeats K > 1: skill over the repeats with its interval over cases, each "
        "case's verdict (stable, flaky, catastrophic) and the consistency (diageval.scoring.repeats); null for one "
        "repeat. Every other section is the first repeat's (results.jsonl)")

    @model_validator(mode="before")
    @classmethod
    def _current_schema(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(f"summary schema version {data.get('schema_version')!r}, this diageval reads "
                             f"{SCHEMA_VERSION} (factor metrics): re-score the run with `diageval score RUN_DIR`")
        return data


PART_TAGS: tuple[str, ...] = (DEFECT_TAG,)
"""Tags whose cases are a part of the board of their own (``by_tag``)."""


def _resampled(scored: list[CaseResult], categories: list[str], n_boot: int, seed: int) -> Resampled:
    """The tally table of scored results (sorted by case id) and its bootstrap resamples."""
    return Resampled(tally_table(scored, categories), n_boot, seed)


def headline_metrics(results: list[CaseResult], *, n_boot: int = 1000, seed: int = 0) -> Metrics:
    """The run's metrics with their intervals, exactly as :func:`summarize` computes them, without the
    breakdowns (the interval-coverage simulation needs thousands of these)."""
    scored = sorted((r for r in results if r.scored), key=lambda r: r.case_id)
    categories = sorted({c for r in scored for c in r.categories})
    return Metrics(**_resampled(scored, categories, n_boot, seed).metrics())


def summarize(
    results: list[CaseResult],
    *,
    diagnoser: DiagnoserInfo,
    case_set_hash: str,
    taxonomy_version: str,
    n_boot: int = 1000,
    seed: int = 0,
    more_repeats: list[list[CaseResult]] | None = None,
) -> Summary:
    """Counts, every metric with its bootstrap interval, per-category and per-difficulty breakdowns and the
    confusion matrix of a run's results (see the module docstrings for definitions). ``more_repeats``: the
    results of repeats 2..K of a run with repeats (``results`` is repeat 1): the ``repeats`` section."""
    seen = Counter(r.case_id for r in results)
    repeated = sorted(cid for cid, k in seen.items() if k > 1)
    if repeated:
        raise ValueError(f"results hold case(s) more than once: {', '.join(repeated)}")
    results = sorted(results, key=lambda r: r.case_id)
    scored = [r for r in results if r.scored]

    statuses = Counter(r.status for r in results)
    counts = Counts(
        cases=len(results),
        scored=len(scored),
        invalid=statuses.get("invalid", 0),
        statuses=dict(sorted(statuses.items())),
        expect=dict(sorted(Counter(r.expect for r in scored).items())),
    )
    categories = sorted({c for r in scored for c in r.categories})
    resampled = _resampled(scored, categories, n_boot, seed)
    table = resampled.table
    levels = np.array([r.difficulty for r in scored])  # scored is sorted by case id, like the table
    subsets = {level: resampled.subset(levels == level) for level in DIFFICULTIES if (levels == level).any()}
    kinds = np.array([r.evidence for r in scored])
    evidence_subsets = {kind: resampled.subset(kinds == kind) for kind in ("injected", "recorded") if (kinds == kind).any()}
    splits = np.array([r.split or NO_SPLIT for r in scored])
    split_names = sorted(set(splits.tolist())) if any(r.split for r in scored) else []
    split_subsets = {name: resampled.subset(splits == name) for name in split_names}
    devices = np.array([r.device_family or "unknown" for r in scored])
    device_subsets = {name: resampled.subset(devices == name) for name in sorted(set(devices.tolist()))}
    case_kinds = np.array([r.case_kind for r in scored])
    kind_names = [k for k in ("job", "regression", "fleet") if (case_kinds == k).any()]
    kind_subsets = {k: resampled.subset(case_kinds == k) for k in kind_names} if len(kind_names) > 1 else {}
    tag_subsets = {tag: resampled.subset(np.array([tag in r.tags for r in scored]))
                   for tag in PART_TAGS if any(tag in r.tags for r in scored)}
    per_category = {cat: category_metrics(cat) for cat in categories}
    per_family = {family: {"skill": family_skill(family)} for family in table.families}
    Resampled.warm([(resampled, METRICS), *((resampled, specs) for specs in per_category.values()),
                    *((resampled, specs) for specs in per_family.values()),
                    *((subset, METRICS) for subset in [*subsets.values(), *evidence_subsets.values(),
                                                       *split_subsets.values(), *device_subsets.values(),
                                                       *kind_subsets.values(), *tag_subsets.values()])])

    by_category = {
        cat: CategoryBreakdown(
            causes=int(resampled.point[category_column("causes", cat)][0]),
            claims=int(resampled.point[category_column("claims", cat)][0]),
            **resampled.metrics(specs),
        )
        for cat, specs in per_category.items()
    }
    labeled = {k: int(resampled.point[category_column("labeled", k)][0]) for k in table.labeled}
    by_family = {family: FamilyBreakdown(labeled=sum(n for k, n in labeled.items() if cause_family(k) == family),
                                         skill=resampled.metrics(specs)["skill"])
                 for family, specs in per_family.items()}
    split_gaps = ({name: subset_gap(resampled, splits == name, METRICS["skill"]) for name in split_names}
                  if len(split_names) > 1 else {})

    return Summary(
        diagnoser=diagnoser,
        case_set_hash=case_set_hash,
        taxonomy_version=taxonomy_version,
        counts=counts,
        metrics=Metrics(**resampled.metrics()),
        by_category=by_category,
        by_difficulty=_breakdowns(subsets),
        by_evidence=_breakdowns(evidence_subsets),
        reference=reference_of(resampled.point, labeled),
        by_family=by_family,
        by_split=_breakdowns(split_subsets),
        by_device=_breakdowns(device_subsets),
        by_kind=_breakdowns(kind_subsets),
        by_tag=_breakdowns(tag_subsets),
        split_gaps=split_gaps,
        reliability=reliability_of(table),
        detection=detection_by_cause(scored),
        confusion=confusion_of(scored),
        bootstrap=BootstrapInfo(resamples=n_boot, seed=seed),
        recall_claimable=claimable_recall(resampled.point, categories, diagnoser.claims),
        repeats=summarize_repeats([results, *more_repeats], n_boot=n_boot, seed=seed) if more_repeats else None,
    )


def reference_of(point: dict[str, np.ndarray], labeled: dict[str, int]) -> Reference:
    """The climatological reference of the run's skill, with null's loss and skill beside it."""
    loss, null = float(point[REFERENCE][0]), float(point["loss_null"][0])
    return Reference(cases=int(point["cases"][0]), abstain_cases=int(point["abstain_cases"][0]), labeled=labeled,
                     loss=loss, loss_ranked=float(point[REFERENCE_RANKED][0]), null_loss=null,
                     null_skill=1 - null / loss if loss > 0 else None)


def subset_gap(resampled: Resampled, rows: np.ndarray, spec: MetricSpec) -> MetricValue:
    """``spec`` over the cases ``rows`` minus over the others, in the same resamples; its interval is the hull
    of the BCa and jackknife-t intervals of the difference (leaving out one case of either side)."""
    inside, outside = resampled.subset(rows), resampled.subset(~rows)
    a, b = (float(spec.values(part.point)[0]) for part in (inside, outside))
    n = len(inside.table)
    if np.isnan(a) or np.isnan(b):
        return MetricValue(value=None, ci=None, n=n)
    ci = None
    if resampled.n_boot:
        (boot_a, jack_a), (boot_b, jack_b) = inside.resampled_values(spec), outside.resampled_values(spec)
        jack = np.concatenate([jack_a - b, a - jack_b])
        contributing = np.concatenate([inside.contributing_mask(spec), outside.contributing_mask(spec)])
        ci = clip_interval(ratio_interval(a - b, boot_a - boot_b, jack, contributing, CONFIDENCE_LEVEL),
                           (spec.bounds[0] - spec.bounds[1], spec.bounds[1] - spec.bounds[0]))
    return MetricValue(value=a - b, ci=ci, n=n)


def claimable_recall(point: dict[str, np.ndarray], categories: list[str], claims: list[str] | None) -> MetricValue | None:
    """Found / labeled over the causes in ``claims`` (the diagnoser's declared field), with a Jeffreys
    interval on those counts; None when the diagnoser declares no field."""
    if claims is None:
        return None
    own = [c for c in categories if c in set(claims)]
    found = sum(float(point[category_column("found", c)][0]) for c in own)
    labeled = sum(float(point[category_column("causes", c)][0]) for c in own)
    if labeled == 0:
        return MetricValue(value=None, ci=None, n=0)
    lo, hi = jeffreys(found, labeled)[0]
    return MetricValue(value=found / labeled, ci=(float(lo), float(hi)), n=int(labeled))


def reliability_of(table: TallyTable) -> list[ReliabilityBin]:
    """The calibration table over every (case, taxonomy cause) pair (see the module docstring)."""
    total = table.values.sum(axis=0) if len(table) else np.zeros(len(table.columns))
    at = {c: j for j, c in enumerate(table.columns)}
    out = []
    for b in range(CALIBRATION_BINS):
        n = float(total[at[f"cal_n_{b}"]])
        lo, hi = (0.0, 0.0) if b == 0 else ((b - 1) / 10, b / 10)
        out.append(ReliabilityBin(
            lo=lo, hi=hi, pairs=int(round(n)),
            mean_probability=float(total[at[f"cal_conf_{b}"]] / n) if n else None,
            observed=float(total[at[f"cal_hit_{b}"]] / n) if n else None,
        ))
    return out


def detection_by_cause(scored: list[CaseResult]) -> dict[str, Detection]:
    """Per labeled cause: recall against measured impact and the detection limit (module docstring)."""
    points: dict[str, list[tuple[float, str, bool]]] = {c: [] for r in scored for c in r.categories}
    for r in scored:
        if r.measured_impact is not None:
            for o in r.outcomes:
                points[o.category].append((r.measured_impact, r.case_id, o.outcome == "found"))
    return {cat: detection_of(cat, sorted(p)) for cat, p in sorted(points.items())}


def detection_of(category: str, measured: list[tuple[float, str, bool]]) -> Detection:
    """One cause's detection limit (:func:`~diageval.scoring.detection.detection_limit`) from its (impact, case
    id, found) points, sorted by impact."""
    points = [ImpactPoint(case_id=c, impact=i, found=f) for i, c, f in measured]
    d = detection_limit(category, [p.impact for p in points], [p.found for p in points])
    if d.state == "undefined":
        return Detection(cases=d.cases, limit=None, state=d.state, ci=None, recall_above=None, points=points,
                         note=f"undefined: {d.cases} case(s) of {category} with a measured impact, "
                              f"{DETECTION_MIN_CASES} needed; the corpus needs this cause at several severities")
    above = [p.found for p in points if d.state == "measured" and d.limit is not None and p.impact >= d.limit]
    note = {"measured": f"the found-rate curve crosses 50% at impact {d.limit:.3g}",
            "below": f"found half the time or more already at the smallest case ({d.limit:.3g}): the limit is below it",
            "not_reached": f"the found-rate curve stays under 50% up to the largest case ({d.limit:.3g})"}[d.state]
    return Detection(cases=d.cases, limit=d.limit, state=d.state, ci=d.ci, points=points, note=note,
                     recall_above=float(np.mean(above)) if above else None)


def confusion_of(scored: list[CaseResult]) -> Confusion:
    """True cause vs top claim, one entry per scored case (see the module docstring)."""
    y_true, y_pred = [], []
    for r in scored:
        if r.top_claim is not None and r.top_claim in r.categories:
            y_true.append(r.top_claim)
        else:
            y_true.append(r.categories[0] if r.categories else NONE_LABEL)
        y_pred.append(r.top_claim or NONE_LABEL)
    labels = sorted((set(y_true) | set(y_pred)) - {NONE_LABEL}) + [NONE_LABEL]
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    cells = np.array([index[t] * k + index[p] for t, p in zip(y_true, y_pred)], dtype=np.int64)
    return Confusion(labels=labels, matrix=np.bincount(cells, minlength=k * k).reshape(k, k).tolist())
