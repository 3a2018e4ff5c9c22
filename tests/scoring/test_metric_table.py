"""The metric table is the one definition of every metric: everything else is derived from it."""

from __future__ import annotations

from pathlib import Path

from diageval.scoring.metrics import BETTER, BOARD, HEADLINE, METRICS, columns_of, metric_table_markdown
from diageval.scoring.summary import Metrics
from diageval.scoring.tallies import BASE_COLUMNS, CALIBRATION_COLUMNS, REFERENCE, REFERENCE_RANKED
from locations import REPO

DOCS = REPO / "docs" / "scoring.md"


def test_summary_metrics_are_the_table_in_order():
    assert list(Metrics.model_fields) == list(METRICS)
    for name, field in Metrics.model_fields.items():
        assert METRICS[name].definition in field.description


def test_every_spec_is_complete_and_reads_existing_columns():
    known = set(BASE_COLUMNS) | set(CALIBRATION_COLUMNS) | {REFERENCE, REFERENCE_RANKED}  # references: derived
    for name, spec in METRICS.items():
        assert spec.name == name and spec.label and spec.definition and spec.n_counts, name
        assert spec.better in ("higher", "lower") and format(0.5, spec.digits), name
        assert sum(x is not None for x in (spec.proportion, spec.ratio, spec.formula)) == 1, name
        assert columns_of(spec) <= known and spec.n_column in known, name
        lo, hi = spec.bounds
        assert lo < hi and (spec.prior is None or spec.proportion is None), name


def test_derived_lists():
    assert HEADLINE == ("skill", "skill_ranked")
    assert set(BOARD) <= set(METRICS) and BOARD[:2] == HEADLINE
    assert BETTER == {n: s.better for n, s in METRICS.items()}


def test_docs_show_the_generated_table():
    text = DOCS.read_text(encoding="utf-8")
    start = "<!-- metric table: generated, do not edit by hand -->\n"
    end = "<!-- end of metric table -->"
    shown = text[text.index(start) + len(start):text.index(end)]
    assert shown == metric_table_markdown(), (
        "docs/scoring.md's metric table is stale: paste diageval.scoring.metrics.metric_table_markdown() between "
        "its markers")
