"""sparsemax / entmax options as in the ``entmax`` package, with that package as the oracle.

Cases of our own design: ties, a support larger than ``k``, a single dominant score,
large magnitudes, several rows and axes, gradients.
"""

from __future__ import annotations

import entmax
import pytest
import torch

from attnsurvey.general_mechanisms import sparse_maps as sm

CASES = {
    "ties": torch.tensor([[1.0, 1.0, 1.0, 0.0, -2.0, 0.5]], dtype=torch.float64),
    "flat (support > k)": torch.linspace(0.0, 0.1, 12, dtype=torch.float64)[None],
    "dominant": torch.tensor([[9.0, 0.0, 0.1, -0.1, 0.2]], dtype=torch.float64),
    "large": torch.tensor([[1e4, 1e4 - 0.5, -1e4, 3.0]], dtype=torch.float64),
    "batch": torch.arange(60, dtype=torch.float64).reshape(3, 4, 5).sin() * 4,
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("k", [1, 2, 3, None])
def test_partial_sort_k_matches_entmax(name, k):
    X = CASES[name]
    torch.testing.assert_close(sm.sparsemax(X, k=k), entmax.sparsemax(X, k=k), rtol=0, atol=1e-12)
    torch.testing.assert_close(sm.entmax15(X, k=k), entmax.entmax15(X, k=k), rtol=0, atol=1e-12)
    torch.testing.assert_close(sm.sparsemax(X, k=k), sm.sparsemax(X), rtol=0, atol=0)  # k never changes the result


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("alpha", [1.1, 1.5, 2.0, 2.5])
def test_entmax_bisect_matches_entmax(name, alpha):
    X = CASES[name].clone().requires_grad_(True)
    X_ref = CASES[name].clone().requires_grad_(True)
    a, ref = sm.entmax_bisect(X, alpha), entmax.entmax_bisect(X_ref, alpha)
    torch.testing.assert_close(a, ref, rtol=0, atol=1e-10)
    w = torch.randn(a.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    (a * w).sum().backward()
    (ref * w).sum().backward()
    torch.testing.assert_close(X.grad, X_ref.grad, rtol=0, atol=1e-8)


def test_entmax_bisect_special_alphas_and_masks():
    X = CASES["batch"]
    torch.testing.assert_close(sm.entmax_bisect(X, 1.0), torch.softmax(X, -1))
    torch.testing.assert_close(sm.entmax_bisect(X, 2.0), sm.sparsemax(X), rtol=0, atol=1e-10)
    torch.testing.assert_close(sm.entmax_bisect(X, 1.5), sm.entmax15(X), rtol=0, atol=1e-10)
    mask = X > -1  # some rows lose entries; masked entries inert and zero
    bad = torch.where(mask, X, torch.full_like(X, float("nan")))
    torch.testing.assert_close(sm.entmax_bisect(bad, 1.5, mask), sm.entmax15(X, mask), rtol=0, atol=1e-10)
    assert torch.equal(sm.entmax_bisect(X, 1.5, torch.zeros_like(mask)), torch.zeros_like(X))
    for alpha in (0.0, -0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            sm.entmax_bisect(X, alpha)
    with pytest.raises(ValueError, match="k"):
        sm.sparsemax(X, k=0)


@pytest.mark.parametrize("name", list(CASES))
def test_losses_match_entmax(name):
    X = CASES[name].reshape(-1, CASES[name].shape[-1])
    y = torch.arange(X.shape[0]) % X.shape[-1]
    for ours, theirs in ((sm.sparsemax_loss, entmax.sparsemax_loss), (sm.entmax15_loss, entmax.entmax15_loss)):
        Xa, Xb = X.clone().requires_grad_(True), X.clone().requires_grad_(True)
        la, lb = ours(Xa, y), theirs(Xb, y)
        torch.testing.assert_close(la, lb, rtol=1e-10, atol=1e-10)
        la.sum().backward()
        lb.sum().backward()
        torch.testing.assert_close(Xa.grad, Xb.grad, rtol=0, atol=1e-10)
    for alpha in (1.25, 1.5, 2.0):
        torch.testing.assert_close(
            sm.entmax_bisect_loss(X, y, alpha), entmax.entmax_bisect_loss(X, y, alpha), rtol=1e-8, atol=1e-8
        )
    ce = torch.nn.functional.cross_entropy(X, y, reduction="none")
    torch.testing.assert_close(sm.entmax_bisect_loss(X, y, 1.0), ce)  # alpha = 1: the softmax cross-entropy
    assert (sm.sparsemax_loss(torch.tensor([[5.0, 0.0]]), torch.tensor([0])) == 0).all()  # one-hot on y: zero loss


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0])
def test_entmax_bisect_gradient_matches_finite_differences(alpha):
    X = torch.tensor([[0.3, 1.2, -0.4, 0.9, 0.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: sm.entmax_bisect(x, alpha, n_iter=80), (X,), eps=1e-6, atol=1e-5)


def test_alpha_entmax_is_a_registered_alignment():
    from attnsurvey.attention import ALIGNMENTS, alpha_entmax_align, attend

    g = torch.Generator().manual_seed(3)
    Q, K, V = (torch.randn(2, n, 4, generator=g, dtype=torch.float64) for n in (3, 5, 5))
    mask = torch.rand(2, 3, 5, generator=g) > 0.3
    _, a = attend(Q, K, V, mask, align="alpha-entmax")
    _, a15 = attend(Q, K, V, mask, align="entmax15")
    torch.testing.assert_close(a, a15, rtol=0, atol=1e-10)
    e = torch.randn(4, 6, generator=g, dtype=torch.float64)
    torch.testing.assert_close(alpha_entmax_align(1.3)(e), entmax.entmax_bisect(e, 1.3), rtol=0, atol=1e-10)
    assert "alpha-entmax" in ALIGNMENTS
