"""Coverage of the 95% intervals over 200 simulated runs of a known diagnoser at 16 and 80 cases
(tests/coverage_simulation.py; ``python tests/coverage_simulation.py`` prints the table)."""

from __future__ import annotations

import pytest

from coverage_simulation import TARGET, coverage, table


@pytest.mark.slow
def test_every_metric_covers_at_least_93_percent_at_16_and_80_cases():
    result, truth = coverage(runs=200, sizes=(16, 80), truth_cases=40000)
    print(table(result, truth, 200))
    short = [(n, name, c / d) for n, by_metric in result.items() for name, (c, d) in by_metric.items()
             if d and c / d < TARGET]
    assert not short, short
    assert all(d >= 150 for by_metric in result.values() for _, d in by_metric.values())  # nearly every run defines each
