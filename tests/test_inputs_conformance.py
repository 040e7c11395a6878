"""Bad and edge-case inputs of the conformance adapters (attnsurvey.conformance): clear errors, inert masked slots."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnsurvey._checks import InputTypeError
from attnsurvey.conformance import torch_target as tt
from attnsurvey.conformance import toy
from attnsurvey.conformance.transformers_target import interleave_permutation
from attnsurvey.conformance.x_transformers_target import grouping_permutation


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tt.rand(2, 2, 3, 4, seed=0), tt.rand(2, 2, 5, 4, seed=1), tt.rand(2, 2, 5, 4, seed=2)


@pytest.mark.parametrize("arg", [0, 1, 2])
def test_sdpa_adapter_refuses_integer_tensors_by_name(arg):
    args = list(_qkv())
    args[arg] = args[arg].long()
    with pytest.raises(TypeError, match=f"^{'QKV'[arg]} must be a floating-point tensor"):
        tt.sdpa_adapter(*args)


def test_sdpa_adapter_keeps_a_poisoned_key_nobody_attends_inert():
    Q, K, V = _qkv()
    mask = tt.example_mask(3, 5)
    mask[:, -1] = False  # no query may attend the last key
    want = F.scaled_dot_product_attention(Q, K[..., :-1, :], V[..., :-1, :], attn_mask=mask[:, :-1])  # oracle
    Kp, Vp = K.clone().requires_grad_(), V.clone()
    with torch.no_grad():
        Kp[..., -1, :] = float("nan")
    Vp[..., -1, :] = float("inf")
    got = tt.sdpa_adapter(Q, Kp, Vp, mask)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    got.sum().backward()
    assert Kp.grad is not None and bool(torch.isfinite(Kp.grad).all())


@pytest.mark.parametrize(
    "mask,match",
    [
        (torch.ones(2, 3, 5, dtype=torch.bool), r"needs mask \(n_q, n_f\).*got \(2, 3, 5\)"),
        (torch.ones(2, 5, dtype=torch.bool), r"mask of shape \(2, 5\) does not broadcast"),
        (torch.ones(3, 5), "mask must be a boolean tensor"),
    ],
)
def test_sdpa_adapter_refuses_masks_it_would_misread(mask, match):
    with pytest.raises(ValueError, match=match):
        tt.sdpa_adapter(*_qkv(), mask)


def test_sdpa_adapter_accepts_the_documented_and_the_rank4_mask_alike():
    Q, K, V = _qkv()
    mask = tt.example_mask(3, 5)
    torch.testing.assert_close(
        tt.sdpa_adapter(Q, K, V, mask), tt.sdpa_adapter(Q, K, V, mask[None, None].expand(2, 2, 3, 5))
    )


@pytest.mark.parametrize("kw", [{"n_q": -1, "n_f": 4}, {"n_q": 2.5, "n_f": 4}, {"n_q": 3, "n_f": -1}])
def test_example_mask_refuses_invalid_sizes(kw):
    with pytest.raises(ValueError, match="example_mask needs n_[qf] to be an integer >= 0"):
        tt.example_mask(**kw)
    with pytest.raises(ValueError, match="dead_row in"):
        tt.example_mask(3, 4, dead_row=3)


def test_linear_refuses_non_tensors_and_mismatched_bias():
    W, b = tt.rand(3, 4, seed=0), tt.rand(3, seed=1)
    lin = tt.linear(W, b)
    torch.testing.assert_close(lin(tt.rand(2, 4, seed=2)), tt.rand(2, 4, seed=2) @ W.T + b)  # hand: x W^T + b
    for bad in (W.tolist(), W.numpy(), W.long()):
        with pytest.raises(TypeError, match="^W must be a"):
            tt.linear(bad, b)
    with pytest.raises(ValueError, match=r"b of shape \(d_out,\) = \(3,\), got b \(4,\)"):
        tt.linear(W, tt.rand(4, seed=1))


@pytest.mark.parametrize("arg", [0, 1, 2])
def test_toy_attention_refuses_lists(arg):
    args = [tt.rand(2, 3, 2, 4, seed=0), tt.rand(2, 5, 2, 4, seed=1), tt.rand(2, 5, 2, 4, seed=2)]
    assert toy.ToyAttention()(*args).shape == (2, 3, 2, 4)
    args[arg] = args[arg].tolist()
    with pytest.raises(TypeError, match=f"^{'qkv'[arg]} must be a"):
        toy.ToyAttention()(*args)


def test_interleave_permutation_needs_an_even_positive_size():
    assert interleave_permutation(6).tolist() == [0, 3, 1, 4, 2, 5]  # hand
    for d in (0, -1, 3):
        with pytest.raises(ValueError, match=f"even head size d >= 2, got d={d}"):
            interleave_permutation(d)
    with pytest.raises(InputTypeError, match="needs d to be an integer, got d=2.5"):
        interleave_permutation(2.5)


def test_grouping_permutation_needs_positive_dividing_head_counts():
    assert grouping_permutation(4, 2).tolist() == [0, 2, 1, 3]  # hand: (b % r) h_kv + b // r with r = 2
    for h, h_kv, match in (
        (0, 1, "h to be"),
        (-1, 1, "h to be"),
        (2.5, 1, "h to be"),
        (4, 0, "h_kv to be"),
        (4, 3, "divide"),
    ):
        with pytest.raises(ValueError, match=match):
            grouping_permutation(h, h_kv)
