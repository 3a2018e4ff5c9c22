"""The scored record of one case: a verdict on every cause claim and an outcome for every labeled cause.

One :class:`CaseResult` is one line of a run's ``results.jsonl``. It holds everything the metrics need
(:mod:`diageval.scoring.tallies` reads nothing else), so a saved run can be re-summarised without the
case files, and re-scored from its saved diagnoses without re-running anything.

``scoring_version`` says which scoring rules wrote a result. A line without it (or with an older one) was
judged by rules whose numbers this code does not compute (version 1 had no forecasts for the headline
score): reading it fails with a message that says to re-score the run (``diageval score RUN_DIR``), rather
than summarising it with fields silently defaulted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diageval.diagnosers.agent_record import Usage

SCORING_VERSION = 5
"""Version of the judging rules in :mod:`diageval.scoring.verdicts`; 2 added forecasts (the headline
score), strict localisation (claimed ranks a subset of the labeled ranks) and every claim's impact; 3
made a claim below :data:`FOUND_CONFIDENCE` a ``hedge`` (scored by the proper score alone), gave the
rank-credited score one event per (cause, rank), and records the case's world size and split; 4 (issue 24)
adds the fleet's factors: one event per factor value named and per aliased factor value an abstention
names, in the rank-credited score, and a regression's claimed and measured magnitude; 5 (issue 39) puts the
factor and aliased events in the headline score (their probability is the stated one) and records the
values a case could blame (:attr:`CaseResult.blamable`), the factor climatology's slots."""
READABLE_VERSIONS: frozenset[int] = frozenset({3, SCORING_VERSION})
"""Versions whose results this code reads as they are. A version-3 result is a version-5 one without factor
events: version 3 knew no fleet case and no diagnosis could name a factor, so every field versions 4 and 5 add
is empty on it and every number is the same (tests/scoring/test_scoring_factors.py re-scores one to show it). A
version-4 result is refused: on a fleet case its factor events had probability 0 in the headline and it
does not record the values the case could blame (``diageval score RUN_DIR`` re-scores it)."""

FOUND_CONFIDENCE = 0.5
"""A cause claim asserts its cause (can find a labeled cause, or mislead) only at this confidence or more.
Below it the claim states that the cause is more likely absent than present: it is a ``hedge``, judged by
the proper score (skill, Brier, calibration) alone and by no count (recall, precision, top-1, F1,
localisation, misleading and false-alarm rates, detection limits)."""

Status = Literal[
    "ok", "abstained", "diagnoser_error", "timeout", "invalid_output", "cap_hit", "harness_error", "invalid", "unavailable"
]
"""How a case ended.

``ok`` / ``abstained``: the diagnoser answered (the diagnosis decides which). ``diagnoser_error``,
``timeout``, ``invalid_output``: the diagnoser's failure; the case is scored and all its causes are missed.
``cap_hit``: an agent stopped by a cap on its turns, tokens, dollars or wall time (issue 41); scored as an
abstention whose reason names the cap (:data:`ABSTAINING_STATUSES`), its count apart in the summary's statuses.
``harness_error`` (our fault) and ``invalid`` (the evidence does not hold the label: an injection that did not manifest, or a healthy control that shows a cause) are never scored, nor is
``unavailable`` (a recorded case whose trace files are not in the data folder on this machine).
"""

SCORED_STATUSES: frozenset[str] = frozenset({"ok", "abstained", "diagnoser_error", "timeout", "invalid_output", "cap_hit"})
ANSWERED_STATUSES: frozenset[str] = frozenset({"ok", "abstained"})
FAILED_STATUSES: frozenset[str] = frozenset({"diagnoser_error", "timeout", "invalid_output"})
ABSTAINING_STATUSES: frozenset[str] = frozenset({"cap_hit"})
"""Ended without a diagnosis, scored as the abstention ``{"abstain": {"reason": "<status>: <error>"}}``."""
UNSCORED_STATUSES: frozenset[str] = frozenset({"harness_error", "invalid", "unavailable"})

