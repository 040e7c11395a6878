"""Synthetic sequence tasks for the Transformer chapters (known answers, made in code)."""
from __future__ import annotations

import torch
from torch import Tensor


def reversal_batch(batch: int, n: int, vocab: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random token sequences ``x`` ``(batch, n)`` in ``[0, vocab)`` and targets ``y = reversed(x)``.

    The answer at position ``i`` is the token at position ``n - 1 - i``: a model
    must know *where* each token is, so a position-blind model cannot solve it.
    Raises ``ValueError`` for non-positive sizes.
    """
    if batch < 1 or n < 1 or vocab < 2:
        raise ValueError(f"need batch >= 1, n >= 1, vocab >= 2; got batch={batch}, n={n}, vocab={vocab}")
    x = torch.randint(0, vocab, (batch, n), generator=generator)
    return x, x.flip(-1)


def sort_batch(batch: int, n: int, vocab: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random sequences ``x`` ``(batch, n)`` and targets ``y = sorted(x)`` (ascending)."""
    if batch < 1 or n < 1 or vocab < 2:
        raise ValueError(f"need batch >= 1, n >= 1, vocab >= 2; got batch={batch}, n={n}, vocab={vocab}")
    x = torch.randint(0, vocab, (batch, n), generator=generator)
    return x, x.sort(-1).values
