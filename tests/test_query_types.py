"""Tests for §3.3.1 Types of queries, Eq. (33)-(37), and the self-attention extras."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnsurvey.query_related import types as qt

from .helpers import rand


# ---------------------------------------------------------------- Eq. (33)
@pytest.mark.catalog("eq33")
def test_eq33_queryless_score_matches_loop():
    K, W, b, w = rand(2, 5, 4), rand(3, 4, seed=1), rand(3, seed=2), rand(3, seed=3)
    e = qt.queryless_score(K, W, b, w)
    assert e.shape == (2, 5)
    for i in range(2):
        for l in range(5):
            h = [math.tanh(sum(float(W[j, m] * K[i, l, m]) for m in range(4)) + float(b[j])) for j in range(3)]
            assert math.isclose(float(e[i, l]), sum(float(w[j]) * h[j] for j in range(3)), rel_tol=1e-5, abs_tol=1e-6)


@pytest.mark.catalog("eq33")
def test_eq33_attention_pools_with_masks():
    K, V = rand(2, 5, 4), rand(2, 5, 3, seed=4)
    W, b, w = rand(3, 4, seed=1), rand(3, seed=2), rand(3, seed=3)
    mask = torch.tensor([[True, True, False, True, False], [False] * 5])
    c, a = qt.queryless_attention(K, V, W, b, w, mask)
    e = qt.queryless_score(K, W, b, w)[0, [0, 1, 3]]
    a_ref = torch.softmax(e, -1)
    torch.testing.assert_close(a[0, [0, 1, 3]], a_ref)
    assert torch.equal(a[0, [2, 4]], torch.zeros(2))
    torch.testing.assert_close(c[0], a_ref @ V[0, [0, 1, 3]])
    assert torch.equal(c[1], torch.zeros(3))  # fully masked -> zero context
    mod = qt.QuerylessAttention(4, 3)
    c2, a2 = mod(K, mask)
    ref = qt.queryless_attention(K, K, mod.W.weight, mod.W.bias, mod.w, mask)
    torch.testing.assert_close(c2, ref[0])


@pytest.mark.catalog("eq33")
def test_eq33_rejects_wrong_weights():
    K = rand(5, 4)
    with pytest.raises(ValueError, match=r"W must have shape \(d_w, d_k\) = \(3, 4\), got \(3, 5\)"):
        qt.queryless_score(K, rand(3, 5), rand(3), rand(3))
    with pytest.raises(ValueError, match=r"b must have shape \(d_w,\)"):
        qt.queryless_score(K, rand(3, 4), rand(2), rand(3))
    with pytest.raises(ValueError, match="n_f of K == n_f of V"):
        qt.queryless_attention(K, rand(6, 2), rand(3, 4), rand(3), rand(3))


# ---------------------------------------------------------------- Eq. (34)
@pytest.mark.catalog("eq34")
def test_eq34_learned_query_matches_sdpa_with_one_query():
    K, V, q = rand(3, 6, 4), rand(3, 6, 5, seed=1), rand(4, seed=2)
    c, a = qt.learned_query_attention(K, V, q)
    # SDPA scales by 1/sqrt(d_k); undo it by passing scale=1.
    ref = F_.scaled_dot_product_attention(q.expand(3, 1, 4), K, V, scale=1.0).squeeze(1)
    torch.testing.assert_close(c, ref)
    torch.testing.assert_close(qt.learned_query_score(K, q), torch.einsum("bld,d->bl", K, q))


@pytest.mark.catalog("eq34")
def test_eq34_rejects_wrong_query():
    with pytest.raises(ValueError, match=r"learned query q must have shape \(d_k,\) = \(4,\), got \(3,\)"):
        qt.learned_query_score(rand(5, 4), rand(3))
    with pytest.raises(ValueError, match="K must be a torch.Tensor"):
        qt.learned_query_score([[1.0]], rand(1))


@pytest.mark.catalog("eq34")
def test_eq34_zero_query_is_mean_pooling():
    F = rand(2, 7, 3)
    mod = qt.LearnedQueryAttention(3)  # q starts at zero -> uniform weights
    c, a = mod(F)
    torch.testing.assert_close(c, F.mean(-2))
    torch.testing.assert_close(qt.mean_pool(F), F.mean(-2))
    mask = torch.tensor([[True] * 3 + [False] * 4, [True] * 7])
    torch.testing.assert_close(qt.mean_pool(F, mask)[0], F[0, :3].mean(0))


@pytest.mark.catalog("eq34")
def test_numerics_large_scores_and_fully_masked():
    K = torch.tensor([[[1e4, 0.0], [-1e4, 0.0], [0.0, 0.0]]])
    V = rand(1, 3, 2)
    q = torch.tensor([1.0, 0.0], requires_grad=True)
    c, a = qt.learned_query_attention(K, V, q)
    assert torch.isfinite(a).all() and torch.isfinite(c).all()
    torch.testing.assert_close(a[0], torch.tensor([1.0, 0.0, 0.0]))
    mask = torch.zeros(1, 3, dtype=torch.bool)
    c, a = qt.learned_query_attention(K, V, q, mask)
    assert torch.equal(c, torch.zeros(1, 2))
    c.sum().backward()
    assert torch.isfinite(q.grad).all()
    C, A = qt.self_attention(rand(2, 4, 3) * 1e3, rand(3, 3), rand(3, 3, seed=1), rand(3, 3, seed=2))
    assert torch.isfinite(C).all()


# ---------------------------------------------------------------- Eq. (35) and QKV self-attention
@pytest.mark.catalog("eq35")
def test_eq35_feature_queries_match_linear():
    F = rand(2, 5, 4)
    lin = nn.Linear(4, 3, bias=False)
    torch.testing.assert_close(qt.feature_queries(F, lin.weight), lin(F))
    torch.testing.assert_close(qt.feature_queries(F, lin.weight)[0].T, lin.weight @ F[0].T)  # column form


@pytest.mark.catalog("eq35")
def test_eq35_rejects_wrong_W_Q():
    with pytest.raises(ValueError, match=r"W_Q must have shape \(d_q, d_f\) = \(3, 4\), got \(3, 5\)"):
        qt.feature_queries(rand(5, 4), rand(3, 5))


@pytest.mark.catalog("extra:qkv-self-attention")
def test_qkv_self_attention_matches_sdpa():
    F = rand(2, 6, 8)
    W_Q, W_K, W_V = rand(4, 8, seed=1), rand(4, 8, seed=2), rand(5, 8, seed=3)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    C, A = qt.self_attention(F, W_Q, W_K, W_V, mask)
    ref = F_.scaled_dot_product_attention(F @ W_Q.T, F @ W_K.T, F @ W_V.T, attn_mask=mask)
    torch.testing.assert_close(C, ref)
    assert A.shape == (2, 6, 6)


@pytest.mark.catalog("extra:qkv-self-attention")
def test_qkv_self_attention_matches_loop():
    F = rand(5, 3, dtype=torch.float64)
    W_Q, W_K, W_V = (rand(2, 3, seed=s, dtype=torch.float64) for s in (1, 2, 3))
    C, _ = qt.self_attention(F, W_Q, W_K, W_V)
    for i in range(5):
        q = W_Q @ F[i]
        e = torch.stack([q @ (W_K @ F[j]) / math.sqrt(2) for j in range(5)])
        a = torch.exp(e) / torch.exp(e).sum()
        c = sum(a[j] * (W_V @ F[j]) for j in range(5))
        torch.testing.assert_close(C[i], c)
    mod = qt.SelfAttention(3, 2, 4)
    out, _ = mod(F.float())
    ref, _ = qt.self_attention(F.float(), mod.W_Q.weight, mod.W_K.weight, mod.W_V.weight)
    torch.testing.assert_close(out, ref)


@pytest.mark.catalog("extra:qkv-self-attention")
@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000))
def test_self_attention_is_permutation_equivariant(n, seed):
    F = rand(n, 4, seed=seed)
    W_Q, W_K, W_V = rand(3, 4, seed=seed + 1), rand(3, 4, seed=seed + 2), rand(4, 4, seed=seed + 3)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    C, A = qt.self_attention(F, W_Q, W_K, W_V)
    Cp, Ap = qt.self_attention(F[perm], W_Q, W_K, W_V)
    torch.testing.assert_close(Cp, C[perm], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(Ap, A[perm][:, perm], atol=1e-5, rtol=1e-4)


@pytest.mark.catalog("extra:qkv-self-attention")
def test_positions_break_permutation_equivariance():
    n = 6
    F = rand(n, 4)
    P = rand(n, 4, seed=9)  # any position table: it stays in place while the tokens move
    W = [rand(4, 4, seed=s) for s in (1, 2, 3)]
    perm = torch.tensor([1, 0, 2, 3, 5, 4])
    C, _ = qt.self_attention(F + P, *W)
    Cp, _ = qt.self_attention(F[perm] + P, *W)
    assert not torch.allclose(Cp, C[perm], atol=1e-3)


@pytest.mark.catalog("extra:token2token-source2token")
def test_token2token_shapes():
    F = rand(2, 5, 4)
    W = [rand(3, 4, seed=s) for s in (1, 2, 3)]
    C, A = qt.token2token(F, *W)
    assert C.shape == (2, 5, 3) and A.shape == (2, 5, 5)  # a matrix per sentence
    c, a = qt.source2token(F, rand(3, 4), rand(3, 4, seed=1), rand(3, seed=2))
    assert c.shape == (2, 4) and a.shape == (2, 5)  # a vector per sentence


@pytest.mark.catalog("extra:token2token-source2token")
def test_source2token_matches_loop_and_reduces_to_eq33():
    F = rand(3, 5, 4, dtype=torch.float64)
    W1, W2, w, b = (
        rand(2, 4, seed=1, dtype=torch.float64),
        rand(2, 4, seed=2, dtype=torch.float64),
        rand(2, seed=3, dtype=torch.float64),
        rand(2, seed=4, dtype=torch.float64),
    )
    c, a = qt.source2token(F, W1, W2, w, b)
    for i in range(3):
        s = F[i].mean(0)
        e = torch.stack([w @ torch.tanh(W1 @ s + W2 @ F[i, l] + b) for l in range(5)])
        torch.testing.assert_close(a[i], torch.softmax(e, 0))
        torch.testing.assert_close(c[i], torch.softmax(e, 0) @ F[i])
    c0, a0 = qt.source2token(F, torch.zeros_like(W1), W2, w, b)
    c33, a33 = qt.queryless_attention(F, F, W2, b, w)
    torch.testing.assert_close(a0, a33)
    torch.testing.assert_close(c0, c33)


# ---------------------------------------------------------------- Eq. (36)-(37)
@pytest.mark.catalog("eq36")
def test_eq36_replace_returns_context():
    F, C = rand(2, 3, 4), rand(2, 3, 4, seed=1)
    assert qt.update_replace(F, C) is C
    mod = qt.SelfAttentionUpdate(4, update="replace")
    out, _ = mod(F)
    torch.testing.assert_close(out, mod.attn(F)[0])


@pytest.mark.catalog("eq37")
def test_eq37_residual_norm_matches_layer_norm():
    F, C = rand(2, 3, 6), rand(2, 3, 6, seed=1)
    g, b = rand(6, seed=2), rand(6, seed=3)
    torch.testing.assert_close(qt.update_residual_norm(F, C, g, b), F_.layer_norm(F + C, (6,), g, b))
    out = qt.update_residual_norm(F, C)
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 3), atol=1e-6, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(2, 3), atol=1e-4, rtol=0)


@pytest.mark.catalog("eq37")
def test_eq37_module_matches_functional():
    F = rand(2, 5, 4)
    mod = qt.SelfAttentionUpdate(4, update="residual")
    out, A = mod(F)
    torch.testing.assert_close(out, mod.norm(F + mod.attn(F)[0]))
    with pytest.raises(ValueError, match="update must be 'replace'"):
        qt.SelfAttentionUpdate(4, update="add")


@pytest.mark.catalog("eq36", "eq37")
def test_update_rejects_shape_mismatch():
    with pytest.raises(ValueError, match=r"c with the shape of f_old \(d_v == d_f\), got f_old \(3, 4\), c \(3, 5\)"):
        qt.update_replace(rand(3, 4), rand(3, 5))
    with pytest.raises(ValueError, match="f_old"):
        qt.update_residual_norm(rand(3, 4), rand(2, 4))
    with pytest.raises(ValueError, match=r"gamma must have shape \(d_f,\)"):
        qt.update_residual_norm(rand(3, 4), rand(3, 4), gamma=rand(3))


# ---------------------------------------------------------------- structured self-attention
@pytest.mark.catalog("extra:structured-self-attention")
def test_structured_self_attention_matches_loop():
    H = rand(2, 5, 4, dtype=torch.float64)
    W1, W2 = rand(3, 4, seed=1, dtype=torch.float64), rand(2, 3, seed=2, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    M, A = qt.structured_self_attention(H, W1, W2, mask)
    for i in range(2):
        n = int(mask[i].sum())
        A_ref = torch.softmax(W2 @ torch.tanh(W1 @ H[i, :n].T), dim=1)  # review eq. 12, column form
        torch.testing.assert_close(A[i, :, :n], A_ref)
        torch.testing.assert_close(M[i], A_ref @ H[i, :n])
    assert torch.equal(A[1, :, 3:], torch.zeros(2, 2, dtype=torch.float64))
    mod = qt.StructuredSelfAttention(4, 3, 2)
    M2, A2 = mod(H.float())
    torch.testing.assert_close(A2, qt.structured_self_attention(H.float(), mod.W_s1.weight, mod.W_s2.weight)[1])


@pytest.mark.catalog("extra:structured-self-attention")
def test_redundancy_penalty_hand_values():
    distinct = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    same = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    uniform = torch.full((2, 3), 1 / 3)
    assert float(qt.redundancy_penalty(distinct)) == 0.0
    # A A^T = [[1, 1], [1, 1]] -> off-diagonal ones: 2
    assert math.isclose(float(qt.redundancy_penalty(same)), 2.0)
    # A A^T = 1/3 everywhere -> 2 (1/3 - 1)^2 + 2 (1/3)^2 = 8/9 + 2/9 = 10/9
    assert math.isclose(float(qt.redundancy_penalty(uniform)), 10 / 9, rel_tol=1e-6)
    batch = torch.stack([distinct, same])
    torch.testing.assert_close(qt.redundancy_penalty(batch), torch.tensor([0.0, 2.0]))
    torch.testing.assert_close(qt.StructuredSelfAttention.penalty(batch), torch.tensor(1.0))


@pytest.mark.catalog("extra:structured-self-attention")
def test_structured_rejects_wrong_weights():
    H = rand(5, 4)
    with pytest.raises(ValueError, match=r"W_s1 must have shape \(d_a, d\) = \(3, 4\), got \(3, 6\)"):
        qt.structured_self_attention(H, rand(3, 6), rand(2, 3))
    with pytest.raises(ValueError, match=r"W_s2 must have shape \(r, d_a\) = \(2, 3\), got \(2, 5\)"):
        qt.structured_self_attention(H, rand(3, 4), rand(2, 5))
    with pytest.raises(ValueError, match=r"A must have shape \(\.\.\., r, n\)"):
        qt.redundancy_penalty(rand(3))


@pytest.mark.catalog("extra:structured-self-attention")
def test_gradcheck_float64():
    H = rand(2, 4, 3, dtype=torch.float64).requires_grad_()
    W1 = rand(3, 3, seed=1, dtype=torch.float64).requires_grad_()
    W2 = rand(2, 3, seed=2, dtype=torch.float64).requires_grad_()
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    assert torch.autograd.gradcheck(
        lambda H, W1, W2: qt.redundancy_penalty(qt.structured_self_attention(H, W1, W2, mask)[1]).sum()
        + qt.structured_self_attention(H, W1, W2, mask)[0].sum(),
        (H, W1, W2),
    )
    q = rand(3, seed=5, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda H, q: qt.learned_query_attention(H, H, q)[0], (H, q))
    Wq, Wk, Wv = (rand(3, 3, seed=s, dtype=torch.float64).requires_grad_() for s in (6, 7, 8))
    assert torch.autograd.gradcheck(
        lambda H, Wq, Wk, Wv: qt.update_residual_norm(H, qt.self_attention(H, Wq, Wk, Wv)[0]), (H, Wq, Wk, Wv)
    )
