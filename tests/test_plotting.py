"""attention_heatmap: one panel per matrix on one shared colour scale, a labelled colour bar, clear shape errors."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnsurvey.plotting import attention_heatmap


def _panels(fig):
    """The heat-map axes (those holding an image), left to right, and the colour bar's axes."""
    images = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    return images, bars


def test_stack_is_drawn_side_by_side_on_one_scale():
    w = torch.stack([torch.full((3, 4), 0.25), torch.eye(3, 4)])
    fig = attention_heatmap(w, titles=["uniform", "diagonal"])
    try:
        panels, bars = _panels(fig)
        assert len(panels) == 2 and len(bars) == 1
        assert [ax.get_title() for ax in panels] == ["uniform", "diagonal"]
        # the shared scale runs from vmin=0 to the largest weight of the whole stack (1.0), in both panels
        assert [ax.images[0].get_clim() for ax in panels] == [(0.0, 1.0), (0.0, 1.0)]
        np.testing.assert_array_equal(panels[1].images[0].get_array(), np.eye(3, 4))
        assert bars[0].get_ylabel() == "attention weight"
    finally:
        plt.close(fig)


def test_colorbar_label_names_what_the_colours_show():
    fig = attention_heatmap(torch.randn(4, 4), vmin=-3.0, colorbar_label="score")
    try:
        panels, bars = _panels(fig)
        assert len(panels) == 1 and bars[0].get_ylabel() == "score"
        assert panels[0].images[0].get_clim()[0] == -3.0
    finally:
        plt.close(fig)


@pytest.mark.parametrize("shape", [(5,), (2, 2, 2, 2)])
def test_wrong_rank_is_an_error_naming_the_shape(shape):
    with pytest.raises(ValueError, match=r"\(n_q, n_f\) or \(m, n_q, n_f\), got shape"):
        attention_heatmap(torch.zeros(shape))


def test_position_ticks_are_integers_that_do_not_crowd_a_narrow_panel():
    """Six panels of 48 keys: a round integer step, not one tick per cell (labels would overlap)."""
    fig = attention_heatmap(torch.rand(6, 24, 48))
    try:
        panels, _ = _panels(fig)
        fig.canvas.draw()
        x = [t for t in panels[0].get_xticks() if -0.5 <= t <= 47.5]
        y = [t for t in panels[0].get_yticks() if -0.5 <= t <= 23.5]
        assert all(float(t).is_integer() for t in x + y)
        assert 2 <= len(x) <= 10 and 2 <= len(y) <= 12, (x, y)
        assert list(panels[1].get_yticks()) == []  # only the first panel carries the query axis
    finally:
        plt.close(fig)
