"""Tests for §3.2.1 attention scoring: Eq. (23), Table II, concat, bilinear, and the 1/sqrt(d_k) scaling."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F_
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from attnsurvey.attention import align_scores
from attnsurvey.experiments.general_mechanisms import ScoreComparisonModel
from attnsurvey.general_mechanisms import scoring as sc
from attnsurvey.masking import masked_softmax

from .helpers import rand

rand = functools.partial(rand, dtype=torch.float64)  # this module works in float64


D_Q, D_K, D_W = 3, 4, 5  # different sizes, so a swapped axis cannot pass unnoticed


def weights(d_q=D_Q, d_k=D_K, d_w=D_W, dtype=torch.float64, seed=10):
    """Explicit weights for every parametrised score, in the survey's shapes."""
    return {
        "W1": rand(d_w, d_q, seed=seed, dtype=dtype),
        "W2": rand(d_w, d_k, seed=seed + 1, dtype=dtype),
        "w": rand(d_w, seed=seed + 2, dtype=dtype),
        "b_w": rand(d_w, seed=seed + 3, dtype=dtype),
        "W": rand(d_k, d_q, seed=seed + 4, dtype=dtype),  # general: (d_k, d_q)
        "b_k": rand(d_k, seed=seed + 5, dtype=dtype),
        "b": 0.3,
        "Wc": rand(d_w, d_q + d_k, seed=seed + 6, dtype=dtype),  # concat: (d_w, d_q + d_k)
        "v": rand(d_w, seed=seed + 7, dtype=dtype),
        "Wb": rand(d_q, d_k, seed=seed + 8, dtype=dtype),  # bilinear: (d_q, d_k)
    }


def matrix_forms(p):
    """name -> (matrix form on (Q, K), the formula for one pair (q, k_l), needs d_q == d_k)."""
    return {
        "additive": (
            lambda Q, K: sc.additive_score(Q, K, p["W1"], p["W2"], p["w"], p["b_w"]),
            lambda q, k: p["w"] @ torch.tanh(p["W1"] @ q + p["W2"] @ k + p["b_w"]),
            False,
        ),
        "multiplicative": (sc.dot_score, lambda q, k: q @ k, True),
        "scaled-multiplicative": (sc.scaled_dot_score, lambda q, k: (q @ k) / math.sqrt(k.numel()), True),
        "general": (lambda Q, K: sc.general_score(Q, K, p["W"]), lambda q, k: k @ p["W"] @ q, False),
        "biased-general": (
            lambda Q, K: sc.biased_general_score(Q, K, p["W"], p["b_k"]),
            lambda q, k: k @ (p["W"] @ q + p["b_k"]),
            False,
        ),
        "activated-general": (
            lambda Q, K: sc.activated_general_score(Q, K, p["W"], p["b"]),
            lambda q, k: torch.tanh(k @ p["W"] @ q + p["b"]),
            False,
        ),
        "cosine": (sc.cosine_score, lambda q, k: (q @ k) / (q.norm() * k.norm()), True),
        "euclidean": (sc.euclidean_score, lambda q, k: -torch.sqrt(((q - k) ** 2).sum()), True),
        "concat": (
            lambda Q, K: sc.concat_score(Q, K, p["Wc"], p["v"]),
            lambda q, k: p["v"] @ torch.tanh(p["Wc"] @ torch.cat([q, k])),
            False,
        ),
        "bilinear": (lambda Q, K: sc.bilinear_score(Q, K, p["Wb"]), lambda q, k: q @ p["Wb"] @ k, False),
    }


def test_all_score_names_are_covered():
    assert set(matrix_forms(weights())) == set(sc.SCORE_NAMES)


@pytest.mark.catalog(
    "eq23",
    "table2:additive",
    "table2:multiplicative",
    "table2:scaled-multiplicative",
    "table2:general",
    "table2:biased-general",
    "table2:activated-general",
    "table2:similarity",
    "extra:bilinear-score",
    "extra:concat-score",
)
@pytest.mark.parametrize("name", sc.SCORE_NAMES)
def test_every_score_matches_brute_force_loop(name):
    p = (
        weights()
        if name not in {"multiplicative", "scaled-multiplicative", "cosine", "euclidean"}
        else weights(d_q=D_K)
    )
    fn, pair, equal = matrix_forms(p)[name]
    d_q = D_K if equal else D_Q
    Q, K = rand(2, 3, d_q, seed=1), rand(2, 6, D_K, seed=2)
    e = fn(Q, K)
    assert e.shape == (2, 3, 6)
    for bt in range(2):
        for j in range(3):
            for l in range(6):
                expected = float(pair(Q[bt, j], K[bt, l]))
                assert math.isclose(float(e[bt, j, l]), expected, rel_tol=1e-9, abs_tol=1e-12), (bt, j, l)


