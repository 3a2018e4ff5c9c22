"""Labeled cases (``cases/<area>/<name>.yaml``): the strict pydantic model of one case file.

A case is plain data (``yaml.safe_load``, no includes, no code). This model checks shapes and what a single
file can know by itself (unknown fields, kebab-case ids, label kinds by prefix, step ranges inside the
workload); :mod:`diageval.cases.load` checks the rest against the taxonomy and the plugin registries.

Conventions decided here (the design is silent):
* step ranges are half-open ``[start, stop)`` like Python's ``range``: ``steps: [10, 40]`` on a 40-step
  workload means steps 10..39;
* a case with ``expect: healthy`` or ``expect: abstain`` labels no cause; it may still have faults
  (a confounder is a benign anomaly injected into a healthy run; an abstain case removes evidence);
* ``manifest`` is required for ``expect: diagnose`` (a positive case counts only if its injection is
  measurably there) and forbidden otherwise.
* A case's evidence is either injected (``workload`` + ``faults``: recorded live here, verified against
  its healthy twin) or recorded (``recorded``: a real job's traces, named by data-folder path and
  sha256 with their provenance, labeled from measurements written in the case). Exactly one of
  ``workload`` and ``recorded``. A recorded case has no faults and no manifest (nothing was injected);
  its ``recorded.measured`` figures are what ``diageval trace stats`` prints for its files (a test
  re-derives them); its ``faults`` may only be evidence edits (a derived case: part of the real traces
  removed, e.g. their device events, applied to the imported bundle), and ``recorded.rationale`` says how they lead to the labels. The trace files are
  never in the repository: the harness finds them under the data folder (``paths.real_traces_dir``).
* ``kind`` (issue 24): ``job`` (the default: one run, what slows it), ``regression`` (a baseline and a
  candidate run that differ in one or more declared factors: did the candidate regress, by how much, why, and
  behind which of the values it changed; issue 39: the public ones change two or more, as a release moves a
  version and a config together, so that "the candidate's differing value" is not the answer by construction)
  or ``fleet`` (8-16 runs of one workload across hosts, versions and configurations). The two multi-run
  kinds carry ``fleet:``: the runs, each with an opaque name, its metadata (factor -> value, opaque words
  that never encode a fault), its start order and per-run workload parameter overrides, and the faults
  that apply wherever one factor takes one value (``where: {name: host, value: node-07}``). The case's
  ``workload`` is every run's base workload (or, for a recorded regression, each run names its
  ``recorded`` traces); case-level ``faults`` stay empty. A fleet's labels name the factor value each
  cause sits behind (``causes[].factor``); a fleet whose faulty factor value is aliased with another
  (every run with one also has the other) expects ``abstain`` and names both under ``labels.aliased``.
  A regression's label names one of the values its candidate changes (the one at fault: the others changed too
  and did nothing); a regression whose evidence cannot say which of its changed values is at fault expects
  ``abstain`` and names them under ``labels.aliased``. A healthy regression (``expect: healthy``) whose
  candidate changes two values says that neither change slowed it: every value blamed there is a false
  statement. Only a healthy regression may change nothing (the same job run twice). The value words a
  bundle shows are drawn per assembly (:class:`~diageval.recording.truth.FleetDraw`); a case is scored in
  the words its bundle showed (:meth:`Case.with_shown_values`).
  :meth:`Case.fleet_members` turns each run into an ordinary job case (what gets recorded and cached).

Size: over 400 lines because the case file is one tree of strict models validated together (job, recorded
and multi-run sections, and the checks across them); splitting the fleet section out would make the two
modules import each other (its runs hold fault specs and recorded evidence, the case holds the fleet).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diageval.cases.taxonomy import TAXONOMY_ID_PATTERN
from diageval.diagnosis import FACTOR_PART_PATTERN, FactorRef, check_fleet_runs
from diageval.fileio import sha256_text

CASE_ID_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"

ManifestMetric = Literal[
    "step_time_median",
    "step_time_mean",
    "step_time_p90",
    "rank_step_time_median",  # the median step time of one rank (``manifest.rank``), others ignored
]



def _canonical_yaml(payload: Any) -> str:
    """``yaml.safe_dump(payload, sort_keys=True)``, with libyaml's emitter where PyYAML has it (the same text:
    checked on every payload of the corpus; the pure-Python emitter took ~6 ms a case, in every cache lookup)."""
    return yaml.dump(payload, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=True)

class _Strict(BaseModel):
    """Unknown fields refused, and strict types: YAML's ``true`` is not the integer 1 and ``"30"`` is not the
    number 30 (a lax model would accept both, so a typo could still validate). An integer is accepted where
    a float is expected. Step ranges are written as YAML lists, so those fields accept a list for their
    tuple (``Field(strict=False)``); their items stay strict."""

    model_config = ConfigDict(extra="forbid", strict=True)


class WorkloadSpec(_Strict):
    name: str = Field(description="A registered workload (harness/recording/workloads/__init__.py)")
    world_size: int = Field(1, ge=1, le=64, description="Number of ranks")
    steps: int = Field(ge=2, le=10_000, description="Training steps to run")
    params: dict[str, Any] = Field(default_factory=dict, description="Workload parameters")


class FaultSpec(_Strict):
    name: str = Field(description="A registered fault injector")
    params: dict[str, Any] = Field(default_factory=dict, description="Injector parameters")


class CauseLabel(_Strict):
    category: str = Field(pattern=TAXONOMY_ID_PATTERN, description="A cause id of the taxonomy")
    ranks: list[int] | None = Field(None, description="Ranks where the cause sits; null = all or not rank-specific")
    steps: tuple[int, int] | None = Field(None, strict=False, description="Half-open step range [start, stop)")
    factor: FactorRef | None = Field(None, description="Regression and fleet cases: the factor value the cause "
                                                       "sits behind (the runs with it are the slow ones)")

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
    aliased: list[FactorRef] = Field(default_factory=list, description="Fleet cases expecting abstain: the factor "
                                     "values that cannot be told apart (every run with one has the others)")

    @model_validator(mode="after")
    def _expect_matches_causes(self) -> "Labels":
        if self.aliased and self.expect != "abstain":
            raise ValueError("aliased: only a case with expect: abstain names aliased factor values")
        if self.aliased and len(set(self.aliased)) < 2:
            raise ValueError("aliased: name at least two different factor values (the ones that cannot be told apart)")
        if self.expect == "diagnose" and not self.causes:
            raise ValueError("causes: a case with expect: diagnose needs at least one labeled cause")
        if self.expect != "diagnose" and self.causes:
            raise ValueError(f"causes: a case with expect: {self.expect} labels no cause; remove them or use expect: diagnose")
        return self


class ManifestationCheck(_Strict):
    metric: ManifestMetric
    min_ratio: float = Field(gt=1.0, description="Injected / healthy-twin metric must reach this")
    rank: int | None = Field(None, ge=0, description="Only for rank_step_time_median")

    @model_validator(mode="after")
    def _rank_only_for_rank_metric(self) -> "ManifestationCheck":
        if self.metric == "rank_step_time_median" and self.rank is None:
            raise ValueError("rank_step_time_median needs a rank")
        if self.metric != "rank_step_time_median" and self.rank is not None:
            raise ValueError("rank is only for rank_step_time_median")
        return self


_GITHUB_OWNER = re.compile(r"[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}")
_GITHUB_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


class TraceSource(_Strict):
    """Where a recorded trace file comes from."""

    repository: str = Field(min_length=1, description="Public repository (owner/name) the file was copied from")
    commit: str = Field(pattern=r"^[0-9a-f]{7,40}$", description="Commit of that repository")
    path: str = Field(min_length=1, description="Path of the file in that repository")
    licence: str = Field(min_length=1, description="The file's licence (SPDX id)")

    @field_validator("path")
    @classmethod
    def _inside_repository(cls, v: str) -> str:
        """A path inside the repository: it becomes a part of the download URL and of a mirror's path, where
        a leading '/' or a '..' would lead outside the commit's tree."""
        if v.startswith("/") or ".." in v.split("/") or "\\" in v:
            raise ValueError(f"expected a path inside the repository, without a leading '/' or '..', got {v!r}")
        return v

    @field_validator("repository")
    @classmethod
    def _owner_slash_name(cls, v: str) -> str:
        """``owner/name`` as GitHub spells them (owner: letters, digits, single hyphens inside, at most 39;
        name: letters, digits, '.', '-', '_', at most 100, not '.' or '..'): the repository becomes a part of
        the download URL and of a mirror's path, where '..', '?', '#' or a host would lead elsewhere."""
        owner, _, name = v.partition("/")
        if not (_GITHUB_OWNER.fullmatch(owner) and len(owner) <= 39 and _GITHUB_NAME.fullmatch(name)
                and name not in (".", "..")):
            raise ValueError(f"expected owner/name of a public repository (e.g. pytorch/kineto: letters, digits "
                             f"and '-' in the owner; letters, digits, '.', '-' and '_' in the name), got {v!r}")
        return v


