"""Tests for structured attention: marginals of a binary linear-chain CRF."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from attnsurvey.general_mechanisms import structured as st_

from .helpers import rand

rand = functools.partial(rand, dtype=torch.float64)  # this module works in float64


@pytest.mark.catalog("extra:structured-attention")
@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_marginals_match_brute_force(n):
    e, A = rand(4, n, seed=n) * 2, rand(2, 2, seed=10 + n)
    log_Z, marg = st_.crf_brute_force(e, A)
    torch.testing.assert_close(st_.crf_log_partition(e, A), log_Z)
    torch.testing.assert_close(st_.crf_marginals(e, A), marg)
    mask = torch.rand(4, n, generator=torch.Generator().manual_seed(n)) > 0.3
    torch.testing.assert_close(st_.crf_marginals(e, A, mask), st_.crf_brute_force(e, A, mask)[1])


@pytest.mark.catalog("extra:structured-attention")
def test_marginals_are_gradient_of_log_partition():
    e = rand(3, 7, seed=1).requires_grad_(True)
    A = rand(2, 2, seed=2)
    (g,) = torch.autograd.grad(st_.crf_log_partition(e, A).sum(), e)
    torch.testing.assert_close(g, st_.crf_marginals(e, A))


@pytest.mark.catalog("extra:structured-attention")
def test_independent_crf_is_sigmoid():
    # with A = 0 the selections are independent: p(z_l = 1) = sigmoid(e_l); the weights need not sum to 1
    e = rand(5, 8, seed=3)
    a = st_.crf_marginals(e, torch.zeros(2, 2, dtype=torch.float64))
    torch.testing.assert_close(a, torch.sigmoid(e))
    # a strong reward for neighbours both selected (A[1, 1] > 0) smooths the weights along the chain
    e = torch.tensor([2.0, -1.0, 2.0], dtype=torch.float64)
    sticky = torch.tensor([[0.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    assert st_.crf_marginals(e, sticky)[1] > 0.5 > torch.sigmoid(e[1])
    # hand computation, n = 2: Z = 1 + e^a + e^b + e^(a + b + A11)
    a_, b_, A11 = 0.3, -0.7, 1.2
    Z = 1 + math.exp(a_) + math.exp(b_) + math.exp(a_ + b_ + A11)
    A = torch.tensor([[0.0, 0.0], [0.0, A11]], dtype=torch.float64)
    m = st_.crf_marginals(torch.tensor([a_, b_], dtype=torch.float64), A)
    assert math.isclose(float(m[0]), (math.exp(a_) + math.exp(a_ + b_ + A11)) / Z, rel_tol=1e-12)


@pytest.mark.catalog("extra:structured-attention")
def test_masked_positions_and_extremes():
    e = torch.tensor([[1e4, -1e4, 1e4, 0.0], [1.0, 2.0, 3.0, 4.0]], dtype=torch.float32)
    A = torch.tensor([[0.0, 0.5], [0.5, 1e4]])
    a = st_.crf_marginals(e, A)
    assert torch.isfinite(a).all() and torch.all((a >= 0) & (a <= 1 + 1e-6))
    torch.testing.assert_close(a[0, [0, 2]], torch.ones(2))
    mask = torch.tensor([[True, True, False, True], [False, False, False, False]])
    x = e.clone().requires_grad_(True)
    a = st_.crf_marginals(x, A, mask)
    assert a[0, 2] == 0 and torch.equal(a[1], torch.zeros(4))
    a.sum().backward()
    assert torch.isfinite(x.grad).all()
    V = torch.ones(2, 4, 3)
    c, _ = st_.structured_attend(e, A, V, mask)
    assert torch.equal(c[1], torch.zeros(3))
    # float16 / bfloat16 run and stay in [0, 1]
    for dt in (torch.float16, torch.bfloat16):
        a = st_.crf_marginals(e[1:].to(dt), torch.zeros(2, 2, dtype=dt))
        torch.testing.assert_close(a.float(), torch.sigmoid(e[1:]), atol=2e-2, rtol=0)


@pytest.mark.catalog("extra:structured-attention")
def test_gradcheck_float64():
    e = rand(2, 5, seed=4).requires_grad_(True)
    A = rand(2, 2, seed=5).requires_grad_(True)
    assert torch.autograd.gradcheck(st_.crf_marginals, (e, A))
    mod = st_.StructuredAttention(3, 3).double()
    c, a = mod(rand(4, 3), rand(4, 6, 3, seed=1), rand(4, 6, 2, seed=2))
    assert c.shape == (4, 2) and a.shape == (4, 6)


@pytest.mark.catalog("extra:structured-attention")
def test_bad_inputs():
    with pytest.raises(ValueError, match=r"A \(CRF transition\) must have shape \(2, 2\)"):
        st_.crf_marginals(torch.zeros(4), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="e is empty: n_f=0"):
        st_.crf_marginals(torch.zeros(2, 0), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="share a dtype"):
        st_.crf_marginals(torch.zeros(4, dtype=torch.float64), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"mask must be a boolean tensor \(True = may attend\), got dtype="):
        st_.crf_marginals(torch.zeros(4), torch.zeros(2, 2), torch.ones(4))
    with pytest.raises(ValueError, match="n_f <= 14"):
        st_.crf_brute_force(torch.zeros(15), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"context \(Eq. 24\) needs n_f of a == n_f of V"):
        st_.structured_attend(torch.zeros(4), torch.zeros(2, 2), torch.zeros(5, 2))