@pytest.mark.catalog("eq23")
def test_batched_many_queries():
    """Leading batch dimensions broadcast, and batching equals scoring each example alone."""
    p = weights()
    Q = rand(2, 1, 3, D_Q, seed=1)
    K = rand(1, 4, 5, D_K, seed=2)
    for name, (fn, _, equal) in matrix_forms(p).items():
        if equal:
            continue
        e = fn(Q, K)
        assert e.shape == (2, 4, 3, 5), name
        torch.testing.assert_close(e[1, 2], fn(Q[1, 0], K[0, 2]))


@pytest.mark.catalog("table2:multiplicative")
def test_dot_hand_computed():
    Q = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    K = torch.tensor([[3.0, 4.0], [1.0, 0.0], [2.0, 2.0]])
    torch.testing.assert_close(sc.dot_score(Q, K), torch.tensor([[11.0, 1.0, 6.0], [-4.0, 0.0, -2.0]]))
    torch.testing.assert_close(sc.scaled_dot_score(Q, K), sc.dot_score(Q, K) / math.sqrt(2))


@pytest.mark.catalog("table2:additive")
def test_additive_hand_computed():
    # d_q = d_k = 1, d_w = 2: e = w^T tanh(W1 q + W2 k + b)
    Q, K = torch.tensor([[1.0]]), torch.tensor([[2.0], [0.0]])
    W1, W2 = torch.tensor([[1.0], [0.0]]), torch.tensor([[0.0], [1.0]])
    w, b = torch.tensor([1.0, -1.0]), torch.tensor([0.0, 0.5])
    e = sc.additive_score(Q, K, W1, W2, w, b)
    expected = torch.tensor([[math.tanh(1.0) - math.tanh(2.5), math.tanh(1.0) - math.tanh(0.5)]])
    torch.testing.assert_close(e, expected)
    # the module uses W2's bias as b
    m = sc.AdditiveScore(1, 1, 2)
    with torch.no_grad():
        m.W1.weight.copy_(W1)
        m.W2.weight.copy_(W2)
        m.W2.bias.copy_(b)
        m.w.copy_(w)
    torch.testing.assert_close(m(Q, K), expected)


@pytest.mark.catalog("table2:scaled-multiplicative")
def test_scaled_dot_matches_sdpa_weights():
    Q, K = rand(2, 3, 8, dtype=torch.float32), rand(2, 5, 8, seed=1, dtype=torch.float32)
    V = torch.eye(5).expand(2, 5, 5)  # the context with identity values is the weight matrix
    a = torch.softmax(sc.scaled_dot_score(Q, K), -1)
    torch.testing.assert_close(a, F_.scaled_dot_product_attention(Q, K, V), atol=1e-6, rtol=1e-5)


@pytest.mark.catalog("table2:general")
def test_general_with_identity_is_multiplicative():
    Q, K = rand(3, 4), rand(5, 4, seed=1)
    torch.testing.assert_close(sc.general_score(Q, K, torch.eye(4, dtype=torch.float64)), sc.dot_score(Q, K))
    m = sc.GeneralScore(4, 4).double()
    with torch.no_grad():
        m.W.weight.copy_(torch.eye(4))
    torch.testing.assert_close(m(Q, K), sc.DotScore()(Q, K))


def test_function_score_modules_call_their_functional_form_with_their_weights():
    Q, K = rand(3, D_Q), rand(5, D_K, seed=1)
    biased = sc.BiasedGeneralScore(D_Q, D_K).double()
    assert biased.W.bias is not None and sc.GeneralScore(D_Q, D_K).W.bias is None
    torch.testing.assert_close(biased(Q, K), sc.biased_general_score(Q, K, biased.W.weight, biased.W.bias))
    general = sc.GeneralScore(D_Q, D_K).double()
    torch.testing.assert_close(general(Q, K), (Q @ general.W.weight.T) @ K.T)  # k_l^T W q by hand
    K4 = rand(5, D_Q, seed=2)
    torch.testing.assert_close(sc.EuclideanScore()(Q, K4), -torch.cdist(Q, K4))
    assert list(sc.DotScore().parameters()) == [] and repr(sc.ScaledDotScore()) == "ScaledDotScore()"
    assert isinstance(sc.DotScore(), sc.ScoreModule) and not isinstance(biased, sc.DotScore)


