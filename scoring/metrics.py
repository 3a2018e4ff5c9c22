"""The metric table: every metric defined once, and everything else derived from it.

:data:`METRICS` is the one place a metric's identity lives: its name (the key in ``summary.json``), the
label people read, which direction is better, its number format, its definition, what its n counts, how
it is computed from the per-case tallies (:mod:`diageval.scoring.tallies`) and which kind of interval it
gets (:mod:`diageval.scoring.intervals`). Derived from it, never written again elsewhere:

* the ``metrics`` object of ``summary.json`` (:func:`metrics_model`; its JSON Schema carries each
  definition), the columns of the leaderboard and of the run's closing lines (:data:`BOARD`), the
  ranking and the verdicts of ``diageval compare`` (:data:`HEADLINE`), and which way is better for
  ``compare --fail-if-worse`` (:data:`BETTER`);
* the metric table of ``docs/scoring.md`` (:func:`metric_table_markdown`; a test keeps the two equal).

A renderer (markdown, HTML) reads ``spec.label``, ``spec.better``, ``spec.digits`` and ``spec.board`` off
:data:`METRICS` in order and looks each value up by ``spec.name`` in ``summary.json``'s ``metrics``.

Adding a metric is one :class:`MetricSpec` here (and a tally column if it needs a new sum).

Size: the metric table itself (one entry per metric, each with its definition text), the skills' priors and
:class:`Resampled`, the resampled totals every metric is read off; the table and the class that evaluates
it change together, and split apart each would import the other's internals.

The headline (:data:`HEADLINE`, ranks the board) is ``skill``, then ``skill_ranked``: a proper scoring
rule over every (case, taxonomy cause) pair, the factor values of regressions and fleets and the abstain
decision, relative to climatology (every cause and factor value at its base rate over the run's cases): 0 is
"no better than knowing only the corpus' base rates"
(docs/scoring.md has the definition and the reasoning).

Each bootstrapped metric declares its ``bounds`` (its interval is clipped to them) and, where it judges
diagnoses, its ``prior``: the two ends a pseudo-case can take (the oracle's answer, and a confidently wrong
answer on an average case of the run), which give the interval its small-sample floor
(:func:`~diageval.scoring.intervals.prior_interval`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, create_model

from diageval.scoring.intervals import (
    CONFIDENCE_LEVEL,
    Totals,
    bootstrap_weights,
    clip_interval,
    effective_counts,
    hull,
    jackknife_totals,
    jeffreys,
    prior_interval,
    prior_multiplicities,
    ratio_interval,
)
from diageval.scoring.tallies import (
    CALIBRATION_BINS,
    FAMILY_LOSS,
    REFERENCE,
    REFERENCE_FAMILY,
    REFERENCE_RANKED,
    TallyTable,
    category_column,
    cause_family,
    is_derived,
)

Direction = Literal["higher", "lower"]


class MetricValue(BaseModel):
    value: float | None = Field(description="Point estimate; null when undefined (its denominator is 0)")
    ci: tuple[float, float] | None = Field(description="95% interval (Jeffreys for proportions; for other ratios "
                                                       "the hull of the BCa bootstrap over cases, the jackknife-t "
                                                       "interval and the prior-floored bootstrap, clipped to the "
                                                       "metric's range); null when undefined")
    n: int = Field(description="Size of the denominator at the point estimate (see the metric's definition)")


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den is 0."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


@dataclass(frozen=True)
class MetricSpec:
    """One metric, defined once."""

    name: str
    label: str = ""             # what a person reads (board header, compare row)
    better: Direction = "higher"
    digits: str = ".2f"         # format() spec of its numbers
    definition: str = ""        # one line: value = ...
    n_counts: str = ""          # what its n counts
    n_column: str = "cases"     # the tally column whose total is n
    proportion: tuple[str, str] | None = None  # (successes, trials) columns: a Jeffreys interval
    ratio: tuple[str, str] | None = None       # (numerator, denominator) columns: BCa ∪ jackknife-t
    one_minus: bool = False                    # the metric is 1 − ratio (skill)
    formula: Callable[[Totals], np.ndarray] | None = None  # any other function of totals: BCa ∪ jackknife-t
    headline: bool = False      # ranks the board and gets a verdict in compare
    board: bool = True          # a column of the leaderboard and of a run's closing lines
    bounds: tuple[float, float] = (0.0, 1.0)  # the metric's range: every interval is clipped to it
    added: bool = False         # added within summary schema 4 (issue 41): a summary written before reads it undefined
    prior: Callable[[Totals], tuple[float, float]] | None = None
    """The metric's value on the two pseudo-cases of the small-sample floor (the oracle's answer, and a
    confidently wrong answer on an average case: it misses the labeled causes and states one wrong cause
    at confidence 1), from the point totals; None: no floor (seconds)."""

    @property
    def interval_kind(self) -> str:
        if self.proportion is not None:
            return "Jeffreys (effective n)"
        return "BCa ∪ jackknife-t ∪ prior" if self.prior is not None else "BCa ∪ jackknife-t"

    def values(self, t: Totals) -> np.ndarray:
        if self.proportion is not None:
            return ratio(t[self.proportion[0]], t[self.proportion[1]])
        if self.ratio is not None:
            r = ratio(t[self.ratio[0]], t[self.ratio[1]])
            return 1 - r if self.one_minus else r
        assert self.formula is not None, self.name
        return self.formula(t)


def _p(name: str, num: str, den: str, **kw) -> MetricSpec:
    return MetricSpec(name, proportion=(num, den), n_column=den, **kw)


def f1_of(found: np.ndarray, causes: np.ndarray, misleading: np.ndarray) -> np.ndarray:
    """2·found / (2·found + misleading + missed), missed = causes − found."""
    return ratio(2 * found, found + causes + misleading)


def ece_of(t: Totals) -> np.ndarray:
    gap = sum(np.abs(t[f"cal_gap_{b}"]) for b in range(CALIBRATION_BINS))
    return ratio(gap, t["pairs"])


UNBOUNDED_BELOW = (-np.inf, 1.0)
"""The range of a skill: 1 is perfect; there is no worst."""


def _one(t: Totals, column: str) -> float:
    return float(np.asarray(t[column], dtype=float).reshape(-1)[0])


def _skill_prior(null_loss: str, reference: str) -> Callable[[Totals], tuple[float, float]]:
    """A skill's pseudo-cases: the oracle (1), and a case that misses what is labeled and states one wrong
    cause at confidence 1 (loss: null's on an average case, plus 1)."""
    def ends(t: Totals) -> tuple[float, float]:
        ref = _one(t, reference)
        return (1 - (_one(t, null_loss) + _one(t, "cases")) / ref if ref > 0 else np.nan), 1.0
    return ends


def _wrong_answer_share(t: Totals) -> tuple[float, float]:
    """Brier and ECE: a confidently wrong answer misses the case's labeled causes and states one wrong
    cause at 1, over the case's taxonomy pairs; the oracle scores 0."""
    pairs = _one(t, "pairs")
    return (0.0, (_one(t, "causes") + _one(t, "cases")) / pairs if pairs > 0 else np.nan)


def _ends(best: float, worst: float) -> Callable[[Totals], tuple[float, float]]:
    """Constant ends. A rate's: 0 and 1. Impact error's: 0, and 0.5 for a wrong claim that half the step time
    is lost (the middle of the range: the error's far end, 1, needs a claim of the whole step)."""
    return lambda t: (best, worst)


METRICS: dict[str, MetricSpec] = {s.name: s for s in [
    MetricSpec("skill", "skill", ratio=("loss", REFERENCE), one_minus=True, headline=True,
               bounds=UNBOUNDED_BELOW, prior=_skill_prior("loss_null", REFERENCE),
               definition="1 − Σ S / R, S = the case's Brier loss over every taxonomy cause, the claims that are not "
                          "causes, each factor value of a regression or fleet a finding or a label names, each value "
                          "an abstention names or the case labels aliased, and the abstain decision; R = Σ_k n_k "
                          "(1 − n_k / N) + A + Σ_f F_f (1 − F_f / M_f) + L, the loss of stating every cause at its "
                          "base rate and every value a case could blame at its factor's (0 = no better than knowing "
                          "only the base rates)",
               n_counts="scored cases"),
    MetricSpec("skill_ranked", "skill (ranks)", ratio=("loss_ranked", REFERENCE_RANKED), one_minus=True,
               headline=True, bounds=UNBOUNDED_BELOW, prior=_skill_prior("loss_null_ranked", REFERENCE_RANKED),
               definition="skill plus one event per (cause, rank), for every cause the case does not label without "
                          "ranks: each rank a claim on it or its label names, at the highest confidence of the claims "
                          "naming it; R adds Σ_(k,r) P_kr (1 − P_kr / M_kr), the ranks' climatology per (cause, rank "
                          "position)",
               n_counts="scored cases"),
    MetricSpec("f1", "F1", formula=lambda t: f1_of(t["found"], t["causes"], t["misleading"]), prior=_ends(1.0, 0.0),
               definition="2·found / (2·found + misleading claims + missed causes); null scores 0",
               n_counts="scored cases"),
    _p("precision", "credited", "claims", label="precision", definition="credited claims / claims (a claim: a cause "
       "claim at confidence ≥ 0.5, not a duplicate)", n_counts="non-duplicate cause claims at confidence ≥ 0.5"),
    _p("recall", "found", "causes", label="recall", definition="found causes / labeled causes (found: by a claim "
       "at confidence ≥ 0.5)", n_counts="labeled causes"),
    _p("grounded_recall", "grounded", "groundable", label="grounded R",
       definition="found causes whose claim cites evidence overlapping where the fault acted (ranks, steps, the "
                  "injected op; citing everything grounds nothing: diageval.scoring.grounding) / labeled causes whose "
                  "label localises the fault", n_counts="labeled causes with a localised label", added=True),
    _p("misleading_rate", "misleading", "claims", label="misleading", better="lower",
       definition="misleading claims (symptom as cause, wrong cause, false alarm) / claims", n_counts="claims"),
    MetricSpec("misleading_rate_weighted", "misleading (conf.)", better="lower", board=False,
               ratio=("misleading_conf", "claims_conf"), n_column="claims", prior=_ends(0.0, 1.0),
               definition="Σ confidence of misleading claims / Σ confidence of claims", n_counts="claims"),
    _p("false_alarm_rate", "alarmed", "healthy", label="false alarms", better="lower",
       definition="healthy controls with ≥ 1 cause claim / healthy controls", n_counts="healthy controls"),
    _p("abstention_precision", "abstain_correct", "abstained", label="abstention P",
       definition="abstentions on expect-abstain cases / abstentions", n_counts="cases where it abstained"),
    _p("abstention_recall", "abstain_correct", "abstain_cases", label="abstention R",
       definition="expect-abstain cases where it abstained / expect-abstain cases", n_counts="expect-abstain cases"),
    _p("top1_accuracy", "top1_hit", "positive", label="top-1",
       definition="positive cases whose most confident claim (at confidence ≥ 0.5) is a labeled cause / positive cases",
       n_counts="expect-diagnose cases"),
    _p("localization_accuracy", "localized", "localizable", label="localisation",
       definition="found causes whose claim named a non-empty subset of the labeled ranks / found causes "
                  "whose label names ranks", n_counts="found causes with labeled ranks"),
    _p("rank_precision", "rank_hit", "rank_named", label="rank P", board=False,
       definition="labeled ranks named / ranks named, over the claims that found a ranked cause",
       n_counts="ranks named"),
    _p("rank_recall", "rank_hit", "rank_labeled", label="rank R", board=False,
       definition="labeled ranks named / labeled ranks, over found causes whose label names ranks",
       n_counts="labeled ranks of found ranked causes"),
    _p("factor_precision", "factor_hit", "factor_stated", label="factor P",
       definition="true factor statements / factor statements: the factor values named by a finding at confidence "
                  "≥ 0.5 or by an abstention, true when a label puts a cause behind the value (or labels it "
                  "aliased)", n_counts="factor statements"),
    _p("factor_recall", "factor_hit", "factor_labeled", label="factor R",
       definition="labeled factor values and aliased values stated (by a finding at confidence ≥ 0.5, or by the "
                  "abstention) / labeled ones", n_counts="labeled factor values (regression and fleet cases)"),
    _p("defect_wrong_rate", "defect_wrong", "defect_cases", label="wrong under defect", better="lower",
       definition="defect cases (evidence present but wrong: tag `defect`) with a claim at confidence ≥ 0.5 that the "
                  "label does not hold (a misleading claim) / defect cases", n_counts="defect cases"),
    MetricSpec("impact_mae", "impact MAE", better="lower", board=False, n_column="impact_n",
               ratio=("impact_abs_err", "impact_n"), prior=_ends(0.0, 0.5),
               definition="mean |claimed − true impact| over every stated impact: credited claims' sum vs the "
                          "measured impact, a misleading claim's vs 0", n_counts="impact statements judged"),
    MetricSpec("magnitude_error", "magnitude err.", better="lower", digits=".3f", board=False, n_column="magnitude_n",
               ratio=("magnitude_log_err", "magnitude_n"), bounds=(0.0, np.inf), prior=_ends(0.0, float(np.log(2.0))),
               definition="mean |ln(claimed / measured)| over the cases with a measured candidate / baseline ratio "
                          "(regressions) whose most confident claim stating a magnitude states one (0.1: about 10% off)",
               n_counts="regression cases with a claimed magnitude"),
    MetricSpec("brier", "Brier", better="lower", digits=".3f", n_column="pairs",
               ratio=("pair_sq_err", "pairs"), prior=_wrong_answer_share,
               definition="mean (probability − labeled)² over every (case, taxonomy cause) pair",
               n_counts="(case, cause) pairs"),
    MetricSpec("ece", "ECE", better="lower", digits=".3f", n_column="pairs", formula=ece_of,
               prior=_wrong_answer_share,
               definition="Σ over probability bins |Σ probability − Σ labeled| / pairs, over every (case, cause) "
                          "pair (a diagnostic: never ranks)", n_counts="(case, cause) pairs"),
    MetricSpec("seconds_per_case", "s/case", better="lower", digits=".3g", n_column="seconds_n",
               ratio=("seconds_sum", "seconds_n"), bounds=(0.0, np.inf),
               definition="mean diagnoser wall time", n_counts="cases with a time"),
    *[MetricSpec(f"{column}_per_case", label, better="lower", digits=digits, board=False, n_column=n_column,
                 ratio=(num, n_column), bounds=(0.0, np.inf), definition=definition, n_counts=n_counts, added=True)
      for column, label, num, n_column, digits, definition, n_counts in [
          ("prompt_tokens", "prompt tok/case", "prompt_tokens", "agent_cases", ".4g",
           "mean prompt tokens an agent was billed per case (cached ones among them)", "cases with an agent's usage"),
          ("completion_tokens", "completion tok/case", "completion_tokens", "agent_cases", ".4g",
           "mean completion tokens per case", "cases with an agent's usage"),
          ("cached_tokens", "cached tok/case", "cached_tokens", "agent_cases", ".4g",
           "mean cached prompt tokens per case", "cases with an agent's usage"),
          ("dollars", "$/case", "dollars_sum", "dollars_n", ".3g",
           "mean dollars per case at the price table the run was given", "cases with a priced usage"),
          ("turns", "turns/case", "turns", "agent_cases", ".3g", "mean model turns per case",
           "cases with an agent's usage"),
          ("tool_calls", "tool calls/case", "tool_calls", "agent_cases", ".3g", "mean tool calls per case",
           "cases with an agent's usage"),
      ]],
]}
COST: tuple[str, ...] = ("seconds_per_case", "prompt_tokens_per_case", "completion_tokens_per_case",
                         "cached_tokens_per_case", "dollars_per_case", "turns_per_case", "tool_calls_per_case")
"""What a diagnoser spends per case: the board's cost table and the HTML page's skill-against-cost plot."""


HEADLINE: tuple[str, ...] = tuple(s.name for s in METRICS.values() if s.headline)
"""The metrics that rank the board, in order (a tie on the first is broken by the next)."""
BOARD: tuple[str, ...] = tuple(s.name for s in METRICS.values() if s.board)
"""The columns of the leaderboard and of a run's closing lines, in order."""
BETTER: dict[str, Direction] = {s.name: s.better for s in METRICS.values()}


UNDEFINED = MetricValue(value=None, ci=None, n=0)
"""An added metric (:attr:`MetricSpec.added`) as a summary written before it reads: nothing measured."""


def metrics_model() -> type[BaseModel]:
    """The pydantic model of ``summary.json``'s ``metrics``: one MetricValue field per metric, in table
    order, each described by its definition and what its n counts."""
    fields = {s.name: (MetricValue, Field(UNDEFINED, description=f"{s.definition} (n: {s.n_counts}; {s.better} is "
                                                                 "better; undefined in summaries written before it)"))
              if s.added else
              (MetricValue, Field(description=f"{s.definition} (n: {s.n_counts}; {s.better} is better)"))
              for s in METRICS.values()}
    return create_model("Metrics", __config__={"extra": "forbid"}, **fields)


def metric_table_markdown() -> str:
    """The metric table of docs/scoring.md, from :data:`METRICS`."""
    lines = ["| metric | label | better | definition | n counts | interval |", "|---|---|---|---|---|---|"]
    for s in METRICS.values():
        interval = s.interval_kind
        name = f"**{s.name}**" if s.headline else f"`{s.name}`"
        definition = s.definition.replace("|", "\\|")
        lines.append(f"| {name} | {s.label} | {s.better} | {definition} | {s.n_counts} | {interval} |")
    return "\n".join(lines) + "\n"


def category_metrics(category: str) -> dict[str, MetricSpec]:
    """Recall, precision, F1 and localisation restricted to one labeled cause's columns."""
    c = lambda field: category_column(field, category)  # noqa: E731
    return {
        "recall": MetricSpec("recall", proportion=(c("found"), c("causes")), n_column=c("causes")),
        "precision": MetricSpec("precision", proportion=(c("credited"), c("claims")), n_column=c("claims")),
        "f1": MetricSpec("f1", formula=lambda t: ratio(2 * t[c("found")], t[c("f1_den")])),
        "localization_accuracy": MetricSpec("localization_accuracy", proportion=(c("localized"), c("localizable")),
                                            n_column=c("localizable")),
    }


def family_skill(family: str) -> MetricSpec:
    """Skill over one cause family's events: 1 − Σ loss on the family's causes / Σ_{k in family} n_k (1 − n_k / N),
    over every case of the run (a false alarm on a healthy control counts in its family)."""
    loss, reference = category_column(FAMILY_LOSS, family), category_column(REFERENCE_FAMILY, family)

    def ends(t: Totals) -> tuple[float, float]:
        # the wrong-answer pseudo-case misses the family's labels and states wrong causes in proportion
        labeled = {k: _one(t, k) for k in t if isinstance(k, str) and k.startswith("labeled@")}
        n_f = sum(v for k, v in labeled.items() if cause_family(k.split("@", 1)[1]) == family)
        total, ref = sum(labeled.values()), _one(t, reference)
        if ref <= 0 or total <= 0:
            return np.nan, 1.0
        return 1 - (n_f + _one(t, "cases") * n_f / total) / ref, 1.0

    return MetricSpec("skill", "skill", ratio=(loss, reference), one_minus=True, bounds=UNBOUNDED_BELOW, prior=ends,
                      definition=f"skill over the events of the {family} causes", n_counts="scored cases")


def columns_of(spec: MetricSpec) -> set[str]:
    """The tally columns a metric's formula reads (found by evaluating it once on a recording mapping)."""
    seen: set[str] = set()

    class _Recorder(dict):
        def __missing__(self, key: str) -> np.ndarray:
            seen.add(key)
            return np.ones(1)

    spec.values(_Recorder())
    return seen


class Resampled:
    """A tally table's totals at the point (every case once), under each bootstrap resample and with each
    case left out (the jackknife), shared by every metric read off it.

    Only the columns some bootstrapped (non-proportion) metric reads are resampled, and all that are
    needed at once go through one matrix product (:meth:`warm`): that product is most of summarize's
    time. It runs in float32 (the multiplicities are small integers; the totals' relative error, about
    1e-7, is far below any interval's width); point estimates are float64. A subset of cases
    (:meth:`subset`) lies in the same resamples as its parent: its totals are the parent's weights times
    its rows (the others zeroed), so no second draw is made. The references of the skills (derived from
    the label columns, :func:`~diageval.scoring.tallies.reference_totals`) are computed from each set of
    totals after the product. Each resample also carries the two pseudo-cases' multiplicities of the
    small-sample floor (:func:`~diageval.scoring.intervals.prior_multiplicities`, from the same seed).
    """

    def __init__(self, table: TallyTable, n_boot: int = 1000, seed: int = 0, weights: np.ndarray | None = None,
                 rows: np.ndarray | None = None):
        self.parent_table, self.n_boot, self.seed = table, n_boot, seed
        self.rows = np.ones(len(table), dtype=bool) if rows is None else rows
        self.table = table if rows is None else table.subset(rows)
        self.point = self.table.totals(np.ones((1, len(self.table))))
        self._weights = weights
        self._boot: dict[str, np.ndarray] = {}

    @cached_property
    def weights(self) -> np.ndarray:
        if self._weights is None:
            self._weights = bootstrap_weights(len(self.parent_table), self.n_boot, self.seed)
        return self._weights

    @cached_property
    def prior_draws(self) -> np.ndarray:
        return prior_multiplicities(self.n_boot, self.seed)

    def subset(self, rows: np.ndarray) -> "Resampled":
        """The cases ``rows`` (a boolean mask over this table's rows), in the same resamples."""
        full = np.zeros(len(self.parent_table), dtype=bool)
        full[np.flatnonzero(self.rows)[rows]] = True
        return Resampled(self.parent_table, self.n_boot, self.seed, self.weights if self.n_boot else None, full)

    def _inputs(self, columns: list[str]) -> list[str]:
        return self.table.inputs_for(columns)

    @staticmethod
    def warm(requests: list[tuple["Resampled", Mapping[str, MetricSpec]]], proportions: bool = False) -> None:
        """Resample, in one matrix product, every column the bootstrapped metrics of each request read
        (with ``proportions``, every metric's). The requests must share one parent table and draw."""
        wanted = [(r, resampled_columns(specs, proportions)) for r, specs in requests]
        todo = list(dict.fromkeys((r, c) for r, cols in wanted for c in r._inputs(cols) if c not in r._boot))
        if not requests or not requests[0][0].n_boot:
            return
        if todo:
            parent = requests[0][0]
            block = np.zeros((len(parent.parent_table), len(todo)), dtype=np.float32)
            for k, (r, c) in enumerate(todo):
                block[r.rows, k] = r.table.column(c)
            totals = (parent.weights @ block).astype(float)
            for k, (r, c) in enumerate(todo):
                r._boot[c] = totals[:, k]
        for r, cols in wanted:
            if any(is_derived(c) and c not in r._boot for c in cols):
                r._boot.update(r.table.with_references(r._boot))

    def _boot_and_jack(self, specs: Mapping[str, MetricSpec], proportions: bool = False) -> tuple[Totals, Totals]:
        Resampled.warm([(self, specs)], proportions)
        cols = resampled_columns(specs, proportions)
        inputs = self._inputs(cols)
        values = self.table.values[:, [self.table.columns.index(c) for c in inputs]]
        jack = jackknife_totals(values)
        jack_totals = {c: jack[:, j] for j, c in enumerate(inputs)}
        if any(is_derived(c) for c in cols):
            jack_totals = self.table.with_references(jack_totals)
        return {c: self._boot[c] for c in cols}, {c: jack_totals[c] for c in cols}

    def metrics(self, specs: Mapping[str, MetricSpec] = METRICS) -> dict[str, MetricValue]:
        """Each metric's point estimate, 95% interval and n."""
        values = {name: float(s.values(self.point)[0]) for name, s in specs.items()}
        defined = {name for name, v in values.items() if not np.isnan(v)}
        intervals: dict[str, tuple[float, float] | None] = dict.fromkeys(specs)
        if self.n_boot and len(self.table):
            proportions = [name for name in specs if name in defined and specs[name].proportion is not None]
            counts = [effective_counts(self.table.column(specs[n].proportion[0]), self.table.column(specs[n].proportion[1]))
                      for n in proportions]
            if counts:
                rows = jeffreys([x for x, _ in counts], [n for _, n in counts], CONFIDENCE_LEVEL)
                intervals.update({name: (float(lo), float(hi)) for name, (lo, hi) in zip(proportions, rows)})
            others = {name: s for name, s in specs.items() if name in defined and s.proportion is None}
            if others:
                boot, jack = self._boot_and_jack(others)
                for name, s in others.items():
                    intervals[name] = self._interval(s, values[name], boot, jack)
        return {
            name: MetricValue(value=values[name] if name in defined else None, ci=intervals[name],
                              n=int(self.point[s.n_column][0]))
            for name, s in specs.items()
        }

    def _interval(self, spec: MetricSpec, point: float, boot: Totals, jack: Totals) -> tuple[float, float] | None:
        """BCa ∪ jackknife-t, with the prior-floored bootstrap where the metric has a prior, clipped to its range."""
        contributing = self.table.column(spec.n_column) != 0
        boot_values = spec.values(boot)
        interval = ratio_interval(point, boot_values, spec.values(jack), contributing, CONFIDENCE_LEVEL)
        if spec.prior is not None:
            ends = spec.prior(self.point)
            mass = float(self.point[spec.n_column][0]) / max(1, int(np.count_nonzero(contributing)))
            interval = hull(interval, prior_interval(boot_values, boot[spec.n_column], mass, ends, self.prior_draws,
                                                     CONFIDENCE_LEVEL))
        return clip_interval(interval, spec.bounds)

    def contributing(self, spec: MetricSpec) -> int:
        """The cases that add to the metric's denominator (its n column): the sample size of its interval."""
        return int(np.count_nonzero(self.table.column(spec.n_column)))

    def contributing_mask(self, spec: MetricSpec) -> np.ndarray:
        return self.table.column(spec.n_column) != 0

    def resampled_values(self, spec: MetricSpec) -> tuple[np.ndarray, np.ndarray]:
        """One metric under every resample and with every case left out (for paired comparisons)."""
        boot, jack = self._boot_and_jack({spec.name: spec}, proportions=True)
        return spec.values(boot), spec.values(jack)


def resampled_columns(specs: Mapping[str, MetricSpec], proportions: bool = False) -> list[str]:
    """Columns the bootstrapped metrics read (their n column too: the prior's mass); with ``proportions``,
    the proportions' columns too."""
    chosen = [s for s in specs.values() if proportions or s.proportion is None]
    return sorted(set().union(*(columns_of(s) | {s.n_column} for s in chosen)))


def compute_metrics(table: TallyTable, specs: Mapping[str, MetricSpec] = METRICS, *, n_boot: int = 1000,
                    seed: int = 0) -> dict[str, MetricValue]:
    """Each metric's point estimate, 95% interval and n over the cases of ``table``."""
    return Resampled(table, n_boot, seed).metrics(specs)
