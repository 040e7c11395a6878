"""Tests for §3.3.2 multi-head attention, Eq. (38)-(40), review eq. 10-11, disagreement."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_
from torch import nn

from attnsurvey import attention as at
from attnsurvey.query_related import multihead as mh

from .helpers import rand


def weights(d_model=8, h=2, seed=0):
    return (
        rand(d_model, d_model, seed=seed),
        rand(d_model, d_model, seed=seed + 1),
        rand(d_model, d_model, seed=seed + 2),
        rand(d_model, d_model, seed=seed + 3),
    )


def torch_mha(W_Q, W_K, W_V, W_O, h, bias=False):
    d = W_O.shape[0]
    ref = nn.MultiheadAttention(d, h, bias=bias, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([W_Q, W_K, W_V]))
        ref.out_proj.weight.copy_(W_O)
    return ref.eval()


@pytest.mark.catalog("eq38")
def test_eq38_head_projections_are_row_blocks():
    # head j's query is rows j*d_k:(j+1)*d_k of W_Q applied to q, as in the survey's W_q^(j) q
    Q = rand(3, 8)
    W_Q = rand(8, 8, seed=1)
    q = mh.split_heads(Q @ W_Q.T, 2)
    assert q.shape == (2, 3, 4)
    for j in range(2):
        torch.testing.assert_close(q[j], Q @ W_Q[4 * j : 4 * (j + 1)].T)


@pytest.mark.catalog("eq38")
def test_split_merge_roundtrip():
    X = rand(2, 5, 12)
    for h in (1, 2, 3, 4, 6, 12):
        torch.testing.assert_close(mh.merge_heads(mh.split_heads(X, h)), X)


@pytest.mark.catalog("eq38")
def test_bad_head_counts_raise():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by the number of heads h=3"):
        mh.MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="MultiHeadAttention needs h to be an integer >= 1, got h=0"):
        mh.MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="not divisible by the number of heads h=3"):
        mh.split_heads(rand(2, 8), 3)
    W = weights()
    with pytest.raises(ValueError, match=r"h=3 must divide h\*d_k=8"):
        mh.multi_head_attention(rand(3, 8), rand(4, 8), rand(4, 8), *W, h=3)
    with pytest.raises(ValueError, match=r"W_K must have shape \(h\*d_k, d_f\)"):
        mh.multi_head_attention(rand(3, 8), rand(4, 6), rand(4, 6), W[0], W[1], rand(8, 6), W[3], h=2)
    m = mh.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="d_model of X_q == d_model of the module, got d_model of X_q=6"):
        m(rand(3, 6))
    with pytest.raises(ValueError, match="does not broadcast to the scores"):
        m(rand(3, 8), mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="boolean"):
        m(rand(3, 8), mask=torch.ones(3, 3, dtype=torch.int64))
    # a float mask is an additive bias (as torch's float attn_mask), not an error
    X = rand(3, 8)
    torch.testing.assert_close(m(X, mask=torch.zeros(3, 3))[0], m(X)[0])


@pytest.mark.catalog("eq39")
def test_eq39_head_contexts_match_sdpa():
    Q, F = rand(2, 3, 8), rand(2, 5, 8, seed=1)
    W_Q, W_K, W_V, _ = weights()
    mask = rand(2, 3, 5, seed=9) > -0.5
    mask[..., 0] = True
    out, a = mh.multi_head_attention(Q, F, F, W_Q, W_K, W_V, torch.eye(8), 2, mask)
    q, k, v = (mh.split_heads(x, 2) for x in (Q @ W_Q.T, F @ W_K.T, F @ W_V.T))
    c_ref = F_.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
    torch.testing.assert_close(a @ v, c_ref)
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 2, 3))

    # with W_O = I the output is the head contexts c^(1), c^(2) side by side: each head's SDPA on its own
    # row block of W_Q, W_K, W_V (Eq. 38), built here without split_heads
    def heads_by_hand(F_k, F_v):
        rows = [slice(4 * j, 4 * (j + 1)) for j in range(2)]
        heads = [
            F_.scaled_dot_product_attention(Q @ W_Q[r].T, F_k @ W_K[r].T, F_v @ W_V[r].T, attn_mask=mask) for r in rows
        ]
        return torch.cat(heads, dim=-1)

    torch.testing.assert_close(out, heads_by_hand(F, F))
    G = rand(2, 5, 8, seed=2)  # distinct features for keys and values: the values come from F_v
    torch.testing.assert_close(
        mh.multi_head_attention(Q, F, G, W_Q, W_K, W_V, torch.eye(8), 2, mask)[0], heads_by_hand(F, G)
    )


@pytest.mark.catalog("eq40")
def test_eq40_equals_torch_multihead_attention():
    Q, F = rand(2, 3, 8), rand(2, 5, 8, seed=1)
    W = weights()
    out, a = mh.multi_head_attention(Q, F, F, *W, h=2)
    ref = torch_mha(*W, h=2)
    out_ref, a_mean = ref(Q, F, F)  # head-averaged weights by default
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.mean(-3), a_mean)
    _, a_heads = ref(Q, F, F, average_attn_weights=False)
    torch.testing.assert_close(a, a_heads)


@pytest.mark.catalog("eq40")
def test_mask_polarity_and_key_padding_vs_torch():
    Q, F = rand(2, 4, 8), rand(2, 4, 8, seed=1)
    W = weights(seed=3)
    ref = torch_mha(*W, h=2)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()  # ours: True = may attend
    out, _ = mh.multi_head_attention(Q, F, F, *W, h=2, mask=causal)
    out_ref, _ = ref(Q, F, F, attn_mask=~causal)  # torch: True = blocked
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    # passing our mask unchanged to torch computes something else
    wrong, _ = ref(Q, F, F, attn_mask=causal.triu(1) | causal.tril(-1))
    assert not torch.allclose(out[:, 1:], wrong[:, 1:], atol=1e-3)
    # key padding: a per-example (batch, 1, n_f) mask without a head axis
    lengths = torch.tensor([4, 2])
    keep = torch.arange(4)[None, :] < lengths[:, None]
    out, a = mh.multi_head_attention(Q, F, F, *W, h=2, mask=keep[:, None, :])
    out_ref, _ = ref(Q, F, F, key_padding_mask=~keep)
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    assert torch.all(a[1, :, :, 2:] == 0)


@pytest.mark.catalog("eq40")
def test_module_with_bias_equals_torch():
    torch.manual_seed(0)
    m = mh.MultiHeadAttention(8, 4, bias=True)
    ref = nn.MultiheadAttention(8, 4, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([m.W_Q.weight, m.W_K.weight, m.W_V.weight]))
        ref.in_proj_bias.copy_(torch.cat([m.W_Q.bias, m.W_K.bias, m.W_V.bias]))
        ref.out_proj.weight.copy_(m.W_O.weight)
        ref.out_proj.bias.copy_(m.W_O.bias)
    X, Y = rand(3, 5, 8), rand(3, 6, 8, seed=2)
    out, a = m(X, Y)
    out_ref, a_ref = ref(X, Y, Y, average_attn_weights=False)
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a, a_ref)


def test_linear_projections_and_scale_option_vs_torch():
    # nn.Linear projections bring their biases; scale= goes through to attend (SDPA's scale)
    torch.manual_seed(0)
    W_Q, W_K, W_V, W_O = (nn.Linear(8, 8) for _ in range(4))
    X, Y = rand(3, 5, 8), rand(3, 6, 8, seed=2)
    out, _ = mh.multi_head_attention(X, Y, Y, W_Q, W_K, W_V, W_O, 2, scale=0.3, need_weights=False)
    q, k, v = (mh.split_heads(W(Z), 2) for W, Z in ((W_Q, X), (W_K, Y), (W_V, Y)))
    ref = W_O(mh.merge_heads(F_.scaled_dot_product_attention(q, k, v, scale=0.3)))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    plain, _ = mh.multi_head_attention(X, Y, Y, W_Q.weight, W_K.weight, W_V.weight, W_O.weight, 2, scale=0.3)
    assert not torch.allclose(out, plain)  # the biases were used


@pytest.mark.catalog("eq39")
def test_fully_masked_rows_and_large_scores():
    W = weights()
    Q, F = rand(2, 3, 8) * 1e3, rand(2, 5, 8, seed=1) * 1e3  # scores ~1e6 before scaling
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    Q.requires_grad_(True)
    out, a = mh.multi_head_attention(Q, F, F, W[0], W[1], W[2], W[3], h=2, mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(a).all()
    assert torch.equal(out[:, 1], torch.zeros(2, 8))  # zero context, where torch gives NaN
    out.sum().backward()
    assert torch.isfinite(Q.grad).all()
    ref = torch_mha(*W, h=2)
    out_ref, _ = ref(Q.detach(), F, F, attn_mask=~mask)
    assert torch.isnan(out_ref[:, 1]).all()


@pytest.mark.catalog("eq39")
def test_positional_masks_refused_where_keys_are_not_input_positions():
    """is_causal and key_padding_mask name input positions: refused after memory (is_causal) or a kv_transform."""
    W = weights()
    X, M = rand(2, 4, 8), rand(2, 3, 8, seed=1)
    real = torch.ones(2, 4, dtype=torch.bool)
    same_length = lambda k, v: (k, v)  # moves nothing, but the core cannot know that
    calls = [
        ({"memory": M, "is_causal": True}, "is_causal refers to input positions, which memory moves.*7 keys"),
        ({"kv_transform": same_length, "is_causal": True}, "is_causal .* a kv_transform moves"),
        ({"kv_transform": same_length, "key_padding_mask": real}, "key_padding_mask .* a kv_transform moves"),
    ]
    for kwargs, message in calls:
        with pytest.raises(ValueError, match=message):
            mh.multi_head_attention(X, X, X, *W, h=2, **kwargs)
    # what stays allowed: a padding mask over memory and input (n_m + n keys), and an explicit causal mask
    both = torch.ones(2, 7, dtype=torch.bool)
    both[1, 5:] = False
    out, a = mh.multi_head_attention(X, X, X, *W, h=2, memory=M, key_padding_mask=both)
    ref, _ = mh.multi_head_attention(X, X, X, *W, h=2, mask=both[:, None, :].expand(2, 4, 7), memory=M)
    torch.testing.assert_close(out, ref)
    assert a is not None and bool((a[1, ..., 5:] == 0).all())


@pytest.mark.catalog("eq39")
def test_shared_queries_with_a_batched_mask_equal_one_call_per_example():
    """Learned queries (n_q, d) shared by a batch of features: a (B, n_q, n_f) mask is per example even when B == h."""
    W = weights()
    Q, F = rand(3, 8), rand(2, 4, 8, seed=1)  # B = h = 2
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, :, 2:] = False
    real = mask[:, 0, :]
    out, a = mh.multi_head_attention(Q, F, F, *W, h=2, mask=mask)
    out_k, _ = mh.multi_head_attention(Q, F, F, *W, h=2, key_padding_mask=real)
    for b in range(2):
        ref, a_ref = mh.multi_head_attention(Q, F[b], F[b], *W, h=2, mask=mask[b])
        torch.testing.assert_close(out[b], ref)
        torch.testing.assert_close(out_k[b], ref)
        torch.testing.assert_close(a[b], a_ref)


@pytest.mark.catalog("eq39")
@pytest.mark.parametrize("self_attention", [False, True])
def test_nan_in_padded_features_reaches_no_parameter_gradient(self_attention):
    """The module projects the features before attending: a padded slot holding NaN must not reach dW (0 * NaN)."""
    torch.manual_seed(0)
    m = mh.MultiHeadAttention(8, 2, bias=True)
    X, F = rand(2, 3, 8), rand(2, 5, 8, seed=1)
    real = torch.tensor([[True] * 5, [True, True, True, False, False]])  # example 1: 3 real tokens
    runs = []
    for fill in (float("nan"), 3.0):  # NaN, or any finite value: the padded slots must not matter
        Fp = F.clone()
        Fp[1, 3:] = fill
        m.zero_grad()
        if self_attention:  # the padded slots are queries too; their output rows are padding
            out, _ = m(Fp, key_padding_mask=real)
            out = out[real]
        else:
            out, _ = m(X, Fp, key_padding_mask=real)
        out.sum().backward()
        runs.append((out.detach(), {k: p.grad.clone() for k, p in m.named_parameters()}))
    (out_nan, g_nan), (out_fin, g_fin) = runs
    torch.testing.assert_close(out_nan, out_fin)
    for k in g_fin:
        torch.testing.assert_close(g_nan[k], g_fin[k], msg=k)


@pytest.mark.catalog("eq40")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_dtypes(dtype):
    W = weights()
    Q, F = rand(2, 3, 8), rand(2, 5, 8, seed=1)
    out32, _ = mh.multi_head_attention(Q, F, F, *W, h=2)
    try:
        out, a = mh.multi_head_attention(Q.to(dtype), F.to(dtype), F.to(dtype), *(w.to(dtype) for w in W), h=2)
    except RuntimeError as err:  # pragma: no cover - CPU kernel missing
        pytest.skip(f"{dtype} matmul unsupported on this CPU: {err}")
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), out32, rtol=0.1, atol=0.3)
    torch.testing.assert_close(a.float().sum(-1), torch.ones(2, 2, 3), rtol=0.02, atol=0.02)


@pytest.mark.catalog("extra:multihead-matrix-form")
def test_matrix_form_equals_stacked_form():
    Q, F = rand(2, 3, 8), rand(2, 5, 8, seed=1)
    W_Q, W_K, W_V, W_O = weights(seed=5)
    h, d = 2, 4
    per = lambda W: [W[j * d : (j + 1) * d].T for j in range(h)]  # (d_model, d_k) each
    mask = torch.ones(3, 5, dtype=torch.bool).tril()
    out = mh.multi_head_matrix_form(Q, F, F, per(W_Q), per(W_K), per(W_V), W_O.T, mask)
    ref, _ = mh.multi_head_attention(Q, F, F, W_Q, W_K, W_V, W_O, h, mask)
    torch.testing.assert_close(out, ref)
    # review eq. 10-11 by hand: one softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V per head, concatenated, times W^O
    heads = []
    for Wq, Wk, Wv in zip(per(W_Q), per(W_K), per(W_V)):
        e = (Q @ Wq) @ (F @ Wk).transpose(-1, -2) / math.sqrt(d)
        heads.append(torch.softmax(e.masked_fill(~mask, -math.inf), -1) @ (F @ Wv))
    torch.testing.assert_close(out, torch.cat(heads, -1) @ W_O.T)
    with pytest.raises(ValueError, match=r"W_2\^K must have shape \(d_model, d_k\) = \(8, 4\)"):
        mh.multi_head_matrix_form(Q, F, F, per(W_Q), [per(W_K)[0], rand(8, 3)], per(W_V), W_O.T)
    with pytest.raises(ValueError, match="one W_i"):
        mh.multi_head_matrix_form(Q, F, F, per(W_Q), per(W_K)[:1], per(W_V), W_O.T)
    with pytest.raises(ValueError, match=r"W\^O must have shape \(h\*d_v, d_model\)"):
        mh.multi_head_matrix_form(Q, F, F, per(W_Q), per(W_K), per(W_V), rand(6, 8))


@pytest.mark.catalog("extra:disagreement-regularisation")
def test_disagreement_matches_loop_and_extremes():
    O = rand(2, 3, 4, 5)  # (batch, h, n, d)
    D = mh.disagreement_regularisation(O, "output")
    for b in range(2):
        tot = 0.0
        for i in range(3):
            for j in range(3):
                tot += float(F_.cosine_similarity(O[b, i].flatten(), O[b, j].flatten(), dim=0))
        assert math.isclose(float(D[b]), -tot / 9, rel_tol=1e-5)
    same = rand(1, 4, 5).expand(3, 4, 5)
    assert math.isclose(float(mh.disagreement_regularisation(same)), -1.0, rel_tol=1e-6)
    ortho = torch.eye(3).reshape(3, 1, 3)
    assert math.isclose(float(mh.disagreement_regularisation(ortho, "subspace")), -1 / 3, rel_tol=1e-6)
    A = torch.softmax(rand(2, 3, 4, 4, seed=3), -1)
    Dp = mh.disagreement_regularisation(A, "position")
    ref = -sum((A[:, i] * A[:, j]).abs().sum((-1, -2)) for i in range(3) for j in range(3)) / 9
    torch.testing.assert_close(Dp, ref)
    with pytest.raises(ValueError, match="kind must be"):
        mh.disagreement_regularisation(O, "cosine")
    with pytest.raises(ValueError, match=r"heads must have shape"):
        mh.disagreement_regularisation(rand(3, 4))


@pytest.mark.catalog("extra:disagreement-regularisation")
def test_disagreement_gradient_pushes_heads_apart():
    O = (rand(1, 4, 3) + 0.1 * rand(2, 4, 3, seed=1)).requires_grad_(True)
    before = float(mh.disagreement_regularisation(O.detach()))
    opt = torch.optim.Adam([O], lr=0.1)
    for _ in range(30):
        opt.zero_grad()
        (-mh.disagreement_regularisation(O)).backward()
        opt.step()
    assert float(mh.disagreement_regularisation(O.detach())) > before + 0.3


@pytest.mark.catalog("eq40")
def test_module_with_fewer_kv_heads_equals_sdpa_enable_gqa():
    """MultiHeadAttention(h_kv=g): K/V projections of g heads, each shared by h/g query heads (grouped-query)."""
    torch.manual_seed(0)
    m = mh.MultiHeadAttention(16, 4, h_kv=2, bias=True).double()
    assert m.W_K.weight.shape == (8, 16) and m.W_V.weight.shape == (8, 16)
    X = rand(3, 5, 16, dtype=torch.float64)
    out, a = m(X)
    q = m.W_Q(X).unflatten(-1, (4, 4)).transpose(1, 2)
    k, v = (lin(X).unflatten(-1, (2, 4)).transpose(1, 2) for lin in (m.W_K, m.W_V))
    ref = F_.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, m.W_O(ref.transpose(1, 2).flatten(-2)))
    assert a is not None and a.shape == (3, 4, 5, 5)
    with pytest.raises(ValueError, match="h_kv=3 must divide h=4"):
        mh.MultiHeadAttention(16, 4, h_kv=3)


def test_a_one_column_key_padding_mask_broadcasts_over_the_keys_with_an_extra_key():
    """A ``(B, 1)`` key-padding mask means the same for every key, also when add_zero_attn adds a key column."""
    torch.manual_seed(0)
    m = mh.MultiHeadAttention(6, 2, add_zero_attn=True).eval()
    X = rand(2, 4, 6)
    torch.testing.assert_close(m(X, key_padding_mask=torch.ones(2, 1, dtype=torch.bool))[0], m(X)[0])
    a = m(X, key_padding_mask=torch.tensor([[False], [True]]))[1]
    assert torch.equal(a[0, ..., :4], torch.zeros_like(a[0, ..., :4]))  # every real key padded: only the zero key
    assert torch.equal(a[0, ..., 4], torch.ones_like(a[0, ..., 4]))
    torch.testing.assert_close(a[1], m(X[1:])[1][0])


def test_key_padding_mask_is_checked_once_on_the_multi_head_path(monkeypatch):
    calls, real = [], mh.check_key_padding_mask

    def counted(kpm, scores_shape, *args):
        calls.append(tuple(scores_shape))
        return real(kpm, scores_shape, *args)

    monkeypatch.setattr(mh, "check_key_padding_mask", counted)
    monkeypatch.setattr(at, "check_key_padding_mask", counted)  # the core's (allowed_positions)
    pad = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    _, a = mh.MultiHeadAttention(8, 2, add_bias_kv=True)(rand(2, 4, 8), rand(2, 5, 8), key_padding_mask=pad)
    assert calls == [(2, 4, 5)]  # once, in the caller's layout (batch, n_q, n_f), not again in the heads' layout
    assert torch.all(a[1, :, :, 3:5] == 0) and torch.all(a[1, :, :, :3] > 0)  # still applied; the bias key stays
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 6\) does not broadcast to \(2, 5\)"):
        mh.MultiHeadAttention(8, 2)(rand(2, 4, 8), rand(2, 5, 8), key_padding_mask=torch.ones(2, 6, dtype=torch.bool))
