"""Drawings for survey §1-§3.1: the encoder-decoder of Chapter 1 and the survey's Figs. 1-8.

Each function returns a ``matplotlib.figure.Figure`` (display it with
:func:`attnsurvey.plotting.show`). The drawings are ours; they show what the
survey's figures show, built with the same ``draw_box``/``draw_arrow`` helpers
as every diagram of the book. Where a figure depicts a structure of the package
(Fig. 3, the taxonomy), it is drawn from that structure.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..plotting import ATTENTION_FILL as _ATT
from ..plotting import FEATURE_FILL as _FEAT
from ..plotting import IO_FILL as _IO
from ..plotting import OUTPUT_FILL as _OUT
from ..plotting import QUERY_FILL as _QUERY
from ..plotting import diagram_axes as _axes
from ..plotting import draw_arrow, draw_box

_Point = tuple[float, float]


def encoder_decoder_figure(n: int = 5, steps: int = 3) -> Figure:
    """Chapter 1: an encoder-decoder without attention (one fixed vector) and with attention.

    The right panel draws, for output step ``t``, lines to every encoder state
    with a width that follows an illustrative reversal alignment (step ``t``
    leans on source position ``n + 1 - t``).

    Args:
        n: the number of encoder states.
        steps: the number of output steps drawn.

    Returns:
        The figure.
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
                    draw_arrow(
                        ax,
                        (pos + 0.2, 1.55),
                        (x - 0.1, 2.38),
                        color="#c0392b",
                        lw=0.4 + 3 * wts[pos],
                        alpha=0.3 + 0.7 * wts[pos],
                    )
        if not attend_all:
            draw_box(ax, (5.35, 1.3), "$c = h_{n_x}$", w=1.25, h=0.5, color=_ATT)
            draw_arrow(ax, (4.3, 1.3), (4.7, 1.3))
            for t in range(steps):
                draw_arrow(ax, (5.5, 1.55), (6.3 + 1.3 * t, 2.38), color="#c0392b")
    return fig


def task_model_figure() -> Figure:
    """Fig. 1 (survey Fig. 1): the task model, feature model + query model + attention model + output model.

    Returns:
        The figure.
    """
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


def attention_module_figure() -> Figure:
    """Fig. 2 (survey Fig. 2): inside the general attention module, with the equation of each arrow.

    Returns:
        The figure.
    """
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


def _module(ax: Axes, xy: tuple[float, float], name: str, w: float = 1.9, h: float = 0.7) -> None:
    draw_box(ax, xy, name, w=w, h=h, color=_ATT)


def _co_attention_axes(k: int, name: str, set1: str, set2: str) -> tuple[Figure, Axes]:
    """The frame of the co-attention figures (Figs. 4-6): titled axes, the two input sets on the left."""
    fig, ax = _axes(10, 3.2, (0, 12.4), (0, 3.6), f"Figure {k} (survey Fig. {k}): {name}")
    draw_box(ax, (1.0, 2.8), set1, w=1.0, color=_FEAT)
    draw_box(ax, (1.0, 0.8), set2, w=1.0, color=_FEAT)
    return fig, ax


def _branch_arrows(
    ax: Axes,
    feed: tuple[_Point, _Point],
    out: tuple[_Point, _Point],
    texts: tuple[str, str],
    bypass_y: float,
    rad: float,
    bypass_texts: tuple[str | None, str | None] = (None, None),
) -> None:
    """The arrows of Figs. 5 and 6, where the two sets are treated alike.

    Each is drawn for set 1 and mirrored for set 2 in the line ``y = 1.8``
    between the sets (a curve bends the other way): ``feed`` takes set 1 into
    the middle stage (the mean key, the affinity matrix), ``out`` leads from
    that stage to a module, labelled ``texts[0]`` (its mirror ``texts[1]``),
    and a curve with bend ``rad`` along ``y = bypass_y`` takes set 1 from
    ``x = 1.5`` straight to its module (which starts where ``out`` ends),
    labelled ``bypass_texts[0]`` (its mirror ``bypass_texts[1]``).
    """
    bypass = (1.5, bypass_y), (out[1][0], bypass_y)
    no_text = None, None
    for (a, b), (first, second), bend in ((feed, no_text, 0.0), (out, texts, 0.0), (bypass, bypass_texts, rad)):
        draw_arrow(ax, a, b, first, rad=bend)
        draw_arrow(ax, _mirror(a), _mirror(b), second, rad=-bend)


def _mirror(p: _Point) -> _Point:
    """``p`` reflected in ``y = 1.8``, rounded so that the image of ``2.8`` is ``0.8`` exactly."""
    return p[0], round(3.6 - p[1], 6)


