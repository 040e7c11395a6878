"""Helpers shared by the ``transformers`` adapters: the library's additive mask, an eager config, random weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def additive_mask(mask: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """The book's boolean mask as the additive mask of ``transformers`` (0 allowed, finfo.min blocked).

    Kept apart from :func:`attnsurvey.masking.additive_mask` on purpose: that one fills
    ``-inf`` (torch's convention), this one the library's own fill, ``finfo(dtype).min``,
    so the models under comparison get the mask exactly as their own code builds it.

    Args:
        mask: boolean, ``True`` = may attend.
        dtype: the scores' dtype.

    Shape:
        mask ``(..., n_q, n_f)``; returns the same shape.

    Returns:
        The float mask the models add to their scores.
    """
    zero = torch.zeros((), dtype=dtype)
    return torch.where(mask, zero, torch.full((), torch.finfo(dtype).min, dtype=dtype))


def eager_config(cls: Any, **kw: Any) -> Any:
    """A ``transformers`` configuration on the eager attention path (the one whose code the adapters read).

    Args:
        cls: the configuration class.
        **kw: its arguments.

    Returns:
        The configuration.
    """
    config = cls(**kw)
    config._attn_implementation = "eager"
    return config


def random_init(module: Any, seed: int) -> Any:
    """A module with seeded random weights (``N(0, 0.25^2)``), in float64 and eval mode.

    Args:
        module: a ``transformers`` module.
        seed: the generator's seed.

    Returns:
        The module itself.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.25)
    return module.double().eval()
