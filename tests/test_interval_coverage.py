"""Coverage of the 95% intervals over 200 simulated runs of a known diagnoser at 16 and 80 cases, in the
live taxonomy's world (tests/coverage_simulation.py; ``python tests/coverage_simulation.py`` prints the
table, at 60 cases too and, with ``--causes``, in larger worlds)."""

from __future__ import annotations

import pytest
from coverage_simulation import TARGET, coverage, table

from diageval.scoring.intervals import jeffreys

RUNS = 200
EVIDENCE_LEVEL = 0.90
"""Two-sided level whose upper end is the one-sided 95% bound on a cell's true coverage."""


@pytest.mark.slow
def test_no_metric_is_shown_to_cover_less_than_93_percent_at_16_and_80_cases():
    """Every cell's coverage is an estimate from 200 runs, about ±1.8 points at 95%: a cell whose true
    coverage is 94% reads below 93% in about a quarter of seeds. So the check fails when the runs show,
    at 95% one-sided confidence, that a cell covers less than 93% (the Jeffreys upper bound of the
    estimate is below 93%), which is what 200 runs can tell; the cells near the line are measured on
    1000 runs in docs/scoring.md (point estimates all >= 93%)."""
    result, truth = coverage(runs=RUNS, sizes=(16, 80), truth_cases=40000)
    print(table(result, truth, RUNS))
    short = [(n, name, c / d) for n, by_metric in result.items() for name, (c, d) in by_metric.items()
             if d and jeffreys(c, d, EVIDENCE_LEVEL)[0][1] < TARGET]
    assert not short, short
    assert all(d >= 150 for by_metric in result.values() for _, d in by_metric.values())  # nearly every run defines each
