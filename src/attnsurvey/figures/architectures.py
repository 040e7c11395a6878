"""Architecture diagrams and the complexity table (book/architectures.ipynb).

The diagrams are drawn from the package, so they cannot drift from it:

* :func:`layer_blocks` reads the sub-layers of an ``EncoderLayer`` or
  ``DecoderLayer`` instance (its attention and feed-forward children, in
  registration order, and ``norm_first``) and lists the blocks a token passes
  through; :func:`transformer_layer_figure` draws them with the residual paths.
* :func:`encoder_decoder_figure` names its boxes after the children of a
  ``Seq2Seq`` instance with attention.
* Each Transformer variant (:data:`VARIANTS`) is a list of rows, bottom to top:
  a :class:`Step` (one box) or :class:`Branches` (boxes side by side, computed
  in parallel or as alternatives). Each box names the package function or class
  that implements it (``implemented_by``); the tests resolve every name, so a
  renamed or removed function breaks them.

:func:`diagram_edges` and :func:`layout_problems` read a drawn diagram back (which
box each arrow joins; texts that overflow their box or cross an arrow, boxes cut
off by the axes), so the tests can check what a figure shows.

:data:`COMPLEXITY` is the analytic cost of every mechanism for one head of
self-attention over ``n`` positions of width ``d`` (``w`` window half-width,
``k`` Linformer's projected length, ``m`` LSH chunk size, ``n_m`` Transformer-XL
memory length; the symbols of the Transformer-variants chapter); ``n_exponent`` is how the counted multiply-adds of the
implementation grow with ``n`` at fixed ``d, w, k, m, n_m`` (checked by the tests
with ``torch.utils.flop_counter``).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, NullFormatter
from torch import nn

from attnsurvey.display_table import Table, table
from attnsurvey.plotting import draw_arrow, draw_box

ATTENTION_COLOR = "#f6d5a8"
FFN_COLOR = "#cfe8cf"
NORM_COLOR = "#e6e6e6"
IO_COLOR = "#dbe9f6"

_SUBLAYER_LABELS = {
    "self_attn": "Multi-head self-attention",
    "cross_attn": "Multi-head cross-attention\n(K, V from the encoder)",
    "ffn": "Position-wise feed-forward",
}


@dataclass(frozen=True)
class Step:
    """One box of a variant's diagram and the package object that implements it.

    Attributes:
        label: the box's text.
        implemented_by: the dotted path below ``attnsurvey`` of the implementation.
        color: the box's fill colour.
        from_below: False: no arrow from the row below (the box reads none of its output).
    """

    label: str
    implemented_by: str  # dotted path below ``attnsurvey``
    color: str = ATTENTION_COLOR
    from_below: bool = True  # False: no arrow from the row below (the box reads none of its output)


@dataclass(frozen=True)
class Branches:
    """Boxes drawn side by side in one row: parallel branches, or alternatives.

    Attributes:
        steps: the boxes, left to right.
        join: the word drawn between the boxes (``"or"`` for alternatives; empty for
            branches computed in parallel, whose arrows fan out from the row below and
            into the row above).
    """

    steps: tuple[Step, ...]
    join: str = ""


def resolve(path: str) -> object:
    """The package object named by a dotted path below ``attnsurvey``.

    Args:
        path: the dotted path, e.g. ``"transformer.local.local_window_attention"``.

    Returns:
        The object.

    Raises:
        ImportError: if a module on the path does not exist.
        AttributeError: if the last name does not exist.
    """
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"attnsurvey.{module}"), name)


def layer_blocks(layer: nn.Module) -> list[tuple[str, str]]:
    """The blocks of a Transformer layer, bottom to top, as ``(label, kind)``.

    Reads the layer's attention and feed-forward children in registration order
    and its ``norm_first`` flag (post-norm: sub-layer, then Add & LayerNorm;
    pre-norm: LayerNorm, sub-layer, Add).

    Args:
        layer: an encoder or decoder layer.

    Returns:
        The blocks; kind is ``"attention"``, ``"ffn"``, ``"norm"`` or ``"add"``.

    Raises:
        TypeError: if the layer has no such children or not one LayerNorm per sub-layer.
    """
    children = dict(layer.named_children())
    sublayers = [name for name in children if name in _SUBLAYER_LABELS]
    norms = [name for name, m in children.items() if isinstance(m, nn.LayerNorm)]
    if not sublayers or len(norms) != len(sublayers) or not hasattr(layer, "norm_first"):
        raise TypeError(
            f"{type(layer).__name__} is not a Transformer layer: need attention/ffn children "
            f"({sorted(_SUBLAYER_LABELS)}), one LayerNorm each and norm_first; got {list(children)}"
        )
    causal = "cross_attn" in children
    blocks: list[tuple[str, str]] = []
    for name in sublayers:
        label = _SUBLAYER_LABELS[name]
        if name == "self_attn" and causal:
            label = "Masked (causal) multi-head\nself-attention"
        kind = "ffn" if name == "ffn" else "attention"
        if layer.norm_first:
            blocks += [("LayerNorm", "norm"), (label, kind), ("Add (residual)", "add")]
        else:
            blocks += [(label, kind), ("Add & LayerNorm", "add")]
    return blocks


_KIND_COLOR = {"attention": ATTENTION_COLOR, "ffn": FFN_COLOR, "norm": NORM_COLOR, "add": NORM_COLOR}


def _column(
    ax: Axes,
    labels: list[str],
    colors: list[str],
    x: float,
    y0: float = 0.0,
    dy: float = 1.0,
    w: float = 2.6,
    h: float = 0.62,
) -> list[tuple[float, float]]:
    """Boxes bottom to top joined by arrows; returns their centres."""
    centres = [(x, y0 + i * dy) for i in range(len(labels))]
    for (cx, cy), label, color in zip(centres, labels, colors):
        draw_box(ax, (cx, cy), label, w=w, h=h, color=color, fs=8)
    for (ax_, ay), (bx, by) in zip(centres, centres[1:]):
        draw_arrow(ax, (ax_, ay + h / 2), (bx, by - h / 2))
    return centres


def _finish(fig: Figure, ax: Axes, title: str) -> Figure:
    ax.set_title(title, fontsize=10)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.autoscale_view()
    return fig


def transformer_layer_figure(layer: nn.Module, title: str | None = None) -> Figure:
    """Draw one encoder or decoder layer with its residual connections (see :func:`layer_blocks`).

    Args:
        layer: the layer to draw.
        title: the figure's title (None: none).

    Returns:
        The figure.

    Raises:
        TypeError: as :func:`layer_blocks`.
    """
    blocks = layer_blocks(layer)
    labels = ["input X (n x d_model)"] + [b[0] for b in blocks] + ["output (n x d_model)"]
    colors = [IO_COLOR] + [_KIND_COLOR[b[1]] for b in blocks] + [IO_COLOR]
    # The height grows with the column (0.82 in per box): the drawing's scale, and so the room the
    # 8-point labels have in their boxes, is then the same for a 6-box layer and an 11-box one.
    fig, ax = plt.subplots(figsize=(3.6, 0.82 * len(labels) + 0.25))
    centres = _column(ax, labels, colors, x=0.0)
    # residual path: from the input of each sub-layer group to its Add box
    start = 0
    for i, (_, kind) in enumerate(blocks, start=1):
        if kind == "add":
            (sx, sy), (ex, ey) = centres[start], centres[i]
            draw_arrow(ax, (sx + 1.3, sy + 0.1), (ex + 1.3, ey), color="#7a7a7a", rad=-0.35)
            start = i
    name = type(layer).__name__
    norm = "pre-norm" if layer.norm_first else "post-norm"
    return _finish(fig, ax, title or f"{name} ({norm})")


def encoder_decoder_figure(model: nn.Module | None = None) -> Figure:
    """Draw the RNN encoder-decoder with additive attention (a ``Seq2Seq`` with ``attention=True``).

    One decoder step of :func:`attnsurvey.seq2seq.decoder_step`: the previous state
    s_{t-1} is the query of the attention over the encoder states h_l (Eq. 2-4),
    ``s_t = cell([y_{t-1}; c_t], s_{t-1})`` and ``y_t`` is read out from
    ``[s_t; c_t]``. The encoder is drawn bidirectional when the model's is. The
    boxes carry the class names of the model's children.

    Args:
        model: the model to draw (None: a small ``Seq2Seq(vocab_size=8, attention=True)``).

    Returns:
        The figure.

    Raises:
        TypeError: for a model without attention.
    """
    from attnsurvey.seq2seq import Seq2Seq

    model = model if model is not None else Seq2Seq(vocab_size=8, attention=True)
    children = dict(model.named_children())
    if children.get("attention") is None:
        raise TypeError("encoder_decoder_figure needs a Seq2Seq built with attention=True")
    encoder, attention = children["encoder"], children["attention"]
    bidirectional = bool(getattr(encoder, "bidirectional", False))
    fig, ax = plt.subplots(figsize=(8.0, 5.0))
    # encoder: x_l -> h_l, forward (and backward) recurrences between neighbours
    enc = [(-3.0 + 1.5 * i, 0.0) for i in range(3)]
    for i, (x, y) in enumerate(enc, start=1):
        draw_box(ax, (x, -1.2), f"$x_{i}$", w=0.7, h=0.45, color=IO_COLOR, fs=9)
        draw_box(ax, (x, y), f"$h_{i}$", w=0.8, h=0.5, color=FFN_COLOR, fs=9)
        draw_arrow(ax, (x, -0.97), (x, -0.25))
    for (a, _), (b, _) in zip(enc, enc[1:]):
        draw_arrow(ax, (a + 0.4, 0.1), (b - 0.4, 0.1))
        if bidirectional:
            draw_arrow(ax, (b - 0.4, -0.1), (a + 0.4, -0.1))
    direction = (
        "bidirectional: $h_l = [\\overrightarrow{h}_l;\\ \\overleftarrow{h}_l]$" if bidirectional else "one direction"
    )
    ax.text(-1.5, -1.75, f"encoder: {type(encoder).__name__}, {direction}", ha="center", va="top", fontsize=8)
    # attention: query s_{t-1}, keys and values H
    att = (-1.4, 1.75)
    score = getattr(attention, "score", None)
    score_name = type(score).__name__ if isinstance(score, nn.Module) else "score"
    draw_box(
        ax,
        att,
        f"attention ({type(attention).__name__})\n{score_name} of $s_{{t-1}}$ with each $h_l$,\n"
        "softmax over $l$:  $c_t = \\Sigma_l\\, a_{t,l}\\, h_l$",
        w=3.9,
        h=0.95,
        color=ATTENTION_COLOR,
        fs=8,
    )
    for x, _ in enc:
        draw_arrow(ax, (x, 0.25), (att[0] + 0.45 * (x - att[0]), att[1] - 0.475))
    ctx = (1.35, 1.75)
    draw_box(ax, ctx, "context $c_t$", w=1.2, h=0.5, color=ATTENTION_COLOR, fs=8)
    draw_arrow(ax, (att[0] + 1.95, att[1]), (ctx[0] - 0.6, ctx[1]))
    prev = (3.3, 0.0)
    draw_box(ax, prev, "$s_{t-1}$\n(previous state)", w=1.8, h=0.6, color=FFN_COLOR, fs=8)
    draw_arrow(ax, (prev[0] - 0.9, prev[1] + 0.1), (att[0] + 1.5, att[1] - 0.475))
    ax.text(1.2, 0.35, "query $s_{t-1}$", ha="center", va="top", fontsize=8, color="#333")
    y_prev = (5.3, 1.75)
    draw_box(ax, y_prev, "$y_{t-1}$\n(previous output)", w=1.9, h=0.6, color=IO_COLOR, fs=8)
    # decoder step and readout
    cell = (3.3, 3.2)
    draw_box(
        ax,
        cell,
        f"decoder cell ({type(children['cell']).__name__})\n$s_t = \\mathrm{{cell}}([y_{{t-1}};\\ c_t],\\ s_{{t-1}})$",
        w=3.0,
        h=0.7,
        color=FFN_COLOR,
        fs=8,
    )
    draw_arrow(ax, (ctx[0] + 0.3, ctx[1] + 0.25), (cell[0] - 1.0, cell[1] - 0.35))
    draw_arrow(ax, (prev[0], prev[1] + 0.3), (cell[0], cell[1] - 0.35))
    draw_arrow(ax, (y_prev[0] - 0.4, y_prev[1] + 0.3), (cell[0] + 1.0, cell[1] - 0.35))
    out = (2.6, 4.6)
    draw_box(
        ax,
        out,
        f"readout ({type(children['readout']).__name__})\n$y_t$ from $W_o\\, [s_t;\\ c_t] + b_o$",
        w=3.0,
        h=0.7,
        color=IO_COLOR,
        fs=8,
    )
    draw_arrow(ax, (cell[0], cell[1] + 0.35), (cell[0], out[1] - 0.35))
    ax.text(cell[0] + 0.1, (cell[1] + out[1]) / 2, "$s_t$", va="center", fontsize=8, color="#333")
    draw_arrow(ax, (ctx[0] - 0.3, ctx[1] + 0.25), (ctx[0] - 0.3, out[1] - 0.35))
    ax.text(ctx[0] - 0.4, (cell[1] + out[1]) / 2, "$c_t$", ha="right", va="center", fontsize=8, color="#333")
    return _finish(fig, ax, "Encoder-decoder with attention (Seq2Seq), one decoder step t")


#: The attention step of each Transformer variant, bottom to top: one box per
#: :class:`Step`, side by side for :class:`Branches`.
VARIANTS: dict[str, list[Step | Branches]] = {
    "Transformer-XL": [
        Step(
            "segment X, cached memory M\n(no gradient into M)",
            "transformer.transformer_xl.TransformerXLAttention",
            IO_COLOR,
        ),
        Step("Q from X; K, V from [M; X]", "transformer.transformer_xl.xl_attention"),
        Step("relative scores (a)+(b)+(c)+(d)\nwith u, v and W_R", "transformer.transformer_xl.xl_attention"),
        Step("relative shift of BD", "transformer.transformer_xl.rel_shift"),
        Step("causal mask over\nmemory + segment", "transformer.transformer_xl.xl_causal_mask", NORM_COLOR),
        Step("softmax, weighted sum of V", "transformer.transformer_xl.xl_attention"),
    ],
    "Reformer": [
        Step("shared QK and V", "transformer.reformer.shared_qk_attention", IO_COLOR),
        Step("LSH: random rotations -> buckets", "transformer.reformer.lsh_hash"),
        Step("sort by bucket, split in chunks", "transformer.reformer.lsh_attention"),
        Step("attend within the chunk\nand the previous one", "transformer.reformer.lsh_attention"),
        Step(
            "reversible residual layers\n(activations recomputed)", "transformer.reformer.ReversibleSequence", FFN_COLOR
        ),
    ],
    "Linformer": [
        Step("Q, K, V (n x d)", "transformer.linformer.LinformerSelfAttention", IO_COLOR),
        Step("project length: E K, F V (k x d)", "transformer.linformer.linformer_attention"),
        Step("scores Q (E K)^T / sqrt(d) (n x k)", "transformer.linformer.linformer_attention"),
        Step("softmax over k, times F V", "transformer.linformer.linformer_attention"),
    ],
    "Local attention": [
        Step("Q, K, V (n x d)", "transformer.local.local_window_attention", IO_COLOR),
        Step("band of 2w+1 keys per query", "transformer.local.local_window_mask", NORM_COLOR),
        Step("scores and softmax in the band\n(n x (2w+1))", "transformer.local.local_window_attention"),
        Step("weighted sum of the band's V", "transformer.local.local_window_attention"),
    ],
    "Lite Transformer": [
        Step("X (n x d)", "transformer.lite.LiteTransformerBlock", IO_COLOR),
        Step("split channels in half", "transformer.lite.long_short_range_attention", NORM_COLOR),
        Branches(
            (
                Step("left half:\nself-attention\n(global context)", "transformer.lite.long_short_range_attention"),
                Step("right half:\ndepthwise conv.\n(local context)", "transformer.lite.depthwise_conv", FFN_COLOR),
            )
        ),
        Step("concatenate halves", "transformer.lite.long_short_range_attention", NORM_COLOR),
    ],
    "Synthesizer": [
        Step("X (n x d)", "transformer.synthesizer.DenseSynthesizer", IO_COLOR),
        Branches(
            (
                Step(
                    "dense: B from\nan MLP of each\ntoken alone",
                    "transformer.synthesizer.dense_synthesizer_weights",
                ),
                Step(
                    "random: B\nlearned, not\nfrom the input",
                    "transformer.synthesizer.random_synthesizer_weights",
                    from_below=False,
                ),
            ),
            join="or",
        ),
        Step("softmax of B (n x n), times V\n(no query-key dot product)", "transformer.synthesizer.RandomSynthesizer"),
    ],
}


def _variant_column(ax: Axes, rows: list[Step | Branches], w: float = 3.2, h: float = 0.72, dy: float = 1.05) -> None:
    """Draw a variant's rows bottom to top, centred on x = 0: a Step as one box, Branches side by side.

    Every box of a row gets an arrow from every box of the row below, except a
    Step with ``from_below=False``; a Branches row's ``join`` is written between its boxes.
    """
    gap = 0.3
    below: list[tuple[float, float]] = []  # box centres of the previous row
    for i, row in enumerate(rows):
        y = i * dy
        steps = row.steps if isinstance(row, Branches) else (row,)
        bw = (w - gap * (len(steps) - 1)) / len(steps)
        xs = [-w / 2 + bw / 2 + j * (bw + gap) for j in range(len(steps))]
        for x, step in zip(xs, steps):
            draw_box(ax, (x, y), step.label, w=bw, h=h, color=step.color, fs=8)
            if step.from_below:
                for bx, by in below:
                    draw_arrow(ax, (bx + 0.25 * (x - bx), by + h / 2), (x - 0.25 * (x - bx), y - h / 2))
        if isinstance(row, Branches) and row.join:
            for left, right in zip(xs, xs[1:]):
                ax.text((left + right) / 2, y, row.join, ha="center", va="center", fontsize=8, style="italic")
        below = [(x, y) for x in xs]


def variant_figure(name: str) -> Figure:
    """Draw the attention step of one Transformer variant (a key of :data:`VARIANTS`).

    Args:
        name: the variant.

    Returns:
        The figure.

    Raises:
        ValueError: for an unknown name.
    """
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {sorted(VARIANTS)}")
    rows = VARIANTS[name]
    fig, ax = plt.subplots(figsize=(3.6, 0.8 * len(rows) + 0.6))
    _variant_column(ax, rows)
    return _finish(fig, ax, name)


def variants_figure() -> Figure:
    """All variants side by side (one column each, rows bottom to top as in :func:`variant_figure`).

    Returns:
        The figure.
    """
    fig, axes = plt.subplots(1, len(VARIANTS), figsize=(3.3 * len(VARIANTS), 6.0))
    fig.subplots_adjust(left=0.01, right=0.99, wspace=0.05)
    tallest = max(len(rows) for rows in VARIANTS.values())
    for ax, (name, rows) in zip(axes, VARIANTS.items()):
        _variant_column(ax, rows)
        _finish(fig, ax, name)
        ax.set_xlim(-1.8, 1.8)
        ax.set_ylim(-0.6, 1.05 * (tallest - 1) + 0.6)
    return fig


@dataclass(frozen=True)
class Cost:
    """Analytic cost of one mechanism (one head of self-attention over n positions of width d).

    Attributes:
        mechanism: the mechanism's name.
        time: its time cost, in O-notation.
        memory: its memory cost, in O-notation.
        implemented_by: the dotted path below ``attnsurvey`` of the implementation.
        n_exponent: growth of the multiply-adds with n at fixed d and other sizes.
    """

    mechanism: str
    time: str
    memory: str
    implemented_by: str
    n_exponent: float  # growth of the multiply-adds with n at fixed d and other sizes


COMPLEXITY: list[Cost] = [
    Cost("Scaled dot-product (full)", "O(n^2 d)", "O(n^2)", "general_mechanisms.scoring.scaled_dot_score", 2),
    Cost(
        "Additive score (Table II)",
        "O(n^2 d_w + n d d_w)",
        "O(n^2 d_w)",
        "general_mechanisms.scoring.additive_score",
        2,
    ),
    Cost(
        "Multi-dimensional (Eq. 30-32)",
        "O(n^2 d d_w)",
        "O(n^2 (d + d_w))",
        "general_mechanisms.dimensionality.multidimensional_attend",
        2,
    ),
    Cost(
        "Multi-head, h heads (Eq. 38-40)",
        "O(n^2 d + n d^2)",
        "O(h n^2)",
        "query_related.multihead.multi_head_attention",
        2,
    ),
    Cost("Local window, half-width w", "O(n w d)", "O(n w)", "transformer.local.local_window_attention", 1),
    Cost("Linformer, projected length k", "O(n k d)", "O(n k)", "transformer.linformer.linformer_attention", 1),
    Cost("LSH (Reformer), chunk m", "O(n log n + n m d)", "O(n m)", "transformer.reformer.lsh_attention", 1),
    Cost(
        "Transformer-XL, memory n_m", "O(n (n + n_m) d)", "O(n (n + n_m))", "transformer.transformer_xl.xl_attention", 2
    ),
    Cost("Synthesizer (random)", "O(n^2 d)", "O(n^2)", "transformer.synthesizer.RandomSynthesizer", 2),
    Cost(
        "Lite Transformer (LSRA), kernel r",
        "O(n^2 d / 2 + n r d / 2)",
        "O(n^2)",
        "transformer.lite.long_short_range_attention",
        2,
    ),
]


def complexity_markdown(rows: list[Cost] = COMPLEXITY) -> str:
    """The complexity table as a Markdown table (for ``IPython.display.Markdown``).

    Args:
        rows: the mechanisms' costs (default :data:`COMPLEXITY`).

    Returns:
        The Markdown source.
    """
    lines = ["| mechanism | time | memory | implemented by |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.mechanism} | `{r.time}` | `{r.memory}` | `attnsurvey.{r.implemented_by}` |")
    return "\n".join(lines)


def _tex(cost: str) -> str:
    """A cost such as ``O(n log n + n m d)`` as LaTeX (``\\log``); the rest is already TeX."""
    return re.sub(r"\blog\b", r"\\log", cost)


def _symbols(mechanism: str) -> str:
    """The size symbols of a mechanism's name (``h heads``, ``half-width w``, ``memory n_m``) as inline math."""
    return re.sub(r"(?<= )(h|w|k|m|r|n_m)(?= heads|$)", r"$\1$", mechanism)


