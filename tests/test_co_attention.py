"""Tests for §3.1.1 co-attention, Eq. (6)-(16), and bi-directional attention."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.feature_related import co_attention as ca
from attnsurvey.general_mechanisms.scoring import additive_score, dot_score

from .helpers import rand


def additive_fn(d_q, d_k, d_w=5, seed=0, dtype=torch.float32):
    """A fixed additive score (Eq. 6) as a score(Q, K) callable, with its weights."""
    W1, W2 = rand(d_w, d_q, seed=seed, dtype=dtype), rand(d_w, d_k, seed=seed + 1, dtype=dtype)
    w, b = rand(d_w, seed=seed + 2, dtype=dtype), rand(d_w, seed=seed + 3, dtype=dtype)
    return (lambda Q, K: additive_score(Q, K, W1, W2, w, b)), (W1, W2, w, b)


def softmax_list(xs):
    m = max(xs)
    ex = [math.exp(x - m) for x in xs]
    s = sum(ex)
    return [v / s for v in ex]


# ---------------------------------------------------------------- Eq. (6), (7)


@pytest.mark.catalog("eq6")
def test_eq6_additive_score_hand_computed():
    # q = [1, 0], k = [0, 2]; W1 = I, W2 = I, b = [0, 0], w = [1, -1], act = identity
    q, k = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]])
    I2 = torch.eye(2)
    e = additive_score(q, k, I2, I2, torch.tensor([1.0, -1.0]), torch.zeros(2), act=lambda x: x)
    assert e.item() == pytest.approx(1.0 - 2.0)
    # with tanh: w^T tanh([1, 2]) = tanh(1) - tanh(2)
    e = additive_score(q, k, I2, I2, torch.tensor([1.0, -1.0]), torch.zeros(2))
    assert e.item() == pytest.approx(math.tanh(1.0) - math.tanh(2.0), rel=1e-6)


@pytest.mark.catalog("eq7")
def test_eq7_queryless_score_loop():
    K, W, w, b = rand(2, 4, 3), rand(5, 3, seed=1), rand(5, seed=2), rand(5, seed=3)
    e = ca.queryless_additive_score(K, W, w, b)
    assert e.shape == (2, 4)
    for n in range(2):
        for l in range(4):
            h = [math.tanh(sum(float(W[i, j]) * float(K[n, l, j]) for j in range(3)) + float(b[i])) for i in range(5)]
            assert float(e[n, l]) == pytest.approx(sum(float(w[i]) * h[i] for i in range(5)), abs=1e-5)
    with pytest.raises(ValueError, match=r"W\^\(1\) must have shape \(d_w, d_k\^\(1\)\)"):
        ca.queryless_additive_score(K, rand(5, 4), w, b)


@pytest.mark.catalog("eq6", "eq7")
def test_eq6_eq7_query_absorbed_into_bias():
    """Eq. (7) is Eq. (6) with a constant query: W_1 q moves into the bias."""
    q, K = rand(6, seed=4), rand(3, 7, 4, seed=5)
    W1, W2, w, b = rand(5, 6, seed=6), rand(5, 4, seed=7), rand(5, seed=8), rand(5, seed=9)
    e6 = additive_score(q.expand(3, 1, 6), K, W1, W2, w, b).squeeze(-2)
    e7 = ca.queryless_additive_score(K, W2, w, ca.absorbed_query_bias(q, W1, b))
    torch.testing.assert_close(e6, e7)


# ---------------------------------------------------------------- Eq. (7)-(9)


@pytest.mark.catalog("eq8", "eq9")
def test_eq7_to_eq9_alternating_matches_step_by_step():
    K1, V1, K2, V2 = rand(4, 3, seed=1), rand(4, 2, seed=2), rand(5, 6, seed=3), rand(5, 3, seed=4)
    W, w, b = rand(7, 3, seed=5), rand(7, seed=6), rand(7, seed=7)
    score0 = lambda K: ca.queryless_additive_score(K, W, w, b)
    score2, _ = additive_fn(2, 6, seed=10)  # query c^(0) (d_v1=2), keys K^(2)
    score1, _ = additive_fn(3, 3, seed=20)  # query c^(2) (d_v2=3), keys K^(1)
    out = ca.alternating_co_attention(K1, V1, K2, V2, score0, score2, score1)
    # step by step with Python lists
    a0 = softmax_list([float(x) for x in score0(K1)])
    c0 = [sum(a0[l] * float(V1[l, j]) for l in range(4)) for j in range(2)]
    e2 = [float(score2(torch.tensor([c0]), K2[l : l + 1])) for l in range(5)]
    a2 = softmax_list(e2)
    c2 = [sum(a2[l] * float(V2[l, j]) for l in range(5)) for j in range(3)]
    e1 = [float(score1(torch.tensor([c2]), K1[l : l + 1])) for l in range(4)]
    a1 = softmax_list(e1)
    c1 = [sum(a1[l] * float(V1[l, j]) for l in range(4)) for j in range(2)]
    for got, want in ((out.a0, a0), (out.c0, c0), (out.a2, a2), (out.c2, c2), (out.a1, a1), (out.c1, c1)):
        torch.testing.assert_close(got, torch.tensor(want), rtol=1e-5, atol=1e-6)


@pytest.mark.catalog("eq8", "eq9")
def test_alternating_module_shapes_and_sharing():
    torch.manual_seed(0)
    m = ca.AlternatingCoAttention(d_f1=6, d_f2=4, d_w=8, d_k1=5, d_k2=3)
    F1, F2 = rand(2, 9, 6), rand(2, 4, 4, seed=1)
    mask2 = torch.tensor([[True, True, True, False], [True, True, True, True]])
    out = m(F1, F2, mask2=mask2)
    assert out.c1.shape == (2, 5) and out.c2.shape == (2, 3) and out.c0.shape == (2, 5)
    assert out.a1.shape == (2, 9) and out.a2.shape == (2, 4)
    assert out.a2[0, 3] == 0.0
    torch.testing.assert_close(out.a1.sum(-1), torch.ones(2))
    # Eq. (9) shares W^(1), b^(1), w^(1) with Eq. (7): with W_q^(1) = 0 it IS Eq. (7)
    with torch.no_grad():
        m.W_q1.weight.zero_()
        out = m(F1, F2, mask2=mask2)
    torch.testing.assert_close(out.a1, out.a0)
    # padding in set 2 must not change anything
    F2b = F2.clone()
    F2b[0, 3] = 100.0
    out_b = m(F1, F2b, mask2=mask2)
    torch.testing.assert_close(out_b.c1, out.c1)
    with pytest.raises(ValueError, match=r"d_f\^\(2\) of F\^\(2\) == d_f\^\(2\) of the module"):
        m(F1, rand(2, 4, 5))


# ---------------------------------------------------------------- Eq. (10)-(11)


@pytest.mark.catalog("eq10")
def test_eq10_mean_key_with_mask():
    K = torch.tensor([[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]])
    torch.testing.assert_close(ca.mean_key(K), torch.tensor([104.0 / 3, 106.0 / 3]))
    mask = torch.tensor([True, True, False])
    torch.testing.assert_close(ca.mean_key(K, mask), torch.tensor([2.0, 3.0]))
    torch.testing.assert_close(ca.mean_key(K, torch.zeros(3, dtype=torch.bool)), torch.zeros(2))
    with pytest.raises(ValueError, match="empty"):
        ca.mean_key(torch.zeros(0, 2))
    with pytest.raises(ValueError, match="boolean"):
        ca.mean_key(K, torch.ones(3))


@pytest.mark.catalog("eq11")
def test_eq11_interactive_matches_loop():
    K1, V1, K2, V2 = rand(2, 4, 3, seed=1), rand(2, 4, 2, seed=2), rand(2, 6, 5, seed=3), rand(2, 6, 4, seed=4)
    s1, _ = additive_fn(5, 3, seed=10)  # query k_bar^(2), keys K^(1)
    s2, _ = additive_fn(3, 5, seed=20)  # query k_bar^(1), keys K^(2)
    out = ca.interactive_co_attention(K1, V1, K2, V2, s1, s2)
    for n in range(2):
        kb1, kb2 = K1[n].sum(0) / 4, K2[n].sum(0) / 6
        a1 = softmax_list([float(s1(kb2[None], K1[n, l : l + 1])) for l in range(4)])
        a2 = softmax_list([float(s2(kb1[None], K2[n, l : l + 1])) for l in range(6)])
        torch.testing.assert_close(out.a1[n], torch.tensor(a1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out.a2[n], torch.tensor(a2), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out.c1[n], sum(a1[l] * V1[n, l] for l in range(4)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"n_f\^\(2\) of K\^\(2\) == n_f\^\(2\) of V\^\(2\)"):
        ca.interactive_co_attention(K1, V1, K2, V2[:, :5], s1, s2)


@pytest.mark.catalog("eq11")
def test_interactive_is_permutation_invariant():
    torch.manual_seed(1)
    m = ca.InteractiveCoAttention(5, 3, d_w=6)
    F1, F2 = rand(4, 5, seed=1), rand(7, 3, seed=2)
    out = m(F1, F2)
    p1, p2 = torch.randperm(4), torch.randperm(7)
    out_p = m(F1[p1], F2[p2])
    torch.testing.assert_close(out_p.c1, out.c1)
    torch.testing.assert_close(out_p.c2, out.c2)
    torch.testing.assert_close(out_p.a1, out.a1[p1])
    torch.testing.assert_close(out_p.a2, out.a2[p2])


# ---------------------------------------------------------------- Eq. (12)-(13)


@pytest.mark.catalog("eq12")
def test_eq12_affinity_entry_by_entry():
    K1, K2, W_A = rand(4, 3, seed=1), rand(5, 2, seed=2), rand(3, 2, seed=3)
    A = ca.affinity_matrix(K1, K2, W_A)
    assert A.shape == (4, 5)
    for i in range(4):
        for j in range(5):
            s = sum(float(K1[i, p]) * float(W_A[p, r]) * float(K2[j, r]) for p in range(3) for r in range(2))
            assert float(A[i, j]) == pytest.approx(math.tanh(s), abs=1e-6)
    with pytest.raises(ValueError, match=r"W_A must have shape \(d_k\^\(1\), d_k\^\(2\)\) = \(3, 2\), got \(2, 3\)"):
        ca.affinity_matrix(K1, K2, W_A.T)
    with pytest.raises(ValueError, match="do not broadcast"):
        ca.affinity_matrix(rand(2, 4, 3), rand(3, 5, 2), W_A)


@pytest.mark.catalog("eq12")
def test_eq12_permutation_equivariance():
    K1, K2, W_A = rand(2, 4, 3, seed=1), rand(2, 6, 5, seed=2), rand(3, 5, seed=3)
    A = ca.affinity_matrix(K1, K2, W_A)
    p1, p2 = torch.randperm(4, generator=torch.Generator().manual_seed(0)), torch.randperm(6)
    torch.testing.assert_close(ca.affinity_matrix(K1[:, p1], K2[:, p2], W_A), A[:, p1][:, :, p2])
    # swapping the sets transposes A (with W_A transposed)
    torch.testing.assert_close(ca.affinity_matrix(K2, K1, W_A.T), A.transpose(-1, -2))


@pytest.mark.catalog("eq13")
def test_eq13_concat_affinity_brute_force():
    K1, K2, w_A = rand(2, 4, 3, seed=1), rand(2, 5, 3, seed=2), rand(9, seed=3)
    A = ca.concat_affinity_matrix(K1, K2, w_A)
    for n in range(2):
        for i in range(4):
            for j in range(5):
                x = torch.cat([K1[n, i], K2[n, j], K1[n, i] * K2[n, j]])
                assert float(A[n, i, j]) == pytest.approx(float(w_A @ x), abs=1e-5)
    m = ca.Affinity(3, 3, kind="concat")
    torch.testing.assert_close(m(K1, K2), ca.concat_affinity_matrix(K1, K2, m.w_A))


@pytest.mark.catalog("eq13")
def test_eq13_needs_equal_key_sizes():
    with pytest.raises(ValueError, match=r"Eq. 13\) needs d_k\^\(1\) == d_k\^\(2\), got d_k\^\(1\)=3, d_k\^\(2\)=4"):
        ca.concat_affinity_matrix(rand(4, 3), rand(5, 4), rand(9))
    with pytest.raises(ValueError, match=r"w_A must have shape \(3 d_k,\)"):
        ca.concat_affinity_matrix(rand(4, 3), rand(5, 3), rand(6))
    with pytest.raises(ValueError, match="d_k\\^\\(1\\) == d_k\\^\\(2\\)"):
        ca.Affinity(3, 4, kind="concat")
    with pytest.raises(ValueError, match="affinity kind"):
        ca.Affinity(3, 3, kind="cosine")


# ---------------------------------------------------------------- Eq. (14)-(16)


@pytest.mark.catalog("eq14", "eq15")
def test_eq14_eq15_match_column_form_loop():
    """Eq. (14)-(15) in the survey's column form, element by element."""
    n1, n2, d1, d2, dw = 3, 4, 2, 5, 6
    K1, K2, A = rand(n1, d1, seed=1), rand(n2, d2, seed=2), rand(n1, n2, seed=3)
    W1, W2, w1, w2 = rand(dw, d1, seed=4), rand(dw, d2, seed=5), rand(dw, seed=6), rand(dw, seed=7)
    e1, e2 = ca.parallel_co_attention_scores(K1, K2, A, W1, W2, w1, w2)
    C1, C2 = K1.T, K2.T  # survey's column layout: d_k x n_f
    M2 = W2 @ C2  # d_w x n2
    M1 = W1 @ C1  # d_w x n1
    for i in range(n1):
        # column i of W_2 K^(2) A^T + W_1 K^(1)
        col = [sum(float(M2[r, j]) * float(A[i, j]) for j in range(n2)) + float(M1[r, i]) for r in range(dw)]
        assert float(e1[i]) == pytest.approx(sum(float(w1[r]) * math.tanh(col[r]) for r in range(dw)), abs=1e-5)
    for j in range(n2):
        col = [sum(float(M1[r, i]) * float(A[i, j]) for i in range(n1)) + float(M2[r, j]) for r in range(dw)]
        assert float(e2[j]) == pytest.approx(sum(float(w2[r]) * math.tanh(col[r]) for r in range(dw)), abs=1e-5)
    with pytest.raises(ValueError, match=r"affinity matrix A must have shape"):
        ca.parallel_co_attention_scores(K1, K2, A.T, W1, W2, w1, w2)
    with pytest.raises(ValueError, match=r"W_2 must have shape \(d_w, d_k\^\(2\)\)"):
        ca.parallel_co_attention_scores(K1, K2, A, W1, W1, w1, w2)