Verdict = Literal["correct", "mislocated", "symptom_as_cause", "wrong_cause", "false_alarm", "duplicate", "hedge"]
CREDITED_VERDICTS: frozenset[str] = frozenset({"correct", "mislocated"})
MISLEADING_VERDICTS: frozenset[str] = frozenset({"symptom_as_cause", "wrong_cause", "false_alarm"})
UNCOUNTED_VERDICTS: frozenset[str] = frozenset({"duplicate", "hedge"})
"""Claims no count sees: neither credit nor penalty outside the proper score."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClaimVerdict(_Record):
    """The verdict on one cause claim (a finding with ``kind: cause``)."""

    index: int = Field(description="Position of the finding in the diagnosis' findings list")
    category: str
    verdict: Verdict
    confidence: float
    ranks: list[int] | None = Field(None, description="Ranks the claim names")
    impact: float | None = Field(None, description="The impact the claim states (fraction of step time), if any")
    factor: str | None = Field(None, description="The factor value the claim names ('name=value'), if any")
    reason: str = Field(description="One line a person can read")

    @property
    def credited(self) -> bool:
        return self.verdict in CREDITED_VERDICTS

    @property
    def misleading(self) -> bool:
        return self.verdict in MISLEADING_VERDICTS


class CauseOutcome(_Record):
    """Whether one labeled cause was found, and by which claim."""

    category: str
    ranks: list[int] | None = Field(None, description="Ranks the label names")
    outcome: Literal["found", "missed"]
    localized: bool | None = Field(
        None, description="Found and the label names ranks: did the credited claim name overlapping ranks? Else null"
    )
    factor: str | None = Field(None, description="The factor value the label puts the cause behind ('name=value'); "
                               "null for one job's evidence")
    claim_index: int | None = Field(None, description="The finding that found it")
    claimed_ranks: list[int] | None = Field(None, description="Ranks the crediting claim named (found causes only)")
    grounded: bool | None = Field(
        None, description="Found by a claim whose cited evidence overlaps where the fault acted "
        "(diageval.scoring.grounding); False: missed, or found citing nothing or off the mark; null: the label "
        "localises nothing to check a citation against, and in results written before grounding")
    reason: str


ForecastKind = Literal["cause", "not_a_cause", "rank", "factor", "aliased", "abstain"]
RANKED_ONLY_KINDS: frozenset[str] = frozenset({"rank"})
"""Events only the rank-credited score (``skill_ranked``) has: where in the job (ranks). Where in the fleet
(factor and aliased events) is in both scores since scoring 5."""
FACTOR_KINDS: frozenset[str] = frozenset({"factor", "aliased"})
"""The events about where in a fleet: factor precision and recall read them."""


class Forecast(_Record):
    """One binary event of the headline score: what the diagnosis said (a probability) and what was true.

    ``cause``: a taxonomy cause that is labeled or claimed (probability = the highest confidence claimed
    for it, 0 if unclaimed; outcome = labeled). Taxonomy causes neither labeled nor claimed are pairs at
    probability 0 and outcome 0: they add nothing to a squared error and are counted only through
    :attr:`CaseResult.taxonomy_causes`. ``not_a_cause``: an id claimed as a cause that is not a taxonomy
    cause (a symptom, an id outside the taxonomy): probability on an event that is false.
    ``rank``: "cause k sits on rank r" (event ``k@r``), in the rank-credited score only: one per rank that
    a claim on k names or a label of k names, for every taxonomy cause k that no label of the case names
    without ranks (probability = the highest confidence of the claims on k that name r; outcome = r is a
    labeled rank of k). ``factor``: "the slowdown sits behind factor value v" (event ``factor@name=value``),
    in both scores: one per value that a finding (cause or symptom) names or a label names
    (probability = the highest confidence of the findings naming v; outcome = a label puts a cause behind v,
    whichever cause: the cause is judged by its own event).
    ``aliased``: "factor value v cannot be told apart from another" (event ``aliased@name=value``), in
    both scores: one per value the abstention names or the case labels aliased (probability 1
    when the diagnosis abstained naming it, else 0; outcome = labeled aliased). ``abstain``: whether the
    diagnoser abstained, and whether the case expects it. See :mod:`diageval.scoring.verdicts` for the rules and docs/scoring.md for the reasoning.
    """

    kind: ForecastKind
    event: str = Field(description="The cause or id the event is about ('k@r' for a rank event); 'abstain' for "
                                   "the abstain decision")
    probability: float = Field(description="The stated probability that the event is true (the headline score; "
                                           "0 for a rank event, which only the rank-credited score has)")
    ranked_probability: float = Field(description="The stated probability in the rank-credited score (equal to "
                                                  "probability for every event but a rank event)")
    outcome: bool


class ManifestationMeasure(_Record):
    """What the manifestation test measured for an injected positive case (diageval.recording.manifest_test):
    the numbers behind its difficulty and its being valid, carried so that reports read them from the run."""

    metric: str = Field(description="The case's manifest metric")
    min_ratio: float = Field(description="The minimum effect the estimate had to reach")
    ratio: float = Field(description="The case/twin ratio the test estimated")
    noise: float = Field(description="The healthy twin's relative spread of the metric over the repeats")
    effect_to_noise: float = Field(description="z = (ratio - 1) / the test's shift sd (before the test: the twin's "
                                   "range, floored): the difficulty's measure")
    statistic: float | None = Field(None, description="The test's z statistic (null: a check made before the test)")
    p_value: float | None = Field(None, description="Its one-sided p-value of 'no slowdown'")
    alpha: float | None = Field(None, description="The p-value had to be below this at the deciding look")
    repeats: int = Field(description="Repeat pairs (twin, case) recorded and tested")
    manifested: bool


class EvidenceFacts(_Record):
    """What a case's evidence is, as recording found it (``diageval.recording``'s face makes it, the run hands it
    to :func:`~diageval.scoring.verdicts.score_case` whole): facts scoring copies into the result, never judges.
    Every field is None (empty) where the case ended before its evidence said it: a recording that failed has
    no bundle."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bundle_id: str | None = Field(None, description="The bundle's opaque id (of the tier the diagnoser got)")
    bundle_sha256: str | None = Field(None, description="The sha256 of that bundle's bundle.json")
    measured_impact: float | None = Field(None, description="The verification's measured fraction of step time lost")
    measured_magnitude: float | None = Field(None, description="A regression: the verification's candidate/baseline "
                                             "ratio")
    difficulty: Literal["easy", "medium", "hard"] | None = Field(None, description="The verification's effect "
                                                                 "over noise, in words")
    manifestation: ManifestationMeasure | None = Field(None, description="What the manifestation test measured")
    shown_values: dict[str, str] = Field(default_factory=dict, description="A regression or fleet: its factor "
                                         "values -> the words its bundle shows")
    rank_draw: list[int] | None = Field(None, description="A job case recorded here: where its recording put the "
                                        "case's ranks")

    @classmethod
    def of(cls, result: "CaseResult") -> "EvidenceFacts":
        """The facts a result line kept (re-scoring reads them back)."""
        return cls(**{name: getattr(result, name) for name in cls.model_fields})


