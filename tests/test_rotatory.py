"""Tests for §3.1.1 rotatory attention, Eq. (17)-(20), and its multi-hop form."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.feature_related import rotatory as rot
from attnsurvey.general_mechanisms.scoring import activated_general_score, dot_score

from .helpers import rand


def act_gen(d_q, d_k, seed, dtype=torch.float32):
    """A fixed activated general score tanh(k^T W q + b), the survey's choice."""
    W, b = rand(d_k, d_q, seed=seed, dtype=dtype), float(rand(1, seed=seed + 1))
    return lambda Q, K: activated_general_score(Q, K, W, b)


def softmax_list(xs):
    m = max(xs)
    ex = [math.exp(x - m) for x in xs]
    return [v / sum(ex) for v in ex]


@pytest.mark.catalog("eq17")
def test_eq17_target_pooling_hand_computed():
    F_t = torch.tensor([[1.0, 2.0], [3.0, 6.0], [50.0, 50.0]])
    torch.testing.assert_close(rot.target_pooling(F_t), torch.tensor([18.0, 58.0 / 3]))
    torch.testing.assert_close(rot.target_pooling(F_t, torch.tensor([True, True, False])), torch.tensor([2.0, 4.0]))


@pytest.mark.catalog("eq17")
def test_empty_target_is_rejected():
    with pytest.raises(ValueError, match=r"F\^t is empty: n_f\^t=0"):
        rot.target_pooling(torch.zeros(0, 3))
    with pytest.raises(ValueError, match=r"F\^t is empty"):
        rot.rotatory_attention(torch.zeros(2, 0, 3), rand(2, 4, 3), rand(2, 4, 3), dot_score, dot_score)


@pytest.mark.catalog("eq18", "eq19")
def test_eq18_eq19_match_loop():
    F_t, F_l = rand(3, 4, seed=1), rand(5, 6, seed=2)
    s_l, s_lt = act_gen(4, 6, seed=3), act_gen(6, 4, seed=4)
    r_t = F_t.mean(0)
    r_l, a_l = rot.context_representation(r_t, F_l, s_l)
    e = [float(s_l(r_t[None], F_l[i : i + 1])) for i in range(5)]
    a = softmax_list(e)
    torch.testing.assert_close(a_l, torch.tensor(a))
    torch.testing.assert_close(r_l, sum(a[i] * F_l[i] for i in range(5)))
    # Eq. (19): r^l queries the target
    r_lt, a_lt = rot.target_representation(r_l, F_t, s_lt)
    a = softmax_list([float(s_lt(r_l[None], F_t[i : i + 1])) for i in range(3)])
    torch.testing.assert_close(a_lt, torch.tensor(a))
    torch.testing.assert_close(r_lt, sum(a[i] * F_t[i] for i in range(3)))
    # the activated general score itself, by hand: tanh(k^T W q + b)
    W, b = rand(6, 4, seed=3), float(rand(1, seed=4))
    e = activated_general_score(r_t[None], F_l, W, b)[0]
    for i in range(5):
        s = sum(float(F_l[i, p]) * float(W[p, q]) * float(r_t[q]) for p in range(6) for q in range(4))
        assert float(e[i]) == pytest.approx(math.tanh(s + b), abs=1e-6)


@pytest.mark.catalog("eq18")
def test_empty_and_masked_contexts_give_zero():
    """A context of length 0 and a fully-masked context both give r^l = 0, without NaN."""
    F_t, F_r = rand(2, 3, 4, seed=1), rand(2, 5, 6, seed=2)
    s_l, s_lt = act_gen(4, 6, seed=3), act_gen(6, 4, seed=4)
    empty = torch.zeros(2, 0, 6)
    out = rot.rotatory_attention(F_t, empty, F_r, s_l, s_lt)
    assert torch.equal(out.r_l, torch.zeros(2, 6))
    assert out.a_l.shape == (2, 0)
    assert torch.isfinite(out.r).all()
    masked = rand(2, 4, 6, seed=9)
    out_m = rot.rotatory_attention(F_t, masked, F_r, s_l, s_lt, mask_l=torch.zeros(2, 4, dtype=torch.bool))
    torch.testing.assert_close(out_m.r, out.r)
    # both contexts empty, several hops: still finite
    out2 = rot.rotatory_attention(F_t, empty, empty, s_l, s_lt, hops=3)
    assert torch.isfinite(out2.r).all() and torch.equal(out2.r[:, :12], torch.zeros(2, 12))
    # gradients flow through the non-empty parts
    F_t.requires_grad_(True)
    rot.rotatory_attention(F_t, empty, F_r, s_l, s_lt).r.sum().backward()
    assert torch.isfinite(F_t.grad).all()


@pytest.mark.catalog("eq19")
def test_zero_context_gives_uniform_target_weights():
    """With r^l = 0 the activated general score is tanh(b) for every target word: uniform weights."""
    F_t = rand(4, 3, seed=1)
    out = rot.rotatory_attention(F_t, torch.zeros(0, 5), rand(2, 5), act_gen(3, 5, seed=2), act_gen(5, 3, seed=3))
    torch.testing.assert_close(out.a_lt, torch.full((4,), 0.25))
    torch.testing.assert_close(out.r_lt, F_t.mean(0))


