"""Per-case tallies: the sums every metric is a ratio of.

Each scored case becomes one row of numbers (claims made, claims credited, causes found, headline loss,
...). A metric over a set of cases is a ratio of column totals (micro-averaged: pooled counts, never a
mean of per-case ratios), and a bootstrap resample of cases is a weighted total of the same rows
(:mod:`diageval.scoring.intervals`). Only scored cases have rows: ``harness_error`` and ``invalid`` cases
are counted apart in the summary and never reach a metric.

Claim-level columns count asserted, non-duplicate cause claims only: a duplicate is neither credit nor
penalty, and a hedge (a claim below confidence 0.5) enters the proper score alone, so neither is in any
numerator or denominator (precision, misleading rate, false alarms). The headline and calibration
columns are read from the case's forecasts (:class:`~diageval.scoring.results.Forecast`), where a
repeated claim is already folded into the highest confidence given to its id.

Impact error has one term per case whose credited claims state an impact and whose impact was measured
(their sum against the measured impact, as before), plus one term per misleading claim that states an
impact on a case whose labels are complete (``diagnose`` or ``healthy``): the true impact of a cause that
is not there is 0, so a wrong claim of 60% costs 0.6. On ``abstain`` cases the truth is unknown by
design, so their claims' impacts are not judged.

The headline's reference (climatology, docs/scoring.md) is a function of column totals that is not a sum
of per-case values: R = Σ_k n_k (1 − n_k / N) + A + Σ_f F_f (1 − F_f / M_f) + L, with n_k the cases labeled
k. So the table carries, per cause labeled in some case, ``labeled@k`` (1 if the case labels k), and
:func:`reference_totals` derives the references (``reference``, ``reference_ranked``,
``reference@<family>``) from any totals of them: the point, each bootstrap resample, each jackknife sample.

Factors (issues 24 and 39): the ``factor`` and ``aliased`` events (a regression's or fleet's factor values
stated, and the values an abstention names) are in both scores: in ``loss``, ``loss_ranked`` and both null
losses. Their climatology is per factor name f: ``factor_slots@f`` (the values of f the case could blame:
:attr:`~diageval.scoring.results.CaseResult.blamable`) and ``factor_true@f`` (... that a label puts a cause
behind) give F_f (1 − F_f / M_f) over totals; ``aliased_values`` (the values the case labels aliased) is L:
an abstention can only name a value or not, so, as for the abstain decision, climatology names none and
loses one per aliased value. Factor precision and recall read the same events at the found threshold:
``factor_stated`` (factor and aliased events stated at confidence >= 0.5), ``factor_hit`` (... that are
true) and ``factor_labeled`` (true factor and aliased events).

Ranks: the rank-credited score's rank events have their climatology per (cause, rank position):
``rank_slots@k@r`` (1 if k's ranks are judged on the case, no label of k naming no ranks, and the job has a
rank r) and ``rank_true@k@r`` (1 if a label of k names rank r) give Σ_{k,r} P_kr (1 − P_kr / M_kr), for
every (k, r) some label of the table names (the others have P = 0). A constant forecast with one rate per
(cause, rank position), hence one per cause or one per position, is at best that (issue 39: one rate per
position beat the per-cause climatology by +0.006). The magnitude error has one term per case with a
measured and a claimed magnitude: |ln(claimed / measured)|.

Size: the column list, the references derived from totals and the one-pass row builder read the same
column layout (index arithmetic over it), so they stay in one module; most of its length is the docstrings
that define each column.

The table is a plain array (cases × columns, rows sorted by case id) built in one pass, so that
:func:`~diageval.scoring.summary.summarize` of 10,000 cases stays well under a second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from diageval.scoring.results import FACTOR_KINDS, FOUND_CONFIDENCE, RANKED_ONLY_KINDS, UNCOUNTED_VERDICTS, CaseResult

CALIBRATION_BINS = 11
"""Bin 0 holds the pairs stated at probability 0 (unclaimed); bins 1-10 are (0, 0.1], ..., (0.9, 1.0]."""


def calibration_bin(probability: float) -> int:
    if probability <= 0:
        return 0
    return min(math.ceil(probability * 10 - 1e-9), 10)


BASE_COLUMNS = [
    "cases",            # 1 per scored case
    "loss",             # headline: sum of squared errors over the case's forecasts
    "loss_ranked",      # the same with rank credit
    "loss_null",        # what null scores on the case: the number of true events
    "loss_null_ranked", # ... in the rank-credited score (true events and labeled ranks)
    "pairs",            # (case, taxonomy cause) pairs: the taxonomy's size
    "pair_sq_err",      # sum over those pairs of (probability - labeled)^2
    "claims",           # asserted (confidence >= 0.5), non-duplicate cause claims
    "credited",         # claims judged correct or mislocated
    "misleading",       # symptom_as_cause + wrong_cause + false_alarm
    "claims_conf",      # sum of the claims' confidence
    "misleading_conf",  # sum of the misleading claims' confidence
    "causes",           # labeled causes
    "found",
    "localizable",      # found causes whose label names ranks
    "localized",        # ... whose credited claim named a non-empty subset of them
    "rank_named",       # ranks named by those credited claims
    "rank_hit",         # ... that are labeled ranks
    "rank_labeled",     # labeled ranks of the localizable causes
    "healthy",          # healthy controls
    "alarmed",          # healthy controls with >= 1 cause claim
    "abstain_cases",    # expect: abstain
    "abstained",        # cases where the diagnoser abstained
    "abstain_correct",  # abstain cases where it abstained
    "positive",         # expect: diagnose
    "top1_hit",         # positive cases whose top claim is a labeled cause
    "impact_n",         # impact statements judged (see the module docstring)
    "impact_abs_err",
    "seconds_n",
    "seconds_sum",
    "aliased_values",   # factor values the case labels aliased (the references add them)
    "factor_stated",    # factor and aliased events stated at confidence >= 0.5
    "factor_hit",       # ... that are true
    "factor_labeled",   # true factor and aliased events
    "magnitude_n",      # cases with a claimed and a measured magnitude
    "magnitude_log_err",  # |ln(claimed / measured)|
    "defect_cases",     # cases tagged DEFECT_TAG: evidence present but wrong (cases/defects, issue 40)
    "defect_wrong",     # ... with >= 1 misleading claim: a claim at confidence >= 0.5 the label does not hold
    "groundable",       # labeled causes whose label localises the fault (diageval.scoring.grounding)
    "grounded",         # ... found by a claim citing evidence that overlaps where the fault acted
    "agent_cases",      # cases with an agent's usage (its trajectory.json)
    "prompt_tokens",    # ... their prompt tokens (cached ones among them)
    "completion_tokens",
    "cached_tokens",
    "dollars_n",        # cases with a priced usage
    "dollars_sum",
    "turns",
    "tool_calls",
]
DEFECT_TAG = "defect"
"""The tag of the cases whose evidence lies (profiler defects): a part of the board of their own."""
CALIBRATION_COLUMNS = [f"cal_{part}_{b}" for part in ("n", "conf", "hit", "gap") for b in range(CALIBRATION_BINS)]
"""Per calibration bin: pairs, their summed probability, their labeled count, and probability − labeled
(the ECE resamples sum the gap column, one per bin instead of two)."""
CATEGORY_FIELDS = ["causes", "found", "localizable", "localized", "claims", "credited", "f1_den"]
"""Per labeled cause: its labels, found, ... and the F1 denominator found + causes + wrong claims naming it."""
LABEL_FIELDS = ["labeled"]
"""Per cause labeled in some case of the table: what the references are computed from (module docstring)."""
RANK_FIELDS = ["rank_slots", "rank_true"]
"""Per (cause, rank position) some label of the table names: the ranks' climatology (``rank_true@k@r``)."""
FACTOR_FIELDS = ["factor_slots", "factor_true"]
"""Per factor name with a blamable value in some case of the table: the factor's climatology."""
FAMILY_LOSS = "family_loss"
"""Per cause family (the id's first segment: ``comm`` of ``comm.collective_stall``): the headline loss over
the case's events on the family's causes."""
REFERENCE = "reference"
REFERENCE_RANKED = "reference_ranked"
REFERENCE_FAMILY = "reference"  # reference@<family>


