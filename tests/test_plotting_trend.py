"""trend_plot: the mean over seeds with ± 1 sd error bars (or a band), gaps for NaN, clear errors."""

from __future__ import annotations

import math
import statistics

import matplotlib.pyplot as plt
import numpy as np
import pytest

from attnsurvey.plotting import trend_plot


def test_each_series_is_drawn_at_its_mean_with_a_one_sd_bar():
    x = [3, 6, 9]
    series = {"a": [[1.0, 0.8], [0.5, 0.7, 0.6], [0.1, 0.3]], "b": [[0.9, 0.9], [0.2, 0.4], [0.0, 0.0]]}
    fig = trend_plot(x, series, xlabel="length", ylabel="accuracy", shade=(3, 9), hline=(0.25, "chance"))
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
        assert "chance" in [t.get_text() for t in ax.get_legend().get_texts()]
    finally:
        plt.close(fig)


def test_by_seed_rows_are_the_transpose_and_nan_leaves_a_gap():
    per_seed = [[0.1, 0.5, 1.0], [0.3, 0.7, math.nan], [0.2, 0.9, 1.0]]
    fig = trend_plot([8, 16, 32], {"a": per_seed}, by_seed=True, logx=True)
    try:
        ax = fig.axes[0]
        y = np.asarray(ax.containers[0].lines[0].get_ydata(), dtype=float)
        arr = np.array(per_seed)
        np.testing.assert_allclose(y[:2], arr[:, :2].mean(0))
        assert math.isnan(y[2])
        assert ax.get_xscale() == "log"
    finally:
        plt.close(fig)


def test_band_is_mean_plus_minus_sd_and_draws_into_a_given_axes():
    x = [10, 20, 40]
    rows = [[0.2, 0.4, 0.3], [0.5, 0.7, 0.6], [0.9, 0.8, 1.0]]
    fig, axes = plt.subplots(1, 2)
    try:
        assert trend_plot(x, {"a": rows}, band=True, ax=axes[1]) is fig
        ax = axes[1]
        assert not axes[0].lines
        np.testing.assert_allclose(ax.lines[0].get_ydata(), [statistics.mean(r) for r in rows])
        band = ax.collections[0].get_paths()[0].vertices
        tops = {float(px): float(py) for px, py in band if py >= statistics.mean(rows[x.index(int(px))])}
        np.testing.assert_allclose([tops[v] for v in x], [statistics.mean(r) + statistics.stdev(r) for r in rows])
    finally:
        plt.close(fig)


def test_malformed_series_are_errors():
    with pytest.raises(ValueError, match="one row of seed values per x value"):
        trend_plot([1, 2, 3], {"a": [[1.0, 2.0], [1.0, 2.0]]})
    with pytest.raises(ValueError, match="at least 2 values"):
        trend_plot([1], {"a": [[1.0]]})
    with pytest.raises(ValueError, match="every seed needs one value per x"):
        trend_plot([1, 2], {"a": [[1.0], [2.0]]}, by_seed=True)
    plt.close("all")