@pytest.mark.catalog("extra:bilinear-score")
def test_bilinear_is_general_transposed():
    Q, K, W = rand(3, D_Q), rand(5, D_K, seed=1), rand(D_Q, D_K, seed=2)
    torch.testing.assert_close(sc.bilinear_score(Q, K, W), sc.general_score(Q, K, W.T))
    m = sc.BilinearScore(D_Q, D_K).double()
    torch.testing.assert_close(m(Q, K), sc.general_score(Q, K, m.W.T))


@pytest.mark.catalog("extra:concat-score")
def test_concat_is_additive_with_split_matrix():
    p = weights()
    Q, K = rand(3, D_Q, seed=1), rand(5, D_K, seed=2)
    W1, W2 = p["Wc"][:, :D_Q], p["Wc"][:, D_Q:]
    torch.testing.assert_close(sc.concat_score(Q, K, p["Wc"], p["v"]), sc.additive_score(Q, K, W1, W2, p["v"]))
    m = sc.ConcatScore(D_Q, D_K, D_W).double()
    Wm = m.W.weight
    torch.testing.assert_close(m(Q, K), sc.additive_score(Q, K, Wm[:, :D_Q], Wm[:, D_Q:], m.v))


@pytest.mark.catalog("table2:biased-general")
def test_biased_general_bias_adds_key_term():
    """k^T (W q + b) = k^T W q + k^T b: the bias scores each key independently of the query."""
    Q, K, W, b = rand(3, D_Q), rand(5, D_K, seed=1), rand(D_K, D_Q, seed=2), rand(D_K, seed=3)
    torch.testing.assert_close(sc.biased_general_score(Q, K, W, b), sc.general_score(Q, K, W) + (K @ b)[None, :])
    # the extra term k_l^T b differs between keys, so it can change which key wins
    assert float((K @ b).std()) > 0


@pytest.mark.catalog("table2:activated-general")
def test_activated_general_is_bounded():
    Q, K = rand(4, D_Q) * 100, rand(6, D_K, seed=1) * 100
    W = rand(D_K, D_Q, seed=2)
    e = sc.activated_general_score(Q, K, W, 0.5)
    assert e.abs().max() <= 1.0
    torch.testing.assert_close(
        sc.activated_general_score(Q, K, W, 0.5, act=torch.relu), torch.relu(sc.general_score(Q, K, W) + 0.5)
    )
    m = sc.ActivatedGeneralScore(D_Q, D_K).double()
    torch.testing.assert_close(m(Q, K), torch.tanh(sc.general_score(Q, K, m.W.weight) + m.b))
    with pytest.raises(ValueError, match="b must be a scalar"):
        sc.activated_general_score(Q, K, W, torch.ones(2, dtype=torch.float64))


@pytest.mark.catalog("table2:similarity")
def test_similarity_against_scipy():
    Q, K = rand(4, 6), rand(7, 6, seed=1)
    cos = 1.0 - cdist(Q.numpy(), K.numpy(), metric="cosine")
    euc = -cdist(Q.numpy(), K.numpy(), metric="euclidean")
    np.testing.assert_allclose(sc.cosine_score(Q, K).numpy(), cos, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sc.euclidean_score(Q, K).numpy(), euc, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sc.CosineScore(scale=2.0)(Q, K).numpy(), 2 * cos, rtol=1e-6)
    # a zero query has cosine 0 with every key (not NaN), and a query equal to a key is at distance 0
    assert torch.equal(
        sc.cosine_score(torch.zeros(1, 6, dtype=torch.float64), K), torch.zeros(1, 7, dtype=torch.float64)
    )
    assert float(sc.euclidean_score(K[:1], K)[0, 0]) == pytest.approx(0.0, abs=1e-100)


