"""Tests for §3.2.2, attention alignment: Eq. (24)-(29), REINFORCE, reinforced alignment,
sparsemax and entmax-1.5."""

from __future__ import annotations

import math

import entmax
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from attnsurvey.data.position_lookup import lookup_batch, lookup_batches
from attnsurvey.experiments.general_mechanisms import AlignmentClassifier, classifier_loss
from attnsurvey.general_mechanisms import alignment as al
from attnsurvey.training import accuracy, seed_everything, train

from .helpers import rand

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread avoids oversubscription


# ----------------------------------------------------------------------------- Eq. (24)
@pytest.mark.catalog("eq24")
def test_eq24_context_hand_computed():
    a = torch.tensor([0.5, 0.25, 0.25, 0.0])
    V = torch.tensor([[1.0, 0.0], [0.0, 4.0], [2.0, 2.0], [100.0, 100.0]])
    torch.testing.assert_close(al.context_vector(a, V), torch.tensor([1.0, 1.5]))
    # batched, and weights that do not sum to 1 (allowed: Eq. 29, structured attention)
    a2 = torch.stack([a, 2 * a])
    torch.testing.assert_close(al.context_vector(a2, V.expand(2, 4, 2)), torch.tensor([[1.0, 1.5], [2.0, 3.0]]))
    # many queries per example, like general_model.context
    A = rand(3, 2, 4).softmax(-1)
    Vb = rand(3, 4, 5, seed=1)
    loop = torch.stack(
        [torch.stack([sum(A[b, i, l] * Vb[b, l] for l in range(4)) for i in range(2)]) for b in range(3)]
    )
    torch.testing.assert_close(al.context_vector(A, Vb), loop)


@pytest.mark.catalog("eq24")
def test_eq24_rejects_mismatched_n_f():
    with pytest.raises(ValueError, match=r"context \(Eq. 24\) needs n_f of a == n_f of V, got n_f of a=3, n_f of V=4"):
        al.context_vector(torch.ones(3) / 3, torch.ones(4, 2))
    with pytest.raises(ValueError, match=r"V must have shape \(\.\.\., n_f, d_v\)"):
        al.context_vector(torch.ones(3), torch.ones(3))


# ----------------------------------------------------------------------------- Eq. (25)
@pytest.mark.catalog("eq25")
def test_eq25_soft_align_hand_computed():
    e = torch.tensor([0.0, math.log(2.0), math.log(5.0)])
    torch.testing.assert_close(al.soft_align(e), torch.tensor([1 / 8, 2 / 8, 5 / 8]))
    mask = torch.tensor([True, False, True])
    torch.testing.assert_close(al.soft_align(e, mask), torch.tensor([1 / 6, 0.0, 5 / 6]))


@pytest.mark.catalog("eq25")
@settings(max_examples=30, deadline=None)
@given(n_f=st.integers(1, 9), scale=st.floats(0.01, 1e4), seed=st.integers(0, 10_000))
def test_eq25_weights_on_simplex(n_f, scale, seed):
    e = rand(3, n_f, seed=seed) * scale
    for a in (al.soft_align(e), al.sparsemax(e), al.entmax15(e)):
        assert torch.all(a >= 0) and torch.isfinite(a).all()
        torch.testing.assert_close(a.sum(-1), torch.ones(3), atol=1e-5, rtol=0)


@pytest.mark.catalog("eq25")
def test_eq25_large_scores_and_masked_rows():
    e = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]])
    torch.testing.assert_close(al.soft_align(e), torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]))
    mask = torch.tensor([[False, False, False], [True, True, True]])
    a = al.soft_align(e, mask)
    assert torch.equal(a[0], torch.zeros(3))
    with pytest.raises(ValueError, match="e is empty: n_f=0"):
        al.soft_align(torch.zeros(2, 0))
    with pytest.raises(ValueError, match=r"mask must be a boolean tensor \(True = may attend\), got dtype="):
        al.soft_align(e, mask.float())


# ----------------------------------------------------------------------------- Eq. (26)
@pytest.mark.catalog("eq26")
def test_eq26_argmax_picks_largest_value_row():
    e = torch.tensor([[0.1, 3.0, -1.0, 3.0], [5.0, 0.0, 0.0, 0.0]])
    V = torch.arange(8.0).reshape(4, 2)
    c, h = al.hard_attend(e, V, mode="argmax")
    assert h.m.tolist() == [1, 0]  # first maximum on ties
    torch.testing.assert_close(c, torch.stack([V[1], V[0]]))
    torch.testing.assert_close(h.a, torch.tensor([[0.0, 1, 0, 0], [1.0, 0, 0, 0]]))
    torch.testing.assert_close(h.log_prob, torch.log_softmax(e, -1)[[0, 1], [1, 0]])
    # large scores keep log_prob finite
    _, h = al.hard_attend(torch.tensor([1e4, -1e4, 0.0]), V[:3], mode="argmax")
    assert torch.isfinite(h.log_prob).all() and h.m.item() == 0