@pytest.mark.catalog("eq15")
def test_parallel_scores_ignore_padding():
    torch.manual_seed(2)
    m = ca.ParallelCoAttention(4, 3, d_w=5)
    F1, F2 = rand(1, 5, 4, seed=1), rand(1, 6, 3, seed=2)
    mask2 = torch.tensor([[True] * 4 + [False] * 2])
    out = m(F1, F2, mask2=mask2)
    out_trunc = m(F1, F2[:, :4])
    torch.testing.assert_close(out.c1, out_trunc.c1)
    torch.testing.assert_close(out.c2, out_trunc.c2)
    torch.testing.assert_close(out.a2[:, :4], out_trunc.a2)
    assert torch.all(out.a2[:, 4:] == 0)


@pytest.mark.catalog("eq16")
def test_eq16_max_pooling_loop_and_masks():
    A = rand(2, 3, 4, seed=5)
    e1, e2 = ca.max_pooled_affinity_scores(A)
    for n in range(2):
        for i in range(3):
            assert float(e1[n, i]) == max(float(A[n, i, j]) for j in range(4))
        for j in range(4):
            assert float(e2[n, j]) == max(float(A[n, i, j]) for i in range(3))
    A = torch.tensor([[0.1, 0.9], [0.5, 0.2], [0.3, 0.4]])
    e1, e2 = ca.max_pooled_affinity_scores(A, mask2=torch.tensor([True, False]))
    torch.testing.assert_close(e1, torch.tensor([0.1, 0.5, 0.3]))
    e1, e2 = ca.max_pooled_affinity_scores(A, mask1=torch.tensor([True, False, True]))
    torch.testing.assert_close(e2, torch.tensor([0.3, 0.9]))
    # a hand case: V1 = identity rows, so c1 = a1 = softmax(row maxima)
    out = ca.max_pooled_co_attention(torch.eye(3), torch.eye(2), A)
    torch.testing.assert_close(out.c1, torch.softmax(torch.tensor([0.9, 0.5, 0.4]), -1))
    with pytest.raises(ValueError, match=r"mask1 must have shape \(\.\.\., n_f\^\(1\)\)"):
        ca.max_pooled_affinity_scores(A, mask1=torch.ones(2, dtype=torch.bool))


