"""Training and evaluation loops of the general attention model chapter (§2).

The match-the-query task of :mod:`attnsurvey.data.sets`, trained on
:class:`attnsurvey.general_model.TaskModel`, and :class:`FlatMLP`, the baseline
without attention that sees the same inputs.

Shapes: B batch, n items, d_f feature size, d_u query size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_integers
from ..data.sets import match_query_batch
from ..general_model import TaskModel
from ..masking import check_boolean
from ..training import History, accuracy, train


class FlatMLP(nn.Module):
    """A baseline without attention: one hidden ReLU layer on everything the task model sees.

    Input: the query, the feature vectors with masked items set to zero, and the mask
    itself, concatenated into one vector of size ``d_u + n (d_f + 1)``; then
    ``Linear -> ReLU -> Linear`` to ``n_classes`` logits. It can in principle compute
    any answer from these inputs, so it tests whether the attention's structure (one
    score per item, the weighted average) helps at equal size.

    Args:
        d_f: the feature size.
        d_u: the query size.
        n_items: the number of items ``n``.
        n_classes: the number of classes.
        d_hidden: the hidden width.

    Shape:
        - F: ``(B, n, d_f)``; q: ``(B, d_u)``.
        - mask: boolean ``(B, n)``, ``True`` = may attend (default all).
        - Output: ``(logits (B, n_classes), None)``: there are no weights.

    Raises:
        ValueError: if ``F`` does not hold ``n`` items of width ``d_f``, a size is not an
            integer >= 1, the mask is not a boolean ``(B, n)`` or q not ``(B, d_u)``.
        TypeError: if F or q is not a floating-point tensor.
    """

    def __init__(self, d_f: int, d_u: int, n_items: int, n_classes: int, d_hidden: int) -> None:
        super().__init__()
        check_integers("FlatMLP", minimum=1, d_f=d_f, d_u=d_u, n_items=n_items, n_classes=n_classes, d_hidden=d_hidden)
        self.n, self.d_f = n_items, d_f
        self.hidden = nn.Linear(d_u + n_items * (d_f + 1), d_hidden)
        self.out = nn.Linear(d_hidden, n_classes)

    def forward(self, F: Tensor, q: Tensor, mask: Tensor | None = None) -> tuple[Tensor, None]:
        as_tensor(q, "q")
        as_tensor(F, "F")
        if F.dim() != 3 or F.shape[1:] != (self.n, self.d_f):
            raise ValueError(f"F must have shape (B, n={self.n}, d_f={self.d_f}), got {tuple(F.shape)}")
        if mask is None:
            mask = torch.ones(F.shape[:2], dtype=torch.bool)
        check_boolean(mask, "mask", "True = may attend")
        if tuple(mask.shape) != tuple(F.shape[:2]):
            raise ValueError(f"FlatMLP: mask must have shape (B, n) = {tuple(F.shape[:2])}, got {tuple(mask.shape)}")
        if q.dim() != 2 or q.shape[0] != F.shape[0]:
            raise ValueError(f"FlatMLP: q must have shape (B, d_u) with B={F.shape[0]}, got {tuple(q.shape)}")
        F = torch.where(mask[..., None], F, torch.zeros((), dtype=F.dtype))
        x = torch.cat([q, F.flatten(1), mask.to(F.dtype)], dim=-1)
        return self.out(torch.relu(self.hidden(x))), None


def fit_match_query(
    model: TaskModel | FlatMLP,
    steps: int,
    generator: torch.Generator,
    batch_size: int = 64,
    lr: float = 1e-2,
    **task: Any,
) -> History:
    """Train ``model`` on fresh batches of :func:`match_query_batch`.

    Args:
        model: the model to train.
        steps: the number of training steps.
        generator: the random generator of the batches.
        batch_size: examples per batch.
        lr: the learning rate.
        task: the keyword arguments of :func:`match_query_batch`.

    Returns:
        The training :class:`attnsurvey.training.History`.
    """

    def batches() -> Iterator[tuple[Tensor, ...]]:
        for _ in range(steps):
            b = match_query_batch(batch_size, generator=generator, **task)
            yield b.flat_F(), b.q, b.mask, b.y

    def loss_fn(m: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        F, q, mask, y = batch
        return nn.functional.cross_entropy(m(F, q, mask)[0], y)

    return train(model, loss_fn, batches(), lr=lr)


@torch.no_grad()
def evaluate_match_query(
    model: TaskModel | FlatMLP, n: int, generator: torch.Generator, **task: Any
) -> dict[str, float]:
    """Label accuracy, and how often the largest weight falls on the matching item.

    Args:
        model: the trained model.
        n: the number of test examples.
        generator: the random generator of the test batch.
        task: the keyword arguments of :func:`match_query_batch`.

    Returns:
        ``{"accuracy"}``, plus ``"hit"`` for a model with weights.
    """
    b = match_query_batch(n, generator=generator, **task)
    logits, a = model(b.flat_F(), b.q, b.mask)
    out = {"accuracy": accuracy(logits, b.y)}
    if a is not None:
        out["hit"] = float((a.argmax(-1) == b.target).float().mean())
    return out
