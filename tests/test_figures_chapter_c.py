import math

import numpy as np
import pytest

from attnsurvey.figures import chapter_c as fc


def test_curve_summary_matches_numpy_and_keeps_gaps():
    rows = [[0.1, 0.5, 1.0], [0.3, 0.7, math.nan], [0.2, 0.9, 1.0]]
    mean, sd = fc.curve_summary(rows)
    arr = np.array(rows)
    np.testing.assert_allclose(mean[:2], arr[:, :2].mean(0))
    np.testing.assert_allclose(sd[:2], arr[:, :2].std(0, ddof=1))
    assert math.isnan(mean[2]) and math.isnan(sd[2])


def test_curve_summary_refuses_one_seed_and_ragged_rows():
    with pytest.raises(ValueError, match="two seeds"):
        fc.curve_summary([[1.0, 2.0]])
    with pytest.raises(ValueError, match="lengths"):
        fc.curve_summary([[1.0, 2.0], [1.0]])


def test_seed_curves_draws_one_line_per_method_with_its_error_bars():
    curves = {"a": [[0.1, 0.2], [0.3, 0.4]], "b": [[0.5, math.nan], [0.7, math.nan]]}
    fig = fc.seed_curves([8, 16], curves, xlabel="n", ylabel="acc", title="t", chance=0.1, logx=True)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels) == ["a (n=2)", "b (n=2)", "chance"]
    line = ax.get_lines()[0]
    np.testing.assert_allclose(np.asarray(line.get_ydata(), dtype=float), [0.2, 0.3])
    # the error bar of method a at x = 8 spans mean ± sd = 0.2 ± 0.1414
    segs = ax.collections[0].get_segments()
    np.testing.assert_allclose([segs[0][0][1], segs[0][1][1]], [0.2 - 0.02**0.5, 0.2 + 0.02**0.5])
    with pytest.raises(ValueError, match="2 values"):
        fc.seed_curves([8, 16], {"c": [[1.0], [2.0]]}, xlabel="n", ylabel="a", title="t")