@pytest.mark.catalog("eq26")
def test_eq26_sample_frequencies_match_weights():
    e = torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5])
    N = 20_000
    g = torch.Generator().manual_seed(0)
    h = al.hard_align(e.expand(N, 5), mode="sample", generator=g)
    counts = torch.bincount(h.m, minlength=5).double()
    a = torch.softmax(e.double(), -1)
    # per-cell 4.5-sigma bound and a chi-square goodness of fit (fixed seed)
    sd = torch.sqrt(a * (1 - a) / N)
    assert torch.all((counts / N - a).abs() < 4.5 * sd)
    assert stats.chisquare(counts.numpy(), (N * a).numpy()).pvalue > 1e-3
    # the same generator seed gives the same draws
    h2 = al.hard_align(e.expand(N, 5), mode="sample", generator=torch.Generator().manual_seed(0))
    assert torch.equal(h.m, h2.m)


@pytest.mark.catalog("eq26")
def test_eq26_masked_positions_never_sampled():
    e = torch.zeros(2000, 4)
    mask = torch.tensor([True, False, True, False])
    V = rand(4, 3)
    c, h = al.hard_attend(e, V, "sample", torch.Generator().manual_seed(1), mask)
    assert set(h.m.tolist()) == {0, 2}
    full = torch.zeros(3, 4, dtype=torch.bool)
    c, h = al.hard_attend(torch.zeros(3, 4), V, "sample", torch.Generator().manual_seed(1), full)
    assert torch.equal(c, torch.zeros(3, 3)) and torch.equal(h.a, torch.zeros(3, 4))
    assert h.m.tolist() == [-1, -1, -1] and torch.equal(h.log_prob, torch.zeros(3))


