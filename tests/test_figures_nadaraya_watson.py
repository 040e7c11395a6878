"""Nadaraya-Watson picture: weights and prediction against a direct kernel computation (numpy)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.container import BarContainer

from attnsurvey.figures.nadaraya_watson import nadaraya_watson, nadaraya_watson_figure


def _kernel_oracle(q: float, x: np.ndarray, y: np.ndarray, h: float) -> tuple[float, np.ndarray]:
    k = np.exp(-((q - x) ** 2) / (2 * h * h))
    a = k / k.sum()
    return float(a @ y), a


def test_weights_and_prediction_match_the_kernel_formula():
    x = torch.tensor([0.0, 1.0, 2.5, 4.0], dtype=torch.float64)
    y = torch.tensor([1.0, -1.0, 3.0, 0.5], dtype=torch.float64)
    q = torch.tensor([0.3, 2.0, 3.9], dtype=torch.float64)
    y_hat, a = nadaraya_watson(q, x, y, 0.7)
    for j, qj in enumerate(q.tolist()):
        expected_y, expected_a = _kernel_oracle(qj, x.numpy(), y.numpy(), 0.7)
        np.testing.assert_allclose(a[j].numpy(), expected_a, rtol=1e-12)
        assert float(y_hat[j]) == pytest.approx(expected_y, rel=1e-12)


def test_figure_draws_the_weights_and_the_weighted_average():
    fig = nadaraya_watson_figure(x_query=2.6, h=0.45, n=14, seed=0)
    try:
        top, bottom = fig.axes
        points = top.collections[0].get_offsets()
        x, y = np.asarray(points[:, 0], dtype=float), np.asarray(points[:, 1], dtype=float)
        assert len(x) == 14 and np.all(np.diff(x) >= 0)
        expected_y, expected_a = _kernel_oracle(2.6, x, y, 0.45)
        bars = [c for c in bottom.containers if isinstance(c, BarContainer)]
        assert len(bars) == 1
        heights = np.array([p.get_height() for p in bars[0].patches])
        centres = np.array([p.get_x() + p.get_width() / 2 for p in bars[0].patches])
        np.testing.assert_allclose(centres, x, atol=1e-6)
        np.testing.assert_allclose(heights, expected_a, rtol=1e-4, atol=1e-7)
        (star,) = [line for line in top.get_lines() if line.get_label() == "weighted average"]
        assert star.get_xdata()[0] == pytest.approx(2.6)
        assert star.get_ydata()[0] == pytest.approx(expected_y, rel=1e-4)
    finally:
        plt.close(fig)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="bandwidth h"):
        nadaraya_watson(torch.zeros(1), torch.zeros(3), torch.zeros(3), 0.0)
    with pytest.raises(ValueError, match="one length"):
        nadaraya_watson(torch.zeros(1), torch.zeros(3), torch.zeros(2), 1.0)
    with pytest.raises(ValueError, match="n >= 2"):
        nadaraya_watson_figure(n=1)
