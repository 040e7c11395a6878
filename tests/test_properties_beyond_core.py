"""Property tests (hypothesis, bounded) for the mechanisms beyond the attention core.

Invariants: weights sum to 1 over the allowed positions (0 for a fully masked row),
masked positions are inert (NaN there changes nothing, gradients stay finite),
self-attention without positions is permutation-equivariant, shapes follow the
documented contract.
"""

from __future__ import annotations

import os

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.feature_related import co_attention as co
from attnsurvey.general_mechanisms import dimensionality as dm
from attnsurvey.general_mechanisms import sparse_maps as sm
from attnsurvey.query_related import capsule as ca
from attnsurvey.query_related import types as ty
from attnsurvey.transformer import lite, local

D64 = torch.float64
BOUNDED = settings(max_examples=40, deadline=None)


def test_the_property_profile_is_reproducible_and_untimed():
    """tests/conftest.py loads a profile with no deadline (hypothesis's default of 200 ms would make a verdict
    depend on the machine's load) that draws the same examples on every run, unless HYPOTHESIS_PROFILE=explore."""
    assert settings.default.deadline is None
    assert settings.default.derandomize == (os.environ.get("HYPOTHESIS_PROFILE", "reproducible") == "reproducible")


@st.composite
def pools(draw):
    """Features (B, n_f, d) with a (B, n_f) key mask (possibly all False for a row) and parameters."""
    B, n_f, d = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 4))
    g = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    F = torch.randn(B, n_f, d, generator=g, dtype=D64) * 2
    mask = torch.rand(B, n_f, generator=g) < draw(st.floats(0.0, 1.0))
    params = [
        torch.randn(d, d, generator=g, dtype=D64),
        torch.randn(d, generator=g, dtype=D64),
        torch.randn(d, generator=g, dtype=D64),
    ]
    return F, mask, params


POOLERS = {
    "learned_query": lambda F, m, p: ty.learned_query_attention(F, F, p[1], m),
    "queryless": lambda F, m, p: ty.queryless_attention(F, F, p[0], p[1], p[2], m),
    "source2token": lambda F, m, p: ty.source2token(F, p[0], p[0], p[1], mask=m),
    "capsule": lambda F, m, p: (lambda o: (o.r, o.a))(
        ca.capsule_attention(F, F, p[0][:2], p[0][:2], p[1][:2] if p[1].numel() >= 2 else torch.zeros(2, dtype=D64), m)
    )
    if F.shape[-1] >= 2
    else ty.learned_query_attention(F, F, p[1], m),
}


def _poison(F: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask[..., None], F, torch.full((), float("nan"), dtype=F.dtype))


@BOUNDED
@given(pools(), st.sampled_from(list(POOLERS)))
def test_pooling_weights_sum_to_one_and_masked_slots_are_inert(p, name):
    F, mask, params = p
    c, a = POOLERS[name](F, mask, params)
    key_mask = mask if a.dim() == 2 else mask[:, None]  # capsules: one row of weights per class
    torch.testing.assert_close(a.sum(-1), key_mask.any(-1).to(D64).expand(a.shape[:-1]))
    assert torch.all(a.masked_select(~key_mask.expand(a.shape)) == 0)
    Fg = _poison(F, mask).requires_grad_(True)
    c_bad, _ = POOLERS[name](Fg, mask, params)
    torch.testing.assert_close(c_bad, c)
    c_bad.sum().backward()
    assert torch.isfinite(Fg.grad).all()


@BOUNDED
@given(pools())
def test_mean_pool_and_mean_key_are_the_masked_mean(p):
    F, mask, _ = p
    count = mask.sum(-1, keepdim=True)
    ref = torch.where(count > 0, (F * mask[..., None]).sum(-2) / count.clamp_min(1), torch.zeros((), dtype=D64))
    torch.testing.assert_close(ty.mean_pool(_poison(F, mask), mask), ref)
    torch.testing.assert_close(co.mean_key(_poison(F, mask), mask), ref)


@BOUNDED
@given(pools())
def test_multidimensional_weights_sum_to_one_per_feature(p):
    F, mask, params = p
    d = F.shape[-1]
    Q = F[:, :1]
    c, A = dm.multidimensional_attend(Q, F, F, params[0], params[0], params[0], mask=mask[:, None])
    assert A.shape == (F.shape[0], 1, F.shape[1], d) and c.shape == (F.shape[0], 1, d)
    torch.testing.assert_close(A.sum(-2), mask.any(-1)[:, None, None].to(D64).expand(-1, 1, d))
    c_bad, _ = dm.multidimensional_attend(
        Q, _poison(F, mask), _poison(F, mask), params[0], params[0], params[0], mask=mask[:, None]
    )
    torch.testing.assert_close(c_bad, c)


@BOUNDED
@given(pools(), st.floats(1.0, 3.0), st.integers(1, 6))
def test_sparse_maps_sum_to_one_and_ignore_k(p, alpha, k):
    F, mask, _ = p
    e = F[..., 0]
    alive = mask.any(-1).to(D64)
    for a in (sm.entmax_bisect(e, alpha, mask), sm.sparsemax(e, mask, k=k), sm.entmax15(e, mask, k=k)):
        torch.testing.assert_close(a.sum(-1), alive)
        assert torch.all(a >= 0) and torch.all(a.masked_select(~mask) == 0)
    torch.testing.assert_close(sm.sparsemax(e, mask, k=k), sm.sparsemax(e, mask))


