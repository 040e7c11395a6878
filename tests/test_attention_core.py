"""The one attention core (attnsurvey.attention): both paths, masks, bias, inert positions, registries."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey import attention as at
from attnsurvey import masking as mk
from attnsurvey.general_mechanisms import scoring as sc
from attnsurvey.general_mechanisms.sparse_maps import entmax15, sparsemax
from attnsurvey.general_model import attend as gm_attend

from .helpers import rand

D64 = torch.float64


def qkv(B=2, h=3, n_q=4, n_f=5, d=6, seed=0, dtype=D64):
    return (
        rand(B, h, n_q, d, seed=seed, dtype=dtype),
        rand(B, h, n_f, d, seed=seed + 1, dtype=dtype),
        rand(B, h, n_f, d, seed=seed + 2, dtype=dtype),
    )


def brute_force(Q, K, V, allowed=None, bias=None, scale=None):
    """Loop over every query and key: softmax over the allowed keys, zero when none."""
    scale = 1 / math.sqrt(Q.shape[-1]) if scale is None else scale
    B, h, n_q, _ = Q.shape
    n_f = K.shape[-2]
    c = torch.zeros(B, h, n_q, V.shape[-1], dtype=Q.dtype)
    a = torch.zeros(B, h, n_q, n_f, dtype=Q.dtype)
    for b in range(B):
        for j in range(h):
            for i in range(n_q):
                ok = [l for l in range(n_f) if allowed is None or bool(allowed.expand(B, h, n_q, n_f)[b, j, i, l])]
                if not ok:
                    continue
                e = torch.stack(
                    [
                        Q[b, j, i] @ K[b, j, l] * scale
                        + (0 if bias is None else bias.expand(B, h, n_q, n_f)[b, j, i, l])
                        for l in ok
                    ]
                )
                w = torch.softmax(e, 0)
                for t, l in enumerate(ok):
                    a[b, j, i, l] = w[t]
                    c[b, j, i] += w[t] * V[b, j, l]
    return c, a


def both_paths(*args, **kw):
    c_slow, a = at.attend(*args, need_weights=True, **kw)
    c_fast, none = at.attend(*args, need_weights=False, **kw)
    assert none is None
    return c_slow, c_fast, a


CASES = {
    "plain": {},
    "mask": {"mask": rand(4, 5, seed=5) > 0},
    "key_padding": {"key_padding_mask": torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, :]},
    "bias": {"bias": rand(3, 4, 5, seed=6, dtype=D64)},
    "causal": {"is_causal": True},
    "scale": {"scale": 0.3},
    "all": {
        "mask": rand(4, 5, seed=5) > -0.5,
        "bias": rand(4, 5, seed=6, dtype=D64),
        "is_causal": True,
        "key_padding_mask": torch.tensor([[True] * 5, [False, True, True, True, True]])[:, None, :],
    },
}


@pytest.mark.catalog("eq4")
@pytest.mark.parametrize("case", list(CASES))
def test_both_paths_agree_with_brute_force(case):
    Q, K, V = qkv()
    kw = CASES[case]
    c_slow, c_fast, a = both_paths(Q, K, V, **kw)
    allowed = at.allowed_positions(
        torch.Size((2, 3, 4, 5)), kw.get("mask"), kw.get("key_padding_mask"), kw.get("is_causal", False)
    )
    c_ref, a_ref = brute_force(Q, K, V, allowed, kw.get("bias"), kw.get("scale"))
    torch.testing.assert_close(c_slow, c_ref)
    torch.testing.assert_close(c_fast, c_ref)
    torch.testing.assert_close(a, a_ref)
    ref_sdpa = F_.scaled_dot_product_attention(Q, K, V, scale=kw.get("scale"), is_causal=case == "causal")
    if case in ("plain", "scale", "causal"):
        torch.testing.assert_close(c_fast, ref_sdpa)


@pytest.mark.catalog("eq3", "eq4")
def test_fully_masked_rows_give_zero_context_on_both_paths_with_finite_gradients():
    Q, K, V = (t.requires_grad_() for t in qkv())
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False
    for need in (True, False):
        c, a = at.attend(Q, K, V, mask, need_weights=need, bias=rand(4, 5, seed=3, dtype=D64))
        assert torch.all(c[..., 1, :] == 0)
        if need:
            assert torch.all(a[..., 1, :] == 0)
            torch.testing.assert_close(a[..., 0, :].sum(-1), torch.ones(2, 3, dtype=D64))
        Q.grad = K.grad = V.grad = None
        c.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (Q, K, V))


@pytest.mark.catalog("eq3", "eq4")
@pytest.mark.parametrize("need", [True, False])
def test_non_finite_query_of_a_fully_masked_row_reaches_no_gradient(need):
    """A padded query that may attend nothing holds NaN: context 0, and dK, dV as with a finite query there."""
    Q, K, V = qkv()
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[3] = False
    grads = []
    for fill in (float("nan"), 0.7):
        Qf = Q.clone()
        Qf[..., 3, :] = fill
        Qg, Kg, Vg = (t.clone().requires_grad_() for t in (Qf, K, V))
        c, _ = at.attend(Qg, Kg, Vg, mask, need_weights=need)
        assert torch.all(c[..., 3, :] == 0)
        c.sum().backward()
        grads.append((Kg.grad, Vg.grad, Qg.grad[..., :3, :]))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)  # a dead row's query contributes nothing, NaN or not
    Q_live = Q.clone()
    Q_live[..., 2, :] = float("nan")  # a query that may attend keeps its NaN: its context is NaN, honestly
    c, _ = at.attend(Q_live, K, V, mask, need_weights=need)
    assert torch.isnan(c[..., 2, :]).all() and torch.isfinite(c[..., :2, :]).all()


@pytest.mark.catalog("eq3", "eq4")
@pytest.mark.parametrize("need", [True, False])
def test_minus_infinity_in_a_float_mask_masks_as_false_does(need):
    """torch's float attn_mask: -inf entries are masked positions (zero context for a full row, NaN there inert)."""
    Q, K, V = qkv()
    allowed = torch.ones(4, 5, dtype=torch.bool).tril()
    allowed[0] = False  # query 0 may attend nothing
    K, V = K.clone(), V.clone()
    K[..., 4, :], V[..., 4, 1] = float("nan"), float("nan")  # key 4 is masked for every query
    shift = rand(4, 5, seed=9, dtype=D64)  # a finite additive part
    float_mask = shift.masked_fill(~allowed, float("-inf"))
    c, a = at.attend(Q, K, V, float_mask, need_weights=need)
    c_ref, a_ref = at.attend(Q, K, V, allowed, bias=shift)
    torch.testing.assert_close(c, c_ref)
    assert torch.all(c[..., 0, :] == 0)
    if need:
        torch.testing.assert_close(a, a_ref)