def complexity_table(rows: list[Cost] = COMPLEXITY) -> Table:
    """The complexity table for notebooks: an HTML table with typeset costs, and plain text (see ``display_table``).

    Args:
        rows: the mechanisms' costs (default :data:`COMPLEXITY`).

    Returns:
        The table, displayable in a notebook.
    """
    header = ("mechanism", "time", "memory", "implemented by")
    cells = [
        (_symbols(r.mechanism), f"${_tex(r.time)}$", f"${_tex(r.memory)}$", f"`attnsurvey.{r.implemented_by}`")
        for r in rows
    ]
    plain = [(r.mechanism, r.time, r.memory, f"attnsurvey.{r.implemented_by}") for r in rows]
    return table(header, cells, plain, widths=(28, 20, 17, 35))


def cost_curves_figure(results: dict) -> Figure:
    """Measured time and memory against n, per method, from ``benchmarks/attention_cost.py``'s JSON.

    Each point is the median, its bar the min-max range. Log-log axes (n in base 2,
    labelled as plain numbers); the machine and settings are in the title.

    Args:
        results: the saved JSON (``{"settings": {...}, "machine": {...}, "attention":
            [{"method", "n", "seconds", "peak_mib"}, ...]}``) where ``seconds`` and
            ``peak_mib`` are summaries over the repeats (``{"median", "min", "max", ...}``).

    Returns:
        The figure.

    Raises:
        KeyError: if the JSON lacks those fields.
    """
    rows = results["attention"]
    methods = sorted({r["method"] for r in rows}, key=[r["method"] for r in rows].index)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    for m in methods:
        pts = sorted((r["n"], r["seconds"], r["peak_mib"]) for r in rows if r["method"] == m)
        for ax, k in ((axes[0], 1), (axes[1], 2)):
            kept = [(p[0], p[k]) for p in pts if p[k]["median"] > 0]  # log axes: a zero cannot be drawn
            if kept:
                med = [q["median"] for _, q in kept]
                err = [[y - q["min"] for y, (_, q) in zip(med, kept)], [q["max"] - y for y, (_, q) in zip(med, kept)]]
                ax.errorbar([x for x, _ in kept], med, yerr=err, fmt="o-", capsize=2, label=m)
    for ax in axes:
        # base 2 as the benchmark's own plot (n doubles), labelled as plain numbers;
        # no minor labels, which run together on a log axis
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("log")
    axes[0].set(xlabel="sequence length n", ylabel="seconds per call (median, min-max)", title="time")
    axes[1].set(xlabel="sequence length n", ylabel="peak extra memory (MiB)", title="memory")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    s, mach = results.get("settings", {}), results.get("machine", {})
    fig.suptitle(
        f"measured on {mach.get('cpu', '?')} ({mach.get('cores', '?')} cores), torch {mach.get('torch', '?')}, "
        f"{s.get('threads', '?')} thread(s), d = {s.get('d', '?')}, {s.get('repeats', '?')} repeats",
        fontsize=9,
    )
    return fig


