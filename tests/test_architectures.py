"""Architecture diagrams and complexity table (attnsurvey.figures.architectures, book/architectures.ipynb).

The drawing functions return figures with the expected labelled boxes, read
from the modules they draw; every ``implemented_by`` names a real package
object; and the complexity table's growth in n matches the multiply-adds that
``torch.utils.flop_counter`` counts in the package's functions on small inputs.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attnsurvey.figures import architectures as A
from attnsurvey.transformer.model import DecoderLayer, EncoderLayer


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_post_norm_encoder_layer_blocks():
    assert A.layer_blocks(EncoderLayer(8, 2, 16)) == [
        ("Multi-head self-attention", "attention"),
        ("Add & LayerNorm", "add"),
        ("Position-wise feed-forward", "ffn"),
        ("Add & LayerNorm", "add"),
    ]


def test_pre_norm_decoder_layer_blocks():
    blocks = A.layer_blocks(DecoderLayer(8, 2, 16, norm_first=True))
    assert [k for _, k in blocks] == ["norm", "attention", "add"] * 2 + ["norm", "ffn", "add"]
    assert blocks[1][0].startswith("Masked (causal)")
    assert blocks[4][0].startswith("Multi-head cross-attention")


def test_layer_blocks_rejects_other_modules():
    with pytest.raises(TypeError, match="not a Transformer layer"):
        A.layer_blocks(nn.Linear(3, 3))


@pytest.mark.parametrize("layer", [EncoderLayer(8, 2, 16), DecoderLayer(8, 2, 16)], ids=["encoder", "decoder"])
def test_layer_figure_has_one_box_per_block(layer):
    fig = A.transformer_layer_figure(layer)
    labels = A.box_labels(fig)
    expected = [b[0] for b in A.layer_blocks(layer)]
    assert labels[1:-1] == expected
    assert labels[0].startswith("input") and labels[-1].startswith("output")
    assert type(layer).__name__ in fig.axes[0].get_title()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
def test_layer_figure_labels_fit_their_boxes(cls, norm_first):
    """Labels fit their boxes, also in the pre-norm decoder layer (11 boxes, the tightest)."""
    assert A.layout_problems(A.transformer_layer_figure(cls(8, 2, 16, norm_first=norm_first))) == []


def test_encoder_decoder_figure_names_the_model_parts():
    labels = " ".join(A.box_labels(A.encoder_decoder_figure()))
    for part in (
        "$h_1$",
        "$x_3$",
        "GeneralAttention",
        "AdditiveScore",
        "context $c_t$",
        "GRUCell",
        "query $s_{t-1}$",
        "$y_{t-1}$",
        "readout (Linear)",
        "encoder: GRU, bidirectional",
    ):
        assert part in labels


def _short(label):
    """A box's name in the expected edges: its first line, or the class name in its brackets."""
    first = label.split("\n")[0] if label else label
    for name in ("attention", "decoder cell", "readout"):
        if first and first.startswith(name):
            return name
    return first


def test_encoder_decoder_figure_draws_the_decoder_step_of_the_code():
    """The arrows are the data flow of seq2seq.decoder_step and the bidirectional encoder."""
    from attnsurvey.seq2seq import Seq2Seq

    fig = A.encoder_decoder_figure()
    edges = {(_short(a), _short(b)) for a, b, _, _ in A.diagram_edges(fig.axes[0])}
    encoder = {(f"$x_{i}$", f"$h_{i}$") for i in (1, 2, 3)} | {(f"$h_{i}$", "attention") for i in (1, 2, 3)}
    forward = {("$h_1$", "$h_2$"), ("$h_2$", "$h_3$")}
    backward = {("$h_2$", "$h_1$"), ("$h_3$", "$h_2$")}
    step = {
        ("$s_{t-1}$", "attention"),  # the query is the previous state
        ("attention", "context $c_t$"),
        ("context $c_t$", "decoder cell"),  # s_t = cell([y_{t-1}; c_t], s_{t-1})
        ("$y_{t-1}$", "decoder cell"),
        ("$s_{t-1}$", "decoder cell"),
        ("decoder cell", "readout"),  # readout([s_t; c_t])
        ("context $c_t$", "readout"),
    }
    assert edges == encoder | forward | backward | step
    # the code the figure claims to draw: a bidirectional encoder, the cell reads [y_{t-1}; c_t]
    model = Seq2Seq(vocab_size=8, attention=True)
    assert model.encoder.bidirectional
    assert model.cell.input_size == model.embed.embedding_dim + model.d_h
    assert model.readout.in_features == 2 * model.d_h
    # a one-directional encoder is drawn with forward arrows only
    model.encoder = torch.nn.GRU(32, 64, batch_first=True)
    one_way = {(_short(a), _short(b)) for a, b, _, _ in A.diagram_edges(A.encoder_decoder_figure(model).axes[0])}
    assert forward <= one_way and not backward & one_way