@pytest.mark.catalog("eq4")
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("need", [True, False])
def test_non_finite_keys_and_values_at_masked_positions_are_inert(bad, need):
    Q, K, V = qkv()
    K, V = K.clone(), V.clone()
    K[..., 4, :] = bad  # key 4: masked for everyone (padding)
    V[..., 4, :] = bad
    K[..., 3, 0] = bad  # key 3: masked for queries 0-2 only (causal-like)
    V[..., 3, 1] = bad
    mask = torch.ones(4, 5, dtype=torch.bool).tril()  # query i sees keys <= i
    kpm = torch.tensor([True, True, True, True, False]).expand(2, 3, 5)
    Qg, Kg, Vg = (t.clone().requires_grad_() for t in (Q, K, V))
    c, _ = at.attend(Qg, Kg, Vg, mask, key_padding_mask=kpm, need_weights=need)
    Kc, Vc = K.clone(), V.clone()
    Kc[..., 3:, :] = 0
    Vc[..., 3:, :] = 0
    c_ref, _ = at.attend(Q, Kc, Vc, mask, key_padding_mask=kpm)
    torch.testing.assert_close(c[..., :3, :], c_ref[..., :3, :])  # queries that cannot see key 3
    assert torch.isnan(c[..., 3, :]).all()  # query 3 may attend the non-finite key 3: NaN, honestly
    c[..., :3, :].sum().backward()
    assert torch.isfinite(Qg.grad[..., :3, :]).all()
    assert torch.all(Kg.grad[..., 4, :] == 0) and torch.all(Vg.grad[..., 4, :] == 0)


