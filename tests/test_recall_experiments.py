"""Tests for the recall harness: mixers plug in by factory, runs are reproducible, selectors share the dense weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnsurvey.data.sequences import IGNORE
from attnsurvey.experiments import recall as E

MQAR = {"n_keys": 16, "n_values": 16, "n_pairs": 4, "n_queries": 4}
NEEDLE = {"n": 12, "n_keys": 4, "n_values": 4, "n_filler": 4}


@pytest.mark.parametrize("name", sorted(E.MIXERS))
def test_every_mixer_is_a_causal_token_mixer(name):
    torch.manual_seed(0)
    mixer = E.MIXERS[name](32, 2)
    x = torch.randn(2, 7, 32)
    y = x.clone()
    y[:, 5:] = torch.randn(2, 2, 32)
    out = mixer(x)
    assert out.shape == (2, 7, 32)
    torch.testing.assert_close(mixer(y)[:, :5], out[:, :5])


def test_the_differential_mixer_is_size_matched():
    soft, diff = E.parameter_count("softmax"), E.parameter_count("differential")
    d = 16  # one differential head (half of n_heads = 2) of d_model 32: halves of width 16
    assert soft["mixers"] == 4 * 32 * 32
    assert diff["mixers"] == soft["mixers"] + 4 * d + 2 * d  # the lambda vectors and the norm gain
    assert diff["model"] - soft["model"] == diff["mixers"] - soft["mixers"]  # the rest of the model is shared


def test_run_recall_is_reproducible_and_a_factory_plugs_in():
    a = E.run_recall("softmax", MQAR, 0, 3, n_test=16)
    assert a == E.run_recall("softmax", MQAR, 0, 3, n_test=16)
    assert 0.0 <= a <= 1.0
    zero = lambda d_model, n_heads: _Zero()
    assert 0.0 <= E.run_recall(zero, MQAR, 0, 3, n_test=16) <= 1.0


class _Zero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def test_softmax_learns_a_small_mqar():
    """The default budget (80 steps) solves 4 pairs with softmax attention: the task is not at the floor."""
    assert E.run_recall("softmax", MQAR, 0) > 0.9


def test_accuracy_counts_the_asked_positions_only():
    class Fixed(nn.Module):
        def forward(self, x):
            return nn.functional.one_hot(x, 5).float()  # predicts the input token

    x = torch.tensor([[1, 2, 3, 4]])
    assert E.accuracy(Fixed(), x, torch.tensor([[IGNORE, 2, 0, IGNORE]])) == 0.5
    with pytest.raises(ValueError, match="asked"):
        E.accuracy(Fixed(), x, torch.full((1, 4), IGNORE))


def test_grid_keys_and_seed_order():
    got = E.recall_grid(["softmax", "differential"], [2, 3], {**MQAR, "n_queries": 2}, seeds=(0, 1), steps=2, n_test=8)
    assert list(got) == ["softmax n_pairs=2", "differential n_pairs=2", "softmax n_pairs=3", "differential n_pairs=3"]
    assert all(len(v) == 2 for v in got.values())
    assert got["softmax n_pairs=2"][1] == E.run_recall(
        "softmax", {**MQAR, "n_queries": 2, "n_pairs": 2}, 1, 2, n_test=8
    )


def test_needle_selection_shares_the_dense_weights():
    got = E.needle_selection(NEEDLE, 0, [1, 12], steps=3, n_test=32)
    assert set(got) == {"dense", "window k=1", "window k=12"}
    assert got["window k=12"] == got["dense"]  # a window as long as the sequence keeps every key
    with pytest.raises(ValueError, match="unknown selector"):
        E.needle_selection(NEEDLE, 0, [1], steps=1, selectors=("nope",))


def test_moba_selector_shares_the_dense_weights():
    model, make = E.train_recall("softmax", "needle", NEEDLE, 0, 3)
    x, _ = make(4, torch.Generator().manual_seed(5))
    dense = model.mixers[0]
    h = model.embed(x)
    # enough blocks to cover every key: the dense mixer's output, with its weights
    torch.testing.assert_close(E.SELECTORS["moba"](dense, 2 * NEEDLE["n"])(h), dense(h))
    one_block = E.SELECTORS["moba"](dense, E.MOBA_BLOCK - 1)  # fewer keys than a block: still the own block
    assert one_block.top_k == 1 and one_block.block_size == E.MOBA_BLOCK
    assert not torch.allclose(one_block(h), dense(h))  # the earlier block is dropped for the last queries
    models: dict = {}
    got = E.needle_selection(NEEDLE, 0, [16], steps=3, n_test=32, selectors=("moba",), models=models)
    assert got["moba k=16"] == got["dense"] and list(models) == [0]
    with pytest.raises(ValueError, match="k"):
        E.moba_from_dense(dense, 0)
    with pytest.raises(TypeError, match="SoftmaxMixer"):
        E.SELECTORS["moba"](torch.nn.Linear(2, 2), 8)


def test_held_out_batch_and_mixer_inputs():
    model, make = E.train_recall("softmax", "needle", NEEDLE, 3, 2)
    x, y = E.held_out_batch("needle", NEEDLE, 3, 16)
    assert E.run_recall("softmax", NEEDLE, 3, 2, task="needle", n_test=16) == E.accuracy(model, x, y)
    (h,) = E.mixer_inputs(model, x)
    h0 = model.embed(x)
    h0 = h0 + model.conv(h0.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)
    torch.testing.assert_close(h, model.norms[0](h0))
    assert not model.mixers[0]._forward_pre_hooks  # the hooks are removed


def test_distractor_comparison_pairs_the_seeds():
    kw = {"n_distractors": 3, "n_keys": 6, "n_values": 6}
    models: dict = {}
    got = E.distractor_comparison(kw, seeds=(0, 1), steps=2, n_test=8, models=models)
    assert set(got) == {"softmax", "differential"} and all(len(v) == 2 for v in got.values())
    assert set(models) == {(m, s) for m in ("softmax", "differential") for s in (0, 1)}
    assert got["differential"][1] == E.run_recall("differential", kw, 1, 2, task="distractor", n_test=8)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown mixer"):
        E.run_recall("nope", MQAR, 0, 1)
    with pytest.raises(ValueError, match="unknown task"):
        E.run_recall("softmax", MQAR, 0, 1, task="nope")
    with pytest.raises(TypeError, match="factory"):
        E.RecallModel(8, 3)  # type: ignore[arg-type]
