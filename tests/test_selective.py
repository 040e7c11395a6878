"""Attention that selects (MoBA, NSA, DeepSeek sparse attention): selections against brute-force loops, dense
equivalence when every key is selected (against the core and torch's SDPA), ties, NaN in padding, errors, costs,
and the causal layers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.attention import attend
from attnsurvey.beyond import selective as sel
from attnsurvey.beyond.selective import (
    DSALayer,
    MoBALayer,
    NSALayer,
    block_selection,
    dense_causal_cost,
    dsa_attention,
    dsa_cost,
    dsa_mask,
    indexer_distillation_loss,
    lightning_index_scores,
    moba_attention,
    moba_cost,
    moba_gate_scores,
    moba_mask,
    nsa_attention,
    nsa_cost,
    top_k_mask,
)
from attnsurvey.query_related.multihead import MultiHeadAttention

D64 = torch.float64


def qkv(n: int, d: int = 4, batch: tuple[int, ...] = (), seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*batch, n, d, generator=g, dtype=D64) for _ in range(3))


def top_by_loop(scores: list[float], candidates: list[int], k: int | None) -> set[int]:
    """The oracle's top-k: sort the candidates by (score descending, index ascending)."""
    ranked = sorted(candidates, key=lambda b: (-scores[b], b))
    return set(ranked if k is None else ranked[:k])


# ------------------------------------------------------------------------------------------------ top-k
def test_top_k_breaks_ties_towards_the_lower_index_and_ignores_ineligible_nan():
    s = torch.tensor([[1.0, 3.0, 3.0, 3.0, float("nan")]])
    eligible = torch.tensor([[True, True, True, True, False]])
    assert top_k_mask(s, eligible, 2).tolist() == [[False, True, True, False, False]]
    assert top_k_mask(s, eligible, 10).tolist() == eligible.tolist()  # more than there are: all eligible
    # an eligible -inf still beats an ineligible entry
    s2 = torch.tensor([[5.0, -math.inf]])
    assert top_k_mask(s2, torch.tensor([[False, True]]), 1).tolist() == [[False, True]]