class RecordedFile(_Strict):
    path: str = Field(min_length=1, description="Relative to the data folder (--data / $DIAGEVAL_DATA)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int | None = Field(None, ge=1, description="The file's size in bytes: `diageval data fetch` refuses a download "
                             "past it (without it, past the importer's 4 GiB limit)")
    rank: int = Field(ge=0, description="The rank this trace belongs to")
    source: TraceSource

    @field_validator("path")
    @classmethod
    def _inside_data_folder(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"expected a path relative to the data folder, without '..', got {v!r}")
        return v


class MeasuredFile(_Strict):
    file: str = Field(description="One of recorded.files[].path")
    figures: dict[str, str] = Field(min_length=1, description="`diageval trace stats` line name -> the value it prints")


class Measured(_Strict):
    command: str = Field(min_length=1, description="The one command a reviewer runs to re-derive the figures")
    figures: list[MeasuredFile] = Field(min_length=1)


DEVICE_MAKERS: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu only",),
    "nvidia": ("nvidia", "tesla", "quadro", "geforce", "a100", "h100", "b200"),
    "amd": ("amd", "instinct", "mi300", "mi250"),
    "mtia": ("mtia",),
}
"""Device families by words of a recorded case's ``hardware``, in order (the first that matches)."""


class RecordedEvidence(_Strict):
    """A real job's traces as a case's evidence, with their provenance and the measurements behind the labels."""

    job: str = Field(min_length=1, description="What the job was")
    hardware: str = Field(min_length=1)
    framework: str = Field(min_length=1, description="Framework and versions, as far as the traces say")
    world_size: int = Field(ge=1, le=1_000_000, description="Ranks in the job (may exceed the traces present)")
    files: list[RecordedFile] = Field(min_length=1)
    measured: Measured
    rationale: str = Field(min_length=1, description="How the measured figures lead to the labels")

    @model_validator(mode="after")
    def _consistent(self) -> "RecordedEvidence":
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("files: a path is listed twice")
        ranks = [f.rank for f in self.files]
        if len(set(ranks)) != len(ranks):
            raise ValueError("files: two files claim the same rank")
        for i, f in enumerate(self.files):
            if f.rank >= self.world_size:
                raise ValueError(f"files[{i}].rank: {f.rank} is out of range for world_size {self.world_size}")
        for i, m in enumerate(self.measured.figures):
            if m.file not in paths:
                raise ValueError(f"measured.figures[{i}].file: {m.file!r} is not one of files[].path")
        return self


