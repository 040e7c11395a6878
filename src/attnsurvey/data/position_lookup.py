"""Synthetic "look up one position" task: exactly one feature vector matters.

A sequence of ``n_f`` tokens, each one of ``n_classes`` symbols; feature vector
``l`` is ``[one_hot(token_l), one_hot(l)]`` plus a little Gaussian noise. The
query names a position ``t`` (``q = one_hot(t)``) and the label is the token at
that position. The ideal alignment puts all its weight on ``l = t``; that
ground truth is returned as ``t``, so how focused an alignment is can be
measured exactly. Centring a local window on ``t`` hands it the answer (an
oracle centre); :func:`step_lookup_batch` adds a decoder step ``s`` near ``t``,
the centre that monotonic local attention (``p_t = s``) can honestly use.

Shapes: batch examples, n_f positions (feature vectors), n_classes labels.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from .._checks import check_integers


def lookup_batch(
    batch: int, n_f: int, n_classes: int, generator: torch.Generator | None = None, noise: float = 0.1
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One batch ``(F, q, t, y)`` of the look-up task.

    Args:
        batch: the batch size.
        n_f: the number of positions.
        n_classes: the number of labels.
        generator: the random generator.
        noise: the noise added to the feature vectors (>= 0).

    Shape:
        - Output: ``(F (batch, n_f, n_classes + n_f), q (batch, n_f), t (batch,), y (batch,))``.

    Returns:
        ``(F, q, t, y)``: feature vectors, one-hot queries, the position that matters
        and the label ``y = token[t]``.

    Raises:
        ValueError: for sizes below 1 or negative noise.
    """
    check_integers("lookup_batch", batch=batch, n_f=n_f, n_classes=n_classes)
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
    """Yield ``steps`` batches of :func:`lookup_batch` (for ``attnsurvey.training.train``).

    Args:
        steps: the number of batches.
        batch: the batch size.
        n_f: the number of positions.
        n_classes: the number of labels.
        generator: the random generator.

    Shape:
        - Each item: as :func:`lookup_batch`.

    Returns:
        An iterator over ``(F, q, t, y)`` batches.

    Raises:
        ValueError: (when called, not when iterated) unless ``batch``, ``n_f`` and
            ``n_classes`` are integers >= 1 and ``steps`` one >= 0.
    """
    check_integers("lookup_batches", minimum=0, steps=steps)
    check_integers("lookup_batches", minimum=1, batch=batch, n_f=n_f, n_classes=n_classes)
    return (lookup_batch(batch, n_f, n_classes, generator) for _ in range(steps))


def step_lookup_batch(
    batch: int,
    n_f: int,
    n_classes: int,
    max_shift: int,
    generator: torch.Generator | None = None,
    noise: float = 0.1,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The look-up task of :func:`lookup_batch` with a decoder step ``s`` near the target ``t``.

    Everything of :func:`lookup_batch` (the query names ``t``, the label is the
    token there), plus an output step ``s = clip(t - delta, 0, n_f - 1)`` with
    ``delta`` uniform in ``{-max_shift, ..., max_shift}``: a decoder step whose
    index is a guess of where to look (Luong et al.'s monotonic ``p_t = s``),
    off by up to ``max_shift`` positions (``max_shift = 0`` makes ``s = t``).

    Args:
        batch: the batch size.
        n_f: the number of positions.
        n_classes: the number of labels.
        max_shift: the largest offset of ``s`` from ``t``, in ``[0, n_f - 1]``.
        generator: the random generator.
        noise: the noise added to the feature vectors (>= 0).

    Shape:
        - Output: ``(F (batch, n_f, n_classes + n_f), q (batch, n_f), s (batch,), t (batch,), y (batch,))``.

    Returns:
        ``(F, q, s, t, y)``.

    Raises:
        ValueError: for sizes below 1, a negative noise or ``max_shift`` outside ``[0, n_f - 1]``.
    """
    check_integers("step_lookup_batch", batch=batch, n_f=n_f, n_classes=n_classes, max_shift=max_shift)
    if not 0 <= max_shift <= n_f - 1:
        raise ValueError(f"max_shift must lie in [0, n_f - 1] = [0, {n_f - 1}], got {max_shift}")
    F, q, t, y = lookup_batch(batch, n_f, n_classes, generator, noise)
    delta = torch.randint(-max_shift, max_shift + 1, (batch,), generator=generator)
    s = (t - delta).clamp(0, n_f - 1)
    return F, q, s, t, y