@pytest.mark.catalog("eq3")
def test_masked_softmax_and_masked_mean_select_rather_than_multiply():
    e = torch.tensor([[1.0, float("nan"), 2.0], [float("inf"), 0.0, 0.0]], requires_grad=True)
    m = torch.tensor([[True, False, True], [False, True, True]])
    a = mk.masked_softmax(e, m)
    torch.testing.assert_close(a, torch.tensor([[1 / (1 + math.e), 0.0, math.e / (1 + math.e)], [0.0, 0.5, 0.5]]))
    a.sum().backward()
    assert torch.isfinite(e.grad).all()
    X = torch.tensor([[[1.0], [float("nan")], [3.0]], [[5.0], [6.0], [7.0]]])
    keep = torch.tensor([[True, False, True], [False, False, False]])
    torch.testing.assert_close(mk.masked_mean(X, keep), torch.tensor([[2.0], [0.0]]))
    torch.testing.assert_close(mk.masked_mean(torch.zeros(2, 0, 3)), torch.zeros(2, 3))
    assert mk.minus_inf(torch.float16) == torch.finfo(torch.float16).min
    with pytest.raises(TypeError):
        mk.minus_inf(torch.int64)


def test_float16_and_bfloat16_masks_use_the_dtype_fill():
    for dtype in (torch.float16, torch.bfloat16):
        Q, K, V = qkv(dtype=dtype)
        mask = rand(4, 5, seed=1) > 0
        mask[:, 0] = True
        c, a = at.attend(Q, K, V, mask)
        assert torch.isfinite(c).all() and torch.all(a.masked_select(~mask.expand_as(a)) == 0)


def test_grouped_query_attention_equals_repeated_heads():
    Q = rand(2, 6, 4, 8, dtype=D64)
    K, V = rand(2, 2, 5, 8, seed=1, dtype=D64), rand(2, 2, 5, 8, seed=2, dtype=D64)
    rep = lambda t: t.repeat_interleave(3, dim=-3)
    ref = F_.scaled_dot_product_attention(Q, rep(K), rep(V))
    for need in (True, False):
        c, _ = at.attend(Q, K, V, enable_gqa=True, need_weights=need)
        torch.testing.assert_close(c, ref)
    with pytest.raises(ValueError, match="grouped-query attention needs"):
        at.attend(Q, rand(2, 4, 5, 8, dtype=D64), rand(2, 4, 5, 8, dtype=D64), enable_gqa=True)


def test_dropout_with_generator_is_reproducible_and_unbiased():
    Q, K, V = qkv()
    c1, a1 = at.attend(Q, K, V, dropout_p=0.5, generator=torch.Generator().manual_seed(3))
    c2, a2 = at.attend(Q, K, V, dropout_p=0.5, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(c1, c2)
    _, a0 = at.attend(Q, K, V)
    assert set(torch.unique((a1 / a0).round(decimals=6)).tolist()) <= {0.0, 2.0}
    g = torch.Generator().manual_seed(0)
    mean = torch.stack([at.attend(Q, K, V, dropout_p=0.3, generator=g)[1] for _ in range(400)]).mean(0)
    torch.testing.assert_close(mean, a0, atol=0.06, rtol=0)
    assert torch.all(at.attend(Q, K, V, dropout_p=1.0)[0] == 0)
    with pytest.raises(ValueError, match="dropout_p"):
        at.attend(Q, K, V, dropout_p=1.5)


@pytest.mark.catalog("eq2")
def test_alignment_and_score_hooks_by_name_and_callable():
    Q, K, V = qkv()
    e = sc.scaled_dot_score(Q, K)
    torch.testing.assert_close(at.attend(Q, K, V, align="sparsemax")[1], sparsemax(e))
    torch.testing.assert_close(at.attend(Q, K, V, align="entmax15")[1], entmax15(e))
    hard = at.attend(Q, K, V, align="hard")[1]
    torch.testing.assert_close(hard, F_.one_hot(e.argmax(-1), 5).to(D64))
    torch.testing.assert_close(at.attend(Q, K, V, score="cosine")[1], torch.softmax(sc.cosine_score(Q, K), -1))
    torch.testing.assert_close(
        at.attend(Q, K, V, score="multiplicative")[1], torch.softmax(Q @ K.transpose(-1, -2), -1)
    )
    torch.testing.assert_close(
        at.attend(Q, K, V, align=lambda e, m: torch.softmax(2 * e, -1))[1], torch.softmax(2 * e, -1)
    )
    with pytest.raises(ValueError, match=r"unknown alignment function 'softermax'; choose one of \['softmax'"):
        at.attend(Q, K, V, align="softermax")
    with pytest.raises(ValueError, match="has learned weights"):
        at.attend(Q, K, V, score="additive")
    with pytest.raises(ValueError, match="scale applies to the"):
        at.attend(Q, K, V, score=sc.cosine_score, scale=2.0)
    with pytest.raises(TypeError, match="align must be"):
        at.attend(Q, K, V, align=3)


def test_mask_arguments_are_unambiguous():
    Q, K, V = rand(4, 4, 6), rand(4, 5, 6, seed=1), rand(4, 5, 6, seed=2)  # B = n_q = 4
    pad = torch.ones(4, 5, dtype=torch.bool)
    pad[0, 2:] = False
    with pytest.raises(ValueError, match="ambiguous"):
        at.attend(Q, K, V, pad)
    c, a = at.attend(Q, K, V, key_padding_mask=pad)
    assert torch.all(a[0, :, 2:] == 0) and torch.all(a[1:] > 0)
    torch.testing.assert_close(c, at.attend(Q, K, V, pad[:, None, :])[0])
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        at.attend(Q, K, V, key_padding_mask=pad[0])
    with pytest.raises(ValueError, match="bias of shape"):
        at.attend(Q, K, V, bias=torch.zeros(3, 5))


def test_public_call_of_chapters_still_works():
    Q, K, V = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 6, seed=2)
    c, a = gm_attend(Q, K, V, rand(2, 3, 5, seed=3) > 0, sc.dot_score)
    assert c.shape == (2, 3, 6) and a.shape == (2, 3, 5)


