"""Tests for §3.3.2 capsule-based attention, Eq. (43)-(45), and its joint loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_

from attnsurvey.data.sentiment import keyword_features, sentiment_reviews
from attnsurvey.experiments.query_related import CapsuleClassifier
from attnsurvey.query_related import capsule as cp

from .helpers import rand


@pytest.mark.catalog("eq43")
def test_eq43_scores_match_loop():
    K, Q = rand(2, 5, 3), rand(4, 3, seed=1)
    e = cp.capsule_scores(K, Q)
    assert e.shape == (2, 4, 5)
    for b in range(2):
        for c in range(4):
            for l in range(5):
                ref = sum(float(Q[c, j] * K[b, l, j]) for j in range(3))
                assert math.isclose(float(e[b, c, l]), ref, rel_tol=1e-5, abs_tol=1e-6)


@pytest.mark.catalog("eq43")
def test_capsule_attention_matches_per_class_sdpa():
    K, V, Q = rand(2, 6, 3), rand(2, 6, 5, seed=1), rand(3, 3, seed=2)
    W_p, b_p = rand(3, 5, seed=3), rand(3, seed=4)
    out = cp.capsule_attention(K, V, Q, W_p, b_p)
    for c in range(3):  # each capsule is ordinary attention with its own query (scale 1)
        ref = F_.scaled_dot_product_attention(Q[c].expand(2, 1, 3), K, V, scale=1.0).squeeze(1)
        torch.testing.assert_close(out.c[:, c], ref)
    torch.testing.assert_close(out.a.sum(-1), torch.ones(2, 3))
    mod = cp.CapsuleAttention(5, 3)
    F = rand(2, 6, 5, seed=5)
    o2 = mod(F)
    torch.testing.assert_close(o2.p, cp.capsule_attention(F, F, mod.Q_caps, mod.W_p, mod.b_p).p)


@pytest.mark.catalog("eq44")
def test_eq44_probability_hand_computed():
    c = torch.tensor([[[1.0, 2.0], [0.0, -1.0]]])  # (1, d_y=2, d_v=2)
    W_p = torch.tensor([[0.5, 0.5], [1.0, 2.0]])
    b_p = torch.tensor([-1.0, 0.0])
    p = cp.capsule_probability(c, W_p, b_p)
    # capsule 0: 0.5 + 1.0 - 1.0 = 0.5; capsule 1: 0 - 2 + 0 = -2
    torch.testing.assert_close(p, torch.tensor([[1 / (1 + math.exp(-0.5)), 1 / (1 + math.exp(2.0))]]))


@pytest.mark.catalog("eq45")
def test_eq45_reconstruction_scales_context():
    p = torch.tensor([[0.25, 1.0]])
    c = torch.tensor([[[4.0, 8.0], [1.0, -1.0]]])
    torch.testing.assert_close(cp.capsule_reconstruction(p, c), torch.tensor([[[1.0, 2.0], [1.0, -1.0]]]))


@pytest.mark.catalog("eq43", "eq44", "eq45")
def test_capsule_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"Q_caps must have shape \(d_y, d_k\) = \(2, 3\), got \(2, 4\)"):
        cp.capsule_scores(rand(5, 3), rand(2, 4))
    with pytest.raises(ValueError, match=r"W_p must have shape \(d_y, d_v\) = \(2, 3\), got \(2, 4\)"):
        cp.capsule_probability(rand(2, 3), rand(2, 4), rand(2))
    with pytest.raises(ValueError, match=r"b_p must have shape \(d_y,\)"):
        cp.capsule_probability(rand(2, 3), rand(2, 3), rand(3))
    with pytest.raises(ValueError, match="d_y of p == d_y of c, got d_y of p=3, d_y of c=2"):
        cp.capsule_reconstruction(rand(3), rand(2, 4))
    with pytest.raises(ValueError, match="n_f of K == n_f of V"):
        cp.capsule_attention(rand(5, 3), rand(4, 3), rand(2, 3), rand(2, 3), rand(2))


@pytest.mark.catalog("eq43")
def test_capsule_numerics_and_gradcheck():
    K = torch.tensor([[[1e4, 0.0], [-1e4, 0.0], [0.0, 1.0]]])
    V = rand(1, 3, 2)
    Q = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    out = cp.capsule_attention(K, V, Q, rand(2, 2), torch.zeros(2))
    assert torch.isfinite(out.a).all()
    torch.testing.assert_close(out.a[0], torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    mask = torch.zeros(1, 3, dtype=torch.bool)
    out = cp.capsule_attention(K, V, Q, rand(2, 2), torch.tensor([0.0, 1.0]), mask)
    assert torch.equal(out.c, torch.zeros(1, 2, 2))  # fully masked: zero contexts
    torch.testing.assert_close(out.p, torch.sigmoid(torch.tensor([[0.0, 1.0]])))
    args = (
        rand(2, 4, 3, dtype=torch.float64).requires_grad_(),
        rand(2, 3, seed=1, dtype=torch.float64).requires_grad_(),
        rand(2, 3, seed=2, dtype=torch.float64).requires_grad_(),
        rand(2, seed=3, dtype=torch.float64).requires_grad_(),
    )
    y = torch.tensor([0, 1])

    def fn(F, Q, W_p, b_p):
        out = cp.capsule_attention(F, F, Q, W_p, b_p)
        return cp.capsule_loss(out.p, out.r, F.mean(-2), y, margin=5.0)[0]  # margin keeps the hinges active

    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.catalog("extra:capsule-joint-loss")
def test_joint_loss_hand_computed():
    p = torch.tensor([[0.9, 0.2], [0.3, 0.6]])
    r = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 0.5]]])
    f_bar = torch.tensor([[1.0, 1.0], [1.0, 2.0]])
    y = torch.tensor([0, 1])
    L, J, U = cp.capsule_loss(p, r, f_bar, y, lam=0.5)
    # J: max(0, 1 - 0.9 + 0.2) = 0.3; max(0, 1 - 0.6 + 0.3) = 0.7 -> 0.5
    assert math.isclose(float(J), 0.5, rel_tol=1e-6)
    # U: dots [[1, 1], [2, 1]]: max(0, 1 - 1 + 1) = 1; max(0, 1 - 1 + 2) = 2 -> 1.5
    assert math.isclose(float(U), 1.5, rel_tol=1e-6)
    assert math.isclose(float(L), 0.5 + 0.5 * 1.5, rel_tol=1e-6)
    # satisfied margins give zero loss
    L0, _, _ = cp.capsule_loss(
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([[[5.0, 0.0], [0.0, 0.0]]]),
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([0]),
    )
    assert float(L0) == 0.0


@pytest.mark.catalog("extra:capsule-joint-loss")
def test_joint_loss_rejects_bad_input():
    p, r = rand(2, 3).sigmoid(), rand(2, 3, 4)
    with pytest.raises(ValueError, match="d_v == d_f, got d_v=4, d_f=5"):
        cp.capsule_loss(p, r, rand(2, 5), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"labels y must lie in \[0, d_y=3\)"):
        cp.capsule_loss(p, r, rand(2, 4), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="y must be integer class indices"):
        cp.capsule_loss(p, r, rand(2, 4), torch.tensor([0.0, 1.0]))


@pytest.mark.catalog("extra:capsule-joint-loss")
def test_sentiment_data_ground_truth():
    d = sentiment_reviews(200, generator=torch.Generator().manual_seed(0))
    n_pol = (d.polarity >= 0).sum(-1)
    assert ((n_pol >= 1) & (n_pol <= 3)).all()
    for i in range(200):
        words = d.decode(i)
        for w, pol in zip(words, d.polarity[i].tolist()):
            if pol >= 0:
                assert pol == int(d.labels[i])
                assert (
                    w in (("bad", "awful", "dull", "boring", "weak"), ("good", "great", "superb", "fun", "moving"))[pol]
                )
    F, y, key = keyword_features(20, generator=torch.Generator().manual_seed(0))
    assert torch.equal(F[torch.arange(20), key, :4].argmax(-1), y)
    assert (F[..., 4].argmax(-1) == key).all()
    with pytest.raises(ValueError, match="length >= 5"):
        sentiment_reviews(3, length=4)


@pytest.mark.catalog("extra:capsule-joint-loss")
def test_capsule_classifier_learns_and_attends_to_its_words():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    d = sentiment_reviews(400, generator=g)
    model = CapsuleClassifier(len(d.vocab), 8, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(60):
        opt.zero_grad()
        model.loss(d.tokens, d.labels).backward()
        opt.step()
    with torch.no_grad():
        out, _, _ = model(d.tokens)
    assert float((out.p.argmax(-1) == d.labels).float().mean()) > 0.95
    # the capsule of the true class attends mostly to the polar words (which are <= 30% of tokens)
    rows = torch.arange(len(d))
    a_true = out.a[rows, d.labels]
    assert float((a_true * (d.polarity >= 0)).sum(-1).mean()) > 0.5


def test_mixed_reviews_majority_gives_the_label():
    from attnsurvey.data.sentiment import NEGATIVE, NEUTRAL, POSITIVE, mixed_reviews

    d = mixed_reviews(300, length=12, generator=torch.Generator().manual_seed(1))
    assert d.tokens.shape == d.polarity.shape == (300, 12) and d.labels.shape == (300,)
    seen_majorities = set()
    for i in range(300):
        words, pols = d.decode(i), d.polarity[i].tolist()
        for w, pol in zip(words, pols):  # every word is of the kind its polarity says
            assert w in (NEGATIVE, POSITIVE, NEUTRAL)[pol]
        own, other = pols.count(int(d.labels[i])), pols.count(1 - int(d.labels[i]))
        assert own - other == 1 and own in (2, 3)  # one more word of the label's polarity
        seen_majorities.add(own)
    assert seen_majorities == {2, 3}
    with pytest.raises(ValueError, match="length >= 6"):
        mixed_reviews(2, length=5)


def test_uniform_capsules_average_the_embeddings_and_keep_their_queries():
    model = CapsuleClassifier(10, 4, 2, attend=False)
    tokens = torch.tensor([[1, 2, 3, 0], [4, 4, 5, 6]])
    out, F, mask = model(tokens)
    want = torch.full((2, 2, 4), 0.0)
    want[0, :, :3] = 1 / 3
    want[1] = 1 / 4
    torch.testing.assert_close(out.a, want)  # uniform over the real tokens, padding excluded
    torch.testing.assert_close(out.c[:, 0], (F * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
    model.loss(tokens, torch.tensor([0, 1])).backward()
    assert model.capsules.Q_caps.grad is None and not model.capsules.Q_caps.requires_grad
    assert model.capsules.W_p.grad is not None
