"""Tests for §3.2.3 attention dimensionality: multi-dimensional attention, Eq. (30)-(32)."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F_
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.data.lookup import featurewise_lookup
from attnsurvey.experiments.general_mechanisms import FeatureLookupModel
from attnsurvey.general_mechanisms import dimensionality as md
from attnsurvey.general_mechanisms.scoring import additive_score
from attnsurvey.general_model import attend

from .helpers import rand

D_Q, D_K, D_V, D_W = 3, 4, 5, 6


rand = functools.partial(rand, dtype=torch.float64)  # this module works in float64


def params(dtype=torch.float64, seed=10):
    return (
        rand(D_W, D_Q, seed=seed, dtype=dtype),
        rand(D_W, D_K, seed=seed + 1, dtype=dtype),
        rand(D_W, D_V, seed=seed + 2, dtype=dtype),
        rand(D_W, seed=seed + 3, dtype=dtype),
    )


@pytest.mark.catalog("eq31")
def test_eq31_scores_match_loop():
    W1, W2, W_d, b = params()
    Q, K = rand(2, 3, D_Q, seed=1), rand(2, 4, D_K, seed=2)
    e = md.multidimensional_scores(Q, K, W1, W2, W_d, b)
    assert e.shape == (2, 3, 4, D_V)
    for bt in range(2):
        for j in range(3):
            for l in range(4):
                # Eq. (31) literally: e_l = W_d^T act(W_1 q + W_2 k_l + b), a d_v-vector
                expected = W_d.T @ torch.tanh(W1 @ Q[bt, j] + W2 @ K[bt, l] + b)
                torch.testing.assert_close(e[bt, j, l], expected)


@pytest.mark.catalog("eq31")
def test_eq31_column_i_is_additive_score_with_w_i():
    W1, W2, W_d, b = params()
    Q, K = rand(3, D_Q, seed=1), rand(4, D_K, seed=2)
    e = md.multidimensional_scores(Q, K, W1, W2, W_d, b)
    for i in range(D_V):
        torch.testing.assert_close(e[..., i], additive_score(Q, K, W1, W2, W_d[:, i], b))


@pytest.mark.catalog("eq32")
def test_eq32_weights_match_loop():
    e = rand(2, 4, 3)  # (n_q, n_f, d_v)
    A = md.multidimensional_align(e)
    for j in range(2):
        for l in range(4):
            for i in range(3):
                denom = sum(math.exp(float(e[j, m, i])) for m in range(4))
                assert math.isclose(float(A[j, l, i]), math.exp(float(e[j, l, i])) / denom, rel_tol=1e-12)


@pytest.mark.catalog("eq32")
@settings(max_examples=40, deadline=None)
@given(
    n_q=st.integers(1, 3),
    n_f=st.integers(1, 6),
    d_v=st.integers(1, 5),
    scale=st.floats(1e-3, 1e4),
    seed=st.integers(0, 10_000),
)
def test_eq32_every_feature_column_sums_to_one(n_q, n_f, d_v, scale, seed):
    e = rand(n_q, n_f, d_v, seed=seed) * scale
    A = md.multidimensional_align(e)
    assert torch.isfinite(A).all()
    assert torch.all(A >= 0)
    # normalised over positions (dim -2) for every feature separately, not over features
    torch.testing.assert_close(A.sum(-2), torch.ones(n_q, d_v, dtype=torch.float64))


@pytest.mark.catalog("eq30")
def test_eq30_context_matches_loop():
    A = torch.softmax(rand(2, 3, 4, D_V), dim=-2)
    V = rand(2, 4, D_V, seed=1)
    c = md.multidimensional_context(A, V)
    assert c.shape == (2, 3, D_V)
    for bt in range(2):
        for j in range(3):
            expected = sum(A[bt, j, l] * V[bt, l] for l in range(4))  # element-wise product, Eq. (30)
            torch.testing.assert_close(c[bt, j], expected)


def test_hand_computed_two_positions():
    # feature 0 should come from position 1, feature 1 from position 0
    e = torch.tensor([[[0.0, 50.0], [50.0, 0.0]]])  # (n_q=1, n_f=2, d_v=2)
    V = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    A = md.multidimensional_align(e)
    torch.testing.assert_close(A[0], torch.tensor([[0.0, 1.0], [1.0, 0.0]]), atol=1e-12, rtol=0)
    torch.testing.assert_close(md.multidimensional_context(A, V), torch.tensor([[3.0, 2.0]]), atol=1e-12, rtol=0)


@pytest.mark.catalog("eq30")
def test_equal_columns_reduce_to_single_dimensional_attention():
    """W_d with d_v equal columns w gives every feature the same weights: plain additive attention (Eq. 3-4)."""
    W1, W2, _, b = params()
    w = rand(D_W, seed=20)
    W_d = w[:, None].expand(D_W, D_V)
    Q, K, V = rand(2, 3, D_Q, seed=1), rand(2, 4, D_K, seed=2), rand(2, 4, D_V, seed=3)
    mask = rand(2, 3, 4, seed=4) > -0.5
    c, A = md.multidimensional_attend(Q, K, V, W1, W2, W_d, b, mask)
    ref_c, ref_a = attend(Q, K, V, mask, score=lambda q, k: additive_score(q, k, W1, W2, w, b))
    torch.testing.assert_close(c, ref_c)
    torch.testing.assert_close(A, ref_a.unsqueeze(-1).expand_as(A))


@pytest.mark.catalog("eq32")
def test_mask_excludes_positions_for_every_feature():
    W1, W2, W_d, b = params()
    Q, K, V = rand(2, 3, D_Q, seed=1), rand(2, 4, D_K, seed=2), rand(2, 4, D_V, seed=3)
    mask = torch.tensor([True, False, True, False]).expand(2, 3, 4)
    c, A = md.multidimensional_attend(Q, K, V, W1, W2, W_d, b, mask)
    assert torch.all(A[:, :, [1, 3], :] == 0)
    torch.testing.assert_close(A.sum(-2), torch.ones(2, 3, D_V, dtype=torch.float64))
    # changing the masked values changes nothing
    V2 = V.clone()
    V2[:, [1, 3]] = 1e6
    torch.testing.assert_close(md.multidimensional_attend(Q, K, V2, W1, W2, W_d, b, mask)[0], c)
    # a (n_f,) padding mask broadcasts too
    c_b, _ = md.multidimensional_attend(Q, K, V, W1, W2, W_d, b, torch.tensor([True, False, True, False]))
    torch.testing.assert_close(c_b, c)


@pytest.mark.catalog("eq30")
def test_fully_masked_query_gives_zero_context():
    W1, W2, W_d, b = params()
    Q = rand(2, 3, D_Q, seed=1).requires_grad_()
    K, V = rand(2, 4, D_K, seed=2), rand(2, 4, D_V, seed=3)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, 2] = False
    c, A = md.multidimensional_attend(Q, K, V, W1, W2, W_d, b, mask)
    assert torch.equal(A[1, 2], torch.zeros(4, D_V, dtype=torch.float64))
    assert torch.equal(c[1, 2], torch.zeros(D_V, dtype=torch.float64))
    c.sum().backward()
    assert torch.isfinite(Q.grad).all()


def test_huge_scores_stay_finite():
    e = torch.tensor([[[1e4, -1e4], [-1e4, 1e4], [0.0, 0.0]]])
    A = md.multidimensional_align(e)
    assert torch.isfinite(A).all()
    torch.testing.assert_close(A[0, :, 0], torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(A[0, :, 1], torch.tensor([0.0, 1.0, 0.0]))
    A = md.multidimensional_align(e, torch.tensor([[False, True, True]]))
    torch.testing.assert_close(A[0, :, 0], torch.tensor([0.0, 0.0, 1.0]))


def test_module_matches_functional():
    torch.manual_seed(0)
    m = md.MultiDimensionalAttention(D_Q, D_K, D_V, D_W).double()
    Q, K, V = rand(2, 3, D_Q, seed=1), rand(2, 4, D_K, seed=2), rand(2, 4, D_V, seed=3)
    c, A = m(Q, K, V)
    ref = md.multidimensional_attend(Q, K, V, m.W1.weight, m.W2.weight, m.W_d, m.W2.bias)
    torch.testing.assert_close(c, ref[0])
    torch.testing.assert_close(A, ref[1])
    assert A.shape == (2, 3, 4, D_V)


def test_bad_inputs_are_rejected():
    W1, W2, W_d, b = params()
    Q, K, V = rand(3, D_Q, seed=1), rand(4, D_K, seed=2), rand(4, D_V, seed=3)
    with pytest.raises(ValueError, match=r"W_2 must have shape \(d_w, d_k\) = \(6, 4\), got \(6, 3\)"):
        md.multidimensional_scores(Q, K, W1, W2[:, :3], W_d, b)
    with pytest.raises(ValueError, match=r"W_d must have shape \(d_w, d_v\)"):
        md.multidimensional_scores(Q, K, W1, W2, W_d[:, 0], b)
    with pytest.raises(ValueError, match=r"b must have shape \(d_w,\)"):
        md.multidimensional_scores(Q, K, W1, W2, W_d, b[:2])
    with pytest.raises(ValueError, match="d_v of W_d == d_v of V, got d_v of W_d=5, d_v of V=2"):
        md.multidimensional_attend(Q, K, V[:, :2], W1, W2, W_d, b)
    with pytest.raises(ValueError, match="n_f of K == n_f of V, got n_f of K=4, n_f of V=3"):
        md.multidimensional_attend(Q, K, V[:3], W1, W2, W_d, b)
    with pytest.raises(ValueError, match="n_f of A == n_f of V"):
        md.multidimensional_context(torch.ones(1, 3, D_V, dtype=torch.float64), V)
    with pytest.raises(ValueError, match=r"must be a boolean tensor \(True = may attend\), got dtype="):
        md.multidimensional_align(rand(1, 4, 2), torch.ones(1, 4))
    with pytest.raises(ValueError, match="does not broadcast to the scores"):
        md.multidimensional_align(rand(1, 4, 2), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"e must have shape \(\.\.\., n_q, n_f, d_v\)"):
        md.multidimensional_align(rand(4, 2))
    with pytest.raises(ValueError, match="K is empty: n_f=0"):
        md.multidimensional_attend(Q, K[:0], V[:0], W1, W2, W_d, b)
    with pytest.raises(ValueError, match="V is empty: d_v=0"):
        md.multidimensional_attend(Q, K, V[:, :0], W1, W2, W_d[:, :0], b)
    with pytest.raises(ValueError, match="W_d must have the dtype of Q"):
        md.multidimensional_scores(Q, K, W1, W2, W_d.float(), b)


def test_gradcheck_float64():
    W1, W2, W_d, b = (p.requires_grad_() for p in params())
    Q = rand(2, D_Q, seed=1).requires_grad_()
    K, V = rand(3, D_K, seed=2).requires_grad_(), rand(3, D_V, seed=3).requires_grad_()
    mask = torch.tensor([[True, False, True], [False, False, False]])
    f = lambda *x: md.multidimensional_attend(*x, mask=mask)[0]
    assert torch.autograd.gradcheck(f, (Q, K, V, W1, W2, W_d, b))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_matches_float32(dtype):
    p32 = [p.float() for p in params()]
    Q, K, V = (rand(3, D_Q, seed=1).float(), rand(4, D_K, seed=2).float(), rand(4, D_V, seed=3).float())
    ref_c, ref_A = md.multidimensional_attend(Q, K, V, *p32)
    c, A = md.multidimensional_attend(Q.to(dtype), K.to(dtype), V.to(dtype), *[p.to(dtype) for p in p32])
    assert c.dtype == dtype
    torch.testing.assert_close(A.float(), ref_A, atol=0.03, rtol=0.05)
    torch.testing.assert_close(c.float(), ref_c, atol=0.05, rtol=0.05)


@pytest.mark.catalog("extra:multidimensional-task")
def test_featurewise_lookup_answer_by_loop():
    g = torch.Generator().manual_seed(0)
    q, K, V, y = featurewise_lookup(30, n_f=4, d_v=3, generator=g)
    assert q.shape == (30, 12) and K.shape == (30, 4, 4) and V.shape == (30, 4, 3) and y.shape == (30, 3)
    for bt in range(30):
        recipe = q[bt].reshape(3, 4).argmax(-1)  # tau_i for every feature i
        tags = K[bt].argmax(-1)
        for i in range(3):
            l = int((tags == recipe[i]).nonzero())
            assert float(y[bt, i]) == float(V[bt, l, i] > 0)
    with pytest.raises(ValueError, match="d_v must be >= 1"):
        featurewise_lookup(2, d_v=0)


@pytest.mark.catalog("extra:multidimensional-task")
def test_multidimensional_beats_single_dimensional(one_thread):
    """The feature-wise task: multi-dimensional attention solves it, single-dimensional cannot."""
    from attnsurvey.training import seed_everything, train

    g = seed_everything(0)
    test = featurewise_lookup(1000, generator=g)
    batches = [featurewise_lookup(64, generator=g) for _ in range(200)]
    acc = {}
    for multi in (False, True):
        torch.manual_seed(0)
        model = FeatureLookupModel(16, 4, 4, d_w=32, multi_dimensional=multi)
        loss = lambda m, bt: F_.binary_cross_entropy_with_logits(m(*bt[:3])[0], bt[3])
        train(model, loss, batches, lr=1e-2)
        with torch.no_grad():
            logits, A = model(*test[:3])
        acc[multi] = float(((logits > 0).float() == test[3]).float().mean())
        torch.testing.assert_close(A.sum(-2), torch.ones(1000, 4))
        if not multi:  # one weight per position: every feature column is identical
            torch.testing.assert_close(A, A[..., :1].expand_as(A))
    assert acc[True] > 0.95
    # with one weight per item, only features whose item gets most of the weight are read reliably
    assert acc[False] < 0.85