@pytest.mark.catalog("eq26")
def test_eq26_bad_inputs():
    with pytest.raises(ValueError, match="mode must be 'sample' or 'argmax'"):
        al.hard_align(torch.zeros(3), mode="max")
    with pytest.raises(
        ValueError, match=r"hard attention \(Eq. 26\) needs n_f of e == n_f of V, got n_f of e=3, n_f of V=4"
    ):
        al.hard_attend(torch.zeros(3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="e is empty"):
        al.hard_align(torch.zeros(0))
    with pytest.raises(ValueError, match="floating-point"):
        al.hard_align(torch.zeros(3, dtype=torch.long))


# ----------------------------------------------------------------------------- REINFORCE
E_SMALL = torch.tensor([0.5, -1.0, 1.5, 0.0], dtype=torch.float64)
L_SMALL = torch.tensor([1.0, 3.0, -2.0, 0.5], dtype=torch.float64) + 10.0  # offset: baselines matter


def _exact_grad():
    e = E_SMALL.clone().requires_grad_(True)
    (torch.softmax(e, -1) * L_SMALL).sum().backward()  # d/de E_{m~a}[L_m], by enumeration
    return e.grad


def _estimate(baseline, N=20_000, seed=0):
    e = E_SMALL.clone().requires_grad_(True)
    h = al.hard_align(e.expand(N, 4), "sample", torch.Generator().manual_seed(seed))
    al.score_function_surrogate(h.log_prob, L_SMALL[h.m], baseline).backward()
    samples = al.reinforce_gradient_samples(E_SMALL, L_SMALL, h.m, baseline)
    return e.grad, samples


@pytest.mark.catalog("extra:reinforce-estimator")
@pytest.mark.parametrize("baseline", [0.0, "expected"])
def test_reinforce_estimator_is_unbiased(baseline):
    exact = _exact_grad()
    b = float((torch.softmax(E_SMALL, -1) * L_SMALL).sum()) if baseline == "expected" else baseline
    grad, samples = _estimate(b)
    # autograd through the surrogate == the closed form (L_m - b)(onehot(m) - a), averaged
    torch.testing.assert_close(grad, samples.mean(0), rtol=1e-9, atol=1e-12)
    se = samples.std(0) / math.sqrt(samples.shape[0])
    assert torch.all((grad - exact).abs() < 4.5 * se), (grad, exact, se)
    # and not trivially: the exact gradient is far from zero
    assert exact.abs().max() > 0.5


@pytest.mark.catalog("extra:reinforce-estimator")
def test_baseline_reduces_variance():
    b_star = float((torch.softmax(E_SMALL, -1) * L_SMALL).sum())
    _, s0 = _estimate(0.0)
    _, sb = _estimate(b_star)
    assert sb.var(0).sum() < 0.05 * s0.var(0).sum()
    base = al.MovingAverageBaseline(momentum=0.5)
    assert float(base.update(torch.tensor([2.0, 4.0]))) == 3.0  # first call: the batch mean
    assert float(base.update(torch.tensor([5.0]))) == 3.0  # returned before the update
    assert math.isclose(float(base.value), 4.0)
    with pytest.raises(ValueError, match="momentum"):
        al.MovingAverageBaseline(1.0)
    with pytest.raises(ValueError, match="log_prob and loss need the same shape"):
        al.score_function_surrogate(torch.zeros(3), torch.zeros(4))


@pytest.mark.catalog("extra:reinforce-estimator")
def test_hard_attention_trains_with_reinforce():
    g = seed_everything(0)
    n_f, C = 6, 4
    model = AlignmentClassifier(n_f, C + n_f, C, "hard", d_k=8)
    score_w0 = model.score.W.weight.detach().clone()
    train(model, lambda m, b: classifier_loss(m, b, g), lookup_batches(80, 64, n_f, C, g), lr=3e-2)
    F, q, t, y = lookup_batch(500, n_f, C, torch.Generator().manual_seed(9))
    with torch.no_grad():
        logits, a, _ = model(q, F)
    assert not torch.equal(model.score.W.weight, score_w0)  # scores learned only via REINFORCE
    assert accuracy(logits, y) > 0.9
    assert float(a.gather(-1, t[:, None]).mean()) > 0.9


# ----------------------------------------------------------------------------- Eq. (27)
@pytest.mark.catalog("eq27")
def test_eq27_window_clipped_at_ends():
    assert al.window_mask(8, 0.0, 2).tolist() == [True, True, True] + [False] * 5
    assert al.window_mask(8, 7.0, 2).tolist() == [False] * 5 + [True] * 3
    # a fractional p: the 2D+1 positions around round(p), as in the original local attention
    assert al.window_mask(8, 3.5, 1).tolist() == [False, False, False, True, True, True, False, False]
    assert al.window_mask(8, 3.4, 1).tolist() == [False, False, True, True, True, False, False, False]
    assert al.window_mask(8, 3.4, 1.7).tolist() == al.window_mask(8, 3.0, 1).tolist()
    assert al.window_mask(5, torch.tensor([0.0, 4.0]), 10).all()
    # clipped, not shifted: at the start the softmax runs over the 3 surviving positions only
    e = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    a = al.local_align(e, 0.0, 2, gaussian=False)
    torch.testing.assert_close(a, torch.cat([torch.softmax(e[:3], -1), torch.zeros(3)]))


@pytest.mark.catalog("eq27")
def test_eq27_matches_softmax_over_window_slice():
    e = rand(10, seed=3)
    a = al.local_align(e, 4.0, 2, gaussian=False)
    expect = torch.zeros(10)
    expect[2:7] = torch.exp(e[2:7]) / torch.exp(e[2:7]).sum()  # Eq. (27) by hand
    torch.testing.assert_close(a, expect)
    # batched positions, one per row; monotonic p = t
    E = rand(3, 10, seed=4)
    p = al.monotonic_position(torch.tensor([0, 5, 9]), 10)
    A = al.local_align(E, p, 1, gaussian=False)
    for row, (lo, hi) in enumerate([(0, 2), (4, 7), (8, 10)]):
        torch.testing.assert_close(A[row, lo:hi], torch.softmax(E[row, lo:hi], -1))
    # the module: monotonic and predictive modes
    la = al.LocalAttention(4, 4, D=1, mode="monotonic")
    c, a, p = la(rand(3, 4), rand(3, 10, 4, seed=1), rand(3, 10, 2, seed=2), t=torch.tensor([0, 5, 9]))
    assert c.shape == (3, 2) and a.shape == (3, 10) and p.tolist() == [0.0, 5.0, 9.0]
    lp = al.LocalAttention(4, 4, D=2, mode="predictive")
    c, a, p = lp(rand(3, 4), rand(3, 10, 4, seed=1), rand(3, 10, 2, seed=2))
    assert torch.all((p > 0) & (p < 9)) and c.shape == (3, 2)
    # the module's weights and context are Eq. (27) (and Eq. 29 when gaussian) by hand, on its own score and p
    q, K, V = rand(3, 4, seed=5), rand(3, 10, 4, seed=6), rand(3, 10, 2, seed=7)
    for mode, gaussian, renormalise in [
        ("monotonic", False, False),
        ("monotonic", True, False),
        ("predictive", False, False),
        ("predictive", True, False),
        ("predictive", True, True),
    ]:
        torch.manual_seed(0)
        m = al.LocalAttention(4, 4, D=2, mode=mode, gaussian=gaussian, renormalise=renormalise)
        t = torch.tensor([0, 5, 9]) if mode == "monotonic" else None
        with torch.no_grad():
            c, a, p = m(q, K, V, t=t)
        for row in range(3):
            a_ref = _local_weights_by_hand(
                q[row], K[row], m.score.W.weight.detach(), float(p[row]), 2.0, gaussian, renormalise
            )
            torch.testing.assert_close(a[row], a_ref, msg=f"{mode} gaussian={gaussian} renormalise={renormalise}")
            c_ref = sum(float(a_ref[l]) * V[row, l] for l in range(10))
            torch.testing.assert_close(c[row], c_ref)


def test_local_m_is_the_bare_window_and_only_local_p_gets_the_gaussian():
    """Luong et al. (2015) use the Gaussian of Eq. (29) for the predicted centre (local-p) only; local-m
    is the window softmax of Eq. (27). With uniform scores over a full window of 2D + 1 positions,
    local-m gives 1/(2D + 1) at every window position (summing to 1); the Gaussian would lower the
    weights away from p and make them sum to about 0.5 for D = 2."""
    n_f, D, B = 12, 2, 3
    t = torch.tensor([5, 2, 9])
    window = torch.zeros(B, n_f)
    for row, c in enumerate(t.tolist()):
        window[row, c - D : c + D + 1] = 1.0 / (2 * D + 1)
    # the experiment's model: zero score weights give uniform scores
    for kind in ("local-m", "local-p"):
        model = AlignmentClassifier(6, 8, 3, kind, d_k=4, D=D)
        with torch.no_grad():
            model.score.W.weight.zero_()
            _, a, _ = model(rand(B, 6, seed=1), rand(B, n_f, 8, seed=2), t)
        if kind == "local-m":
            torch.testing.assert_close(a, window)
        else:  # the Gaussian factor (at most 1, below 1 away from p) is applied, not renormalised
            assert torch.all(a.sum(-1) < 0.6)
    # the module: the default follows the mode, an explicit choice is honoured
    for mode, gaussian, expect in [
        ("monotonic", None, False),
        ("predictive", None, True),
        ("monotonic", True, True),
        ("predictive", False, False),
    ]:
        m = al.LocalAttention(4, 4, D=D, mode=mode, gaussian=gaussian)
        assert m.gaussian is expect, (mode, gaussian)
    m = al.LocalAttention(4, 4, D=D, mode="monotonic")
    with torch.no_grad():
        m.score.W.weight.zero_()
        _, a, _ = m(rand(B, 4, seed=3), rand(B, n_f, 4, seed=4), rand(B, n_f, 2, seed=5), t=t)
    torch.testing.assert_close(a, window)
    torch.testing.assert_close(a.sum(-1), torch.ones(B))


def _local_weights_by_hand(q, K, W, p, D, gaussian, renormalise):
    """Independent oracle for one query: general score k_l^T W q, softmax over the positions l with
    |l - round(p)| <= D (Eq. 27), times exp(-(l - p)^2 / (2 (D/2)^2)) if gaussian (Eq. 29)."""
    n_f = K.shape[0]
    centre = math.floor(p + 0.5)
    window = [l for l in range(n_f) if abs(l - centre) <= D]
    e = {l: float(K[l] @ W @ q) for l in window}
    z = sum(math.exp(e[l]) for l in window)
    a = [0.0] * n_f
    for l in window:
        a[l] = math.exp(e[l]) / z * (math.exp(-((l - p) ** 2) / (2 * (D / 2) ** 2)) if gaussian else 1.0)
    total = sum(a)
    return torch.tensor([x / total for x in a] if renormalise else a)


@pytest.mark.catalog("eq27")
@settings(max_examples=40, deadline=None)
@given(
    n_f=st.integers(1, 12),
    frac=st.floats(0, 1),
    D=st.floats(0, 5),
    seed=st.integers(0, 1000),
    keep=st.none() | st.lists(st.booleans(), min_size=12, max_size=12),
)
@example(n_f=8, frac=0.0625, D=0.0625, seed=0, keep=None)  # the Gaussian's sum is subnormal (found by hypothesis)
@example(n_f=8, frac=3 / 7, D=1.0, seed=0, keep=[True] * 3 + [False] + [True] * 8)  # round(p) = 3 masked
@example(n_f=8, frac=3 / 7, D=1.0, seed=0, keep=[True] * 2 + [False] * 3 + [True] * 7)  # nothing allowed in the window
def test_eq27_zero_outside_window(n_f, frac, D, seed, keep):
    p = frac * (n_f - 1)
    e = rand(n_f, seed=seed) * 10
    mask = None if keep is None else torch.tensor(keep[:n_f])
    pos = torch.arange(n_f, dtype=torch.float32)
    outside = (pos - math.floor(p + 0.5)).abs() > D
    inside = ~outside if mask is None else ~outside & mask  # the window's positions that may be attended
    # Eq. (27) by hand: the softmax of the scores over the allowed positions of the window, 0 elsewhere
    want = torch.zeros(n_f, dtype=torch.float64)
    if inside.any():
        x = e.double()[inside]
        want[inside] = torch.exp(x - x.max()) / torch.exp(x - x.max()).sum()
    for gaussian in (False, True):
        a = al.local_align(e, p, D, mask, gaussian=gaussian)
        if mask is not None:  # masked scores are inert: NaN there changes nothing
            torch.testing.assert_close(
                al.local_align(e.masked_fill(~mask, float("nan")), p, D, mask, gaussian=gaussian), a
            )
        assert torch.all(a[~inside] == 0) and torch.all(a >= 0)  # outside the window, or masked: 0
        assert float(a.sum()) <= 1 + 1e-5
        if not gaussian:
            torch.testing.assert_close(a.double(), want, rtol=1e-5, atol=1e-6)
        r = al.local_align(e, p, D, mask, gaussian=gaussian, renormalise=True)
        assert torch.all(r[~inside] == 0)
        total = float(r.sum())
        # only a window with no allowed position, or a Gaussian factor that underflows at every allowed
        # position of it (tiny sigma = D/2, fractional p), leaves nothing to renormalise
        g = al.gaussian_emphasis(n_f, p, D / 2) if gaussian else torch.ones(n_f)
        nothing = not bool((g[inside] > 0).any())
        assert math.isclose(total, 1.0, abs_tol=1e-5) or (nothing and total == 0.0)


@pytest.mark.catalog("eq29")
def test_eq29_renormalise_survives_a_subnormal_sum():
    # p = 0.4375, sigma = D / 2 = 0.03125: the one position in the window gets exp(-98) ~ 2.7e-43 (subnormal
    # in float32); renormalising must still give it weight 1 (dividing by finfo.tiny instead gave 2.3e-5)
    e = rand(8, seed=0) * 10
    r = al.local_align(e, 0.4375, 0.0625, gaussian=True, renormalise=True)
    assert r[0] == 1.0 and torch.all(r[1:] == 0)
    # window {1, 2, 3} around round(1.5) = 2; l = 1 and 2 get exp(-91.3) ~ 2e-40 each (subnormal), l = 3 gets 0
    e2 = torch.zeros(4)
    r2 = al.local_align(e2, 1.5, 1.0, gaussian=True, sigma=0.037, renormalise=True)
    assert math.isclose(float(r2.sum()), 1.0, abs_tol=1e-6) and torch.allclose(r2[1:3], torch.tensor([0.5, 0.5]))


@pytest.mark.catalog("eq27")
def test_eq27_empty_window_gives_zero_weights():
    e = torch.tensor([1e4, -1e4, 3.0, 0.0])
    assert torch.equal(
        al.local_align(e, 1.5, 0.0, gaussian=False), torch.tensor([0.0, 0.0, 1.0, 0.0])
    )  # round(1.5) = 2
    mask = torch.tensor([True, False, False, True])
    a = al.local_align(e, 1.5, 0.5, mask=mask)  # window {2}, masked
    assert torch.equal(a, torch.zeros(4))
    V = rand(4, 3)
    assert torch.equal(al.context_vector(a, V), torch.zeros(3))
    a = al.local_align(e, 1.0, 1.0)  # window {0, 1, 2} with +-1e4 scores
    assert torch.isfinite(a).all() and math.isclose(float(a[0]), math.exp(-0.5 * 1 / 0.25), rel_tol=1e-5)
    assert torch.equal(al.local_align(e, 3.0, 0.0), torch.tensor([0.0, 0.0, 0.0, 1.0]))  # D = 0: one position


@pytest.mark.catalog("eq27")
def test_eq27_python_float_position_keeps_the_scores_precision():
    # a Python float p used to become float32 inside, so 0.3 - 0.3 > 0 and the window was empty
    for dtype in (torch.float32, torch.float64):
        e = torch.zeros(4, dtype=dtype)
        a = al.local_align(e, 0.3, 0.3, gaussian=False)
        assert torch.equal(a, torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=dtype))
        assert al.local_align(e, 0.3, 0.3).dtype == dtype


