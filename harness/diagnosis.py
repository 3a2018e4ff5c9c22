"""What a diagnoser returns: findings (causes and symptoms it claims) or an abstention.

This is the contract for every diagnoser, built-in or external (``cmd:`` diagnosers write it as JSON);
``diageval schema diagnosis`` prints its JSON Schema. Step ranges are half-open ``[start, stop)`` like
case labels.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from diageval.errors import DiagevalError
from diageval.validation import field_path


def _strict(expected: str):
    """A check that refuses what lax validation would turn into a number: ``true`` reads as 1, ``"0.9"``
    as 0.9. Numbers of other types (an int for a float, a numpy scalar) go on to the field's own check."""

    def check(v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"expected {expected}, not a boolean")
        if isinstance(v, (str, bytes)):
            raise ValueError(f"expected {expected}, not a string")
        return v

    return check


Number = Annotated[float, BeforeValidator(_strict("a number"))]
"""A JSON number: a boolean or a string is refused (a lax float would read ``true`` as 1.0)."""
WholeNumber = Annotated[int, BeforeValidator(_strict("an integer"))]
"""A JSON integer: a boolean or a string is refused (a lax int would read ``true`` as 1)."""


FACTOR_PART_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:=+-]{0,63}$"


class FactorRef(BaseModel):
    """One value of one factor of a fleet or a regression: the machine, software version or configuration
    value that runs share (``host: node-07``, ``version: v2.5.1``, ``loader_workers: "2"``). Names and
    values are opaque words from the evidence's ``fleet.json``; they never encode a fault."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=FACTOR_PART_PATTERN, description="The factor, as fleet.json's run metadata names it")
    value: str = Field(pattern=FACTOR_PART_PATTERN, description="The factor's value the claim is about")


OP_NAME_CHARS = 200
MAX_CITED_OPS = 64


def _check_ranks_and_steps(ranks: list[int] | None, steps: tuple[int, int] | None) -> None:
    """What a finding or its citation may say of where: ranks >= 0 and a half-open step range [start, stop)
    with 0 <= start < stop (None: not said). Raises ValueError naming the field, inside a model's validator."""
    if steps is not None and not (0 <= steps[0] < steps[1]):
        raise ValueError("steps: expected [start, stop) with 0 <= start < stop")
    if ranks is not None and any(r < 0 for r in ranks):
        raise ValueError("ranks: expected ranks >= 0")


class Citation(BaseModel):
    """Where in the evidence a finding rests: the ranks, steps and ops or kernels a person looks at to check it.
    Optional on every finding; scoring calls a correct cause *grounded* when what it cites overlaps where the
    fault acted (:mod:`diageval.scoring.grounding`; docs/scoring.md). Citing everything grounds nothing."""

    model_config = ConfigDict(extra="forbid")

    ranks: list[WholeNumber] | None = Field(None, description="Ranks whose evidence shows it; null = none cited")
    steps: tuple[WholeNumber, WholeNumber] | None = Field(
        None, description="Half-open step range [start, stop) where the evidence shows it; null = none cited")
    ops: list[Annotated[str, Field(min_length=1, max_length=OP_NAME_CHARS)]] = Field(
        default_factory=list, max_length=MAX_CITED_OPS,
        description="Op or kernel names as the trace names them (aten::item, ncclDevKernel_AllReduce...)")

    @model_validator(mode="after")
    def _ranges(self) -> "Citation":
        _check_ranks_and_steps(self.ranks, self.steps)
        return self


def blamable_refs(runs: Iterable[Any]) -> list[FactorRef]:
    """The factor values a regression or fleet could blame, read from its runs alone (each with ``role`` and
    ``metadata``: a case file's runs or fleet.json's, no label): the possible answers to "where", which the factor
    climatology ranges over (docs/scoring.md). A value held by every run cannot set slow runs apart from fast ones,
    and on a regression only the candidate can be slow, so a value is blamable when some run lacks it and
    (regression) the candidate holds it."""
    runs = list(runs)
    slow = [r for r in runs if r.role == "candidate"] or runs
    return sorted({FactorRef(name=k, value=v) for r in slow for k, v in r.metadata.items()
                   if any(other.metadata.get(k) != v for other in runs)}, key=lambda ref: (ref.name, ref.value))


