"""The interval of a bootstrapped metric: the hull of BCa and the jackknife-t interval (scoring/intervals.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t as student_t

from diageval.scoring.intervals import bca_interval, bootstrap_weights, jackknife_t_interval, ratio_interval


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
