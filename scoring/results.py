"""The scored record of one case: a verdict on every cause claim and an outcome for every labeled cause.

One :class:`CaseResult` is one line of a run's ``results.jsonl``. It holds everything the metrics need
(:mod:`diageval.scoring.tallies` reads nothing else), so a saved run can be re-summarised without the
case files, and re-scored from its saved diagnoses without re-running anything.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["ok", "abstained", "diagnoser_error", "timeout", "invalid_output", "harness_error", "invalid"]
"""How a case ended.

``ok`` / ``abstained``: the diagnoser answered (the diagnosis decides which). ``diagnoser_error``,
``timeout``, ``invalid_output``: the diagnoser's failure; the case is scored and all its causes are missed.
``harness_error`` (our fault) and ``invalid`` (the injection did not manifest) are never scored.
"""

SCORED_STATUSES: frozenset[str] = frozenset({"ok", "abstained", "diagnoser_error", "timeout", "invalid_output"})
ANSWERED_STATUSES: frozenset[str] = frozenset({"ok", "abstained"})
FAILED_STATUSES: frozenset[str] = frozenset({"diagnoser_error", "timeout", "invalid_output"})
UNSCORED_STATUSES: frozenset[str] = frozenset({"harness_error", "invalid"})

Verdict = Literal["correct", "mislocated", "symptom_as_cause", "wrong_cause", "false_alarm", "duplicate"]
CREDITED_VERDICTS: frozenset[str] = frozenset({"correct", "mislocated"})
MISLEADING_VERDICTS: frozenset[str] = frozenset({"symptom_as_cause", "wrong_cause", "false_alarm"})


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClaimVerdict(_Record):
    """The verdict on one cause claim (a finding with ``kind: cause``)."""

    index: int = Field(description="Position of the finding in the diagnosis' findings list")
    category: str
    verdict: Verdict
    confidence: float
    ranks: list[int] | None = Field(None, description="Ranks the claim names")
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
    claim_index: int | None = Field(None, description="The finding that found it")
    reason: str


class CaseResult(_Record):
    case_id: str
    status: Status
    expect: Literal["diagnose", "healthy", "abstain"]
    difficulty: Literal["easy", "medium", "hard"]
    tags: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list, description="The labeled causes")
    verdicts: list[ClaimVerdict] = Field(default_factory=list, description="In scoring order: descending confidence")
    outcomes: list[CauseOutcome] = Field(default_factory=list, description="In label order")
    observed_symptoms: list[str] = Field(default_factory=list, description="kind: symptom findings, recorded only")
    abstained: bool = False
    abstain_reason: str | None = None
    top_claim: str | None = Field(None, description="Category of the highest-confidence cause claim")
    claimed_impact: float | None = Field(None, description="Sum of the credited claims' impacts, capped at 1")
    measured_impact: float | None = Field(None, description="The injection's measured fraction of step time")
    seconds: float | None = Field(None, description="Wall time the diagnoser took")
    bundle_id: str | None = None
    bundle_sha256: str | None = None
    error: str | None = None

    @property
    def scored(self) -> bool:
        return self.status in SCORED_STATUSES
