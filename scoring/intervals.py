"""Confidence intervals that keep their coverage on a corpus of 16 cases, vectorised over resamples.

Every metric is a ratio of column totals of the per-case tally table (:mod:`diageval.scoring.tallies`),
so a resample of cases is a weighted total: ``weights @ table``. Two kinds of interval:

* **Proportions** (a count of successes over a count of trials: precision, recall, false-alarm rate, ...):
  the Jeffreys interval, the Beta(x + ½, n − x + ½) quantiles. It is the interval the small-sample
  literature recommends (Brown, Cai & DasGupta 2001): near-nominal coverage down to n of a few, and
  never a zero-width interval at 0 or 1 where the percentile bootstrap of a proportion collapses (four
  healthy controls with no false alarm: the bootstrap says [0, 0]). Trials inside one case are not
  independent (a diagnoser that misreads a case misreads all its claims), so x and n are scaled to the
  effective sample size n / deff, where the design effect deff is the ratio of the case-clustered
  (linearised) variance of the ratio to the binomial one, never below 1 (Korn & Graubard 1998). With one
  trial per case deff is 1 and this is the plain Jeffreys interval.
* **Ratios** of sums that are not proportions (skill, Brier, ECE, F1, impact error, seconds): the BCa
  bootstrap (Efron 1987) over cases, its bias correction from the share of resamples below the point
  estimate and its acceleration from the jackknife (leave one case out: total minus that case's row),
  with Hesterberg's small-sample expansion of the quantiles (:func:`bca_interval`), joined with the
  jackknife Student-t interval (:func:`jackknife_t_interval`): the reported interval is the hull of
  the two (:func:`ratio_interval`). BCa corrects the percentile interval's bias, skew and narrowness
  (the percentile bootstrap of Brier covered 90.5% at 16 cases), but its endpoints are quantiles of
  the resamples, and a mean over a few cases of a skewed quantity (impact error over about 8
  statements, seconds with rare timeouts) has a bootstrap distribution with short tails: it covered
  92-94%. The jackknife-t interval is symmetric (it misses on the long side of a skewed statistic) but
  its variance estimate is biased upward (Efron & Stein 1981), and it stays valid for the ECE, a sum
  of absolute values whose bootstrap distribution is not consistent where a bin's gap is near 0 (BCa
  covered 92% there). The hull covers whenever either does.
* **A small-sample floor** for the ratios that judge diagnoses (:func:`prior_interval`): neither BCa nor
  the jackknife can see a rare mistake that is absent from the sample. A near-perfect diagnoser that errs
  on 2% of cases shows no error at all in 72% of 16-case runs, and every resample of such a run, every
  leave-one-out value, is perfect: the interval collapses to the point. So the metric has two pseudo-cases,
  its value on the oracle's answer and on a confidently wrong answer on an average case
  (:attr:`~diageval.scoring.metrics.MetricSpec.prior`), each weighing as much as an average case of the
  metric's n times an exponential (Gamma(1)) multiplicity drawn per resample, the Bayesian bootstrap's own
  weight for one case. The lower end is the percentile of the resamples mixed with the pseudo-case at the
  lower end, the upper end that of the resamples mixed with the one at the higher end: as Clopper-Pearson
  bounds a proportion with one more failure below and one more success above (with zero failures in n
  trials, its upper bound on the failure rate is 1 − 0.025^(1/n): 6% at 60). Half a case at each end
  (Jeffreys' split) fell short: a 4%-error diagnoser's F1 at 60 cases covered 92.2% (1000 runs), because
  a confidently wrong case costs F1 no more than the mistake it stands for. This interval joins the hull;
  its weight falls as 1/n.

Every interval is clipped to its metric's range (:attr:`~diageval.scoring.metrics.MetricSpec.bounds`:
skill ≤ 1, a rate in [0, 1], seconds ≥ 0). Measured, every metric covers ≥ 90% at 16 cases and ≥ 93% from
60 for the simulated mid-skill diagnoser and for near-perfect ones erring on 2%, 4% and 10% of cases
(docs/scoring.md has the tables and the cost in width).

The coverage, over simulated runs at 16, 60 and 80 cases, is printed by ``tests/coverage_simulation.py``
and checked by the slow test ``tests/scoring/test_interval_coverage.py``.

Resamples where a metric is undefined (no claim drawn) are left out of its interval; if none is
defined the interval is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy.special import betaincinv, ndtr, ndtri, stdtrit

# Quantiles from scipy.special, not scipy.stats: the same functions underneath (beta.ppf is betaincinv, t.ppf
# is stdtrit; equal to the last bit), without importing scipy.stats, which costs 1-3 s of every CLI run here.

CONFIDENCE_LEVEL = 0.95

Totals = Mapping[str, np.ndarray]
"""Column name -> totals, one per weighting (1 for the point estimate, k for k resamples)."""


def bootstrap_weights(n_cases: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_cases) multiplicities of each case in each resample (cases drawn with replacement);
    deterministic for a given seed; float32 (see :class:`~diageval.scoring.metrics.Resampled`). Drawn as indices in the smallest integer type that holds them and
    counted per resample, an order of magnitude faster than a multinomial draw per resample."""
    if n_cases == 0 or n_boot == 0:
        return np.zeros((n_boot, n_cases), dtype=np.float32)
    rng = np.random.default_rng(seed)
    dtype = np.uint16 if n_cases <= np.iinfo(np.uint16).max else np.int64
    draws = rng.integers(0, n_cases, size=(n_boot, n_cases), dtype=dtype)
    weights = np.empty((n_boot, n_cases), dtype=np.float32)  # small integers: exact in float32
    for b in range(n_boot):
        weights[b] = np.bincount(draws[b], minlength=n_cases)
    return weights