def check_fleet_runs(runs: Sequence[Any]) -> None:
    """What the runs of a regression or fleet hold wherever they are given (each with ``name`` and ``metadata``: a
    case file's runs or fleet.json's): distinct names, and every run a value for the same factor names, so that a
    factor value can be compared across them. Raises ValueError naming the field, inside a model's validator."""
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError("runs: two runs share a name")
    keys = set(runs[0].metadata)
    for i, r in enumerate(runs):
        if set(r.metadata) != keys:
            raise ValueError(f"runs[{i}].metadata: expected the same factors as runs[0] ({', '.join(sorted(keys))}), "
                             f"got {', '.join(sorted(r.metadata))}")


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: str = Field(description="A taxonomy id, e.g. compute.straggler_rank")
    kind: Literal["cause", "symptom"] = Field(
        "cause", description="'symptom' findings are observations: shown, never credited or penalised"
    )
    confidence: Number = Field(0.5, ge=0.0, le=1.0, description="Probability the claim is right")
    ranks: list[WholeNumber] | None = Field(None, description="Ranks where the cause sits; null = all / not rank-specific")
    steps: tuple[WholeNumber, WholeNumber] | None = Field(None, description="Half-open step range [start, stop) it affects")
    impact: Number | None = Field(None, ge=0.0, le=1.0, description="Claimed fraction of step time lost to it")
    summary: str = Field("", description="One line a person can read")
    evidence: list[str] = Field(default_factory=list, description="Pointers a person can check in the bundle")
    factor: FactorRef | None = Field(
        None, description="Fleet and regression evidence: the factor value the cause sits behind (the runs that "
        "have it are the slow ones); null for one job's evidence"
    )
    magnitude: Number | None = Field(
        None, gt=0.0, description="Regression evidence: the claimed candidate / baseline step-time ratio"
    )
    cites: Citation | None = Field(
        None, description="The evidence it rests on (ranks, steps, op or kernel names): a correct cause whose "
        "citation overlaps where the fault acted is grounded; null = cites nothing"
    )

    @model_validator(mode="after")
    def _ranges(self) -> "Finding":
        _check_ranks_and_steps(self.ranks, self.steps)
        return self


class Abstention(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, description="Why the evidence is insufficient")
    factors: list[FactorRef] = Field(
        default_factory=list, description="Fleet evidence: factor values that cannot be told apart (aliased, "
        "e.g. every run on node-07 also ran v2.5), named by an abstention that refuses to pick one"
    )


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


_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xef\xbb\xbf", "UTF-8"),
    (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"),
)


def _decode(data: bytes, source: str) -> str:
    """JSON text is UTF-8 without a byte-order mark (RFC 8259 section 8.1); anything else is an error that
    says what the bytes look like, so that a file saved as UTF-16 by an editor is told, not mis-parsed."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise DiagnosisParseError(
                f"{source}: starts with a {name} byte-order mark; a diagnosis is UTF-8 JSON without one: save it as "
                "UTF-8 (no BOM)"
            )
    nul = data.find(b"\x00")  # JSON never holds a NUL byte; UTF-16 and UTF-32 text of ASCII is half NULs
    if nul >= 0:
        raise DiagnosisParseError(
            f"{source}: holds a NUL byte (byte {nul}): UTF-16 or UTF-32 text, or not text at all; a diagnosis is "
            "UTF-8 JSON"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DiagnosisParseError(f"{source}: not UTF-8 at line {line} (byte {exc.start}): save it as UTF-8") from None


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def parse_diagnosis_json(text: str | bytes, source: str, limits: DiagnosisLimits = DEFAULT_LIMITS) -> Diagnosis:
    """Parse and validate diagnosis JSON. The one reader for every diagnosis that arrives as text:
    files a person hands to ``diageval score``, and what ``cmd:`` and in-process diagnosers write.

    Over ``limits`` (bytes, findings), not UTF-8 (a byte-order mark, UTF-16, invalid bytes), a key given
    twice in one object (JSON readers disagree on which one wins), nested too deeply for the parser, or a
    boolean or string where a number belongs: an error naming ``source`` and the field, never a traceback
    or a huge file kept."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", errors="surrogatepass"))
    if size > limits.max_bytes:
        raise DiagnosisParseError(
            f"{source}: over the size limit of {limits.max_bytes / (1 << 20):g} MiB (--max-diagnosis-mib raises it)"
        )
    if isinstance(text, bytes):
        text = _decode(text, source)
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise DiagnosisParseError(f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise DiagnosisParseError(
            f"{source}: the key {exc.key!r} appears twice in one object; a key may appear once (readers disagree on "
            "which one wins)"
        ) from None
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
            got = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {_as_json(e.get('input'))})"
            lines.append(f"{source}: {field_path(e['loc']) or '<top level>'}: {msg}{got}")
        raise DiagnosisParseError(
            "\n".join(lines) + "\n(expected a diagnosis; `diageval schema diagnosis` prints its JSON Schema)"
        ) from None


def _as_json(value: Any, limit: int = 80) -> str:
    """A value as the JSON it came from (``true``, ``"0.9"``), shortened: what the person wrote."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_diagnosis_file(path: Path, limits: DiagnosisLimits = DEFAULT_LIMITS) -> Diagnosis:
    """A diagnosis JSON file a person hands to ``diageval score --diagnosis`` (or a run folder's): at most
    ``limits.max_bytes + 1`` bytes are read, whatever the file's size (a device or a pipe included), so a
    huge file is refused without being held; errors name the file and field."""
    path = Path(path)
    try:
        data = read_capped(path, limits.max_bytes)
    except OSError as exc:
        raise DiagnosisParseError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_diagnosis_json(data, str(path), limits)
