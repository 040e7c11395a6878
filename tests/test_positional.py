"""Tests for position information: absolute, relative (review eq. 14-15), Gaussian (eq. 16), DiSAN masks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_

from attnsurvey.transformer import directional as dr
from attnsurvey.transformer import positional as ps
from attnsurvey.transformer import relative as rl

from .helpers import rand


@pytest.mark.catalog("extra:sinusoidal-position")
def test_sinusoidal_matches_formula_and_offsets_are_rotations():
    P = ps.sinusoidal_position_encoding(50, 16)
    for t in (0, 7, 49):
        for i in range(8):
            w = 1 / 10000 ** (2 * i / 16)
            assert math.isclose(float(P[t, 2 * i]), math.sin(t * w), abs_tol=1e-6)
            assert math.isclose(float(P[t, 2 * i + 1]), math.cos(t * w), abs_tol=1e-6)
    # P[t + k] is the same linear map of P[t] for every t (a rotation per pair)
    k = 3
    M = torch.linalg.lstsq(P[:40].double(), P[k : 40 + k].double()).solution
    torch.testing.assert_close((P[10:45].double() @ M), P[10 + k : 45 + k].double(), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="even d_model"):
        ps.sinusoidal_position_encoding(5, 7)


@pytest.mark.catalog("extra:learned-position", "extra:sinusoidal-position")
def test_learned_and_sinusoidal_modules_add_the_table():
    X = rand(2, 5, 8)
    sin = ps.SinusoidalPositionEncoding(8, max_len=10)
    torch.testing.assert_close(sin(X), X + ps.sinusoidal_position_encoding(5, 8))
    learned = ps.LearnedPositionEncoding(8, max_len=10)
    torch.testing.assert_close(learned(X), X + learned.P[:5])
    (learned(X).sum()).backward()
    assert torch.all(learned.P.grad[5:] == 0) and torch.all(learned.P.grad[:5] == 2)


@pytest.mark.catalog("extra:learned-position", "extra:sinusoidal-position")
def test_sequence_longer_than_table_raises():
    for mod in (ps.SinusoidalPositionEncoding(8, max_len=4), ps.LearnedPositionEncoding(8, max_len=4)):
        with pytest.raises(ValueError, match=r"max_len=4 positions, but X has n=6 positions \(shape \(2, 6, 8\)\)"):
            mod(rand(2, 6, 8))
        with pytest.raises(ValueError, match="d_model=8"):
            mod(rand(2, 3, 5))


@pytest.mark.catalog("extra:relative-position")
def test_relative_positions_match_loop_eq14_15():
    n, d, b = 6, 4, 2
    Q, K, V = rand(n, d), rand(n, d, seed=1), rand(n, 3, seed=2)
    A_K, A_V = rand(2 * b + 1, d, seed=3), rand(2 * b + 1, 3, seed=4)
    z, alpha = rl.relative_position_attention(Q, K, V, A_K, A_V)
    for i in range(n):
        e = torch.stack([Q[i] @ (K[j] + A_K[max(-b, min(b, j - i)) + b]) / math.sqrt(d) for j in range(n)])
        a = torch.softmax(e, 0)
        zi = sum(a[j] * (V[j] + A_V[max(-b, min(b, j - i)) + b]) for j in range(n))
        torch.testing.assert_close(alpha[i], a)
        torch.testing.assert_close(z[i], zi)
    assert rl.clipped_relative_positions(3, 5, 1).tolist() == [[0, 1, 1, 1, 1], [-1, 0, 1, 1, 1], [-1, -1, 0, 1, 1]]


@pytest.mark.catalog("extra:relative-position")
def test_relative_with_zero_tables_is_plain_attention_and_shift_equivariant():
    Q, K, V = rand(2, 5, 4), rand(2, 5, 4, seed=1), rand(2, 5, 4, seed=2)
    z, _ = rl.relative_position_attention(Q, K, V, torch.zeros(3, 4), torch.zeros(3, 4))
    torch.testing.assert_close(z, F_.scaled_dot_product_attention(Q, K, V))
    # relative attention works for any length (no table of positions) ...
    torch.manual_seed(0)
    m = rl.RelativeSelfAttention(8, 2, b=3)
    assert m(rand(1, 40, 8))[0].shape == (1, 40, 8)
    with pytest.raises(ValueError, match=r"A_K must have shape \(2b\+1, d_k\)"):
        rl.relative_position_attention(Q, K, V, torch.zeros(4, 4), torch.zeros(4, 4))


@pytest.mark.catalog("extra:gaussian-local-bias")
def test_gaussian_bias_eq16_matches_hand_computation():
    P = torch.tensor([1.0, 2.5])
    D = torch.tensor([2.0, 4.0])
    G = rl.gaussian_local_bias(P, D, 4)
    for i in range(2):
        for j in range(4):
            assert math.isclose(float(G[i, j]), -((j - float(P[i])) ** 2) / (2 * (float(D[i]) / 2) ** 2), rel_tol=1e-6)
    assert float(G[0, 1]) == 0.0 and torch.all(G <= 0)
    Q, K, V = rand(2, 3), rand(4, 3, seed=1), rand(4, 5, seed=2)
    c, a = rl.gaussian_biased_attention(Q, K, V, G)
    e = Q @ K.T / math.sqrt(3)
    a_ref = torch.exp(e + G) / torch.exp(e + G).sum(-1, keepdim=True)
    torch.testing.assert_close(a, a_ref)
    torch.testing.assert_close(c, a_ref @ V)
    with pytest.raises(ValueError, match="window sizes D must be > 0"):
        rl.gaussian_local_bias(P, torch.tensor([1.0, 0.0]), 4)
    with pytest.raises(ValueError, match="does not broadcast"):
        rl.gaussian_biased_attention(Q, K, V, torch.zeros(3, 4))


@pytest.mark.catalog("extra:gaussian-local-bias")
def test_gaussian_window_narrows_attention_and_is_learnable():
    torch.manual_seed(0)
    X = rand(1, 12, 8)
    spreads = []
    for window in (1.0, 4.0, 100.0):
        m = rl.GaussianLocalSelfAttention(8, 2, centre="token", window=window)
        _, a = m(X)
        dist = (torch.arange(12)[None, :] - torch.arange(12)[:, None]).abs().float()
        spreads.append(float((a.detach() * dist).sum(-1).mean()))
    assert spreads[0] < spreads[1] < spreads[2]
    m = rl.GaussianLocalSelfAttention(8, 2, centre="predicted")
    out, a = m(X)
    out.sum().backward()
    assert m.v_D.weight.grad is not None and torch.isfinite(m.v_D.weight.grad).all()
    torch.testing.assert_close(a.sum(-1), torch.ones(1, 2, 12))


@pytest.mark.catalog("extra:directional-masks")
def test_directional_masks_disan():
    from attnsurvey.masking import causal_mask, masked_softmax

    fw, bw = dr.forward_mask(4), dr.backward_mask(4)
    for i in range(4):
        for j in range(4):
            assert bool(fw[i, j]) == (j < i) and bool(bw[i, j]) == (j > i)
    # a causal mask is the forward mask with the diagonal allowed
    assert torch.equal(fw | torch.eye(4, dtype=torch.bool), causal_mask(4))
    # the review's additive form gives the same softmax; empty rows give zero weights here
    e = rand(4, 4) * 1e4
    a = masked_softmax(e, fw)
    ref = torch.softmax(e[1:] + dr.additive_mask(fw)[1:], -1)
    torch.testing.assert_close(a[1:], ref)
    assert torch.equal(a[0], torch.zeros(4)) and torch.isfinite(a).all()
    b = masked_softmax(e, bw)
    torch.testing.assert_close(b[:3], torch.softmax(e[:3] + dr.additive_mask(bw)[:3], -1))
    assert torch.equal(b[3], torch.zeros(4)) and torch.isfinite(b).all()
    with pytest.raises(ValueError, match="forward_mask needs n to be an integer >= 1, got n=0"):
        dr.forward_mask(0)
    with pytest.raises(ValueError, match="boolean"):
        dr.additive_mask(torch.ones(2, 2))
