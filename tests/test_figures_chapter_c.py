import math

import numpy as np
import pytest

from attnsurvey.figures import chapter_c as fc


def test_curve_summary_matches_numpy_and_keeps_gaps():
    rows = [[0.1, 0.5, 1.0], [0.3, 0.7, math.nan], [0.2, 0.9, 1.0]]
    mean, sd = fc.curve_summary(rows)
    arr = np.array(rows)
    np.testing.assert_allclose(mean[:2], arr[:, :2].mean(0))
    np.testing.assert_allclose(sd[:2], arr[:, :2].std(0, ddof=1))
    assert math.isnan(mean[2]) and math.isnan(sd[2])


def test_curve_summary_refuses_one_seed_and_ragged_rows():
    with pytest.raises(ValueError, match="two seeds"):
        fc.curve_summary([[1.0, 2.0]])
    with pytest.raises(ValueError, match="lengths"):
        fc.curve_summary([[1.0, 2.0], [1.0]])


def test_seed_curves_draws_one_line_per_method_with_its_error_bars():
    curves = {"a": [[0.1, 0.2], [0.3, 0.4]], "b": [[0.5, math.nan], [0.7, math.nan]]}
    fig = fc.seed_curves([8, 16], curves, xlabel="n", ylabel="acc", title="t", chance=0.1, logx=True)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels) == ["a (n=2)", "b (n=2)", "chance"]
    line = ax.get_lines()[0]
    np.testing.assert_allclose(np.asarray(line.get_ydata(), dtype=float), [0.2, 0.3])
    # the error bar of method a at x = 8 spans mean ± sd = 0.2 ± 0.1414
    segs = ax.collections[0].get_segments()
    np.testing.assert_allclose([segs[0][0][1], segs[0][1][1]], [0.2 - 0.02**0.5, 0.2 + 0.02**0.5])
    with pytest.raises(ValueError, match="2 values"):
        fc.seed_curves([8, 16], {"c": [[1.0], [2.0]]}, xlabel="n", ylabel="a", title="t")


def _texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


def test_transformer_blocks_name_every_sublayer_and_the_norm_order():
    post = _texts(fc.transformer_blocks_figure())
    assert post.count("Add & LayerNorm") == 5  # 2 in the encoder layer, 3 in the decoder layer
    for part in ("masked (causal) self-attention", "cross-attention: K, V from encoder", "encoder output M"):
        assert part in post
    pre = _texts(fc.transformer_blocks_figure(norm_first=True))
    assert pre.count("residual: x + f(LN(x))") == 5 and "Add & LayerNorm" not in pre


def test_reformer_rows_follow_the_package_hash_sorted_by_bucket_then_position():
    import torch

    from attnsurvey.transformer import reformer

    g = torch.Generator().manual_seed(0)
    X = torch.randn(12, 6, generator=g)
    R = reformer.random_rotations(6, 4, g)
    buckets = reformer.lsh_hash(X, R, 4).tolist()
    fig = fc.reformer_pipeline_figure(torch.tensor(buckets), 3)
    squares = [t for t in _texts(fig) if t.isdigit()]
    first, second = squares[:12], squares[12:24]
    assert first == [str(i) for i in range(12)]
    # independent oracle: Python's stable sort on the bucket alone keeps positions in order within a bucket
    assert second == [str(i) for i in sorted(range(12), key=lambda i: buckets[i])]
    assert squares[24:] == second
    with pytest.raises(ValueError, match="divide"):
        fc.reformer_pipeline_figure(torch.tensor(buckets), 5)


def test_xl_figure_draws_the_causal_memory_mask():
    from attnsurvey.transformer.transformer_xl import xl_causal_mask

    n_seg, n_layers = 3, 2
    fig = fc.xl_recurrence_figure(n_seg, n_layers)
    lines = fig.axes[0].get_lines()
    edges = {
        (int(ln.get_xdata()[0]), int(ln.get_xdata()[1]), int(ln.get_ydata()[0]))
        for ln in lines
        if ln.get_linestyle() == "-"
    }
    keep = xl_causal_mask(n_seg, n_seg)  # (n, n_m + n): query i of the segment may read key j
    want = {
        (j, n_seg + i, layer) for layer in range(n_layers) for i in range(n_seg) for j in range(2 * n_seg) if keep[i, j]
    }
    assert edges == want
    with pytest.raises(ValueError):
        fc.xl_recurrence_figure(0, 2)
