"""Figures of the Transformer, evaluation and beyond-the-survey chapters (§3.3.2, §4, §6).

Each function returns a ``matplotlib.figure.Figure`` (display it with
:func:`attnsurvey.plotting.show`).
Trends over seeds (accuracy against length) are drawn by
:func:`attnsurvey.plotting.trend_plot`.

Shapes: n tokens.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from torch import Tensor


def transformer_blocks_figure(norm_first: bool = False) -> Figure:
    """The encoder layer and the decoder layer of the Transformer (review eq. 13; Vaswani et al.'s Fig. 1).

    Left: token embedding + position code, then a layer of multi-head
    self-attention and a feed-forward network, each in a residual connection
    with layer normalisation, repeated ``N`` times. Right: the decoder layer,
    with causal (masked) self-attention, cross-attention whose keys and values
    come from the encoder output, and the feed-forward network, then a linear
    read-out and a softmax.

    Args:
        norm_first: label the residual wrappers as pre-norm (``x + f(LN(x))``) instead
            of post-norm (``LN(x + f(x))``, the original).

    Returns:
        The figure.
    """
    from ..plotting import ATTENTION_FILL, FEATURE_FILL, IO_FILL, OUTPUT_FILL, diagram_axes, draw_arrow, draw_box

    wrap = "residual: x + f(LN(x))" if norm_first else "Add & LayerNorm"
    fig, ax = diagram_axes(
        9.0,
        6.8,
        (0, 9),
        (-0.5, 9.0),
        f"Encoder layer (left) and decoder layer (right), {'pre-norm' if norm_first else 'post-norm'}",
    )
    enc_x, dec_x = 2.4, 6.6

    def stack(x: float, items: list[tuple[str, str]], y0: float) -> list[float]:
        ys: list[float] = []
        for i, (text, color) in enumerate(items):
            y = y0 + 1.0 * i
            draw_box(ax, (x, y), text, w=2.9, h=0.55, color=color, fs=8)
            if i:
                draw_arrow(ax, (x, ys[-1] + 0.28), (x, y - 0.28))
            ys.append(y)
        return ys

    enc = stack(
        enc_x,
        [
            ("source tokens", IO_FILL),
            ("embedding + position code", FEATURE_FILL),
            ("multi-head self-attention", ATTENTION_FILL),
            (wrap, IO_FILL),
            ("feed-forward (per position)", FEATURE_FILL),
            (wrap, IO_FILL),
        ],
        0.3,
    )
    dec = stack(
        dec_x,
        [
            ("target tokens, shifted right", IO_FILL),
            ("embedding + position code", FEATURE_FILL),
            ("masked (causal) self-attention", ATTENTION_FILL),
            (wrap, IO_FILL),
            ("cross-attention: K, V from encoder", ATTENTION_FILL),
            (wrap, IO_FILL),
            ("feed-forward (per position)", FEATURE_FILL),
            (wrap, IO_FILL),
            ("linear + softmax", OUTPUT_FILL),
        ],
        0.3,
    )
    # residual paths skip each sub-layer: from below the sub-layer to its Add & Norm box
    for x, ys, pairs in ((enc_x, enc, [(1, 3), (3, 5)]), (dec_x, dec, [(1, 3), (3, 5), (5, 7)])):
        for lo, hi in pairs:
            draw_arrow(ax, (x - 1.45, ys[lo] + 0.3), (x - 1.45, ys[hi] - 0.05), color="#888", rad=-0.5, lw=0.9)
    # the encoder output feeds the keys and values of every decoder layer's cross-attention
    draw_arrow(ax, (enc_x, enc[-1] + 0.28), (enc_x, enc[-1] + 1.1))
    draw_box(ax, (enc_x, enc[-1] + 1.35), "encoder output M", w=2.2, h=0.45, color=FEATURE_FILL, fs=8)
    draw_arrow(ax, (enc_x + 1.1, enc[-1] + 1.35), (dec_x - 1.45, dec[4]), color="#2e86c1", rad=-0.2)
    for x, ys, last, top in ((enc_x, enc, 5, 2), (dec_x, dec, 7, 2)):
        ax.add_patch(
            plt.Rectangle(
                (x - 1.7, ys[top] - 0.45), 3.4, ys[last] - ys[top] + 0.9, fill=False, ls="--", ec="#555", lw=0.9
            )
        )
        ax.text(x + 1.75, (ys[top] + ys[last]) / 2, "x N", fontsize=9, va="center")
    ax.text(
        0.2,
        -0.35,
        "grey arcs: residual connections; dashed boxes: one layer, stacked N times",
        fontsize=7,
        color="#555",
    )
    return fig


def reformer_pipeline_figure(buckets: Tensor, chunk_size: int) -> Figure:
    """Reformer's LSH attention in three rows, drawn from the bucket of every token.

    Row 1: the ``n`` tokens in their order, coloured by bucket. Row 2: sorted by
    bucket, then position (the sort of :func:`~attnsurvey.transformer.reformer.lsh_attention`).
    Row 3: the sorted row cut into chunks of ``chunk_size``; each token attends to
    the tokens of its own bucket in its chunk and the previous one. Each square
    shows the token's position.

    Args:
        buckets: the bucket of each token, as
            :func:`~attnsurvey.transformer.reformer.lsh_hash` returns it.
        chunk_size: the chunk length ``m``.

    Shape:
        - buckets: ``(n,)``.

    Returns:
        The figure.

    Raises:
        ValueError: unless ``buckets`` is one dimensional and ``chunk_size`` divides ``n``.
    """
    if buckets.dim() != 1:
        raise ValueError(f"buckets must have shape (n,), got {tuple(buckets.shape)}")
    n = buckets.shape[0]
    if chunk_size < 1 or n % chunk_size:
        raise ValueError(f"chunk size m={chunk_size} must divide the number of tokens n={n}")
    n_buckets = len(set(buckets.tolist()))
    bucket_of = buckets.tolist()
    order = sorted(range(n), key=lambda i: (bucket_of[i], i))
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * n + 1.5), 3.6))
    rows = [
        (2.0, list(range(n)), 0.0, f"1. hash each token: bucket = argmax([x R; -x R]) ({n_buckets} buckets used)"),
        (1.0, order, 0.0, "2. sort by bucket, then by position"),
        (
            0.0,
            order,
            0.35,
            f"3. cut into chunks of m = {chunk_size}: attend within the bucket, to this chunk and the previous one",
        ),
    ]
    for y, tokens, gap, label in rows:
        ax.text(-0.5, y + 0.42, label, fontsize=8, ha="left", va="bottom")
        for k, tok in enumerate(tokens):
            x = k + gap * (k // chunk_size)
            ax.add_patch(plt.Rectangle((x, y - 0.3), 0.9, 0.6, fc=colours(bucket_of[tok] % 10), ec="#333", alpha=0.55))
            ax.text(x + 0.45, y, str(tok), ha="center", va="center", fontsize=8)
    for b in sorted(set(bucket_of)):
        ax.add_patch(plt.Rectangle((0, 0), 0, 0, fc=colours(b % 10), alpha=0.55, label=f"bucket {b}"))
    ax.legend(fontsize=7, loc="upper right", bbox_to_anchor=(1.0, -0.02), ncol=n_buckets, frameon=False)
    ax.set_xlim(-0.6, n + 0.35 * (n // chunk_size) + 0.2)
    ax.set_ylim(-0.5, 2.9)
    ax.axis("off")
    ax.set_title("Reformer's LSH attention: hash, sort, chunk (token positions in the squares)", fontsize=10)
    return fig


def xl_recurrence_figure(n_seg: int = 4, n_layers: int = 3) -> Figure:
    """Transformer-XL's segment-level recurrence: two segments of ``n_seg`` tokens through ``n_layers`` layers.

    Every circle is a hidden state (a column per position, a row per layer).
    The states of the previous segment (grey) are the memory: kept from the
    previous step, read by the current segment's attention, not trained
    through (no gradient). Each state of the current segment in layer ``l + 1``
    attends to every memory state of layer ``l`` and, causally, to the states
    of its own segment up to itself (the mask of
    :func:`~attnsurvey.transformer.transformer_xl.xl_causal_mask`, memory length
    ``n_seg``); the lines of the last token are drawn dark.

    Args:
        n_seg: tokens per segment.
        n_layers: the number of layers.

    Returns:
        The figure.

    Raises:
        ValueError: unless ``1 <= n_seg <= 8`` and ``1 <= n_layers <= 4``.
    """
    if not (1 <= n_seg <= 8 and 1 <= n_layers <= 4):
        raise ValueError(f"draw 1..8 tokens per segment and 1..4 layers, got n_seg={n_seg}, n_layers={n_layers}")
    fig, ax = plt.subplots(figsize=(1.0 * 2 * n_seg + 2.0, 1.1 * (n_layers + 1) + 1.0))
    last = 2 * n_seg - 1
    for layer in range(n_layers):
        for i in range(n_seg, 2 * n_seg):
            for j in range(i + 1):  # the whole memory and the causal part of the segment
                dark = i == last
                ax.plot(
                    [j, i], [layer, layer + 1], color="#1f4e79" if dark else "#bbb", lw=1.2 if dark else 0.6, zorder=1
                )
    for layer in range(n_layers + 1):
        for t in range(2 * n_seg):
            memory = t < n_seg
            ax.scatter(
                t,
                layer,
                s=260,
                color="#cfcfcf" if memory else "#9ecae1",
                ec="#333",
                zorder=2,
                hatch="//" if memory else None,
            )
        ax.text(-0.9, layer, "input" if layer == 0 else f"layer {layer}", ha="right", va="center", fontsize=8)
    ax.axvline(n_seg - 0.5, color="#555", ls="--", lw=0.9)
    ax.text(
        (n_seg - 1) / 2, n_layers + 0.55, "previous segment: memory\n(cached, no gradient)", ha="center", fontsize=8
    )
    ax.text(n_seg + (n_seg - 1) / 2, n_layers + 0.55, "current segment\n(trained)", ha="center", fontsize=8)
    ax.set_xlim(-2.2, 2 * n_seg)
    ax.set_ylim(-0.6, n_layers + 1.3)
    ax.axis("off")
    ax.set_title(
        "Transformer-XL: each layer reads the previous segment's states (memory) and its own, causally", fontsize=10
    )
    return fig
