"""Training and evaluation loops of the general attention model chapter (§2).

The match-the-query task of :mod:`attnsurvey.data.sets`, trained on
:class:`attnsurvey.general_model.TaskModel`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from ..data.sets import match_query_batch
from ..general_model import TaskModel
from ..training import History, accuracy, train


def fit_match_query(
    model: TaskModel, steps: int, generator: torch.Generator, batch_size: int = 64, lr: float = 1e-2, **task: Any
) -> History:
    """Train ``model`` on fresh batches of :func:`match_query_batch` (``task`` = its keyword arguments)."""

    def batches() -> Iterator[tuple[Tensor, ...]]:
        for _ in range(steps):
            b = match_query_batch(batch_size, generator=generator, **task)
            yield b.flat_F(), b.q, b.mask, b.y

    def loss_fn(m: TaskModel, batch: tuple[Tensor, ...]) -> Tensor:
        F, q, mask, y = batch
        return nn.functional.cross_entropy(m(F, q, mask)[0], y)

    return train(model, loss_fn, batches(), lr=lr)


@torch.no_grad()
def evaluate_match_query(model: TaskModel, n: int, generator: torch.Generator, **task: Any) -> dict[str, float]:
    """Label accuracy, and how often the largest weight falls on the matching item."""
    b = match_query_batch(n, generator=generator, **task)
    logits, a = model(b.flat_F(), b.q, b.mask)
    return {"accuracy": accuracy(logits, b.y), "hit": float((a.argmax(-1) == b.target).float().mean())}
