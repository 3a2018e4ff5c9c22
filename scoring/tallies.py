"""Per-case tallies: the sums every metric is a ratio of.

Each scored case becomes one row of numbers (claims made, claims credited, causes found, ...). A metric
over a set of cases is a ratio of column totals (micro-averaged: pooled counts, never a mean of per-case
ratios), and a bootstrap resample of cases is a weighted total of the same rows
(:mod:`diageval.scoring.metrics`). Only scored cases have rows: ``harness_error`` and ``invalid`` cases are
counted apart in the summary and never reach a metric.

Claim-level columns count non-duplicate cause claims only: a duplicate is neither credit nor penalty, so
it is in no numerator and no denominator (precision, misleading rate, Brier, ECE).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from diageval.scoring.results import CaseResult

ECE_BINS = 10
"""Equal-width confidence bins [0, 0.1), ..., [0.9, 1.0] for the expected calibration error."""

BASE_COLUMNS = [
    "cases",            # 1 per scored case
    "claims",           # non-duplicate cause claims
    "credited",         # claims judged correct or mislocated
    "misleading",       # symptom_as_cause + wrong_cause + false_alarm
    "claims_conf",      # sum of the claims' confidence
    "misleading_conf",  # sum of the misleading claims' confidence
    "sq_err",           # sum over claims of (confidence - credited)^2
    "causes",           # labeled causes
    "found",
    "localizable",      # found causes whose label names ranks
    "localized",        # ... whose credited claim named overlapping ranks
    "healthy",          # healthy controls
    "alarmed",          # healthy controls with >= 1 cause claim
    "abstain_cases",    # expect: abstain
    "abstain_correct",  # ... where the diagnoser abstained
    "positive",         # expect: diagnose
    "top1_hit",         # positive cases whose top claim is a labeled cause
    "impact_n",         # cases with both a claimed and a measured impact
    "impact_abs_err",
    "seconds_n",
    "seconds_sum",
]
ECE_COLUMNS = [f"ece_conf_{b}" for b in range(ECE_BINS)] + [f"ece_hit_{b}" for b in range(ECE_BINS)]
CATEGORY_FIELDS = ["causes", "found", "localizable", "localized", "claims", "credited"]


def category_column(field: str, category: str) -> str:
    return f"{field}@{category}"


def ece_bin(confidence: float) -> int:
    return min(int(np.floor(confidence * ECE_BINS)), ECE_BINS - 1)


def case_tallies(result: CaseResult, categories: Iterable[str] = ()) -> dict[str, float]:
    """The row of one scored case; ``categories`` adds per-category columns (``causes@<category>``...)."""
    if not result.scored:
        raise ValueError(f"case {result.case_id}: status {result.status!r} is never scored")
    claims = [v for v in result.verdicts if v.verdict != "duplicate"]
    row: dict[str, float] = dict.fromkeys(BASE_COLUMNS + ECE_COLUMNS, 0.0)
    row["cases"] = 1
    row["claims"] = len(claims)
    row["credited"] = sum(v.credited for v in claims)
    row["misleading"] = sum(v.misleading for v in claims)
    row["claims_conf"] = sum(v.confidence for v in claims)
    row["misleading_conf"] = sum(v.confidence for v in claims if v.misleading)
    row["sq_err"] = sum((v.confidence - v.credited) ** 2 for v in claims)
    for v in claims:
        b = ece_bin(v.confidence)
        row[f"ece_conf_{b}"] += v.confidence
        row[f"ece_hit_{b}"] += v.credited
    row["causes"] = len(result.outcomes)
    row["found"] = sum(o.outcome == "found" for o in result.outcomes)
    row["localizable"] = sum(o.localized is not None for o in result.outcomes)
    row["localized"] = sum(o.localized is True for o in result.outcomes)
    row["healthy"] = result.expect == "healthy"
    row["alarmed"] = result.expect == "healthy" and len(claims) > 0
    row["abstain_cases"] = result.expect == "abstain"
    row["abstain_correct"] = result.expect == "abstain" and result.abstained
    row["positive"] = result.expect == "diagnose"
    row["top1_hit"] = result.expect == "diagnose" and result.top_claim in result.categories
    if result.claimed_impact is not None and result.measured_impact is not None:
        row["impact_n"] = 1
        row["impact_abs_err"] = abs(result.claimed_impact - result.measured_impact)
    if result.seconds is not None:
        row["seconds_n"] = 1
        row["seconds_sum"] = result.seconds
    for cat in categories:
        outcomes = [o for o in result.outcomes if o.category == cat]
        cat_claims = [v for v in claims if v.category == cat]
        row[category_column("causes", cat)] = len(outcomes)
        row[category_column("found", cat)] = sum(o.outcome == "found" for o in outcomes)
        row[category_column("localizable", cat)] = sum(o.localized is not None for o in outcomes)
        row[category_column("localized", cat)] = sum(o.localized is True for o in outcomes)
        row[category_column("claims", cat)] = len(cat_claims)
        row[category_column("credited", cat)] = sum(v.credited for v in cat_claims)
    return {k: float(v) for k, v in row.items()}


def tally_table(results: Iterable[CaseResult], categories: Iterable[str] = ()) -> pd.DataFrame:
    """One row per scored case, indexed by case id and sorted by it (so resampling ignores file order)."""
    categories = list(categories)
    rows = {r.case_id: case_tallies(r, categories) for r in results if r.scored}
    columns = BASE_COLUMNS + ECE_COLUMNS + [category_column(f, c) for c in categories for f in CATEGORY_FIELDS]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=columns, dtype=float)
    return table.sort_index()
