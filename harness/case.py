"""Labeled cases (``cases/<area>/<name>.yaml``): the strict model and its validation.

A case is plain data (``yaml.safe_load``, no includes, no code). Validation happens in two layers:

1. the pydantic model (:class:`Case`) checks shapes and what a single file can know by itself
   (unknown fields, kebab-case ids, label kinds by prefix, step ranges inside the workload);
2. :func:`check_case` checks what needs the outside world: the taxonomy (categories exist, causes under
   ``causes`` and symptoms under ``symptoms``), the workload and fault registries (names registered,
   params valid for that plugin) and ranks against ``world_size``; :func:`load_cases` adds unique ids.

Every problem is a :class:`CaseProblem` naming the file, the field path and what was expected.

Conventions decided here (the design is silent):
* step ranges are half-open ``[start, stop)`` like Python's ``range``: ``steps: [10, 40]`` on a 40-step
  workload means steps 10..39;
* a case with ``expect: healthy`` or ``expect: abstain`` labels no cause; it may still have faults
  (a confounder is a benign anomaly injected into a healthy run; an abstain case removes evidence);
* ``manifest`` is required for ``expect: diagnose`` (a positive case counts only if its injection is
  measurably there) and forbidden otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from diageval.fileio import sha256_text
from diageval.taxonomy import TAXONOMY_ID_PATTERN, Taxonomy
from diageval.validation import field_path

CASE_ID_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"

ManifestMetric = Literal[
    "step_time_median",
    "step_time_mean",
    "step_time_p90",
    "rank_step_time_median",  # the median step time of one rank (``manifest.rank``), others ignored
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkloadSpec(_Strict):
    name: str = Field(description="A registered workload (see `diageval cases workloads`)")
    world_size: int = Field(1, ge=1, le=64, description="Number of ranks")
    steps: int = Field(ge=2, le=10_000, description="Training steps to run")
    params: dict[str, Any] = Field(default_factory=dict, description="Workload parameters")


class FaultSpec(_Strict):
    name: str = Field(description="A registered fault injector")
    params: dict[str, Any] = Field(default_factory=dict, description="Injector parameters")


class CauseLabel(_Strict):
    category: str = Field(pattern=TAXONOMY_ID_PATTERN, description="A cause id of the taxonomy")
    ranks: list[int] | None = Field(None, description="Ranks where the cause sits; null = all or not rank-specific")
    steps: tuple[int, int] | None = Field(None, description="Half-open step range [start, stop)")

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v: list[int] | None) -> list[int] | None:
        if v is not None:
            if not v:
                raise ValueError("an empty list; leave ranks out to mean 'all ranks'")
            if any(r < 0 for r in v):
                raise ValueError("ranks are >= 0")
            if len(set(v)) != len(v):
                raise ValueError("ranks repeat")
        return v

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and not (0 <= v[0] < v[1]):
            raise ValueError("expected [start, stop) with 0 <= start < stop")
        return v


class Labels(_Strict):
    causes: list[CauseLabel] = Field(default_factory=list)
    symptoms: list[str] = Field(default_factory=list, description="Symptom ids the cause produces")
    expect: Literal["diagnose", "healthy", "abstain"]

    @model_validator(mode="after")
    def _expect_matches_causes(self) -> "Labels":
        if self.expect == "diagnose" and not self.causes:
            raise ValueError("causes: a case with expect: diagnose needs at least one labeled cause")
        if self.expect != "diagnose" and self.causes:
            raise ValueError(f"causes: a case with expect: {self.expect} labels no cause; remove them or use expect: diagnose")
        return self


class Manifest(_Strict):
    metric: ManifestMetric
    min_ratio: float = Field(gt=1.0, description="Injected / healthy-twin metric must reach this")
    rank: int | None = Field(None, ge=0, description="Only for rank_step_time_median")

    @model_validator(mode="after")
    def _rank_only_for_rank_metric(self) -> "Manifest":
        if self.metric == "rank_step_time_median" and self.rank is None:
            raise ValueError("rank_step_time_median needs a rank")
        if self.metric != "rank_step_time_median" and self.rank is not None:
            raise ValueError("rank is only for rank_step_time_median")
        return self


class Requires(_Strict):
    device: Literal["any", "cuda"] = "any"
    min_devices: int = Field(1, ge=1, description="CUDA devices needed when device is cuda")


class Case(_Strict):
    id: str = Field(pattern=CASE_ID_PATTERN, description="Unique, kebab-case; never shown to a diagnoser")
    title: str = Field(min_length=1)
    workload: WorkloadSpec
    faults: list[FaultSpec] = Field(default_factory=list, description="Empty = healthy control")
    labels: Labels
    manifest: Manifest | None = None
    requires: Requires = Field(default_factory=Requires)
    tags: list[str] = Field(default_factory=list)
    difficulty: Literal["easy", "medium", "hard"] = "medium"

    @model_validator(mode="after")
    def _internal(self) -> "Case":
        steps = self.workload.steps
        for i, c in enumerate(self.labels.causes):
            if c.steps is not None and c.steps[1] > steps:
                raise ValueError(f"labels.causes[{i}].steps: stop {c.steps[1]} is past the workload's {steps} steps")
        if self.labels.expect == "diagnose" and self.manifest is None:
            raise ValueError("manifest: required for expect: diagnose (how to tell the injection manifested)")
        if self.labels.expect != "diagnose" and self.manifest is not None:
            raise ValueError("manifest: only positive cases (expect: diagnose) have one")
        if self.labels.expect == "diagnose" and not self.faults:
            raise ValueError("faults: a positive case injects at least one fault")
        return self

    def healthy_twin(self) -> "Case":
        """The same case with its faults removed: the baseline for the manifestation check."""
        return self.model_copy(update={"faults": []})

    def spec_hash(self) -> str:
        """Hash of everything that shapes a recording (not title, tags or labels)."""
        payload = {"workload": self.workload.model_dump(), "faults": [f.model_dump() for f in self.faults]}
        return sha256_text(yaml.safe_dump(payload, sort_keys=True))


class CaseProblem(BaseModel):
    """One thing wrong with one case file."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field or '<file>'}: {self.message}"