@pytest.mark.catalog("eq27")
def test_eq27_bad_inputs():
    e = torch.zeros(2, 6)
    with pytest.raises(ValueError, match="window half-width D must be a finite number >= 0, got D=-1"):
        al.local_align(e, 2.0, -1)
    with pytest.raises(ValueError, match=r"position p must lie inside the sequence, \[0, n_f - 1\] = \[0, 5\]"):
        al.local_align(e, 6.5, 1)
    with pytest.raises(ValueError, match="position p must lie inside"):
        al.local_align(e, torch.tensor([1.0, -0.5]), 1)
    with pytest.raises(
        ValueError, match=r"p of shape \(3,\) must broadcast to the scores' batch shape e.shape\[:-1\] = \(2,\)"
    ):
        al.local_align(e, torch.tensor([1.0, 2.0, 3.0]), 1)
    with pytest.raises(ValueError, match="e is empty: n_f=0"):
        al.local_align(torch.zeros(2, 0), 0.0, 1)
    with pytest.raises(ValueError, match="position p = t must lie inside"):
        al.monotonic_position(7, 6)
    with pytest.raises(ValueError, match="must be finite"):
        al.window_mask(6, float("nan"), 1)
    with pytest.raises(ValueError, match="needs the output step t"):
        al.LocalAttention(4, 4, D=1, mode="monotonic")(rand(4), rand(6, 4), rand(6, 2))


