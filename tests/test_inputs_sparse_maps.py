"""Inputs at the boundary of the sparse maps: alpha-entmax for 0 < alpha < 1 against the ``entmax`` package,
and a rank-2 mask whose first axis could be the batch or the queries refused."""

from __future__ import annotations

import entmax
import pytest
import torch

from attnsurvey.general_mechanisms import sparse_maps as sm


@pytest.mark.parametrize("alpha", [0.2, 0.5, 0.75, 0.95])
def test_alpha_below_one_matches_entmax_values_and_gradients(alpha):
    torch.manual_seed(0)
    e = torch.randn(3, 4, 7, dtype=torch.float64, requires_grad=True)
    a = sm.entmax_bisect(e, alpha)
    ref = entmax.entmax_bisect(e, alpha, n_iter=100)
    torch.testing.assert_close(a, ref, rtol=0, atol=1e-10)
    assert bool((a > 0).all())  # denser than the softmax: every position keeps weight
    g = torch.randn_like(a)
    (ga,) = torch.autograd.grad((a * g).sum(), e)
    (gr,) = torch.autograd.grad((ref * g).sum(), e)
    torch.testing.assert_close(ga, gr, rtol=0, atol=1e-10)


def test_alpha_below_one_with_masks():
    e = torch.randn(2, 6, dtype=torch.float64)
    mask = torch.tensor([True] * 4 + [False] * 2)
    bad = e.clone()
    bad[:, 4:] = float("nan")
    a = sm.entmax_bisect(bad, 0.5, mask)
    torch.testing.assert_close(a[:, :4], entmax.entmax_bisect(e[:, :4], 0.5, n_iter=100), rtol=0, atol=1e-10)
    assert torch.equal(a[:, 4:], torch.zeros(2, 2, dtype=torch.float64))
    assert torch.equal(sm.entmax_bisect(e, 0.5, torch.zeros(6, dtype=torch.bool)), torch.zeros_like(e))
    for alpha in (0.0, -1.0):
        with pytest.raises(ValueError, match="alpha > 0"):
            sm.entmax_bisect(e, alpha)


@pytest.mark.parametrize("fn", [sm.sparsemax, sm.entmax15, sm.entmax_bisect])
def test_ambiguous_rank2_mask_is_refused(fn):
    e = torch.randn(3, 3, 5)  # B == n_q == 3
    with pytest.raises(ValueError, match="ambiguous"):
        fn(e, mask=torch.ones(3, 5, dtype=torch.bool))
    fn(e, mask=torch.ones(1, 3, 5, dtype=torch.bool))  # the same mask with its batch axis is fine
