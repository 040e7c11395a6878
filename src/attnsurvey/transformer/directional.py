"""Directional self-attention masks (DiSAN, Shen et al., 2018; review ③).

A forward mask lets token ``i`` attend only to later tokens ``j > i``; a
backward mask only to earlier tokens ``j < i``. DiSAN adds ``0`` / ``-inf``
matrices to the scores; here the same masks are boolean (``True`` = may attend)
and go through :func:`attnsurvey.masking.masked_softmax`, which is identical
and also handles the first (backward) or last (forward) token, whose row is
empty: it gets zero weights and a zero context. The diagonal is excluded,
as in DiSAN. A causal mask is the backward mask with the diagonal allowed.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..catalog import catalogued


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"sequence length n must be a positive int, got n={n!r}")


@catalogued(
    "extra:directional-masks",
    title="Forward and backward directional self-attention masks (DiSAN, Shen et al. 2018)",
    chapter="chapters/ch03_3_3_transformer.ipynb",
)
def forward_mask(n: int, device: torch.device | None = None) -> Tensor:
    """Boolean ``(n, n)`` DiSAN forward mask: ``M[i, j] = j > i`` (``True`` = may attend).

    Raises ``ValueError`` unless ``n >= 1``.
    """
    _check_n(n)
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


@catalogued("extra:directional-masks")
def backward_mask(n: int, device: torch.device | None = None) -> Tensor:
    """Boolean ``(n, n)`` DiSAN backward mask: ``M[i, j] = j < i`` (``True`` = may attend).

    Raises ``ValueError`` unless ``n >= 1``.
    """
    _check_n(n)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(-1)


@catalogued("extra:directional-masks")
def additive_mask(mask: Tensor) -> Tensor:
    """The review's additive form of a boolean mask: ``0`` where allowed, ``-inf`` where not."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be boolean (True = may attend), got dtype={mask.dtype}")
    return torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
