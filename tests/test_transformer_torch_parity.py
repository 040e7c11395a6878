"""The Transformer layers against torch.nn.Transformer* with copied weights (float64, eval mode, 1e-10)."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.transformer.model import Decoder, DecoderLayer, Encoder, EncoderLayer, from_torch_transformer_state_dict

D, H, FF = 8, 2, 16


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _pair(
    ours: torch.nn.Module, theirs: torch.nn.Module, train: bool = False
) -> tuple[torch.nn.Module, torch.nn.Module]:
    theirs = theirs.double().train(train)
    ours = ours.double().train(train)
    ours.load_state_dict(from_torch_transformer_state_dict(theirs.state_dict()))
    return ours, theirs


ACTIVATIONS = {"relu": ("relu", "relu"), "gelu": ("gelu", "gelu"), "callable": (torch.tanh, torch.tanh)}


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_encoder_layer_matches_torch(activation, norm_first, bias):
    torch.manual_seed(0)
    ours_act, torch_act = ACTIVATIONS[activation]
    theirs = torch.nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=torch_act, batch_first=True, norm_first=norm_first, bias=bias
    )
    ours, theirs = _pair(EncoderLayer(D, H, FF, norm_first, activation=ours_act, bias=bias), theirs)
    X = _x(3, 5, D)
    kpm = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    torch.testing.assert_close(ours(X)[0], theirs(X), rtol=0, atol=1e-10)
    torch.testing.assert_close(
        ours(X, key_padding_mask=kpm)[0][kpm], theirs(X, src_key_padding_mask=~kpm)[kpm], rtol=0, atol=1e-10
    )
    torch.testing.assert_close(ours(X, is_causal=True)[0], theirs(X, ~causal, is_causal=True), rtol=0, atol=1e-10)
    torch.testing.assert_close(ours(X, causal[None])[0], theirs(X, ~causal), rtol=0, atol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_decoder_layer_matches_torch(norm_first, bias):
    torch.manual_seed(0)
    theirs = torch.nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first, bias=bias
    )
    ours, theirs = _pair(DecoderLayer(D, H, FF, norm_first, activation="gelu", bias=bias), theirs)
    Y, M = _x(2, 4, D, seed=1), _x(2, 6, D, seed=2)
    mkpm = torch.tensor([[True] * 6, [True] * 2 + [False] * 4])
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    got = ours(Y, M, self_is_causal=True, memory_key_padding_mask=mkpm)[0]
    want = theirs(Y, M, tgt_mask=~causal, memory_key_padding_mask=~mkpm, tgt_is_causal=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


# nn.Transformer builds its encoder with enable_nested_tensor=True and no way to turn it off; with norm_first
# torch then warns that it will not use nested tensors, which changes nothing this test compares.
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True, but self.use_nested_tensor is False")
@pytest.mark.parametrize("norm_first", [False, True])
def test_whole_transformer_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = torch.nn.Transformer(D, H, 2, 2, FF, dropout=0.0, batch_first=True, norm_first=norm_first).double().eval()
    enc = Encoder(2, D, H, FF, norm_first, final_norm=True).double().eval()
    dec = Decoder(2, D, H, FF, norm_first, final_norm=True).double().eval()
    sd = from_torch_transformer_state_dict(theirs.state_dict())
    enc.load_state_dict({k[len("encoder.") :]: v for k, v in sd.items() if k.startswith("encoder.")})
    dec.load_state_dict({k[len("decoder.") :]: v for k, v in sd.items() if k.startswith("decoder.")})
    src, tgt = _x(2, 6, D, seed=3), _x(2, 4, D, seed=4)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    want = theirs(src, tgt, tgt_mask=~causal, tgt_is_causal=True)
    M, _ = enc(src)
    got, _, _ = dec(tgt, M, self_is_causal=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_dropout_placement_matches_torch():
    """p = 1 makes dropout deterministic (everything dropped): the placement must then agree with torch's."""
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=1.0, batch_first=True)
    ours, theirs = _pair(EncoderLayer(D, H, FF, dropout=1.0), theirs, train=True)
    X = _x(2, 5, D)
    torch.testing.assert_close(ours(X)[0], theirs(X), rtol=0, atol=1e-10)
    ours.eval(), theirs.eval()
    torch.testing.assert_close(ours(X)[0], theirs(X), rtol=0, atol=1e-10)  # eval: dropout is off
    with pytest.raises(ValueError, match="dropout"):
        EncoderLayer(D, H, FF, dropout=1.5)
    with pytest.raises(ValueError, match="activation"):
        EncoderLayer(D, H, FF, activation="swishy")
