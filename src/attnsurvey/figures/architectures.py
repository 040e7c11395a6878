"""Architecture diagrams and the complexity table (book/architectures.ipynb).

The diagrams are drawn from the package, so they cannot drift from it:

* :func:`layer_blocks` reads the sub-layers of an ``EncoderLayer`` or
  ``DecoderLayer`` instance (its attention and feed-forward children, in
  registration order, and ``norm_first``) and lists the blocks a token passes
  through; :func:`transformer_layer_figure` draws them with the residual paths.
* :func:`encoder_decoder_figure` names its boxes after the children of a
  ``Seq2Seq`` instance with attention.
* Each Transformer variant (:data:`VARIANTS`) is a list of steps, each naming
  the package function or class that implements it (``implemented_by``); the
  tests resolve every name, so a renamed or removed function breaks them.

:data:`COMPLEXITY` is the analytic cost of every mechanism for one head of
self-attention over ``n`` positions of width ``d`` (``w`` window half-width,
``k`` Linformer's projected length, ``m`` LSH chunk size, ``n_m`` Transformer-XL
memory length; the symbols of the Transformer-variants chapter); ``n_exponent`` is how the counted multiply-adds of the
implementation grow with ``n`` at fixed ``d, w, k, m, n_m`` (checked by the tests
with ``torch.utils.flop_counter``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import nn

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
    """One box of a variant's diagram and the package object that implements it."""

    label: str
    implemented_by: str  # dotted path below ``attnsurvey``
    color: str = ATTENTION_COLOR


def resolve(path: str) -> object:
    """The package object named by a dotted path below ``attnsurvey`` (raises ``AttributeError``/``ImportError``)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"attnsurvey.{module}"), name)


def layer_blocks(layer: nn.Module) -> list[tuple[str, str]]:
    """The blocks of a Transformer layer, bottom to top, as ``(label, kind)``.

    kind is ``"attention"``, ``"ffn"``, ``"norm"`` or ``"add"``. Reads the
    layer's attention and feed-forward children in registration order and its
    ``norm_first`` flag (post-norm: sub-layer, then Add & LayerNorm; pre-norm:
    LayerNorm, sub-layer, Add). Raises ``TypeError`` if the layer has no such
    children or not one LayerNorm per sub-layer.
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
    """Draw one encoder or decoder layer with its residual connections (see :func:`layer_blocks`)."""
    blocks = layer_blocks(layer)
    labels = ["input X (n x d_model)"] + [b[0] for b in blocks] + ["output (n x d_model)"]
    colors = [IO_COLOR] + [_KIND_COLOR[b[1]] for b in blocks] + [IO_COLOR]
    fig, ax = plt.subplots(figsize=(3.6, 0.75 * len(labels) + 0.6))
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
    """Draw the RNN encoder-decoder with additive attention (a ``Seq2Seq`` with ``attention=True``)."""
    from attnsurvey.seq2seq import Seq2Seq

    model = model if model is not None else Seq2Seq(vocab_size=8, attention=True)
    children = dict(model.named_children())
    if children.get("attention") is None:
        raise TypeError("encoder_decoder_figure needs a Seq2Seq built with attention=True")
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    enc = [(-3.0 + 1.5 * i, 0.0) for i in range(3)]
    for i, xy in enumerate(enc):
        draw_box(ax, (xy[0], -1.2), f"x_{i + 1}", w=0.8, h=0.45, color=IO_COLOR, fs=8)
        draw_box(ax, xy, f"h_{i + 1}", w=0.9, h=0.5, color=FFN_COLOR, fs=8)
        draw_arrow(ax, (xy[0], -0.97), (xy[0], -0.25))
    for a, b in zip(enc, enc[1:]):
        draw_arrow(ax, (a[0] + 0.45, 0.0), (b[0] - 0.45, 0.0))
    ax.text(-1.5, -0.55, f"encoder: {type(children['encoder']).__name__}", ha="center", fontsize=8)
    att = (-1.5, 1.7)
    draw_box(
        ax,
        att,
        f"attention ({type(children['attention']).__name__})\nscore, align (softmax)",
        w=3.4,
        h=0.7,
        color=ATTENTION_COLOR,
        fs=8,
    )
    for xy in enc:
        draw_arrow(ax, (xy[0], 0.25), (att[0] + 0.4 * (xy[0] - att[0]), att[1] - 0.35), text=None)
    ctx = (2.0, 1.7)
    draw_box(ax, ctx, "context c_t", w=1.4, h=0.5, color=ATTENTION_COLOR, fs=8)
    draw_arrow(ax, (att[0] + 1.7, att[1]), (ctx[0] - 0.7, ctx[1]))
    dec = (2.0, 3.1)
    draw_box(ax, dec, f"decoder state s_t\n({type(children['cell']).__name__})", w=2.0, h=0.7, color=FFN_COLOR, fs=8)
    draw_arrow(ax, (ctx[0], ctx[1] + 0.25), (dec[0], dec[1] - 0.35))
    out = (2.0, 4.3)
    draw_box(ax, out, f"y_t (readout: {type(children['readout']).__name__})", w=2.6, h=0.5, color=IO_COLOR, fs=8)
    draw_arrow(ax, (dec[0], dec[1] + 0.35), (out[0], out[1] - 0.25))
    draw_arrow(ax, (dec[0] - 1.0, dec[1]), (att[0], att[1] + 0.35), text="query s_{t-1}", rad=0.25)
    return _finish(fig, ax, "Encoder-decoder with attention (Seq2Seq)")