def _concat_output(ax: Axes, x: float, c1_from: _Point, c2_from: _Point) -> None:
    """The output model centred at ``x``, fed by the arrows of c^(1) (from ``c1_from``) and c^(2) (from ``c2_from``)."""
    draw_box(ax, (x, 1.8), "output model\n$[c^{(1)}; c^{(2)}]$", w=1.8, h=0.8, color=_OUT)
    draw_arrow(ax, c1_from, (x - 0.9, 2.0), "$c^{(1)}$")
    draw_arrow(ax, c2_from, (x - 0.9, 1.6), "$c^{(2)}$")


def alternating_co_attention_figure() -> Figure:
    """Fig. 4 (survey Fig. 4): alternating co-attention, Eq. (7)-(9).

    Module [1] attends to F^(1) with no query (Eq. 7) and gives c^(0); c^(0)
    queries F^(2) in module [2] (Eq. 8) and gives c^(2); c^(2) queries F^(1)
    again in module [3] (Eq. 9) and gives c^(1). The output is [c^(1); c^(2)].

    Returns:
        The figure.
    """
    fig, ax = _co_attention_axes(4, "alternating co-attention", "$F^{(1)}$", "$F^{(2)}$")
    _module(ax, (3.4, 2.8), "module [1]\nno query, Eq. (7)")
    _module(ax, (6.2, 0.8), "module [2]\nEq. (8)")
    _module(ax, (8.8, 2.8), "module [3]\nEq. (9)")
    draw_arrow(ax, (1.5, 2.8), (2.45, 2.8))
    draw_arrow(ax, (4.35, 2.6), (5.3, 1.0), "$c^{(0)}$ as query")
    draw_arrow(ax, (1.5, 0.8), (5.25, 0.8))
    draw_arrow(ax, (7.15, 1.0), (7.9, 2.6), "$c^{(2)}$ as query")
    draw_arrow(ax, (1.5, 3.0), (7.85, 3.0), rad=-0.15)
    _concat_output(ax, 11.3, (9.75, 2.8), (7.15, 0.8))
    return fig


def interactive_co_attention_figure() -> Figure:
    """Fig. 5 (survey Fig. 5): interactive co-attention, Eq. (10)-(11).

    The mean key of each set (Eq. 10) queries the *other* set (Eq. 11); both
    modules run in parallel, and the two contexts are concatenated.

    Returns:
        The figure.
    """
    fig, ax = _co_attention_axes(5, "interactive co-attention", "$F^{(1)}$", "$F^{(2)}$")
    draw_box(ax, (3.5, 2.8), "mean key $\\bar{k}^{(1)}$\nEq. (10)", w=1.9, h=0.7, color="#ffffff")
    draw_box(ax, (3.5, 0.8), "mean key $\\bar{k}^{(2)}$\nEq. (10)", w=1.9, h=0.7, color="#ffffff")
    _module(ax, (7.2, 2.8), "module [1]\nEq. (11), keys $K^{(1)}$")
    _module(ax, (7.2, 0.8), "module [2]\nEq. (11), keys $K^{(2)}$")
    _branch_arrows(ax, ((1.5, 2.8), (2.55, 2.8)), ((4.45, 2.6), (6.25, 1.0)), ("query", ""), 3.05, -0.2)
    _concat_output(ax, 11.0, (8.15, 2.8), (8.15, 0.8))
    return fig


def parallel_co_attention_figure() -> Figure:
    """Fig. 6 (survey Fig. 6): parallel co-attention, Eq. (12), (14)-(15).

    The keys of both sets meet in the affinity matrix A (Eq. 12). What reaches
    the scores of set 1 from set 2 is not A alone but set 2's projected keys
    mixed by it, W_2 K^(2) A^T (Eq. 14), added to set 1's own projected keys
    W_1 K^(1); set 2's scores mirror this with W_1 K^(1) A (Eq. 15). Both score
    vectors are computed at the same time.

    Returns:
        The figure.
    """
    fig, ax = _co_attention_axes(6, "parallel co-attention", "$K^{(1)}$", "$K^{(2)}$")
    draw_box(
        ax, (3.8, 1.8), "affinity $A$, Eq. (12);\nmixes the other\nset's projected keys", w=2.2, h=1.0, color="#ffffff"
    )
    _module(ax, (7.7, 2.8), "scores $e^{(1)}$, Eq. (14)\nweights, $c^{(1)}$", w=2.4)
    _module(ax, (7.7, 0.8), "scores $e^{(2)}$, Eq. (15)\nweights, $c^{(2)}$", w=2.4)
    _branch_arrows(
        ax,
        ((1.5, 2.6), (2.7, 2.1)),
        ((4.9, 2.1), (6.5, 2.6)),
        ("$W_2K^{(2)}A^T$", "$W_1K^{(1)}A$"),
        3.0,
        -0.15,
        ("$W_1K^{(1)}$", "$W_2K^{(2)}$"),
    )
    _concat_output(ax, 11.3, (8.9, 2.8), (8.9, 0.8))
    return fig


