"""Tests for §3.3.2 multi-hop attention, Eq. (41)-(42), and end-to-end memory networks."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.data.stories import two_fact_stories
from attnsurvey.general_mechanisms.scoring import dot_score, general_score
from attnsurvey.general_model import attend
from attnsurvey.query_related import multihop as mh

from .helpers import rand


@pytest.mark.catalog("eq41")
def test_eq41_transforms_hand_computed():
    q, c = torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0])
    assert torch.equal(mh.add_transform(q, c), torch.tensor([1.5, 1.0]))
    H = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    assert torch.equal(mh.linear_transform(q, c, H), torch.tensor([2.5, 1.0]))  # H q = [2, 2]


@pytest.mark.catalog("eq42")
def test_eq42_hop_scores_concatenate():
    q, c, K = rand(2, 3), rand(2, 2, seed=1), rand(2, 4, 5, seed=2)
    W = rand(5, 5, seed=3)  # general score: concat(q, c)^T W k, d_q + d_v = 5
    e = mh.hop_scores(q, c, K, lambda Q, K_: general_score(Q, K_, W))
    for b in range(2):
        x = torch.cat([q[b], c[b]])
        for l in range(4):
            assert math.isclose(float(e[b, l]), float(x @ W.T @ K[b, l]), rel_tol=1e-5, abs_tol=1e-5)


def _loop_multi_hop(q0, K, V, W, n_hops, H=None):
    """Independent oracle: one example, explicit Python loops, Eq. (41)-(42).

    W: the general score's matrix, or a list with one per hop; H: Eq. (41) is ``H q + c`` (default ``q + c``).
    """
    n_f = K.shape[0]
    c = sum(V[l] for l in range(n_f)) / n_f
    q, As = q0, []
    for s in range(n_hops):
        q = (q if H is None else H @ q) + c
        x = torch.cat([q, c])
        W_s = W[s] if isinstance(W, list) else W
        e = [float(x @ W_s.T @ K[l]) for l in range(n_f)]
        m = max(e)
        w = [math.exp(v - m) for v in e]
        a = [v / sum(w) for v in w]
        c = sum(a[l] * V[l] for l in range(n_f))
        As.append(a)
    return c, q, torch.tensor(As, dtype=K.dtype)


@pytest.mark.catalog("eq41", "eq42")
def test_eq41_42_multi_hop_matches_explicit_loop():
    q0, K, V = (
        rand(3, 4, dtype=torch.float64),
        rand(3, 6, 5, seed=1, dtype=torch.float64),
        rand(3, 6, 4, seed=2, dtype=torch.float64),
    )
    W = rand(5, 8, seed=3, dtype=torch.float64) * 0.5
    c, q, A = mh.multi_hop_attention(q0, K, V, lambda Q, K_: general_score(Q, K_, W), n_hops=3)
    assert A.shape == (3, 3, 6)
    for b in range(3):
        c_ref, q_ref, A_ref = _loop_multi_hop(q0[b], K[b], V[b], W, 3)
        torch.testing.assert_close(c[b], c_ref)
        torch.testing.assert_close(q[b], q_ref)
        torch.testing.assert_close(A[b], A_ref)


@pytest.mark.catalog("eq42")
def test_one_hop_equals_single_attention():
    q0, K, V = rand(2, 3), rand(2, 5, 6, seed=1), rand(2, 5, 3, seed=2)
    c0 = rand(2, 3, seed=3)
    # a score that only reads the q half of concat(q, c) reduces Eq. (42) to Eq. (2)
    score = lambda Q, K_: dot_score(Q[..., :3], K_[..., :3])
    c, q, A = mh.multi_hop_attention(q0, K, V, score, 1, c0=c0)
    ref_c, ref_a = attend((q0 + c0).unsqueeze(-2), K[..., :3], V, score=dot_score)
    torch.testing.assert_close(c, ref_c.squeeze(-2))
    torch.testing.assert_close(A[:, 0], ref_a.squeeze(-2))


@pytest.mark.catalog("eq42")
def test_multi_hop_masks_and_large_scores():
    q0, K, V = rand(2, 2) * 1e4, rand(2, 4, 4, seed=1), rand(2, 4, 2, seed=2)
    mask = torch.tensor([[True, False, True, False], [False] * 4])
    c, q, A = mh.multi_hop_attention(q0, K, V, dot_score, 2, mask=mask)
    assert torch.isfinite(c).all() and torch.isfinite(A).all()
    assert torch.equal(A[0, :, [1, 3]], torch.zeros(2, 2))
    assert torch.equal(c[1], torch.zeros(2))  # nothing to attend to: zero context
    torch.testing.assert_close(A[0].sum(-1), torch.ones(2))


@pytest.mark.catalog("eq41")
def test_multi_hop_rejects_bad_input():
    q0, K, V = rand(3), rand(5, 6), rand(5, 3)
    with pytest.raises(ValueError, match="n_hops=0"):
        mh.multi_hop_attention(q0, K, V, dot_score, 0)
    with pytest.raises(ValueError, match="d_q == d_v, got d_q=4, d_v=3"):
        mh.add_transform(rand(4), rand(3))
    with pytest.raises(ValueError, match="n_f of K == n_f of V"):
        mh.multi_hop_attention(q0, K, rand(4, 3), dot_score, 2)
    with pytest.raises(ValueError, match="one entry per hop: n_hops=3, got 2 scores"):
        mh.multi_hop_attention(q0, K, V, [dot_score, dot_score], 3)
    with pytest.raises(ValueError, match=r"H must have shape \(d_q, d_q\)"):
        mh.linear_transform(rand(3), rand(3), rand(3, 2))
    with pytest.raises(ValueError, match="transform must be 'add' or 'linear'"):
        mh.MultiHopAttention(4, 6, 2, transform="gru")


@pytest.mark.catalog("eq42")
def test_multi_hop_module_and_gradcheck():
    F = rand(2, 5, 6)
    q0 = rand(2, 4, seed=1)
    torch.manual_seed(0)
    for transform, share in (("add", True), ("linear", False), ("add", False), ("linear", True)):
        mod = mh.MultiHopAttention(4, 6, n_hops=3, transform=transform, share=share)
        with torch.no_grad():
            c, q, A = mod(q0, F)
        assert c.shape == (2, 4) and q.shape == (2, 4) and A.shape == (2, 3, 5)
        assert len(mod.scores) == (1 if share else 3)
        # the module is Eq. (41)-(42) on its own weights: K = F W_K^T, V = F W_V^T, its score(s) and H
        W = [sc.W.weight.detach() for sc in mod.scores]
        H = None if mod.H is None else mod.H.weight.detach()
        for b in range(2):
            K, V = F[b] @ mod.W_K.weight.detach().T, F[b] @ mod.W_V.weight.detach().T
            c_ref, q_ref, A_ref = _loop_multi_hop(q0[b], K, V, W[0] if share else W, 3, H)
            torch.testing.assert_close(c[b], c_ref, msg=f"{transform} share={share}")
            torch.testing.assert_close(q[b], q_ref, msg=f"{transform} share={share}")
            torch.testing.assert_close(A[b], A_ref, msg=f"{transform} share={share}")
    K = rand(2, 4, 3, seed=2, dtype=torch.float64).requires_grad_()
    V = rand(2, 4, 3, seed=3, dtype=torch.float64).requires_grad_()
    q0 = rand(2, 3, seed=4, dtype=torch.float64).requires_grad_()
    W = rand(3, 6, seed=5, dtype=torch.float64).requires_grad_()
    fn = lambda q0, K, V, W: mh.multi_hop_attention(q0, K, V, lambda Q, K_: general_score(Q, K_, W), 2)[0]
    assert torch.autograd.gradcheck(fn, (q0, K, V, W))


@pytest.mark.catalog("extra:memory-network-hops")
def test_memory_hop_matches_loop():
    u, M, C = rand(3), rand(4, 3, seed=1), rand(4, 2, seed=2)
    o, p = mh.memory_hop(u, M, C)
    e = torch.tensor([float(M[i] @ u) for i in range(4)])
    p_ref = torch.exp(e) / torch.exp(e).sum()
    torch.testing.assert_close(p, p_ref)
    torch.testing.assert_close(o, sum(p_ref[i] * C[i] for i in range(4)))


@pytest.mark.catalog("extra:memory-network-hops")
def test_memory_network_is_multi_hop_special_case():
    """q_{s+1} = q_s + c_s with shared memories equals Eq. (41)-(42) with an add transform
    and a score that ignores c; the order differs by one hop of bookkeeping."""
    u0, M, C = rand(2, 4), rand(2, 5, 4, seed=1), rand(2, 5, 4, seed=2)
    u, P = mh.memory_network_read(u0, [M, M], [C, C])
    # the survey's loop updates q before scoring, so start from c^(0) = 0
    score = lambda Q, K_: dot_score(Q[..., :4], K_)
    c, q, A = mh.multi_hop_attention(u0, M, C, score, 2, c0=torch.zeros(2, 4))
    torch.testing.assert_close(A, P)
    torch.testing.assert_close(q + c, u)


@pytest.mark.catalog("extra:memory-network-hops")
def test_memory_network_masks_padding_sentences():
    torch.manual_seed(0)
    net = mh.EndToEndMemoryNetwork(vocab_size=10, d=8, n_hops=2, n_answers=3)
    story = torch.tensor([[[1, 2, 3], [4, 5, 0], [0, 0, 0]]])
    logits, P = net(story, torch.tensor([[6, 7]]))
    assert logits.shape == (1, 3) and P.shape == (1, 2, 3)
    assert torch.equal(P[0, :, 2], torch.zeros(2))
    torch.testing.assert_close(P.sum(-1), torch.ones(1, 2))
    # the padding slot cannot change the answer
    story2 = torch.tensor([[[1, 2, 3], [4, 5, 0]]])
    torch.testing.assert_close(net(story2, torch.tensor([[6, 7]]))[0], logits)


@pytest.mark.catalog("extra:memory-network-hops")
def test_memory_network_rejects_bad_input():
    net = mh.EndToEndMemoryNetwork(vocab_size=10, d=8, n_hops=1, n_answers=3)
    with pytest.raises(ValueError, match=r"story must be \(B, n, L\)"):
        net(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="d of u == d of M, got d of u=3, d of M=4"):
        mh.memory_hop(rand(3), rand(5, 4), rand(5, 4))
    with pytest.raises(ValueError, match="one input and one output memory per hop"):
        mh.memory_network_read(rand(3), [rand(5, 3)], [])
    with pytest.raises(ValueError, match="n_hops=0"):
        mh.EndToEndMemoryNetwork(10, 8, 0, 3)


@pytest.mark.catalog("extra:memory-network-hops")
def test_two_fact_stories_are_consistent():
    d = two_fact_stories(50, generator=torch.Generator().manual_seed(0))
    vocab = d.vocab
    for i in range(50):
        obj = vocab[int(d.question[i, 1])]
        took = [vocab[t] for t in d.story[i, int(d.support[i, 0])].tolist()]
        went = [vocab[t] for t in d.story[i, int(d.support[i, 1])].tolist()]
        assert took[1:] == ["took", obj]
        assert went[0] == took[0] and went[1] == "went"
        assert went[2] == d.places[int(d.answer[i])]
    with pytest.raises(ValueError, match="n_people"):
        two_fact_stories(3, n_people=9)


def test_memory_hop_names_a_dtype_mismatch():
    """Review 2, G: a float64 u with float32 memories gave torch's 'expected scalar type'."""
    from attnsurvey.query_related.multihop import memory_hop

    M = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"dtype mismatch: u=torch.float64, M=torch.float32, C=torch.float32"):
        memory_hop(torch.randn(2, 4, dtype=torch.float64), M, M)
