"""Synthetic sorting task for pointer networks (nndl 8.2.1.5).

The input is a set of ``n`` numbers; the output is the sequence of their
indices in ascending order of value, so every output symbol is a *position of
the input*. The book's example: ``20, 5, 10 -> pointers 1, 2, 0`` (0-based),
i.e. ``5, 10, 20``.

Shapes: batch examples, n numbers.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from .._checks import check_integers
from ..catalog import catalogued


@catalogued("extra:pointer-network")
def sorting_batch(batch: int, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """A batch of numbers to sort and the pointers that sort them.

    ``targets[b, m]`` is the index of the ``m``-th smallest value
    (``x[b, targets[b], 0]`` is ascending).

    Args:
        batch: the batch size.
        n: numbers per example.
        generator: the random generator.

    Shape:
        - Output: ``(x (batch, n, 1), targets (batch, n))``, x uniform in ``[0, 1)``.

    Returns:
        ``(x, targets)``.

    Raises:
        ValueError: unless ``batch >= 1`` and ``n >= 1``.
    """
    check_integers("sorting_batch", batch=batch, n=n)
    if batch < 1 or n < 1:
        raise ValueError(f"sorting_batch needs batch >= 1 and n >= 1, got batch={batch}, n={n}")
    x = torch.rand(batch, n, 1, generator=generator)
    return x, x.squeeze(-1).argsort(dim=-1)


def sorting_batches(
    steps: int, batch: int, n_min: int, n_max: int, generator: torch.Generator | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield ``steps`` batches from :func:`sorting_batch`, each with a length drawn from ``[n_min, n_max]``.

    Args:
        steps: the number of batches.
        batch: the batch size.
        n_min: the shortest length.
        n_max: the longest length.
        generator: the random generator.

    Shape:
        - Each item: as :func:`sorting_batch`, with its own ``n``.

    Returns:
        An iterator over ``(x, targets)`` batches.

    Raises:
        ValueError: (when called) unless ``batch``, ``n_min`` and ``n_max`` are integers >= 1 with
            ``n_min <= n_max``, and ``steps`` one >= 0.
    """
    check_integers("sorting_batches", minimum=1, batch=batch, n_min=n_min, n_max=n_max)
    check_integers("sorting_batches", minimum=0, steps=steps)
    if not 1 <= n_min <= n_max:
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    return _sorting_batches(steps, batch, n_min, n_max, generator)


def _sorting_batches(
    steps: int, batch: int, n_min: int, n_max: int, generator: torch.Generator | None
) -> Iterator[tuple[Tensor, Tensor]]:
    for _ in range(steps):
        n = int(torch.randint(n_min, n_max + 1, (1,), generator=generator))
        yield sorting_batch(batch, n, generator)