class CaseResult(_Record):
    scoring_version: Literal[3, 5] = Field(description="The judging rules that wrote this result (SCORING_VERSION)")
    case_id: str
    status: Status
    expect: Literal["diagnose", "healthy", "abstain"]
    difficulty: Literal["easy", "medium", "hard"] | None = Field(
        None, description="Measured, for an injected positive case: its injection's effect over its healthy "
        "twin's noise (easy >= 10 spreads, hard < 3); None where nothing was injected or measured")
    evidence: Literal["injected", "recorded"] = Field(
        "injected", description="injected-and-verified (a live reproduction) or recorded-and-measured (a real job's traces)"
    )
    tags: list[str] = Field(default_factory=list)
    split: str | None = Field(None, description="The case's split (its `split:` field), e.g. public; null when "
                              "the case names none")
    device_family: str | None = Field(None, description="cpu, nvidia, amd, mtia or unknown: the kind of device "
                                      "the evidence comes from (the board's per-device view); null in older results")
    case_kind: Literal["job", "regression", "fleet"] = Field("job", description="The case's kind: one job, a "
                                                             "regression (baseline and candidate) or a fleet")
    world_size: int = Field(1, description="Ranks in the case's job: the rank events a label-blind forecast of a "
                            "ranked cause would state (the rank-credited score's reference)")
    fleet_factors: int = Field(0, description="Factor values of the case's fleet ((name, value) pairs over its runs' "
                               "metadata): the factor events a label-blind forecast of a cause would state; 0 for "
                               "one job's evidence")
    blamable: list[str] = Field(default_factory=list, description="The factor values the case could blame "
                                "('name=value'): held by some run, not by all, and on a regression by the candidate; "
                                "with every labeled one: the factor climatology's slots (empty for one job)")
    aliased: list[str] = Field(default_factory=list, description="Factor values the case labels aliased "
                               "('name=value'): the right abstention names them")
    categories: list[str] = Field(default_factory=list, description="The labeled causes")
    verdicts: list[ClaimVerdict] = Field(default_factory=list, description="In scoring order: descending confidence")
    outcomes: list[CauseOutcome] = Field(default_factory=list, description="In label order")
    observed_symptoms: list[str] = Field(default_factory=list, description="kind: symptom findings, recorded only")
    abstained: bool = False
    abstain_reason: str | None = None
    top_claim: str | None = Field(None, description="Category of the highest-confidence cause claim")
    claimed_impact: float | None = Field(None, description="Sum of the credited claims' impacts, capped at 1")
    claimed_magnitude: float | None = Field(None, description="Regression evidence: the candidate / baseline "
                                            "step-time ratio the most confident asserted claim stating one states")
    measured_magnitude: float | None = Field(None, description="Regression evidence: the candidate / baseline "
                                             "step-time ratio measured by the case's verification")
    forecasts: list[Forecast] = Field(default_factory=list, description="The events of the headline score (empty "
                                      "for unscored cases)")
    taxonomy_causes: int = Field(0, description="Causes in the taxonomy the case was judged with: the (case, "
                                 "cause) pairs of calibration")
    measured_impact: float | None = Field(None, description="The injection's measured fraction of step time")
    manifestation: ManifestationMeasure | None = Field(None, description="The manifestation test's measurement, for "
                                                     "an injected positive case; null otherwise and in older results")
    seconds: float | None = Field(None, description="Wall time the diagnoser took")
    usage: Usage | None = Field(None, description="What an agent spent on the case (tokens, dollars, turns, tool "
                                "calls), from its trajectory.json (diageval.diagnosers.agent_record); null for a "
                                "diagnoser that writes none")
    bundle_id: str | None = None
    bundle_sha256: str | None = None
    shown_values: dict[str, str] = Field(default_factory=dict, description="A regression's or fleet's factor values "
                                         "('name=value') -> the words its bundle showed (drawn per assembly, issue 39): "
                                         "the case was judged in those words; empty when the bundle showed the case's own")
    rank_draw: list[int] | None = Field(None, description="A job case recorded here: case rank r was recorded, and is "
                                        "labeled, as rank rank_draw[r] (the recording's draw, issue 44); null: the case "
                                        "file's ranks")
    error: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _current_rules(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("scoring_version") not in READABLE_VERSIONS:
            found = data.get("scoring_version")
            written = "no scoring_version (diageval before scoring 2)" if found is None else f"scoring_version {found!r}"
            readable = " and ".join(str(v) for v in sorted(READABLE_VERSIONS))
            raise ValueError(f"scored by other rules: {written}, this diageval reads {readable}; "
                             "re-score the run with `diageval score RUN_DIR`")
        return data

    @property
    def scored(self) -> bool:
        return self.status in SCORED_STATUSES
