"""Tests for RoPE and ALiBi (beyond the survey)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond import positions as pos
from attnsurvey.masking import causal_mask

from .helpers import rand


@pytest.mark.catalog("extra:rope")
def test_rope_matches_complex_rotation():
    X = rand(2, 9, 8, dtype=torch.float64)
    z = torch.complex(X[..., 0::2], X[..., 1::2])  # pair i as one complex number
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    t = torch.arange(3, 12, dtype=torch.float64)[:, None]  # offset 3
    rotated = z * torch.exp(1j * t * theta)
    out = pos.apply_rope(X, offset=3)
    torch.testing.assert_close(out[..., 0::2], rotated.real)
    torch.testing.assert_close(out[..., 1::2], rotated.imag)


@pytest.mark.catalog("extra:rope")
def test_rope_score_depends_only_on_offset():
    q, k = rand(1, 16, seed=1, dtype=torch.float64), rand(1, 16, seed=2, dtype=torch.float64)

    def score(s: int, t: int) -> float:
        return float(pos.apply_rope(q, offset=s) @ pos.apply_rope(k, offset=t).T)

    for offset in range(-40, 41, 3):
        starts = [s for s in (0, 7, 50, 123, 300) if s + offset >= 0]
        values = [score(s, s + offset) for s in starts]
        assert max(values) - min(values) < 1e-9, (offset, values)
    # ...and it does depend on the offset (a test that could not fail would be useless)
    assert abs(score(0, 1) - score(0, 5)) > 1e-3


@pytest.mark.catalog("extra:rope")
def test_rope_preserves_norms_and_offset_composes():
    X = rand(3, 7, 6, dtype=torch.float64)
    R = pos.apply_rope(X, offset=5)
    torch.testing.assert_close(R.norm(dim=-1), X.norm(dim=-1))
    # rotating by 5 is rotating the row-shifted sequence: row t at offset 5 == row t of positions 5..11
    long = pos.apply_rope(torch.cat([torch.zeros(3, 5, 6, dtype=torch.float64), X], dim=1))
    torch.testing.assert_close(R, long[:, 5:])


@pytest.mark.catalog("extra:rope")
def test_rope_bad_inputs_raise():
    with pytest.raises(ValueError, match="even d"):
        pos.apply_rope(rand(2, 5))
    for offset in (-1, 1.5):
        with pytest.raises(ValueError, match="apply_rope needs offset to be an integer >= 0"):
            pos.apply_rope(rand(2, 4), offset=offset)
    for h in (0, 2.5):
        with pytest.raises(ValueError, match="integer >= 1"):
            pos.alibi_slopes(h)
    with pytest.raises(ValueError, match="even head size"):
        pos.RotarySelfAttention(6, 2)


@pytest.mark.catalog("extra:alibi")
def test_alibi_slopes_as_in_press_et_al():
    torch.testing.assert_close(pos.alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)], dtype=torch.float64))
    s12 = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(pos.alibi_slopes(12), torch.tensor(s12, dtype=torch.float64))
    torch.testing.assert_close(pos.alibi_slopes(1), torch.tensor([2.0**-8], dtype=torch.float64))
    B = pos.alibi_bias(pos.alibi_slopes(2), 3, 3)
    torch.testing.assert_close(B[0], -(2**-4) * torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="needs h to be an integer >= 1"):
        pos.alibi_slopes(0)


@pytest.mark.catalog("extra:alibi")
def test_alibi_attention_equals_sdpa_with_float_bias():
    h, n = 4, 6
    q, k, v = rand(2, h, n, 8, seed=1), rand(2, h, n, 8, seed=2), rand(2, h, n, 5, seed=3)
    slopes = pos.alibi_slopes(h).float()
    c, _ = pos.alibi_attention(q, k, v, slopes, causal_mask(n))
    bias = pos.alibi_bias(slopes, n, n).masked_fill(~causal_mask(n), -math.inf)
    torch.testing.assert_close(c, F_.scaled_dot_product_attention(q, k, v, attn_mask=bias), atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="number of slopes"):
        pos.alibi_attention(q, k, v, slopes[:3])


def _rotate(X: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE written independently: pair (x_2i, x_2i+1) of row t as a complex number times exp(i t theta_i)."""
    n, d = X.shape[-2], X.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.view_as_complex(X.double().reshape(*X.shape[:-1], d // 2, 2).contiguous())
    z = z * torch.polar(torch.ones(n, d // 2, dtype=torch.float64), torch.arange(n)[:, None] * theta)
    return torch.view_as_real(z).reshape(X.shape).to(X.dtype)


@pytest.mark.catalog("extra:rope")
def test_rope_attention_is_sdpa_on_rotated_queries_and_keys():
    q, k, v = rand(2, 3, 7, 8, seed=1), rand(2, 3, 7, 8, seed=2), rand(2, 3, 7, 5, seed=3)
    c, a = pos.rope_attention(q, k, v, causal_mask(7))
    ref = F_.scaled_dot_product_attention(_rotate(q), _rotate(k), v, is_causal=True)  # V is not rotated
    torch.testing.assert_close(c, ref, atol=1e-6, rtol=1e-5)
    e = _rotate(q) @ _rotate(k).transpose(-1, -2) / math.sqrt(8)
    torch.testing.assert_close(a, torch.softmax(e.masked_fill(~causal_mask(7), -math.inf), -1), atol=1e-6, rtol=1e-5)


@pytest.mark.catalog("extra:rope")
def test_rotary_module_equals_sdpa_per_head_with_its_own_weights():
    torch.manual_seed(0)
    m = pos.RotarySelfAttention(16, 4)
    X = rand(3, 6, 16)
    out, _ = m(X, mask=causal_mask(6))
    q, k, v = (lin(X).view(3, 6, 4, 4).transpose(1, 2) for lin in (m.W_Q, m.W_K, m.W_V))
    ref = F_.scaled_dot_product_attention(_rotate(q), _rotate(k), v, is_causal=True)
    torch.testing.assert_close(out, m.W_O(ref.transpose(1, 2).reshape(3, 6, 16)), atol=1e-6, rtol=1e-5)


@pytest.mark.catalog("extra:alibi")
@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_alibi_module_equals_sdpa_with_the_bias_as_float_mask(batch):
    """The per-head bias reaches every head with X's batch axes, unbatched, batched and with two batch axes."""
    torch.manual_seed(0)
    m = pos.ALiBiSelfAttention(16, 4)
    X = rand(*batch, 6, 16)
    out, a = m(X)
    q, k, v = (lin(X).unflatten(-1, (4, 4)).transpose(-2, -3) for lin in (m.W_Q, m.W_K, m.W_V))
    B = pos.alibi_bias(pos.alibi_slopes(4), 6, 6).float()  # (h, n, n), broadcast over the batch axes
    ref = F_.scaled_dot_product_attention(q, k, v, attn_mask=B)
    torch.testing.assert_close(out, m.W_O(ref.transpose(-2, -3).flatten(-2)), atol=1e-6, rtol=1e-5)
    assert a.shape == (*batch, 4, 6, 6)


@pytest.mark.catalog("extra:rope", "extra:alibi", by_param=True)
@pytest.mark.parametrize("cls", [pos.RotarySelfAttention, pos.ALiBiSelfAttention], ids=["extra:rope", "extra:alibi"])
def test_position_modules_take_causal_and_padding_masks_as_sdpa(cls):
    """is_causal and key_padding_mask reach the core: SDPA with the rotated queries and keys (RoPE) or the
    ALiBi bias, under the causal mask combined with the padding mask, gives the same output."""
    torch.manual_seed(0)
    m = cls(16, 4)
    X = rand(2, 6, 16)
    real = torch.arange(6) < torch.tensor([[6], [4]])  # (2, 6): the second example has 4 real tokens
    out, a = m(X, is_causal=True, key_padding_mask=real)
    q, k, v = (lin(X).unflatten(-1, (4, 4)).transpose(-2, -3) for lin in (m.W_Q, m.W_K, m.W_V))
    allowed = causal_mask(6) & real[:, None, None, :]  # (2, 1, 6, 6)
    if cls is pos.RotarySelfAttention:
        ref = F_.scaled_dot_product_attention(_rotate(q), _rotate(k), v, attn_mask=allowed)
    else:
        B = pos.alibi_bias(pos.alibi_slopes(4), 6, 6).float()
        ref = F_.scaled_dot_product_attention(q, k, v, attn_mask=B.masked_fill(~allowed, -math.inf))
        with pytest.raises(ValueError, match="sets bias itself"):
            m(X, bias=torch.zeros(4, 6, 6))
    torch.testing.assert_close(out, m.W_O(ref.transpose(-2, -3).flatten(-2)), atol=1e-6, rtol=1e-5)
    assert bool((a[1, ..., 4:] == 0).all()) and bool((a.triu(1) == 0).all())


@pytest.mark.catalog("extra:rope", "extra:alibi")
@pytest.mark.parametrize("cls", [pos.RotarySelfAttention, pos.ALiBiSelfAttention])
def test_position_modules_accept_any_length(cls):
    torch.manual_seed(0)
    m = cls(16, 4)
    for n in (3, 64, 200):
        out, a = m(rand(2, n, 16), mask=causal_mask(n))
        assert out.shape == (2, n, 16) and a.shape == (2, 4, n, n)
        assert torch.all(a.triu(1) == 0)
    with pytest.raises(ValueError, match="self-attention"):
        m(rand(1, 3, 16), rand(1, 3, 16))
    # without positions a module would be permutation-equivariant; these are not
    X = rand(1, 8, 16, seed=5)
    perm = torch.tensor([3, 1, 7, 0, 2, 6, 4, 5])
    assert not torch.allclose(m(X[:, perm])[0], m(X)[0][:, perm], atol=1e-4)


def test_copy_back_batch_oracle():
    from attnsurvey.data.sequences import IGNORE, copy_back_batch

    x, y = copy_back_batch(4, 10, 5, 3, torch.Generator().manual_seed(0))
    for b in range(4):
        for t in range(10):
            assert int(y[b, t]) == (IGNORE if t < 3 else int(x[b, t - 3]))
    with pytest.raises(ValueError, match="k < n"):
        copy_back_batch(1, 3, 5, 3)


def test_position_tagger_encodings_and_learned_limit():
    from attnsurvey.experiments.long_positions import ENCODINGS, PositionTagger, copy_back_accuracy

    x = torch.randint(0, 8, (2, 20), generator=torch.Generator().manual_seed(0))
    for enc in ENCODINGS:
        torch.manual_seed(0)
        m = PositionTagger(8, enc, max_len=16).eval()
        if enc == "learned":
            with pytest.raises(ValueError, match="max_len"):
                m(x)
            assert math.isnan(copy_back_accuracy(m, 20))
        else:
            logits, a = m(x)
            assert logits.shape == (2, 20, 8) and torch.all(a.triu(1) == 0)  # causal
    with pytest.raises(ValueError, match="encoding"):
        PositionTagger(8, "xpos")


@pytest.mark.parametrize("fn", ["rope_attention", "alibi_attention"])
def test_wrappers_refuse_a_float_mask(fn):
    """Review 2, E: a float 0/1 mask was added to the scores as a bias (weight 0.25 on a 'masked' key)."""
    Q, K, V = rand(3, 2, 3, 4, seed=1).unbind(0)
    keep = torch.tensor([True, True, False]).expand(2, 3, 3)
    call = {
        "rope_attention": lambda m: pos.rope_attention(Q, K, V, m),
        "alibi_attention": lambda m: pos.alibi_attention(Q, K, V, pos.alibi_slopes(2), m),
    }[fn]
    assert torch.equal(call(keep)[1][..., 2], torch.zeros(2, 3))  # the boolean mask: no weight on key 2
    with pytest.raises(ValueError, match=rf"{fn}: mask must be a boolean tensor .*dtype=torch.float32"):
        call(keep.float())


def test_alibi_follows_the_device_of_its_slopes():
    """Review 2, F: alibi_bias built its distances on the CPU, so ALiBiSelfAttention failed on another device."""
    slopes = pos.alibi_slopes(2).to("meta")
    assert pos.alibi_bias(slopes, 3, 4).device.type == "meta"
    m = pos.ALiBiSelfAttention(8, 2).to("meta")
    out, a = m(torch.empty(2, 5, 8, device="meta"))
    assert out.device.type == a.device.type == "meta" and a.shape == (2, 2, 5, 5)
    with pytest.raises(ValueError, match=r"alibi_bias needs n_q to be an integer >= 0, got n_q=-1"):
        pos.alibi_bias(pos.alibi_slopes(2), -1, 3)


# --------------------------------------------------------------------------- RoPE layouts (rotate-half)


def _rotate_half_by_hand(X: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """GPT-NeoX/LLaMA's formula, written out: x cos + rotate_half(x) sin with the angles repeated over both halves."""
    n, d = X.shape[-2], X.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * theta
    cos, sin = torch.cat([angles.cos(), angles.cos()], -1), torch.cat([angles.sin(), angles.sin()], -1)
    rotated = torch.cat([-X[..., d // 2 :], X[..., : d // 2]], -1)
    return (X * cos + rotated * sin).to(X.dtype)


@pytest.mark.catalog("extra:rope-rotate-half")
def test_rope_half_convention_matches_the_rotate_half_formula():
    X = rand(3, 7, 12, dtype=torch.float64)
    torch.testing.assert_close(pos.apply_rope(X, convention="half"), _rotate_half_by_hand(X))
    # and the two layouts differ on the same vector (so the test above cannot pass for the default layout)
    assert (pos.apply_rope(X, convention="half") - pos.apply_rope(X)).abs().max() > 0.1


@pytest.mark.catalog("extra:rope-rotate-half")
def test_rope_permutation_by_hand_and_inverse():
    assert pos.rope_permutation(4).tolist() == [0, 2, 1, 3]
    assert pos.rope_permutation(6).tolist() == [0, 3, 1, 4, 2, 5]
    assert pos.rope_permutation(6, "interleaved", "half").tolist() == [0, 2, 4, 1, 3, 5]
    assert pos.rope_permutation(6, "half", "half").tolist() == list(range(6))
    # rows of W for h = 2 heads of d_k = 4: the permutation acts inside each head
    W = torch.arange(8.0)[:, None]
    assert pos.permute_rope_rows(W, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    back = pos.permute_rope_rows(pos.permute_rope_rows(W, 2), 2, "interleaved", "half")
    torch.testing.assert_close(back, W, atol=0, rtol=0)


@pytest.mark.catalog("extra:rope-rotate-half")
@settings(max_examples=20)
@given(half_d=st.integers(1, 6), n=st.integers(1, 9), offset=st.integers(0, 50))
def test_layouts_agree_after_the_permutation(half_d, n, offset):
    d = 2 * half_d
    X = rand(2, n, d, seed=half_d * 100 + n, dtype=torch.float64)
    perm = pos.rope_permutation(d)
    torch.testing.assert_close(
        pos.apply_rope(X[..., perm], offset, convention="interleaved"),
        pos.apply_rope(X, offset, convention="half")[..., perm],
    )


@pytest.mark.catalog("extra:rope-rotate-half")
def test_permuted_weights_give_the_same_attention_and_unpermuted_do_not():
    torch.manual_seed(0)
    half = pos.RotarySelfAttention(24, 3, convention="half").double()
    inter = pos.RotarySelfAttention(24, 3).double()
    state = {k: v.clone() for k, v in half.state_dict().items()}
    inter.load_state_dict(state)  # the same weights, the other layout: a different model
    X = rand(2, 10, 24, seed=3, dtype=torch.float64)
    assert (inter(X)[0] - half(X)[0]).abs().max() > 1e-3
    for name in ("W_Q.weight", "W_Q.bias", "W_K.weight", "W_K.bias"):
        state[name] = pos.permute_rope_rows(state[name], 3)
    inter.load_state_dict(state)
    torch.testing.assert_close(inter(X, is_causal=True), half(X, is_causal=True))


@pytest.mark.catalog("extra:rope", "extra:rope-rotate-half")
def test_rope_base_and_convention_are_checked():
    X = rand(1, 3, 4)
    for base in (0.0, -10.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="base"):
            pos.apply_rope(X, base=base)
    with pytest.raises(ValueError, match="base"):
        pos.RotarySelfAttention(8, 2, base=0.0)
    with pytest.raises(ValueError, match="convention"):
        pos.apply_rope(X, convention="neox")
    with pytest.raises(ValueError, match="even head size"):
        pos.rope_permutation(5)
    with pytest.raises(ValueError, match=r"h=3 dividing its rows, got \(8, 2\)"):
        pos.permute_rope_rows(torch.zeros(8, 2), 3)
