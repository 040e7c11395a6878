"""mean_sd_plot: one error-bar line per series, mean and sample sd per x, clear length errors."""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
import pytest

from attnsurvey.plotting import mean_sd_plot


def test_each_series_is_drawn_at_its_mean_with_a_one_sd_bar():
    x = [3, 6, 9]
    series = {"a": [[1.0, 0.8], [0.5, 0.7, 0.6], [0.1, 0.3]], "b": [[0.9, 0.9], [0.2, 0.4], [0.0, 0.0]]}
    fig = mean_sd_plot(x, series, "length", "accuracy", shade=(3, 9), hline=(0.25, "chance"))
    try:
        ax = fig.axes[0]
        assert [c.get_label() for c in ax.containers] == ["a", "b"]
        for container, per_x in zip(ax.containers, series.values()):
            (bars,) = container.lines[2]
            means = [statistics.fmean(v) for v in per_x]
            assert list(container.lines[0].get_ydata()) == pytest.approx(means)
            # each vertical bar spans mean - sd .. mean + sd (sample sd, ddof = 1)
            for seg, v, m in zip(bars.get_segments(), per_x, means):
                sd = statistics.stdev(v)
                assert (seg[0][1], seg[1][1]) == pytest.approx((m - sd, m + sd))
        # the two series are offset sideways, symmetric about the true x
        xa, xb = ax.containers[0].lines[0].get_xdata(), ax.containers[1].lines[0].get_xdata()
        assert [(p + q) / 2 for p, q in zip(xa, xb)] == pytest.approx(x)
        assert ax.get_xlabel() == "length" and ax.get_ylabel() == "accuracy"
    finally:
        plt.close(fig)


def test_a_series_without_one_list_per_x_is_refused():
    with pytest.raises(ValueError, match="2 lists of values for 3 x positions"):
        mean_sd_plot([1, 2, 3], {"a": [[1.0, 2.0], [1.0, 2.0]]}, "x", "y")
    with pytest.raises(ValueError, match="at least 2 values"):
        mean_sd_plot([1], {"a": [[1.0]]}, "x", "y")
    plt.close("all")
