"""The chapters' training loops run end to end on tiny budgets and report sane figures.

The task models themselves are tested with their mechanisms (test_scoring,
test_alignment, ...); these tests cover the loops the chapters call, which no
other test runs.
"""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

from attnsurvey.data.aspect import make_aspect
from attnsurvey.data.sets import match_query_batch
from attnsurvey.data.vqa import make_vqa
from attnsurvey.experiments import feature_related as xf
from attnsurvey.experiments.general_model import evaluate_match_query, fit_match_query
from attnsurvey.experiments.seq2seq import evaluate_transduction, fit_transduction
from attnsurvey.general_model import TaskModel
from attnsurvey.seq2seq import Seq2Seq

matplotlib.use("Agg")


def _is_rate(x: float) -> bool:
    return 0.0 <= x <= 1.0 and not math.isnan(x)


def test_match_query_loop_trains_and_evaluates():
    torch.manual_seed(0)
    model = TaskModel(d_f=12, d_u=8, n_classes=4, d=16, pool="attention")
    history = fit_match_query(model, 3, torch.Generator().manual_seed(0), batch_size=8, layout="sequence")
    assert len(history.losses) == 3 and all(math.isfinite(v) for v in history.losses)
    r = evaluate_match_query(model, 20, torch.Generator().manual_seed(1), layout="sequence")
    assert set(r) == {"accuracy", "hit"} and all(_is_rate(v) for v in r.values())
    # the figures are the model's, counted here example by example on the same batch
    b = match_query_batch(20, generator=torch.Generator().manual_seed(1), layout="sequence")
    with torch.no_grad():
        logits, a = model(b.flat_F(), b.q, b.mask)
    right = sum(int(logits[i].argmax()) == int(b.y[i]) for i in range(20))
    hits = sum(int(a[i].argmax()) == int(b.target[i]) for i in range(20))
    assert r == {"accuracy": pytest.approx(right / 20), "hit": pytest.approx(hits / 20)}


def test_transduction_loop_trains_and_evaluates():
    torch.manual_seed(0)
    model = Seq2Seq(8, d_emb=4, d_h=8, attention=True)
    history = fit_transduction(model, 2, torch.Generator().manual_seed(0), lengths=(3, 5), batch_size=4)
    assert len(history.losses) == 2
    r = evaluate_transduction(model, 4, 6, torch.Generator().manual_seed(1))
    assert r and all(_is_rate(v) for v in r.values())


@pytest.mark.parametrize("kind", xf.ASPECT_MODELS)
def test_aspect_loop_trains_and_evaluates(kind):
    g = torch.Generator().manual_seed(0)
    model = xf.train_aspect(kind, make_aspect(32, generator=g), steps=2, batch_size=8)
    r = xf.evaluate_aspect(model, make_aspect(16, generator=g))
    assert 0.0 <= r["accuracy"] <= 1.0


@pytest.mark.parametrize("variant", xf.VQA_VARIANTS)
def test_vqa_loop_trains_evaluates_and_draws(variant):
    g = torch.Generator().manual_seed(0)
    model = xf.train_vqa(variant, make_vqa(32, generator=g), steps=2, batch_size=8)
    test = make_vqa(8, generator=g)
    r = xf.evaluate_vqa(model, test)
    assert 0.0 <= r["accuracy"] <= 1.0
    fig = xf.plot_vqa_example(test, 0, weights=torch.full((9,), 1 / 9))
    assert fig.axes


def test_unknown_experiment_names_are_rejected():
    with pytest.raises(ValueError, match="choose one of"):
        xf.AspectModel("no-such-kind")
    with pytest.raises(ValueError, match="choose one of"):
        xf.VQAModel("no-such-variant")


def test_mean_contexts_mlp_is_a_relu_layer_on_the_three_means_at_rotatorys_size():
    torch.manual_seed(0)
    data = make_aspect(4, generator=torch.Generator().manual_seed(0))
    mlp, lin = xf.AspectModel("mean-contexts-mlp"), xf.AspectModel("mean-contexts")
    lin.embed.load_state_dict(mlp.embed.state_dict())
    # the linear model's pre-output features are the three means; feed them through the mlp's layers by hand
    means = []
    with torch.no_grad():
        for F, m in ((data.left, data.mask_l), (data.target, data.mask_t), (data.right, data.mask_r)):
            E = mlp.embed(F) * m[..., None]
            means.append(E.sum(-2) / m.sum(-1, keepdim=True).clamp_min(1))
        x = torch.cat(means, -1)
        expected = mlp.output.linear(torch.relu(mlp.hidden(x)))
        torch.testing.assert_close(mlp(data)[0], expected)
    sizes = {k: sum(p.numel() for p in xf.AspectModel(k).parameters()) for k in ("mean-contexts-mlp", "rotatory")}
    assert abs(sizes["mean-contexts-mlp"] - sizes["rotatory"]) <= 0.02 * sizes["rotatory"], sizes
