"""Small helpers shared by the test modules."""

from __future__ import annotations

import torch


def rand(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A standard-normal tensor from its own seeded generator (independent of global RNG state)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
