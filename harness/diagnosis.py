"""What a diagnoser returns: findings (causes and symptoms it claims) or an abstention.

This is the contract for every diagnoser, built-in or external (``cmd:`` diagnosers write it as JSON);
``diageval schema diagnosis`` prints its JSON Schema. Step ranges are half-open ``[start, stop)`` like
case labels.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: str = Field(description="A taxonomy id, e.g. compute.straggler_rank")
    kind: Literal["cause", "symptom"] = Field(
        "cause", description="'symptom' findings are observations: shown, never credited or penalised"
    )
    confidence: float = Field(0.5, ge=0.0, le=1.0, description="Probability the claim is right")
    ranks: list[int] | None = Field(None, description="Ranks where the cause sits; null = all / not rank-specific")
    steps: tuple[int, int] | None = Field(None, description="Half-open step range [start, stop) it affects")
    impact: float | None = Field(None, ge=0.0, le=1.0, description="Claimed fraction of step time lost to it")
    summary: str = Field("", description="One line a person can read")
    evidence: list[str] = Field(default_factory=list, description="Pointers a person can check in the bundle")

    @model_validator(mode="after")
    def _ranges(self) -> "Finding":
        if self.steps is not None and not (0 <= self.steps[0] < self.steps[1]):
            raise ValueError("steps: expected [start, stop) with 0 <= start < stop")
        if self.ranks is not None and any(r < 0 for r in self.ranks):
            raise ValueError("ranks: expected ranks >= 0")
        return self


class Abstention(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, description="Why the evidence is insufficient")


class Diagnosis(BaseModel):
    model_config = ConfigDict(extra="forbid")

    findings: list[Finding] = Field(default_factory=list)
    abstain: Abstention | None = Field(None, description="Set when the evidence is insufficient to judge")

    @property
    def causes(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "cause"]

    @model_validator(mode="after")
    def _abstain_has_no_causes(self) -> "Diagnosis":
        if self.abstain is not None and any(f.kind == "cause" for f in self.findings):
            raise ValueError("abstain: a diagnosis that abstains claims no cause (symptoms may stay)")
        return self
