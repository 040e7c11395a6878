"""Tests for the Chapter 1 encoder-decoder, with and without (Bahdanau) attention."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnsurvey import seq2seq as s2s
from attnsurvey.data.sequences import BOS, PAD, transduction_batch
from attnsurvey.general_mechanisms.scoring import additive_score
from attnsurvey.training import train


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def model(attention: bool = True, vocab: int = 9, d_h: int = 16, seed: int = 0) -> s2s.Seq2Seq:
    torch.manual_seed(seed)
    return s2s.Seq2Seq(vocab, d_emb=8, d_h=d_h, attention=attention).eval()


@pytest.mark.catalog("extra:encoder-decoder-bottleneck")
@pytest.mark.parametrize("attention", [True, False])
def test_shapes_of_teacher_forcing_and_greedy(attention):
    m = model(attention)
    src, tgt_in, tgt_out, lens = transduction_batch(5, (2, 7), vocab_size=9, generator=gen())
    logits, a = m(src, tgt_in, lens)
    n = src.shape[1]
    assert logits.shape == (5, n, 9)
    tokens, glogits, ga = m.greedy_decode(src, 4, lens)
    assert tokens.shape == (5, 4) and glogits.shape == (5, 4, 9) and tokens.dtype == torch.long
    if attention:
        assert a.shape == (5, n, n) and ga.shape == (5, 4, n)
    else:
        assert a is None and ga is None


@pytest.mark.catalog("extra:bahdanau-decoder")
def test_attention_rows_sum_to_one_and_padding_gets_zero_weight():
    m = model(True)
    src, tgt_in, _, lens = transduction_batch(16, (1, 8), vocab_size=9, generator=gen(1))
    _, a = m(src, tgt_in, lens)
    torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:2]))
    pad = torch.arange(src.shape[1])[None, :] >= lens[:, None]  # (B, n_x)
    assert lens.min() < src.shape[1]  # the batch really has padding
    assert torch.all(a.masked_select(pad[:, None, :].expand_as(a)) == 0)


@pytest.mark.catalog("extra:bahdanau-decoder")
@pytest.mark.parametrize("attention", [True, False])
def test_padded_source_tokens_cannot_change_the_output(attention):
    m = model(attention)
    src, tgt_in, _, lens = transduction_batch(12, (2, 8), vocab_size=9, generator=gen(2))
    noisy = src.clone()
    pad = torch.arange(src.shape[1])[None, :] >= lens[:, None]
    noisy[pad] = torch.randint(2, 9, (int(pad.sum()),), generator=gen(3))
    out1, a1 = m(src, tgt_in, lens)
    out2, a2 = m(noisy, tgt_in, lens)
    torch.testing.assert_close(out1, out2)
    # and a padded example equals the same example run alone, unpadded
    i = int(torch.argmin(lens))
    n = int(lens[i])
    alone, _ = m(src[i : i + 1, :n], tgt_in[i : i + 1], None)
    torch.testing.assert_close(out1[i : i + 1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.catalog("extra:encoder-decoder-bottleneck")
def test_summary_equals_gru_final_states():
    """Oracle: nn.GRU's own h_n on the packed batch is [forward last; backward first]."""
    m = model(False)
    src, _, _, lens = transduction_batch(6, (2, 7), vocab_size=9, generator=gen(4))
    H, mask, summary = m.encode(src, lens)
    packed = nn.utils.rnn.pack_padded_sequence(m.embed(src), lens, batch_first=True, enforce_sorted=False)
    _, h_n = m.encoder(packed)
    torch.testing.assert_close(summary, torch.cat([h_n[0], h_n[1]], -1))
    assert torch.equal(mask, torch.arange(src.shape[1])[None, :] < lens[:, None])
    # final_state against a loop
    for b in range(6):
        torch.testing.assert_close(s2s.final_state(H, lens)[b], H[b, int(lens[b]) - 1])


@pytest.mark.catalog("extra:bahdanau-decoder")
@pytest.mark.parametrize("attention", [True, False])
def test_teacher_forcing_on_own_predictions_equals_greedy(attention):
    m = model(attention, seed=5)
    src, _, _, lens = transduction_batch(7, (3, 6), vocab_size=9, generator=gen(5))
    tokens, glogits, ga = m.greedy_decode(src, 6, lens)
    tgt_in = torch.cat([torch.full((7, 1), BOS), tokens[:, :-1]], 1)
    logits, a = m(src, tgt_in, lens)
    torch.testing.assert_close(logits, glogits, atol=1e-5, rtol=1e-5)
    if attention:
        torch.testing.assert_close(a, ga, atol=1e-6, rtol=1e-5)


