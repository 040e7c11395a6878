"""Tests for differential attention (Ye et al. 2024) against a float64 oracle written from torch.softmax."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.attention import attend
from attnsurvey.beyond import differential as D
from attnsurvey.query_related.multihead import MultiHeadAttention

from .helpers import assert_trusting_keeps_the_bits, rand

F64 = torch.float64


def _oracle(Q, K, V, lam, mask=None):
    """(softmax(Q1 K1^T / sqrt d) - lam softmax(Q2 K2^T / sqrt d)) V in float64, masked scores set to -inf."""
    d = Q.shape[-1] // 2
    maps = []
    for half in (slice(0, d), slice(d, 2 * d)):
        e = Q[..., half] @ K[..., half].transpose(-1, -2) / math.sqrt(d)
        if mask is not None:
            e = e.masked_fill(~mask, float("-inf"))
        maps.append(torch.softmax(e, dim=-1))
    A = maps[0] - lam * maps[1]
    return A @ V, A


@pytest.mark.catalog("extra:differential-attention")
def test_differential_attention_matches_the_float64_oracle():
    Q, K, V = (
        rand(2, 3, 5, 8, seed=1, dtype=F64),
        rand(2, 3, 6, 8, seed=2, dtype=F64),
        rand(2, 3, 6, 4, seed=3, dtype=F64),
    )
    lam = torch.tensor([0.3, -0.2, 0.9], dtype=F64)[:, None, None]  # one lambda per head
    mask = rand(2, 1, 5, 6, seed=4) > -0.5
    mask[..., 0] = True
    c, A = D.differential_attention(Q, K, V, lam, mask, need_weights=True)
    c_ref, A_ref = _oracle(Q, K, V, lam, mask)
    torch.testing.assert_close(A, A_ref)
    torch.testing.assert_close(c, c_ref)


def test_the_oracle_rejects_a_planted_bug():
    """Planted bug: the difference taken with the halves swapped (lambda on the first map) fails the oracle."""
    Q, K, V = rand(4, 8, seed=5, dtype=F64), rand(4, 8, seed=6, dtype=F64), rand(4, 3, seed=7, dtype=F64)
    c_ref, _ = _oracle(Q, K, V, 0.5)
    c, _ = D.differential_attention(Q, K, V, 0.5)
    swap = lambda X: torch.cat([X[..., 4:], X[..., :4]], dim=-1)
    wrong, _ = D.differential_attention(swap(Q), swap(K), V, 0.5)
    torch.testing.assert_close(c, c_ref)
    assert not torch.allclose(wrong, c_ref)


def test_the_difference_of_contexts_is_the_context_of_the_difference():
    """c_1 - lambda c_2 = (A_1 - lambda A_2) V: the returned map times V is the returned context."""
    Q, K, V = rand(3, 7, 6, seed=8, dtype=F64), rand(3, 7, 6, seed=9, dtype=F64), rand(3, 7, 5, seed=10, dtype=F64)
    c, A = D.differential_attention(Q, K, V, 0.7, is_causal=True, need_weights=True)
    assert A is not None
    torch.testing.assert_close(c, A @ V)
    assert torch.all(A.triu(1) == 0)  # causal: no weight on the future


def test_lambda_zero_is_plain_attention_on_the_first_half():
    Q, K, V = rand(2, 5, 8, seed=11, dtype=F64), rand(2, 5, 8, seed=12, dtype=F64), rand(2, 5, 3, seed=13, dtype=F64)
    c, A = D.differential_attention(Q, K, V, 0.0, is_causal=True, need_weights=True)
    c_ref, A_ref = attend(Q[..., :4], K[..., :4], V, is_causal=True)
    torch.testing.assert_close(c, c_ref)
    torch.testing.assert_close(A, A_ref)


def test_masked_nan_is_inert():
    Q, K, V = rand(5, 4, seed=14), rand(5, 4, seed=15), rand(5, 3, seed=16)
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[:, 2] = False
    K2, V2 = K.clone(), V.clone()
    K2[2], V2[2] = float("nan"), float("inf")
    c, A = D.differential_attention(Q, K, V, 0.4, mask, need_weights=True)
    c2, A2 = D.differential_attention(Q, K2, V2, 0.4, mask, need_weights=True)
    torch.testing.assert_close(c2, c)
    torch.testing.assert_close(A2, A)
    assert torch.all(A2[:, 2] == 0)


def test_bad_inputs_name_symbols_and_shapes():
    Q, V = rand(5, 4), rand(5, 3)
    with pytest.raises(ValueError, match="2d of Q"):
        D.differential_attention(Q, rand(5, 6), V, 0.5)
    with pytest.raises(ValueError, match=r"even.*\(5, 3\)"):
        D.differential_attention(rand(5, 3), rand(5, 3), V, 0.5)
    with pytest.raises(ValueError, match="lambda"):
        D.differential_attention(Q, Q, V, float("nan"))
    with pytest.raises(TypeError, match="V"):
        D.differential_attention(Q, Q, [[1.0]], 0.5)
    with pytest.raises(ValueError, match="2\\*n_heads"):
        D.DifferentialAttentionLayer(30, 4)
    with pytest.raises(ValueError, match="d_model of x"):
        D.DifferentialAttentionLayer(16, 2)(rand(2, 5, 8))
    with pytest.raises(ValueError, match="layer"):
        D.lambda_init_for(0)


def test_lambda_init_follows_the_paper():
    assert D.lambda_init_for(1) == pytest.approx(0.2)
    assert D.lambda_init_for(3) == pytest.approx(0.8 - 0.6 * math.exp(-0.6))


@pytest.mark.catalog("extra:differential-attention")
def test_layer_matches_the_oracle_and_its_parameter_count():
    torch.manual_seed(0)
    layer = D.DifferentialAttentionLayer(16, 2, layer=2).double()  # h = 2 heads, d = 4 per half
    x = rand(3, 6, 16, seed=17, dtype=F64)
    lam = layer.lam()
    with torch.no_grad():
        lam_ref = (
            torch.exp(layer.lambda_q1 @ layer.lambda_k1) - torch.exp(layer.lambda_q2 @ layer.lambda_k2)
        ) + D.lambda_init_for(2)
        torch.testing.assert_close(lam, lam_ref)
        split = lambda t: t.reshape(3, 6, 2, 8).transpose(1, 2)  # head j: columns 8j..8j+8
        q, k, v = split(layer.W_Q(x)), split(layer.W_K(x)), split(layer.W_V(x))
        c_ref, A_ref = _oracle(q, k, v, lam, torch.ones(6, 6, dtype=torch.bool).tril())
        normed = c_ref / c_ref.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * layer.head_norm.weight
        out_ref = layer.W_O((1 - D.lambda_init_for(2)) * normed.transpose(1, 2).reshape(3, 6, 16))
        torch.testing.assert_close(layer(x), out_ref)
        torch.testing.assert_close(layer.attention_map(x), A_ref)
    plain = sum(p.numel() for p in MultiHeadAttention(16, 4).parameters())
    assert sum(p.numel() for p in layer.parameters()) == plain + 4 * 4 + 2 * 4  # 4d lambdas + 2d norm gain


def test_the_layer_is_causal():
    torch.manual_seed(0)
    layer = D.DifferentialAttentionLayer(16, 2)
    x = rand(1, 6, 16, seed=18)
    y = x.clone()
    y[:, 4:] = rand(1, 2, 16, seed=19)
    torch.testing.assert_close(layer(x)[:, :4], layer(y)[:, :4])


@pytest.mark.parametrize("learn_lambda", [True, False])
def test_the_layer_trusting_its_inputs_computes_the_bits_of_the_clearing_core(learn_lambda):
    """finite_inputs=True (a model of tokens) skips the core's NaN-inert clearing: the same outputs, differential
    maps and gradients, bit for bit, as the layer that lets the core clear masked positions, for finite inputs."""
    torch.manual_seed(0)
    layer = D.DifferentialAttentionLayer(
        32, 2, lambda_init=0.0 if not learn_lambda else None, learn_lambda=learn_lambda
    )
    x = torch.randn(3, 11, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    assert_trusting_keeps_the_bits(layer, x)
    maps = []
    for trusted in (True, False):
        layer.finite_inputs = trusted
        maps.append(layer.attention_map(x).detach())
    assert torch.equal(*maps)


def test_the_recall_mixers_of_tokens_trust_their_inputs():
    """The recall models' differential mixers are fed LayerNorm rows of token embeddings: they run trusted."""
    from attnsurvey.experiments.recall import MIXERS

    assert all(MIXERS[name](32, 2).finite_inputs for name in ("differential", "differential-0"))