@BOUNDED
@given(pools(), st.data())
def test_self_attention_without_positions_is_permutation_equivariant(p, data):
    """Permuting the tokens (and a square mask's rows and columns with them) permutes C's rows and A's rows
    and columns the same way; with and without a mask (one that pads keys and may kill whole query rows)."""
    F, key_mask, params = p
    W = params[0]
    B, n = F.shape[:2]
    perm = torch.tensor(data.draw(st.permutations(range(n)), label="perm"), dtype=torch.long)
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 10_000), label="mask seed"))
    mask = (torch.rand(B, n, n, generator=g) < 0.7) & key_mask[:, None, :]  # (B, n_f, n_f), True = may attend
    for m, m_perm in ((None, None), (mask, mask[:, perm][:, :, perm])):
        C, A = ty.self_attention(F, W, W.T, W, m)
        C_perm, A_perm = ty.self_attention(F[:, perm], W, W.T, W, m_perm)
        torch.testing.assert_close(C_perm, C[:, perm])
        torch.testing.assert_close(A_perm, A[:, perm][:, :, perm])


MASK_LAYOUTS = ("full", "shared", "keys", "queries")  # (B, n_q, n_f), (1, n_q, n_f), (B, 1, n_f), (B, n_q, 1)


@BOUNDED
@given(
    st.integers(1, 2),
    st.integers(1, 7),
    st.integers(1, 7),
    st.integers(1, 3),
    st.integers(1, 8),
    st.integers(1, 8),
    st.booleans(),
    st.sampled_from(MASK_LAYOUTS),
    st.data(),
)
def test_tiled_attend_equals_attend_with_random_masks(B, n_q, n_f, d, block_q, block_k, is_causal, layout, data):
    """tiled_attend (tile by tile, online softmax, recomputing backward) against attend (Eq. 2-4 in one
    piece): context and gradients, for boolean masks of every broadcast layout, fully masked rows
    (context and gradients 0) and block sizes that do or do not divide n_q and n_f."""
    from attnsurvey.attention import attend
    from attnsurvey.beyond.tiled import tiled_attend

    g = torch.Generator().manual_seed(data.draw(st.integers(0, 10_000), label="seed"))
    Q, K, V = (torch.randn(B, n, d, generator=g, dtype=D64) * 2 for n in (n_q, n_f, n_f))
    bits = data.draw(st.lists(st.booleans(), min_size=B * n_q * n_f, max_size=B * n_q * n_f), label="mask")
    full = torch.tensor(bits, dtype=torch.bool).reshape(B, n_q, n_f)
    full[:, data.draw(st.lists(st.integers(0, n_q - 1), max_size=2), label="dead rows")] = False
    mask = {"full": full, "shared": full[:1], "keys": full[:, :1], "queries": full[..., :1]}[layout]
    dc = torch.randn(B, n_q, d, generator=g, dtype=D64)  # a random cotangent: gradients of more than a sum
    results = []
    for fn in (
        lambda q, k, v: tiled_attend(q, k, v, mask, block_q=block_q, block_k=block_k, is_causal=is_causal),
        lambda q, k, v: attend(q, k, v, mask, is_causal=is_causal)[0],
    ):
        Qg, Kg, Vg = (t.clone().requires_grad_() for t in (Q, K, V))
        c = fn(Qg, Kg, Vg)
        (c * dc).sum().backward()
        results.append((c.detach(), Qg.grad, Kg.grad, Vg.grad))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)
    allowed = mask.expand(B, n_q, n_f) & (torch.ones(n_q, n_f, dtype=torch.bool).tril() if is_causal else True)
    dead = ~allowed.any(-1)
    c, dQ = results[0][:2]
    assert torch.all(c[dead] == 0) and torch.all(dQ[dead] == 0)


@BOUNDED
@given(pools(), st.integers(0, 3))
def test_local_window_attention_equals_dense_banded_attention(p, w):
    from attnsurvey.attention import attend
    from attnsurvey.masking import band_mask

    F = p[0]
    c, a_band = local.local_window_attention(F, F, F, w)
    n = F.shape[1]
    assert c.shape == F.shape and a_band.shape == (F.shape[0], n, 2 * w + 1)
    torch.testing.assert_close(c, attend(F, F, F, band_mask(n, w)[None])[0])


@BOUNDED
@given(pools())
def test_lite_block_padding_is_inert(p):
    F, mask, _ = p
    if F.shape[-1] % 2:
        F = torch.cat([F, F[..., :1]], -1)
    d = F.shape[-1]
    torch.manual_seed(0)
    blk = lite.LiteTransformerBlock(d, 1, 2 * d).double().eval()
    out = blk(F, key_padding_mask=mask)[0]
    out_bad = blk(_poison(F, mask), key_padding_mask=mask)[0]
    torch.testing.assert_close(out_bad[mask], out[mask])
