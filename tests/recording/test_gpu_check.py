"""scripts/gpu-check.sh, the one command for a lent GPU machine: it parses, refuses bad arguments, and on
--dry-run selects every non-recorded case (the CUDA-only ones first; positives verified, the rest recorded)
and no recorded one, without running anything or needing a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from diageval.cases.load import load_case_set
from locations import REPO

SCRIPT = REPO / "scripts" / "gpu-check.sh"


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DIAGEVAL_PYTHON": sys.executable, **env})


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_bad_arguments_are_refused_with_the_reason(tmp_path):
    r = _run("--budget", "ten", GPU_CHECK_OUT=str(tmp_path))
    assert r.returncode == 2 and "budget must be whole seconds" in r.stderr
    r = _run("--dry-run", GPU_CHECK_OUT=str(tmp_path), GPU_CHECK_BUDGET_S="8m")
    assert r.returncode == 2 and "budget must be whole seconds, got '8m'" in r.stderr
    r = _run("--repeats", "0", GPU_CHECK_OUT=str(tmp_path))
    assert r.returncode == 2 and "repeats must be a positive integer" in r.stderr
    r = _run("--fast", GPU_CHECK_OUT=str(tmp_path))
    assert r.returncode == 2 and "unknown argument --fast" in r.stderr


def test_dry_run_selects_every_case_cuda_can_run_and_runs_nothing(tmp_path):
    r = _run("--dry-run", "--budget", "420", GPU_CHECK_OUT=str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    chosen = [line.split()[2] for line in lines if line.startswith(("would verify:", "would record:"))]
    cases = {lc.case.id: lc.case for lc in load_case_set().cases}
    live = {i for i, c in cases.items() if c.evidence_kind == "injected"}
    assert set(chosen) == live and len(chosen) == len(live)  # every non-recorded case once, no recorded one
    verified = {line.split()[2] for line in lines if line.startswith("would verify:")}
    assert verified == {i for i in live if cases[i].labels.expect == "diagnose"}
    first = [cases[i].requires.device for i in chosen]
    assert first == sorted(first, key=lambda d: d != "cuda")  # the CUDA-only cases come first
    assert "pytest -m gpu -q" in r.stdout and "timeout 140s" in r.stdout  # a third of the budget
    assert "--device cuda --repeats 3 --json" in r.stdout
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_without_cuda_it_says_so_and_stops(tmp_path):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the script's real run is the check")
    r = _run("--budget", "60", GPU_CHECK_OUT=str(tmp_path))
    assert r.returncode == 2 and "torch sees no CUDA device" in r.stderr
