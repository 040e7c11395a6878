"""Issue 13: every public mechanism gives a correct result or a clear error on edge-case inputs.

Each test here failed before its fix (see ``scripts/edge_case_sweep.py`` for the sweep that found them).
"""
from __future__ import annotations

import pytest
import torch

NAN = float("nan")


def _poisoned(B: int = 2, n_f: int = 5, d: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features with NaN in the last (masked) slot, the clean features and the (B, n_f) mask."""
    g = torch.Generator().manual_seed(0)
    F = torch.randn(B, n_f, d, generator=g, dtype=torch.float64)
    bad = F.clone()
    bad[:, -1] = NAN
    mask = torch.ones(B, n_f, dtype=torch.bool)
    mask[:, -1] = False
    return bad, F, mask


def test_context_and_attend_scores_keep_masked_values_inert():
    from attnsurvey.attention import attend_scores, context
    from attnsurvey.query_related.types import mean_pool

    bad, F, mask = _poisoned()
    torch.testing.assert_close(mean_pool(bad, mask), mean_pool(F, mask))  # was all NaN
    e = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(attend_scores(e, bad, mask[:, None])[0], attend_scores(e, F, mask[:, None])[0])
    a = torch.softmax(e, -1).masked_fill(~mask[:, None], 0.0)
    torch.testing.assert_close(context(a, bad), a @ F)
    a[0, 0, -1] = 0.5  # a non-zero weight on a NaN value still gives NaN there, and only there
    c = context(a, bad)
    assert torch.isnan(c[0, 0]).all() and torch.isfinite(c[0, 1:]).all() and torch.isfinite(c[1]).all()


@pytest.mark.parametrize("case", ["depthwise_conv", "lite", "local_window", "lsh", "max_pooled", "hard_alignment"])
def test_empty_feature_sets_give_empty_results(case):
    from attnsurvey.evaluation.intrinsic import hard_alignment
    from attnsurvey.feature_related.co_attention import max_pooled_affinity_scores
    from attnsurvey.transformer import lite, local, reformer

    X = torch.zeros(2, 0, 4)
    if case == "depthwise_conv":
        assert lite.depthwise_conv(X, torch.ones(4, 3)).shape == (2, 0, 4)
    elif case == "lite":
        assert lite.LiteTransformerBlock(4, 2, 8)(X)[0].shape == (2, 0, 4)
    elif case == "local_window":
        c, a = local.local_window_attention(X, X, X, 1)
        assert c.shape == (2, 0, 4) and a.shape == (2, 0, 3)
    elif case == "lsh":
        assert reformer.lsh_attention(X, X, 2, 2)[0].shape == (2, 0, 4)
    elif case == "max_pooled":
        e1, e2 = max_pooled_affinity_scores(torch.zeros(2, 3, 0))
        assert e2.shape == (2, 0) and torch.equal(e1, torch.full((2, 3), torch.finfo(torch.float32).min))
    else:
        assert hard_alignment(torch.zeros(2, 0)).shape == (2, 0)


def test_lite_block_keeps_padding_out_of_real_tokens():
    from attnsurvey.transformer.lite import LiteTransformerBlock, depthwise_conv

    torch.manual_seed(0)
    blk = LiteTransformerBlock(4, 2, 8).double().eval()
    X = torch.randn(1, 5, 4, dtype=torch.float64)
    kpm = torch.tensor([[True, True, True, False, False]])
    padded = X.clone()
    padded[:, 3:] = NAN
    real = blk(X[:, :3])[0]
    torch.testing.assert_close(blk(padded, key_padding_mask=kpm)[0][:, :3], real)  # was leaking through the conv
    torch.testing.assert_close(blk(X, key_padding_mask=kpm)[0][:, :3], real)
    W = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(depthwise_conv(padded, W, mask=kpm)[:, :3], depthwise_conv(X[:, :3], W))
