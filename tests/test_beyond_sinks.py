"""Tests for attention sinks (the core's sink logit, SinkAttention, StreamingLLM's cache) and gated attention."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.attention import attend, dispatch_reason
from attnsurvey.beyond import sinks as S
from attnsurvey.beyond.positions import apply_rope
from attnsurvey.query_related.multihead import MultiHeadAttention, multi_head_attention

from .helpers import rand

F64 = torch.float64
BOUNDED = settings(max_examples=40, deadline=None)


# ---- the core's sink logit -------------------------------------------------------------------------


def _hand_weights() -> list[float]:
    """e = (0, 1, 2), s = log 2: a_l = exp(e_l) / (2 + 1 + e + e^2)."""
    den = 2 + 1 + math.e + math.e**2
    return [1 / den, math.e / den, math.e**2 / den]


def _tiny(sink_impl):
    Q = torch.tensor([[1.0]], dtype=F64)
    K = torch.tensor([[0.0], [1.0], [2.0]], dtype=F64)  # d_k = 1: the scores are q k = (0, 1, 2)
    V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=F64)
    return sink_impl(Q, K, V, torch.tensor([[math.log(2.0)]], dtype=F64))


def _core_sink(Q, K, V, s):
    return attend(Q, K, V, sink=s)


@pytest.mark.catalog("extra:attention-sinks")
def test_sink_weights_match_the_hand_computation():
    c, a = _tiny(_core_sink)
    hand = torch.tensor([_hand_weights()], dtype=F64)
    torch.testing.assert_close(a, hand, rtol=0, atol=1e-15)
    torch.testing.assert_close(a.sum(), torch.tensor(1 - 2 / (3 + math.e + math.e**2), dtype=F64), rtol=0, atol=1e-15)
    w = _hand_weights()
    torch.testing.assert_close(c, torch.tensor([[w[0] + w[2], w[1] + w[2]]], dtype=F64), rtol=0, atol=1e-15)


def test_the_hand_computation_rejects_a_softmax_without_the_sink():
    """The planted bug: the sink dropped from the denominator (a plain softmax) fails the hand check."""
    _, a = _tiny(lambda Q, K, V, s: attend(Q, K, V))
    assert not torch.allclose(a, torch.tensor([_hand_weights()], dtype=F64), atol=1e-6)


@pytest.mark.catalog("extra:attention-sinks")
def test_sink_equals_an_extra_zero_key_and_value_scored_s():
    """An independent route through the core: a zero key and value appended, the bias s on its column."""
    B, h, n_q, n_f, d = 2, 3, 4, 5, 6
    Q, K, V = (rand(B, h, n, d, seed=i, dtype=F64) for i, n in enumerate((n_q, n_f, n_f)))
    s = rand(h, 1, 1, seed=9, dtype=F64)
    mask = rand(n_q, n_f, seed=10) > -0.5
    mask[1] = False  # a fully-masked row
    c, a = attend(Q, K, V, mask, sink=s)
    zero = torch.zeros(B, h, 1, d, dtype=F64)
    bias = torch.cat([torch.zeros(B, h, n_q, n_f, dtype=F64), s.expand(B, h, n_q, 1)], -1)
    mask_x = torch.cat([mask, torch.ones(n_q, 1, dtype=torch.bool)], -1)
    c_x, a_x = attend(Q, torch.cat([K, zero], -2), torch.cat([V, zero], -2), mask_x, bias=bias)
    torch.testing.assert_close(c, c_x, rtol=0, atol=1e-14)
    torch.testing.assert_close(a, a_x[..., :-1], rtol=0, atol=1e-14)


@pytest.mark.catalog("extra:attention-sinks")
def test_weight_sum_is_one_minus_the_sink_share():
    Q, K, V = rand(3, 4, 5, seed=1, dtype=F64), rand(3, 6, 5, seed=2, dtype=F64), rand(3, 6, 2, seed=3, dtype=F64)
    s = rand(3, 1, 1, seed=4, dtype=F64)
    _, a = attend(Q, K, V, sink=s)
    e = Q @ K.transpose(-1, -2) / math.sqrt(5)
    share = torch.sigmoid(s[..., 0] - torch.logsumexp(e, -1))  # exp(s) / (exp(s) + sum exp(e))
    torch.testing.assert_close(a.sum(-1), 1 - share, rtol=0, atol=1e-14)


@pytest.mark.catalog("extra:attention-sinks")
def test_sink_fully_masked_rows_and_nan_at_masked_positions_are_inert():
    Q, K, V = rand(2, 4, 3, seed=5, dtype=F64), rand(2, 5, 3, seed=6, dtype=F64), rand(2, 5, 2, seed=7, dtype=F64)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[:, 4] = False
    mask[2] = False
    K, V = K.clone(), V.clone()
    K[:, 4], V[:, 4] = float("nan"), float("inf")
    Q = Q.clone().requires_grad_()
    c, a = attend(Q, K, V, mask, sink=torch.tensor([[0.3]], dtype=F64))
    assert torch.isfinite(c).all() and torch.isfinite(a).all()
    assert (c[:, 2] == 0).all() and (a[:, 2] == 0).all() and (a[..., 4] == 0).all()
    c.sum().backward()
    assert torch.isfinite(Q.grad).all()
    c_ref, _ = attend(Q.detach(), K[:, :4], V[:, :4], mask[:, :4], sink=torch.tensor([[0.3]], dtype=F64))
    torch.testing.assert_close(c, c_ref, rtol=0, atol=1e-15)


def test_a_minus_infinite_sink_is_the_plain_softmax():
    Q, K, V = rand(4, 3, seed=8, dtype=F64), rand(5, 3, seed=9, dtype=F64), rand(5, 2, seed=10, dtype=F64)
    c, a = attend(Q, K, V, sink=torch.tensor([[-math.inf]], dtype=F64))
    c0, a0 = attend(Q, K, V)
    torch.testing.assert_close(a, a0, rtol=0, atol=1e-15)
    torch.testing.assert_close(c, c0, rtol=0, atol=1e-15)


def test_sink_bad_input_is_refused_with_its_shape():
    Q, K, V = rand(2, 3, 4, seed=1), rand(2, 5, 4, seed=2), rand(2, 5, 4, seed=3)
    with pytest.raises(
        ValueError, match=r"sink of shape \(4, 1\) does not broadcast to \(\.\.\., n_q, 1\) = \(2, 3, 1\)"
    ):
        attend(Q, K, V, sink=torch.zeros(4, 1))
    with pytest.raises(ValueError, match="sink must be a floating-point tensor"):
        attend(Q, K, V, sink=torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="needs align='softmax'"):
        attend(Q, K, V, sink=torch.zeros(1, 1), align="sparsemax")
    assert dispatch_reason(need_weights=False, sink=torch.zeros(1, 1)) == "sink: an extra slot in the softmax"


@BOUNDED
@given(
    st.integers(1, 5),
    st.integers(1, 6),
    st.floats(-5, 5),
    st.integers(0, 2**16),
)
def test_weights_sum_below_one_with_a_sink_and_to_one_without(n_q, n_f, s, seed):
    g = torch.Generator().manual_seed(seed)
    Q, K, V = (torch.randn(n, 2, generator=g, dtype=F64).clamp(-2, 2) for n in (n_q, n_f, n_f))
    _, a_sink = attend(Q, K, V, sink=torch.tensor([[s]], dtype=F64))
    _, a = attend(Q, K, V)
    assert (a_sink.sum(-1) < 1).all() and (a_sink > 0).all()
    torch.testing.assert_close(a.sum(-1), torch.ones(n_q, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(a_sink, a * a_sink.sum(-1, keepdim=True), rtol=1e-12, atol=0)  # same proportions


# ---- SinkAttention -------------------------------------------------------------------------------


def _brute_heads(X, Ws, h, h_kv, sinks, allowed, gate=None):
    """Multi-head self-attention by loops over heads, queries and keys (float64), with sink and gate."""
    (WQ, bQ), (WK, bK), (WV, bV), (WO, bO) = Ws
    q, k, v = X @ WQ.T + bQ, X @ WK.T + bK, X @ WV.T + bV
    d = WQ.shape[0] // h
    dv = WV.shape[0] // h_kv
    n = X.shape[-2]
    heads = []
    for j in range(h):
        g = j // (h // h_kv)
        cj = torch.zeros(X.shape[0], n, dv, dtype=F64)
        for b in range(X.shape[0]):
            for i in range(n):
                keys = [m for m in range(n) if allowed[i][m]]
                e = torch.stack(
                    [q[b, i, j * d : (j + 1) * d] @ k[b, m, g * d : (g + 1) * d] / math.sqrt(d) for m in keys]
                )
                den = e.exp().sum() + (math.exp(sinks[j]) if sinks is not None else 0.0)
                for m, em in zip(keys, e, strict=True):
                    cj[b, i] += em.exp() / den * v[b, m, g * dv : (g + 1) * dv]
        if gate is not None:
            cj = cj * gate[..., j * dv : (j + 1) * dv] if gate.shape[-1] == h * dv else cj * gate[..., j : j + 1]
        heads.append(cj)
    return torch.cat(heads, -1) @ WO.T + bO


def _weights(m):
    return [(W.weight.detach(), W.bias.detach()) for W in (m.W_Q, m.W_K, m.W_V, m.W_O)]


@pytest.mark.catalog("extra:attention-sinks")
@pytest.mark.parametrize("h_kv", [2, 1])
def test_sink_attention_matches_the_brute_force_loop(h_kv):
    torch.manual_seed(0)
    m = S.SinkAttention(8, 2, h_kv=h_kv, bias=True).double()
    with torch.no_grad():
        m.sinks.copy_(torch.tensor([0.7, -1.3], dtype=F64))
    X = rand(2, 5, 8, seed=3, dtype=F64)
    out, a = m(X, is_causal=True)
    causal = [[m_ <= i for m_ in range(5)] for i in range(5)]
    torch.testing.assert_close(out, _brute_heads(X, _weights(m), 2, h_kv, [0.7, -1.3], causal), rtol=0, atol=1e-13)
    assert (a.sum(-1) < 1).all()
    out.sum().backward()  # the sink logits are learned: they get a gradient
    assert torch.isfinite(m.sinks.grad).all() and (m.sinks.grad != 0).all()
    with pytest.raises(ValueError, match="sets sink itself"):
        m(X, sink=torch.zeros(2, 1, 1, dtype=F64))


# ---- gated attention ------------------------------------------------------------------------------


@pytest.mark.catalog("extra:gated-attention")
@pytest.mark.parametrize("headwise", [False, True])
def test_gated_attention_matches_the_brute_force_loop(headwise):
    torch.manual_seed(1)
    m = S.GatedAttention(8, 2, headwise=headwise, bias=True).double()
    X = rand(2, 4, 8, seed=4, dtype=F64)
    out, _ = m(X, is_causal=True)
    gate = torch.sigmoid(X @ m.W_G.weight.detach().T + m.W_G.bias.detach())
    causal = [[j <= i for j in range(4)] for i in range(4)]
    brute = _brute_heads(X, _weights(m), 2, 2, None, causal, gate)
    torch.testing.assert_close(out, brute, rtol=0, atol=1e-13)
    # the functional form, and the planted bug of a gate on the output (after W_O) instead of the heads
    ours, _ = S.gated_multi_head_attention(X, *_weights_as_linear(m), m.W_G, 2, is_causal=True)
    torch.testing.assert_close(ours, out, rtol=0, atol=1e-14)
    after = _brute_heads(X, _weights(m), 2, 2, None, causal)
    if not headwise:
        assert not torch.allclose(after * gate, brute, atol=1e-6)


def _weights_as_linear(m):
    return m.W_Q, m.W_K, m.W_V, m.W_O


def test_gated_attention_sequence_first_gates_the_same_rows():
    torch.manual_seed(4)
    first = S.GatedAttention(8, 2).double()
    seq_first = S.GatedAttention(8, 2, batch_first=False).double()
    seq_first.load_state_dict(first.state_dict())
    X = rand(2, 5, 8, seed=7, dtype=F64)
    out, _ = seq_first(X.transpose(0, 1), is_causal=True)
    torch.testing.assert_close(out.transpose(0, 1), first(X, is_causal=True)[0], rtol=0, atol=1e-14)


def test_an_open_gate_is_plain_multi_head_attention():
    torch.manual_seed(2)
    m = S.GatedAttention(8, 2).double()
    with torch.no_grad():
        m.W_G.weight.zero_()
        m.W_G.bias.fill_(1e4)  # sigmoid(1e4) = 1 in float64
    X = rand(3, 5, 8, seed=5, dtype=F64)
    plain, _ = MultiHeadAttention.forward(m, X, is_causal=True)
    torch.testing.assert_close(m(X, is_causal=True)[0], plain, rtol=0, atol=0)


def test_output_gate_refuses_a_bad_weight_with_its_shape():
    with pytest.raises(ValueError, match=r"W_G must have shape \(h\*d_v, d\) or \(h, d\) with h=3 and d=8"):
        S.output_gate(rand(2, 8), rand(4, 8), 3)
    with pytest.raises(TypeError, match="X"):
        S.output_gate([[1.0]], rand(3, 1), 3)  # type: ignore[arg-type]


# ---- StreamingLLM's cache -------------------------------------------------------------------------


def _rope_half(x, p, base=10000.0):
    """RoPE by complex numbers: pair (x_i, x_{i+d/2}) times exp(i p theta_i); independent of apply_rope."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=F64) / d)
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :]) * torch.exp(1j * p * theta)
    return torch.cat([z.real, z.imag], -1)


