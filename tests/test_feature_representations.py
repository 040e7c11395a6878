"""Tests for §3.1.3 Feature representations: multi-representational attention, Eq. (21)-(22)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_
from torch import nn

from attnsurvey.data.embeddings import make_embedding_tables
from attnsurvey.experiments.feature_related import RepresentationClassifier
from attnsurvey.feature_related import representations as rp
from attnsurvey.general_mechanisms.scoring import dot_score
from attnsurvey.general_model import attend

from .helpers import rand


def _params(dims=(3, 5, 2), d_t=4, dtype=torch.float32):
    Ws = [rand(d_t, d, seed=10 + i, dtype=dtype) for i, d in enumerate(dims)]
    bs = [rand(d_t, seed=20 + i, dtype=dtype) for i in range(len(dims))]
    return Ws, bs, rand(d_t, seed=30, dtype=dtype)


@pytest.mark.catalog("eq21")
def test_eq21_matches_linear_layers_loop():
    dims, d_t = (3, 5, 2), 4
    layers = [nn.Linear(d, d_t) for d in dims]
    xs = [rand(2, 6, d, seed=i) for i, d in enumerate(dims)]
    X_t = rp.transform_representations(xs, [l.weight for l in layers], [l.bias for l in layers])
    assert X_t.shape == (2, 6, 3, 4)
    for i, l in enumerate(layers):
        torch.testing.assert_close(X_t[..., i, :], l(xs[i]))
    # column-vector survey form for one word: x^(t_i) = W x^(e_i) + b
    torch.testing.assert_close(X_t[0, 0, 1], layers[1].weight @ xs[1][0, 0] + layers[1].bias)
    # without bias
    X0 = rp.transform_representations(xs, [l.weight for l in layers])
    torch.testing.assert_close(X0[..., 2, :], xs[2] @ layers[2].weight.T)


@pytest.mark.catalog("eq21")
def test_eq21_rejects_wrong_width():
    Ws, bs, _ = _params()
    xs = [rand(6, 3), rand(6, 7), rand(6, 2)]
    with pytest.raises(
        ValueError,
        match=r"x\^\(e_2\) of shape \(6, 7\) has width d_e2=7, but W_e2 of shape \(d_t, d_e2\) = \(4, 5\) expects d_e2=5",
    ):
        rp.transform_representations(xs, Ws, bs)
    with pytest.raises(ValueError, match="same d_t"):
        rp.transform_representations([rand(6, 3), rand(6, 5)], [Ws[0], rand(3, 5)])
    with pytest.raises(ValueError, match="leading dimensions differ"):
        rp.transform_representations([rand(6, 3), rand(5, 5)], Ws[:2])
    with pytest.raises(ValueError, match="E=3, got 2 W"):
        rp.transform_representations([rand(6, 3), rand(6, 5), rand(6, 2)], Ws[:2])
    with pytest.raises(ValueError, match=r"b_e1 must have shape \(d_t,\)"):
        rp.transform_representations([rand(6, 3)], Ws[:1], [rand(5)])
    with pytest.raises(ValueError, match="E=0"):
        rp.transform_representations([], [])
    m = rp.MetaEmbedding([3, 5, 2], 4)
    with pytest.raises(ValueError, match="x\\^\\(e_3\\).*d_e3=4"):
        m([rand(6, 3), rand(6, 5), rand(6, 4)])
    with pytest.raises(ValueError, match="built for E=3"):
        m([rand(6, 3)])


@pytest.mark.catalog("eq22")
def test_eq22_hand_computed():
    X_t = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    w = torch.tensor([math.log(2.0), 0.0])
    e = rp.representation_scores(X_t, w)
    torch.testing.assert_close(e, torch.tensor([math.log(2.0), 0.0, 3 * math.log(2.0)]))
    a = torch.softmax(e, -1)  # proportional to 2, 1, 8
    torch.testing.assert_close(a, torch.tensor([2.0, 1.0, 8.0]) / 11)
    x_e = rp.meta_embedding(X_t, a)
    torch.testing.assert_close(x_e, torch.tensor([2 + 24, 2 + 24]) / 11.0)
    # the full pipeline with identity W and zero b gives the same
    r = rp.multi_representational_attention(list(X_t), [torch.eye(2)] * 3, None, w)
    torch.testing.assert_close(r.x_e, x_e)
    torch.testing.assert_close(r.a, a)


@pytest.mark.catalog("eq22")
def test_eq22_is_general_attention_with_constant_query():
    # The meta-embedding is the general attention model with F = X_t, K = V = F and
    # the constant query w under the multiplicative score (Eq. 2-4).
    dims, (Ws, bs, w) = (3, 5, 2), _params()
    xs = [rand(7, d, seed=i) for i, d in enumerate(dims)]
    r = rp.multi_representational_attention(xs, Ws, bs, w)
    c, a = attend(w.expand(7, 1, 4), r.X_t, r.X_t, score=dot_score)
    torch.testing.assert_close(r.x_e, c[:, 0])
    torch.testing.assert_close(r.a, a[:, 0])
    # a bias shared by all representations cancels in the softmax
    torch.testing.assert_close(torch.softmax(rp.representation_scores(r.X_t, w) + 5.0, -1), r.a)
    torch.testing.assert_close(r.a.sum(-1), torch.ones(7))


@pytest.mark.catalog("eq22")
def test_eq22_permutation_equivariance():
    dims, (Ws, bs, w) = (3, 5, 2), _params()
    xs = [rand(7, d, seed=i) for i, d in enumerate(dims)]
    r = rp.multi_representational_attention(xs, Ws, bs, w)
    p = [2, 0, 1]
    rp_ = rp.multi_representational_attention([xs[i] for i in p], [Ws[i] for i in p], [bs[i] for i in p], w)
    torch.testing.assert_close(rp_.x_e, r.x_e)  # the order of the tables does not matter
    torch.testing.assert_close(rp_.a, r.a[:, p])


@pytest.mark.catalog("eq22")
def test_eq22_mask_large_scores_and_gradcheck():
    dims, (Ws, bs, w) = (3, 5, 2), _params()
    xs = [rand(4, d, seed=i) for i, d in enumerate(dims)]
    mask = torch.tensor([[True, True, True], [False, True, False], [False, False, False], [True, False, True]])
    r = rp.multi_representational_attention(xs, Ws, bs, w * 1e4, mask)
    assert torch.isfinite(r.x_e).all() and torch.isfinite(r.a).all()
    torch.testing.assert_close(r.a[1], torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(r.x_e[1], r.X_t[1, 1])
    assert torch.equal(r.a[2], torch.zeros(3)) and torch.equal(r.x_e[2], torch.zeros(4))
    Ws64, bs64, w64 = _params(dtype=torch.float64)
    xs64 = [rand(3, d, seed=i, dtype=torch.float64).requires_grad_(True) for i, d in enumerate(dims)]
    w64.requires_grad_(True)
    Ws64 = [W.requires_grad_(True) for W in Ws64]
    fn = lambda w, *t: rp.multi_representational_attention(list(t[:3]), list(t[3:]), bs64, w).x_e
    assert torch.autograd.gradcheck(fn, (w64, *xs64, *Ws64))
    m = rp.MetaEmbedding([3, 5, 2], 4, combine="average")
    ra = m(xs, mask)
    torch.testing.assert_close(ra.a[3], torch.tensor([0.5, 0.0, 0.5]))
    torch.testing.assert_close(m(xs).a, torch.full((4, 3), 1 / 3))


@pytest.mark.catalog("eq22")
def test_eq22_rejects_bad_input():
    with pytest.raises(ValueError, match=r"w must have shape \(d_t,\) = \(4,\), got \(3,\)"):
        rp.representation_scores(rand(2, 3, 4), rand(3))
    with pytest.raises(ValueError, match="a has E=2, X_t has E=3"):
        rp.meta_embedding(rand(5, 3, 4), rand(5, 2))
    with pytest.raises(ValueError, match="combine must be"):
        rp.MetaEmbedding([3], 4, combine="max")


@pytest.mark.catalog("eq22")
def test_meta_embedding_finds_informative_tables(one_thread):
    from attnsurvey.training import accuracy, train

    g = torch.Generator().manual_seed(0)
    specs = [("informative", 8, 0.5, 0.5), ("informative", 8, 0.5, 0.5), ("shuffled", 8, 0.5), ("noise", 8, 0.0)]
    T = make_embedding_tables(600, 4, specs, generator=g, offset=1.0)
    assert [t.shape for t in T.tables] == [(600, 8)] * 4
    assert T.known[:, 2:].all() and 0.3 < T.known[:, 0].float().mean() < 0.7
    words = torch.randperm(600, generator=g)
    trw, tew = words[:300], words[300:]
    gg = torch.Generator().manual_seed(1)
    batches = [(trw[torch.randint(0, 300, (64,), generator=gg)],) for _ in range(150)]
    acc, weights = {}, {}
    for combine in ("attention", "average"):
        torch.manual_seed(0)
        m = RepresentationClassifier(T.dims, 8, 4, combine)
        train(m, lambda m, b: F_.cross_entropy(m(T.lookup(b[0]))[0], T.classes[b[0]]), batches, lr=2e-2)
        with torch.no_grad():
            logits, weights[combine] = m(T.lookup(tew))
        acc[combine] = accuracy(logits, T.classes[tew])
    assert acc["attention"] > acc["average"] + 0.05, acc
    a, k = weights["attention"], T.known[tew]
    only1, only2 = k[:, 0] & ~k[:, 1], ~k[:, 0] & k[:, 1]
    # for a word only table 1 knows, most weight goes to table 1, and likewise for table 2
    assert a[only1, 0].mean() > 0.5 and a[only2, 1].mean() > 0.5
    # the uninformative tables get little weight overall
    assert a[:, 2:].sum(-1).mean() < 0.3


@pytest.mark.parametrize("combine", ["attention", "average"])
def test_meta_embedding_ignores_nan_in_a_missing_representation(combine):
    """Review 2, A: ``a_i * x^(t_i)`` with a_i = 0 and NaN in a missing x^(t_i) made x^(e) NaN."""
    torch.manual_seed(0)
    me = rp.MetaEmbedding([3, 5], 4, combine=combine).double()
    x1, x2 = rand(2, 3, seed=1, dtype=torch.float64), rand(2, 5, seed=2, dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])  # word 1 is missing from table 2 ...
    x2[1] = float("nan")  # ... and its row holds NaN
    out = me([x1, x2], mask)
    only = me.proj[0](x1[1])  # by hand: the one available representation, with weight 1
    torch.testing.assert_close(out.a[1], torch.tensor([1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(out.x_e[1], only)
    out.x_e.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in me.parameters() if p.grad is not None)
    X_t = torch.stack([only, torch.full((4,), float("nan"), dtype=torch.float64)])
    torch.testing.assert_close(rp.meta_embedding(X_t, torch.tensor([1.0, 0.0], dtype=torch.float64)), only)


def test_mlp_baseline_is_one_relu_layer_on_the_concatenation():
    torch.manual_seed(0)
    m = RepresentationClassifier([3, 2], d_t=4, n_classes=2, combine="mlp", d_hidden=5)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.linspace(-1, 1, p.numel()).reshape(p.shape))
    x1, x2 = torch.tensor([[1.0, -2.0, 0.5]]), torch.tensor([[0.25, 3.0]])
    logits, a = m([x1, x2])
    # by hand, one unit at a time: h_j = max(0, sum_i W1[j, i] x_i + b1[j]), logit_k = sum_j W2[k, j] h_j + b2[k]
    x = [1.0, -2.0, 0.5, 0.25, 3.0]
    W1, b1 = m.hidden.weight.tolist(), m.hidden.bias.tolist()
    W2, b2 = m.out.weight.tolist(), m.out.bias.tolist()
    h = [max(0.0, sum(w * xi for w, xi in zip(W1[j], x)) + b1[j]) for j in range(5)]
    expected = [sum(w * hj for w, hj in zip(W2[k], h)) + b2[k] for k in range(2)]
    torch.testing.assert_close(logits[0], torch.tensor(expected))
    assert a is None
    assert sum(p.numel() for p in m.parameters()) == 5 * 5 + 5 + 2 * 5 + 2
    with pytest.raises(ValueError, match="d_hidden"):
        RepresentationClassifier([3, 2], 4, 2, combine="mlp")
    with pytest.raises(ValueError, match="combine must be"):
        RepresentationClassifier([3, 2], 4, 2, combine="max")
