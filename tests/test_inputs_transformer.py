"""Inputs at the boundary of the Transformer modules: sizes refused when built, SequenceTagger's mask ranks,
and the Lite Transformer's convolution branch inert to padding named by an attention mask."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.transformer.lite import LiteTransformerBlock
from attnsurvey.transformer.model import EncoderLayer, FeedForward, SequenceTagger
from attnsurvey.transformer.relative import GaussianLocalSelfAttention


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_sizes_refused_when_built(bad):
    with pytest.raises(ValueError, match="d_ff"):
        EncoderLayer(8, 2, bad)
    with pytest.raises(ValueError, match="d_model"):
        FeedForward(bad, 8)
    with pytest.raises(ValueError, match="kernel_size"):
        LiteTransformerBlock(8, 2, 8, kernel_size=bad)


def test_window_must_be_finite_and_positive():
    for window in (float("nan"), float("inf"), 0.0):
        with pytest.raises(ValueError, match="window"):
            GaussianLocalSelfAttention(8, 2, window=window)


def test_sequence_tagger_refuses_a_rank2_mask():
    torch.manual_seed(0)
    tagger = SequenceTagger(7, 3, d_model=8, h=2, d_ff=16, n_layers=1).eval()
    tokens = torch.randint(0, 7, (4, 4))  # batch == n: a (batch, n) mask would be read per query
    with pytest.raises(ValueError, match=r"\(batch, n, n\) or \(batch, 1, n\)"):
        tagger(tokens, torch.ones(4, 4, dtype=torch.bool))
    kpm = torch.ones(4, 4, dtype=torch.bool)
    assert tagger(tokens, kpm[:, None, :])[0].shape == (4, 4, 3)


def test_lite_block_padding_from_an_attention_mask_is_inert():
    torch.manual_seed(0)
    block = LiteTransformerBlock(8, 2, 16).double().eval()
    X = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = torch.ones(2, 5, 5, dtype=torch.bool)
    mask[..., -1] = False  # no query may attend the last token: padding
    X_nan = X.clone()
    X_nan[:, -1] = float("nan")
    out, _ = block(X_nan, mask)
    ref, _ = block(X, key_padding_mask=mask[:, 0])
    torch.testing.assert_close(out[:, :-1], ref[:, :-1])
