"""Masks and the masked softmax used by every alignment function.

Mask convention (the same as ``torch.nn.functional.scaled_dot_product_attention``):
a boolean tensor, broadcastable to the scores ``(..., n_q, n_f)``, where
``True`` means *this query may attend to this feature vector*.
``torch.nn.MultiheadAttention`` uses the opposite polarity; convert with ``~mask``.

A query whose row is masked everywhere has nothing to attend to. We then return
all-zero attention weights, so its context vector is the zero vector (not NaN
and not a uniform average). Chapters and tests rely on this.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .catalog import catalogued


def check_mask(mask: Tensor, scores_shape: torch.Size, symbol: str = "mask") -> Tensor:
    """Validate ``mask`` against scores of shape ``(..., n_q, n_f)`` and return it.

    Raises ``ValueError`` if the mask is not boolean or does not broadcast to the
    scores without changing their shape.
    """
    if not isinstance(mask, Tensor):
        raise ValueError(f"{symbol} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{symbol} must be boolean (True = may attend), got dtype={mask.dtype}"
        )
    try:
        out = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        out = None
    if out != scores_shape:
        raise ValueError(
            f"{symbol} of shape {tuple(mask.shape)} does not broadcast to the scores e "
            f"of shape {tuple(scores_shape)} (..., n_q, n_f)"
        )
    return mask


@catalogued("eq3", "eq25")
def masked_softmax(e: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax of scores ``e`` over ``dim``, ignoring positions where ``mask`` is False.

    Numerically safe for very large scores (it subtracts the row maximum) and
    for fully-masked rows, which get all-zero weights. ``mask`` follows the
    convention in this module's docstring. Raises ``ValueError`` for a bad mask.
    """
    if mask is None:
        return torch.softmax(e, dim=dim)
    check_mask(mask, e.shape)
    # Fill with the most negative finite number rather than -inf: a fully-masked
    # row then gives a finite (uniform) softmax with finite gradients, which we
    # zero out afterwards instead of producing NaN.
    filled = e.masked_fill(~mask, torch.finfo(e.dtype).min)
    a = torch.softmax(filled, dim=dim)
    a = a * mask  # exact zeros where masked, including whole masked rows
    return a


def causal_mask(n_q: int, n_f: int | None = None, device: torch.device | None = None) -> Tensor:
    """Boolean ``(n_q, n_f)`` mask where query ``i`` may attend to positions ``<= i``."""
    n_f = n_q if n_f is None else n_f
    return torch.ones(n_q, n_f, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: Tensor, n_f: int) -> Tensor:
    """Boolean ``(batch, 1, n_f)`` mask that allows the first ``lengths[b]`` positions.

    Raises ``ValueError`` if a length is negative or exceeds ``n_f``.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (batch,), got shape {tuple(lengths.shape)}")
    if (lengths < 0).any() or (lengths > n_f).any():
        raise ValueError(f"lengths must lie in [0, n_f={n_f}], got {lengths.tolist()}")
    pos = torch.arange(n_f, device=lengths.device)
    return (pos[None, :] < lengths[:, None])[:, None, :]