def _streaming_brute(q, k, v, n_sink, window, cache_positions=True):
    """Per step t: keep positions {0..n_sink-1} and {t-window+1..t}; RoPE at the cache index (or the text's)."""
    B, h, n, d = q.shape
    g = k.shape[1]
    out = torch.zeros(B, h, n, v.shape[-1], dtype=F64)
    for t in range(n):
        kept = sorted(set(range(min(n_sink, t + 1))) | set(range(max(0, t - window + 1), t + 1)))
        for b in range(B):
            for j in range(h):
                gj = j // (h // g)
                pq = len(kept) - 1 if cache_positions else t
                qr = _rope_half(q[b, j, t], pq)
                e = torch.stack(
                    [qr @ _rope_half(k[b, gj, p], i if cache_positions else p) for i, p in enumerate(kept)]
                ) / math.sqrt(d)
                out[b, j, t] = torch.softmax(e, 0) @ v[b, gj, kept]
    return out


def _qkv(n=10, h=4, g=2, d=6, seed=0):
    return (
        rand(2, h, n, d, seed=seed, dtype=F64),
        rand(2, g, n, d, seed=seed + 1, dtype=F64),
        rand(2, g, n, d, seed=seed + 2, dtype=F64),
    )


@pytest.mark.catalog("extra:attention-sinks")
@pytest.mark.parametrize(("n_sink", "window"), [(2, 3), (1, 1), (0, 4), (4, 2)])
def test_streaming_cache_matches_the_brute_force_loop(n_sink, window):
    q, k, v = _qkv()
    cache = S.StreamingCache(2, 2, 6, n_sink, window, dtype=F64)
    c = torch.cat([cache.step(q[..., t : t + 1, :], k[..., t : t + 1, :], v[..., t : t + 1, :]) for t in range(4)], -2)
    c = torch.cat([c, cache.step(q[..., 4:, :], k[..., 4:, :], v[..., 4:, :])], -2)  # the rest as one chunk
    torch.testing.assert_close(c, _streaming_brute(q, k, v, n_sink, window), rtol=0, atol=1e-13)
    kept = list(range(min(n_sink, 10))) + list(range(10 - window, 10))
    assert cache.positions.tolist() == sorted(set(kept)) and cache.K.shape[-2] == len(set(kept))