def jackknife_totals(values: np.ndarray) -> np.ndarray:
    """(n_cases, columns) totals with each case left out in turn."""
    return values.sum(axis=0, keepdims=True) - values


def jeffreys(successes, trials, level: float = CONFIDENCE_LEVEL) -> np.ndarray:
    """Jeffreys intervals of proportions (arrays; trials may be effective, non-integer counts): an array
    of (lo, hi) rows, NaN where trials is 0. One call for many intervals (scipy's overhead is per call)."""
    x, n = np.atleast_1d(np.asarray(successes, dtype=float)), np.atleast_1d(np.asarray(trials, dtype=float))
    tail = (1 - level) / 2
    ok = n > 0
    a, b = np.where(ok, x + 0.5, 1.0), np.where(ok, n - x + 0.5, 1.0)
    lo = np.where(x <= 0, 0.0, betaincinv(a, b, tail))
    hi = np.where(x >= n, 1.0, betaincinv(a, b, 1 - tail))
    return np.where(ok[:, None], np.stack([lo, hi], axis=1), np.nan)


def effective_counts(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """(successes, trials) of sum(num) / sum(den), case i contributing num[i] of den[i] trials, scaled to
    the effective sample size n / deff, deff = (linearised case-clustered variance of the ratio) /
    (binomial variance), floored at 1 (see the module docstring)."""
    n, x = float(den.sum()), float(num.sum())
    if n <= 0:
        return 0.0, 0.0
    p = x / n
    clusters = int(np.count_nonzero(den))
    if not (0 < p < 1 and clusters > 1):
        return x, n
    resid = num - p * den
    clustered = clusters / (clusters - 1) * float(resid @ resid) / n**2
    n_eff = n / max(1.0, clustered / (p * (1 - p) / n))
    return p * n_eff, n_eff


def percentile_interval(samples: np.ndarray, level: float = CONFIDENCE_LEVEL) -> tuple[float, float] | None:
    defined = samples[~np.isnan(samples)]
    if defined.size == 0:
        return None
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(defined, [tail, 100 - tail])
    return float(lo), float(hi)


RELATIVE_TIE = 1e-6
"""Resampled totals are float32 (:class:`~diageval.scoring.metrics.Resampled`): values closer than this
(relative to their size, at least 1) are the same value reached by different rounding."""


def same_value(values: np.ndarray, point: float | np.ndarray) -> np.ndarray:
    return np.abs(values - point) <= RELATIVE_TIE * np.maximum(1.0, np.abs(point))


def bca_interval(point: float, boot: np.ndarray, jack: np.ndarray, level: float = CONFIDENCE_LEVEL,
                 cases: int | None = None) -> tuple[float, float] | None:
    """BCa interval from the resampled statistics ``boot`` and the leave-one-case-out ones ``jack``.

    Bias correction z0 = Φ⁻¹(share of resamples below the point, ties counted half; :func:`same_value`);
    acceleration a = Σ d³ / (6 (Σ d²)^1.5) with d = mean(jack) − jack. The normal quantiles ±z are
    expanded to √(n/(n−1))·t₍n−1₎ for the n cases that contribute to the metric's denominator
    (``cases``; default: every case of the jackknife) (Hesterberg 2015, "expanded percentile"): the bootstrap
    distribution is as narrow as the plug-in variance, (n−1)/n of the unbiased one, and ignores that the
    spread itself is estimated; at 16 cases this widens the interval by 12%, at 80 by 2%. With a
    degenerate jackknife a = 0; [point, point] when every resample equals the point.
    """
    defined = boot[~np.isnan(boot)]
    if defined.size == 0:
        return None
    tie = same_value(defined, point)
    if np.all(tie):
        return point, point
    share = (np.count_nonzero((defined < point) & ~tie) + 0.5 * np.count_nonzero(tie)) / defined.size
    share = min(max(share, 0.5 / defined.size), 1 - 0.5 / defined.size)
    z0 = float(ndtri(share))
    jack = jack[~np.isnan(jack)]
    accel = 0.0
    if jack.size > 2:
        d = jack.mean() - jack
        s2 = float(d @ d)
        if s2 > 0:
            accel = float((d**3).sum()) / (6 * s2**1.5)
    tail = (1 - level) / 2
    z = ndtri(np.array([tail, 1 - tail]))
    cases = jack.size if cases is None else cases
    if cases > 2:  # Hesterberg's expansion: the small-sample widening a t interval would get
        z = np.sqrt(cases / (cases - 1)) * stdtrit(cases - 1, np.array([tail, 1 - tail]))
    adjusted = ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))
    lo, hi = np.quantile(defined, adjusted)
    return float(lo), float(hi)


