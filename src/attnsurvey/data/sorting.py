"""Synthetic sorting task for pointer networks (nndl 8.2.1.5).

The input is a set of ``n`` numbers; the output is the sequence of their
indices in ascending order of value, so every output symbol is a *position of
the input*. The book's example: ``20, 5, 10 -> pointers 1, 2, 0`` (0-based),
i.e. ``5, 10, 20``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from .._checks import check_counts, check_sizes
from ..catalog import catalogued


@catalogued("extra:pointer-network")
def sorting_batch(batch: int, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """A batch of numbers to sort and the pointers that sort them.

    Returns ``x`` ``(batch, n, 1)`` with values uniform in ``[0, 1)`` and
    targets ``(batch, n)``: ``targets[b, m]`` is the index of the ``m``-th
    smallest value (``x[b, targets[b], 0]`` is ascending).
    Raises ``ValueError`` unless ``batch >= 1`` and ``n >= 1``.
    """
    if batch < 1 or n < 1:
        raise ValueError(f"sorting_batch needs batch >= 1 and n >= 1, got batch={batch}, n={n}")
    x = torch.rand(batch, n, 1, generator=generator)
    return x, x.squeeze(-1).argsort(dim=-1)


def sorting_batches(
    steps: int, batch: int, n_min: int, n_max: int, generator: torch.Generator | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield ``steps`` batches from :func:`sorting_batch`, each with a length drawn from ``[n_min, n_max]``."""
    check_sizes("sorting_batches", batch=batch, n_min=n_min, n_max=n_max)
    check_counts("sorting_batches", steps=steps)
    if not 1 <= n_min <= n_max:
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    return _sorting_batches(steps, batch, n_min, n_max, generator)


def _sorting_batches(
    steps: int, batch: int, n_min: int, n_max: int, generator: torch.Generator | None
) -> Iterator[tuple[Tensor, Tensor]]:
    for _ in range(steps):
        n = int(torch.randint(n_min, n_max + 1, (1,), generator=generator))
        yield sorting_batch(batch, n, generator)
