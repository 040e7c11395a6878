"""Masked slots made inert once, at the model's edge (Seq2SeqTransformer): the layers inside trust it."""

from __future__ import annotations

import torch

from attnsurvey.transformer import model as tm


def _run(pad_row: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    m = tm.Seq2SeqTransformer(9, 9, d_model=8, h=2, d_ff=16, n_layers=2).eval()
    with torch.no_grad():
        m.src_embed.weight[0] = pad_row  # token 0 stands only at padded source positions
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, 9, (3, 6), generator=g)
    lengths = torch.tensor([6, 4, 2])
    src[torch.arange(6)[None, :] >= lengths[:, None]] = 0
    tgt_in = torch.randint(1, 9, (3, 5), generator=g)
    logits = m(src, tgt_in, lengths)
    logits.sum().backward()
    grads = {k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None}
    grads["src_embed.weight"] = grads["src_embed.weight"][1:]  # the padding token's own row aside
    return logits.detach(), grads


def test_nan_in_the_padding_embedding_reaches_no_output_and_no_gradient():
    """The one clearing at the edge stands in for the layers' own: NaN padding gives what finite padding gives."""
    out_nan, g_nan = _run(float("nan"))
    out_fin, g_fin = _run(3.0)
    torch.testing.assert_close(out_nan, out_fin, rtol=0, atol=0)
    for k in g_fin:
        torch.testing.assert_close(g_nan[k], g_fin[k], rtol=0, atol=0, msg=k)


def test_trusting_layers_compute_what_clearing_layers_compute():
    """The private flag only skips work: the stacks give the same bits with and without it on finite inputs."""
    torch.manual_seed(0)
    enc, dec = tm.Encoder(2, 8, 2, 16).eval(), tm.Decoder(2, 8, 2, 16).eval()
    X, Y = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, :]
    for finite in (False, True):
        M, ws = enc(X, keep, _finite_inputs=finite)
        out, _, _ = dec(Y, M, None, keep, _finite_inputs=finite, self_is_causal=True)
        if not finite:
            ref = (M, out, ws)
    torch.testing.assert_close(M, ref[0], rtol=0, atol=0)
    torch.testing.assert_close(out, ref[1], rtol=0, atol=0)
    for a, b in zip(ws, ref[2], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