@pytest.mark.catalog("eq16")
def test_large_scores_stay_finite():
    A = torch.tensor([[1e4, -1e4], [-1e4, -1e4]])
    out = ca.max_pooled_co_attention(rand(2, 3), rand(2, 3, seed=1), A)
    assert all(torch.isfinite(t).all() for t in out)
    torch.testing.assert_close(out.a1, torch.tensor([1.0, 0.0]))
    # fully masked second set: zero weights, zero context, no NaN
    out = ca.max_pooled_co_attention(rand(2, 3), rand(2, 3, seed=1), A, mask2=torch.zeros(2, dtype=torch.bool))
    assert torch.equal(out.c2, torch.zeros(3)) and torch.isfinite(out.c1).all()
    K1, K2 = rand(3, 4) * 1e4, rand(5, 4, seed=1) * 1e4
    e = ca.parallel_co_attention(
        K1,
        K1,
        K2,
        K2,
        ca.affinity_matrix(K1, K2, torch.eye(4)),
        torch.eye(4),
        torch.eye(4),
        torch.ones(4),
        torch.ones(4),
    )
    assert all(torch.isfinite(t).all() for t in e)


@pytest.mark.catalog("eq14")
def test_parallel_co_attention_gradcheck():
    d = dict(dtype=torch.float64)
    K1, K2 = rand(3, 2, seed=1, **d).requires_grad_(), rand(4, 3, seed=2, **d).requires_grad_()
    W_A, W1, W2 = rand(2, 3, seed=3, **d), rand(5, 2, seed=4, **d), rand(5, 3, seed=5, **d)
    w1, w2 = rand(5, seed=6, **d), rand(5, seed=7, **d)

    def f(K1, K2):
        A = ca.affinity_matrix(K1, K2, W_A)
        out = ca.parallel_co_attention(K1, K1, K2, K2, A, W1, W2, w1, w2)
        return torch.cat([out.c1, out.c2])

    assert torch.autograd.gradcheck(f, (K1, K2))
    w_A = rand(6, seed=8, **d)

    def g(K1, K2):  # Eq. (13) needs equal key sizes: use the first two columns of K2
        A = ca.concat_affinity_matrix(K1, K2[:, :2], w_A)
        out = ca.max_pooled_co_attention(K1, K2, A)
        return torch.cat([out.c1, out.c2])

    assert torch.autograd.gradcheck(g, (K1, K2))