@pytest.mark.catalog("extra:bahdanau-decoder")
def test_bahdanau_step_matches_additive_formula_by_hand():
    """a_t = softmax_l(w^T tanh(W_1 s_{t-1} + W_2 h_l + b)), c_t = sum_l a_l h_l."""
    m = model(True)
    src, _, _, lens = transduction_batch(3, 5, vocab_size=9, generator=gen(6))
    H, mask, s0 = m.encode(src, lens)
    y = m.embed(torch.full((3,), BOS))
    _, _, a = s2s.decoder_step(y, s0, H, mask, m.cell, m.readout, attention=m.attention)
    sc = m.attention.score
    e = torch.stack(
        [
            torch.stack(
                [sc.w @ torch.tanh(sc.W1.weight @ s0[b] + sc.W2.weight @ H[b, l] + sc.W2.bias) for l in range(5)]
            )
            for b in range(3)
        ]
    )
    torch.testing.assert_close(a, torch.softmax(e, -1), atol=1e-6, rtol=1e-5)
    e_fn = additive_score(s0[:, None], H, sc.W1.weight, sc.W2.weight, sc.w, sc.W2.bias)[:, 0]
    torch.testing.assert_close(e_fn, e, atol=1e-5, rtol=1e-5)


@pytest.mark.catalog("extra:encoder-decoder-bottleneck")
def test_bottleneck_decoder_sees_only_the_summary():
    m = model(False)
    src, _, _, lens = transduction_batch(4, 6, vocab_size=9, generator=gen(7))
    H, mask, summary = m.encode(src, lens)
    y = m.embed(torch.full((4,), BOS))
    out1, s1, a1 = s2s.decoder_step(y, summary, H, mask, m.cell, m.readout, c_fixed=summary)
    out2, s2, _ = s2s.decoder_step(y, summary, torch.randn_like(H), mask, m.cell, m.readout, c_fixed=summary)
    assert a1 is None
    torch.testing.assert_close(out1, out2)
    torch.testing.assert_close(s1, s2)


@pytest.mark.catalog("extra:bahdanau-decoder")
def test_tiny_model_overfits_eight_fixed_examples():
    torch.manual_seed(0)
    m = s2s.Seq2Seq(8, d_emb=8, d_h=32, attention=True)
    batch = tuple(transduction_batch(8, 5, vocab_size=8, generator=gen(8)))

    def loss_fn(mod, b):
        src, tgt_in, tgt_out, lens = b
        return s2s.sequence_loss(mod(src, tgt_in, lens)[0], tgt_out)

    hist = train(m, loss_fn, [batch] * 100, lr=2e-2)
    src, _, tgt_out, lens = batch
    tokens, logits, _ = m.greedy_decode(src, 5, lens)
    assert hist.losses[-1] < 0.05 < hist.losses[0]
    assert s2s.token_accuracy(logits, tgt_out) >= 0.95
    assert s2s.sequence_accuracy(tokens, tgt_out) >= 0.875


def test_metrics_ignore_padding():
    targets = torch.tensor([[3, 4, PAD], [5, PAD, PAD]])
    tokens = torch.tensor([[3, 4, 7], [6, 2, 2]])
    assert s2s.sequence_accuracy(tokens, targets) == 0.5
    logits = nn.functional.one_hot(tokens, 8).float()
    assert s2s.token_accuracy(logits, targets) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="same shape"):
        s2s.sequence_accuracy(tokens[:, :2], targets)


def test_bad_inputs_raise():
    m = model(True)
    src = torch.tensor([[2, 3, 4]])
    with pytest.raises(ValueError, match=r"src must hold integer token ids"):
        m(src.float(), src)
    with pytest.raises(ValueError, match=r"src holds token ids outside \[0, vocab_size=9\)"):
        m(src + 10, src)
    with pytest.raises(ValueError, match=r"src must have shape \(B, n_x\)"):
        m(src[0], src)
    with pytest.raises(ValueError, match="same batch size B"):
        m(src, torch.cat([src, src]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[1, n_x=3\]"):
        m(src, src, torch.tensor([4]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\)"):
        m(src, src, torch.tensor([2, 2]))
    with pytest.raises(ValueError, match="n_steps must be >= 1"):
        m.greedy_decode(src, 0)
    with pytest.raises(ValueError, match="d_h must be even"):
        s2s.Seq2Seq(9, d_h=15)
    with pytest.raises(ValueError, match="exactly one of attention"):
        s2s.decoder_step(
            torch.zeros(1, 8),
            torch.zeros(1, 16),
            torch.zeros(1, 3, 16),
            torch.ones(1, 3, dtype=torch.bool),
            m.cell,
            m.readout,
        )
    with pytest.raises(ValueError, match=r"H must have shape \(B, n_x, d_h\)"):
        s2s.final_state(torch.zeros(3, 4), torch.tensor([1, 1, 1]))
