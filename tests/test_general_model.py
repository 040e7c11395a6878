"""Tests for §2, the general attention model, Eq. (1)-(5)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnsurvey import general_model as gm
from attnsurvey.general_mechanisms.scoring import dot_score, scaled_dot_score

from .helpers import rand

torch.set_default_dtype(torch.float32)


@pytest.mark.catalog("eq1")
def test_eq1_keys_values_match_linear_layers():
    F = rand(2, 5, 4)
    lin_k, lin_v = nn.Linear(4, 3, bias=False), nn.Linear(4, 6, bias=False)
    K, V = gm.keys_values(F, lin_k.weight, lin_v.weight)
    torch.testing.assert_close(K, lin_k(F))
    torch.testing.assert_close(V, lin_v(F))
    # column-vector survey form: K^T = W_K F^T for one example
    torch.testing.assert_close(K[0].T, lin_k.weight @ F[0].T)


@pytest.mark.catalog("eq1")
def test_eq1_rejects_wrong_weight_shape():
    with pytest.raises(ValueError, match=r"W_K must have shape \(d_k, d_f\)"):
        gm.keys_values(rand(5, 4), rand(3, 5), rand(3, 4))
    with pytest.raises(ValueError, match=r"F must have shape"):
        gm.keys_values(rand(4), rand(3, 4), rand(3, 4))


@pytest.mark.catalog("eq2")
def test_eq2_scores_match_loop():
    Q, K = rand(3, 4, seed=1), rand(5, 4, seed=2)
    e = gm.attention_scores(Q, K, dot_score)
    for i in range(3):
        for l in range(5):
            assert math.isclose(float(e[i, l]), float(Q[i] @ K[l]), rel_tol=1e-5, abs_tol=1e-6)


def test_eq2_rejects_mismatched_dims():
    with pytest.raises(ValueError, match="multiplicative score needs d_q == d_k, got d_q=16, d_k=32"):
        gm.attention_scores(rand(2, 16), rand(3, 32), dot_score)


@pytest.mark.catalog("eq3")
@settings(max_examples=40, deadline=None)
@given(n_q=st.integers(1, 4), n_f=st.integers(1, 7), scale=st.floats(0.01, 1e4), seed=st.integers(0, 10_000))
def test_eq3_weights_on_simplex(n_q, n_f, scale, seed):
    e = rand(n_q, n_f, seed=seed, dtype=torch.float64) * scale
    a = gm.align(e)
    assert torch.all(a >= 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(n_q, dtype=torch.float64))
    # Eq. (3) written out: exp(e_l) / sum_j exp(e_j), shifted by the row maximum
    p = torch.exp(e - e.max(-1, keepdim=True).values)
    torch.testing.assert_close(a, p / p.sum(-1, keepdim=True))


@pytest.mark.catalog("eq3")
def test_eq3_by_hand():
    # scores log 1, log 2, log 3: weights proportional to 1, 2, 3
    e = torch.tensor([[0.0, math.log(2.0), math.log(3.0)]], dtype=torch.float64)
    torch.testing.assert_close(gm.align(e), torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64) / 6)
    mask = torch.tensor([[True, False, True]])  # the masked score leaves the sum: 1 and 3 of 4
    torch.testing.assert_close(gm.align(e, mask), torch.tensor([[0.25, 0.0, 0.75]], dtype=torch.float64))


@pytest.mark.catalog("eq3")
def test_eq3_large_scores_stay_finite():
    e = torch.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]])
    a = gm.align(e)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a[0], torch.tensor([1.0, 0.0, 0.0]))
    mask = torch.tensor([[False, True, True], [True, True, True]])
    a = gm.align(e, mask)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a[0], torch.tensor([0.0, 0.0, 1.0]))


@pytest.mark.catalog("eq3")
def test_fully_masked_row_gives_zero_context():
    Q, K, V = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 6, seed=2)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 2] = False
    Q.requires_grad_(True)
    c, a = gm.attend(Q, K, V, mask)
    assert torch.equal(a[1, 2], torch.zeros(5))
    assert torch.equal(c[1, 2], torch.zeros(6))
    c.sum().backward()
    assert torch.isfinite(Q.grad).all()


def test_mask_validation():
    e = rand(2, 3, 5)
    with pytest.raises(ValueError, match=r"must be a boolean tensor \(True = may attend\), got dtype="):
        gm.align(e, torch.ones(2, 3, 5))
    with pytest.raises(ValueError, match=r"does not broadcast to the scores e of shape \(2, 3, 5\)"):
        gm.align(e, torch.ones(2, 3, 4, dtype=torch.bool))


@pytest.mark.catalog("eq4")
def test_eq4_context_hand_computed():
    a = torch.tensor([[0.25, 0.75]])
    # V is not symmetric, so a @ V^T (rows and columns swapped) cannot pass: that would give [[0.5, 3.25]]
    V = torch.tensor([[2.0, 0.0], [1.0, 4.0]])
    # c = 0.25 v_1 + 0.75 v_2 = 0.25 [2, 0] + 0.75 [1, 4] = [1.25, 3.0]
    torch.testing.assert_close(gm.context(a, V), torch.tensor([[1.25, 3.0]]))
    # a non-square V (n_f = 2, d_v = 3): c has d_v entries
    V3 = torch.tensor([[2.0, 0.0, -4.0], [1.0, 4.0, 0.0]])
    torch.testing.assert_close(gm.context(a, V3), torch.tensor([[1.25, 3.0, -1.0]]))
    with pytest.raises(ValueError, match="n_f of a == n_f of V"):
        gm.context(torch.ones(1, 3), V)


@pytest.mark.catalog("eq4")
def test_attend_equals_sdpa():
    Q, K, V = rand(2, 4, 8), rand(2, 6, 8, seed=1), rand(2, 6, 5, seed=2)
    mask = rand(2, 4, 6, seed=3) > -0.5
    c, _ = gm.attend(Q, K, V, mask)
    ref = F_.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    torch.testing.assert_close(c, ref, atol=1e-5, rtol=1e-5)


def test_general_module_equals_multihead_attention_one_head():
    torch.manual_seed(0)
    d = 8
    mha = nn.MultiheadAttention(d, num_heads=1, bias=False, batch_first=True)
    att = gm.GeneralAttention(d_q=d, d_f=d)
    W_q, W_k, W_v = mha.in_proj_weight.chunk(3)
    with torch.no_grad():
        att.W_K.weight.copy_(W_k)
        att.W_V.weight.copy_(W_v)
    X, Fm = rand(2, 3, d), rand(2, 7, d, seed=1)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 5:] = True  # MultiheadAttention: True = ignore (opposite polarity)
    ref_out, ref_w = mha(X, Fm, Fm, key_padding_mask=pad)
    c, a = att(X @ W_q.T, Fm, mask=~pad[:, None, :])
    torch.testing.assert_close(a, ref_w, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(c @ mha.out_proj.weight.T, ref_out, atol=1e-5, rtol=1e-5)


@pytest.mark.catalog("eq5")
def test_eq5_output_model_matches_linear_softmax():
    c = rand(3, 4)
    out = gm.OutputModel(4, 5)
    expected = torch.softmax(out.linear(c), -1)
    torch.testing.assert_close(out(c), expected)
    torch.testing.assert_close(out(c).sum(-1), torch.ones(3))
    with pytest.raises(ValueError, match=r"W_c must have shape \(d_y, d_v\)"):
        gm.output_model(c, rand(5, 3), rand(5))


def test_single_and_many_queries_agree():
    att = gm.GeneralAttention(d_q=4, d_f=6, d_k=4, d_v=3)
    q, Fm = rand(2, 4), rand(2, 5, 6, seed=1)
    c1, a1 = att(q, Fm)
    cm, am = att(q[:, None, :], Fm)
    assert c1.shape == (2, 3) and a1.shape == (2, 5)
    torch.testing.assert_close(c1, cm[:, 0])
    torch.testing.assert_close(a1, am[:, 0])
    with pytest.raises(ValueError, match="d_q of q == d_q of the module"):
        att(rand(2, 5), Fm)


@pytest.mark.catalog("extra:attention-as-expectation")
def test_context_is_expectation_of_selected_value():
    V = rand(6, 3)
    a = torch.softmax(rand(1, 6, seed=4), -1)
    g = torch.Generator().manual_seed(0)
    z = gm.sample_selection(a, 20_000, generator=g)[0]
    mc = V[z].mean(0)
    exact = gm.context(a, V)[0]
    # standard error of each coordinate is below 1.5/sqrt(20000) ~ 0.011; allow 5 s.e.
    torch.testing.assert_close(mc, exact, atol=0.06, rtol=0)
    with pytest.raises(ValueError, match="sum to 1"):
        gm.sample_selection(torch.ones(1, 3), 2)


@pytest.mark.catalog("extra:key-value-vs-plain")
def test_plain_attention_is_identity_weights():
    Fm, q = rand(2, 5, 4), rand(2, 4, seed=1)
    plain = gm.GeneralAttention(d_q=4, d_f=4, plain=True)
    kv = gm.GeneralAttention(d_q=4, d_f=4)
    with torch.no_grad():
        kv.W_K.weight.copy_(torch.eye(4))
        kv.W_V.weight.copy_(torch.eye(4))
    torch.testing.assert_close(plain(q, Fm), kv(q, Fm))
    c, _ = gm.plain_attend(q[:, None], Fm)
    torch.testing.assert_close(c[:, 0], plain(q, Fm)[0])
    assert sum(p.numel() for p in plain.parameters()) == 0


@pytest.mark.catalog("extra:memory-addressing")
def test_memory_read_sharpens_to_hard_lookup():
    keys = torch.eye(4) * 30.0  # sharp, orthogonal addresses
    values = rand(4, 3)
    mem = gm.KeyValueMemory(keys, values, score=dot_score)
    read, addr = mem.read(torch.eye(4)[[2]])
    torch.testing.assert_close(addr, torch.eye(4)[[2]], atol=1e-6, rtol=0)
    torch.testing.assert_close(read, values[[2]], atol=1e-5, rtol=0)


@pytest.mark.catalog("extra:data-organisation")
def test_permutation_invariance_of_single_query():
    att = gm.GeneralAttention(d_q=4, d_f=4, score="additive")
    q, Fm = rand(4), rand(9, 4, seed=1)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))
    c, a = att(q, Fm)
    c_p, a_p = att(q, Fm[perm])
    torch.testing.assert_close(c, c_p, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(a[perm], a_p)


@pytest.mark.catalog("extra:data-organisation")
def test_permutation_equivariance_of_queries():
    att = gm.GeneralAttention(d_q=4, d_f=4)
    Q, Fm = rand(5, 4), rand(9, 4, seed=1)
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(3))
    c, a = att(Q, Fm)
    c_p, a_p = att(Q[perm], Fm)
    torch.testing.assert_close(c[perm], c_p)
    torch.testing.assert_close(a[perm], a_p)


@pytest.mark.catalog("extra:data-organisation")
def test_grid_and_graph_are_flattened_sets():
    """An image grid (H, W, d) and graph nodes (n, d) are attended as sets of vectors."""
    att = gm.GeneralAttention(d_q=3, d_f=3)
    grid = rand(4, 5, 3)
    q = rand(3, seed=2)
    c_grid, a_grid = att(q, grid.reshape(20, 3))
    # transposing the grid only permutes the set: the context is unchanged
    c_t, _ = att(q, grid.transpose(0, 1).reshape(20, 3))
    torch.testing.assert_close(c_grid, c_t, atol=1e-6, rtol=1e-5)
    # graph: attending over each node's neighbours with a mask from the adjacency
    adj = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    nodes = rand(4, 3, seed=5)
    c, a = att(nodes, nodes, mask=adj)
    assert torch.all(a[~adj] == 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(4))
    # relabelling the nodes (with the adjacency) permutes the outputs the same way
    p = torch.tensor([2, 0, 3, 1])
    c_p, _ = att(nodes[p], nodes[p], mask=adj[p][:, p])
    torch.testing.assert_close(c[p], c_p, atol=1e-6, rtol=1e-5)


def test_gradcheck_core_functions_float64():
    Q = rand(2, 3, dtype=torch.float64).requires_grad_()
    K = rand(4, 3, seed=1, dtype=torch.float64).requires_grad_()
    V = rand(4, 2, seed=2, dtype=torch.float64).requires_grad_()
    mask = torch.tensor([[True, True, False, True], [False, False, False, False]])
    assert torch.autograd.gradcheck(lambda q, k, v: gm.attend(q, k, v, mask)[0], (Q, K, V))
    W_K = rand(3, 3, seed=3, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda f, w: gm.keys_values(f, w, w)[0], (K, W_K))


def test_rejects_non_tensors_and_integer_dtypes():
    with pytest.raises(ValueError, match="F must be a torch.Tensor"):
        gm.keys_values([[1.0]], torch.eye(1), torch.eye(1))
    with pytest.raises(ValueError, match="floating-point"):
        gm.context(torch.ones(1, 2, dtype=torch.long), rand(2, 3))
    with pytest.raises(ValueError, match="Q and K must share a dtype"):
        scaled_dot_score(rand(2, 3), rand(2, 3, dtype=torch.float64))


@pytest.mark.catalog("eq4")
def test_empty_feature_set_gives_zero_context():
    Q = rand(2, 3, 4)
    K, V = torch.zeros(2, 0, 4), torch.zeros(2, 0, 5)
    c, a = gm.attend(Q, K, V)
    assert c.shape == (2, 3, 5) and a.shape == (2, 3, 0)
    assert torch.equal(c, torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="n_f of K == n_f of V"):
        gm.attend(Q, torch.zeros(2, 0, 4), torch.zeros(2, 1, 5))