# ---------------------------------------------------------------- multi-grained


@pytest.mark.catalog("extra:multi-grained-co-attention")
def test_multi_grained_concatenates_coarse_and_fine():
    K1, V1, K2, V2 = rand(2, 4, 3, seed=1), rand(2, 4, 2, seed=2), rand(2, 5, 3, seed=3), rand(2, 5, 6, seed=4)
    s1, _ = additive_fn(3, 3, seed=10)
    s2, _ = additive_fn(3, 3, seed=20)
    A = ca.affinity_matrix(K1, K2, rand(3, 3, seed=5))
    out = ca.multi_grained_co_attention(K1, V1, K2, V2, s1, s2, A)
    coarse = ca.interactive_co_attention(K1, V1, K2, V2, s1, s2)
    fine = ca.max_pooled_co_attention(V1, V2, A)
    assert out.c.shape == (2, 2 + 6 + 2 + 6)
    torch.testing.assert_close(out.c, torch.cat([coarse.c1, coarse.c2, fine.c1, fine.c2], -1))
    torch.manual_seed(3)
    m = ca.MultiGrainedCoAttention(3, 4, d_w=5, d_k1=6, d_k2=6, affinity="concat")
    y = m(rand(2, 4, 3), rand(2, 7, 4))
    assert y.c.shape == (2, 24) and torch.isfinite(y.c).all()