# ----------------------------------------------------------------------------- Eq. (28)
@pytest.mark.catalog("eq28")
def test_eq28_predictive_position_hand_computed():
    q = torch.tensor([1.0, -2.0])
    W_p = torch.tensor([[0.5, 0.0], [0.25, 0.5], [1.0, 1.0]])
    w_p = torch.tensor([1.0, -1.0, 2.0])
    h = [math.tanh(0.5), math.tanh(0.25 - 1.0), math.tanh(1.0 - 2.0)]
    expect = 9.0 / (1.0 + math.exp(-(h[0] - h[1] + 2 * h[2])))
    assert math.isclose(float(al.predictive_position(q, W_p, w_p, 9.0)), expect, rel_tol=1e-6)
    mod = al.PredictivePosition(2, 3)
    with torch.no_grad():
        mod.W_p.weight.copy_(W_p)
        mod.w_p.copy_(w_p)
    with torch.no_grad():
        assert math.isclose(float(mod(q, 10)), expect, rel_tol=1e-6)  # S = n_f - 1 = 9
        p = mod(rand(50, 2) * 100, 10)
    assert torch.all((p >= 0) & (p <= 9))


@pytest.mark.catalog("eq28")
def test_eq28_bad_shapes():
    with pytest.raises(ValueError, match=r"W_p must have shape \(d_p, d_q\) with d_q=2, got \(3, 4\)"):
        al.predictive_position(torch.zeros(2), torch.zeros(3, 4), torch.zeros(3), 5.0)
    with pytest.raises(ValueError, match=r"w_p must have shape \(d_p,\) = \(3,\), got \(4,\)"):
        al.predictive_position(torch.zeros(2), torch.zeros(3, 2), torch.zeros(4), 5.0)
    with pytest.raises(ValueError, match="S"):
        al.predictive_position(torch.zeros(2), torch.zeros(3, 2), torch.zeros(3), -1.0)


