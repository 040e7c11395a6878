"""Chapter 2's picture before Eq. (1)-(5): Nadaraya-Watson kernel regression as attention.

Nadaraya-Watson regression predicts ``y`` at a query ``x`` as a weighted average of the
observed ``y_i``, with weights from a kernel of the distance ``x - x_i``. With a Gaussian
kernel of bandwidth ``h`` the weights are a softmax of the scores
``e_i = -(x - x_i)^2 / (2 h^2)``: the general attention module of §2 with the query
``q = x``, keys ``k_i = x_i`` and values ``v_i = y_i`` (Eq. 2-4). The weights here are
computed by the package's attention core (:func:`attnsurvey.attention.attend`) with that
score, not by a softmax of their own.

Shapes: n_q queries, n_f sample points.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch import Tensor

from ..attention import ScoreFn, attend


def gaussian_kernel_score(h: float) -> ScoreFn:
    """The score ``e_i = -(q - k_i)^2 / (2 h^2)`` for one-dimensional queries and keys.

    Args:
        h: the bandwidth (> 0).

    Returns:
        A callable ``(Q (..., n_q, 1), K (..., n_f, 1)) -> e (..., n_q, n_f)`` for
        :func:`attnsurvey.attention.attend`.

    Raises:
        ValueError: if ``h <= 0``.
    """
    if not h > 0:
        raise ValueError(f"the bandwidth h must be > 0, got {h}")

    def score(Q: Tensor, K: Tensor) -> Tensor:
        return -((Q - K.transpose(-1, -2)) ** 2) / (2 * h * h)

    return score


def nadaraya_watson(x_query: Tensor, x: Tensor, y: Tensor, h: float) -> tuple[Tensor, Tensor]:
    """Nadaraya-Watson predictions and weights: ``y_hat(q) = sum_i a_i(q) y_i`` (Eq. 2-4).

    ``a_i(q) = softmax_i(-(q - x_i)^2 / (2 h^2))``, computed by ``attend``.

    Args:
        x_query: the query points.
        x: the sample points.
        y: the sample values.
        h: the bandwidth (> 0).

    Shape:
        - x_query: ``(n_q,)``; x, y: ``(n_f,)``.
        - Output: ``(y_hat (n_q,), a (n_q, n_f))``.

    Returns:
        ``(y_hat, a)``: the predictions and the weights.

    Raises:
        ValueError: if x and y differ in length, an input is not one-dimensional, or ``h <= 0``.
    """
    for name, t in (("x_query", x_query), ("x", x), ("y", y)):
        if t.dim() != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {tuple(t.shape)}")
    if x.shape != y.shape:
        raise ValueError(f"x (n_f,) and y (n_f,) must have one length, got {tuple(x.shape)} and {tuple(y.shape)}")
    c, a = attend(x_query[:, None], x[:, None], y[:, None], score=gaussian_kernel_score(h))
    assert a is not None  # need_weights defaults to True
    return c[:, 0], a


def nadaraya_watson_figure(
    x_query: float = 2.6, h: float = 0.45, n: int = 14, seed: int = 0, figsize: tuple[float, float] = (7.5, 4.6)
) -> Figure:
    """Two panels: the points with the regression curve, the query and its prediction (top); the weights (bottom).

    The ``n`` points are ``x_i ~ U(0, 5)`` and ``y_i = sin(x_i) + x_i / 2 + 0.25 eps_i`` drawn
    from ``seed``. The top panel's line labelled ``"weighted average"`` is the point
    ``(x_query, sum_i a_i y_i)``; the bottom panel's bars are the kernel weights ``a_i``
    at the ``x_i`` for that query.

    Args:
        x_query: the query point.
        h: the bandwidth (> 0).
        n: the number of points (>= 2).
        seed: the seed of the points.
        figsize: the figure size in inches.

    Returns:
        The figure.

    Raises:
        ValueError: for ``n < 2`` or ``h <= 0``.
    """
    if n < 2:
        raise ValueError(f"need n >= 2 points, got {n}")
    g = torch.Generator().manual_seed(seed)
    x = torch.sort(5 * torch.rand(n, generator=g)).values
    y = torch.sin(x) + x / 2 + 0.25 * torch.randn(n, generator=g)
    grid = torch.linspace(0, 5, 201)
    curve, _ = nadaraya_watson(grid, x, y, h)
    y_hat, a = nadaraya_watson(torch.tensor([x_query]), x, y, h)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=figsize, sharex=True, gridspec_kw={"height_ratios": [3, 2]}, constrained_layout=True
    )
    top.plot(grid.numpy(), curve.numpy(), color="#888", lw=1.2, ls="--", label=r"$\hat y(x)$ at every query")
    sizes = 20 + 300 * (a[0] / a[0].max()).numpy()
    top.scatter(
        x.numpy(), y.numpy(), s=sizes, color="#2c7fb8", zorder=3, label=r"points $(x_i, y_i)$, size $\propto a_i$"
    )
    top.axvline(x_query, color="#e67e22", lw=1.2)
    top.plot(
        [x_query], [float(y_hat[0])], marker="*", ms=16, color="#c0392b", ls="none", zorder=4, label="weighted average"
    )
    top.text(x_query, top.get_ylim()[1], f" query x = {x_query:g}", color="#e67e22", va="top", fontsize=9)
    top.set_ylabel("y")
    top.legend(fontsize=8, loc="lower right")
    top.set_title(
        rf"$\hat y = \sum_i a_i y_i$ with $a_i = \mathrm{{softmax}}_i(-(x - x_i)^2 / 2h^2)$, $h = {h:g}$", fontsize=10
    )
    # the kernel divided by its sum over the points: the bars (the weights) lie on this curve
    kernel = torch.exp(-((grid - x_query) ** 2) / (2 * h * h)) / torch.exp(-((x - x_query) ** 2) / (2 * h * h)).sum()
    bottom.plot(
        grid.numpy(), kernel.numpy(), color="#e67e22", lw=1, alpha=0.6, label=r"kernel / $\sum_j$ kernel$(x_j)$"
    )
    bottom.bar(x.numpy(), a[0].numpy(), width=0.06, color="#c0392b", label=r"weight $a_i$ at $x_i$")
    bottom.axvline(x_query, color="#e67e22", lw=1.2)
    bottom.set_xlabel("x")
    bottom.set_ylabel(r"$a_i$")
    bottom.legend(fontsize=8, loc="upper right")
    bottom.set_xlim(0, 5)
    bottom.set_ylim(0, 1.15 * float(kernel.max()))
    return fig
