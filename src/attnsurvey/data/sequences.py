"""Synthetic sequence-transduction tasks (Chapter 1): reverse, copy or sort a sequence.

Each task has a known answer *and* a known alignment: to write output token
``t`` of the reversed sequence, a model should look at input position
``n - 1 - t``. That makes these tasks the simplest test of whether an
encoder-decoder has learned where to look.

Token ids: ``PAD = 0`` (padding, ignored by losses), ``BOS = 1`` (the
begin-of-sequence token the decoder starts from) and the symbols
``2 ... vocab_size - 1``. All sampling goes through an explicit
``torch.Generator``, so a seed fixes the data.

Shapes: B batch, n_x source and n_y target length, n sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_index_range, check_integers

PAD = 0
BOS = 1
FIRST_SYMBOL = 2
TASKS = ("reverse", "copy", "sort")


@dataclass
class SeqBatch:
    """A batch of a transduction task, padded on the right with ``PAD``.

    Attributes:
        src: ``(B, n_x)`` input tokens.
        tgt_in: ``(B, n_y)`` decoder inputs for teacher forcing (``BOS`` then the target
            shifted right).
        tgt_out: ``(B, n_y)`` targets.
        lengths: ``(B,)`` true lengths (here ``n_y = n_x`` per example).
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    lengths: Tensor

    def __iter__(self):
        return iter((self.src, self.tgt_in, self.tgt_out, self.lengths))


def target_positions(task: str, src: Tensor, lengths: Tensor) -> Tensor:
    """The source position each output token is copied from (-1 on padding).

    Entry ``[b, t]`` belongs to output step ``t`` and holds a source position.
    For ``reverse`` this is the anti-diagonal ``n - 1 - t``; for ``copy`` the
    diagonal ``t``; for ``sort`` the (stable) arg-sort of the valid tokens.
    It is the ground-truth alignment of the task.

    Args:
        task: ``"reverse"``, ``"copy"`` or ``"sort"``.
        src: the source tokens.
        lengths: the true lengths.

    Shape:
        - src: ``(B, n_x)``; lengths: ``(B,)``.
        - Output: ``(B, n_y)``; these tasks have ``n_y = n_x``, so it is the shape of ``src``.

    Returns:
        The source positions.

    Raises:
        ValueError: for an unknown task, a src that is not ``(B, n_x)`` integer tokens, or
            lengths that are not ``(B,)`` integers in ``[0, n_x]`` (a length longer than the
            sequence would point at positions that do not exist).
    """
    _check_task(task)
    check_index_range(src, None, "src", "target_positions (token ids)")
    if src.dim() != 2:
        raise ValueError(f"src must have shape (B, n_x), got {tuple(src.shape)}")
    B, n = src.shape
    check_index_range(lengths, n + 1, "lengths", f"target_positions (true lengths, at most n_x={n})")
    if tuple(lengths.shape) != (B,):
        raise ValueError(f"lengths must have shape (B,) = ({B},), got {tuple(lengths.shape)}")
    t = torch.arange(n).expand(B, n)
    valid = t < lengths[:, None]
    if task == "copy":
        pos = t.clone()
    elif task == "reverse":
        pos = lengths[:, None] - 1 - t
    else:  # sort: padding sorts last because it is replaced by a large key
        keys = src.masked_fill(~valid, torch.iinfo(src.dtype).max)
        pos = torch.argsort(keys, dim=1, stable=True)
    return pos.masked_fill(~valid, -1)