def test_encoder_decoder_figure_reads_cleanly():
    assert A.layout_problems(A.encoder_decoder_figure()) == []


def test_encoder_decoder_figure_needs_attention():
    from attnsurvey.seq2seq import Seq2Seq

    with pytest.raises(TypeError, match="attention=True"):
        A.encoder_decoder_figure(Seq2Seq(vocab_size=8, attention=False))


def _steps(rows):
    return [step for row in rows for step in (row.steps if isinstance(row, A.Branches) else (row,))]


@pytest.mark.parametrize("name", sorted(A.VARIANTS))
def test_variant_figure_boxes_and_implementations(name):
    fig = A.variant_figure(name)
    expected = []
    for row in A.VARIANTS[name]:
        if isinstance(row, A.Branches):
            expected += [s.label for s in row.steps] + ([row.join] * (len(row.steps) - 1) if row.join else [])
        else:
            expected.append(row.label)
    assert A.box_labels(fig) == expected
    for step in _steps(A.VARIANTS[name]):
        assert callable(A.resolve(step.implemented_by)), step


def _edges(fig, i=0):
    return {(a, b) for a, b, _, _ in A.diagram_edges(fig.axes[i])}


def test_lite_transformer_branches_run_in_parallel():
    """Attention and convolution each read their half of the split and feed the concatenation,
    as long_short_range_attention computes them (the right half of the output does not
    depend on the left half of the input)."""
    from attnsurvey.transformer.lite import depthwise_conv, long_short_range_attention

    rows = A.VARIANTS["Lite Transformer"]
    split, branches, concat = rows[1], rows[2], rows[3]
    assert isinstance(branches, A.Branches) and len(branches.steps) == 2
    left, right = (s.label for s in branches.steps)
    assert _edges(A.variant_figure("Lite Transformer")) == {
        (rows[0].label, split.label),
        (split.label, left),
        (split.label, right),
        (left, concat.label),
        (right, concat.label),
    }
    X, W = _r(5, 8), _r(4, 3)

    def attention(Z):
        return torch.softmax(Z @ Z.T, -1) @ Z, None

    Y, _ = long_short_range_attention(X, attention, W)
    torch.testing.assert_close(Y[:, 4:], depthwise_conv(X[:, 4:], W))
    X2 = X.clone()
    X2[:, :4] += 1.0
    torch.testing.assert_close(long_short_range_attention(X2, attention, W)[0][:, 4:], Y[:, 4:])


def test_synthesizer_weights_are_alternatives():
    rows = A.VARIANTS["Synthesizer"]
    branches = rows[1]
    assert isinstance(branches, A.Branches) and branches.join == "or"
    dense, random = branches.steps
    assert dense.implemented_by.endswith("dense_synthesizer_weights")
    assert random.implemented_by.endswith("random_synthesizer_weights") and not random.from_below
    fig = A.variant_figure("Synthesizer")
    # the input feeds the dense weights only; either weights feed the weighted sum; no arrow between them
    assert _edges(fig) == {(rows[0].label, dense.label), (dense.label, rows[2].label), (random.label, rows[2].label)}
    texts = {t.get_text(): t.get_position() for t in fig.axes[0].texts}
    (xd, yd), (xo, yo), (xr, yr) = texts[dense.label], texts["or"], texts[random.label]
    assert yd == yo == yr and xd < xo < xr


