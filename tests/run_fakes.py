"""Small fakes for the run-pipeline tests: in-memory cases, tiny bundle folders, a fake evidence step.

The fakes stand in for recording (slow, torch) so the pipeline's own logic is tested in milliseconds.
Bundles are opaque like real ones: their folder names and contents never mention the case.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from diageval.bundle.model import BundleEnv, BundleManifest, describe_files
from diageval.cases.load import CaseSet, LoadedCase
from diageval.cases.model import Case
from diageval.cases.taxonomy import load_taxonomy
from diageval.paths import default_taxonomy_path
from diageval.recording import PreparedEvidence, RecordingPolicy, Verification


def make_case(case_id: str, expect: str = "diagnose", cause: str = "compute.straggler_rank", ranks=None, fault: str = "slow_rank") -> Case:
    data = {
        "id": case_id,
        "title": f"fake {case_id}",
        "workload": {"name": "mlp_ddp", "world_size": 2, "steps": 20},
        "labels": {"expect": expect},
        "tags": ["fake", expect],
    }
    if expect == "diagnose":
        data["faults"] = [{"name": fault, "params": {}}]
        data["labels"]["causes"] = [{"category": cause, "ranks": ranks}]
        data["labels"]["symptoms"] = ["symptom.slow_step"]
        data["manifest"] = {"metric": "step_time_median", "min_ratio": 1.2}
    return Case.model_validate(data)


def make_case_set(cases: list[Case]) -> CaseSet:
    taxonomy_path = default_taxonomy_path()
    loaded = [
        LoadedCase(case=c, path=Path(f"/fake/{c.id}.yaml"), file_sha256=hashlib.sha256(c.model_dump_json().encode()).hexdigest())
        for c in cases
    ]
    return CaseSet(
        cases=loaded,
        taxonomy=load_taxonomy(taxonomy_path),
        taxonomy_sha256=hashlib.sha256(taxonomy_path.read_bytes()).hexdigest(),
    )


def write_bundle(root: Path, bundle_id: str, *, trace_text: str = "", log_text: str = "step done\n") -> Path:
    """A minimal bundle: one rank's gzipped trace, steps, a log; ``trace_text`` lands inside the trace."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "rank0").mkdir(exist_ok=True)
    events = [{"name": "aten::mm", "ph": "X", "ts": 0, "dur": 10, "args": {"note": trace_text}}]
    with gzip.open(root / "rank0" / "trace.json.gz", "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    (root / "steps.jsonl").write_text("".join(json.dumps({"rank": 0, "step": i, "t_start": i, "t_end": i + 0.5}) + "\n" for i in range(4)))
    (root / "logs").mkdir(exist_ok=True)
    (root / "logs" / "rank0.log").write_text(log_text)
    manifest = BundleManifest(
        bundle_id=bundle_id,
        created=datetime.now(timezone.utc),
        env=BundleEnv(device="cpu", world_size=2, torch="2.13.0", python="3.11"),
        files=describe_files(root),
    )
    (root / "bundle.json").write_text(manifest.model_dump_json())
    return root


def fake_verification(manifested: bool, *, impact: float | None = 0.4) -> Verification:
    """A positive case's check as recording makes it (made before the sequential test: no ``test``), its injection
    1.8x the twin's 1.0 s over 3 repeats, against a 1.5 minimum."""
    return Verification(metric="step_time_median", min_ratio=1.5, injected=1.8, healthy=1.0, ratio=1.8, noise=0.05,
                        repeats=3, manifested=manifested, impact=impact)


@dataclass
class FakeEvidence:
    """Stands in for ``prepare_evidence``: one opaque bundle per case under ``root``."""

    root: Path
    fail: set[str] = field(default_factory=set)
    not_manifested: set[str] = field(default_factory=set)
    trace_text: dict[str, str] = field(default_factory=dict)
    log_text: dict[str, str] = field(default_factory=dict)  # case id -> the fake diagnosers' instruction
    calls: list[str] = field(default_factory=list)

    @staticmethod
    def bundle_id(case_id: str) -> str:
        return hashlib.sha256(case_id.encode()).hexdigest()[:16]

    def __call__(self, loaded: LoadedCase, policy: RecordingPolicy = RecordingPolicy()) -> PreparedEvidence:
        case = loaded.case
        self.calls.append(case.id)
        if case.id in self.fail:
            raise RuntimeError("the ranks did not start")
        bundle_id = self.bundle_id(case.id)
        bundle_dir = self.root / bundle_id
        if not (bundle_dir / "bundle.json").is_file():
            write_bundle(
                bundle_dir, bundle_id, trace_text=self.trace_text.get(case.id, ""), log_text=self.log_text.get(case.id, "ok") + "\n"
            )
        verification = None
        if case.labels.expect == "diagnose":
            verification = fake_verification(case.id not in self.not_manifested)
        sha = hashlib.sha256((bundle_dir / "bundle.json").read_bytes()).hexdigest()
        return PreparedEvidence(case_id=case.id, bundle_dir=bundle_dir, bundle_id=bundle_id, manifest_sha256=sha,
                                verification=verification)


RUN_OPTION_KEYS = ("case_ids", "tags", "cases_dir", "out_dir", "run_id", "jobs", "seed", "evidence", "repeats")
INJECTED_KEYS = ("recording", "evidence_fn", "cuda_device_count", "progress")


def run_with(spec: str, case_set: CaseSet, **kw):
    """``run_diagnoser`` with one flat set of keywords, as tests write them: the run's options
    (:class:`RunOptions` fields), the host policy's (``timeout`` = ``timeout_s``, ``isolation="none"`` =
    ``sandbox=False``, ``limits`` = ``output``, ``allow_network``, ``box``, ``pass_env``) and the stand-ins
    (``evidence_fn``, ``cuda_device_count``, ``progress``); ``device`` alone is a recording policy's (else pass
    ``recording``)."""
    from diageval.hosting import HostPolicy
    from diageval.run.pipeline import RunOptions, run_diagnoser

    options = {k: kw.pop(k) for k in RUN_OPTION_KEYS if k in kw}
    for k in ("case_ids", "tags"):
        if k in options:
            options[k] = tuple(options[k])
    injected = {k: kw.pop(k) for k in INJECTED_KEYS if k in kw}
    if "device" in kw:
        injected["recording"] = RecordingPolicy(device=kw.pop("device"))
    policy = {}
    if "timeout" in kw:
        policy["timeout_s"] = kw.pop("timeout")
    if kw.pop("isolation", "auto") == "none":
        policy["sandbox"] = False
    if "limits" in kw:
        policy["output"] = kw.pop("limits")
    policy.update(kw)  # allow_network, box, pass_env: an unknown key fails in HostPolicy
    return run_diagnoser(spec, case_set, RunOptions(**options), HostPolicy(**policy), **injected)


def copy_real_cases(root: Path, rels: list[str]) -> Path:
    """The corpus' case files ``rels`` (valid against the real registries) and its taxonomy in ``root``, a
    folder of their own; skips the test, saying which, when one is not in the corpus."""
    import shutil

    import pytest

    from diageval.paths import default_cases_dir

    for rel in rels:
        src = default_cases_dir() / rel
        if not src.is_file():
            pytest.skip(f"{rel} is not in the corpus")
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, root / rel)
    shutil.copy(default_cases_dir() / "taxonomy.yaml", root / "taxonomy.yaml")
    return root


