"""Drawings for survey §1-§3.1: the encoder-decoder of Chapter 1 and the survey's Figs. 1-8.

Each function returns a ``matplotlib.figure.Figure`` (display it with
:func:`attnsurvey.plotting.show`). The drawings are ours; they show what the
survey's figures show, built with the same ``draw_box``/``draw_arrow`` helpers
as every diagram of the book. Where a figure depicts a structure of the package
(Fig. 3, the taxonomy), it is drawn from that structure.
"""
from __future__ import annotations

from ..plotting import draw_arrow, draw_box

_FEAT, _QUERY, _ATT, _OUT, _IO = "#dbe9f6", "#fde0c5", "#f9d6d5", "#d5f0dc", "#eeeeee"


def _axes(w: float, h: float, xlim: tuple[float, float], ylim: tuple[float, float], title: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(w, h))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    return fig, ax


def encoder_decoder_figure(n: int = 5, steps: int = 3):
    """Chapter 1: an encoder-decoder without attention (one fixed vector) and with attention.

    The right panel draws, for output step ``t``, lines to every encoder state
    with a width that follows an illustrative reversal alignment (step ``t``
    leans on source position ``n + 1 - t``).
    """
    import math

    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    titles = ["without attention: one fixed vector", "with attention: a weighted look-back per step"]
    for ax, title, attend_all in zip(axes, titles, [False, True]):
        ax.set_xlim(-0.8, 10.3)
        ax.set_ylim(-0.3, 3.3)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        for pos in range(n):
            draw_box(ax, (pos * 1.0, 0.3), f"$x_{pos + 1}$", w=0.6, h=0.4, color=_IO)
            draw_box(ax, (pos * 1.0, 1.3), f"$h_{pos + 1}$", w=0.6, h=0.45)
            draw_arrow(ax, (pos, 0.52), (pos, 1.06), color="#555")
            if pos:
                draw_arrow(ax, (pos - 0.7, 1.3), (pos - 0.3, 1.3))
        for t in range(steps):
            x = 6.4 + 1.3 * t
            draw_box(ax, (x, 2.6), f"$s_{t + 1}$", w=0.6, h=0.45, color=_QUERY)
            if t:
                draw_arrow(ax, (x - 1.0, 2.6), (x - 0.3, 2.6))
            if attend_all:
                raw = [math.exp(-1.5 * abs(pos - (n - 1 - t))) for pos in range(n)]
                wts = [r / sum(raw) for r in raw]
                for pos in range(n):
                    draw_arrow(ax, (pos + 0.2, 1.55), (x - 0.1, 2.38), color="#c0392b",
                               lw=0.4 + 3 * wts[pos], alpha=0.3 + 0.7 * wts[pos])
        if not attend_all:
            draw_box(ax, (5.2, 1.3), "$c = h_{n_x}$", w=0.9, h=0.5, color=_ATT)
            draw_arrow(ax, (4.3, 1.3), (4.75, 1.3))
            for t in range(steps):
                draw_arrow(ax, (5.5, 1.55), (6.3 + 1.3 * t, 2.38), color="#c0392b")
    return fig


def task_model_figure():
    """Fig. 1 (survey Fig. 1): the task model, feature model + query model + attention model + output model."""
    fig, ax = _axes(10, 2.6, (0, 12.4), (0, 3), "Figure 1 (survey Fig. 1): the task model")
    draw_box(ax, (0.8, 1.5), "input\n$X$", w=1.1, color=_IO)
    draw_box(ax, (3.2, 2.2), "feature model", color=_FEAT)
    draw_box(ax, (3.2, 0.8), "query model", color=_QUERY)
    draw_box(ax, (6.6, 1.5), "attention model", w=1.9, h=0.9, color=_ATT)
    draw_box(ax, (9.6, 1.5), "output model", color=_OUT)
    draw_box(ax, (11.7, 1.5), "output\n$\\hat{y}$", w=1.0, color=_IO)
    draw_arrow(ax, (1.35, 1.7), (2.4, 2.15))
    draw_arrow(ax, (1.35, 1.3), (2.4, 0.85))
    draw_arrow(ax, (4.0, 2.2), (5.65, 1.75), "$F = [f_1, \\dots, f_{n_f}]$")
    draw_arrow(ax, (4.0, 0.8), (5.65, 1.25), "$q$")
    draw_arrow(ax, (7.55, 1.5), (8.8, 1.5), "$c$")
    draw_arrow(ax, (10.4, 1.5), (11.2, 1.5))
    return fig


def attention_module_figure():
    """Fig. 2 (survey Fig. 2): inside the general attention module, with the equation of each arrow."""
    fig, ax = _axes(10, 3.0, (0, 12.4), (0, 3.4), "Figure 2 (survey Fig. 2): inside the general attention module")
    draw_box(ax, (0.9, 2.6), "features $F$", w=1.4, color=_FEAT)
    draw_box(ax, (0.9, 0.7), "query $q$", w=1.4, color=_QUERY)
    draw_box(ax, (3.3, 2.9), "$K = W_K F$", w=1.5, color="#ffffff")
    draw_box(ax, (3.3, 1.9), "$V = W_V F$", w=1.5, color="#ffffff")
    draw_box(ax, (5.8, 1.6), "score\n$e_l = \\mathrm{score}(q, k_l)$", w=2.2, h=0.8, color=_ATT)
    draw_box(ax, (8.3, 1.6), "align\n$a_l = \\mathrm{align}(e_l; e)$", w=2.0, h=0.8, color=_ATT)
    draw_box(ax, (10.9, 1.9), "context\n$c = \\sum_l a_l v_l$", w=2.0, h=0.8, color=_OUT)
    draw_arrow(ax, (1.6, 2.7), (2.55, 2.9), "(1)")
    draw_arrow(ax, (1.6, 2.5), (2.55, 1.95), "(1)")
    draw_arrow(ax, (4.05, 2.85), (5.0, 1.95))
    draw_arrow(ax, (1.6, 0.75), (4.7, 1.35))
    draw_arrow(ax, (6.9, 1.6), (7.3, 1.6), "(2)")
    draw_arrow(ax, (9.3, 1.7), (9.9, 1.8), "(3)")
    draw_arrow(ax, (4.05, 1.9), (9.9, 2.1), rad=-0.35)
    ax.text(11.9, 1.25, "(4)", fontsize=8)
    return fig
