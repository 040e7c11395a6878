"""mean ± sd over seeds and paired differences, against numpy and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from attnsurvey.stats import MeanSD, mean_sd, over_seeds, paired_difference, table


def test_mean_sd_matches_numpy_with_ddof_1():
    xs = [0.91, 0.87, 0.95, 0.9, 0.93]
    ms = mean_sd(xs)
    assert ms.mean == pytest.approx(np.mean(xs))
    assert ms.sd == pytest.approx(np.std(xs, ddof=1))
    assert ms.n == 5


@pytest.mark.parametrize(
    "mean, sd, text",
    [
        (0.9123, 0.031, "0.91 ± 0.03"),  # one significant digit of the sd
        (0.9123, 0.0149, "0.912 ± 0.015"),  # a leading 1 keeps two digits
        (12.345, 2.2, "12 ± 2"),
        (0.5, 0.0, "0.500 ± 0.000"),  # no spread: three decimals
        (0.98765, 0.00042, "0.9877 ± 0.0004"),
    ],
)
def test_printed_digits_follow_the_spread(mean, sd, text):
    assert str(MeanSD(mean, sd, 5)) == text


def test_with_n_and_table_show_the_number_of_seeds():
    assert MeanSD(0.5, 0.05, 7).with_n() == "0.50 ± 0.05 (n=7)"
    t = table({"attention": [1.0, 0.9, 0.95], "mean pool": [0.5, 0.52, 0.48]})
    assert "attention" in t and "(3)" in t and "0.50 ± 0.02" in t


def test_mean_sd_rejects_one_seed_and_nan():
    with pytest.raises(ValueError, match="at least 2"):
        mean_sd([0.9])
    with pytest.raises(ValueError, match="finite"):
        mean_sd([0.9, float("nan")])


def test_paired_difference_matches_scipy_t_interval():
    a = [0.9, 0.85, 0.92, 0.88, 0.91]
    b = [0.8, 0.83, 0.85, 0.79, 0.86]
    d = paired_difference(a, b)
    diffs = np.subtract(a, b)
    low, high = sps.t.interval(0.95, len(diffs) - 1, loc=diffs.mean(), scale=sps.sem(diffs))
    assert d.low == pytest.approx(low) and d.high == pytest.approx(high)
    assert d.resolved and "resolved" in str(d)


def test_paired_difference_unresolved_when_interval_contains_zero():
    d = paired_difference([0.9, 0.8, 0.85], [0.85, 0.86, 0.84])
    assert not d.resolved and "not resolved" in str(d)
    with pytest.raises(ValueError, match="equal numbers"):
        paired_difference([1, 2], [1])


def test_over_seeds_collects_per_name_in_seed_order():
    got = over_seeds(lambda s: {"a": s, "b": 2 * s}, seeds=[3, 1, 2])
    assert got == {"a": [3.0, 1.0, 2.0], "b": [6.0, 2.0, 4.0]}
    with pytest.raises(ValueError, match="returned"):
        over_seeds(lambda s: {"a": 1} if s else {"b": 1}, seeds=[0, 1])
