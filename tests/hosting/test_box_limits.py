"""Limits on every box (issue 25): a fork bomb, a disk fill, a memory hog and a secret reader each end their
own case with the reason, and leave the machine and the next case as they were.

Each attack (``tests/hostile_diagnoser.py``) is bounded, and the fork bomb runs only where the box's
process limit is enforced (a cgroup here; as root an rlimit is not applied), so that a missing limit
fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from run_fakes import FakeEvidence, make_case, make_case_set, run_with

from diageval.hosting import BoxLimits, sandbox_problem
from diageval.hosting.limits import BoxGroups
from diageval.run.store import RunStore
from locations import TESTS

pytestmark = pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")

HOSTILE = TESTS / "hostile_diagnoser.py"
LIMITS = BoxLimits(max_processes=64, max_memory_mib=256, max_out_mib=32, max_tmp_mib=64)
CASES = ["h1", "h2"]


def _pids_enforced() -> bool:
    groups = BoxGroups.create(LIMITS)
    try:
        return "pids" in groups.dirs or os.geteuid() != 0
    finally:
        groups.remove()


def _run(tmp_path: Path, mode: str, **kw):
    case_set = make_case_set([make_case(c) for c in CASES])
    spec = f"cmd:{sys.executable} {HOSTILE} {mode} {{out}}"
    return run_with(spec, case_set, cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs", run_id=mode,
                    evidence_fn=FakeEvidence(tmp_path / "bundles"), progress=None, cuda_device_count=lambda: 0,
                    timeout=60, box=LIMITS, **kw)


def _results(outcome) -> dict:
    return {r.case_id: r for r in RunStore(outcome.run_dir).read_results()}


def _own_groups() -> list[Path]:
    return sorted(Path("/sys/fs/cgroup").rglob(f"diageval-box-{os.getpid()}-*")) if Path("/sys/fs/cgroup").is_dir() else []


@pytest.mark.parametrize("mode, reason", [
    ("diskfill", r"output limit \(32 MiB\)|signal 25"),
    ("memhog", r"memory limit \(256 MiB\)|MemoryError"),
    ("tmpfill", "No space left on device"),
])
def test_an_attack_on_the_box_ends_its_own_case_with_the_reason(tmp_path, mode, reason):
    import re

    before = _own_groups()  # another test's leak (one was: see test_groups_left_by_...) is not this run's
    outcome = _run(tmp_path, mode)
    results = _results(outcome)
    assert set(results) == set(CASES)  # every case ran: the first one's attack did not spill onto the second
    for r in results.values():
        assert r.status == "diagnoser_error" and re.search(reason, r.error or ""), (r.case_id, r.status, r.error)
    assert _own_groups() == before  # nothing left behind


def test_a_fork_bomb_ends_its_own_case_at_the_process_limit(tmp_path):
    if not _pids_enforced():
        pytest.skip("no process limit can be enforced for root here (no writable pids cgroup)")
    before = _own_groups()
    outcome = _run(tmp_path, "forkbomb")
    for r in _results(outcome).values():
        assert r.status == "diagnoser_error" and "process limit (64)" in (r.error or ""), (r.case_id, r.error)
    assert outcome.info.box_limits and "processes 64 (cgroup" in outcome.info.box_limits
    assert _own_groups() == before


def test_secrets_in_the_environment_never_reach_the_box_unless_named(tmp_path, monkeypatch):
    secrets = {"GITHUB_TOKEN": "ghp_x", "AWS_SECRET_ACCESS_KEY": "a", "OPENAI_API_KEY": "sk", "MY_TOOL_CONFIG": "c"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    outcome = _run(tmp_path, "secrets", pass_env=("MY_TOOL_CONFIG",))
    for case_id, r in _results(outcome).items():
        assert r.status == "ok", r.error
        seen = set(json.loads((outcome.run_dir / "cases" / case_id / "stdout.txt").read_text()))
        assert "MY_TOOL_CONFIG" in seen and not {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"} & seen


def test_groups_left_by_a_killed_harness_are_removed_at_the_next_start():
    """A harness killed with SIGKILL leaves its boxes' (empty) control groups; the next start removes
    those whose owner is gone, and never another live process's."""
    import subprocess

    from diageval.hosting import remove_stale_boxes
    from diageval.hosting.limits import GROUP_PREFIX

    before = _own_groups()
    groups = BoxGroups.create(LIMITS)  # a group in each hierarchy (pids, memory): all removed, the first's parent kept
    if not groups.dirs:
        groups.remove()
        pytest.skip("no control groups can be made here")
    parent = next(iter(groups.dirs.values())).parent
    groups.remove()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = parent / f"{GROUP_PREFIX}{dead.pid}-abcd"
    mine = parent / f"{GROUP_PREFIX}{os.getpid()}-live"
    stale.mkdir()
    mine.mkdir()
    try:
        removed = remove_stale_boxes()
        assert stale in removed and not stale.exists()
        assert mine.exists()
    finally:
        for d in (stale, mine):
            if d.exists():
                d.rmdir()
    assert _own_groups() == before  # this test once left its memory group for the next box test to find
