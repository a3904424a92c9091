"""The arithmetic behind window quantiles, resets and slopes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferwatch.stats import (
    CumulativeWindow,
    GaugeWindow,
    histogram_quantile,
    least_squares_slope,
    window_quantiles,
)

INF = math.inf
# cumulative counts: 10 in (0, 0.1], 30 in (0.1, 0.5], 50 in (0.5, 1], 10 in (1, +Inf)
BUCKETS = [(0.1, 10.0), (0.5, 40.0), (1.0, 90.0), (INF, 100.0)]


def test_interpolates_inside_the_bucket_like_promql() -> None:
    # rank 50 lands in (0.5, 1] after 40 observations: 0.5 + 0.5 * (10/50)
    assert histogram_quantile(0.5, BUCKETS) == pytest.approx(0.6)
    # rank 5 in the first bucket: lower bound 0
    assert histogram_quantile(0.05, BUCKETS) == pytest.approx(0.05)
    # rank 90 is exactly the top of (0.5, 1]
    assert histogram_quantile(0.9, BUCKETS) == pytest.approx(1.0)


def test_rank_in_the_inf_bucket_returns_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.99, BUCKETS) == 1.0


def test_no_inf_bucket_no_observations_or_one_bucket_give_nan() -> None:
    assert math.isnan(histogram_quantile(0.5, [(0.1, 1.0), (1.0, 2.0)]))
    assert math.isnan(histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]))
    assert math.isnan(histogram_quantile(0.5, [(INF, 5.0)]))
    assert math.isnan(histogram_quantile(math.nan, BUCKETS))


def test_out_of_range_q_and_unsorted_or_non_monotonic_input() -> None:
    assert histogram_quantile(-0.1, BUCKETS) == -INF
    assert histogram_quantile(1.1, BUCKETS) == INF
    shuffled = [BUCKETS[2], BUCKETS[0], BUCKETS[3], BUCKETS[1]]
    assert histogram_quantile(0.5, shuffled) == pytest.approx(0.6)
    # a bucket lower than its predecessor is raised to it (scrape not atomic)
    bumpy = [(0.1, 10.0), (0.5, 8.0), (1.0, 90.0), (INF, 100.0)]
    assert histogram_quantile(0.05, bumpy) == pytest.approx(0.05)


def test_first_bucket_with_non_positive_bound() -> None:
    assert histogram_quantile(0.1, [(-1.0, 5.0), (1.0, 10.0), (INF, 10.0)]) == -1.0


@given(
    st.lists(st.integers(min_value=0, max_value=50), min_size=2, max_size=12),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_quantile_stays_within_the_finite_bounds(increments: list[int], q: float) -> None:
    bounds = [0.01 * 2**i for i in range(len(increments) - 1)] + [INF]
    counts, total = [], 0
    for inc in increments:
        total += inc
        counts.append(float(total))
    value = histogram_quantile(q, list(zip(bounds, counts, strict=True)))
    if total == 0:
        assert math.isnan(value)
    else:
        assert 0.0 <= value <= bounds[-2]


def test_window_starts_at_first_sample_until_full() -> None:
    w = CumulativeWindow(60)
    w.add(0, (1, 2))
    assert w.increase() is None
    w.add(10, (3, 5))
    assert w.increase() == (2, 3)
    w.add(70, (10, 10))
    # the baseline is the newest sample at or before 70 - 60 = 10
    assert w.increase() == (7, 5)
    w.add(130, (12, 10))
    assert w.increase() == (2, 0)


def test_counter_reset_restarts_from_zero_and_never_goes_negative() -> None:
    w = CumulativeWindow(60)
    w.add(0, (100, 200))
    w.add(10, (150, 260))
    w.add(20, (3, 4))  # the worker restarted: 3 and 4 counted since
    assert w.resets == 1
    assert w.increase() == (3, 4)
    assert all(v >= 0 for v in w.increase() or ())


def test_changed_bucket_layout_counts_as_a_reset() -> None:
    w = CumulativeWindow(60)
    w.add(0, (1, 2))
    w.add(5, (1, 2, 3))
    assert w.resets == 1
    assert w.increase() == (1, 2, 3)


def test_window_quantiles_absent_without_observations() -> None:
    bounds = (0.1, 0.5, INF)
    assert window_quantiles(bounds, (0.0, 0.0, 0.0), (0.5, 0.99)) is None
    got = window_quantiles(bounds, (0.0, 4.0, 4.0), (0.5,))
    assert got == {0.5: pytest.approx(0.3)}


def test_slope_of_a_rising_flat_and_falling_queue() -> None:
    assert least_squares_slope([(0, 0), (1, 2), (2, 4)]) == pytest.approx(2.0)
    assert least_squares_slope([(0, 5), (1, 5), (2, 5)]) == 0.0
    assert least_squares_slope([(0, 9), (2, 5)]) == pytest.approx(-2.0)
    assert least_squares_slope([(0, 1)]) is None
    g = GaugeWindow(10)
    for t in range(0, 30, 2):
        g.add(t, t / 2)
    assert len(g) == 6  # only the last 10 s are kept
    assert g.slope() == pytest.approx(0.5)


def test_zero_quantile_with_an_empty_first_bucket_is_its_lower_bound() -> None:
    # the interpolation would divide 0 by 0 here (found by the property test above)
    assert histogram_quantile(0.0, [(0.01, 0.0), (INF, 1.0)]) == 0.0


def test_share_above_a_bound_of_a_classic_histogram() -> None:
    from inferwatch.stats import INF, share_above

    b = [(500.0, 60.0), (1000.0, 70.0), (2000.0, 80.0), (5000.0, 95.0), (INF, 100.0)]
    assert share_above(2000, b) == pytest.approx(0.20)  # a bucket bound: exact
    assert share_above(1500, b) == pytest.approx(0.25)  # inside (1000, 2000]: spread evenly
    assert share_above(250, b) == pytest.approx(0.70)  # first bucket from 0
    assert share_above(10_000, b) == pytest.approx(0.05)  # only the +Inf bucket is above
    assert share_above(0, b) == 1.0
    # unordered, and a scrape in flux (a lower count above a higher one) as PromQL reads it
    assert share_above(2000, list(reversed(b))) == pytest.approx(0.20)
    assert share_above(1000, [(500.0, 6.0), (1000.0, 5.0), (INF, 10.0)]) == pytest.approx(0.4)
    assert share_above(2000, [(INF, 0.0)]) is None  # no observation
    assert share_above(2000, [(1000.0, 3.0)]) is None  # no +Inf bucket