# ------------------------------------------------------------------------------------------------ MoBA
def moba_oracle(q: torch.Tensor, k: torch.Tensor, B: int, top_k: int | None) -> torch.Tensor:
    n_q, n_f = q.shape[0], k.shape[0]
    n_b = -(-n_f // B)
    out = torch.zeros(n_q, n_f, dtype=torch.bool)
    for t in range(n_q):
        own = t // B
        scores = [float(q[t] @ k[b * B : (b + 1) * B].mean(0)) for b in range(n_b)]
        chosen = top_by_loop(scores, list(range(min(own, n_b))), None if top_k is None else top_k - 1) | {own}
        for j in range(min(t + 1, n_f)):
            out[t, j] = j // B in chosen
    return out


@pytest.mark.catalog("extra:moba")
@pytest.mark.parametrize(("n", "B", "top_k"), [(10, 3, 2), (12, 4, 1), (9, 2, 3), (7, 7, 2), (11, 1, 4)])
def test_moba_mask_matches_a_loop(n, B, top_k):
    q, k, _ = qkv(n, seed=n + B)
    assert torch.equal(moba_mask(q, k, B, top_k), moba_oracle(q, k, B, top_k))


@pytest.mark.catalog("extra:moba")
def test_moba_gate_is_the_dot_product_with_the_block_mean():
    q, k, _ = qkv(7)
    gate = moba_gate_scores(q, k, 3)
    expect = torch.stack([k[0:3].mean(0), k[3:6].mean(0), k[6:7].mean(0)]) @ q.T
    torch.testing.assert_close(gate, expect.T)


@pytest.mark.catalog("extra:moba")
def test_moba_never_reads_the_future_and_always_its_own_block():
    q, k, _ = qkv(16, batch=(3,), seed=1)
    m = moba_mask(q, k, 4, 2)
    assert not (m & ~torch.ones(16, 16, dtype=torch.bool).tril()).any()
    for t in range(16):
        assert m[:, t, (t // 4) * 4 : t + 1].all()


def _own_block_not_forced(block_scores, block_size, top_k):  # a planted bug: the own block must win the gate
    n_q, n_b = block_scores.shape[-2:]
    own = (torch.arange(n_q) // block_size)[:, None]
    b = torch.arange(n_b)[None, :]
    return sel._top_k(block_scores, (b <= own).expand(block_scores.shape), top_k)


def _future_block_selectable(block_scores, block_size, top_k):  # a planted bug: any block may be chosen
    n_q, n_b = block_scores.shape[-2:]
    own = (torch.arange(n_q) // block_size)[:, None]
    b = torch.arange(n_b)[None, :]
    return sel._top_k(
        block_scores, torch.ones_like(block_scores, dtype=torch.bool), None if top_k is None else top_k - 1
    ) | (b == own)


@pytest.mark.parametrize("bug", [_own_block_not_forced, _future_block_selectable])
def test_the_loop_oracle_rejects_planted_bugs(monkeypatch, bug):
    monkeypatch.setattr(sel, "_block_selection", bug)
    q, k, _ = qkv(16, seed=3)
    assert not torch.equal(moba_mask(q, k, 4, 2), moba_oracle(q, k, 4, 2))


@pytest.mark.catalog("extra:moba")
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 20), B=st.integers(1, 8), extra=st.integers(0, 3), seed=st.integers(0, 10**6))
def test_moba_with_every_block_is_dense_causal_attention(n, B, extra, seed):
    q, k, v = qkv(n, batch=(2,), seed=seed)
    top_k = -(-n // B) + extra  # at least the number of blocks
    c, a = moba_attention(q, k, v, B, top_k)
    c0, a0 = attend(q, k, v, is_causal=True)
    torch.testing.assert_close(c, c0)
    torch.testing.assert_close(a, a0)
    torch.testing.assert_close(c, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert torch.equal(moba_mask(q, k, B, None), torch.ones(n, n, dtype=torch.bool).tril().expand(2, n, n))


@pytest.mark.catalog("extra:moba")
def test_moba_weights_vanish_outside_the_selection_and_match_a_masked_softmax():
    q, k, v = qkv(12, seed=4)
    m = moba_mask(q, k, 3, 2)
    c, a = moba_attention(q, k, v, 3, 2)
    e = (q @ k.T / 2.0).masked_fill(~m, -math.inf)  # float64 naive form, d = 4
    torch.testing.assert_close(a, e.softmax(-1))
    torch.testing.assert_close(c, e.softmax(-1) @ v)


@pytest.mark.catalog("extra:moba")
def test_moba_padded_nan_keys_are_inert():
    q, k, v = qkv(9, batch=(2,), seed=5)
    kpm = torch.ones(2, 9, dtype=torch.bool)
    kpm[1, 7:] = False
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[1, 7:], v_nan[1, 7:] = float("nan"), float("nan")
    k0, v0 = k.clone(), v.clone()
    k0[1, 7:], v0[1, 7:] = 0.0, 0.0
    c1, _ = moba_attention(q, k_nan, v_nan, 3, 2, kpm)
    c2, _ = moba_attention(q, k0, v0, 3, 2, kpm)
    assert torch.isfinite(c1).all()
    torch.testing.assert_close(c1, c2)


# ------------------------------------------------------------------------------------------------ DSA
@pytest.mark.catalog("extra:dsa-indexer")
def test_lightning_index_scores_match_a_loop():
    g = torch.Generator().manual_seed(0)
    qI, kI, w = torch.randn(5, 3, 2, generator=g), torch.randn(6, 2, generator=g), torch.randn(5, 3, generator=g)
    I = lightning_index_scores(qI, kI, w)
    for t in range(5):
        for s in range(6):
            expect = sum(float(w[t, j]) * max(0.0, float(qI[t, j] @ kI[s])) for j in range(3))
            assert abs(float(I[t, s]) - expect) < 1e-5


def dsa_oracle(I: torch.Tensor, top_k: int | None) -> torch.Tensor:
    n_q, n_f = I.shape
    out = torch.zeros(n_q, n_f, dtype=torch.bool)
    for t in range(n_q):
        for s in top_by_loop(I[t].tolist(), list(range(min(t + 1, n_f))), top_k):
            out[t, s] = True
    return out


@pytest.mark.catalog("extra:dsa-indexer")
@pytest.mark.parametrize("top_k", [1, 2, 5, None])
def test_dsa_mask_matches_a_loop_with_ties(top_k):
    I = torch.randint(0, 3, (9, 9)).to(D64)  # many ties
    assert torch.equal(dsa_mask(I, top_k), dsa_oracle(I, top_k))


@pytest.mark.catalog("extra:dsa-indexer")
@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 16), extra=st.integers(0, 3), seed=st.integers(0, 10**6))
def test_dsa_with_every_token_is_dense_causal_attention(n, extra, seed):
    q, k, v = qkv(n, batch=(2, 3), seed=seed)  # (B, h, n, d): the selection is shared by the heads
    I = torch.randn(2, 1, n, n, dtype=D64, generator=torch.Generator().manual_seed(seed))
    c, _ = dsa_attention(q, k, v, I, n + extra)
    torch.testing.assert_close(c, attend(q, k, v, is_causal=True)[0])
    torch.testing.assert_close(c, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.catalog("extra:dsa-indexer")
def test_dsa_padded_nan_index_keys_are_inert():
    g = torch.Generator().manual_seed(1)
    qI, kI, w = (
        torch.randn(2, 6, 2, 3, generator=g),
        torch.randn(2, 6, 3, generator=g),
        torch.rand(2, 6, 2, generator=g),
    )
    kpm = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    kI_nan = kI.clone()
    kI_nan[1, 4:] = float("nan")
    I = lightning_index_scores(qI, kI_nan, w, kpm)
    assert torch.isfinite(I).all()
    m = dsa_mask(I, 3, kpm)
    assert not m[1, :, 4:].any()
    torch.testing.assert_close(m.sum(-1)[1].tolist(), [1, 2, 3, 3, 3, 3])


@pytest.mark.catalog("extra:dsa-indexer")
def test_indexer_distillation_loss_is_zero_at_the_target_and_trains_only_the_indexer():
    q, k, v = qkv(6, batch=(2,), seed=7)
    _, a = attend(q, k, v, is_causal=True)  # (h=2, n, n)
    target = a.sum(0) / 2
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    I_exact = torch.where(causal, target.clamp_min(1e-300).log(), 0.0)
    assert float(indexer_distillation_loss(I_exact, a, causal)) < 1e-12
    I = torch.zeros(6, 6, dtype=D64, requires_grad=True)
    a_req = a.clone().requires_grad_(True)
    loss = indexer_distillation_loss(I, a_req, causal)
    # KL(p || uniform over t + 1 keys), summed over the rows: by hand
    expect = sum(float((target[t, : t + 1] * (target[t, : t + 1] * (t + 1)).log()).sum()) for t in range(6))
    assert abs(float(loss.detach()) - expect) < 1e-10
    loss.backward()
    assert I.grad is not None and I.grad.abs().sum() > 0 and a_req.grad is None


# ------------------------------------------------------------------------------------------------ NSA
def test_nsa_branches_match_loops():
    n, B = 10, 3
    q, k, v = qkv(n, seed=8)
    gates = torch.rand(n, 3, dtype=D64, generator=torch.Generator().manual_seed(0))
    out = nsa_attention(q, k, v, gates, block_size=B, top_n=2, window=3)
    kc = torch.stack([k[b * B : (b + 1) * B].mean(0) for b in range(4)])
    vc = torch.stack([v[b * B : (b + 1) * B].mean(0) for b in range(4)])
    for t in range(n):
        vis = [b for b in range(4) if (b + 1) * B - 1 <= t]
        if vis:
            w = torch.softmax(torch.stack([q[t] @ kc[b] / 2 for b in vis]), 0)
            torch.testing.assert_close(out.branches[0][t], (w[:, None] * vc[vis]).sum(0))
            torch.testing.assert_close(out.p_cmp[t, vis], w)
        else:
            assert not out.branches[0][t].any()
        own = t // B
        chosen = top_by_loop(out.p_cmp[t].tolist(), list(range(own)), 1) | {own}
        keys = [j for j in range(t + 1) if j // B in chosen]
        assert out.selected[t].nonzero().flatten().tolist() == keys
        w = torch.softmax(torch.stack([q[t] @ k[j] / 2 for j in keys]), 0)
        torch.testing.assert_close(out.branches[1][t], (w[:, None] * v[keys]).sum(0))
        win = list(range(max(0, t - 2), t + 1))
        w = torch.softmax(torch.stack([q[t] @ k[j] / 2 for j in win]), 0)
        torch.testing.assert_close(out.branches[2][t], (w[:, None] * v[win]).sum(0))
    torch.testing.assert_close(out.c, sum(gates[:, i : i + 1] * out.branches[i] for i in range(3)))


@pytest.mark.catalog("extra:nsa")
@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 16), B=st.integers(1, 6), seed=st.integers(0, 10**6))
def test_nsa_selected_or_window_branch_alone_with_everything_is_dense(n, B, seed):
    q, k, v = qkv(n, batch=(2,), seed=seed)
    dense = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for gates, top_n, window in (((0.0, 1.0, 0.0), None, 1), ((0.0, 0.0, 1.0), 1, n)):
        g = torch.tensor(gates, dtype=D64).expand(2, n, 3)
        torch.testing.assert_close(nsa_attention(q, k, v, g, block_size=B, top_n=top_n, window=window).c, dense)


# ------------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda q, k, v: moba_mask(q, k, 0, 2), "block_size"),
        (lambda q, k, v: moba_mask(q, k, 2, 0), "top_k"),
        (lambda q, k, v: moba_mask(q, k[..., :3], 2, 1), "d of q"),
        (lambda q, k, v: moba_attention(q, k, v[:4], 2, 1), "n_f of k"),
        (lambda q, k, v: dsa_mask(q @ k.T, 0), "top_k"),
        (lambda q, k, v: dsa_attention(q, k, v, q @ k[:3].T, 2), "index_scores"),
        (
            lambda q, k, v: nsa_attention(q, k, v, torch.zeros(6, 2, dtype=D64), block_size=2, top_n=1, window=2),
            "gates",
        ),
        (
            lambda q, k, v: nsa_attention(q, k, v, torch.zeros(6, 3, dtype=D64), block_size=2, top_n=1, window=0),
            "window",
        ),
        (lambda q, k, v: block_selection(q @ k.T, 2, 6, 1), "n_b"),
        (lambda q, k, v: lightning_index_scores(q[:, None], k, torch.ones(6, 2, dtype=D64)), "w_index"),
        (lambda q, k, v: moba_cost(8, 4, 0, 1), "block_size"),
        (lambda q, k, v: dsa_cost(8, 4, 0, 1, 1), "top_k"),
    ],
)
def test_bad_inputs_raise_naming_the_symbol(call, match):
    q, k, v = qkv(6)
    with pytest.raises(ValueError, match=match):
        call(q, k, v)


def test_moba_refuses_a_list():
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        moba_mask([[1.0]], torch.ones(1, 1), 1, 1)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ costs
@pytest.mark.catalog("extra:moba")
def test_moba_cost_by_hand():
    # n = 4, d = 1, B = 2, top_k = 1: queries read 1, 2, 1, 2 keys (4 FLOPs each); queries 2, 3 score one block (2)
    c = moba_cost(4, 1, 2, 1, bytes_per_value=1)
    assert c.flops == [4, 8, 6, 10] and c.shared_flops == 4 and c.total_flops == 32
    assert c.bytes_read == [2, 4, 3, 5] and c.total_bytes == 14 + 4
    # with every block, MoBA reads what dense attention reads, plus its gate
    dense = dense_causal_cost(4, 1, 1)
    assert dense.flops == [4, 8, 12, 16] and dense.total_bytes == 20
    assert moba_cost(4, 1, 2, None, 1).flops == [4, 8, 14, 18]


@pytest.mark.catalog("extra:dsa-indexer")
def test_dsa_cost_by_hand():
    # n = 3, d = 2, top_k = 1, H_I = 2, d_I = 1: indexer 2 * (2 + 2) = 8 FLOPs per visible token, attention 8 FLOPs
    c = dsa_cost(3, 2, 1, 2, 1, bytes_per_value=2, bytes_per_index_value=1)
    assert c.flops == [8 + 8, 8 + 16, 8 + 24]
    assert c.bytes_read == [8 + 1, 8 + 2, 8 + 3]
    assert c.total_flops == 72 and c.total_bytes == 30
    # one indexer for 4 heads: the attention counted 4 times, the indexer once
    c4 = dsa_cost(3, 2, 1, 2, 1, bytes_per_value=2, bytes_per_index_value=1, n_heads=4)
    assert c4.flops == [32 + 8, 32 + 16, 32 + 24] and c4.bytes_read == [32 + 1, 32 + 2, 32 + 3]


@pytest.mark.catalog("extra:nsa")
def test_nsa_cost_by_hand():
    # n = 4, d = 1, B = 2, top_n = 1, window = 1: compressed blocks complete by query t: 0, 1, 1, 2;
    # selected keys 1, 2, 1, 2; window 1 each: 2, 4, 3, 5 keys and values, 4 FLOPs and 2 numbers per key
    c = nsa_cost(4, 1, 2, 1, 1, bytes_per_value=1)
    assert c.flops == [8, 16, 12, 20] and c.shared_flops == 8 and c.total_bytes == 28 + 8


def test_selection_cost_grows_linearly_where_dense_grows_quadratically():
    d, B, k = 64, 64, 4
    ratio = [dense_causal_cost(n, d).total_flops / moba_cost(n, d, B, k).total_flops for n in (1024, 4096)]
    assert ratio[1] > 3 * ratio[0]


# ------------------------------------------------------------------------------------------------ layers
def _dense_reference(layer) -> torch.Tensor:
    mha = MultiHeadAttention(16, 4)
    mha.load_state_dict(layer.attn.state_dict())
    return mha


@pytest.mark.catalog("extra:moba")
@pytest.mark.parametrize("top_k", [None, 3, 9])
def test_moba_layer_with_every_block_is_the_dense_causal_layer(top_k):
    torch.manual_seed(0)
    layer = MoBALayer(16, 4, block_size=4, top_k=top_k)
    x = torch.randn(2, 12, 16)
    ref, _ = _dense_reference(layer)(x, is_causal=True)
    torch.testing.assert_close(layer(x), ref)
    assert sum(p.numel() for p in layer.parameters()) == 4 * 16 * 16


@pytest.mark.catalog("extra:dsa-indexer")
@pytest.mark.parametrize("top_k", [None, 12, 20])
def test_dsa_layer_with_every_token_is_the_dense_causal_layer(top_k):
    torch.manual_seed(0)
    layer = DSALayer(16, 4, top_k=top_k, index_heads=2, d_index=8)
    x = torch.randn(2, 12, 16)
    ref, _ = _dense_reference(layer)(x, is_causal=True)
    torch.testing.assert_close(layer(x), ref)
    assert sum(p.numel() for p in layer.parameters()) == 4 * 16 * 16 + 16 * (2 * 8 + 8 + 2)


@pytest.mark.parametrize("make", [lambda: MoBALayer(16, 4, block_size=3, top_k=2), lambda: DSALayer(16, 4, top_k=3)])
def test_layers_are_causal_and_sparse(make):
    torch.manual_seed(1)
    layer = make()
    x = torch.randn(1, 12, 16)
    y = x.clone()
    y[:, 8:] = torch.randn(1, 4, 16)
    torch.testing.assert_close(layer(x)[:, :8], layer(y)[:, :8])
    assert not torch.allclose(layer(x), _dense_reference(layer)(x, is_causal=True)[0])


def test_dsa_layer_indexer_loss_trains_only_the_indexer():
    torch.manual_seed(2)
    layer = DSALayer(16, 4, top_k=4, index_heads=2, d_index=8)
    layer.indexer_loss(torch.randn(2, 10, 16)).backward()
    assert layer.W_qI.weight.grad is not None and layer.W_qI.weight.grad.abs().sum() > 0
    assert layer.attn.W_Q.weight.grad is None


def test_layers_refuse_bad_sizes():
    with pytest.raises(ValueError, match="block_size"):
        MoBALayer(16, 4, block_size=0, top_k=1)
    with pytest.raises(ValueError, match="top_k"):
        DSALayer(16, 4, top_k=0)
    with pytest.raises(ValueError, match="d_model"):
        MoBALayer(16, 4, block_size=2)(torch.randn(1, 3, 8))


@pytest.mark.catalog("extra:nsa")
def test_nsa_layer_is_its_heads_through_nsa_attention_merged_and_causal():
    torch.manual_seed(3)
    layer = NSALayer(16, 4, block_size=3, top_n=2, window=4)
    x = torch.randn(2, 11, 16)
    W = layer.attn
    outs = []
    for j in range(4):  # head by head: rows j*4:(j+1)*4 of the stacked projections
        rows = slice(4 * j, 4 * j + 4)
        q, k, v = (x @ P.weight[rows].T for P in (W.W_Q, W.W_K, W.W_V))
        g = torch.sigmoid(x @ layer.W_g.weight[3 * j : 3 * j + 3].T + layer.W_g.bias[3 * j : 3 * j + 3])
        outs.append(nsa_attention(q, k, v, g, block_size=3, top_n=2, window=4).c)
    torch.testing.assert_close(layer(x), torch.cat(outs, -1) @ W.W_O.weight.T)
    y = x.clone()
    y[:, 7:] = torch.randn(2, 4, 16)
    torch.testing.assert_close(layer(x)[:, :7], layer(y)[:, :7])
    assert sum(p.numel() for p in layer.parameters()) == 4 * 16 * 16 + 3 * 4 * (16 + 1)