# ----------------------------------------------------------------------------- Eq. (29)
@pytest.mark.catalog("eq29")
def test_eq29_gaussian_factor_not_renormalised():
    e = torch.zeros(9)
    a = al.local_align(e, 4.0, 2.0)  # sigma = D / 2 = 1, window {2..6}, uniform softmax 1/5
    g = [math.exp(-2), math.exp(-0.5), 1.0, math.exp(-0.5), math.exp(-2)]
    expect = torch.tensor([0, 0] + [x / 5 for x in g] + [0, 0])
    torch.testing.assert_close(a, expect)
    assert float(a.sum()) < 0.6  # the survey's Eq. (29) leaves the weights unnormalised
    torch.testing.assert_close(al.gaussian_emphasis(9, 4.0, 1.0)[2:7], torch.tensor(g))
    assert torch.equal(al.gaussian_emphasis(5, 2.0, 0.0), torch.tensor([0.0, 0, 1, 0, 0]))
    with pytest.raises(ValueError, match="sigma must be"):
        al.gaussian_emphasis(5, 2.0, -1.0)


@pytest.mark.catalog("eq29")
def test_eq29_renormalise_option():
    e = rand(9, seed=2)
    raw = al.local_align(e, 4.3, 2.0)
    r = al.local_align(e, 4.3, 2.0, renormalise=True)
    torch.testing.assert_close(r, raw / raw.sum())
    torch.testing.assert_close(r.sum(), torch.tensor(1.0))
    # an explicit sigma overrides D / 2
    wide = al.local_align(torch.zeros(9), 4.0, 2.0, sigma=1e6)
    torch.testing.assert_close(wide, al.local_align(torch.zeros(9), 4.0, 2.0, gaussian=False))


@pytest.mark.catalog("eq29")
def test_eq29_gradcheck_through_p():
    e = rand(9, seed=5, dtype=torch.float64).requires_grad_(True)
    p = torch.tensor(4.3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda e_, p_: al.local_align(e_, p_, 2.0), (e, p))
    q = rand(3, dtype=torch.float64).requires_grad_(True)
    W_p = rand(4, 3, seed=1, dtype=torch.float64).requires_grad_(True)
    w_p = rand(4, seed=2, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda *xs: al.predictive_position(*xs, 9.0), (q, W_p, w_p))


# ----------------------------------------------------------------------------- reinforced alignment
@pytest.mark.catalog("extra:reinforced-alignment")
def test_bernoulli_subset_log_prob_and_frequencies():
    logits = torch.tensor([2.0, -1.0, 0.0, -3.0])
    N = 20_000
    z, lp = al.bernoulli_subset(logits.expand(N, 4), torch.Generator().manual_seed(0))
    pi = torch.sigmoid(logits)
    freq = z.float().mean(0)
    assert torch.all((freq - pi).abs() < 4.5 * torch.sqrt(pi * (1 - pi) / N))
    manual = (z * torch.log(pi) + (~z) * torch.log(1 - pi)).sum(-1)
    torch.testing.assert_close(lp, manual)
    z, lp = al.bernoulli_subset(torch.tensor([1e4, -1e4]), greedy=True)
    assert z.tolist() == [True, False] and torch.isfinite(lp).all()
    z, _ = al.bernoulli_subset(
        torch.full((500, 3), 5.0), torch.Generator().manual_seed(0), torch.tensor([True, False, True])
    )
    assert not z[:, 1].any()