#: A built module's own weights under the names ``matrix_forms`` uses (parameter-free scores need none).
MODULE_WEIGHTS = {
    "additive": lambda m: {"W1": m.W1.weight, "W2": m.W2.weight, "w": m.w, "b_w": m.W2.bias},
    "general": lambda m: {"W": m.W.weight},
    "biased-general": lambda m: {"W": m.W.weight, "b_k": m.W.bias},
    "activated-general": lambda m: {"W": m.W.weight, "b": m.b},
    "concat": lambda m: {"Wc": m.W.weight, "v": m.v},
    "bilinear": lambda m: {"Wb": m.W},
}


def module_pair(name, m):
    """The Table II formula for one pair (q, k_l) (``matrix_forms``), with the module's own weights.

    Independent of the registry entry under test: the formula is chosen by ``name``, never by the
    module's class or function, so a name registered to the wrong module gives different scores.
    The registry's cosine carries a learned scale ``s`` (``s * cos``).
    """
    pair = matrix_forms(MODULE_WEIGHTS.get(name, lambda m: {})(m))[name][1]
    return (lambda q, k: m.scale * pair(q, k)) if name == "cosine" else pair


@pytest.mark.catalog("eq23")
def test_make_score_builds_every_name():
    Q, K = rand(2, 3, 4, dtype=torch.float32), rand(2, 5, 4, seed=1, dtype=torch.float32)
    for name in sc.SCORE_NAMES:
        m = sc.make_score(name, 4, 4)
        assert isinstance(m, sc.ScoreModule)
        assert m(Q, K).shape == (2, 3, 5), name
    for name in ("additive", "general", "biased-general", "activated-general", "concat", "bilinear"):
        assert sc.make_score(name, 3, 4)(Q[..., :3], K).shape == (2, 3, 5), name
    # every built module computes its own name's formula (Eq. 23 with the Table II row), pair by pair
    torch.manual_seed(0)
    for name in sc.SCORE_NAMES:
        d_q = D_K if sc.score_spec(name).equal_dims else D_Q
        m = sc.make_score(name, d_q, D_K, d_w=D_W).double()
        with torch.no_grad():
            for prm in m.parameters():  # no parameter left at a value (such as b = 0) that hides a term
                prm.add_(0.5 * torch.randn_like(prm))
            Q, K = rand(2, 3, d_q, seed=21), rand(2, 6, D_K, seed=22)
            e, pair = m(Q, K), module_pair(name, m)
            assert e.shape == (2, 3, 6), name
            for bt in range(2):
                for j in range(3):
                    for l in range(6):
                        expected = float(pair(Q[bt, j], K[bt, l]))
                        assert math.isclose(float(e[bt, j, l]), expected, rel_tol=1e-9, abs_tol=1e-12), (name, j, l)
    # the cosine's learned scale starts at sqrt(d_k) (make_score's contract)
    assert sc.make_score("cosine", 9, 9).scale.item() == 3.0
    with pytest.raises(ValueError, match="unknown score function 'dot'"):
        sc.make_score("dot", 4, 4)


@pytest.mark.catalog("table2:multiplicative")
@pytest.mark.parametrize("name", ["multiplicative", "scaled-multiplicative", "cosine", "euclidean"])
def test_scores_that_need_equal_dims_reject_mismatch(name):
    fn = matrix_forms(weights())[name][0]
    label = {
        "multiplicative": "multiplicative score",
        "scaled-multiplicative": "scaled multiplicative score",
        "cosine": "cosine similarity score",
        "euclidean": "Euclidean similarity score",
    }[name]
    with pytest.raises(ValueError, match=f"^{label} needs d_q == d_k, got d_q=16, d_k=32$"):
        fn(rand(2, 16), rand(3, 32))
    with pytest.raises(ValueError, match=f"{name} score needs d_q == d_k, got d_q=16, d_k=32"):
        sc.make_score(name, 16, 32)


