"""MultiheadAttention as a drop-in for torch.nn.MultiheadAttention: one test per option, float64, 1e-10."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnsurvey.query_related import multihead as mh
from attnsurvey.query_related.torch_mha import TorchMultiheadAttention, from_torch_state_dict

from .helpers import rand

D64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-10)


def pair(embed=8, heads=2, seed=0, **kw):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(embed, heads, dtype=D64, **kw).eval()
    with torch.no_grad():  # non-zero biases so that every parameter matters
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return ref, TorchMultiheadAttention.from_torch(ref)


def inputs(L=4, S=5, B=3, E=8, batch_first=False, kdim=None, vdim=None):
    shape = (lambda n, d: (B, n, d)) if batch_first else (lambda n, d: (n, B, d))
    return (
        rand(*shape(L, E), dtype=D64),
        rand(*shape(S, kdim or E), seed=1, dtype=D64),
        rand(*shape(S, vdim or E), seed=2, dtype=D64),
    )


def check(ours, ref, *args, **kw):
    out, a = ours(*args, **kw)
    out_ref, a_ref = ref(*args, **kw)
    torch.testing.assert_close(out, out_ref, **TOL)
    if a_ref is None:
        assert a is None
    else:
        torch.testing.assert_close(a, a_ref, **TOL)


@pytest.mark.catalog("eq40")
@pytest.mark.parametrize("batch_first", [False, True])
def test_default_and_batch_first(batch_first):
    ref, ours = pair(batch_first=batch_first)
    check(ours, ref, *inputs(batch_first=batch_first))


def test_kdim_vdim():
    ref, ours = pair(kdim=6, vdim=3)
    check(ours, ref, *inputs(kdim=6, vdim=3))


def test_bias_false():
    ref, ours = pair(bias=False)
    check(ours, ref, *inputs())


def test_key_padding_mask_bool_and_float():
    ref, ours = pair()
    pad = torch.tensor([[False] * 5, [False, False, True, True, True], [False] * 4 + [True]])  # torch: True = blocked
    check(ours, ref, *inputs(), key_padding_mask=pad)
    fpad = torch.zeros(3, 5, dtype=D64).masked_fill(pad, -1e4)
    check(ours, ref, *inputs(), key_padding_mask=fpad)


def test_attn_mask_bool_float_and_per_head():
    ref, ours = pair()
    blocked = rand(4, 5, seed=7) > 0.5
    blocked[:, 0] = False
    check(ours, ref, *inputs(), attn_mask=blocked)
    check(ours, ref, *inputs(), attn_mask=rand(4, 5, seed=8, dtype=D64))
    per_head = rand(3 * 2, 4, 5, seed=9) > 0.5
    per_head[..., 1] = False
    check(ours, ref, *inputs(), attn_mask=per_head)
    # torch reads a 2-D attn_mask as (L, S) whatever the batch size, B == L included
    check(ours, ref, *inputs(B=4), attn_mask=blocked)


def test_is_causal_with_its_mask():
    ref, ours = pair()
    q, _, _ = inputs(L=5)
    causal_blocked = torch.ones(5, 5, dtype=torch.bool).triu(1)
    check(ours, ref, q, q, q, attn_mask=causal_blocked, is_causal=True)
    # ours also accepts is_causal alone (torch needs the mask as a hint)
    out, _ = ours(q, q, q, is_causal=True)
    torch.testing.assert_close(out, ref(q, q, q, attn_mask=causal_blocked)[0], **TOL)


def test_add_bias_kv_and_zero_attn():
    for kw in ({"add_bias_kv": True}, {"add_zero_attn": True}, {"add_bias_kv": True, "add_zero_attn": True}):
        ref, ours = pair(**kw)
        pad = torch.zeros(3, 5, dtype=torch.bool)
        pad[1, 3:] = True
        check(ours, ref, *inputs(), key_padding_mask=pad, attn_mask=rand(4, 5, seed=3) > 1.0)


def test_need_weights_and_average():
    ref, ours = pair()
    check(ours, ref, *inputs(), need_weights=False)
    check(ours, ref, *inputs(), average_attn_weights=False)


def test_unbatched_inputs():
    ref, ours = pair()
    q, k, v = (x[:, 0] for x in inputs())
    check(ours, ref, q, k, v)


def test_dropout_eval_matches_and_train_drops():
    ref, ours = pair(dropout=0.5)
    check(ours, ref, *inputs())  # eval mode: no dropout in either
    ref1, ours1 = pair(dropout=1.0)
    ref1.train(), ours1.train()
    out, a = ours1(*inputs())
    out_ref, _ = ref1(*inputs())
    torch.testing.assert_close(out, out_ref, **TOL)  # every weight dropped: the output is the out_proj bias
    assert torch.all(a == 0)
    ours.train()
    a = ours(*inputs(), average_attn_weights=False)[1]
    assert (a == 0).any() and (a >= 0).all() and (a.amax() > 1 / 5)  # dropped or rescaled by 1/(1-p)


@pytest.mark.catalog("eq40")
def test_load_state_dict_of_torch_module():
    ref, _ = pair(add_bias_kv=True)
    ours = TorchMultiheadAttention(8, 2, add_bias_kv=True, dtype=D64).eval()
    ours.load_state_dict(ref.state_dict())
    check(ours, ref, *inputs())
    ref2, _ = pair(kdim=6, vdim=3, seed=1)
    mapped = from_torch_state_dict(ref2.state_dict())
    assert set(mapped) == {
        "W_Q.weight",
        "W_K.weight",
        "W_V.weight",
        "W_Q.bias",
        "W_K.bias",
        "W_V.bias",
        "W_O.weight",
        "W_O.bias",
    }
    with pytest.raises(ValueError, match="not a torch.nn.MultiheadAttention state dict"):
        from_torch_state_dict({"W_O.weight": torch.zeros(2, 2)})


@pytest.mark.parametrize("drop", ["out_proj.weight", "k_proj_weight"])
def test_from_torch_state_dict_names_a_missing_key_in_a_value_error(drop):
    ref = nn.MultiheadAttention(8, 2, kdim=4, vdim=4)  # separate q/k/v projection weights
    sd = {k: v for k, v in ref.state_dict().items() if k != drop}
    with pytest.raises(ValueError, match=drop):
        from_torch_state_dict(sd)
    with pytest.raises(ValueError, match=drop):
        TorchMultiheadAttention(8, 2, kdim=4, vdim=4).load_state_dict(sd)


def test_survey_form_has_every_option():
    # the survey-form module (True = may attend, batch first) with the same weights
    ref, drop_in = pair(batch_first=True)
    m = mh.MultiHeadAttention(8, 2, bias=True, batch_first=True, dtype=D64).eval()
    m.load_state_dict(drop_in.state_dict())
    q, k, v = inputs(batch_first=True)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[2, 2:] = True
    out, a = m(
        q, k, ~torch.zeros(4, 5, dtype=torch.bool)[None], X_v=v, key_padding_mask=~pad, average_attn_weights=True
    )
    out_ref, a_ref = ref(q, k, v, key_padding_mask=pad)
    torch.testing.assert_close(out, out_ref, **TOL)
    torch.testing.assert_close(a, a_ref, **TOL)


def test_ambiguous_padding_mask_is_an_error():
    m = mh.MultiHeadAttention(8, 2)
    X = rand(4, 4, 8)  # B = n = 4
    pad = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="ambiguous"):
        m(X, mask=pad)
    out, _ = m(X, key_padding_mask=pad)
    torch.testing.assert_close(out, m(X, mask=pad[None])[0])


def test_functional_grouped_query_heads_match_repeated_weights():
    Q, F = rand(2, 3, 8), rand(2, 5, 8, seed=1)
    W_Q, W_O = rand(8, 8, seed=2), rand(8, 8, seed=3)
    W_K, W_V = rand(4, 8, seed=4), rand(4, 8, seed=5)  # 2 key/value heads of width 2 for 4 query heads
    out, a = mh.multi_head_attention(Q, F, F, W_Q, W_K, W_V, W_O, 4, h_kv=2)
    rep = lambda W: W.reshape(2, 2, 8).repeat_interleave(2, 0).reshape(8, 8)
    ref, a_ref = mh.multi_head_attention(Q, F, F, W_Q, rep(W_K), rep(W_V), W_O, 4)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(a, a_ref)
