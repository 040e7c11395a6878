"""Tests for the end-to-end trained Transformer experiment (reversal, greedy/beam, BLEU, attention)."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.beyond.search import beam_search, greedy_search
from attnsurvey.data.sequences import BOS, PAD
from attnsurvey.experiments import trained_transformer as tt


@pytest.mark.catalog("extra:trained-transformer")
def test_step_function_matches_full_decode():
    torch.manual_seed(0)
    model = tt.make_model().eval()
    data = tt.reversal_data(4, torch.Generator().manual_seed(1))
    step = tt.step_function(model, data.src, data.lengths)
    prefixes = torch.stack([data.tgt_in[:, :5], data.tgt_in[:, :5].flip(0)], dim=1)  # (B, k=2, t=5)
    lp = step(prefixes)
    with torch.no_grad():
        full = torch.log_softmax(
            model(data.src, data.tgt_in[:, :5], data.lengths)[:, -1].index_fill(
                -1, torch.tensor([PAD, BOS]), -torch.inf
            ),
            -1,
        )
    torch.testing.assert_close(lp[:, 0], full, atol=1e-5, rtol=1e-5)
    assert torch.all(lp[..., [PAD, BOS]] == -torch.inf)
    # once an example has its lengths[b] tokens, PAD is certain
    done = data.tgt_in[:, : int(data.lengths.min()) + 1]
    lp_done = step(done[:, None])[data.lengths == data.lengths.min(), 0]
    assert torch.all(lp_done[:, PAD] == 0) and torch.all(lp_done[:, torch.arange(tt.VOCAB) != PAD] == -torch.inf)


@pytest.mark.catalog("extra:trained-transformer")
@pytest.mark.parametrize("width", [1, 3])
def test_one_pass_decode_equals_decoding_each_example_alone(width):
    torch.manual_seed(4)
    model = tt.make_model().eval()
    data = tt.reversal_data(12, torch.Generator().manual_seed(5))
    assert len(data.lengths.unique()) > 3  # mixed lengths, so the one-pass end of each example matters
    got = tt.decode(model, data, width)
    for b in range(len(data.lengths)):
        n = int(data.lengths[b])
        step = tt.step_function(model, data.src[b : b + 1, :n], data.lengths[b : b + 1])
        with torch.no_grad():
            alone = greedy_search(step, BOS, 1, n)[0] if width == 1 else beam_search(step, BOS, 1, n, width)[0]
        assert torch.equal(got[b, :n], alone[0])
        assert torch.all(got[b, n:] == PAD)


@pytest.mark.catalog("extra:trained-transformer")
def test_scores_and_mirrored_weight_on_hand_made_inputs():
    data = tt.reversal_data(6, torch.Generator().manual_seed(2))
    perfect = tt.scores(data.tgt_out, data)
    assert perfect == {"exact": 1.0, "bleu": 100.0}
    wrong = data.tgt_out.clone()
    wrong[0, 0] = 2 if wrong[0, 0] != 2 else 3
    assert abs(tt.scores(wrong, data)["exact"] - 5 / 6) < 1e-6
    B, n = data.src.shape
    # an attention that looks exactly at n - 1 - t scores 1; a uniform one 1/len on average
    pos = torch.clamp(data.lengths[:, None] - 1 - torch.arange(n)[None], min=0)
    anti = torch.nn.functional.one_hot(pos, n).float()[:, None].repeat(1, 2, 1, 1)
    torch.testing.assert_close(tt.mirrored_weight(anti, data), torch.ones(2))
    valid = (torch.arange(n)[None] < data.lengths[:, None]).float()
    uniform = (valid / data.lengths[:, None])[:, None, None, :].expand(B, 2, n, n)
    expected = (1 / data.lengths.float() * data.lengths).sum() / data.lengths.sum()
    torch.testing.assert_close(tt.mirrored_weight(uniform, data), expected.expand(2))


@pytest.mark.catalog("extra:trained-transformer")
def test_short_training_learns_something():
    model, losses = tt.train_reversal(0, steps=60, batch=32)
    assert sum(losses[-10:]) / 10 < losses[0] - 0.3
    data = tt.reversal_data(16, torch.Generator().manual_seed(3))
    greedy = tt.decode(model, data, 1)
    assert torch.equal(greedy == PAD, data.tgt_out == PAD)  # one token per source token, then padding
    assert tt.cross_attention(model, data)[0].shape == (16, 2, data.src.shape[1], data.src.shape[1])