def test_wrong_weight_shapes_are_rejected():
    p = weights()
    Q, K = rand(3, D_Q), rand(5, D_K, seed=1)
    with pytest.raises(ValueError, match=r"W must have shape \(d_k, d_q\) = \(4, 3\), got \(3, 4\)"):
        sc.general_score(Q, K, p["W"].T)
    with pytest.raises(ValueError, match=r"W_2 must have shape \(d_w, d_k\) = \(5, 4\), got \(5, 3\)"):
        sc.additive_score(Q, K, p["W1"], p["W2"][:, :3], p["w"])
    with pytest.raises(ValueError, match=r"w must have shape \(d_w,\)"):
        sc.additive_score(Q, K, p["W1"], p["W2"], p["w"][None])
    # d_w is read from W_1, so a wrong w or W_2 is reported as itself (it was reported as a wrong W_1)
    with pytest.raises(ValueError, match=r"^w must have shape \(d_w,\) = \(5,\), got \(6,\)$"):
        sc.additive_score(Q, K, p["W1"], p["W2"], torch.cat([p["w"], p["w"][:1]]))
    with pytest.raises(ValueError, match=r"^W_2 must have shape \(d_w, d_k\) = \(5, 4\), got \(6, 4\)$"):
        sc.additive_score(Q, K, p["W1"], torch.cat([p["W2"], p["W2"][:1]]), p["w"])
    with pytest.raises(ValueError, match=r"^W_1 must have shape \(d_w, d_q\) = \(5, 3\), got \(5, 4\)$"):
        sc.additive_score(Q, K, p["W2"], p["W2"], p["w"])
    with pytest.raises(ValueError, match=r"b must have shape \(d_k,\) = \(4,\), got \(3,\)"):
        sc.biased_general_score(Q, K, p["W"], p["b_k"][:3])
    with pytest.raises(ValueError, match=r"W must have shape \(d_w, d_q \+ d_k\) = \(5, 7\)"):
        sc.concat_score(Q, K, p["Wc"][:, :6], p["v"])
    with pytest.raises(ValueError, match=r"W must have shape \(d_q, d_k\) = \(3, 4\), got \(4, 3\)"):
        sc.bilinear_score(Q, K, p["Wb"].T)
    with pytest.raises(ValueError, match="W must have the dtype of Q"):
        sc.general_score(Q, K, p["W"].float())
    with pytest.raises(ValueError, match="batch dimensions of Q"):
        sc.dot_score(rand(2, 3, 4), rand(3, 5, 4))
    with pytest.raises(ValueError, match=r"K must have shape \(\.\.\., n_f, d_k\)"):
        sc.dot_score(rand(3, 4), rand(4))


@pytest.mark.parametrize(
    "q_shape, k_shape, message",
    [
        ((0, 4), (5, 4), "Q is empty: n_q=0"),
        ((3, 0), (5, 0), "Q is empty: d_q=0"),
        ((3, 4), (0, 4), "K is empty: n_f=0"),
    ],
)
def test_empty_inputs_are_rejected(q_shape, k_shape, message):
    for fn, _, _ in matrix_forms(weights(d_q=4, d_k=4)).values():
        with pytest.raises(ValueError, match=message):
            fn(torch.zeros(q_shape, dtype=torch.float64), torch.zeros(k_shape, dtype=torch.float64))


@pytest.mark.parametrize("name", sc.SCORE_NAMES)
def test_huge_scores_give_finite_weights(name):
    """Inputs scaled so that scores reach about +-1e4: the softmax stays finite and on the simplex."""
    p = weights(d_q=4, d_k=4)
    fn = matrix_forms(p)[name][0]
    Q, K = rand(3, 4, seed=1, dtype=torch.float32), rand(6, 4, seed=2, dtype=torch.float32)
    p32 = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in p.items()}
    fn = matrix_forms(p32)[name][0]
    s = 1e4 / float(fn(Q, K).abs().max())  # a rescaling of the scores themselves
    for e in (fn(Q * 100, K * 100), fn(Q, K) * s, -fn(Q, K) * s):
        a = masked_softmax(e, torch.ones_like(e, dtype=torch.bool))
        assert torch.isfinite(e).all() and torch.isfinite(a).all(), name
        torch.testing.assert_close(a.sum(-1), torch.ones(3))


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(sc.SCORE_NAMES),
    n_q=st.integers(1, 4),
    n_f=st.integers(1, 6),
    scale=st.floats(1e-3, 1e2),
    seed=st.integers(0, 1000),
)
def test_every_score_stays_finite_and_aligns_onto_the_simplex(name, n_q, n_f, scale, seed):
    """Each Table II score is finite over six decades of input scale, and the core's alignment of it
    (align_scores) is a distribution per query, unchanged by a common shift of that query's scores."""
    fn = matrix_forms(weights(d_q=4, d_k=4))[name][0]
    e = fn(rand(n_q, 4, seed=seed) * scale, rand(n_f, 4, seed=seed + 1) * scale)
    assert e.shape == (n_q, n_f) and torch.isfinite(e).all()
    a = align_scores(e)
    assert torch.all(a >= 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(n_q, dtype=torch.float64))
    shift = torch.arange(n_q, dtype=torch.float64)[:, None] * 7.0 - 3.0
    torch.testing.assert_close(align_scores(e + shift), a)
    # the weights order the keys as the scores do (softmax is monotone)
    assert torch.equal(a.argmax(-1), e.argmax(-1))