@dataclass
class TimedRun:
    outcome: object  # the run's RunOutcome
    run_s: float  # the whole of run_diagnoser, its bundles already made
    diagnose_s: float  # its diagnose phase alone (the slots' opening, every case's diagnosis, scoring, writes)


def timed_fake_run(spec: str, n: int, bundles: Path, options, policy, *, trace_text: str = "") -> TimedRun:
    """``run_diagnoser`` over ``n`` fake cases (``bench-0000``...) whose bundles, in ``bundles`` with ``trace_text``
    in each trace, are made before the clock starts; the seconds of the whole run and of its diagnose phase
    (``_Pipeline.diagnose_all``, timed in place): what the run's benchmarks measure. ``options``: the
    :class:`RunOptions`, ``policy`` the :class:`HostPolicy`."""
    import time

    import diageval.run.pipeline as run_module

    case_set = make_case_set([make_case(f"bench-{i:04d}") for i in range(n)])
    evidence = FakeEvidence(bundles, trace_text={lc.case.id: trace_text for lc in case_set.cases})
    for lc in case_set.cases:
        evidence(lc)
    diagnose_s = 0.0
    original = run_module._Pipeline.diagnose_all

    def timed(self, *args, **kwargs):
        nonlocal diagnose_s
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            diagnose_s += time.perf_counter() - start

    run_module._Pipeline.diagnose_all = timed
    try:
        start = time.perf_counter()
        outcome = run_module.run_diagnoser(spec, case_set, options, policy, evidence_fn=evidence, progress=None,
                                           cuda_device_count=lambda: 0)
        run_s = time.perf_counter() - start
    finally:
        run_module._Pipeline.diagnose_all = original
    return TimedRun(outcome, run_s, diagnose_s)