#: The attention step of each Transformer variant, bottom to top.
VARIANTS: dict[str, list[Step]] = {
    "Transformer-XL": [
        Step(
            "segment X and cached memory M\n(no gradient into M)",
            "transformer.transformer_xl.TransformerXLAttention",
            IO_COLOR,
        ),
        Step("Q from X; K, V from [M; X]", "transformer.transformer_xl.xl_attention"),
        Step("relative scores (a)+(b)+(c)+(d)\nwith u, v and W_R", "transformer.transformer_xl.xl_attention"),
        Step("relative shift of BD", "transformer.transformer_xl.rel_shift"),
        Step("causal mask over memory + segment", "transformer.transformer_xl.xl_causal_mask", NORM_COLOR),
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
        Step("left half: self-attention\n(global context)", "transformer.lite.long_short_range_attention"),
        Step("right half: depth-wise convolution\n(local context)", "transformer.lite.depthwise_conv", FFN_COLOR),
        Step("concatenate halves", "transformer.lite.long_short_range_attention", NORM_COLOR),
    ],
    "Synthesizer": [
        Step("X (n x d)", "transformer.synthesizer.DenseSynthesizer", IO_COLOR),
        Step(
            "weights B (n x n), either dense:\nan MLP of each token alone",
            "transformer.synthesizer.dense_synthesizer_weights",
        ),
        Step("... or random: learned,\nindependent of the input", "transformer.synthesizer.random_synthesizer_weights"),
        Step("softmax, weighted sum of V\n(no query-key dot product)", "transformer.synthesizer.RandomSynthesizer"),
    ],
}


def variant_figure(name: str) -> Figure:
    """Draw the attention step of one Transformer variant (a key of :data:`VARIANTS`)."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose one of {sorted(VARIANTS)}")
    steps = VARIANTS[name]
    fig, ax = plt.subplots(figsize=(3.6, 0.8 * len(steps) + 0.6))
    _column(ax, [s.label for s in steps], [s.color for s in steps], x=0.0, dy=1.05, w=3.2, h=0.72)
    return _finish(fig, ax, name)


def variants_figure() -> Figure:
    """All variants side by side (one column each)."""
    fig, axes = plt.subplots(1, len(VARIANTS), figsize=(3.3 * len(VARIANTS), 6.0))
    for ax, (name, steps) in zip(axes, VARIANTS.items()):
        _column(ax, [s.label for s in steps], [s.color for s in steps], x=0.0, dy=1.05, w=3.2, h=0.72)
        _finish(fig, ax, name)
        ax.set_xlim(-1.8, 1.8)
        ax.set_ylim(-0.6, 1.05 * 5 + 0.6)
    return fig


@dataclass(frozen=True)
class Cost:
    """Analytic cost of one mechanism (one head of self-attention over n positions of width d)."""

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
        "O(n^2 d)",
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
    Cost("Synthesizer (random)", "O(n^2 d)", "O(n^2)", "transformer.synthesizer.random_synthesizer_weights", 2),
    Cost(
        "Lite Transformer (LSRA), kernel r",
        "O(n^2 d / 2 + n r d / 2)",
        "O(n^2)",
        "transformer.lite.long_short_range_attention",
        2,
    ),
]


def complexity_markdown(rows: list[Cost] = COMPLEXITY) -> str:
    """The complexity table as a Markdown table (for ``IPython.display.Markdown``)."""
    lines = ["| mechanism | time | memory | implemented by |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.mechanism} | `{r.time}` | `{r.memory}` | `attnsurvey.{r.implemented_by}` |")
    return "\n".join(lines)


def cost_curves_figure(results: dict) -> Figure:
    """Measured time and memory against n, per method, from ``benchmarks/attention_cost.py``'s JSON.

    results: the saved JSON (``{"settings": {...}, "machine": {...}, "attention": [{"method", "n",
    "seconds", "peak_mib"}, ...]}``) where ``seconds`` and ``peak_mib`` are summaries over the repeats
    (``{"median", "min", "max", ...}``). Each point is the median, its bar the min-max range. Log-log
    axes; the machine and settings are in the title. Raises ``KeyError`` if the JSON lacks those fields.
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
        ax.set_xscale("log")
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


def box_labels(fig: Figure) -> list[str]:
    """The texts drawn in a figure's axes (box labels, arrow labels)."""
    return [t.get_text() for ax in fig.axes for t in ax.texts]


__all__ = [
    "COMPLEXITY",
    "VARIANTS",
    "Cost",
    "Step",
    "box_labels",
    "complexity_markdown",
    "cost_curves_figure",
    "encoder_decoder_figure",
    "layer_blocks",
    "resolve",
    "transformer_layer_figure",
    "variant_figure",
    "variants_figure",
]
