"""Drawings for survey §3.3.2 (multiplicity of queries): the survey's Figs. 9, 10 and 11.

Each function returns a ``matplotlib.figure.Figure`` (display it with
:func:`attnsurvey.plotting.show`). The drawings are ours; they show what the
survey's figures show, built with the book's ``draw_box``/``draw_arrow``
helpers. Where the package has the structure, the drawing reads it: the
number of heads, of hops and of capsules are arguments, and the capsule
figure names the modules' equations as :mod:`attnsurvey.query_related.capsule`
catalogues them.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch

from ..plotting import ATTENTION_FILL as _ATT
from ..plotting import FEATURE_FILL as _FEAT
from ..plotting import IO_FILL as _IO
from ..plotting import OUTPUT_FILL as _OUT
from ..plotting import QUERY_FILL as _QUERY
from ..plotting import diagram_axes as _axes
from ..plotting import draw_arrow, draw_box


def multi_head_figure(h: int = 3) -> Figure:
    """Fig. 9: multi-head attention with ``h`` heads, Eq. (38)-(40).

    The query q and the feature matrix F enter every head; head j projects
    them with its own W_q^(j), W_K^(j), W_V^(j) (Eq. 38), attends (Eq. 39) and
    returns c^(j); the head contexts are concatenated and mixed by W_O (Eq. 40).

    Args:
        h: the number of heads.

    Returns:
        The figure.

    Raises:
        ValueError: unless ``1 <= h <= 6``.
    """
    if not 1 <= h <= 6:
        raise ValueError(f"draw between 1 and 6 heads, got h={h}")
    width = max(3.2 * h, 7.0)
    # the head columns (boxes 2.6 wide) lie symmetrically in [0, width], inside the limits
    fig, ax = _axes(
        width, 5.2, (-0.2, width + 0.2), (-0.4, 5.4), f"Multi-head attention with d = {h} heads, Eq. (38)-(40)"
    )
    q_x, f_x = width * 0.3, width * 0.7
    draw_box(ax, (q_x, 0.1), "query $q$", w=1.6, h=0.45, color=_QUERY)
    draw_box(ax, (f_x, 0.1), "feature matrix $F$", w=2.2, h=0.45, color=_FEAT)
    xs = [1.45 + j * (width - 2.9) / (h - 1) for j in range(h)] if h > 1 else [width / 2]
    for j, x in enumerate(xs, 1):
        draw_box(
            ax, (x, 1.45), f"$W_q^{{({j})}} q$,  $W_K^{{({j})}} F$,  $W_V^{{({j})}} F$", w=2.6, h=0.5, color=_IO, fs=8
        )
        draw_arrow(ax, (q_x, 0.33), (x - 0.3, 1.2), color="#b9770e", lw=0.9)
        draw_arrow(ax, (f_x, 0.33), (x + 0.3, 1.2), color="#2e86c1", lw=0.9)
        draw_box(
            ax,
            (x, 2.6),
            f"attention module {j}\n$q^{{({j})}}, K^{{({j})}}, V^{{({j})}}$",
            w=2.4,
            h=0.7,
            color=_ATT,
            fs=8,
        )
        draw_arrow(ax, (x, 1.7), (x, 2.25))
        draw_box(ax, (x, 3.6), f"$c^{{({j})}}$", w=0.9, h=0.42, color=_OUT)
        draw_arrow(ax, (x, 2.95), (x, 3.39))
        draw_arrow(ax, (x, 3.81), (width / 2, 4.35), color="#555", lw=0.9)
    draw_box(
        ax,
        (width / 2, 4.6),
        "concat, then $W_O$:  $c = W_O\\,[c^{(1)}; \\dots; c^{(d)}]$",
        w=4.6,
        h=0.5,
        color=_OUT,
        fs=9,
    )
    return fig


def multi_hop_figure(n_hops: int = 3) -> Figure:
    """Fig. 10: multi-hop attention over ``n_hops`` steps, Eq. (41)-(42).

    Black arrows: the basic structure. Hop s transforms the query q^(s) into
    q^(s+1) (Eq. 41), scores the keys of F with the query [q^(s+1); c^(s)]
    (Eq. 42; the same F at every hop) and returns c^(s+1). Grey dashed arrows:
    the optional connections, the context c^(s) into the transform of hop s
    (as its query instead of q^(s), or with it: Eq. 41's second argument, as in
    LCR-Rot-hop).

    Args:
        n_hops: the number of hops.

    Returns:
        The figure.

    Raises:
        ValueError: unless ``1 <= n_hops <= 5``.
    """
    if not 1 <= n_hops <= 5:
        raise ValueError(f"draw between 1 and 5 hops, got n_hops={n_hops}")
    pitch = 3.2  # hop s: transform at X_s (top row), c^(s) below it (bottom row), attention to its right
    xs = [1.8 + pitch * s for s in range(n_hops)]
    width = xs[-1] + pitch + 0.6
    fig, ax = _axes(width, 4.4, (-0.1, width), (-0.7, 4.0), f"Multi-hop attention with {n_hops} hops, Eq. (41)-(42)")
    top, mid, bottom, feat = 3.2, 1.95, 0.8, -0.35
    centres = [x + 1.5 for x in xs]  # attention modules (and q^(s+1) above them)
    f_w = max(4.8, centres[-1] - centres[0] + 1.6)
    f_x = min((centres[0] + centres[-1]) / 2, width - f_w / 2 - 0.1)  # one hop: keep the wide box inside
    draw_box(
        ax,
        (f_x, feat),
        "feature matrix $F$ (keys and values, every hop)",
        w=f_w,
        h=0.42,
        color=_FEAT,
        fs=8,
    )
    draw_box(ax, (xs[0] - 1.3, top), "$q^{(0)}$", w=0.9, h=0.42, color=_QUERY)
    q_prev = xs[0] - 0.85  # right edge of the previous query box
    for s, x in enumerate(xs):
        a = centres[s]
        draw_box(ax, (x, bottom), f"$c^{{({s})}}$", w=0.8, h=0.42, color=_OUT)
        draw_box(ax, (x, top), "transform", w=1.3, h=0.45, color=_IO, fs=8)
        draw_arrow(ax, (q_prev, top), (x - 0.65, top))
        draw_box(ax, (a, top), f"$q^{{({s + 1})}}$", w=0.8, h=0.42, color=_QUERY)
        draw_arrow(ax, (x + 0.65, top), (a - 0.4, top))
        draw_box(
            ax, (a, mid), f"attention module\nquery $[q^{{({s + 1})}}; c^{{({s})}}]$", w=2.0, h=0.65, color=_ATT, fs=8
        )
        draw_arrow(ax, (a, top - 0.21), (a, mid + 0.325))
        draw_arrow(ax, (x + 0.4, bottom + 0.1), (a - 0.6, mid - 0.325))
        draw_arrow(ax, (a, feat + 0.21), (a, mid - 0.325), color="#2e86c1", lw=0.8)
        draw_arrow(ax, (a + 0.6, mid - 0.325), (x + pitch - 0.4, bottom + 0.1))
        # the optional connection: c^(s) into the transform of hop s
        ax.add_patch(
            FancyArrowPatch(
                (x, bottom + 0.21),
                (x, top - 0.225),
                arrowstyle="-|>",
                mutation_scale=10,
                color="#999999",
                lw=1.1,
                linestyle="--",
            )
        )
        ax.text(x - 0.08, mid, "optional", ha="right", va="center", fontsize=7, color="#777777", style="italic")
        q_prev = a + 0.4
    draw_box(ax, (xs[-1] + pitch, bottom), f"$c^{{({n_hops})}}$", w=0.8, h=0.42, color=_OUT)
    return fig


def capsule_figure(d_y: int = 2, class_names: tuple[str, ...] | None = None) -> Figure:
    """Fig. 11: capsule-based attention with one capsule per class, Eq. (43)-(45).

    Every capsule reads the same feature vectors with its own learned query
    q_c (attention module, Eq. 43 + softmax + weighted average), turns its
    context c_c into a probability p_c (probability module, Eq. 44) and scales
    c_c by it (reconstruction module, Eq. 45).

    Args:
        d_y: the number of capsules (classes).
        class_names: the classes' names (None: generic names).

    Returns:
        The figure.

    Raises:
        ValueError: unless ``1 <= d_y <= 4`` and the names (if given) number ``d_y``.
    """
    if not 1 <= d_y <= 4:
        raise ValueError(f"draw between 1 and 4 capsules, got d_y={d_y}")
    names = tuple(class_names) if class_names is not None else tuple(f"class {c + 1}" for c in range(d_y))
    if len(names) != d_y:
        raise ValueError(f"{len(names)} class names for d_y={d_y} capsules")
    height = 1.2 + 1.5 * d_y
    fig, ax = _axes(
        10.0, height, (-0.3, 10.3), (-0.2, height), f"Capsule-based attention with d_y = {d_y} capsules, Eq. (43)-(45)"
    )
    draw_box(ax, (0.8, height / 2 - 0.2), "features\n$f_1, \\dots, f_{n_f}$", w=1.5, h=0.8, color=_FEAT, fs=8)
    for c, name in enumerate(names):
        y = height - 1.0 - 1.5 * c
        ax.text(2.05, y + 0.55, f"capsule {c + 1}: {name}", fontsize=8, color="#555")
        draw_arrow(ax, (1.55, height / 2 - 0.2), (2.1, y), lw=0.9)
        draw_box(
            ax, (3.2, y), "attention module\n$e_{c,l} = q_c^T k_l$, softmax, $c_c$", w=2.3, h=0.7, color=_ATT, fs=8
        )
        draw_box(ax, (5.9, y), "probability module\n$p_c = \\sigma(w_c^T c_c + b_c)$", w=2.3, h=0.7, color=_QUERY, fs=8)
        draw_box(ax, (8.6, y), "reconstruction module\n$r_c = p_c\\, c_c$", w=2.3, h=0.7, color=_OUT, fs=8)
        draw_arrow(ax, (4.35, y), (4.75, y), text="$c_c$")
        draw_arrow(ax, (7.05, y), (7.45, y), text="$p_c$")
        draw_arrow(ax, (4.2, y - 0.35), (7.6, y - 0.35), color="#aaaaaa", rad=0.25)
    return fig