RUN_NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"


class FleetRun(_Strict):
    """One run of a regression or fleet case. Its name and metadata reach the diagnoser (``fleet.json``):
    opaque words that never encode a fault (a test greps them for taxonomy, fault and parameter words)."""

    name: str = Field(pattern=RUN_NAME_PATTERN, max_length=32, description="Opaque run name (e.g. job-4f1c)")
    metadata: dict[str, str] = Field(min_length=1, description="Factor name -> value (host, version, a config "
                                                                "value), all strings, opaque")
    start: int = Field(ge=0, description="Start order in the fleet (0 first); fleet.json gives each run a start "
                                         "time in this order")
    role: Literal["baseline", "candidate"] | None = Field(None, description="Regression cases: which run is which")
    workload_params: dict[str, Any] = Field(default_factory=dict, description="Overrides of the base workload's "
                                            "params for this run (benign variation: a seed, a batch size)")
    recorded: RecordedEvidence | None = Field(None, description="A recorded regression: this run's real traces")

    @field_validator("metadata")
    @classmethod
    def _opaque_words(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():  # the FactorRef patterns: a diagnosis must be able to name each of them
            for part in (name, value):
                if not isinstance(part, str) or not re.match(FACTOR_PART_PATTERN, part):
                    raise ValueError(f"{name!r}: {value!r}: expected factor names and values as opaque words matching "
                                     f"{FACTOR_PART_PATTERN} (strings: quote numbers)")
        return v


class FactorFaults(_Strict):
    """Faults injected into every run whose metadata gives ``where.name`` the value ``where.value``."""

    where: FactorRef
    faults: list[FaultSpec] = Field(min_length=1)


class FleetSpec(_Strict):
    runs: list[FleetRun] = Field(min_length=2, max_length=16)
    faults: list[FactorFaults] = Field(default_factory=list, description="Faults behind factor values")

    @model_validator(mode="after")
    def _consistent(self) -> "FleetSpec":
        check_fleet_runs(self.runs)
        starts = [r.start for r in self.runs]
        if len(set(starts)) != len(starts):
            raise ValueError("runs: two runs share a start order")
        keys = set(self.runs[0].metadata)
        for i, ff in enumerate(self.faults):
            if ff.where.name not in keys:
                raise ValueError(f"faults[{i}].where.name: {ff.where.name!r} is not a factor of the runs' metadata "
                                 f"({', '.join(sorted(keys))})")
            if not self.runs_with(ff.where):
                raise ValueError(f"faults[{i}].where.value: no run has {ff.where.name} = {ff.where.value!r}")
        return self

    @property
    def factors(self) -> list[str]:
        return sorted(self.runs[0].metadata)

    def changed_values(self) -> list[FactorRef]:
        """A regression's candidate values that differ from its baseline's, by factor name (empty for a fleet)."""
        base = next((r for r in self.runs if r.role == "baseline"), None)
        cand = next((r for r in self.runs if r.role == "candidate"), None)
        if base is None or cand is None:
            return []
        return [FactorRef(name=k, value=v) for k, v in sorted(cand.metadata.items()) if base.metadata.get(k) != v]

    def with_shown_values(self, shown: dict[str, str]) -> "FleetSpec":
        """This fleet with every factor value replaced by the word its bundle shows (``shown``: ``name=value`` -> the
        drawn value, :class:`~diageval.recording.truth.FleetDraw`); values not in ``shown`` stay as they are."""
        def word(name: str, value: str) -> str:
            return shown.get(f"{name}={value}", value)

        runs = [r.model_copy(update={"metadata": {k: word(k, v) for k, v in r.metadata.items()}}) for r in self.runs]
        faults = [ff.model_copy(update={"where": FactorRef(name=ff.where.name, value=word(ff.where.name, ff.where.value))})
                  for ff in self.faults]
        return self.model_copy(update={"runs": runs, "faults": faults})

    def runs_with(self, ref: FactorRef) -> list[FleetRun]:
        return [r for r in self.runs if r.metadata.get(ref.name) == ref.value]

    def faults_of(self, run: FleetRun) -> list[FaultSpec]:
        """The faults injected into ``run``: those of every ``where`` its metadata matches, in listed order."""
        return [f for ff in self.faults if run.metadata.get(ff.where.name) == ff.where.value for f in ff.faults]

    def aliased_with(self, ref: FactorRef) -> list[FactorRef]:
        """Every other factor value held by exactly the same runs as ``ref`` (perfectly confounded with it)."""
        runs = {r.name for r in self.runs_with(ref)}
        out = []
        for name in self.factors:
            for value in sorted({r.metadata[name] for r in self.runs}):
                other = FactorRef(name=name, value=value)
                if other != ref and {r.name for r in self.runs_with(other)} == runs:
                    out.append(other)
        return out

    def ordered(self) -> list[FleetRun]:
        return sorted(self.runs, key=lambda r: r.start)


class Requires(_Strict):
    device: Literal["any", "cuda"] = "any"
    min_devices: int = Field(1, ge=1, description="CUDA devices needed when device is cuda")


class Case(_Strict):
    id: str = Field(pattern=CASE_ID_PATTERN, description="Unique, kebab-case; never shown to a diagnoser")
    title: str = Field(min_length=1)
    kind: Literal["job", "regression", "fleet"] = Field("job", description="job: one run, what slows it; "
                                                        "regression: a baseline and a candidate run differing in one "
                                                        "or more factors; fleet: 8-16 runs across hosts, versions, configurations")
    fleet: FleetSpec | None = Field(None, description="regression and fleet cases: the runs, their metadata and the "
                                                      "faults behind factor values")
    workload: WorkloadSpec | None = Field(None, description="Injected evidence: the workload recorded here")
    recorded: RecordedEvidence | None = Field(None, description="Recorded evidence: a real job's traces")
    faults: list[FaultSpec] = Field(default_factory=list, description="Empty = healthy control")
    labels: Labels
    manifest: ManifestationCheck | None = None
    requires: Requires = Field(default_factory=Requires)
    tags: list[str] = Field(default_factory=list)
    split: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                              description="The part of the corpus this case belongs to (e.g. public, or a private "
                                          "corpus' own name): `diageval report` shows each diagnoser's skill per "
                                          "split and the gap between splits; never shown to a diagnoser")

    @model_validator(mode="before")
    @classmethod
    def _difficulty_is_measured(cls, data: Any) -> Any:
        if isinstance(data, dict) and "difficulty" in data:
            raise ValueError(
                "difficulty: not a case field any more: a case's difficulty is measured (its injection's effect over "
                "its healthy twin's noise, `diageval verify`), not declared; remove this line"
            )
        return data

    @model_validator(mode="after")
    def _internal(self) -> "Case":
        if self.kind != "job":
            return self._check_multi_run()
        if self.fleet is not None:
            raise ValueError("fleet: only cases of kind regression or fleet have runs; add kind: regression or kind: fleet")
        if (self.workload is None) == (self.recorded is None):
            raise ValueError("workload: a case has exactly one of workload (injected evidence) and recorded (a real job's traces)")
        if self.recorded is not None:
            # faults: a recorded case injects nothing; it may list evidence edits (bundle faults: part of a
            # real trace removed, e.g. its device events), which the loader checks are edits and nothing else
            if self.manifest is not None:
                raise ValueError("manifest: a recorded case has no injection to check; its labels rest on recorded.measured")
            return self
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

    def _check_multi_run(self) -> "Case":
        fleet = self.fleet
        if fleet is None:
            raise ValueError(f"fleet: a case of kind {self.kind} needs fleet: (its runs, their metadata and faults)")
        if self.faults:
            raise ValueError(f"faults: a {self.kind} case injects through fleet.faults (behind a factor value); "
                             "leave the case-level faults empty")
        if self.recorded is not None:
            raise ValueError(f"recorded: a recorded {self.kind} case names each run's traces under fleet.runs[].recorded")
        recorded_runs = [r.recorded is not None for r in fleet.runs]
        if self.workload is None and not all(recorded_runs):
            raise ValueError("workload: every run needs either the case's workload (recorded live here) or its own "
                             "recorded traces (fleet.runs[].recorded)")
        if self.workload is not None and any(recorded_runs):
            raise ValueError("fleet.runs: a case with a workload records its runs live; recorded traces go in a case "
                             "without a workload")
        if any(recorded_runs) and fleet.faults:
            raise ValueError("fleet.faults: a recorded fleet injects nothing; its labels rest on the runs' recorded.measured")
        if self.kind == "regression":
            if len(fleet.runs) != 2:
                raise ValueError(f"fleet.runs: a regression has exactly 2 runs (baseline and candidate), got {len(fleet.runs)}")
            if sorted(str(r.role) for r in fleet.runs) != ["baseline", "candidate"]:
                raise ValueError("fleet.runs: a regression's runs have role baseline and role candidate, one each")
            candidate = next(r for r in fleet.runs if r.role == "candidate")
            changed = fleet.changed_values()
            if not changed and self.labels.expect != "healthy":
                raise ValueError("fleet.runs: a regression's candidate differs from its baseline in no declared factor, "
                                 "so nothing could be blamed; expected at least one differing factor (a release moves "
                                 "two or more: a version and a config), or expect: healthy for a rerun of the same job")
            for i, c in enumerate(self.labels.causes):
                if c.factor is not None and c.factor not in changed:
                    raise ValueError(f"labels.causes[{i}].factor: {c.factor.name} = {c.factor.value!r} is not a value the "
                                     f"candidate ({candidate.name}) changes; expected one of "
                                     f"{', '.join(f'{v.name} = {v.value!r}' for v in changed) or 'none'}")
            for i, ref in enumerate(self.labels.aliased):
                if ref not in changed:
                    raise ValueError(f"labels.aliased[{i}]: {ref.name} = {ref.value!r} is not a value the candidate "
                                     f"({candidate.name}) changes; a regression's aliased values are its changed ones")
        else:
            if not 8 <= len(fleet.runs) <= 16:
                raise ValueError(f"fleet.runs: a fleet has 8 to 16 runs, got {len(fleet.runs)}")
            if any(r.role is not None for r in fleet.runs):
                raise ValueError("fleet.runs: role (baseline, candidate) is for regression cases only")
        for i, c in enumerate(self.labels.causes):
            if c.factor is None:
                raise ValueError(f"labels.causes[{i}].factor: a {self.kind} case names the factor value the cause sits behind")
            if not fleet.runs_with(c.factor):
                raise ValueError(f"labels.causes[{i}].factor: no run has {c.factor.name} = {c.factor.value!r}")
            if self.workload is not None and not any(ff.where == c.factor for ff in fleet.faults):
                raise ValueError(f"labels.causes[{i}].factor: no fleet.faults entry injects behind "
                                 f"{c.factor.name} = {c.factor.value!r}")
            if self.workload is not None and c.steps is not None and c.steps[1] > self.workload.steps:
                raise ValueError(f"labels.causes[{i}].steps: stop {c.steps[1]} is past the workload's {self.workload.steps} steps")
        for i, ref in enumerate(self.labels.aliased):
            if not fleet.runs_with(ref):
                raise ValueError(f"labels.aliased[{i}]: no run has {ref.name} = {ref.value!r}")
        if self.labels.aliased:
            first = self.labels.aliased[0]
            group = set(fleet.aliased_with(first)) | {first}
            for i, ref in enumerate(self.labels.aliased[1:], start=1):
                if ref not in group:
                    raise ValueError(f"labels.aliased[{i}]: {ref.name} = {ref.value!r} is not held by exactly the runs "
                                     f"that hold {first.name} = {first.value!r}; aliased values share every run")
        if self.labels.expect == "diagnose" and self.manifest is None and self.workload is not None:
            raise ValueError("manifest: required for expect: diagnose (how to tell the fault behind the factor manifested)")
        if self.labels.expect == "diagnose" and self.workload is not None and not fleet.faults:
            raise ValueError("fleet.faults: a positive case injects at least one fault behind a factor value")
        if self.labels.expect != "diagnose" and self.manifest is not None:
            raise ValueError("manifest: only positive cases (expect: diagnose) have one")
        return self

    def with_shown_values(self, shown: dict[str, str]) -> "Case":
        """This case in the factor value words its bundle showed (``shown``: ``name=value`` -> the drawn word, from
        the bundle's :class:`~diageval.recording.truth.FleetDraw`): its runs' metadata, the faults' ``where``, the
        labels' factors and aliased values, so that a diagnosis naming what it saw is judged against the labels.
        Itself when ``shown`` is empty (one job, or a bundle assembled before values were drawn)."""
        if not shown or self.fleet is None:
            return self

        def ref(r: FactorRef) -> FactorRef:
            return FactorRef(name=r.name, value=shown.get(f"{r.name}={r.value}", r.value))

        causes = [c.model_copy(update={"factor": ref(c.factor) if c.factor is not None else None})
                  for c in self.labels.causes]
        labels = self.labels.model_copy(update={"causes": causes, "aliased": [ref(a) for a in self.labels.aliased]})
        return self.model_copy(update={"fleet": self.fleet.with_shown_values(shown), "labels": labels})

    def with_rank_draw(self, ranks: list[int] | None) -> "Case":
        """This case with its labels' ranks where a recording's draw put them (``ranks``: case rank r was recorded
        as rank ``ranks[r]``; from a result line's ``rank_draw`` or a truth record, recording/draw.py): what a
        drawn recording is scored against. Itself for None or the identity."""
        if not ranks or ranks == sorted(ranks):
            return self

        def moved(r: int) -> int:
            return ranks[r] if 0 <= r < len(ranks) else r

        causes = [label.model_copy(update={"ranks": sorted(moved(r) for r in label.ranks)}) if label.ranks else label
                  for label in self.labels.causes]
        return self.model_copy(update={"labels": self.labels.model_copy(update={"causes": causes})})

    def fleet_members(self) -> list[tuple[FleetRun, "Case"]]:
        """Each run of an injected regression or fleet case, in start order, as the ordinary job case that records
        it: the base workload with the run's parameter overrides and the faults behind its factor values. Its
        id is derived from its spec (not the fleet case's), so runs with the same spec are one cached recording
        shared between cases; its labels are empty (a member is never scored alone)."""
        if self.fleet is None or self.workload is None:
            raise ValueError(f"case {self.id}: only an injected regression or fleet case has members to record")
        out = []
        for run in self.fleet.ordered():
            workload = self.workload.model_copy(update={"params": {**self.workload.params, **run.workload_params}})
            member = Case(id="member", title=f"a run of {self.id}", workload=workload, faults=self.fleet.faults_of(run),
                          labels=Labels(expect="healthy"), requires=self.requires)
            out.append((run, member.model_copy(update={"id": f"member-{member.spec_hash()[:16]}"})))
        return out

    def recorded_files(self) -> list["RecordedFile"]:
        """The real traces this case's evidence is made of: a recorded job's, or each run's of a recorded
        regression or fleet (empty for a case recorded live here)."""
        if self.recorded is not None:
            return list(self.recorded.files)
        runs = self.fleet.runs if self.fleet is not None else []
        return [f for run in runs if run.recorded is not None for f in run.recorded.files]

    @property
    def evidence_kind(self) -> Literal["injected", "recorded"]:
        if self.fleet is not None:
            return "injected" if self.workload is not None else "recorded"
        return "recorded" if self.recorded is not None else "injected"

    @property
    def device_family(self) -> str:
        """The kind of device the evidence comes from, for the board's per-device view (issue 23): a recorded
        case's by its hardware's maker (:data:`DEVICE_MAKERS`; ``unknown`` where the traces name none), an
        injected one by the device it is recorded on here (``cpu``, or ``nvidia`` for CUDA cases)."""
        recorded = self.recorded
        if self.fleet is not None and self.workload is None:
            recorded = self.fleet.runs[0].recorded
        if recorded is None:
            return "nvidia" if self.requires.device == "cuda" else "cpu"
        hardware = recorded.hardware.lower()
        for family, marks in DEVICE_MAKERS.items():
            if any(m in hardware for m in marks):
                return family
        return "unknown"

    @property
    def world_size(self) -> int:
        scaled = [f.params.get("scaled_world_size") for f in self.faults if f.name == "scale_out"]
        if scaled and isinstance(scaled[-1], int):  # an evidence edit that scales the job out (issue 26)
            return scaled[-1]
        if self.workload is not None:
            return self.workload.world_size
        if self.fleet is not None:  # a recorded fleet: its largest run
            return max(r.recorded.world_size for r in self.fleet.runs if r.recorded is not None)
        return self.recorded.world_size

    def healthy_twin(self) -> "Case":
        """The same case with its faults removed: the baseline for the manifestation check."""
        if self.recorded is not None:
            raise ValueError(f"case {self.id}: a recorded case has no healthy twin")
        if self.fleet is not None:
            raise ValueError(f"case {self.id}: a {self.kind} case has no healthy twin; its runs without the fault are its baseline")
        return self.model_copy(update={"faults": []})

    def spec_hash(self) -> str:
        """Hash of everything that shapes a recording or an import (not title, tags or labels)."""
        if self.fleet is not None:
            payload = {"kind": self.kind, "workload": self.workload.model_dump() if self.workload else None,
                       "fleet": self.fleet.model_dump(mode="json")}
            return sha256_text(_canonical_yaml(payload))
        if self.recorded is not None:
            payload = {"recorded": [(f.rank, f.sha256) for f in sorted(self.recorded.files, key=lambda f: f.rank)]}
            if self.faults:  # evidence edits of the real traces
                payload["faults"] = [f.model_dump() for f in self.faults]
            return sha256_text(_canonical_yaml(payload))
        payload = {"workload": self.workload.model_dump(), "faults": [f.model_dump() for f in self.faults]}
        return sha256_text(_canonical_yaml(payload))