def jackknife_t_interval(point: float, jack: np.ndarray, level: float = CONFIDENCE_LEVEL) -> tuple[float, float] | None:
    """point ± t₍m−1₎ · se_jack over the m leave-one-case-out values ``jack`` (NaN dropped), se_jack² =
    (m−1)/m · Σ (jack − mean)². Pass only the cases that feed the metric's denominator: a case that
    adds nothing leaves the value unchanged and would only inflate m. None with fewer than 2 values."""
    jack = jack[~np.isnan(jack)]
    m = jack.size
    if m < 2:
        return None
    d = jack - jack.mean()
    se = float(np.sqrt((m - 1) / m * float(d @ d)))
    half = float(stdtrit(m - 1, 1 - (1 - level) / 2)) * se
    return point - half, point + half


PRIOR_SHAPE = 1.0
"""Each pseudo-case's Gamma shape: one case (an exponential multiplicity, the Bayesian bootstrap's own)."""
PRIOR_STREAM = 7919
"""Seeds the pseudo-cases' draws apart from the cases' (same seed, same intervals)."""


def prior_multiplicities(n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, 2) Gamma(1) multiplicities of the two pseudo-cases in each resample; deterministic per seed."""
    rng = np.random.default_rng([seed, PRIOR_STREAM])
    return rng.gamma(PRIOR_SHAPE, 1.0, size=(n_boot, 2))


def prior_interval(values: np.ndarray, mass: np.ndarray, case_mass: float, ends: tuple[float, float],
                   draws: np.ndarray, level: float = CONFIDENCE_LEVEL) -> tuple[float, float] | None:
    """The percentile interval of the resampled metric mixed with a pseudo-case (module docstring): its lower end
    from the resamples mixed with the pseudo-case at the lower of the two ends, its upper end from those mixed
    with the one at the higher end, as Clopper-Pearson bounds a proportion with one more failure below and one
    more success above.

    ``values``: the metric in each resample (NaN where undefined: the pseudo-cases alone); ``mass``: the
    total of its n column in each resample; ``case_mass``: that total per contributing case at the point
    (a pseudo-case weighs as much as an average case); ``ends``: the metric on the two pseudo-cases;
    ``draws``: their multiplicities per resample (:func:`prior_multiplicities`). None when an end is not
    finite or no case contributes."""
    if not (np.all(np.isfinite(ends)) and case_mass > 0) or values.size == 0:
        return None
    undefined = np.isnan(values)
    v, m = np.where(undefined, 0.0, values), np.where(undefined, 0.0, mass)
    g = case_mass * draws[: values.size]
    low = (v * m + g[:, 0] * min(ends)) / (m + g[:, 0])
    high = (v * m + g[:, 1] * max(ends)) / (m + g[:, 1])
    tail = (1 - level) / 2
    return float(np.quantile(low, tail)), float(np.quantile(high, 1 - tail))


def hull(a: tuple[float, float] | None, b: tuple[float, float] | None) -> tuple[float, float] | None:
    """The smallest interval holding both (either may be None)."""
    if a is None or b is None:
        return a if b is None else b
    return min(a[0], b[0]), max(a[1], b[1])


def clip_interval(interval: tuple[float, float] | None, bounds: tuple[float, float]) -> tuple[float, float] | None:
    """``interval`` cut to the metric's range."""
    if interval is None:
        return None
    lo, hi = bounds
    return float(min(max(interval[0], lo), hi)), float(max(min(interval[1], hi), lo))


def ratio_interval(point: float, boot: np.ndarray, jack: np.ndarray, contributing: np.ndarray,
                   level: float = CONFIDENCE_LEVEL) -> tuple[float, float] | None:
    """The interval of a bootstrapped metric: the hull of its BCa interval (with Hesterberg's expansion for
    the contributing cases) and its jackknife-t interval over those cases (module docstring).
    ``contributing``: a boolean mask over the jackknife's cases, those that add to the denominator."""
    bca = bca_interval(point, boot, jack, level, int(np.count_nonzero(contributing)))
    if bca is None:
        return None
    t = jackknife_t_interval(point, jack[contributing], level)
    if t is None:
        return bca
    return min(bca[0], t[0]), max(bca[1], t[1])