@pytest.mark.parametrize("name", sc.SCORE_NAMES)
def test_gradcheck_float64(name):
    p = {k: (v.clone().requires_grad_() if isinstance(v, torch.Tensor) else v) for k, v in weights(4, 4).items()}
    fn = matrix_forms(p)[name][0]
    Q = rand(2, 4, seed=1).requires_grad_()
    K = rand(3, 4, seed=2).requires_grad_()
    assert torch.autograd.gradcheck(fn, (Q, K))
    params = [v for v in p.values() if isinstance(v, torch.Tensor)]
    assert torch.autograd.gradcheck(lambda *_: fn(Q, K), tuple(params))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sc.SCORE_NAMES)
def test_low_precision_matches_float32(name, dtype):
    p32 = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in weights(4, 4).items()}
    plow = {k: (v.to(dtype) if isinstance(v, torch.Tensor) else v) for k, v in p32.items()}
    Q, K = rand(3, 4, seed=1, dtype=torch.float32), rand(5, 4, seed=2, dtype=torch.float32)
    ref = matrix_forms(p32)[name][0](Q, K)
    low = matrix_forms(plow)[name][0](Q.to(dtype), K.to(dtype))
    assert low.dtype == dtype
    tol = 0.05 if dtype == torch.bfloat16 else 0.01
    torch.testing.assert_close(low.float(), ref, atol=tol * (1 + float(ref.abs().max())), rtol=tol)


@pytest.mark.catalog("extra:scaling-variance")
def test_dot_product_variance_is_d_k():
    g = torch.Generator().manual_seed(0)
    n = 20_000
    for d_k in (1, 16, 256):
        var = sc.dot_product_variance(d_k, n, generator=g)
        # Var(q.k) = d_k; the sample variance of n draws has relative s.e. sqrt(Var(X^2)/n)/d_k
        # which is at most sqrt((E[X^4]/d_k^2 - 1)/n) = sqrt((2 + 6/d_k)/n) <= 0.02 here: allow 5 s.e.
        assert abs(var / d_k - 1) < 0.1, (d_k, var)
        scaled = sc.dot_product_variance(d_k, n, scaled=True, generator=g)
        assert abs(scaled - 1) < 0.1, (d_k, scaled)
    with pytest.raises(ValueError, match="d_k must be >= 1"):
        sc.dot_product_variance(0)


@pytest.mark.catalog("extra:scaling-variance")
def test_softmax_jacobian_matches_autograd():
    e = rand(2, 5)
    J = sc.softmax_jacobian(e)
    for i in range(2):
        ref = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), e[i])
        torch.testing.assert_close(J[i], ref)
    # two positions: J = a1 a2 [[1, -1], [-1, 1]], whose Frobenius norm is 2 a1 a2
    a = torch.softmax(torch.tensor([0.3, -0.2], dtype=torch.float64), -1)
    assert float(torch.linalg.matrix_norm(sc.softmax_jacobian(torch.tensor([0.3, -0.2], dtype=torch.float64)))) == (
        pytest.approx(2 * float(a[0] * a[1]))
    )
    # a saturated softmax passes (almost) no gradient
    assert float(sc.softmax_jacobian(torch.tensor([50.0, 0.0, 0.0])).abs().max()) < 1e-20


@pytest.mark.catalog("extra:scaling-variance")
def test_unscaled_softmax_saturates_and_scaled_does_not():
    g = torch.Generator().manual_seed(0)
    unscaled = [sc.softmax_saturation(d, n_f=10, n_samples=1000, generator=g) for d in (4, 64, 1024)]
    scaled = [sc.softmax_saturation(d, n_f=10, n_samples=1000, scaled=True, generator=g) for d in (4, 64, 1024)]
    max_w_u, grad_u = zip(*unscaled)
    max_w_s, grad_s = zip(*scaled)
    assert max_w_u[0] < max_w_u[1] < max_w_u[2] and max_w_u[2] > 0.9
    assert grad_u[0] > grad_u[1] > grad_u[2] and grad_u[2] < 0.15
    # with scaling the statistics do not depend on d_k (same distribution of scores, up to noise)
    assert max(max_w_s) - min(max_w_s) < 0.05 and max(grad_s) - min(grad_s) < 0.05
    with pytest.raises(ValueError, match="n_f must be >= 2"):
        sc.softmax_saturation(4, n_f=1)