# ---------------------------------------------------------------- bi-directional attention


@pytest.mark.catalog("extra:bidirectional-attention")
def test_bidirectional_coarse_parallel_is_interactive_co_attention():
    Q, K = rand(2, 4, 3, seed=1), rand(2, 6, 5, seed=2)
    s_k2q, _ = additive_fn(3, 5, seed=10)  # mean of Q queries K
    s_q2k, _ = additive_fn(5, 3, seed=20)  # mean of K queries Q
    mask_k = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    bi = ca.bidirectional_attention(Q, K, s_k2q, score_q2k=s_q2k, mask_k=mask_k)
    # survey: set 1 = K (source text), set 2 = Q (question)
    co = ca.interactive_co_attention(K, K, Q, Q, s_k2q, s_q2k, mask1=mask_k)
    torch.testing.assert_close(bi.a_k, co.a1)
    torch.testing.assert_close(bi.a_q, co.a2)
    torch.testing.assert_close(bi.c_k, co.c1)
    torch.testing.assert_close(bi.c_q, co.c2)


@pytest.mark.catalog("extra:bidirectional-attention")
def test_bidirectional_alternating_is_eq8_eq9():
    """Review's alternating order + a query-less summary of Q = survey's Eq. (7)-(9)."""
    Q, V_q, K, V_k = rand(4, 3, seed=1), rand(4, 2, seed=2), rand(5, 6, seed=3), rand(5, 3, seed=4)
    W, w, b = rand(7, 3, seed=5), rand(7, seed=6), rand(7, seed=7)
    score0 = lambda X: ca.queryless_additive_score(X, W, w, b)
    score2, _ = additive_fn(2, 6, seed=10)
    score1, _ = additive_fn(3, 3, seed=20)

    def compress_q(X, mask):
        return (torch.softmax(score0(X), -1).unsqueeze(-2) @ V_q).squeeze(-2)

    bi = ca.bidirectional_attention(
        Q, K, score2, V_q=V_q, V_k=V_k, order="alternating", score_q2k=score1, compress_q=compress_q
    )
    alt = ca.alternating_co_attention(Q, V_q, K, V_k, score0, score2, score1)
    torch.testing.assert_close(bi.c_k, alt.c2)
    torch.testing.assert_close(bi.a_k, alt.a2)
    torch.testing.assert_close(bi.c_q, alt.c1)
    torch.testing.assert_close(bi.a_q, alt.a1)