def category_column(field: str, category: str) -> str:
    return f"{field}@{category}"


def cause_family(category: str) -> str:
    """A cause's family: the first segment of its id (``comm.collective_stall`` -> ``comm``)."""
    return category.split(".", 1)[0]


def is_derived(column: str) -> bool:
    """A reference computed from totals (:func:`reference_totals`), not a column of the table."""
    return column in (REFERENCE, REFERENCE_RANKED) or column.startswith(f"{REFERENCE_FAMILY}@")


def _share_of_squares(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """x² / n, 0 where n is 0 (then x is 0 too)."""
    out = np.zeros(np.broadcast(x, n).shape)
    np.divide(x * x, n, out=out, where=n > 0)
    return out


def rank_column(field: str, category: str, rank: int) -> str:
    return f"{field}@{category}@{rank}"


def reference_totals(t: Mapping[str, np.ndarray], labeled: Iterable[str], families: Iterable[str],
                     rank_positions: Iterable[tuple[str, int]] = (), factor_names: Iterable[str] = ()
                     ) -> dict[str, np.ndarray]:
    """The references of the headline scores, from totals of the table's columns (docs/scoring.md):

    * ``reference`` R = Σ_k n_k (1 − n_k / N) + A + Σ_f F_f (1 − F_f / M_f) + L: the loss of the
      climatological forecast (every cause at the share of the cases labeled with it, never abstaining, every
      blamable value of factor f at the share of f's blamable values a label blames, naming no value aliased)
      over these cases; F_f the labeled values of f, M_f its blamable values, L the values labeled aliased;
    * ``reference_ranked`` = R + Σ_{k,r} P_kr (1 − P_kr / M_kr), P_kr the cases whose labels of k name rank r,
      M_kr the cases where k's ranks are judged and the job has a rank r: the same for the rank-credited score;
    * ``reference@<family>`` = Σ over the family's causes of n_k (1 − n_k / N).
    """
    n = np.asarray(t["cases"], dtype=float)
    per_cause, ranks = {}, np.zeros_like(n)
    for k in labeled:
        nk = np.asarray(t[category_column("labeled", k)], dtype=float)
        per_cause[k] = nk - _share_of_squares(nk, n)
    for k, r in rank_positions:
        true = np.asarray(t[rank_column("rank_true", k, r)], dtype=float)
        ranks = ranks + true - _share_of_squares(true, np.asarray(t[rank_column("rank_slots", k, r)], dtype=float))
    factors = np.zeros_like(n)
    for name in factor_names:
        true = np.asarray(t[category_column("factor_true", name)], dtype=float)
        factors = factors + true - _share_of_squares(true, np.asarray(t[category_column("factor_slots", name)],
                                                                      dtype=float))
    base = sum(per_cause.values(), np.asarray(t["abstain_cases"], dtype=float)) + factors + np.asarray(
        t["aliased_values"], dtype=float)
    out = {REFERENCE: base, REFERENCE_RANKED: base + ranks}
    for family in families:
        out[category_column(REFERENCE_FAMILY, family)] = sum(
            (v for k, v in per_cause.items() if cause_family(k) == family), np.zeros_like(n))
    return out


@dataclass(frozen=True)
class TallyTable:
    """One row per scored case (sorted by case id), one column per tally."""

    case_ids: list[str]
    columns: list[str]
    values: np.ndarray  # (cases, columns)

    @property
    def labeled(self) -> list[str]:
        """The causes labeled in some case of the table (those with ``labeled@k`` columns)."""
        prefix = category_column("labeled", "")
        return [c[len(prefix):] for c in self.columns if c.startswith(prefix)]

    @property
    def families(self) -> list[str]:
        """The cause families with a loss column (some case labels or claims one of their causes)."""
        prefix = category_column(FAMILY_LOSS, "")
        return [c[len(prefix):] for c in self.columns if c.startswith(prefix)]

    @property
    def rank_positions(self) -> list[tuple[str, int]]:
        """The (cause, rank position) pairs with rank columns (some label of the table names them)."""
        prefix = "rank_true@"
        return [(k, int(r)) for k, r in (c[len(prefix):].rsplit("@", 1) for c in self.columns
                                         if c.startswith(prefix))]

    @property
    def factor_names(self) -> list[str]:
        """The factor names with factor columns (some case of the table could blame a value of them)."""
        prefix = category_column("factor_slots", "")
        return [c[len(prefix):] for c in self.columns if c.startswith(prefix)]

    def inputs_for(self, columns: Iterable[str]) -> list[str]:
        """The table columns that give ``columns`` (a derived reference needs :meth:`derived_inputs`)."""
        columns = list(columns)
        base = [c for c in columns if not is_derived(c)]
        if len(base) < len(columns):
            base += self.derived_inputs()
        return list(dict.fromkeys(base))

    def derived_inputs(self) -> list[str]:
        """The columns :func:`reference_totals` reads."""
        return ["cases", "abstain_cases", "aliased_values",
                *(category_column(f, k) for k in self.labeled for f in LABEL_FIELDS),
                *(rank_column(f, k, r) for k, r in self.rank_positions for f in RANK_FIELDS),
                *(category_column(f, name) for name in self.factor_names for f in FACTOR_FIELDS)]

    def with_references(self, totals: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``totals`` (which hold :meth:`derived_inputs`) with the references added."""
        return {**totals, **reference_totals(totals, self.labeled, self.families, self.rank_positions,
                                             self.factor_names)}

    def __len__(self) -> int:
        return len(self.case_ids)

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.columns.index(name)]

    def subset(self, rows: np.ndarray) -> "TallyTable":
        return TallyTable([self.case_ids[i] for i in np.flatnonzero(rows)], self.columns, self.values[rows])

    def totals(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Column totals under each row of ``weights`` (shape (k, cases)) -> {column: array of k}."""
        t = weights @ self.values if len(self) else np.zeros((weights.shape[0], len(self.columns)))
        return self.with_references({col: t[:, j] for j, col in enumerate(self.columns)})


_BASE = len(BASE_COLUMNS)
_CAL_N, _CAL_CONF, _CAL_HIT, _CAL_GAP = (_BASE + part * CALIBRATION_BINS for part in range(4))
_WIDTH = _BASE + len(CALIBRATION_COLUMNS)


def _row(result: CaseResult, categories: dict[str, int], labels: dict[str, int], families: dict[str, int],
         rank_at: dict[str, dict[int, int]], factor_at: dict[str, int], extra: list[tuple[int, float]]) -> list[float]:
    """One scored case's base and calibration tallies (in column order); its per-category tallies are
    appended to ``extra`` as (column, value). Plain Python over the case's few records with index
    arithmetic: this runs once per case and is most of summarize's time on a large run."""
    expect = result.expect
    cal = [0.0] * len(CALIBRATION_COLUMNS)
    loss = loss_ranked = loss_null = rank_null = pair_sq_err = 0.0
    cause_events = 0
    factor_stated = factor_hit = factor_labeled = 0
    for f in result.forecasts:
        y = 1.0 if f.outcome else 0.0
        p = f.probability
        loss_ranked += (f.ranked_probability - y) ** 2
        if f.kind in RANKED_ONLY_KINDS:
            rank_null += y
            continue
        if f.kind in FACTOR_KINDS:
            stated = p >= FOUND_CONFIDENCE
            factor_stated += stated
            factor_hit += stated and f.outcome
            factor_labeled += f.outcome
        loss += (p - y) ** 2
        loss_null += y
        if f.kind == "cause":
            cause_events += 1
            pair_sq_err += (p - y) ** 2
            at = families.get(cause_family(f.event))
            if at is not None:
                extra.append((at, (p - y) ** 2))
            b = calibration_bin(p)
            cal[b] += 1
            cal[CALIBRATION_BINS + b] += p
            cal[2 * CALIBRATION_BINS + b] += y
            cal[3 * CALIBRATION_BINS + b] += p - y
    cal[0] += result.taxonomy_causes - cause_events  # unclaimed, unlabeled: probability 0, outcome 0

    claims = credited = misleading = 0
    claims_conf = misleading_conf = impact_n = impact_err = 0.0
    for v in result.verdicts:
        if v.verdict in UNCOUNTED_VERDICTS:
            continue
        claims += 1
        claims_conf += v.confidence
        is_credited = v.credited
        if is_credited:
            credited += 1
        else:  # every non-duplicate verdict is credited or misleading
            misleading += 1
            misleading_conf += v.confidence
            if v.impact is not None and expect != "abstain":
                impact_n += 1
                impact_err += v.impact
        at = categories.get(v.category)
        if at is not None:  # columns of a category: causes, found, localizable, localized, claims, credited, f1_den
            extra.append((at + 4, 1.0))
            extra.append((at + (5 if is_credited else 6), 1.0))
    if result.claimed_impact is not None and result.measured_impact is not None:
        impact_n += 1
        impact_err += abs(result.claimed_impact - result.measured_impact)

    found = localizable = localized = rank_named = rank_hit = rank_labeled = 0
    for o in result.outcomes:
        hit = o.outcome == "found"
        found += hit
        if o.localized is not None:
            named, labeled = set(o.claimed_ranks or ()), set(o.ranks or ())
            localizable += 1
            localized += o.localized
            rank_named += len(named)
            rank_hit += len(named & labeled)
            rank_labeled += len(labeled)
        at = categories.get(o.category)
        if at is not None:
            extra += [(at, 1.0), (at + 1, hit), (at + 6, 1.0 + hit), (at + 2, o.localized is not None),
                      (at + 3, o.localized is True)]

    ranks_of: dict[str, set[int] | None] = {}
    for o in result.outcomes:  # the labels: a cause labeled without ranks has its ranks unjudged
        known = ranks_of.get(o.category, set())
        ranks_of[o.category] = None if known is None or o.ranks is None else known | set(o.ranks)
    for category, ranks in ranks_of.items():
        at = labels.get(category)
        if at is not None:
            extra.append((at, 1.0))
    for category, positions in rank_at.items():  # rank_slots, rank_true of each labeled (cause, position)
        ranks = ranks_of.get(category, set())
        if ranks is None:
            continue  # a label of the cause names no ranks: its ranks are not judged on this case
        for r, at in positions.items():
            if r < result.world_size or r in ranks:
                extra.append((at, 1.0))
                if r in ranks:
                    extra.append((at + 1, 1.0))
    labeled_values = {o.factor for o in result.outcomes if o.factor is not None}
    for key in set(result.blamable) | labeled_values:  # factor_slots, factor_true of the value's factor name
        at = factor_at.get(key.split("=", 1)[0])
        if at is not None:
            extra.append((at, 1.0))
            if key in labeled_values:
                extra.append((at + 1, 1.0))
    magnitude_n = magnitude_err = 0.0
    if result.claimed_magnitude is not None and result.measured_magnitude is not None and result.measured_magnitude > 0:
        magnitude_n, magnitude_err = 1.0, abs(math.log(result.claimed_magnitude / result.measured_magnitude))

    healthy, abstain, positive = expect == "healthy", expect == "abstain", expect == "diagnose"
    return [  # the order of BASE_COLUMNS, then CALIBRATION_COLUMNS
        1, loss, loss_ranked, loss_null, loss_null + rank_null, result.taxonomy_causes, pair_sq_err,
        claims, credited, misleading, claims_conf, misleading_conf,
        len(result.outcomes), found, localizable, localized, rank_named, rank_hit, rank_labeled,
        healthy, healthy and claims > 0, abstain, result.abstained, abstain and result.abstained,
        positive, positive and result.top_claim in result.categories,
        impact_n, impact_err, result.seconds is not None, result.seconds or 0.0,
        len(result.aliased), factor_stated, factor_hit, factor_labeled,
        magnitude_n, magnitude_err,
        DEFECT_TAG in result.tags, DEFECT_TAG in result.tags and misleading > 0,
        sum(o.grounded is not None for o in result.outcomes), sum(o.grounded is True for o in result.outcomes),
        *_usage_row(result),
        *cal,
    ]


def _usage_row(result: CaseResult) -> list[float]:
    """agent_cases .. tool_calls of one result (zeros without an agent's usage)."""
    u = result.usage
    if u is None:
        return [0.0] * 8
    priced = u.dollars is not None
    return [1.0, u.prompt_tokens, u.completion_tokens, u.cached_tokens, priced, u.dollars if priced else 0.0, u.turns,
            u.tool_calls]


def tally_table(results: Iterable[CaseResult], categories: Iterable[str] = ()) -> TallyTable:
    """One row per scored case, sorted by case id (so resampling ignores file order);
    ``categories`` adds per-category columns (``causes@<category>``, ...)."""
    categories = list(categories)
    scored = sorted((r for r in results if r.scored), key=lambda r: r.case_id)
    labeled = sorted({c for r in scored for c in r.categories})
    families = sorted({cause_family(c) for c in labeled}
                      | {cause_family(f.event) for r in scored for f in r.forecasts if f.kind == "cause"})
    positions = sorted({(o.category, rank) for r in scored for o in r.outcomes for rank in o.ranks or ()})
    names = sorted({key.split("=", 1)[0] for r in scored for key in r.blamable}
                   | {o.factor.split("=", 1)[0] for r in scored for o in r.outcomes if o.factor is not None})
    columns = (BASE_COLUMNS + CALIBRATION_COLUMNS + [category_column(f, c) for c in categories for f in CATEGORY_FIELDS]
               + [category_column(f, c) for c in labeled for f in LABEL_FIELDS]
               + [category_column(FAMILY_LOSS, fam) for fam in families]
               + [rank_column(f, k, rank) for k, rank in positions for f in RANK_FIELDS]
               + [category_column(f, name) for name in names for f in FACTOR_FIELDS])
    first = {c: _WIDTH + k * len(CATEGORY_FIELDS) for k, c in enumerate(categories)}
    at = _WIDTH + len(categories) * len(CATEGORY_FIELDS)
    label_first = {c: at + k * len(LABEL_FIELDS) for k, c in enumerate(labeled)}
    at += len(labeled) * len(LABEL_FIELDS)
    family_at = {fam: at + k for k, fam in enumerate(families)}
    at += len(families)
    rank_at: dict[str, dict[int, int]] = {}
    for k, (category, rank) in enumerate(positions):
        rank_at.setdefault(category, {})[rank] = at + k * len(RANK_FIELDS)
    at += len(positions) * len(RANK_FIELDS)
    factor_at = {name: at + k * len(FACTOR_FIELDS) for k, name in enumerate(names)}
    values = np.zeros((len(scored), len(columns)))
    extra_rows, extra_cols, extra_vals = [], [], []
    base = []
    for i, r in enumerate(scored):
        extra: list[tuple[int, float]] = []
        base.append(_row(r, first, label_first, family_at, rank_at, factor_at, extra))
        for col, v in extra:
            extra_rows.append(i)
            extra_cols.append(col)
            extra_vals.append(v)
    if scored:
        values[:, :_WIDTH] = np.array(base, dtype=float)
        np.add.at(values, (np.array(extra_rows, dtype=np.intp), np.array(extra_cols, dtype=np.intp)),
                  np.array(extra_vals, dtype=float))
    return TallyTable([r.case_id for r in scored], columns, values)


def case_tallies(result: CaseResult, categories: Iterable[str] = ()) -> dict[str, float]:
    """The row of one scored case as a dict (for reading and tests)."""
    if not result.scored:
        raise ValueError(f"case {result.case_id}: status {result.status!r} is never scored")
    table = tally_table([result], categories)
    return dict(zip(table.columns, table.values[0].tolist()))