def test_registries_list_names_and_reject_unknown_ones():
    assert sc.SCORE_NAMES == tuple(n for n in sc.SCORES.names() if n != "location")
    assert "location" in sc.SCORES and sc.make_score("similarity", 4, 4).__class__ is sc.CosineScore
    with pytest.raises(ValueError, match=r"unknown score function 'dotty'; choose one of \['additive'"):
        sc.make_score("dotty", 4, 4)
    with pytest.raises(ValueError, match="needs n_max"):
        sc.make_score("location", 4, 4)
    assert mk.MASKS.names() == ("causal", "padding", "band", "forward", "backward", "prefix_lm", "document", "sink")
    torch.testing.assert_close(mk.make_mask("band", 4, 1), (torch.arange(4)[:, None] - torch.arange(4)).abs() <= 1)
    with pytest.raises(ValueError, match="unknown mask kind 'diagonal'"):
        mk.make_mask("diagonal", 3)
    with pytest.raises(ValueError, match="already registered"):
        mk.MASKS.register("causal", mk.causal_mask)


def test_mask_builders_match_brute_force():
    n = 5
    for name, fn, rule in (
        ("causal", lambda: mk.causal_mask(n), lambda i, j: j <= i),
        ("offset causal", lambda: mk.causal_mask(n, n + 2, offset=2), lambda i, j: j <= i + 2),
        ("band", lambda: mk.band_mask(n, 2), lambda i, j: abs(i - j) <= 2),
        ("forward", lambda: mk.forward_mask(n), lambda i, j: j < i),
        ("backward", lambda: mk.backward_mask(n), lambda i, j: j > i),
    ):
        m = fn()
        ref = torch.tensor([[rule(i, j) for j in range(m.shape[1])] for i in range(n)])
        assert torch.equal(m, ref), name
    assert torch.equal(mk.key_padding_mask(torch.tensor([0, 2]), 3), torch.tensor([[False] * 3, [True, True, False]]))
    with pytest.raises(ValueError, match="lengths must lie in"):
        mk.key_padding_mask(torch.tensor([4]), 3)
    with pytest.raises(ValueError, match="band_mask needs w to be an integer >= 0, got w=-1"):
        mk.band_mask(3, -1)


def test_empty_inputs():
    for shape_q, shape_k in (((0, 3, 4), (0, 5, 4)), ((2, 0, 4), (2, 5, 4)), ((2, 3, 4), (2, 0, 4))):
        for need in (True, False):
            c, a = at.attend(
                torch.zeros(shape_q), torch.zeros(shape_k), torch.zeros(*shape_k[:-1], 6), need_weights=need
            )
            assert c.shape == (*shape_q[:-1], 6) and torch.all(c == 0)


# ----------------------------------------------------------------------------- properties
ALIGNS = ["softmax", "sparsemax", "entmax15"]  # the registered alignments attend's align= takes by name (Eq. 3)