@pytest.mark.catalog("extra:bidirectional-attention")
def test_bidirectional_fine_max_is_eq16():
    Q, K, W_A = rand(2, 4, 3, seed=1), rand(2, 5, 3, seed=2), rand(3, 3, seed=3)
    aff = lambda Q, K: ca.affinity_matrix(Q, K, W_A)
    bi = ca.bidirectional_attention(Q, K, aff, granularity="fine")
    co = ca.max_pooled_co_attention(Q, K, ca.affinity_matrix(Q, K, W_A))
    torch.testing.assert_close(bi.a_q, co.a1)
    torch.testing.assert_close(bi.a_k, co.a2)
    torch.testing.assert_close(bi.c_q, co.c1)
    torch.testing.assert_close(bi.c_k, co.c2)


@pytest.mark.catalog("extra:bidirectional-attention")
def test_bidirectional_fine_mean_loop_and_bad_options():
    Q, K = rand(3, 2, seed=1), rand(4, 2, seed=2)
    bi = ca.bidirectional_attention(Q, K, dot_score, granularity="fine", pool="mean")
    S = [[float(Q[i] @ K[j]) for j in range(4)] for i in range(3)]
    a_k = softmax_list([sum(S[i][j] for i in range(3)) / 3 for j in range(4)])
    a_q = softmax_list([sum(S[i]) / 4 for i in range(3)])
    torch.testing.assert_close(bi.a_k, torch.tensor(a_k))
    torch.testing.assert_close(bi.a_q, torch.tensor(a_q))
    with pytest.raises(ValueError, match="order='parallel' only"):
        ca.bidirectional_attention(Q, K, dot_score, granularity="fine", order="alternating")
    with pytest.raises(ValueError, match="granularity"):
        ca.bidirectional_attention(Q, K, dot_score, granularity="medium")
    with pytest.raises(ValueError, match="pool"):
        ca.bidirectional_attention(Q, K, dot_score, granularity="fine", pool="min")
    with pytest.raises(ValueError, match="multiplicative score needs d_q == d_k"):
        ca.bidirectional_attention(Q, rand(4, 5), dot_score)