def attention_via_attention_figure() -> Figure:
    """Fig. 7 (survey Fig. 7): attention-via-attention over words and characters.

    The character-level query q^(c) attends to the word-level features F^(w)
    and gives c^(w); the query concatenated with c^(w) then attends to the
    character-level features F^(c) and gives c^(c); the output is [c^(w); c^(c)].

    Returns:
        The figure.
    """
    fig, ax = _axes(10, 3.2, (0, 12.4), (0, 3.6), "Figure 7 (survey Fig. 7): attention-via-attention")
    draw_box(ax, (1.0, 3.0), "query $q^{(c)}$", w=1.4, color=_QUERY)
    draw_box(ax, (1.0, 1.8), "$F^{(w)}$ (words)", w=1.6, color=_FEAT)
    draw_box(ax, (1.0, 0.6), "$F^{(c)}$ (characters)", w=1.9, color=_FEAT)
    _module(ax, (4.4, 2.4), "word-level module")
    draw_box(ax, (6.9, 2.4), "$[q^{(c)}; c^{(w)}]$", w=1.5, color=_QUERY)
    _module(ax, (9.0, 1.0), "character-level\nmodule")
    draw_box(ax, (11.4, 2.4), "$[c^{(w)}; c^{(c)}]$", w=1.5, color=_OUT)
    draw_arrow(ax, (1.7, 3.0), (3.45, 2.6), "query")
    draw_arrow(ax, (1.8, 1.8), (3.45, 2.2))
    draw_arrow(ax, (5.35, 2.4), (6.15, 2.4), "$c^{(w)}$")
    draw_arrow(ax, (1.7, 3.2), (6.15, 2.6), rad=-0.2)
    draw_arrow(ax, (7.2, 2.1), (8.4, 1.35), "query")
    draw_arrow(ax, (1.95, 0.6), (8.05, 0.9))
    draw_arrow(ax, (9.95, 1.2), (11.1, 2.1), "$c^{(c)}$")
    draw_arrow(ax, (5.35, 2.7), (10.65, 2.6), rad=-0.25)
    return fig


def hierarchical_attention_figure(n_sentences: int = 3) -> Figure:
    """Fig. 8 (survey Fig. 8): hierarchical attention, words -> sentences -> document.

    Each sentence's word features F^(s) go through the sentence-level module
    (no query: self-attention) and give c^(s); the matrix C = [c^(1), ...,
    c^(n_S)] goes through the document-level module and gives c^(D).

    Args:
        n_sentences: the number of sentences drawn.

    Returns:
        The figure.
    """
    fig, ax = _axes(10, 3.4, (0, 12.4), (0, 3.8), "Figure 8 (survey Fig. 8): hierarchical attention")
    ys = [3.1 - 1.2 * s for s in range(n_sentences)]
    for s, y in enumerate(ys):
        label = f"$F^{{({s + 1})}}$" if s < n_sentences - 1 else "$F^{(n_S)}$"
        ctx = f"$c^{{({s + 1})}}$" if s < n_sentences - 1 else "$c^{(n_S)}$"
        draw_box(ax, (1.0, y), label + " words", w=1.6, color=_FEAT)
        _module(ax, (4.0, y), "module [S]", w=1.6, h=0.6)
        draw_arrow(ax, (1.8, y), (3.2, y))
        draw_arrow(ax, (4.8, y), (6.3, 1.9 + 0.25 * (1 - s)), ctx)
    draw_box(ax, (7.1, 1.9), "$C = [c^{(1)}, \\dots, c^{(n_S)}]$", w=1.9, h=0.7, color="#ffffff")
    _module(ax, (9.4, 1.9), "module [D]", w=1.6, h=0.6)
    draw_box(ax, (11.5, 1.9), "$c^{(D)}$\ndocument", w=1.2, h=0.7, color=_OUT)
    draw_arrow(ax, (8.05, 1.9), (8.6, 1.9))
    draw_arrow(ax, (10.2, 1.9), (10.9, 1.9))
    return fig