@pytest.mark.catalog("extra:reinforced-alignment")
def test_reinforced_align_is_softmax_over_subset():
    e = torch.tensor([0.0, math.log(3.0), 5.0, math.log(1.0)])
    z = torch.tensor([True, True, False, True])
    torch.testing.assert_close(al.reinforced_align(e, z), torch.tensor([0.2, 0.6, 0.0, 0.2]))
    assert torch.equal(al.reinforced_align(e, torch.zeros(4, dtype=torch.bool)), torch.zeros(4))
    with pytest.raises(ValueError, match=r"z \(selected subset\) must be a boolean tensor"):
        al.reinforced_align(e, z.float())
    with pytest.raises(ValueError, match=r"z \(selected subset\) of shape \(3,\) does not broadcast"):
        al.reinforced_align(e, z[:3])


@pytest.mark.catalog("extra:reinforced-alignment")
def test_reinforced_alignment_module_shapes():
    mod = al.ReinforcedAlignment(4, 4)
    q, K, V = rand(5, 4), rand(5, 7, 4, seed=1), rand(5, 7, 3, seed=2)
    c, a, z, lp = mod(q, K, V, torch.Generator().manual_seed(0))
    assert c.shape == (5, 3) and a.shape == (5, 7) and z.shape == (5, 7) and lp.shape == (5,)
    assert torch.all(a[~z] == 0)
    # the policy gets a gradient only through the surrogate
    al.score_function_surrogate(lp, torch.arange(5.0)).backward()
    assert mod.policy.W.weight.grad is not None and mod.policy.W.weight.grad.abs().sum() > 0
    mod.eval()
    _, _, z1, _ = mod(q, K, V)
    _, _, z2, _ = mod(q, K, V)
    assert torch.equal(z1, z2)  # greedy in eval mode


# ----------------------------------------------------------------------------- sparsemax, entmax-1.5
@pytest.mark.catalog("extra:sparsemax")
def test_sparsemax_matches_entmax_package():
    e = rand(40, 9, seed=7) * 3
    torch.testing.assert_close(al.sparsemax(e), entmax.sparsemax(e, dim=-1))
    torch.testing.assert_close(al.sparsemax(e, dim=0), entmax.sparsemax(e, dim=0))
    # hand computation: e = (1, 0.5, -1): support {1, 2}, tau = (1.5 - 1) / 2 = 0.25
    torch.testing.assert_close(al.sparsemax(torch.tensor([1.0, 0.5, -1.0])), torch.tensor([0.75, 0.25, 0.0]))
    # gradients agree with the package's hand-written backward
    x1 = e.clone().requires_grad_(True)
    x2 = e.clone().requires_grad_(True)
    w = rand(40, 9, seed=8)
    (al.sparsemax(x1) * w).sum().backward()
    (entmax.sparsemax(x2, dim=-1) * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)


@pytest.mark.catalog("extra:entmax15")
def test_entmax15_matches_entmax_package():
    e = rand(40, 9, seed=11) * 3
    torch.testing.assert_close(al.entmax15(e), entmax.entmax15(e, dim=-1))
    torch.testing.assert_close(al.entmax15(e, dim=0), entmax.entmax15(e, dim=0))
    x1 = e.clone().requires_grad_(True)
    x2 = e.clone().requires_grad_(True)
    w = rand(40, 9, seed=12)
    (al.entmax15(x1) * w).sum().backward()
    (entmax.entmax15(x2, dim=-1) * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    # two equal scores far above the rest: half each; sparser than softmax, denser than sparsemax
    x = torch.tensor([0.0, 0.0, -10.0])
    torch.testing.assert_close(al.entmax15(x), torch.tensor([0.5, 0.5, 0.0]))
    y = torch.tensor([1.0, 0.6, 0.1, -2.0])
    nz = [int((f(y) > 0).sum()) for f in (al.soft_align, al.entmax15, al.sparsemax)]
    assert nz[0] >= nz[1] >= nz[2] and nz[0] > nz[2]


@pytest.mark.catalog("extra:sparsemax")
def test_sparsemax_is_projection():
    for seed in range(3):
        e = rand(6, seed=seed).double().numpy() * 2
        res = optimize.minimize(
            lambda a, e=e: np.sum((a - e) ** 2),
            np.full(6, 1 / 6),
            jac=lambda a, e=e: 2 * (a - e),
            bounds=[(0, 1)] * 6,
            constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1}],
            method="SLSQP",
            options={"ftol": 1e-12},
        )
        np.testing.assert_allclose(al.sparsemax(torch.from_numpy(e)).numpy(), res.x, atol=1e-6)


@pytest.mark.catalog("extra:entmax15", "extra:sparsemax")
def test_sparse_maps_masks_and_extremes():
    e = torch.tensor([[1e4, -1e4, 1e4 - 0.5, 0.0], [3.0, 2.0, 1.0, 0.0]])
    mask = torch.tensor([[True, True, True, True], [False, False, False, False]])
    for f in (al.sparsemax, al.entmax15):
        a = f(e)
        assert torch.isfinite(a).all()
        assert a[0, 1] == 0 and a[0, 3] == 0 and a[0, 0] > a[0, 2] > 0
        am = f(e, mask)
        assert torch.equal(am[1], torch.zeros(4))  # fully masked row
        m2 = torch.tensor([False, True, True, True])
        torch.testing.assert_close(f(e[1], m2), torch.cat([torch.zeros(1), f(e[1, 1:])]))
        x = e.clone().requires_grad_(True)
        (f(x, mask) * rand(2, 4)).sum().backward()
        assert torch.isfinite(x.grad).all() and torch.equal(x.grad[1], torch.zeros(4))
        with pytest.raises(ValueError, match="e is empty"):
            f(torch.zeros(3, 0))
        with pytest.raises(ValueError, match="does not broadcast"):
            f(e, torch.ones(3, dtype=torch.bool))