def transduction_batch(
    batch_size: int,
    lengths: int | tuple[int, int],
    vocab_size: int = 12,
    task: str = "reverse",
    generator: torch.Generator | None = None,
) -> SeqBatch:
    """Sample a batch of the ``task`` ("reverse", "copy" or "sort").

    Args:
        batch_size: B.
        lengths: a fixed length ``n`` or an inclusive range ``(min, max)`` sampled
            uniformly per example (then the batch is padded to the longest).
        vocab_size: number of token ids including ``PAD`` and ``BOS``.
        task: ``"reverse"``, ``"copy"`` or ``"sort"``.
        generator: the random generator.

    Returns:
        The batch as :class:`SeqBatch`.

    Raises:
        ValueError: for an unknown task, a non-positive size or length, or a vocabulary
            without symbols.
    """
    check_integers("transduction_batch", batch_size=batch_size, vocab_size=vocab_size)
    _check_task(task)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if vocab_size <= FIRST_SYMBOL:
        raise ValueError(f"vocab_size must exceed {FIRST_SYMBOL} (PAD and BOS are reserved), got {vocab_size}")
    lo, hi = (lengths, lengths) if isinstance(lengths, int) else lengths
    if not 1 <= lo <= hi:
        raise ValueError(f"lengths must satisfy 1 <= min <= max, got {lengths}")
    lens = torch.randint(lo, hi + 1, (batch_size,), generator=generator)
    n = int(lens.max())
    src = torch.randint(FIRST_SYMBOL, vocab_size, (batch_size, n), generator=generator)
    valid = torch.arange(n)[None, :] < lens[:, None]
    src = src.masked_fill(~valid, PAD)
    pos = target_positions(task, src, lens)
    tgt_out = torch.gather(src, 1, pos.clamp_min(0)).masked_fill(~valid, PAD)
    tgt_in = torch.cat([torch.full((batch_size, 1), BOS), tgt_out[:, :-1]], dim=1)
    return SeqBatch(src, tgt_in, tgt_out, lens)


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {list(TASKS)}")


def reversal_batch(batch: int, n: int, vocab: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random token sequences ``x`` in ``[0, vocab)`` and targets ``y = reversed(x)``.

    The answer at position ``i`` is the token at position ``n - 1 - i``: a model
    must know *where* each token is, so a position-blind model cannot solve it.
    Fixed length, no padding (the Transformer chapter's tagger task; see
    :func:`transduction_batch` for the padded encoder-decoder version).

    Args:
        batch: the number of sequences.
        n: the sequence length.
        vocab: the number of token ids (>= 2).
        generator: the random generator.

    Shape:
        - Output: ``(x (batch, n), y (batch, n))``.

    Returns:
        ``(x, y)``.

    Raises:
        ValueError: for non-positive sizes or ``vocab < 2``.
    """
    check_integers("reversal_batch", batch=batch, n=n, vocab=vocab)
    if batch < 1 or n < 1 or vocab < 2:
        raise ValueError(f"need batch >= 1, n >= 1, vocab >= 2; got batch={batch}, n={n}, vocab={vocab}")
    x = torch.randint(0, vocab, (batch, n), generator=generator)
    return x, x.flip(-1)


IGNORE = -100  #: label of positions without a target (``F.cross_entropy``'s default ``ignore_index``)


def copy_back_batch(
    batch: int, n: int, vocab: int, k: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """The "copy the token ``k`` positions back" task: ``y[:, t] = x[:, t - k]``.

    The first ``k`` positions have no answer and are labelled :data:`IGNORE`.
    The answer depends only on the *offset* ``k``, never on the absolute
    position, so a model that represents offsets can solve it at any length.

    Args:
        batch: the number of sequences.
        n: the sequence length.
        vocab: the number of token ids.
        k: the offset, ``0 <= k < n``.
        generator: the random generator.

    Shape:
        - Output: ``(x (batch, n), y (batch, n))``, x in ``[0, vocab)``.

    Returns:
        ``(x, y)``.

    Raises:
        ValueError: unless ``batch, n >= 1``, ``vocab >= 2`` and ``0 <= k < n``.
    """
    check_integers("copy_back_batch", batch=batch, n=n, vocab=vocab, k=k)
    if batch < 1 or n < 1 or vocab < 2 or not 0 <= k < n:
        raise ValueError(
            f"need batch >= 1, n >= 1, vocab >= 2, 0 <= k < n; got batch={batch}, n={n}, vocab={vocab}, k={k}"
        )
    x = torch.randint(0, vocab, (batch, n), generator=generator)
    y = torch.full_like(x, IGNORE)
    y[:, k:] = x[:, : n - k]
    return x, y
