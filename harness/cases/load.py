"""Loading and checking case files: every problem named with its file, field and what was expected.

Validation happens in two layers:

1. the pydantic model (:class:`~diageval.cases.model.Case`) checks shapes and what one file can know;
2. :func:`check_case` checks what needs the outside world: the taxonomy (categories exist, causes under
   ``causes`` and symptoms under ``symptoms``), the workload and fault registries (names registered,
   params valid for that plugin) and ranks against ``world_size``; :func:`validate_case_files` adds
   unique ids across files.

Every problem is a :class:`CaseProblem` naming the file, the field path and what was expected.

Types are strict, in the case model and in the plugins' parameters alike: ``world_size: true`` or
``steps: "30"`` is an error (``expected an integer, got "30" (a string; write 30 without quotes)``), never
read as 1 or 30. An integer is accepted where a number with a fraction is expected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from diageval.cases.model import Case
from diageval.cases.strict_yaml import YamlProblem, read_yaml
from diageval.cases.taxonomy import Taxonomy
from diageval.errors import DiagevalError
from diageval.fileio import sha256_text
from diageval.validation import field_path


class CaseProblem(BaseModel):
    """One thing wrong with one case file."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field or '<file>'}: {self.message}"


class CaseLoadError(DiagevalError):
    def __init__(self, problems: list[CaseProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class LoadedCase(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    case: Case
    path: Path
    file_sha256: str


_EXPECTED = {  # pydantic's error type for a value of the wrong type -> what the field takes, as a YAML writer says it
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "list_type": "a list", "tuple_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping",
}


def _yaml_kind(value: Any) -> str:
    """What a YAML value is, in a YAML writer's words."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number with a decimal point"), (str, "a string"),
                       (list, "a list"), (dict, "a mapping")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _wrong_type(expected: str, value: Any) -> str:
    """``expected an integer, got "30" (a string; write 30 without quotes)``: the value as it was written."""
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError):
        shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    kind = _yaml_kind(value)
    if isinstance(value, str) and expected in ("an integer", "a number"):
        try:
            float(value)
            kind += f"; write {value.strip()} without quotes"
        except ValueError:
            pass
    return f"expected {expected}, got {shown} ({kind})"


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
        elif e["type"] in _EXPECTED:  # strict types: no boolean for an integer, no string for a number
            msg = _wrong_type(_EXPECTED[e["type"]], e.get("input"))
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
    try:  # bad UTF-8, bad YAML, a key given twice, nesting too deep: one problem naming the file
        data = read_yaml(Path(path))
    except YamlProblem as exc:
        return None, [CaseProblem(file=file, field="", message=exc.message)]
    if not isinstance(data, dict):
        return None, [CaseProblem(file=file, field="", message=f"expected a mapping at the top, got {type(data).__name__}")]
    try:
        return Case.model_validate(data), []
    except ValidationError as err:
        return None, _pydantic_problems(file, err)
    except RecursionError:
        return None, [CaseProblem(file=file, field="", message="nested too deeply to read (a case is a few levels of plain data)")]


def check_case(case: Case, file: str, taxonomy: Taxonomy) -> list[CaseProblem]:
    """Checks that need the taxonomy and the plugin registries."""
    from diageval.recording.faults import FAULTS
    from diageval.recording.workloads import WORKLOADS

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
            if r >= case.world_size:
                bad(f"labels.causes[{i}].ranks", f"rank {r} is out of range for world_size {case.world_size} (expected 0..{case.world_size - 1})")
    for i, sym in enumerate(case.labels.symptoms):
        kind = taxonomy.kind_of(sym)
        field = f"labels.symptoms[{i}]"
        if kind is None:
            bad(field, f"unknown symptom {sym!r}; expected one of: {', '.join(taxonomy.symptoms)}")
        elif kind != "symptom":
            bad(field, f"{sym!r} is a cause; list it under labels.causes, not labels.symptoms")
    if case.manifest and case.manifest.rank is not None and case.manifest.rank >= case.world_size:
        bad("manifest.rank", f"rank {case.manifest.rank} is out of range for world_size {case.world_size}")
    if case.fleet is not None:  # regression and fleet cases: their runs' workloads and the faults behind factors
        from diageval.cases.fleet_checks import check_fleet

        for field, issue in check_fleet(case):
            if isinstance(issue, ValidationError):
                problems.extend(_pydantic_problems(file, issue, prefix=field))
            else:
                bad(field, issue)
        return problems
    if case.workload is None:  # recorded: no workload; its faults may only edit the imported evidence
        for i, fault_spec in enumerate(case.faults):
            fault = FAULTS.get(fault_spec.name)
            if fault is None:
                bad(f"faults[{i}].name", f"unknown fault {fault_spec.name!r}; registered: {', '.join(sorted(FAULTS))}")
            elif fault.load().stage != "bundle":
                bad(f"faults[{i}].name", f"{fault_spec.name!r} injects into a live run; a recorded case's faults can only "
                                         "be evidence edits (bundle faults) of its traces")
            else:
                try:
                    fault.params_model.model_validate(fault_spec.params, strict=True)
                except ValidationError as err:
                    problems.extend(_pydantic_problems(file, err, prefix=f"faults[{i}].params"))
        return problems

    workload = WORKLOADS.get(case.workload.name)
    if workload is None:
        bad("workload.name", f"unknown workload {case.workload.name!r}; registered: {', '.join(sorted(WORKLOADS))}")
    else:
        try:
            workload.params_model.model_validate(case.workload.params, strict=True)
        except ValidationError as err:
            problems.extend(_pydantic_problems(file, err, prefix="workload.params"))
    for i, fault_spec in enumerate(case.faults):
        fault = FAULTS.get(fault_spec.name)
        if fault is None:
            bad(f"faults[{i}].name", f"unknown fault {fault_spec.name!r}; registered: {', '.join(sorted(FAULTS))}")
            continue
        try:
            params = fault.params_model.model_validate(fault_spec.params, strict=True)
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
    from diageval.cases.taxonomy import load_taxonomy
    from diageval.paths import default_cases_dir, default_taxonomy_path

    cases_dir = Path(cases_dir) if cases_dir else default_cases_dir()
    taxonomy_path = Path(taxonomy_path) if taxonomy_path else default_taxonomy_path(cases_dir)
    if not taxonomy_path.exists():
        taxonomy_path = default_taxonomy_path()
    taxonomy = load_taxonomy(taxonomy_path)
    loaded, problems = validate_case_files([cases_dir], taxonomy)
    if problems:
        raise CaseLoadError(problems)
    return CaseSet(cases=loaded, taxonomy=taxonomy, taxonomy_sha256=sha256_text(taxonomy_path.read_text(encoding="utf-8")))


def fault_ops(case: Case) -> tuple[str, ...]:
    """The op or kernel names the case's injected faults act through (the fault registry's ``ops``)."""
    from diageval.recording.faults import FAULTS

    out: list[str] = []
    for fault in case.faults:
        info = FAULTS.get(fault.name)
        if info is not None:
            out += info.ops(fault.params)
    return tuple(dict.fromkeys(out))