@pytest.mark.catalog("extra:entmax15", "extra:sparsemax")
def test_sparse_maps_gradcheck():
    e = (rand(3, 6, seed=21, dtype=torch.float64) * 2).requires_grad_(True)
    assert torch.autograd.gradcheck(al.sparsemax, (e,))
    assert torch.autograd.gradcheck(al.entmax15, (e,))
    mask = torch.tensor([True, False, True, True, False, True])
    assert torch.autograd.gradcheck(lambda x: al.entmax15(x, mask), (e,))


@pytest.mark.catalog("extra:sparsemax")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sparse_maps_low_precision(dtype):
    e = rand(8, 10, seed=4) * 3
    for f in (al.sparsemax, al.entmax15, al.soft_align):
        lo = f(e.to(dtype))
        assert lo.dtype == dtype
        torch.testing.assert_close(lo.float(), f(e.to(dtype).float()), atol=1e-2, rtol=0)
    a = al.local_align(e.to(dtype), torch.full((8,), 4.0), 2.0)
    assert a.dtype == dtype and torch.isfinite(a).all()
    assert torch.all(a[:, :2] == 0) and torch.all(a[:, 7:] == 0)


# ----------------------------------------------------------------------------- diagnostics, experiment model
def test_entropy_and_concentration():
    a = torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(al.weight_entropy(a), torch.tensor([math.log(2), 0.0, 0.0]))
    torch.testing.assert_close(al.weight_entropy(torch.tensor([0.2, 0.2])), torch.tensor(math.log(2)))
    c = al.concentration(a[:2], torch.tensor([0, 1]))
    assert c["max_weight"] == 0.75 and c["nonzero"] == 1.5 and c["on_target"] == 0.25
    with pytest.raises(ValueError, match="unknown alignment"):
        AlignmentClassifier(4, 8, 3, "softest")


def test_hard_align_hook_through_the_core_picks_one_value_and_keeps_its_log_probability():
    """Eq. (26) as an alignment hook of attend_scores: c is the chosen value row, log_prob = log a_m
    by hand, masked positions are never chosen, and a fully-masked row gives a zero context."""
    from attnsurvey.attention import attend_scores

    e = torch.tensor([[1.0, 3.0, 2.0, 5.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    V = torch.arange(8, dtype=torch.float64).reshape(4, 2).expand(2, 4, 2)
    mask = torch.tensor([[True, True, True, False], [False, False, False, False]])
    hook = al.HardAlignHook("argmax")
    c, a = attend_scores(e, V, mask, align=hook)
    assert a.tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    assert c.tolist() == [[2.0, 3.0], [0.0, 0.0]]
    assert hook.last is not None
    by_hand = 3.0 - math.log(math.exp(1.0) + math.exp(3.0) + math.exp(2.0))
    assert hook.last.log_prob[0].item() == pytest.approx(by_hand, abs=1e-12)
    assert hook.last.m.tolist() == [1, -1]
    sampler = al.HardAlignHook("sample", torch.Generator().manual_seed(0))
    draws = torch.stack([attend_scores(e[:1], V[:1], mask[:1], align=sampler)[1] for _ in range(200)])
    assert draws[..., 3].sum() == 0 and (draws.sum(-1) == 1).all()


def test_bernoulli_subset_log_prob_ignores_a_nan_logit_at_a_masked_slot():
    """Review 2, A: ``(lp * valid).sum`` met the NaN of a masked logit (0 * NaN), so log_prob was NaN."""
    logits = torch.tensor([[0.3, -1.2, 2.0]], dtype=torch.float64)
    bad = torch.cat([logits, torch.full((1, 1), float("nan"), dtype=torch.float64)], -1)
    mask = torch.tensor([[True, True, True, False]])
    for greedy, gen in ((True, None), (False, lambda: torch.Generator().manual_seed(3))):
        z, lp = al.bernoulli_subset(bad, gen and gen(), mask, greedy=greedy)
        pi = torch.sigmoid(logits[0])
        want = sum(math.log(pi[i] if z[0, i] else 1 - pi[i]) for i in range(3))  # by hand, masked slot left out
        assert not z[0, -1]
        torch.testing.assert_close(lp, torch.tensor([want], dtype=torch.float64))


def test_bernoulli_subset_draws_on_the_logits_device():
    """Review 2, F: the uniform draws were always made on the CPU (a device mismatch for other devices)."""
    z, lp = al.bernoulli_subset(torch.empty(2, 4, device="meta"))
    assert z.device.type == lp.device.type == "meta"