def test_streaming_brute_force_rejects_positions_in_the_text():
    """The planted bug: RoPE at the positions in the text instead of the cache differs once tokens are evicted."""
    q, k, v = _qkv(seed=3)
    cache = S.StreamingCache(2, 2, 6, 2, 3, dtype=F64)
    ours = cache.step(q, k, v)
    text = _streaming_brute(q, k, v, 2, 3, cache_positions=False)
    assert not torch.allclose(ours[..., 5:, :], text[..., 5:, :], atol=1e-6)
    torch.testing.assert_close(ours[..., :5, :], text[..., :5, :], rtol=0, atol=1e-13)  # nothing evicted yet


def test_streaming_cache_before_eviction_is_causal_rope_attention():
    q, k, v = _qkv(n=5, seed=6)
    cache = S.StreamingCache(2, 2, 6, 2, 3, dtype=F64)
    ours = cache.step(q, k, v)
    full, _ = attend(
        apply_rope(q, convention="half"),
        apply_rope(k, convention="half"),
        v,
        is_causal=True,
        enable_gqa=True,
    )
    torch.testing.assert_close(ours, full, rtol=0, atol=1e-13)


def test_streaming_cache_refuses_bad_input():
    with pytest.raises(ValueError, match="even d_head"):
        S.StreamingCache(1, 1, 5, 1, 2)
    cache = S.StreamingCache(1, 1, 4, 1, 2)
    with pytest.raises(ValueError, match=r"k must have shape \(B, g, n, d_head\) = \(1, 1, 2, 4\)"):
        cache.step(rand(1, 2, 2, 4), rand(1, 1, 3, 4), rand(1, 1, 2, 4))