class CaseLoadError(Exception):
    def __init__(self, problems: list[CaseProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class LoadedCase(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    case: Case
    path: Path
    file_sha256: str


_FIELD_PREFIX = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*): (.+)$", re.S)


def _pydantic_problems(file: str, err: ValidationError, prefix: str = "") -> list[CaseProblem]:
    problems = []
    for e in err.errors(include_url=False):
        loc = field_path(e["loc"])
        if prefix:
            loc = f"{prefix}.{loc}" if loc else prefix
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field (not in the schema; see `diageval schema case`)"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "string_pattern_mismatch":
            pattern = (e.get("ctx") or {}).get("pattern", "")
            msg = f"expected a string matching {pattern}, got {e.get('input')!r}"
        elif e["type"] == "value_error" and msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
            # Cross-field checks on a whole model say which field they are about: "field.path: message".
            m = _FIELD_PREFIX.match(msg)
            if m:
                loc = ".".join(x for x in (loc, m.group(1)) if x)
                msg = m.group(2)
        problems.append(CaseProblem(file=file, field=loc, message=msg))
    return problems


def parse_case_file(path: Path) -> tuple[Case | None, list[CaseProblem]]:
    """Read and model-validate one YAML file; no taxonomy or registry checks."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return None, [CaseProblem(file=file, field="", message=f"cannot read: {exc.strerror}")]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [CaseProblem(file=file, field="", message=f"not valid YAML{where}: {problem}")]
    if not isinstance(data, dict):
        return None, [CaseProblem(file=file, field="", message=f"expected a mapping at the top, got {type(data).__name__}")]
    try:
        return Case.model_validate(data), []
    except ValidationError as err:
        return None, _pydantic_problems(file, err)


def check_case(case: Case, file: str, taxonomy: Taxonomy) -> list[CaseProblem]:
    """Checks that need the taxonomy and the plugin registries."""
    from diageval.faults import FAULTS
    from diageval.workloads import WORKLOADS

    problems: list[CaseProblem] = []

    def bad(field: str, message: str) -> None:
        problems.append(CaseProblem(file=file, field=field, message=message))

    for i, cause in enumerate(case.labels.causes):
        kind = taxonomy.kind_of(cause.category)
        field = f"labels.causes[{i}].category"
        if kind is None:
            bad(field, f"unknown category {cause.category!r}; expected one of the taxonomy's causes: {', '.join(taxonomy.causes)}")
        elif kind != "cause":
            bad(field, f"{cause.category!r} is a symptom; list it under labels.symptoms, not labels.causes")
        for r in cause.ranks or []:
            if r >= case.workload.world_size:
                bad(f"labels.causes[{i}].ranks", f"rank {r} is out of range for world_size {case.workload.world_size} (expected 0..{case.workload.world_size - 1})")
    for i, sym in enumerate(case.labels.symptoms):
        kind = taxonomy.kind_of(sym)
        field = f"labels.symptoms[{i}]"
        if kind is None:
            bad(field, f"unknown symptom {sym!r}; expected one of: {', '.join(taxonomy.symptoms)}")
        elif kind != "symptom":
            bad(field, f"{sym!r} is a cause; list it under labels.causes, not labels.symptoms")
    if case.manifest and case.manifest.rank is not None and case.manifest.rank >= case.workload.world_size:
        bad("manifest.rank", f"rank {case.manifest.rank} is out of range for world_size {case.workload.world_size}")

    workload = WORKLOADS.get(case.workload.name)
    if workload is None:
        bad("workload.name", f"unknown workload {case.workload.name!r}; registered: {', '.join(sorted(WORKLOADS))}")
    else:
        try:
            workload.params_model.model_validate(case.workload.params)
        except ValidationError as err:
            problems.extend(_pydantic_problems(file, err, prefix="workload.params"))
    for i, fault_spec in enumerate(case.faults):
        fault = FAULTS.get(fault_spec.name)
        if fault is None:
            bad(f"faults[{i}].name", f"unknown fault {fault_spec.name!r}; registered: {', '.join(sorted(FAULTS))}")
            continue
        try:
            params = fault.params_model.model_validate(fault_spec.params)
        except ValidationError as err:
            problems.extend(_pydantic_problems(file, err, prefix=f"faults[{i}].params"))
            continue
        for field, message in fault.check(params, case.workload):
            bad(f"faults[{i}].params.{field}", message)
    return problems


def load_case(path: Path, taxonomy: Taxonomy) -> LoadedCase:
    case, problems = parse_case_file(path)
    if case is not None:
        problems = check_case(case, str(path), taxonomy)
    if problems:
        raise CaseLoadError(problems)
    assert case is not None
    return LoadedCase(case=case, path=Path(path), file_sha256=sha256_text(Path(path).read_text(encoding="utf-8")))


def find_case_files(paths: Iterable[Path]) -> list[Path]:
    """YAML files under the given files or folders, sorted; taxonomy.yaml is not a case."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(f for f in sorted(p.rglob("*.y*ml")) if f.suffix in (".yaml", ".yml") and f.name != "taxonomy.yaml")
        else:
            files.append(p)
    return files


def validate_case_files(paths: Iterable[Path], taxonomy: Taxonomy) -> tuple[list[LoadedCase], list[CaseProblem]]:
    """Load every case under ``paths``; return the good ones and every problem (unique ids included)."""
    loaded: list[LoadedCase] = []
    problems: list[CaseProblem] = []
    for f in find_case_files(paths):
        try:
            loaded.append(load_case(f, taxonomy))
        except CaseLoadError as err:
            problems.extend(err.problems)
    first_file: dict[str, Path] = {}
    unique: list[LoadedCase] = []
    for lc in loaded:
        if lc.case.id in first_file:
            problems.append(CaseProblem(file=str(lc.path), field="id", message=f"duplicate id {lc.case.id!r}, also in {first_file[lc.case.id]}"))
        else:
            first_file[lc.case.id] = lc.path
            unique.append(lc)
    return unique, problems


class CaseSet(BaseModel):
    """A validated corpus: the cases, their taxonomy and a hash that identifies them together."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    cases: list[LoadedCase]
    taxonomy: Taxonomy
    taxonomy_sha256: str

    @property
    def hash(self) -> str:
        """sha256 over every case file's bytes (sorted by id) and the taxonomy file's bytes."""
        parts = [f"{lc.case.id}:{lc.file_sha256}" for lc in sorted(self.cases, key=lambda lc: lc.case.id)]
        parts.append(f"taxonomy:{self.taxonomy_sha256}")
        return sha256_text("\n".join(parts))

    def get(self, case_id: str) -> LoadedCase:
        for lc in self.cases:
            if lc.case.id == case_id:
                return lc
        ids = [lc.case.id for lc in self.cases]
        from difflib import get_close_matches

        close = get_close_matches(case_id, ids, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no case {case_id!r}{hint}")

    def select(self, ids: Iterable[str] = (), tags: Iterable[str] = ()) -> list[LoadedCase]:
        ids, tags = list(ids), set(tags)
        chosen = [self.get(i) for i in ids] if ids else list(self.cases)
        if tags:
            chosen = [lc for lc in chosen if tags & set(lc.case.tags)]
        return chosen


def load_case_set(cases_dir: Path | None = None, taxonomy_path: Path | None = None) -> CaseSet:
    """Load and fully validate a corpus; raise :class:`CaseLoadError` listing every problem."""
    from diageval.paths import default_cases_dir, default_taxonomy_path
    from diageval.taxonomy import load_taxonomy

    cases_dir = Path(cases_dir) if cases_dir else default_cases_dir()
    taxonomy_path = Path(taxonomy_path) if taxonomy_path else default_taxonomy_path(cases_dir)
    if not taxonomy_path.exists():
        taxonomy_path = default_taxonomy_path()
    taxonomy = load_taxonomy(taxonomy_path)
    loaded, problems = validate_case_files([cases_dir], taxonomy)
    if problems:
        raise CaseLoadError(problems)
    return CaseSet(cases=loaded, taxonomy=taxonomy, taxonomy_sha256=sha256_text(taxonomy_path.read_text(encoding="utf-8")))