@st.composite
def problems(draw, square=False, min_batch=1):
    """Q ``(B, n_q, d)``, K, V ``(B, n_f, d)`` float64 and a boolean mask ``(B, n_q, n_f)`` (True = may attend)
    whose density is drawn, so fully masked rows and keys nobody may attend occur; ``square``: n_f = n_q."""
    B, n_q = draw(st.integers(min_batch, 3)), draw(st.integers(1, 5))
    n_f, d = (n_q if square else draw(st.integers(1, 6))), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 10_000))
    g = torch.Generator().manual_seed(seed)
    Q, K, V = (torch.randn(B, n, d, generator=g, dtype=D64) * 3 for n in (n_q, n_f, n_f))
    mask = torch.rand(B, n_q, n_f, generator=g) < draw(st.floats(0.0, 1.0))
    return Q, K, V, mask


def permutation(data, n: int) -> torch.Tensor:
    """A permutation of ``range(n)`` drawn by hypothesis (shrinks towards the identity)."""
    return torch.tensor(data.draw(st.permutations(range(n)), label="perm"), dtype=torch.long)


def run_with_grads(Q, K, V, mask, **kw):
    """attend's context and the gradients of Q, K, V under a fixed random cotangent (not just a sum)."""
    Qg, Kg, Vg = (t.clone().requires_grad_() for t in (Q, K, V))
    c, _ = at.attend(Qg, Kg, Vg, mask, **kw)
    dc = torch.randn(c.shape, generator=torch.Generator().manual_seed(1), dtype=c.dtype)
    (c * dc).sum().backward()
    return c.detach(), Qg.grad, Kg.grad, Vg.grad


@pytest.mark.catalog("eq3")
@settings(max_examples=50, deadline=None)
@given(problems(), st.sampled_from(ALIGNS))
def test_weights_sum_to_one_over_allowed_positions(p, align):
    Q, K, V, mask = p
    _, a = at.attend(Q, K, V, mask, align=align)
    alive = mask.any(-1)
    torch.testing.assert_close(a.sum(-1), alive.to(D64))
    assert torch.all(a.masked_select(~mask) == 0) and torch.all(a >= 0)


@settings(max_examples=50, deadline=None)
@given(problems(), st.booleans(), st.sampled_from(ALIGNS))
def test_masked_positions_are_inert_and_gradients_finite(p, need, align):
    """NaN/Inf at keys nobody may attend, and NaN in the queries of fully masked rows: the context and
    every gradient equal those of a clean run (finite values there), and those slots get gradient 0."""
    Q, K, V, mask = p
    key_dead = ~mask.any(-2)  # (B, n_f): keys no query may attend: poison them
    row_dead = ~mask.any(-1)  # (B, n_q): queries that may attend nothing: poison them too
    nan, inf = (torch.tensor(x, dtype=D64) for x in (float("nan"), float("inf")))
    Q2 = torch.where(row_dead[..., None], nan, Q)
    K2 = torch.where(key_dead[..., None], nan, K)
    V2 = torch.where(key_dead[..., None], inf, V)
    clean = run_with_grads(Q, K, V, mask, need_weights=need, align=align)
    c, dQ, dK, dV = run_with_grads(Q2, K2, V2, mask, need_weights=need, align=align)
    for got, want in zip((c, dQ, dK, dV), clean):
        torch.testing.assert_close(got, want)
    assert torch.all(dK[key_dead] == 0) and torch.all(dV[key_dead] == 0) and torch.all(dQ[row_dead] == 0)
    assert torch.all(c[row_dead] == 0)


@settings(max_examples=50, deadline=None)
@given(problems(square=True), st.booleans(), st.data())
def test_self_attention_is_permutation_equivariant(p, need, data):
    """Permuting the tokens (and the mask's rows and columns with them) permutes the contexts the same way."""
    X, _, _, mask = p
    perm = permutation(data, X.shape[-2])
    c, _ = at.attend(X, X, X, mask, need_weights=need)
    Xp = X[:, perm]
    c_perm, _ = at.attend(Xp, Xp, Xp, mask[:, perm][:, :, perm], need_weights=need)
    torch.testing.assert_close(c_perm, c[:, perm])


@settings(max_examples=50, deadline=None)
@given(problems(), st.sampled_from(ALIGNS), st.booleans(), st.data())
def test_contexts_do_not_depend_on_the_order_of_keys_and_values(p, align, need, data):
    """Eq. (4) sums over the keys: reordering keys and values together (the mask's columns with them)
    leaves every query's context unchanged, and reorders its weights the same way."""
    Q, K, V, mask = p
    perm = permutation(data, K.shape[-2])
    c, a = at.attend(Q, K, V, mask, align=align, need_weights=need)
    c_perm, a_perm = at.attend(Q, K[:, perm], V[:, perm], mask[..., perm], align=align, need_weights=need)
    torch.testing.assert_close(c_perm, c)
    if need:
        torch.testing.assert_close(a_perm, a[..., perm])


