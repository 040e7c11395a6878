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
    data = tt.with_eos(tt.reversal_data(4, torch.Generator().manual_seed(1)))
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
    assert torch.all(torch.isfinite(lp[..., tt.EOS]))  # the end may come at any step: no length is imposed


@pytest.mark.catalog("extra:length-penalty")
def test_with_eos_by_hand():
    data = tt.reversal_data(5, torch.Generator().manual_seed(2))
    e = tt.with_eos(data)
    assert e.tgt_out.shape == (5, data.tgt_out.shape[1] + 1) and e.tgt_in.shape == e.tgt_out.shape
    for b in range(5):
        n = int(data.lengths[b])
        y = data.tgt_out[b, :n].tolist()
        assert e.tgt_out[b].tolist() == y + [tt.EOS] + [PAD] * (e.tgt_out.shape[1] - n - 1)
        assert e.tgt_in[b].tolist() == [BOS] + y + [PAD] * (e.tgt_in.shape[1] - n - 1)
    assert torch.equal(e.src, data.src) and torch.equal(e.lengths, data.lengths)
    assert int(data.src.max()) < tt.EOS  # the symbols never collide with the end token
    with pytest.raises(ValueError, match="already hold EOS"):
        tt.with_eos(e)


@pytest.mark.catalog("extra:trained-transformer", "extra:length-penalty")
@pytest.mark.parametrize(("width", "alpha"), [(1, 0.0), (3, 0.0), (3, 0.6)])
def test_one_pass_decode_equals_decoding_each_example_alone(width, alpha):
    torch.manual_seed(4)
    model = tt.make_model().eval()
    data = tt.reversal_data(8, torch.Generator().manual_seed(5))
    assert len(data.lengths.unique()) > 3  # mixed lengths, so the one-pass end of each example matters
    got = tt.decode(model, data, width, alpha, max_len=10)
    assert got.shape == (8, 10)
    for b in range(len(data.lengths)):
        n = int(data.lengths[b])
        step = tt.step_function(model, data.src[b : b + 1, :n], data.lengths[b : b + 1])
        with torch.no_grad():
            if width == 1:
                alone = greedy_search(step, BOS, 1, 10, eos=tt.EOS, pad=PAD)[0]
            else:
                alone = beam_search(step, BOS, 1, 10, width, eos=tt.EOS, alpha=alpha, pad=PAD)[0]
        assert torch.equal(got[b], alone[0].masked_fill(alone[0] == tt.EOS, PAD))


@pytest.mark.catalog("extra:length-penalty")
def test_sequence_log_prob_is_the_score_the_search_returns():
    torch.manual_seed(6)
    model = tt.make_model().eval()
    data = tt.reversal_data(6, torch.Generator().manual_seed(7))
    step = tt.step_function(model, data.src, data.lengths)
    for alpha in (0.0, 0.6):
        tok, score = beam_search(step, BOS, 6, 8, 3, eos=tt.EOS, alpha=alpha, pad=PAD)
        finished = (tok == tt.EOS).any(1)
        logp, n = tt.sequence_log_prob(model, data, tok)
        torch.testing.assert_close((logp / ((5 + n) / 6) ** alpha)[finished], score[finished], atol=1e-5, rtol=1e-5)
        # with a limit of 2 symbols some outputs are finished there (no EOS): scored as the search scored them
        tok, score = beam_search(step, BOS, 6, 2, 3, eos=tt.EOS, alpha=alpha, pad=PAD)
        open_ = ~(tok == tt.EOS).any(1)
        assert bool(open_.any())
        logp, n = tt.sequence_log_prob(model, data, tok, open_at=2)
        torch.testing.assert_close(logp / ((5 + n) / 6) ** alpha, score, atol=1e-5, rtol=1e-5)
        assert torch.equal(n, torch.where(open_, 2, tt.output_lengths(tok) + 1))
    # the target by teacher forcing, by hand from the full forward pass
    logp, n = tt.sequence_log_prob(model, data, data.tgt_out)
    e = tt.with_eos(data)
    with torch.no_grad():
        logits = model(e.src, e.tgt_in, e.lengths).index_fill(-1, torch.tensor([PAD, BOS]), -torch.inf)
    picked = torch.log_softmax(logits, -1).gather(-1, e.tgt_out[..., None]).squeeze(-1)
    expected = torch.where(e.tgt_out != PAD, picked, 0.0).sum(1)
    torch.testing.assert_close(logp.float(), expected, atol=1e-4, rtol=1e-5)
    assert torch.equal(n, data.lengths + 1)


@pytest.mark.catalog("extra:trained-transformer")
def test_scores_and_mirrored_weight_on_hand_made_inputs():
    data = tt.reversal_data(6, torch.Generator().manual_seed(2))
    perfect = tt.scores(data.tgt_out, data)
    assert perfect == {"exact": 1.0, "bleu": 100.0, "short": 0.0, "long": 0.0}
    wrong = data.tgt_out.clone()
    wrong[0, 0] = 2 if wrong[0, 0] != 2 else 3
    assert abs(tt.scores(wrong, data)["exact"] - 5 / 6) < 1e-6
    # one output cut short (PAD at its last symbol), one too long (a symbol in place of its end), one ended by EOS
    pred = torch.cat([data.tgt_out, torch.full((6, 2), PAD)], dim=1)
    n0, n1 = int(data.lengths[0]), int(data.lengths[1])
    pred[0, n0 - 1] = PAD
    pred[1, n1] = 5
    pred[2, int(data.lengths[2])] = tt.EOS
    assert tt.output_lengths(pred)[:3].tolist() == [n0 - 1, n1 + 1, int(data.lengths[2])]
    assert tt.exact_per_sequence(pred, data).tolist() == [False, False, True, True, True, True]
    r = tt.scores(pred, data)
    assert (
        r["exact"] == pytest.approx(4 / 6) and r["short"] == pytest.approx(1 / 6) and r["long"] == pytest.approx(1 / 6)
    )
    assert r["bleu"] < 100
    B, n = data.src.shape
    # an attention that looks exactly at n - 1 - t scores 1; a uniform one 1/len on average
    pos = torch.clamp(data.lengths[:, None] - 1 - torch.arange(n)[None], min=0)
    anti = torch.nn.functional.one_hot(pos, n).float()[:, None].repeat(1, 2, 1, 1)
    torch.testing.assert_close(tt.mirrored_weight(anti, data), torch.ones(2))
    valid = (torch.arange(n)[None] < data.lengths[:, None]).float()
    uniform = (valid / data.lengths[:, None])[:, None, None, :].expand(B, 2, n, n)
    expected = (1 / data.lengths.float() * data.lengths).sum() / data.lengths.sum()
    torch.testing.assert_close(tt.mirrored_weight(uniform, data), expected.expand(2))


@pytest.mark.catalog("extra:trained-transformer", "extra:length-penalty")
def test_short_training_learns_something_and_to_stop():
    model, losses = tt.train_reversal(0, steps=60, batch=32)
    assert sum(losses[-10:]) / 10 < losses[0] - 0.3
    data = tt.reversal_data(16, torch.Generator().manual_seed(3))
    greedy = tt.decode(model, data, 1)
    n_out = tt.output_lengths(greedy)
    assert int((n_out < tt.MAX_DECODE).sum()) >= 15  # nearly every output ended with EOS before the cap
    # the output lengths follow the input lengths, which the decoder is not told
    assert float(torch.corrcoef(torch.stack([n_out.float(), data.lengths.float()]))[0, 1]) > 0.4
    assert tt.cross_attention(model, data)[0].shape == (16, 2, data.src.shape[1], data.src.shape[1])
