"""trend_plot: the mean over seeds as a line, mean ± sd as a band, and clear errors for ragged input."""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
import numpy as np
import pytest

from attnsurvey.plotting import trend_plot


def test_line_is_the_mean_and_band_is_mean_plus_minus_sd():
    x = [10, 20, 40]
    rows = [[0.2, 0.4, 0.3], [0.5, 0.7, 0.6], [0.9, 0.8, 1.0]]  # one row of seed values per x
    fig = trend_plot(x, {"a": rows}, hline=(0.25, "chance"))
    try:
        ax = fig.axes[0]
        line = ax.lines[0]
        np.testing.assert_allclose(line.get_xdata(), x)
        np.testing.assert_allclose(line.get_ydata(), [statistics.mean(r) for r in rows])
        band = ax.collections[0].get_paths()[0].vertices
        sd = [statistics.stdev(r) for r in rows]  # sample sd, as stats.mean_sd
        tops = {float(px): float(py) for px, py in band if py >= statistics.mean(rows[x.index(int(px))])}
        np.testing.assert_allclose([tops[v] for v in x], [statistics.mean(r) + s for r, s in zip(rows, sd)])
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "chance"]
        assert ax.lines[1].get_ydata()[0] == 0.25
    finally:
        plt.close(fig)


def test_draws_into_a_given_axes():
    fig, axes = plt.subplots(1, 2)
    try:
        assert trend_plot([1, 2], {"b": [[1.0, 2.0], [3.0, 4.0]]}, ax=axes[1], logx=True) is fig
        assert not axes[0].lines and len(axes[1].lines) == 1 and axes[1].get_xscale() == "log"
    finally:
        plt.close(fig)


@pytest.mark.parametrize("rows", [[[0.1, 0.2]], [[0.1, 0.2], [0.3]]])
def test_ragged_or_short_series_are_errors(rows):
    with pytest.raises(ValueError, match="one row of seed values per x value"):
        trend_plot([1, 2], {"c": rows})
    plt.close("all")