@settings(max_examples=40, deadline=None)
@given(problems(min_batch=2), st.sampled_from(ALIGNS), st.data())
def test_examples_of_a_batch_are_independent(p, align, data):
    """Changing the other examples of the batch (inputs, mask, even a NaN they may attend) changes
    neither this example's context nor the gradients of its inputs, on both paths (need_weights)."""
    Q, K, V, mask = p
    B = Q.shape[0]
    b = data.draw(st.integers(0, B - 1), label="b")
    other = (torch.arange(B) != b)[:, None, None]
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 10_000), label="seed"))
    Q2, K2, V2 = (torch.where(other, torch.randn(t.shape, generator=g, dtype=D64), t) for t in (Q, K, V))
    density = data.draw(st.floats(0.0, 1.0), label="density")  # 0: every row of the others fully masked
    mask2 = torch.where(other, torch.rand(mask.shape, generator=g) < density, mask)
    K3, V3 = K2.clone(), V2.clone()  # and a non-finite key and value in another example, maybe attended
    K3[(b + 1) % B, 0, 0] = float("nan")
    V3[(b + 1) % B, -1, 0] = float("inf")
    for need in (True, False):
        c, dQ, dK, dV = run_with_grads(Q, K, V, mask, align=align, need_weights=need)
        for changed in ((Q2, K2, V2), (Q2, K3, V3)):
            c2, dQ2, dK2, dV2 = run_with_grads(*changed, mask2, align=align, need_weights=need)
            for got, want in ((c2, c), (dQ2, dQ), (dK2, dK), (dV2, dV)):
                torch.testing.assert_close(got[b], want[b])


@pytest.mark.catalog("eq4")
@pytest.mark.parametrize("batch", [(), (3,), (2, 3, 2)])
def test_sdpa_path_views_any_rank_as_four_d(batch):
    # SDPA's fused kernel needs 4-D input: the fast path reshapes and must agree with the exact path
    Q, K, V = (rand(*batch, n, 4, seed=s, dtype=D64) for s, n in ((0, 5), (1, 6), (2, 6)))
    mask = rand(*batch, 5, 6, seed=3) > -0.3
    bias = rand(5, 6, seed=4, dtype=D64)
    kpm = (rand(*batch, 6, seed=5) > -1.0) if batch else None
    c_fast, _ = at.attend(Q, K, V, mask, bias=bias, key_padding_mask=kpm, need_weights=False)
    c_slow, _ = at.attend(Q, K, V, mask, bias=bias, key_padding_mask=kpm, need_weights=True)
    torch.testing.assert_close(c_fast, c_slow)
    assert c_fast.shape == (*batch, 5, 4)


def _softmax_oracle(e: torch.Tensor, allowed: torch.Tensor, axis: int) -> torch.Tensor:
    """Hand-computed masked softmax in float64 along ``axis`` (numpy exp/sum; a dead slice gives 0)."""
    import numpy as np

    x = e.double().numpy()
    ok = allowed.expand(e.shape).numpy()
    filled = np.where(ok, x, -np.inf)
    with np.errstate(invalid="ignore"):  # a dead slice: -inf - (-inf)
        ex = np.where(ok, np.exp(filled - filled.max(axis, keepdims=True)), 0.0)
    total = ex.sum(axis, keepdims=True)
    return torch.from_numpy(np.divide(ex, total, out=np.zeros_like(ex), where=total > 0))


def test_alignment_axis_normalises_over_positions_for_every_feature():
    """``dim=-2`` (multi-dimensional attention, Eq. 32) against a numpy oracle, a mask shared by the
    features, a dead query row, and sparsemax along the axis against the ``entmax`` package."""
    import entmax

    g = torch.Generator().manual_seed(3)
    e = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64) * 3  # (B, n_q, n_f, d_v)
    mask = torch.rand(2, 3, 5, 1, generator=g) > 0.3
    mask[0, 1] = False  # query 1 of example 0 may attend to nothing
    e = e.masked_fill(~mask, float("nan"))  # masked scores are inert
    a = at.align_scores(e, mask, dim=-2)
    torch.testing.assert_close(a, _softmax_oracle(e, mask, axis=-2), rtol=1e-12, atol=1e-12)
    assert (a[0, 1] == 0).all()
    plain = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)
    torch.testing.assert_close(at.align_scores(plain, None, "sparsemax", dim=2), entmax.sparsemax(plain, dim=2))
    hook = lambda s, m: torch.softmax(s, -1)  # a callable hook sees the axis moved last
    torch.testing.assert_close(
        at.align_scores(plain, None, hook, dim=-2), _softmax_oracle(plain, torch.ones((), dtype=torch.bool), -2)
    )
    with pytest.raises(ValueError, match="dim=4 is out of range"):
        at.align_scores(plain, None, dim=4)


