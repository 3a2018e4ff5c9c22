"""The interval of a bootstrapped metric: the hull of BCa, the jackknife-t interval and the prior-floored bootstrap,
clipped to the metric's range (scoring/intervals.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t as student_t

from diageval.scoring.intervals import (
    bca_interval,
    bootstrap_weights,
    clip_interval,
    hull,
    jackknife_t_interval,
    prior_interval,
    prior_multiplicities,
    ratio_interval,
)


def _mean_resampled(x: np.ndarray, n_boot: int = 2000, seed: int = 3):
    w = bootstrap_weights(len(x), n_boot, seed).astype(float)
    boot = (w @ x) / len(x)
    jack = (x.sum() - x) / (len(x) - 1)
    return boot, jack


def test_the_jackknife_t_interval_of_a_mean_is_the_student_t_interval():
    x = np.array([0.3, 1.2, 0.7, 2.9, 0.1, 0.4, 1.1, 0.8])
    _, jack = _mean_resampled(x)
    lo, hi = jackknife_t_interval(float(x.mean()), jack)
    half = student_t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    assert (lo, hi) == pytest.approx((x.mean() - half, x.mean() + half))


def test_the_hull_holds_both_intervals_and_ends_at_one_of_them():
    rng = np.random.default_rng(0)
    x = rng.lognormal(0.0, 1.0, size=12)  # skewed: the two intervals differ on both ends
    boot, jack = _mean_resampled(x)
    point = float(x.mean())
    everyone = np.ones(len(x), dtype=bool)
    bca = bca_interval(point, boot, jack, cases=len(x))
    t = jackknife_t_interval(point, jack)
    lo, hi = ratio_interval(point, boot, jack, everyone)
    assert lo == min(bca[0], t[0]) and hi == max(bca[1], t[1])
    assert lo < point < hi


def test_cases_outside_the_denominator_do_not_narrow_the_t_interval():
    """A case that adds nothing to a ratio leaves the value unchanged when left out: counting it would add
    a zero deviation and a degree of freedom, narrowing the interval. Only the contributing cases count."""
    num = np.array([0.2, 0.5, 0.1, 0.9, 0.3, 0.0, 0.0, 0.0])
    den = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    point = num.sum() / den.sum()
    jack = (num.sum() - num) / (den.sum() - den)
    contributing = den != 0
    assert np.all(jack[~contributing] == point)
    wide = jackknife_t_interval(point, jack[contributing])
    narrow = jackknife_t_interval(point, jack)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]


def test_degenerate_inputs():
    assert jackknife_t_interval(0.5, np.array([0.5])) is None
    assert jackknife_t_interval(0.5, np.array([np.nan, np.nan])) is None
    same = np.full(5, 0.5)
    assert ratio_interval(0.5, np.full(100, 0.5), same, np.ones(5, dtype=bool)) == (0.5, 0.5)
    assert ratio_interval(0.5, np.full(100, np.nan), same, np.ones(5, dtype=bool)) is None


def test_a_sample_without_mistakes_keeps_an_interval_that_reaches_below_it():
    """A near-perfect diagnoser's 16 cases with no mistake in them: every resample and every leave-one-out
    value is the same, so BCa and the jackknife collapse to the point; mixed with a pseudo-case at the low end
    of the metric's prior range, the interval reaches down to what a 2-in-16 mistake rate would give."""
    perfect = np.full(16, 1.0)
    boot, jack = _mean_resampled(perfect)
    assert ratio_interval(1.0, boot, jack, np.ones(16, dtype=bool)) == (1.0, 1.0)
    draws = prior_multiplicities(len(boot), seed=0)
    lo, hi = prior_interval(boot, np.full(len(boot), 16.0), 1.0, (0.0, 1.0), draws)
    assert hi == pytest.approx(1.0, abs=1e-3) and lo < 1 - 2 / 16
    # the floor's weight falls as 1/n: with 160 cases it reaches far less
    boot160, _ = _mean_resampled(np.full(160, 1.0))
    lo160, _ = prior_interval(boot160, np.full(len(boot160), 160.0), 1.0, (0.0, 1.0), draws)
    assert lo < lo160 < 1 and (1 - lo160) < (1 - lo) / 5


