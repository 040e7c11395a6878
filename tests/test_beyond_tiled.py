"""Tiled attention with an online softmax (beyond the survey), against SDPA and the core `attend`."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond.tiled import (
    BLOCK_K,
    BLOCK_Q,
    attention_flops,
    attention_stats,
    draw_dropout_seed,
    dropout_keep_mask,
    finalize,
    online_softmax_merge,
    tile_bytes,
    tile_settings,
    tile_stats,
    tiled_attend,
)
from attnsurvey.general_model import attend
from attnsurvey.masking import causal_mask

from .helpers import rand


def qkv(b=2, n_q=37, n_f=37, d=16, d_v=None, dtype=torch.float32, seed=0, grad=False):
    d_v = d if d_v is None else d_v
    Q, K, V = (
        rand(b, n_q, d, seed=seed, dtype=dtype),
        rand(b, n_f, d, seed=seed + 1, dtype=dtype),
        rand(b, n_f, d_v, seed=seed + 2, dtype=dtype),
    )
    return tuple(x.requires_grad_(grad) for x in (Q, K, V))


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize(
    "n_q,n_f,bq,bk", [(37, 37, 8, 5), (37, 53, 16, 16), (64, 64, 64, 64), (1, 1, 4, 4), (1, 9, 1, 2), (9, 1, 3, 1)]
)
@pytest.mark.parametrize("is_causal", [False, True])
def test_forward_matches_sdpa_and_attend(n_q, n_f, bq, bk, is_causal):
    Q, K, V = qkv(n_q=n_q, n_f=n_f, d_v=12)
    c = tiled_attend(Q, K, V, is_causal=is_causal, block_q=bq, block_k=bk)
    ref_sdpa = F.scaled_dot_product_attention(Q, K, V, is_causal=is_causal)
    ref_core, _ = attend(Q, K, V, causal_mask(n_q, n_f) if is_causal else None)
    torch.testing.assert_close(c, ref_sdpa, atol=1e-5, rtol=0)
    torch.testing.assert_close(c, ref_core, atol=1e-5, rtol=0)


def test_forward_with_boolean_mask_and_broadcast_batch():
    Q, K, V = qkv(b=3, n_q=20, n_f=30)
    mask = rand(3, 20, 30, seed=7) > 0
    c = tiled_attend(Q, K, V, mask, block_q=6, block_k=7)
    torch.testing.assert_close(c, F.scaled_dot_product_attention(Q, K, V, attn_mask=mask), atol=1e-5, rtol=0)
    # a key-padding mask (b, 1, n_f) and keys shared across the batch (n_f, d)
    pad = torch.arange(30)[None, None, :] < torch.tensor([30, 12, 1])[:, None, None]
    c2 = tiled_attend(Q, K[0], V[0], pad, block_q=4, block_k=8)
    torch.testing.assert_close(c2, attend(Q, K[0], V[0], pad)[0], atol=1e-5, rtol=0)


def test_mask_and_causal_combine_by_and():
    Q, K, V = qkv(n_q=25, n_f=25)
    mask = rand(2, 25, 25, seed=3) > -0.5
    c = tiled_attend(Q, K, V, mask, is_causal=True, block_q=7, block_k=4)
    torch.testing.assert_close(c, attend(Q, K, V, mask & causal_mask(25))[0], atol=1e-5, rtol=0)


@pytest.mark.catalog("extra:tiled-attention")
def test_merge_is_exact_and_associative():
    """Statistics of key sets A and B merged == statistics of A u B, in any grouping."""
    Q, K, V = qkv(b=1, n_q=6, n_f=12, dtype=torch.float64)
    Qs = Q / math.sqrt(Q.shape[-1])
    parts = [tile_stats(Qs, K[..., s : s + 4, :], V[..., s : s + 4, :]) for s in (0, 4, 8)]
    whole = tile_stats(Qs, K, V)
    left = online_softmax_merge(*online_softmax_merge(*parts[0], *parts[1]), *parts[2])
    right = online_softmax_merge(*parts[0], *online_softmax_merge(*parts[1], *parts[2]))
    for a, b, c in zip(left, right, whole):
        torch.testing.assert_close(a, c, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(b, c, atol=1e-12, rtol=1e-12)
    # hand computation for one row: m, l and acc of two scalar scores
    m, l, acc = online_softmax_merge(
        torch.tensor([1.0]),
        torch.tensor([1.0]),
        torch.tensor([[2.0]]),
        torch.tensor([3.0]),
        torch.tensor([1.0]),
        torch.tensor([[4.0]]),
    )
    assert m.item() == 3.0
    assert l.item() == pytest.approx(math.exp(-2) + 1)
    assert acc.item() == pytest.approx(2 * math.exp(-2) + 4)


def test_merge_with_empty_part_is_identity_and_two_empties_stay_empty():
    m, l, acc = torch.tensor([0.5]), torch.tensor([2.0]), torch.tensor([[1.0, -1.0]])
    empty = (torch.tensor([-math.inf]), torch.tensor([0.0]), torch.zeros(1, 2))
    for merged in (online_softmax_merge(m, l, acc, *empty), online_softmax_merge(*empty, m, l, acc)):
        for a, b in zip(merged, (m, l, acc)):
            assert torch.equal(a, b)
    m2, l2, acc2 = online_softmax_merge(*empty, *empty)
    assert m2.item() == -math.inf and l2.item() == 0.0 and torch.equal(acc2, torch.zeros(1, 2))
    c, L = finalize(m2, l2, acc2)
    assert torch.equal(c, torch.zeros(1, 2)) and L.item() == -math.inf


def test_logsumexp_is_the_rows_logsumexp():
    Q, K, V = qkv(n_q=10, n_f=13, dtype=torch.float64)
    _, L = finalize(*attention_stats(Q, K, V, block_q=3, block_k=4))
    e = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    torch.testing.assert_close(L, torch.logsumexp(e, -1), atol=1e-12, rtol=0)


@pytest.mark.catalog("extra:tiled-attention")
def test_gradcheck_float64():
    Q, K, V = qkv(b=1, n_q=7, n_f=9, d=4, d_v=3, dtype=torch.float64, grad=True)
    mask = rand(1, 7, 9, seed=5) > -0.3
    mask[0, 2] = False  # one fully-masked row
    assert torch.autograd.gradcheck(lambda q, k, v: tiled_attend(q, k, v, mask, block_q=3, block_k=4), (Q, K, V))
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attend(q, k, v, is_causal=True, block_q=2, block_k=3), (Q, K, V)
    )


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("is_causal", [False, True])
def test_gradients_match_sdpa(is_causal):
    Q, K, V = qkv(n_q=45, n_f=45, d_v=8, dtype=torch.float64, grad=True)
    dO = rand(2, 45, 8, seed=9, dtype=torch.float64)
    c = tiled_attend(Q, K, V, is_causal=is_causal, block_q=16, block_k=7)
    ref = F.scaled_dot_product_attention(Q, K, V, is_causal=is_causal)
    for mine, theirs in zip(torch.autograd.grad(c, (Q, K, V), dO), torch.autograd.grad(ref, (Q, K, V), dO)):
        torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=0)
        assert (mine - theirs).abs().max() < 1e-10  # in float64 the agreement is far tighter than the target


def test_gradients_reduce_over_broadcast_batch():
    Q, K, V = qkv(n_q=6, n_f=8, dtype=torch.float64, grad=True)
    K1, V1 = K[0].detach().requires_grad_(), V[0].detach().requires_grad_()
    dO = rand(2, 6, 16, seed=4, dtype=torch.float64)
    g_mine = torch.autograd.grad(tiled_attend(Q, K1, V1, block_q=4, block_k=3), (K1, V1), dO)
    g_ref = torch.autograd.grad(attend(Q, K1, V1)[0], (K1, V1), dO)
    for a, b in zip(g_mine, g_ref):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.catalog("extra:tiled-attention")
@settings(max_examples=25, deadline=None)
@given(
    bq=st.integers(1, 40), bk=st.integers(1, 40), n_q=st.integers(1, 33), n_f=st.integers(1, 33), causal=st.booleans()
)
def test_result_does_not_depend_on_block_size(bq, bk, n_q, n_f, causal):
    Q, K, V = qkv(b=1, n_q=n_q, n_f=n_f, d=8, dtype=torch.float64)
    one_tile = tiled_attend(Q, K, V, is_causal=causal, block_q=64, block_k=64)
    torch.testing.assert_close(
        tiled_attend(Q, K, V, is_causal=causal, block_q=bq, block_k=bk), one_tile, atol=1e-12, rtol=0
    )


@pytest.mark.catalog("extra:tiled-attention")
def test_fully_masked_rows_give_zero_context_and_gradient():
    Q, K, V = qkv(n_q=9, n_f=11, grad=True)
    mask = torch.ones(2, 9, 11, dtype=torch.bool)
    mask[0, 4] = False
    mask[1, :3] = False
    c = tiled_attend(Q, K, V, mask, block_q=2, block_k=3)
    assert torch.equal(c[0, 4], torch.zeros(16)) and torch.equal(c[1, :3], torch.zeros(3, 16))
    torch.testing.assert_close(c, attend(Q, K, V, mask)[0], atol=1e-5, rtol=0)
    (dQ,) = torch.autograd.grad(c.sum(), (Q,))
    assert torch.equal(dQ[0, 4], torch.zeros(16)) and torch.isfinite(dQ).all()
    # everything masked, and no keys at all
    assert torch.equal(tiled_attend(Q, K, V, torch.zeros(9, 11, dtype=torch.bool)), torch.zeros(2, 9, 16))
    assert torch.equal(tiled_attend(Q, K[:, :0], V[:, :0]), torch.zeros(2, 9, 16))


@pytest.mark.catalog("extra:tiled-attention")
def test_nan_in_masked_slots_is_inert():
    Q, K, V = qkv(n_q=8, n_f=10, dtype=torch.float64)
    mask = torch.ones(8, 10, dtype=torch.bool)
    mask[:, 7] = False  # key 7 is masked for every query
    mask[3] = False  # query 3 attends to nothing
    Qn, Kn, Vn = Q.clone(), K.clone(), V.clone()
    Qn[:, 3], Kn[:, 7], Vn[:, 7] = math.nan, math.nan, math.nan
    Qn, Kn, Vn = (x.requires_grad_() for x in (Qn, Kn, Vn))
    c = tiled_attend(Qn, Kn, Vn, mask, block_q=3, block_k=4)
    assert torch.isfinite(c).all()
    torch.testing.assert_close(c, attend(Q, K, V, mask)[0], atol=1e-12, rtol=0)
    grads = torch.autograd.grad(c.sum(), (Qn, Kn, Vn))
    assert all(torch.isfinite(g_).all() for g_ in grads)
    assert torch.equal(grads[1][:, 7], torch.zeros(2, 16)) and torch.equal(grads[2][:, 7], torch.zeros(2, 16))


def test_bad_input_errors():
    Q, K, V = qkv(n_q=4, n_f=5)
    with pytest.raises(ValueError, match="d_k of Q"):
        tiled_attend(Q, K[..., :3], V)
    with pytest.raises(ValueError, match="n_f of K"):
        tiled_attend(Q, K, V[:, :4])
    with pytest.raises(ValueError, match="boolean"):
        tiled_attend(Q, K, V, torch.ones(4, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        tiled_attend(Q, K, V, torch.ones(4, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="dtype mismatch"):
        tiled_attend(Q, K.double(), V)
    with pytest.raises(ValueError, match="floating-point"):
        tiled_attend(Q, K, torch.ones(2, 5, 16, dtype=torch.long))
    with pytest.raises(ValueError, match=r"Q must have shape"):
        tiled_attend(Q[0, 0], K, V)
    with pytest.raises(ValueError, match="needs block_q to be an integer >= 1, got block_q=0"):
        tiled_attend(Q, K, V, block_q=0)
    with pytest.raises(TypeError, match="needs block_k to be an integer >= 1, got block_k=2.5"):
        tiled_attend(Q, K, V, block_k=2.5)
    with pytest.raises(ValueError, match="batch dimensions"):
        tiled_attend(Q, rand(3, 5, 16), rand(3, 5, 16))


def test_analytic_costs():
    b = tile_bytes(16384, 16384, 256, 1024, 64, 64)
    assert b["plain"] == 2 * 16384**2 * 4  # 2 GiB: the scores and the weights
    assert b["tiled"] == (256 * 1024 + 2 * (2 * 256 + 256 * 64)) * 4
    assert b["tiles"] == 64 * 16
    assert attention_flops(10, 20, 8, 4) == 2 * 10 * 20 * 12
    assert attention_flops(10, 20, 8, 4, backward=True) == 2 * 10 * 20 * 12 + 2 * 10 * 20 * (24 + 8)


@pytest.mark.parametrize("bad", ["Q", "K", "V"])
@pytest.mark.parametrize("blocks", [(2, 2), (1, 3), (4, 4), (256, 1024)])
def test_a_nan_reaches_only_the_queries_that_may_attend_it(bad, blocks):
    """Review 2, D: a NaN value visible to one query made the whole tile NaN (0 * NaN in P @ V), and the
    backward pass spread it to every gradient; attend is the oracle (forward), and the rows it keeps finite."""
    g = torch.Generator().manual_seed(11)
    Q, K, V = (torch.randn(2, 4, 3, generator=g, dtype=torch.float64) for _ in range(3))
    {"Q": Q, "K": K, "V": V}[bad][0, 3] = math.nan  # the last position of example 0: only the last query sees it
    ins, ins_ref = [x.clone().requires_grad_() for x in (Q, K, V)], [x.clone().requires_grad_() for x in (Q, K, V)]
    c = tiled_attend(*ins, is_causal=True, block_q=blocks[0], block_k=blocks[1])
    ref = attend(*ins_ref, is_causal=True)[0]
    assert torch.equal(torch.isnan(c), torch.isnan(ref)) and torch.isnan(c[0, 3]).all()  # only query 3 of example 0
    torch.testing.assert_close(c[0, :3], ref[0, :3])
    torch.testing.assert_close(c[1], ref[1])
    w = torch.randn(c.shape, generator=g, dtype=torch.float64)
    keep = torch.isfinite(ref).all(-1, keepdim=True)  # the loss reads the finite contexts only
    grads = torch.autograd.grad(torch.where(keep, c * w, 0.0).sum(), ins)
    refs = torch.autograd.grad(torch.where(keep, ref * w, 0.0).sum(), ins_ref)
    for g_, r_ in zip(grads, refs):  # a NaN context passes no gradient: all finite, equal to attend's finite ones
        assert torch.isfinite(g_).all()
        torch.testing.assert_close(g_[torch.isfinite(r_)], r_[torch.isfinite(r_)])
        torch.testing.assert_close(g_[1], r_[1])


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf])
def test_non_finite_scale_is_refused_as_in_attend(scale):
    """Review 2, D: tiled_attend accepted scale=nan/inf (all-NaN output) where attend raises."""
    Q, K, V = qkv(n_q=3, n_f=4)
    with pytest.raises(ValueError, match="must be a finite number"):
        attend(Q, K, V, scale=scale)
    with pytest.raises(ValueError, match="must be a finite number"):
        tiled_attend(Q, K, V, scale=scale)


@pytest.mark.parametrize("call", ["tiled_attend", "attention_stats"])
def test_an_unknown_option_name_is_refused_not_ignored(call):
    """Review 3: ``tiled_attend(..., is_casual=True)`` (a typo) ran non-causal attention silently."""
    Q, K, V = qkv(n_q=5, n_f=5)
    fn = {"tiled_attend": tiled_attend, "attention_stats": attention_stats}[call]
    ref = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    torch.testing.assert_close(tiled_attend(Q, K, V, is_causal=True), ref)  # the right name: causal
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['is_casual'\]; TileOptions declares .*'is_causal'"):
        fn(Q, K, V, is_casual=True)


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-3), (torch.bfloat16, 8e-3)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_half_precision_accumulates_in_float32(dtype, tol, is_causal):
    """Large scores (near 500) and values near 1000: float16 scores overflow, float32 accumulation does not."""
    g = torch.Generator().manual_seed(2)
    Q = (torch.randn(2, 40, 16, generator=g) * 12).to(dtype)
    K = (torch.randn(2, 40, 16, generator=g) * 12).to(dtype)
    V = (1000 + torch.randn(2, 40, 8, generator=g)).to(dtype)
    assert (Q.float() @ K.float().transpose(-1, -2)).abs().max() > 1000  # the scores overflow float16's 65504 / 4
    c = tiled_attend(Q, K, V, is_causal=is_causal, block_q=8, block_k=16)
    ref = F.scaled_dot_product_attention(Q.float(), K.float(), V.float(), is_causal=is_causal).to(dtype)
    assert c.dtype == dtype and torch.isfinite(c).all()
    torch.testing.assert_close(c.float(), ref.float(), rtol=tol, atol=0)  # within a rounding of the dtype


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients_match_float32_reference(dtype):
    Q, K, V = (x.to(dtype).requires_grad_() for x in qkv(b=1, n_q=30, n_f=30, d=8))
    c = tiled_attend(Q, K, V, block_q=8, block_k=8)
    grads = torch.autograd.grad(c.float().sum(), (Q, K, V))
    Qf, Kf, Vf = (x.detach().float().requires_grad_() for x in (Q, K, V))
    refs = torch.autograd.grad(F.scaled_dot_product_attention(Qf, Kf, Vf).sum(), (Qf, Kf, Vf))
    for g_, r_ in zip(grads, refs):
        assert g_.dtype == dtype
        torch.testing.assert_close(g_.float(), r_, atol=3e-2 if dtype == torch.bfloat16 else 4e-3, rtol=0)


def dense_dropout_reference(Q, K, V, keep, p, is_causal=False):
    """softmax(Q K^T / sqrt(d)) with the keep-mask applied and rescaled, times V: the dense oracle."""
    e = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    if is_causal:
        e = e.masked_fill(~causal_mask(Q.shape[-2], K.shape[-2]), -math.inf)
    return (torch.softmax(e, -1) * keep / (1 - p)) @ V


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("is_causal", [False, True])
def test_dropout_forward_and_gradients_match_dense_reference_with_the_same_mask(is_causal):
    Q, K, V = qkv(n_q=23, n_f=29, d_v=6, dtype=torch.float64, grad=True)
    if is_causal:
        Q, K, V = (x[:, :23].detach().requires_grad_() for x in (Q, K, V))
    p, seed = 0.3, 1234
    c = tiled_attend(Q, K, V, is_causal=is_causal, block_q=5, block_k=7, dropout_p=p, dropout_seed=seed)
    keep = dropout_keep_mask(seed, (2, Q.shape[-2], K.shape[-2]), p)
    assert 0.2 < 1 - keep.float().mean() < 0.4  # about p of the weights dropped
    ref = dense_dropout_reference(Q, K, V, keep, p, is_causal)
    torch.testing.assert_close(c, ref, atol=1e-12, rtol=0)
    dO = rand(*c.shape, seed=8, dtype=torch.float64)
    for mine, theirs in zip(torch.autograd.grad(c, (Q, K, V), dO), torch.autograd.grad(ref, (Q, K, V), dO)):
        torch.testing.assert_close(mine, theirs, atol=1e-12, rtol=0)


def test_dropout_mask_is_independent_of_tiles_and_drawn_from_the_generator():
    Q, K, V = qkv(n_q=17, n_f=19, dtype=torch.float64)
    a = tiled_attend(Q, K, V, block_q=3, block_k=4, dropout_p=0.5, generator=torch.Generator().manual_seed(9))
    b = tiled_attend(Q, K, V, block_q=17, block_k=19, dropout_p=0.5, generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    seed = draw_dropout_seed(torch.Generator().manual_seed(9))
    ref = dense_dropout_reference(Q, K, V, dropout_keep_mask(seed, (2, 17, 19), 0.5), 0.5)
    torch.testing.assert_close(a, ref, atol=1e-12, rtol=0)
    other = tiled_attend(Q, K, V, dropout_p=0.5, dropout_seed=seed + 1)
    assert not torch.allclose(a, other)  # another seed drops other weights
    assert torch.equal(tiled_attend(Q, K, V, dropout_p=0.0, dropout_seed=5), tiled_attend(Q, K, V))
    with pytest.raises(ValueError, match=r"dropout_p must be a probability in \[0, 1\)"):
        tiled_attend(Q, K, V, dropout_p=1.0)


def test_gradcheck_with_dropout():
    Q, K, V = qkv(b=1, n_q=5, n_f=6, d=3, dtype=torch.float64, grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attend(q, k, v, block_q=2, block_k=4, dropout_p=0.4, dropout_seed=3), (Q, K, V)
    )


def test_zero_key_size_is_refused_with_a_clear_error():
    Q, K, V = qkv(n_q=4, n_f=6, d=0, d_v=5)
    # the core follows SDPA (uniform weights: the mean of the values); the tiled path refuses d_k = 0
    # rather than divide by sqrt(0), as its docstring says
    torch.testing.assert_close(attend(Q, K, V)[0], F.scaled_dot_product_attention(Q, K, V))
    with pytest.raises(ValueError, match=r"needs d_k >= 1 .* got d_k=0"):
        tiled_attend(Q, K, V)


def test_one_dimensional_key_mask_broadcasts():
    Q, K, V = qkv(n_q=6, n_f=9)
    keys = torch.tensor([True, False, True, True, False, True, True, True, False])
    c = tiled_attend(Q, K, V, keys, block_q=4, block_k=2)
    torch.testing.assert_close(c, F.scaled_dot_product_attention(Q, K, V, attn_mask=keys), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "call,symbol",
    [
        (lambda: tile_bytes(-1, 4, 2, 2, 8, 8), "n_q"),
        (lambda: tile_bytes(4, 4, 2, 2, 8, -8), "d_v"),
        (lambda: tile_bytes(4, 4, 0, 2, 8, 8), "block_q"),
        (lambda: attention_flops(4, -5, 8, 8), "n_f"),
        (lambda: attention_flops(4, 5, -8, 8), "d_k"),
    ],
)
def test_negative_sizes_are_refused_naming_the_symbol(call, symbol):
    with pytest.raises(ValueError, match=rf"^(tile_bytes|attention_flops) needs {symbol} to be an integer >= "):
        call()


def test_tile_constants_are_the_defaults():
    Q, K, V = qkv(b=1, n_q=3, n_f=3)
    s = tile_settings(16, {})
    assert (s.block_q, s.block_k) == (BLOCK_Q, BLOCK_K) == (256, 1024)
    assert s.scale == 0.25 and s.dropout_seed is None
    assert tiled_attend(Q, K, V).shape == (1, 3, 16)