def _boxes(ax: Axes) -> list[tuple[FancyBboxPatch, Text]]:
    """The boxes drawn by ``draw_box`` in ``ax``: each rounded patch with the text at its centre."""
    found: list[tuple[FancyBboxPatch, Text]] = []
    for patch in ax.patches:
        if isinstance(patch, FancyBboxPatch):
            cx, cy = patch.get_x() + patch.get_width() / 2, patch.get_y() + patch.get_height() / 2
            texts = [
                t for t in ax.texts if abs(t.get_position()[0] - cx) < 1e-9 and abs(t.get_position()[1] - cy) < 1e-9
            ]
            if texts:
                found.append((patch, texts[0]))
    return found


def diagram_edges(ax: Axes, tol: float = 0.1) -> list[tuple[str | None, str | None, str, str]]:
    """Which boxes each arrow of a diagram joins: ``(from, to, colour, linestyle)`` per arrow.

    ``from``/``to`` are the texts of the boxes (drawn by ``draw_box``) nearest to
    the arrow's tail and head within ``tol`` data units of the box, ``None``
    where no box is that close; colour is a hex string, linestyle matplotlib's
    (``"solid"``, ``"--"``, ...).

    Args:
        ax: the axes of the diagram.
        tol: the largest distance, in data units, from an arrow end to its box.

    Returns:
        One tuple per arrow; ``[]`` for axes without arrows.
    """
    boxes = [
        (p.get_x(), p.get_y(), p.get_x() + p.get_width(), p.get_y() + p.get_height(), t.get_text())
        for p, t in _boxes(ax)
    ]

    def nearest(pt: tuple[float, float]) -> str | None:
        best, best_d = None, tol
        for x0, y0, x1, y1, label in boxes:
            d = max(x0 - pt[0], 0.0, pt[0] - x1) ** 2 + max(y0 - pt[1], 0.0, pt[1] - y1) ** 2
            if d**0.5 <= best_d:
                best, best_d = label, d**0.5
        return best

    edges = []
    for patch in ax.patches:
        if isinstance(patch, FancyArrowPatch):
            a, b = patch._posA_posB  # type: ignore[attr-defined]  # the end points it was drawn with; no public getter
            edges.append((nearest(a), nearest(b), to_hex(patch.get_edgecolor()), str(patch.get_linestyle())))
    return edges


