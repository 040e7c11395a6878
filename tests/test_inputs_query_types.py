"""Inputs at the boundary of §3.3.1 query types and capsule attention: NaN padding inert in every gradient,
lists refused at the entry, invalid sizes refused when the module is built."""

from __future__ import annotations

import pytest
import torch

from attnsurvey._checks import InputTypeError
from attnsurvey.query_related.capsule import CapsuleAttention
from attnsurvey.query_related.types import LearnedQueryAttention, self_attention


def padded(B: int = 2, n_f: int = 5, d: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    F = torch.randn(B, n_f, d, dtype=torch.float64)
    mask = torch.ones(B, n_f, dtype=torch.bool)
    mask[:, -1] = False
    poisoned = F.clone()
    poisoned[:, -1] = float("nan")
    return F, poisoned, mask


@pytest.mark.parametrize("make", [lambda: LearnedQueryAttention(4, 3), lambda: CapsuleAttention(4, 2, 3)])
def test_nan_in_a_padded_slot_reaches_no_parameter_gradient(make):
    F, poisoned, mask = padded()
    torch.manual_seed(1)
    module = make().double()
    out = module(poisoned, mask)
    first = out[0] if isinstance(out, tuple) else out.c
    first.sum().backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    clean = module(F, mask)
    clean_first = clean[0] if isinstance(clean, tuple) else clean.c
    torch.testing.assert_close(first, clean_first)  # the padded slot does not change the output either


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_invalid_sizes_are_refused_when_built(bad):
    with pytest.raises(ValueError, match="d_f"):
        LearnedQueryAttention(bad)
    with pytest.raises(ValueError, match="d_k"):
        LearnedQueryAttention(4, bad)
    with pytest.raises(ValueError, match="d_y"):
        CapsuleAttention(4, bad)


def test_lists_are_refused_with_the_symbol():
    F, _, _ = padded()
    W = torch.eye(4, dtype=torch.float64)
    with pytest.raises(InputTypeError, match="W_Q"):
        self_attention(F, W.tolist(), W, W)  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="F"):
        LearnedQueryAttention(4).double()(F.numpy())  # type: ignore[arg-type]
