"""Tests for the Transformer encoder and decoder (§3.3.2)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnsurvey.beyond.positions import ALiBiSelfAttention, RotarySelfAttention
from attnsurvey.masking import causal_mask, padding_mask
from attnsurvey.transformer import model as tm
from attnsurvey.transformer.relative import GaussianLocalSelfAttention, RelativeSelfAttention

from .helpers import rand


def copy_mha(ours, ref):
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.W_Q.weight, ours.W_K.weight, ours.W_V.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.W_Q.bias, ours.W_K.bias, ours.W_V.bias]))
        ref.out_proj.weight.copy_(ours.W_O.weight)
        ref.out_proj.bias.copy_(ours.W_O.bias)


def copy_common(ours, ref):
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            getattr(ref, name).weight.copy_(getattr(ours.ffn, name).weight)
            getattr(ref, name).bias.copy_(getattr(ours.ffn, name).bias)
        for name in ("norm1", "norm2", "norm3"):
            if hasattr(ours, name):
                getattr(ref, name).load_state_dict(getattr(ours, name).state_dict())


@pytest.mark.catalog("extra:pre-post-norm", "extra:transformer-encoder")
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first):
    torch.manual_seed(0)
    ours = tm.EncoderLayer(16, 4, 32, norm_first=norm_first)
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first)
    copy_mha(ours.self_attn, ref.self_attn)
    copy_common(ours, ref)
    ref.train()  # the training path (the eval fast path computes the same thing, less exactly)
    X = rand(3, 7, 16)
    lengths = torch.tensor([7, 4, 1])
    keep = padding_mask(lengths, 7)
    out, a = ours(X, keep)
    out_ref = ref(X, src_key_padding_mask=~keep[:, 0])
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    assert a.shape == (3, 4, 7, 7) and torch.all(a[2, :, :, 1:] == 0)
    # a (n, n) mask is one mask for every example, also when the batch size equals n
    X7 = rand(7, 7, 16, seed=2)
    torch.testing.assert_close(ours(X7, causal_mask(7))[0], ref(X7, src_mask=~causal_mask(7)), rtol=1e-4, atol=1e-5)


@pytest.mark.catalog("extra:transformer-decoder")
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first):
    torch.manual_seed(1)
    ours = tm.DecoderLayer(16, 2, 24, norm_first=norm_first)
    ref = nn.TransformerDecoderLayer(16, 2, 24, dropout=0.0, batch_first=True, norm_first=norm_first).train()
    copy_mha(ours.self_attn, ref.self_attn)
    copy_mha(ours.cross_attn, ref.multihead_attn)
    copy_common(ours, ref)
    Y, M = rand(2, 5, 16), rand(2, 6, 16, seed=1)
    causal = causal_mask(5)
    out, a_self, a_cross = ours(Y, M, causal)
    out_ref = ref(Y, M, tgt_mask=~causal)
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    assert torch.all(a_self.triu(1) == 0)
    Y5, M5 = rand(5, 5, 16, seed=2), rand(5, 6, 16, seed=3)  # batch size = n_y: the causal mask is still (n_y, n_y)
    torch.testing.assert_close(ours(Y5, M5, causal)[0], ref(Y5, M5, tgt_mask=~causal), rtol=1e-4, atol=1e-5)


@pytest.mark.catalog("extra:pre-post-norm")
def test_pre_norm_stack_has_final_norm_and_identity_path():
    torch.manual_seed(0)
    pre, post = tm.Encoder(2, 8, 2, 16, norm_first=True), tm.Encoder(2, 8, 2, 16, norm_first=False)
    assert isinstance(pre.final_norm, nn.LayerNorm) and isinstance(post.final_norm, nn.Identity)
    # with all sub-layers switched off (zero output weights) pre-norm keeps x, post-norm normalises it
    X = rand(2, 5, 8) * 3 + 1
    for enc in (pre, post):
        for layer in enc.layers:
            for lin in (layer.self_attn.W_O, layer.ffn.linear2):
                nn.init.zeros_(lin.weight)
                nn.init.zeros_(lin.bias)
    ln = nn.functional.layer_norm(X, (8,))
    torch.testing.assert_close(pre.layers[0](X)[0], X)
    torch.testing.assert_close(post.layers[0](X)[0], ln)
    # residual_norm itself
    f = lambda Z: 2 * Z
    torch.testing.assert_close(tm.residual_norm(X, f, torch.tanh, True), X + 2 * torch.tanh(X))
    torch.testing.assert_close(tm.residual_norm(X, f, torch.tanh, False), torch.tanh(3 * X))


@pytest.mark.catalog("extra:transformer-encoder")
def test_ffn_matches_hand_computation_and_rejects_shapes():
    X = rand(4, 3)
    W1, b1, W2, b2 = rand(5, 3, seed=1), rand(5, seed=2), rand(3, 5, seed=3), rand(3, seed=4)
    ref = torch.stack([W2 @ torch.relu(W1 @ x + b1) + b2 for x in X])
    torch.testing.assert_close(tm.position_wise_ffn(X, W1, b1, W2, b2), ref)
    with pytest.raises(ValueError, match=r"W_2 must have shape \(d_model, d_ff\)"):
        tm.position_wise_ffn(X, W1, b1, rand(3, 4), b2)


@pytest.mark.catalog("extra:transformer-decoder")
def test_decoder_causal_mask_leaks_nothing_from_the_future():
    torch.manual_seed(0)
    model = tm.Seq2SeqTransformer(11, 13, d_model=16, h=2, d_ff=32, n_layers=2).eval()
    src = torch.randint(0, 11, (2, 6))
    tgt = torch.randint(0, 13, (2, 7))
    out = model(src, tgt)
    for t in range(1, 7):
        changed = tgt.clone()
        changed[:, t] = (changed[:, t] + 1) % 13  # perturb a future token
        out2 = model(src, changed)
        assert torch.equal(out[:, :t], out2[:, :t]), f"positions before {t} changed"
        assert not torch.equal(out[:, t], out2[:, t])
    # gradients of early outputs w.r.t. later decoder inputs are exactly zero
    M, _ = model.encode(src)
    Y = model.position(model.tgt_embed(tgt) * model.scale).detach().requires_grad_(True)
    H, _, _ = model.decoder(Y, M, causal_mask(7))
    H[:, :3].sum().backward()
    assert torch.all(Y.grad[:, 3:] == 0)
    assert torch.any(Y.grad[:, :3] != 0)


@pytest.mark.catalog("extra:transformer-encoder")
def test_encoder_padding_mask_isolates_padding():
    torch.manual_seed(0)
    enc = tm.Encoder(2, 8, 2, 16).eval()
    X = rand(1, 6, 8)
    keep = padding_mask(torch.tensor([4]), 6)
    out, ws = enc(X, keep)
    X2 = X.clone()
    X2[:, 4:] = rand(1, 2, 8, seed=5) * 100
    out2, _ = enc(X2, keep)
    torch.testing.assert_close(out[:, :4], out2[:, :4], rtol=0, atol=0)
    assert all(torch.all(a[..., 4:] == 0) for a in ws)


@pytest.mark.catalog("extra:transformer-encoder", "extra:transformer-decoder")
def test_nan_in_padding_reaches_no_parameter_gradient():
    """Padded tokens holding NaN or a finite value give the same real outputs and the same gradients of every weight."""
    torch.manual_seed(0)
    enc, dec = tm.EncoderLayer(8, 2, 16).eval(), tm.DecoderLayer(8, 2, 16).eval()
    X, Y = rand(2, 5, 8), rand(2, 4, 8, seed=1)
    real_x = padding_mask(torch.tensor([5, 3]), 5)[:, 0]  # (B, n_x), True = real token
    real_y = padding_mask(torch.tensor([4, 2]), 4)[:, 0]
    runs = []
    for fill in (float("nan"), 3.0):
        Xp, Yp = X.clone(), Y.clone()
        Xp[~real_x], Yp[~real_y] = fill, fill
        enc.zero_grad()
        dec.zero_grad()
        M, _ = enc(Xp, key_padding_mask=real_x)
        out, _, _ = dec(Yp, M, self_key_padding_mask=real_y, memory_key_padding_mask=real_x, self_is_causal=True)
        out = out[real_y]
        out.sum().backward()
        grads = {
            f"{name}.{k}": p.grad.clone()
            for name, mod in (("enc", enc), ("dec", dec))
            for k, p in mod.named_parameters()
        }
        runs.append((out.detach(), grads))
    (out_nan, g_nan), (out_fin, g_fin) = runs
    torch.testing.assert_close(out_nan, out_fin)
    for k in g_fin:
        torch.testing.assert_close(g_nan[k], g_fin[k], msg=k)


@pytest.mark.catalog("extra:transformer-encoder")
def test_permutation_equivariance_without_positions():
    torch.manual_seed(0)
    tagger = tm.SequenceTagger(10, 10, d_model=16, position="none").eval()
    x = torch.randint(0, 10, (2, 8))
    perm = torch.randperm(8)
    y, _ = tagger(x)
    y_p, _ = tagger(x[:, perm])
    torch.testing.assert_close(y_p, y[:, perm], rtol=1e-5, atol=1e-5)
    with_pos = tm.SequenceTagger(10, 10, d_model=16, position="sinusoidal").eval()
    y, _ = with_pos(x)
    y_p, _ = with_pos(x[:, perm])
    assert not torch.allclose(y_p, y[:, perm], atol=1e-3)


@pytest.mark.catalog("extra:transformer-encoder")
def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by the number of heads h=4"):
        tm.EncoderLayer(10, 4, 16)
    layer = tm.EncoderLayer(8, 2, 16)
    with pytest.raises(ValueError, match="d_model of X == d_model of the layer, got d_model of X=6"):
        layer(rand(2, 3, 6))
    with pytest.raises(ValueError, match="does not broadcast"):
        layer(rand(2, 3, 8), torch.ones(2, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="position must be"):
        tm.SequenceTagger(5, 5, position="rotary")
    with pytest.raises(ValueError, match="n_layers must be >= 1"):
        tm.Encoder(0, 8, 2, 16)


@pytest.mark.catalog("extra:transformer-encoder")
def test_large_inputs_and_bfloat16_stay_finite():
    torch.manual_seed(0)
    enc = tm.Encoder(2, 8, 2, 16).eval()
    out, _ = enc(rand(2, 5, 8) * 1e4)
    assert torch.isfinite(out).all()
    out16, _ = enc.to(torch.bfloat16)(rand(2, 5, 8).to(torch.bfloat16))
    assert out16.dtype == torch.bfloat16 and torch.isfinite(out16).all()


def test_size_and_layer_options_default_from_one_mapping_and_reject_unknown_names():
    torch.manual_seed(0)
    by_default = tm.Seq2SeqTransformer(11, 13)
    torch.manual_seed(0)
    spelled_out = tm.Seq2SeqTransformer(11, 13, **tm.TRANSFORMER_SIZE)
    assert all(torch.equal(a, b) for a, b in zip(by_default.state_dict().values(), spelled_out.state_dict().values()))
    assert len(by_default.encoder.layers) == tm.TRANSFORMER_SIZE["n_layers"]
    assert by_default.encoder.layers[0].ffn.linear1.out_features == tm.TRANSFORMER_SIZE["d_ff"]
    layer = tm.DecoderLayer(8, 2, 16)
    assert layer.norm3.eps == tm.LAYER_OPTIONS["layer_norm_eps"] and layer.dropout3.p == tm.LAYER_OPTIONS["dropout"]
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['dmodel'\]"):
        tm.SequenceTagger(5, 5, dmodel=16)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['eps'\]"):
        tm.Encoder(1, 8, 2, 16, eps=1e-6)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['is_causal'\]; DecoderMasks declares"):
        tm.Decoder(1, 8, 2, 16)(rand(1, 3, 8), rand(1, 4, 8), is_causal=True)


@pytest.mark.catalog("extra:relative-position", "extra:gaussian-local-bias", "extra:rope", "extra:alibi", by_param=True)
@pytest.mark.parametrize(
    "factory",
    [
        lambda: RelativeSelfAttention(16, 4, b=2),
        lambda: GaussianLocalSelfAttention(16, 4, centre="token"),
        lambda: RotarySelfAttention(16, 4),
        lambda: ALiBiSelfAttention(16, 4),
    ],
    ids=["extra:relative-position", "extra:gaussian-local-bias", "extra:rope", "extra:alibi"],
)
def test_offset_variants_in_an_encoder_take_padding_and_causal_masks(factory):
    """These variants see only offsets j - i, so the oracle is a shorter input: a padded example's real
    tokens come out as the example alone (its padding holds NaN), and causal outputs of a prefix as the
    prefix alone."""
    torch.manual_seed(0)
    enc = tm.Encoder(2, 16, 4, 32, self_attn_factory=factory).eval()
    X = rand(2, 7, 16)
    X[1, 4:] = float("nan")
    real = torch.arange(7) < torch.tensor([[7], [4]])
    out, weights = enc(X, key_padding_mask=real)
    torch.testing.assert_close(out[1, :4], enc(X[1:, :4])[0][0], atol=1e-5, rtol=1e-5)
    assert all(bool((a[1, ..., 4:] == 0).all()) for a in weights)
    causal, _ = enc(X[:1], is_causal=True)
    torch.testing.assert_close(causal[0, :5], enc(X[:1, :5], is_causal=True)[0][0], atol=1e-5, rtol=1e-5)
