"""Tests for §4.2, intrinsic evaluation: Eq. (46), AER, supervised attention, rank
correlation and the attention-as-explanation tools."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from attnsurvey.data.evaluation_tasks import patch_image_task, toy_translation_task
from attnsurvey.evaluation import intrinsic as it
from attnsurvey.experiments.evaluation import ProbeModel
from attnsurvey.training import seed_everything, train

torch.set_num_threads(1)


@pytest.mark.catalog("eq46")
def test_eq46_hand_computed_and_bounds():
    a = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25]])
    G = torch.tensor([[False, True, False, True], [True, False, False, False]])
    torch.testing.assert_close(it.attention_correctness(a, G), torch.tensor([0.7, 0.25]))
    # all weight inside G gives 1, none gives 0, softmax weights stay in [0, 1]
    assert float(it.attention_correctness(torch.tensor([0.0, 1.0]), torch.tensor([False, True]))) == 1.0
    assert float(it.attention_correctness(torch.tensor([1.0, 0.0]), torch.tensor([False, True]))) == 0.0
    w = torch.softmax(torch.randn(50, 9) * 1e4, -1)
    ac = it.attention_correctness(w, torch.rand(50, 9) > 0.5)
    assert torch.isfinite(ac).all() and (ac >= 0).all() and (ac <= 1 + 1e-6).all()
    # on the synthetic image task G holds exactly the 2 x 2 object regions
    d = patch_image_task(5, 4, 3, torch.Generator().manual_seed(0))
    assert d["G"].sum(-1).tolist() == [4] * 5 and d["regions"].shape == (5, 16, 9)


@pytest.mark.catalog("eq46")
def test_eq46_bad_input():
    with pytest.raises(ValueError, match=r"a \(2, 4\), G \(2, 5\)"):
        it.attention_correctness(torch.zeros(2, 4), torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="G must be a boolean"):
        it.attention_correctness(torch.zeros(4), torch.zeros(4))


@pytest.mark.catalog("extra:aer")
def test_aer_hand_computed():
    S = it.links_to_matrix([(0, 0), (1, 2)], 3, 3)
    P = it.links_to_matrix([(0, 0), (1, 2), (2, 1), (2, 2)], 3, 3)
    A = it.links_to_matrix([(0, 0), (1, 1), (2, 1)], 3, 3)
    # |A&S| = 1, |A&P| = 2, |A| = 3, |S| = 2 -> 1 - 3/5
    assert it.alignment_error_rate(A, S, P) == pytest.approx(0.4)
    assert it.alignment_error_rate(S, S, P) == 0.0  # hitting every sure link and nothing else
    assert it.alignment_error_rate(A, S) == pytest.approx(1 - 2 / 5)  # P = S
    # S counts as possible even if P omits it
    assert it.alignment_error_rate(S, S, torch.zeros(3, 3, dtype=torch.bool)) == 0.0
    # corpus AER pools the counts of a batch
    A2, S2 = torch.stack([A, S]), torch.stack([S, S])
    assert it.alignment_error_rate(A2, S2) == pytest.approx(1 - (1 + 2 + 1 + 2) / (3 + 2 + 2 + 2))
    a = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    assert it.hard_alignment(a).tolist() == [[True, False, False], [False, False, True]]
    assert it.hard_alignment(a, threshold=0.25).tolist() == [[True, False, False], [False, True, True]]
    # gold of the toy translation task: S inside P, one sure link per target word
    x, y, S, P = toy_translation_task(4, 5, 3, torch.Generator().manual_seed(0), echo=True)
    assert x.shape == (4, 10) and S.shape == P.shape == (4, 5, 10)
    assert (S <= P).all() and S.sum(-1).eq(1).all()


@pytest.mark.catalog("extra:aer")
def test_aer_bad_input():
    with pytest.raises(ValueError, match=r"link \(3, 0\) refers to target position 3, but n_tgt=3"):
        it.links_to_matrix([(3, 0)], 3, 4)
    with pytest.raises(ValueError, match=r"link \(0, 4\) refers to source position 4, but n_src=4"):
        it.links_to_matrix([(0, 4)], 3, 4)
    z = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"A \(2, 3\), S \(3, 2\)"):
        it.alignment_error_rate(z, z.T, None)
    with pytest.raises(ValueError, match="both A and S are empty"):
        it.alignment_error_rate(z, z)
    with pytest.raises(ValueError, match="must be a boolean"):
        it.alignment_error_rate(z.float(), z)


@pytest.mark.catalog("extra:supervised-attention")
def test_alignment_loss_hand_computed():
    a = torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.2, 0.6], [1 / 3, 1 / 3, 1 / 3]])
    gold = torch.tensor([[True, False, False], [False, True, True], [False, False, False]])
    # row 0: -log .5; row 1: -(log .2 + log .6)/2; row 2 has no gold link and is skipped
    expected = (-math.log(0.5) - (math.log(0.2) + math.log(0.6)) / 2) / 2
    assert float(it.alignment_loss(a, gold)) == pytest.approx(expected, rel=1e-6)
    logits, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    ce = torch.nn.functional.cross_entropy(logits, y)
    torch.testing.assert_close(it.supervised_attention_loss(logits, y, a, gold, 0.0), ce)
    torch.testing.assert_close(
        it.supervised_attention_loss(logits, y, a, gold, 2.0), ce + 2 * it.alignment_loss(a, gold)
    )
    with pytest.raises(ValueError, match="lambda must be >= 0"):
        it.supervised_attention_loss(logits, y, a, gold, -1.0)
    with pytest.raises(ValueError, match=r"gold must have a's shape \(3, 3\), got \(2, 3\)"):
        it.alignment_loss(a, gold[:2])


def _train_translation(lam: float, seed: int, steps_data=(800, 40)):
    g = seed_everything(0)
    x, y, S, P = toy_translation_task(steps_data[0], 4, 6, g, echo=True)
    seed_everything(seed)
    model = ProbeModel(16, 6, 8, n_q=4, vocab=6)
    bs = steps_data[1]
    batches = [(x[i : i + bs], y[i : i + bs], S[i : i + bs]) for i in range(0, len(x), bs)] * 3

    def loss(m, b):
        logits, a = m(b[0])
        return it.supervised_attention_loss(logits, b[1], a, b[2], lam)

    train(model, loss, batches, lr=3e-2)
    with torch.no_grad():
        logits, a = model(x)
    return float((logits.argmax(-1) == y).float().mean()), it.alignment_error_rate(it.hard_alignment(a), S, P)


@pytest.mark.catalog("extra:supervised-attention")
def test_supervised_attention_lowers_aer():
    acc_sup, aer_sup = _train_translation(1.0, seed=1)
    assert acc_sup > 0.95 and aer_sup < 0.05
    # without supervision, the echo copy is an equally good place to look for some seed
    aers = [_train_translation(0.0, seed=s)[1] for s in (1, 2)]
    assert max(aers) > aer_sup + 0.1


@pytest.mark.catalog("extra:rank-correlation")
def test_rank_correlations_match_scipy():
    g = torch.Generator().manual_seed(0)
    for n in (2, 5, 30):
        x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
        assert it.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert it.kendall_tau(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    # ties (tau-b and average ranks)
    x = torch.tensor([1.0, 2, 2, 3, 3, 3, 4])
    y = torch.tensor([2.0, 1, 2, 2, 5, 3, 3])
    assert it.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert it.kendall_tau(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    assert it.rankdata(x).tolist() == stats.rankdata(x).tolist()
    assert it.spearman(x, 2 * x + 1) == pytest.approx(1.0) and it.kendall_tau(x, -x) == pytest.approx(-1.0)
    assert math.isnan(it.spearman(torch.ones(4), torch.arange(4.0)))


@pytest.mark.catalog("extra:rank-correlation")
def test_rank_correlation_bad_input():
    with pytest.raises(ValueError, match=r"one length, got \(3,\) and \(4,\)"):
        it.spearman(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="at least 2 values, got 1"):
        it.kendall_tau(torch.zeros(1), torch.zeros(1))


def _finite_difference_importance(model, F, y, a=None, h=1e-6):
    """|d logit_y / d t| at t = 1 for F_l scaled by t (the directional derivative along F_l itself,
    sum_d dlogit/dF_ld * F_ld), by central differences; weights ``a`` held fixed, or recomputed if None."""
    out = torch.zeros(F.shape[:2], dtype=F.dtype)
    for b in range(F.shape[0]):
        for l in range(F.shape[1]):
            Fp, Fm = F.clone(), F.clone()
            Fp[b, l] *= 1 + h
            Fm[b, l] *= 1 - h
            fd = (model.head(Fp, a)[0][b, 0, y[b]] - model.head(Fm, a)[0][b, 0, y[b]]) / (2 * h)
            out[b, l] = abs(float(fd.detach()))
    return out


@pytest.mark.catalog("extra:gradient-importance")
def test_gradient_importance_matches_finite_differences():
    torch.manual_seed(0)
    model = ProbeModel(6, 3, 5, d_in=4).double()
    F = model.features(torch.randn(2, 5, 4, dtype=torch.float64)).detach()
    y = model.head(F, None)[0][:, 0].argmax(-1)
    imp = it.gradient_importance(model.head, F, detach_attention=False)
    torch.testing.assert_close(imp, _finite_difference_importance(model, F, y), rtol=1e-5, atol=1e-8)
    # default (Jain & Wallace): the weights are held fixed at their values for F, so the same
    # differences run with those weights passed in, not recomputed from the moved F
    imp_fixed = it.gradient_importance(model.head, F)
    a = model.head(F, None)[1].detach()
    torch.testing.assert_close(imp_fixed, _finite_difference_importance(model, F, y, a), rtol=1e-5, atol=1e-8)
    assert not torch.allclose(imp_fixed, imp)  # holding the weights fixed changes the answer here


@pytest.mark.catalog("extra:adversarial-attention")
def test_js_and_tvd_hand_computed():
    p, q = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert float(it.js_divergence(p, q)) == pytest.approx(math.log(2))
    assert float(it.js_divergence(p, p)) == pytest.approx(0.0, abs=1e-9)
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.75, 0.25])
    m = torch.tensor([0.625, 0.375])
    kl = lambda u: float((u * (u / m).log()).sum())
    assert float(it.js_divergence(p, q)) == pytest.approx((kl(p) + kl(q)) / 2, rel=1e-6)
    assert float(it.total_variation(p, q)) == pytest.approx(0.25)
    with pytest.raises(ValueError, match=r"one shape, got \(2,\) and \(3,\)"):
        it.js_divergence(p, torch.ones(3) / 3)


@pytest.mark.catalog("extra:adversarial-attention")
def test_adversarial_attention_respects_constraint():
    # output depends only on the total weight on positions {0, 1} -> many far-away weights give it
    V = torch.tensor([[1.0], [1.0], [0.0], [0.0]])

    def out(w):
        s = (w @ V).squeeze(-1)
        return torch.stack([s, 1 - s], -1)

    a = torch.tensor([[[0.7, 0.1, 0.1, 0.1]]])
    adv, js, tvd = it.adversarial_attention(
        out, a, eps=0.01, steps=150, lr=0.1, generator=torch.Generator().manual_seed(0)
    )
    assert float(tvd.max()) <= 0.01 + 1e-9
    assert float(js.min()) > 0.04  # weight moved within {0, 1} and within {2, 3}
    torch.testing.assert_close(adv.sum(-1), torch.ones(1, 1))
    # a model whose output follows every weight leaves no room: JS stays small
    out2 = lambda w: w
    _, js2, tvd2 = it.adversarial_attention(out2, a, eps=0.01, steps=150, generator=torch.Generator().manual_seed(0))
    assert float(js2.max()) < float(js.min()) and float(tvd2.max()) <= 0.01 + 1e-9
    with pytest.raises(ValueError, match="eps must be >= 0"):
        it.adversarial_attention(out, a, eps=-1.0)


@pytest.mark.catalog("extra:permuted-attention")
def test_permuted_attention_keeps_values():
    g = torch.Generator().manual_seed(0)
    a = torch.softmax(torch.randn(3, 2, 6, generator=g), -1)
    p = it.permuted_attention(a, g)
    torch.testing.assert_close(p.sort(-1).values, a.sort(-1).values)
    assert not torch.equal(p, a)
    # an output that ignores which position gets which weight does not change
    change = it.permutation_output_change(lambda w: torch.softmax(w.sort(-1).values, -1), a, 5, g)
    assert change.shape == (3, 2) and float(change.max()) < 1e-6
    change = it.permutation_output_change(lambda w: w, a, 5, g)
    assert float(change.min()) > 0
    with pytest.raises(ValueError, match="n_perm must be >= 1"):
        it.permutation_output_change(lambda w: w, a, 0, g)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_js_divergence_and_alignment_loss_stay_finite_in_half_precision(dtype):
    """Review 2, C: eps = 1e-12 (1e-9) underflows to 0 in float16: 0 * log 0 gave NaN, log 0 an infinite loss."""
    p, q = torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[0.2, 0.3, 0.5]])
    js = it.js_divergence(p.to(dtype), q.to(dtype))
    want = sum(  # by hand, with 0 log 0 = 0
        u * math.log(u / ((u + v) / 2)) / 2
        for pu, qu in zip(p[0].tolist(), q[0].tolist())
        for u, v in ((pu, qu), (qu, pu))
        if u > 0
    )
    assert js.dtype == dtype and float(js) == pytest.approx(want, rel=1e-2)
    a, gold = torch.tensor([[0.0, 1.0]], dtype=dtype), torch.tensor([[True, False]])
    loss = it.alignment_loss(a, gold)
    assert loss.dtype == dtype and float(loss) == pytest.approx(-math.log(1e-9), rel=1e-2)  # -log(0 + eps)