def test_sink_through_multi_head_attention_matches_the_brute_force_loop():
    X = rand(1, 4, 6, seed=12, dtype=F64)
    Ws = [(rand(6, 6, seed=20 + i, dtype=F64), rand(6, seed=30 + i, dtype=F64)) for i in range(4)]
    lin = []
    for W, b in Ws:
        layer = torch.nn.Linear(6, 6).double()
        with torch.no_grad():
            layer.weight.copy_(W)
            layer.bias.copy_(b)
        lin.append(layer)
    out, _ = multi_head_attention(X, X, X, *lin, h=3, sink=torch.tensor([0.1, 2.0, -3.0], dtype=F64).reshape(3, 1, 1))
    full = [[True] * 4] * 4
    torch.testing.assert_close(out, _brute_heads(X, Ws, 3, 3, [0.1, 2.0, -3.0], full), rtol=0, atol=1e-13)


def test_gated_attention_keeps_a_padded_rows_nan_inert():
    """A NaN in a padded position reaches neither the outputs of the real positions nor any gradient."""
    torch.manual_seed(3)
    m = S.GatedAttention(8, 2).double()
    X = rand(2, 4, 8, seed=6, dtype=F64)
    X[1, 3] = float("nan")
    kpm = torch.tensor([[True] * 4, [True, True, True, False]])
    out, _ = m(X, key_padding_mask=kpm)
    assert torch.isfinite(out[0]).all() and torch.isfinite(out[1, :3]).all()
    out[kpm].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())
    clean, _ = m(X[:, :3], key_padding_mask=kpm[:, :3])
    torch.testing.assert_close(out[1, :3], clean[1], rtol=0, atol=1e-14)
