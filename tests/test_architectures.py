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


def test_encoder_decoder_figure_names_the_model_parts():
    labels = " ".join(A.box_labels(A.encoder_decoder_figure()))
    for part in ("h_1", "x_3", "GeneralAttention", "context c_t", "GRUCell", "query s_{t-1}", "readout: Linear"):
        assert part in labels


def test_encoder_decoder_figure_needs_attention():
    from attnsurvey.seq2seq import Seq2Seq

    with pytest.raises(TypeError, match="attention=True"):
        A.encoder_decoder_figure(Seq2Seq(vocab_size=8, attention=False))


@pytest.mark.parametrize("name", sorted(A.VARIANTS))
def test_variant_figure_boxes_and_implementations(name):
    fig = A.variant_figure(name)
    assert A.box_labels(fig) == [s.label for s in A.VARIANTS[name]]
    for step in A.VARIANTS[name]:
        assert callable(A.resolve(step.implemented_by)), step


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
    assert "log n" in lsh.time, "LSH attention is O(n log n), not linear (issue 11)"
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


# The flop counter sees matrix products only; the additive score's n^2 d_w part
# is element-wise (tanh of broadcast sums), so it is not checked this way.
CALLS = {
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
    assert len(covered) >= 5


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