def test_co_attention_rejects_empty_sets():
    s, _ = additive_fn(3, 3)
    with pytest.raises(ValueError, match=r"K\^\(1\) is empty: n_f\^\(1\)=0"):
        ca.interactive_co_attention(torch.zeros(0, 3), torch.zeros(0, 3), rand(4, 3), rand(4, 3), s, s)
    with pytest.raises(ValueError, match="must share a dtype"):
        ca.affinity_matrix(rand(4, 3), rand(4, 3, dtype=torch.float64), rand(3, 3))


def test_masks_are_keywords_and_other_keywords_are_rejected():
    """The masks travel as the keywords mask1/mask2 (CoMasks); a misspelt one is an error, not ignored."""
    s, _ = additive_fn(3, 3)
    K1, K2 = rand(4, 3), rand(5, 3, seed=1)
    mask2 = torch.tensor([True, True, False, True, False])
    out = ca.interactive_co_attention(K1, K1, K2, K2, s, s, mask2=mask2)
    assert torch.equal(out.a2[~mask2], torch.zeros(2))
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['mask_2'\]; CoMasks declares \['mask1', 'mask2'\]"):
        ca.interactive_co_attention(K1, K1, K2, K2, s, s, mask_2=mask2)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['mask'\]"):
        ca.max_pooled_co_attention(K1, K2, ca.affinity_matrix(K1, K2, torch.eye(3)), mask=mask2)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['mask_2'\]"):
        ca.InteractiveCoAttention(3, 3, d_w=4)(K1, K2, mask_2=mask2)
    with pytest.raises(TypeError, match="d_k3"):
        ca.ParallelCoAttention(3, 3, d_w=4, d_k3=2)


def test_parallel_co_attention_ignores_nan_in_a_padded_key_like_a_shorter_set():
    """Review 2, A: ``A * mask`` met the NaN of a padded key (0 * NaN), so every c^(1) entry was NaN."""
    d, d_w = 5, 6
    K1, K2 = rand(2, 3, d, seed=1, dtype=torch.float64), rand(2, 4, d, seed=2, dtype=torch.float64)
    W_A = rand(d, d, seed=3, dtype=torch.float64)
    W1, W2 = rand(d_w, d, seed=4, dtype=torch.float64), rand(d_w, d, seed=5, dtype=torch.float64)
    w1, w2 = rand(d_w, seed=6, dtype=torch.float64), rand(d_w, seed=7, dtype=torch.float64)
    short = ca.parallel_co_attention(
        K1, K1, K2[:, :3], K2[:, :3], ca.affinity_matrix(K1, K2[:, :3], W_A), W1, W2, w1, w2
    )
    mask2 = torch.tensor([True, True, True, False]).expand(2, 4)
    bad = K2.clone()
    bad[:, -1] = float("nan")
    for A in (ca.affinity_matrix(K1, K2, W_A), ca.affinity_matrix(K1, bad, W_A)):  # finite A, and A with a NaN column
        out = ca.parallel_co_attention(K1, K1, bad, bad, A, W1, W2, w1, w2, mask2=mask2)
        for got, want in zip(out, short):
            torch.testing.assert_close(got[..., : want.shape[-1]], want)
        assert torch.equal(out.a2[:, -1], torch.zeros(2, dtype=torch.float64))
