"""The recording cache key from what a recording runs (issue 42 item 6): a change to one fault's module re-records
only the cases that use it, a change to the shared launch code re-records every case, and a change to code that
only judges recordings re-records none."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from diageval.cases.load import load_case_set
from diageval.recording import cache
from diageval.recording.faults import FAULTS
from diageval.recording.workloads import WORKLOADS


@pytest.fixture(scope="module")
def corpus():
    """Every case this cache records or assembles (a recorded job's import has its own key, in recorded.py)."""
    return [lc.case for lc in load_case_set().cases if lc.case.recorded is None]


@pytest.fixture()
def harness(tmp_path, monkeypatch) -> Path:
    """A copy of the package's sources that the key reads instead of the real ones."""
    copy = tmp_path / "harness"
    shutil.copytree(cache._HARNESS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "_HARNESS", copy)
    return copy


def _keys(cases) -> dict[str, str]:
    return {c.id: cache.cache_key(c, "cpu") for c in cases}


def _change(harness: Path, rel: str) -> None:
    path = harness / rel
    path.write_text(path.read_text() + "\n# changed\n")


def _module(impl: str) -> str:
    return impl.partition(":")[0].removeprefix("diageval.").replace(".", "/") + ".py"


def _uses(case, module: str) -> bool:
    """Whether a recording of ``case`` (a fleet's: its runs') runs a fault or workload implemented in ``module``."""
    members = [m for _, m in case.fleet_members()] if case.fleet is not None and case.workload else [case]
    names = [_module(WORKLOADS[m.workload.name].impl) for m in members if m.workload]
    names += [_module(FAULTS[f.name].impl) for m in members for f in m.faults]
    return module in names or any(module in _package_imports(name) for name in names)


def _package_imports(module: str) -> set[str]:
    """The package modules ``module`` imports itself (one level: a workload built on another's model, as the
    inference workload is on the transformer's), as paths like ``_module`` gives."""
    tree = ast.parse((cache._HARNESS / module).read_text(encoding="utf-8"))
    found = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    found |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return {_module(name) for name in found if name.startswith("diageval.")}


@pytest.mark.parametrize("module", ["recording/faults/network.py", "recording/faults/evidence_defects.py",
                                    "recording/faults/hang.py", "recording/workloads/transformer.py"])
def test_a_change_to_one_fault_or_workload_re_records_only_the_cases_that_use_it(corpus, harness, module):
    before = _keys(corpus)
    _change(harness, module)
    after = _keys(corpus)
    changed = {cid for cid in before if before[cid] != after[cid]}
    users = {c.id for c in corpus if _uses(c, module)}
    assert users and changed == users
    assert len(changed) < len(corpus) / 2  # the point: most of the corpus keeps its recordings


@pytest.mark.parametrize("module", ["recording/launcher.py", "recording/rank_worker.py", "recording/record.py",
                                    "recording/bundle_writer.py", "bundle/model.py", "recording/faults/base.py"])
def test_a_change_to_shared_recording_code_re_records_every_case(corpus, harness, module):
    before = _keys(corpus)
    _change(harness, module)
    after = _keys(corpus)
    assert [cid for cid in before if before[cid] == after[cid]] == []


@pytest.mark.parametrize("module", ["recording/verify.py", "recording/manifest_test.py", "recording/truth.py",
                                    "recording/label_support.py", "recording/fleet_verify.py", "recording/prepare.py"])
def test_a_change_to_code_that_only_judges_recordings_re_records_none(corpus, harness, module):
    before = _keys(corpus)
    _change(harness, module)
    assert _keys(corpus) == before


def test_assembled_bundles_key_on_their_assembly_code(corpus, harness):
    """Evidence edits are applied by cache.derive_bundle, fleets assembled by fleet.py (which records its runs
    through cache.ensure_bundle): a change to either changes the keys of the bundles it makes, not of plain
    recordings."""
    edited = {c.id for c in corpus if any(FAULTS[f.name].load().stage == "bundle" for f in c.faults)}
    fleets = {c.id for c in corpus if c.fleet is not None}
    assert edited and fleets
    for module, makes in (("recording/cache.py", edited | fleets), ("recording/fleet.py", fleets)):
        before = _keys(corpus)
        _change(harness, module)
        after = _keys(corpus)
        assert {cid for cid in before if before[cid] != after[cid]} == makes, module


def test_the_sources_a_recording_runs_are_read_from_its_imports(corpus):
    job = next(c for c in corpus if c.fleet is None and c.workload.name == "mlp_ddp" and not c.faults)
    sources = cache.recording_sources(job)
    # the shared code by name, what it imports found by reading it (bundle_writer, context, the monitor hook)
    assert {"recording/launcher.py", "recording/rank_worker.py", "recording/bundle_writer.py",
            "recording/context.py", "recording/monitors/hooks.py", "recording/workloads/mlp.py"} <= set(sources)
    assert not {"recording/workloads/convnet.py", "recording/faults/__init__.py", "recording/verify.py"} & set(sources)
    assert not any(s.startswith("cases/") for s in sources)


def test_a_change_to_an_in_job_monitor_re_records_its_bundles_only(corpus, harness):
    """A monitor's in-job part is loaded by its registry line, which no case names: the plain key never reads it,
    so its monitored key must (before, a change to ``monitors/nvrx.py`` left every monitored bundle in place)."""
    from diageval.recording.monitors import MONITORS
    from diageval.recording.monitors.evidence import monitored_key

    case = next(c for c in corpus if c.fleet is None and c.workload is not None)
    nvrx, traceml = MONITORS["nvrx-straggler"], MONITORS["traceml"]
    before = (cache.cache_key(case, "cpu"), monitored_key(case, "cpu", nvrx), monitored_key(case, "cpu", traceml))
    _change(harness, _module(nvrx.impl))
    after = (cache.cache_key(case, "cpu"), monitored_key(case, "cpu", nvrx), monitored_key(case, "cpu", traceml))
    assert after[0] == before[0] and after[2] == before[2]  # the plain bundle and the other monitor's stay
    assert after[1] != before[1]