def test_variant_figures_read_cleanly():
    assert A.layout_problems(A.variants_figure()) == []
    for name in A.VARIANTS:
        assert A.layout_problems(A.variant_figure(name)) == [], name


def test_layout_problems_finds_overflow_clipping_and_crossed_arrows():
    from attnsurvey.plotting import diagram_axes, draw_arrow, draw_box

    fig, ax = diagram_axes(3.0, 2.0, (0, 3), (0, 2), "t")
    draw_box(ax, (0.8, 1.0), "a label far too long for this box", w=0.6, h=0.4)
    draw_box(ax, (2.9, 1.0), "x", w=0.6, h=0.4)  # half outside the x limits
    draw_arrow(ax, (0.2, 0.3), (2.8, 0.3))
    ax.text(1.5, 0.3, "on the arrow", ha="center", va="center", fontsize=8)
    problems = A.layout_problems(fig)
    assert problems == [
        "text 'a label far too long for this box' overflows its box",
        "box 'x' is cut off by the axes",
        "text 'on the arrow' crosses an arrow",
    ]
    assert A.diagram_edges(ax) == [(None, None, "#444444", "solid")]
    fig2, ax2 = diagram_axes(3.0, 2.0, (0, 3), (0, 2), "t")
    draw_box(ax2, (0.5, 1.0), "p", w=0.6, h=0.4)
    draw_box(ax2, (2.5, 1.0), "q", w=0.6, h=0.4)
    draw_arrow(ax2, (0.8, 1.0), (2.2, 1.0), color="#aaaaaa")
    ax2.text(1.5, 1.6, "free", ha="center", fontsize=8)
    assert A.layout_problems(fig2) == []
    assert A.diagram_edges(ax2) == [("p", "q", "#aaaaaa", "solid")]


def test_every_variant_the_book_teaches_is_drawn():
    assert set(A.VARIANTS) == {
        "Transformer-XL",
        "Reformer",
        "Linformer",
        "Local attention",
        "Lite Transformer",
        "Synthesizer",
    }
    assert len(A.variants_figure().axes) == 6
    with pytest.raises(ValueError, match="unknown variant"):
        A.variant_figure("Performer")


def test_complexity_table_rows():
    rows = {c.mechanism: c for c in A.COMPLEXITY}
    lsh = next(c for c in A.COMPLEXITY if c.mechanism.startswith("LSH"))
    assert "log n" in lsh.time, "LSH attention is O(n log n), not linear"
    assert rows["Scaled dot-product (full)"].time == "O(n^2 d)"
    for c in A.COMPLEXITY:
        assert callable(A.resolve(c.implemented_by)), c
    md = A.complexity_markdown()
    assert md.count("\n") == len(A.COMPLEXITY) + 1 and "O(n log n + n m d)" in md


D, W, K, C = 8, 4, 16, 16
g = torch.Generator().manual_seed(0)


def _r(*shape):
    return torch.randn(*shape, generator=g)


def _mha(n):
    from attnsurvey.query_related.multihead import multi_head_attention

    X = _r(n, D)
    return lambda: multi_head_attention(X, X, X, _r(D, D), _r(D, D), _r(D, D), _r(D, D), 2)


def _multidimensional(n):
    X = _r(n, D)
    return lambda: A.resolve("general_mechanisms.dimensionality.multidimensional_attend")(
        X, X, X, _r(W, D), _r(W, D), _r(W, D)
    )


def _xl(n):
    X, weights = _r(n, D), [_r(D, D) for _ in range(5)]
    return lambda: A.resolve("transformer.transformer_xl.xl_attention")(X, _r(n, D), *weights, _r(2, 4), _r(2, 4), 2)


def _random_synthesizer(n):
    module, X = A.resolve("transformer.synthesizer.RandomSynthesizer")(D, 256), _r(n, D)
    return lambda: module(X)


def _lite(n):
    X = _r(n, D)
    half = D // 2
    return lambda: A.resolve("transformer.lite.long_short_range_attention")(
        X, lambda Y: A.resolve("attention.attend")(Y, Y, Y), _r(half, 3)
    )


