"""What a diagnoser returns: findings (causes and symptoms it claims) or an abstention.

This is the contract for every diagnoser, built-in or external (``cmd:`` diagnosers write it as JSON);
``diageval schema diagnosis`` prints its JSON Schema. Step ranges are half-open ``[start, stop)`` like
case labels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from diageval.errors import DiagevalError
from diageval.validation import field_path


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


class DiagnosisParseError(DiagevalError, ValueError):
    """Diagnosis JSON that is not JSON or does not match the schema; the message names source and field."""


@dataclass(frozen=True)
class DiagnosisLimits:
    """How big a diagnosis may be. A diagnosis is a claim list a person reads: 16 MiB and 1000 findings
    are two to three orders of magnitude above what any built-in writes (the largest, ``rules`` on a
    real trace, is a few kB with under 20 findings), and small enough that a run folder of 1000 cases
    stays a size one can copy. ``diageval run --max-diagnosis-mib / --max-findings`` raise them."""

    max_bytes: int = 16 << 20
    max_findings: int = 1000


DEFAULT_LIMITS = DiagnosisLimits()


def read_capped(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path``: enough to tell that a file is over ``limit``."""
    with open(path, "rb") as fh:
        return fh.read(limit + 1)


def parse_diagnosis_json(text: str | bytes, source: str, limits: DiagnosisLimits = DEFAULT_LIMITS) -> Diagnosis:
    """Parse and validate diagnosis JSON. The one reader for every diagnosis that arrives as text:
    files a person hands to ``diageval score``, and what ``cmd:`` and in-process diagnosers write.

    Over ``limits`` (bytes, findings), not UTF-8, or nested too deeply for the parser: an error naming
    ``source``, never a traceback or a huge file kept."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", errors="surrogatepass"))
    if size > limits.max_bytes:
        raise DiagnosisParseError(
            f"{source}: over the size limit of {limits.max_bytes / (1 << 20):g} MiB (--max-diagnosis-mib raises it)"
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DiagnosisParseError(f"{source}: not UTF-8 (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DiagnosisParseError(f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise DiagnosisParseError(f"{source}: JSON nested too deeply to read") from None
    except MemoryError:
        raise DiagnosisParseError(f"{source}: too large to read in memory") from None
    findings = data.get("findings") if isinstance(data, dict) else None
    if isinstance(findings, list) and len(findings) > limits.max_findings:
        raise DiagnosisParseError(
            f"{source}: findings: {len(findings)} findings, over the limit of {limits.max_findings} (--max-findings raises it)"
        )
    try:
        return Diagnosis.model_validate(data)
    except ValidationError as err:
        lines = []
        for e in err.errors(include_url=False):
            msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
            got = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {e.get('input')!r})"
            lines.append(f"{source}: {field_path(e['loc']) or '<top level>'}: {msg}{got}")
        raise DiagnosisParseError(
            "\n".join(lines) + "\n(expected a diagnosis; `diageval schema diagnosis` prints its JSON Schema)"
        ) from None


def read_diagnosis_file(path: Path) -> Diagnosis:
    """A diagnosis JSON file a person hands to ``diageval score --diagnosis``; errors name the file and field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DiagnosisParseError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_diagnosis_json(text, str(path))