def test_the_prior_alone_stands_where_a_resample_leaves_the_metric_undefined():
    draws = prior_multiplicities(400, seed=1)
    values = np.full(400, np.nan)
    lo, hi = prior_interval(values, np.zeros(400), 1.0, (-2.0, 1.0), draws)
    assert -2.0 <= lo < hi <= 1.0
    assert prior_interval(values, np.zeros(400), 1.0, (np.nan, 1.0), draws) is None
    assert prior_interval(values, np.zeros(400), 0.0, (0.0, 1.0), draws) is None  # no case feeds the metric


def test_prior_draws_are_deterministic_per_seed():
    assert np.array_equal(prior_multiplicities(50, 3), prior_multiplicities(50, 3))
    assert not np.array_equal(prior_multiplicities(50, 3), prior_multiplicities(50, 4))
    assert prior_multiplicities(5000, 0).mean() == pytest.approx(1.0, abs=0.05)  # Gamma(1): one case


def test_intervals_are_clipped_to_the_metric_range():
    assert clip_interval((0.93, 1.02), (-np.inf, 1.0)) == (0.93, 1.0)
    assert clip_interval((-0.004, 0.064), (0.0, 1.0)) == (0.0, 0.064)
    assert clip_interval((1.2, 1.5), (0.0, 1.0)) == (1.0, 1.0)
    assert clip_interval(None, (0.0, 1.0)) is None
    assert hull((0.1, 0.2), (0.15, 0.3)) == (0.1, 0.3) and hull(None, (0.1, 0.2)) == (0.1, 0.2)


def test_summary_intervals_of_a_perfect_small_run_reach_below_it_and_stay_in_range():
    """The summary end to end: a 16-case run with no mistake (issue 21: skill 0.99 [0.93, 1.02], Brier
    [-0.004, 0.064] left their ranges, and a sample without mistakes collapsed to its point)."""
    from scoring_helpers import LOADER, STRAGGLER, cause, diag, make_case

    from diageval.cases.taxonomy import load_taxonomy
    from diageval.scoring.summary import DiagnoserInfo, summarize
    from diageval.scoring.verdicts import score_case

    tax = load_taxonomy()
    results = []
    for i in range(16):
        category = (STRAGGLER, LOADER, None)[i % 3]
        case = make_case(f"c{i:02d}", [{"category": category}] if category else [])
        results.append(score_case(case, diag(cause(category, 0.95)) if category else diag(), taxonomy=tax, seconds=1.0))
    m = summarize(results, diagnoser=DiagnoserInfo(spec="p", name="p"), case_set_hash="x", taxonomy_version="1",
                  n_boot=1000).metrics
    for name in ("skill", "skill_ranked", "f1", "brier", "ece", "misleading_rate_weighted"):
        mv = getattr(m, name)
        lo, hi = mv.ci
        assert lo <= mv.value <= hi and lo < hi, name
    assert m.skill.ci[1] <= 1.0 and m.skill.ci[0] < m.skill.value - 0.05
    assert 0.0 <= m.brier.ci[0] and m.brier.ci[1] > m.brier.value


def test_each_end_of_the_floor_uses_the_pseudo_case_on_its_side():
    """Clopper-Pearson's construction: the lower end from one more bad case, the upper end from one more good
    case. A mid-range sample (every resample at 0.5) is pulled down at its lower end only by the low pseudo-case
    and up at its upper end only by the high one, each by about a case's worth in n + 1."""
    n = 40
    boot = np.full(2000, 0.5)
    lo, hi = prior_interval(boot, np.full(2000, float(n)), 1.0, (1.0, 0.0), prior_multiplicities(2000, 0))
    exp_q = -np.log(0.025)  # the exponential's 97.5% quantile, 3.69
    assert lo == pytest.approx((n * 0.5) / (n + exp_q), rel=0.02)
    assert hi == pytest.approx((n * 0.5 + exp_q) / (n + exp_q), rel=0.02)
