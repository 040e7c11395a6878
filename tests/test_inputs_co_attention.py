"""Inputs at the boundary of co-attention: fine-grained bi-directional attention keeps NaN padding out of
the gradients, and a per-set mask with more batch axes than its set is refused."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.feature_related.co_attention import bidirectional_attention
from attnsurvey.general_mechanisms.scoring import dot_score


@pytest.mark.parametrize("pool", ["max", "mean"])
def test_fine_grained_nan_padding_reaches_no_gradient(pool):
    torch.manual_seed(0)
    Q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    K = torch.randn(2, 5, 4, dtype=torch.float64)
    mask_k = torch.tensor([True] * 4 + [False]).expand(2, 5)
    clean = bidirectional_attention(Q, K, dot_score, granularity="fine", pool=pool, mask_k=mask_k)
    K_nan = K.clone()
    K_nan[:, -1] = float("nan")
    out = bidirectional_attention(Q, K_nan, dot_score, granularity="fine", pool=pool, mask_k=mask_k)
    for got, want in zip(out, clean):
        torch.testing.assert_close(got, want)
    sum(t.sum() for t in out).backward()
    assert Q.grad is not None and torch.isfinite(Q.grad).all()


def test_a_mask_with_an_extra_batch_axis_is_refused():
    Q, K = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match="mask_k"):
        bidirectional_attention(Q, K, dot_score, granularity="fine", mask_k=torch.ones(2, 1, 5, dtype=torch.bool))