@pytest.mark.catalog("eq20")
def test_eq20_concat_order_and_module():
    r = rot.rotatory_representation(
        torch.tensor([1.0]), torch.tensor([2.0, 3.0]), torch.tensor([4.0]), torch.tensor([5.0])
    )
    torch.testing.assert_close(r, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    with pytest.raises(ValueError, match=r"d_v\^t of r\^\{l_t\} == d_v\^t of r\^\{r_t\}"):
        rot.rotatory_representation(torch.ones(1), torch.ones(1), torch.ones(2), torch.ones(3))
    torch.manual_seed(0)
    m = rot.RotatoryAttention(d_t=4, d_c=6)
    F_t, F_l, F_r = rand(2, 3, 4), rand(2, 5, 6, seed=1), rand(2, 2, 6, seed=2)
    out = m(F_t, F_l, F_r)
    assert out.r.shape == (2, m.out_dim) == (2, 20)
    torch.testing.assert_close(out.r, torch.cat([out.r_l, out.r_r, out.r_lt, out.r_rt], -1))
    # the module is the functional form with its four scores
    ref = rot.rotatory_attention(F_t, F_l, F_r, m.score_l, m.score_lt, m.score_r, m.score_rt)
    torch.testing.assert_close(out.r, ref.r)
    with pytest.raises(ValueError, match=r"d_c of F\^l == d_c of the module"):
        m(F_t, rand(2, 5, 3), F_r)
    with pytest.raises(ValueError, match=r"d_c of F\^l == d_c of F\^r"):
        rot.rotatory_attention(F_t, F_l, rand(2, 2, 5), m.score_l, m.score_lt)


@pytest.mark.catalog("extra:rotatory-multi-hop")
def test_multi_hop_matches_manual_unrolling():
    F_t, F_l, F_r = rand(3, 4, seed=1), rand(5, 6, seed=2), rand(4, 6, seed=3)
    s_l, s_r, s_lt, s_rt = act_gen(4, 6, 4), act_gen(4, 6, 5), act_gen(6, 4, 6), act_gen(6, 4, 7)
    out = rot.rotatory_attention(F_t, F_l, F_r, s_l, s_lt, s_r, s_rt, hops=3)
    q_l = q_r = F_t.mean(0)
    for _ in range(3):
        r_l, _ = rot.context_representation(q_l, F_l, s_l)
        r_r, _ = rot.context_representation(q_r, F_r, s_r)
        r_lt, _ = rot.target_representation(r_l, F_t, s_lt)
        r_rt, _ = rot.target_representation(r_r, F_t, s_rt)
        q_l, q_r = r_lt, r_rt
    torch.testing.assert_close(out.r, torch.cat([r_l, r_r, r_lt, r_rt]))
    assert len(out.hops) == 3
    one = rot.rotatory_attention(F_t, F_l, F_r, s_l, s_lt, s_r, s_rt, hops=1)
    torch.testing.assert_close(one.a_l, out.hops[0][0])
    assert not torch.allclose(one.r, out.r)


@pytest.mark.catalog("extra:rotatory-multi-hop")
def test_hops_must_be_positive():
    with pytest.raises(ValueError, match="hops must be a positive integer"):
        rot.rotatory_attention(rand(2, 3), rand(2, 3), rand(2, 3), dot_score, dot_score, hops=0)
    with pytest.raises(ValueError, match="hops must be a positive integer"):
        rot.RotatoryAttention(3, 3, hops=0)


def test_rotatory_is_permutation_invariant_in_contexts():
    torch.manual_seed(1)
    m = rot.RotatoryAttention(d_t=3, d_c=3, hops=2)
    F_t, F_l, F_r = rand(4, 3), rand(6, 3, seed=1), rand(5, 3, seed=2)
    out = m(F_t, F_l, F_r)
    p = torch.randperm(6)
    out_p = m(F_t, F_l[p], F_r)
    torch.testing.assert_close(out_p.r, out.r)
    torch.testing.assert_close(out_p.a_l, out.a_l[p])


def test_rotatory_large_scores_stay_finite():
    big = rand(2, 3, 4, seed=1) * 1e4
    out = rot.rotatory_attention(big, big[:, :2], big, dot_score, dot_score, hops=2)
    assert torch.isfinite(out.r).all()


@pytest.mark.catalog("eq20")
def test_rotatory_gradcheck_float64():
    d = torch.float64
    F_t = rand(3, 2, seed=1, dtype=d).requires_grad_()
    F_l = rand(4, 3, seed=2, dtype=d).requires_grad_()
    F_r = rand(2, 3, seed=3, dtype=d).requires_grad_()
    s_l, s_lt = act_gen(2, 3, seed=4, dtype=d), act_gen(3, 2, seed=5, dtype=d)
    f = lambda a, b, c: rot.rotatory_attention(a, b, c, s_l, s_lt, hops=2).r
    assert torch.autograd.gradcheck(f, (F_t, F_l, F_r))
    mask_l = torch.tensor([True, False, True, True])
    g = lambda a, b, c: rot.rotatory_attention(a, b, c, s_l, s_lt, mask_l=mask_l).r
    assert torch.autograd.gradcheck(g, (F_t, F_l, F_r))


def test_mask_errors_name_the_rotatory_symbols():
    F_t = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match=r"mask_t must have shape \(\.\.\., n_f\^t\) with n_f\^t=4, got \(2, 5\)"):
        rot.target_pooling(F_t, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"batch dimensions of mask_t \(3, 4\) and F_t \(2, 4, 3\) do not broadcast"):
        rot.target_pooling(F_t, torch.ones(3, 4, dtype=torch.bool))
