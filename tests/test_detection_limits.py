"""Detection limits (issue 22 item 3): per cause and diagnoser, the measured impact at which the isotonic
found-rate curve reaches 50%, with a bootstrap interval over cases; censored limits said as such."""

from __future__ import annotations

import numpy as np
import pytest
from scoring_helpers import LOADER, STRAGGLER, cause, diag, make_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.reports.detection_limits import (
    detection_limit,
    found_rate_curve,
    limit_of,
    limit_text,
    summary_limits,
)
from diageval.scoring.summary import DETECTION_MIN_CASES, DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case


def test_the_closed_form_limit_is_the_pool_adjacent_violators_curve_s():
    """The vectorised limit (running sums) against the PAV curve it stands for, on random samples with ties."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(1, 12))
        x = rng.choice([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], n)
        y = rng.random(n) < rng.random()
        xs, rate = found_rate_curve(x, y)
        assert np.all(np.diff(rate) >= -1e-12)
        reached = np.nonzero(rate >= 0.5 - 1e-12)[0]
        expected = ("not_reached", xs[-1]) if len(reached) == 0 else \
            ("below", xs[0]) if reached[0] == 0 else ("measured", xs[reached[0]])
        assert limit_of(x, y) == (expected[0], pytest.approx(expected[1]))


def test_a_curve_that_crosses_half_inside_the_cases_gives_a_limit_with_an_interval():
    impacts = [0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    found = [False, False, False, True, True, True, True, True]
    d = detection_limit("c", impacts, found)
    assert (d.state, d.limit, d.cases, d.found) == ("measured", 0.3, 8, 5)
    lo, hi = d.ci
    assert 0.0 <= lo <= 0.3 <= hi <= 0.7
    assert limit_text(d) == f"0.30 [{lo:.2f}, {hi:.2f}] n=8"


def test_a_miss_among_finds_is_pooled_not_a_new_limit():
    """Found at 0.2, missed at 0.3, found above: the curve pools the two (1/2 each) and reaches 50% at 0.2."""
    assert limit_of([0.1, 0.2, 0.3, 0.4, 0.5], [False, True, False, True, True]) == ("measured", 0.2)


def test_everything_found_is_below_the_smallest_case_and_says_so():
    """The interval's upper end can pass the smallest case: a resample without it shows nothing below its own
    smallest case, so 0.3 being found once does not pin the limit under 0.3."""
    d = detection_limit("c", [0.3, 0.4, 0.5, 0.6, 0.7], [True] * 5)
    assert d.state == "below" and d.limit == 0.3 and d.ci[0] == 0.0 and 0.3 <= d.ci[1] <= 0.7
    assert limit_text(d) == f"≤ 0.30 (below the smallest case) [0.00, {d.ci[1]:.2f}] n=5"


def test_nothing_found_is_not_reached_and_has_no_upper_end():
    d = detection_limit("c", [0.3, 0.4, 0.5, 0.6, 0.7], [False] * 5)
    assert d.state == "not_reached" and d.limit == 0.7 and 0.3 <= d.ci[0] <= 0.7 and d.ci[1] is None
    assert limit_text(d) == f"not reached (> 0.70, the largest case) [{d.ci[0]:.2f}, not reached] n=5"


def test_too_few_cases_leave_it_undefined():
    d = detection_limit("c", [0.3, 0.5], [True, False])
    assert d.state == "undefined" and d.limit is None and d.ci is None
    assert limit_text(d) == f"undefined (2 of {DETECTION_MIN_CASES} cases)"


def test_the_interval_is_seeded_and_reproducible():
    impacts, found = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [False, True, False, True, True, True]
    assert detection_limit("c", impacts, found).ci == detection_limit("c", impacts, found).ci


def test_bad_input_names_the_cause():
    with pytest.raises(ValueError, match="c: 2 impacts but 1 found flags"):
        detection_limit("c", [0.1, 0.2], [True])
    with pytest.raises(ValueError, match="c: measured impacts must be finite numbers"):
        detection_limit("c", [0.1, float("nan"), 0.3, 0.4, 0.5], [True] * 5)


def ladder_summary(name: str = "x"):
    """Six straggler cases at increasing measured impact, found from 0.4 up; two loader cases and one without
    a measured impact."""
    tax = load_taxonomy()
    results = []
    for i, impact in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]):
        case = make_case(f"s{i}", [{"category": STRAGGLER, "ranks": [1]}])
        claim = diag(cause(STRAGGLER, 0.9, ranks=[1])) if impact >= 0.4 else diag()
        results.append(score_case(case, claim, taxonomy=tax, measured_impact=impact))
    for i, impact in enumerate([0.3, 0.6]):
        results.append(score_case(make_case(f"l{i}", [{"category": LOADER}]), diag(), taxonomy=tax, measured_impact=impact))
    results.append(score_case(make_case("l-unmeasured", [{"category": LOADER}]), diag(), taxonomy=tax))
    return summarize(results, diagnoser=DiagnoserInfo(spec=name, name=name), case_set_hash="h", taxonomy_version="1",
                     n_boot=0)


def test_limits_are_read_from_a_summary_s_measured_cases():
    limits = summary_limits(ladder_summary())
    assert set(limits) == {STRAGGLER, LOADER}
    assert (limits[STRAGGLER].state, limits[STRAGGLER].limit, limits[STRAGGLER].cases) == ("measured", 0.4, 6)
    assert (limits[LOADER].state, limits[LOADER].cases) == ("undefined", 2)
    assert limit_text(limits[LOADER]) == f"undefined (2 of {DETECTION_MIN_CASES} cases)"


def test_the_board_and_the_page_show_each_limit_with_its_interval():
    from types import SimpleNamespace

    from diageval.reports.html import detection_limits_table
    from diageval.reports.leaderboard import render_leaderboard

    summary = ladder_summary("ladder")
    cell = limit_text(summary_limits(summary)[STRAGGLER])
    assert cell.startswith("0.40 [") and cell.endswith("n=6")
    table = render_leaderboard([summary]).split("### Detection limit by cause")[1]
    assert cell in table and f"undefined (2 of {DETECTION_MIN_CASES} cases)" in table
    [straggler, loader] = detection_limits_table(SimpleNamespace(runs=[SimpleNamespace(summary=summary)]))
    assert (loader["cause"], straggler["cause"], straggler["cells"]) == (LOADER, STRAGGLER, [cell])
