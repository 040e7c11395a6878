"""Synthetic "look up one position" task: exactly one feature vector matters.

A sequence of ``n_f`` tokens, each one of ``n_classes`` symbols; feature vector
``l`` is ``[one_hot(token_l), one_hot(l)]`` plus a little Gaussian noise. The
query names a position ``t`` (``q = one_hot(t)``) and the label is the token at
that position. The ideal alignment puts all its weight on ``l = t``; that
ground truth is returned as ``t``, so how focused an alignment is can be
measured exactly. Because the query is a position, the monotonic local
alignment ``p = t`` is the oracle window centre.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor


def lookup_batch(
    batch: int, n_f: int, n_classes: int, generator: torch.Generator | None = None, noise: float = 0.1
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One batch ``(F, q, t, y)`` of the look-up task.

    F: ``(batch, n_f, n_classes + n_f)`` feature vectors; q: ``(batch, n_f)``
    one-hot queries; t: ``(batch,)`` the position that matters; y: ``(batch,)``
    the label, ``y = token[t]``. Raises ``ValueError`` for sizes below 1 or
    negative noise.
    """
    if batch < 1 or n_f < 1 or n_classes < 1:
        raise ValueError(f"lookup_batch needs batch, n_f, n_classes >= 1, got {batch}, {n_f}, {n_classes}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    tokens = torch.randint(0, n_classes, (batch, n_f), generator=generator)
    pos = torch.arange(n_f).expand(batch, n_f)
    F = torch.cat(
        [torch.nn.functional.one_hot(tokens, n_classes), torch.nn.functional.one_hot(pos, n_f)], dim=-1
    ).float()
    F = F + noise * torch.randn(F.shape, generator=generator)
    t = torch.randint(0, n_f, (batch,), generator=generator)
    q = torch.nn.functional.one_hot(t, n_f).float()
    y = tokens.gather(1, t[:, None]).squeeze(1)
    return F, q, t, y


def lookup_batches(
    steps: int, batch: int, n_f: int, n_classes: int, generator: torch.Generator | None = None
) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Yield ``steps`` batches of :func:`lookup_batch` (for ``attnsurvey.training.train``)."""
    for _ in range(steps):
        yield lookup_batch(batch, n_f, n_classes, generator)