def layout_problems(fig: Figure, tol_px: float = 0.5) -> list[str]:
    """What is unreadable in a drawn diagram, one message each.

    Renders ``fig`` and reports: a box's text wider or taller than its box; a
    free text (not a box's) that overlaps a box or crosses an arrow; a box not
    wholly inside its axes (so clipped).

    Args:
        fig: the figure.
        tol_px: pixels of slack.

    Returns:
        The problems; ``[]`` when the diagram reads cleanly.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg canvas has it
    problems = []
    for ax in fig.axes:
        boxes = _boxes(ax)
        box_texts = {id(t) for _, t in boxes}
        ax_box = ax.get_window_extent(renderer)
        arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
        for patch, text in boxes:
            pb, tb = patch.get_window_extent(renderer), text.get_window_extent(renderer)
            label = text.get_text().replace("\n", " ")
            (ix0, iy0), (ix1, iy1) = patch.get_transform().transform(
                [
                    (patch.get_x(), patch.get_y()),
                    (patch.get_x() + patch.get_width(), patch.get_y() + patch.get_height()),
                ]
            )  # the box without its rounded padding: the text keeps that margin from the border
            if tb.x0 < ix0 - tol_px or tb.x1 > ix1 + tol_px or tb.y0 < iy0 - tol_px or tb.y1 > iy1 + tol_px:
                problems.append(f"text {label!r} overflows its box")
            if (
                pb.x0 < ax_box.x0 - tol_px
                or pb.x1 > ax_box.x1 + tol_px
                or pb.y0 < ax_box.y0 - tol_px
                or pb.y1 > ax_box.y1 + tol_px
            ):
                problems.append(f"box {label!r} is cut off by the axes")
        for text in ax.texts:
            if id(text) in box_texts or not text.get_text():
                continue
            tb = text.get_window_extent(renderer)
            label = text.get_text().replace("\n", " ")
            for patch, other in boxes:
                if tb.overlaps(patch.get_window_extent(renderer)):
                    problems.append(f"text {label!r} overlaps box {other.get_text()!r}")
            for arrow in arrows:
                # the arrow's line and head as polylines in pixels (curves flattened)
                path = arrow.get_transform().transform_path(arrow.get_path())
                if any(Path(line).intersects_bbox(tb, filled=False) for line in path.to_polygons(closed_only=False)):
                    problems.append(f"text {label!r} crosses an arrow")
    return problems


def box_labels(fig: Figure) -> list[str]:
    """The texts drawn in a figure's axes (box labels, arrow labels).

    Args:
        fig: the figure.

    Returns:
        The texts, in drawing order.
    """
    return [t.get_text() for ax in fig.axes for t in ax.texts]


__all__ = [
    "COMPLEXITY",
    "VARIANTS",
    "Cost",
    "Step",
    "box_labels",
    "Branches",
    "complexity_markdown",
    "complexity_table",
    "cost_curves_figure",
    "diagram_edges",
    "encoder_decoder_figure",
    "layer_blocks",
    "layout_problems",
    "resolve",
    "transformer_layer_figure",
    "variant_figure",
    "variants_figure",
]