def test_log_weights_are_exact_and_masked_positions_get_the_dtype_minimum():
    e = torch.tensor([[0.0, -1000.0, 2.0, float("nan")], [1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False], [False, False, False, False]])
    logp = at.align_scores(e, mask, log=True)
    # hand computation: log softmax over the three allowed scores of row 0
    lse = 2.0 + math.log(math.exp(-2.0) + math.exp(-1002.0) + 1.0)
    torch.testing.assert_close(logp[0, :3], torch.tensor([0.0, -1000.0, 2.0], dtype=torch.float64) - lse)
    low = torch.finfo(torch.float64).min
    assert logp[0, 3] == low and (logp[1] == low).all()  # masked, and a fully-masked row
    torch.testing.assert_close(
        at.align_scores(e[1:], None, log=True).exp(), _softmax_oracle(e[1:], mask[1:] | True, -1)
    )
    with pytest.raises(ValueError, match="softmax alignment only"):
        at.align_scores(e, mask, "sparsemax", log=True)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, -2.0, 3.0], True),
        ([], True),  # nothing non-finite in an empty tensor
        ([1.0, math.nan], False),
        ([math.inf, 1.0], False),
        ([-math.inf, 1.0], False),
        ([math.inf, -math.inf], False),  # sums to NaN
        ([3.0e38, 3.0e38, -1.0], True),  # finite entries whose float32 sum overflows: the exact test decides
    ],
)
def test_all_finite_against_elementwise_isfinite(values, expected):
    X = torch.tensor(values, dtype=torch.float32)
    assert bool(torch.isfinite(X).all()) is expected  # the oracle agrees with the table
    assert mk.all_finite(X) is expected
    assert mk.all_finite(X.to(torch.float16)) is bool(torch.isfinite(X.to(torch.float16)).all())


