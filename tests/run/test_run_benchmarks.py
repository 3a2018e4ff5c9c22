"""The run's benchmarks (benchmarks/run_overhead.py, benchmarks/executors.py) time the diagnose phase of fake
cases through one helper (``run_fakes.timed_fake_run``), which wraps the pipeline's diagnose phase in place."""

from __future__ import annotations

import importlib.util

from locations import REPO


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_overhead_measures_a_run_of_fake_cases(tmp_path, capsys):
    per_case = _benchmark("run_overhead").measure("null", 2, tmp_path, "none")
    assert per_case > 0
    assert "null" in capsys.readouterr().out


def test_the_executors_benchmark_times_a_local_run(tmp_path):
    assert _benchmark("executors").diagnose_phase("null", 2, tmp_path, "local", 1, pad="") > 0