@pytest.mark.catalog("extra:score-comparison-model")
def test_score_comparison_model_learns_key_lookup(one_thread):
    from attnsurvey.data.lookup import key_lookup
    from attnsurvey.training import accuracy, seed_everything, train

    g = seed_everything(0)
    model = ScoreComparisonModel("scaled-multiplicative", d_in=8, d_f=12, d_k=16, n_classes=4)
    batches = [key_lookup(64, generator=g) for _ in range(150)]
    train(model, lambda m, b: F_.cross_entropy(m(b[0], b[1])[0], b[2]), batches, lr=1e-2)
    x_q, F, y = key_lookup(1000, generator=g)
    with torch.no_grad():
        logits, a = model(x_q, F)
    assert a.shape == (1000, 8)
    torch.testing.assert_close(a.sum(-1), torch.ones(1000))
    # chance is 1/4; the learned look-up must be far above it
    assert accuracy(logits, y) > 0.7


def test_key_lookup_data_is_consistent():
    from attnsurvey.data.lookup import key_lookup

    g = torch.Generator().manual_seed(1)
    x_q, F, y = key_lookup(50, n_f=5, d_key=3, n_classes=4, noise=0.0, generator=g)
    assert x_q.shape == (50, 3) and F.shape == (50, 5, 7) and y.shape == (50,)
    for i in range(50):
        m = int(((F[i, :, :3] - x_q[i]).abs().sum(-1)).argmin())  # noise 0: the query is a key
        assert int(F[i, m, 3:].argmax()) == int(y[i])
    with pytest.raises(ValueError, match="n_f must be >= 1"):
        key_lookup(2, n_f=0)


def test_magnitude_lookup_answer_by_brute_force():
    from attnsurvey.data.lookup import magnitude_lookup

    x_q, F, y = magnitude_lookup(200, n_f=6, d_key=3, n_classes=4, generator=torch.Generator().manual_seed(2))
    assert x_q.shape == (200, 1) and F.shape == (200, 6, 7) and y.shape == (200,)
    for i in range(200):
        gaps = [abs(abs(float(F[i, l, 0])) - float(x_q[i, 0])) for l in range(6)]
        nearest = min(range(6), key=gaps.__getitem__)
        assert int(F[i, nearest, 3:].argmax()) == int(y[i])
    # noise 0: the query is the size of one item's first key entry, and that item answers
    x0, F0, y0 = magnitude_lookup(50, n_f=5, noise=0.0, generator=torch.Generator().manual_seed(3))
    hit = (F0[:, :, 0].abs() == x0).any(-1)
    assert bool(hit.all())
    with pytest.raises(ValueError, match="noise"):
        magnitude_lookup(2, noise=-1.0)


@pytest.mark.parametrize("score", ["scaled-multiplicative", "multiplicative", "general", "bilinear"])
def test_a_one_number_query_without_bias_cannot_change_a_product_scores_ranking(score):
    # ch03_2_1's control on magnitude_lookup: q = x_q u, so every product score is x_q times a function of the
    # item; for x_q > 0 the query only sets the temperature, and the item with the largest weight never moves
    from attnsurvey.data.lookup import magnitude_lookup

    _, F, _ = magnitude_lookup(100, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(1)
    model = ScoreComparisonModel(score, d_in=1, d_f=F.shape[-1], d_k=16, n_classes=4)
    with torch.no_grad():
        order = [model(torch.full((100, 1), x), F)[1].argsort(-1) for x in (0.1, 1.0, 7.0)]
    assert torch.equal(order[0], order[1]) and torch.equal(order[1], order[2])
    with torch.no_grad():  # a negative query reverses it, as x_q e_l says
        reverse = model(torch.full((100, 1), -1.0), F)[1].argsort(-1)
    assert torch.equal(reverse, order[1].flip(-1))