def test_all_finite_and_nonfinite_rows_on_an_overlapping_view():
    """Local attention's unfolded windows: the test runs on the view, and finds a NaN in it."""
    K = torch.randn(64, 8)
    windows = torch.nn.functional.pad(K, (0, 0, 4, 4)).unfold(-2, 9, 1)  # (64, 8, 9), overlapping
    assert mk.all_finite(windows)
    K[10, 3] = math.nan
    windows = torch.nn.functional.pad(K, (0, 0, 4, 4)).unfold(-2, 9, 1)
    assert not mk.all_finite(windows)
    bad = mk.nonfinite_rows(windows.transpose(-1, -2))  # rows (key slots) holding the NaN: the windows that see key 10
    assert bad is not None and bad.sum() == 9 and bool(bad[10, 4]) and bool(bad[6, 8]) and bool(bad[14, 0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_masked_mean_accumulates_half_precision_in_float32(dtype):
    """Review 2, C: 1000 values of 70 sum to 70000 > float16's max 65504, so the masked mean was inf."""
    X = torch.full((1, 1000, 2), 70.0, dtype=dtype)
    keep = torch.ones(1, 1000, dtype=torch.bool)
    keep[0, -1] = False
    X[0, -1] = float("nan")
    out = mk.masked_mean(X, keep)
    assert out.dtype == dtype and torch.equal(out, torch.full((1, 2), 70.0, dtype=dtype))  # the mean of 999 70s
    Xh = torch.randn(3, 7, 2, generator=torch.Generator().manual_seed(1)).to(dtype)
    keep = torch.rand(3, 7, generator=torch.Generator().manual_seed(0)) > 0.3
    X64 = Xh.double()  # torch's float64 mean of the same half values as the oracle
    want = torch.stack([X64[b][keep[b]].mean(0) if keep[b].any() else torch.zeros(2) for b in range(3)])
    torch.testing.assert_close(mk.masked_mean(Xh, keep), want.to(dtype))


def test_zero_masked_and_zero_unattended_use_only_masks_that_line_up():
    """Non-finite rows that no query may attend become 0; a mask whose axes do not line up with X leaves X as it is."""
    X = rand(2, 4, 3, dtype=D64)
    X[0, 3] = float("nan")
    X[1, 1] = float("inf")
    real = torch.tensor([[True, True, False, False], [True, False, True, True]])  # X[0, 2]: masked but finite
    Z = mk.zero_masked(X, real)
    assert torch.equal(Z[0, :3], X[0, :3]) and torch.equal(Z[1, [0, 2, 3]], X[1, [0, 2, 3]])  # finite rows kept
    assert torch.all(Z[0, 3] == 0) and torch.all(Z[1, 1] == 0)
    finite = rand(2, 4, 3, dtype=D64)
    assert torch.equal(mk.zero_masked(finite, real), finite)  # finite X: the same values (bit-identical results)
    assert mk.zero_masked(X, torch.ones(4, 4, dtype=torch.bool)) is X  # a (4, 4) key mask cannot fit batch 2
    torch.testing.assert_close(mk.zero_unattended(X, None, real[:, None, :].expand(2, 4, 4)), Z)
    assert mk.zero_unattended(X, None, torch.ones(4, 4, dtype=torch.bool)) is X  # shared (n_q, n_f): not used
    X4 = rand(4, 4, 3, dtype=D64)  # batch 4 = n 4: a shared (4, 4) causal mask would fit as a key mask by shape
    X4[0, 3] = float("nan")
    assert mk.zero_unattended(X4, None, mk.causal_mask(4)) is X4


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bit pattern of a float tensor (NaN compares equal to the same NaN)."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(ints)


@pytest.mark.catalog("eq4")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shared", [True, False])
def test_masking_outside_autograd_gives_the_bits_of_the_autograd_path(dtype, shared):
    """Without autograd the core zeroes masked inputs by integer products of their bits, elsewhere by
    ``torch.where``: the contexts must be the same bits, NaN/Inf at masked slots included."""
    g = torch.Generator().manual_seed(3)
    Q, K, V = (torch.randn(3, 2, 5, 4, generator=g).to(dtype) for _ in range(3))
    K[0, :, 4], V[0, :, 4], Q[2] = float("nan"), float("inf"), float("nan")  # a masked key; a dead batch item
    K[1, 0, 2, 1] = -float("inf")  # an allowed key: its queries get NaN on both paths
    lengths = torch.tensor([4, 5, 0])
    allowed = torch.arange(5) < lengths[:, None, None, None]  # (3, 1, 1, 5)
    if not shared:
        allowed = allowed & torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        c_bits, _ = at.attend(Q, K, V, allowed, need_weights=False)
    Qg, Kg, Vg = (t.clone().requires_grad_() for t in (Q, K, V))
    c_where, _ = at.attend(Qg, Kg, Vg, allowed, need_weights=False)
    assert torch.equal(_bits(c_bits), _bits(c_where.detach()))
    assert torch.isnan(c_bits[1, 0]).any() and torch.equal(c_bits[2], torch.zeros_like(c_bits[2]))


@pytest.mark.catalog("eq4")
@pytest.mark.parametrize("need", [True, False])
def test_huge_finite_values_are_not_mistaken_for_non_finite_ones(need):
    """A row of 3e38's sums to inf in float32; with a per-query mask the core must still return SDPA's finite
    context, not NaN."""
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, 3, 4, generator=g) for _ in range(3))
    V[0, 1] = 3.0e38
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)[None]
    c, _ = at.attend(Q, K, V, mask, need_weights=need)
    ref = F_.scaled_dot_product_attention(Q[:, None], K[:, None], V[:, None], attn_mask=mask[:, None])[:, 0]
    assert torch.isfinite(c).all()
    torch.testing.assert_close(c, ref, rtol=1e-5, atol=0)


@given(st.lists(st.sampled_from([0.0, -1.5, 2.0, 3.0e38, -3.0e38, math.inf, -math.inf, math.nan]), max_size=6))
@settings(max_examples=60, deadline=None)
def test_finite_rows_against_elementwise_isfinite(row):
    X = torch.tensor(row, dtype=torch.float32).reshape(1, len(row)).expand(2, len(row))
    for dtype in (torch.float32, torch.float16, torch.float64):
        assert torch.equal(mk.finite_rows(X.to(dtype)), torch.isfinite(X.to(dtype)).all(-1))