# The flop counter sees matrix products only; the additive score's n^2 d_w part
# is element-wise (tanh of broadcast sums), so it is the one row not checked this way.
CALLS = {
    "general_mechanisms.dimensionality.multidimensional_attend": _multidimensional,
    "transformer.transformer_xl.xl_attention": _xl,
    "transformer.synthesizer.RandomSynthesizer": _random_synthesizer,
    "transformer.lite.long_short_range_attention": _lite,
    "general_mechanisms.scoring.scaled_dot_score": lambda n: (
        lambda Q=_r(n, D), K_=_r(n, D): A.resolve("general_mechanisms.scoring.scaled_dot_score")(Q, K_)
    ),
    "query_related.multihead.multi_head_attention": _mha,
    "transformer.local.local_window_attention": lambda n: (
        lambda X=_r(n, D): A.resolve("transformer.local.local_window_attention")(X, X, X, W)
    ),
    "transformer.linformer.linformer_attention": lambda n: (
        lambda X=_r(n, D): A.resolve("transformer.linformer.linformer_attention")(X, X, X, _r(K, n), _r(K, n))
    ),
    "transformer.reformer.lsh_attention": lambda n: (
        lambda X=_r(n, D): A.resolve("transformer.reformer.lsh_attention")(
            X, X, 4, C, generator=torch.Generator().manual_seed(1)
        )
    ),
}


def _flops(call) -> int:
    with FlopCounterMode(display=False) as counter:
        call()
    return counter.get_total_flops()


@pytest.mark.parametrize("cost", [c for c in A.COMPLEXITY if c.implemented_by in CALLS], ids=lambda c: c.mechanism)
def test_complexity_growth_matches_counted_flops(cost):
    make = CALLS[cost.implemented_by]
    f1, f2 = _flops(make(128)), _flops(make(256))
    assert f1 > 0
    exponent = math.log2(f2 / f1)
    assert abs(exponent - cost.n_exponent) < 0.3, f"{cost.mechanism}: counted growth n^{exponent:.2f}"


def test_flop_check_covers_the_main_mechanisms():
    covered = [c.mechanism for c in A.COMPLEXITY if c.implemented_by in CALLS]
    assert len(covered) == len(A.COMPLEXITY) - 1  # all but the additive score


def test_cost_curves_figure_plots_every_method():
    def summary(median):
        return {"median": median, "min": median / 2, "max": median * 2}

    results = {
        "settings": {"d": 8, "threads": 1, "repeats": 3},
        "machine": {"cpu": "x", "cores": 2, "torch": "t"},
        "attention": [
            {"method": m, "n": n, "seconds": summary(n * k * 1e-6), "peak_mib": summary(n * k * 1e-3)}
            for k, m in enumerate(["full", "local"], start=1)
            for n in (64, 128)
        ],
    }
    fig = A.cost_curves_figure(results)
    assert [c.get_label() for c in fig.axes[0].containers] == ["full", "local"]
    assert len(fig.axes[1].containers) == 2
    line = fig.axes[0].containers[1].lines[0]  # "local": the medians, not the min or max
    assert line.get_ydata().tolist() == [128e-6, 256e-6]
    assert "x (2 cores)" in fig._suptitle.get_text()
    with pytest.raises(KeyError):
        A.cost_curves_figure({"settings": {}})


def test_cost_curves_tick_labels_do_not_overlap():
    """n from 256 to 8192 as the saved benchmark: every shown tick label stands clear of its neighbours."""

    def summary(median):
        return {"median": median, "min": median, "max": median}

    ns = [256 * 2**i for i in range(6)]
    results = {
        "attention": [
            {"method": m, "n": n, "seconds": summary(n * n * 1e-9 * k), "peak_mib": summary(n * 1e-3 * k)}
            for k, m in enumerate(["full", "local"], start=1)
            for n in ns
        ]
    }
    fig = A.cost_curves_figure(results)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = axis.get_view_interval()
            labels = [
                t
                for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                if lo <= tick.get_loc() <= hi
                for t in (tick.label1,)
                if t.get_visible() and t.get_text()
            ]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for i, a in enumerate(boxes):
                for b in boxes[i + 1 :]:
                    assert not a.overlaps(b), [t.get_text() for t in labels]
    shown = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert "256" in shown and "8192" in shown
