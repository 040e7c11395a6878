import pytest

from attnsurvey.figures import chapter_c as fc


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
