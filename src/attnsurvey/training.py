"""Small, deterministic training helpers shared by every chapter's experiment.

Shapes: N examples, C classes; ``...`` any leading (batch, position) axes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from ._checks import (
    InputTypeError,
    as_tensor,
    check_index_range,
    check_integers,
    check_min_rank,
    check_scored,
    require_tensor,
)
from .numeric_env import deterministic_algorithms, portable_adam

M = TypeVar("M", bound=nn.Module)
B = TypeVar("B")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, NumPy's and torch's global random states and return a seeded generator.

    It also turns on torch's deterministic algorithms (an operation that has
    none raises, as under :func:`attnsurvey.numeric_env.apply_torch`). Threads
    are left alone (the pin sets them).

    Args:
        seed: the seed.

    Returns:
        A ``torch.Generator`` seeded with ``seed``, for explicit sampling.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    deterministic_algorithms()
    g = torch.Generator().manual_seed(seed)
    return g


@dataclass
class History:
    """Loss per step and wall-clock seconds of a :func:`train` run.

    Attributes:
        losses: the training loss of every step.
        seconds: the wall-clock time of the run.
    """

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(len(self.losses), 1)


def train(
    model: M,
    loss_fn: Callable[[M, B], Tensor],
    batches: Iterable[B],
    lr: float = 1e-2,
    clip: float | None = 1.0,
    optimizer: torch.optim.Optimizer | None = None,
) -> History:
    """Train ``model`` with Adam on ``batches``; ``loss_fn(model, batch)`` returns a scalar.

    The default optimizer is :func:`attnsurvey.numeric_env.portable_adam` (fused
    Adam, the same bits on every CPU). Deterministic given the seeds of the
    model and data. The model is left in eval mode.

    Args:
        model: the module to train.
        loss_fn: ``(model, batch) -> loss``.
        batches: the training batches, one optimizer step each.
        lr: the learning rate of the default optimizer.
        clip: the gradient norm to clip to (None disables).
        optimizer: replaces the default optimizer.

    Shape:
        ``loss_fn`` returns a scalar ``()`` tensor.

    Returns:
        A :class:`History`.
    """
    params = list(model.parameters())  # listed once: walking the module tree every step cost as much as clipping
    opt = optimizer or portable_adam(params, lr=lr)
    hist = History()
    model.train()
    start = time.perf_counter()
    for batch in batches:
        opt.zero_grad()
        loss = loss_fn(model, batch)
        loss.backward()
        if clip is not None:
            _clip_grad_norm(params, clip)
        opt.step()
        hist.losses.append(float(loss.detach()))
    hist.seconds = time.perf_counter() - start
    model.eval()
    return hist


@torch.no_grad()
def _clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> None:
    """``nn.utils.clip_grad_norm_(params, max_norm)``, the same operations and bits, without its per-call overhead.

    torch's function groups the gradients by device and dtype twice per call (once for the norm,
    once for the scaling) and enters three no-grad wrappers: about half its cost for the book's
    small models, every step. With every gradient on one CPU device and of one dtype, one group is
    the whole list, so this runs torch's foreach path directly (foreach norms, the 2-norm of
    their stack, ``max_norm / (norm + 1e-6)`` clamped at 1, one foreach multiply); anything else
    goes to torch's function. A test pins the bits to torch's.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    first = grads[0]
    if first.device.type != "cpu" or any(
        type(g) is not Tensor or g.device != first.device or g.dtype != first.dtype for g in grads
    ):
        nn.utils.clip_grad_norm_(params, max_norm)
        return
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))


def accuracy(logits: Tensor, targets: Tensor, ignore_index: int | None = None) -> float:
    """Fraction of positions where ``argmax(logits) == targets`` (optionally ignoring a label).

    Args:
        logits: class scores.
        targets: integer labels.
        ignore_index: a label whose positions are not scored, or None.

    Shape:
        logits: ``(..., C)``; targets: ``(...)``.

    Returns:
        The accuracy, a float in ``[0, 1]``.

    Raises:
        TypeError: if logits is not a floating-point tensor or targets not a tensor.
        ValueError: when no position is left to score (an empty batch, or every
            target equal to ``ignore_index``): an accuracy over nothing is
            undefined, not NaN; for a target outside ``[0, C)`` (other than ``ignore_index``).
    """
    as_tensor(logits, "logits"), require_tensor(targets, "targets")
    check_min_rank(logits, 1, "logits", "(..., C)")
    check_index_range(targets, logits.shape[-1], "targets", "accuracy (C classes)", ignore=ignore_index)
    keep = torch.ones_like(targets, dtype=torch.bool) if ignore_index is None else targets != ignore_index
    check_scored(int(keep.sum()), "accuracy", "targets")
    pred = logits.argmax(-1)
    return float((pred[keep] == targets[keep]).float().mean())


def tie_split_accuracy(counts: Tensor, targets: Tensor) -> float:
    """Expected accuracy of guessing the class with the largest count, ties broken uniformly at random.

    An example scores ``1/k`` when its target is one of the ``k`` classes tied
    for the largest count, else 0. The chapters' count-based baselines use it.

    Args:
        counts: a score per class (e.g. how often each label occurs in what a
            rule may look at).
        targets: integer labels.

    Shape:
        counts: ``(N, C)``; targets: ``(N,)``.

    Returns:
        The expected accuracy, a float in ``[0, 1]``.

    Raises:
        TypeError: if counts or targets is not a tensor.
        ValueError: for an empty batch, shapes other than ``(N, C)`` and ``(N,)``, or a
            target outside ``[0, C)``.
    """
    require_tensor(counts, "counts"), require_tensor(targets, "targets")
    if counts.dim() != 2 or targets.shape != counts.shape[:1]:
        raise ValueError(
            f"counts must be (N, C) and targets (N,), got counts {tuple(counts.shape)}, targets {tuple(targets.shape)}"
        )
    check_scored(len(targets), "tie-split accuracy", "targets")
    check_index_range(targets, counts.shape[1], "targets", "tie-split accuracy (C classes)")
    top = counts == counts.max(-1, keepdim=True).values
    return float((top[torch.arange(len(targets)), targets].float() / top.sum(-1)).mean())


def cross_entropy_mean(
    logits: Tensor, targets: Tensor, ignore_index: int | None = None, log_probs: bool = False
) -> Tensor:
    """Mean cross-entropy of ``targets`` under ``logits`` over the positions that are scored.

    The loss convention of the package: an empty batch, or one with only ignored
    positions, gives 0 (with a zero gradient, still on the graph) instead of NaN.

    Args:
        logits: class scores (or log-probabilities with ``log_probs=True``).
        targets: integer labels.
        ignore_index: positions whose target equals it are skipped.
        log_probs: ``logits`` are already log-probabilities.

    Shape:
        logits: ``(..., C)``; targets: ``(...)``. Returns a scalar ``()``.

    Returns:
        The mean loss.

    Raises:
        TypeError: if logits is not a floating-point tensor or targets not a tensor.
        ValueError: unless ``targets.shape == logits.shape[:-1]`` (flattening
            would otherwise pair a wrongly shaped target with the wrong
            position, silently); for a target outside ``[0, C)`` other than ``ignore_index``.
    """
    as_tensor(logits, "logits"), require_tensor(targets, "targets")
    if logits.dim() < 1 or tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"targets must have the shape of logits without its class axis, {tuple(logits.shape[:-1])} "
            f"(logits {tuple(logits.shape)} = (..., C)), got {tuple(targets.shape)}"
        )
    flat, t = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    ignore = -100 if ignore_index is None else ignore_index
    check_index_range(t, logits.shape[-1], "targets", "cross_entropy_mean (C classes)", ignore=ignore)
    if not bool((t != ignore).any()):
        return flat[:0].sum()
    loss = nn.functional.nll_loss if log_probs else nn.functional.cross_entropy
    return loss(flat, t, ignore_index=ignore)


def fmt(x: float, digits: int = 3) -> str:
    """Round ``x`` to ``digits`` significant digits for stable printed outputs.

    Args:
        x: the number.
        digits: significant digits.

    Returns:
        The formatted string.
    """
    return f"{x:.{digits}g}"


def minibatches(
    tensors: tuple[Tensor, ...], epochs: int, batch_size: int = 100, generator: torch.Generator | None = None
) -> Iterator[tuple[Tensor, ...]]:
    """Yield shuffled mini-batches of the tuple ``tensors`` for ``epochs`` passes.

    The order comes from ``torch.randperm(..., generator=generator)``, so a
    seeded generator makes the batches reproducible.

    Args:
        tensors: tensors sharing their first dimension ``N``.
        epochs: the number of passes over the data.
        batch_size: examples per batch (the last batch of a pass may be smaller).
        generator: the random generator of the order (global one if None).

    Shape:
        Each tensor: ``(N, ...)``; each yielded tensor: ``(batch_size, ...)``.

    Returns:
        An iterator over tuples of batches, one tensor per input tensor.

    Raises:
        TypeError: if ``tensors`` is not a non-empty tuple (or list) of tensors.
        ValueError: if the tensors disagree on their first dimension, ``batch_size < 1``
            or ``epochs < 0``.
    """
    if not isinstance(tensors, (tuple, list)) or not tensors:
        raise InputTypeError(f"tensors must be a non-empty tuple of tensors, got {type(tensors).__name__}")
    check_integers("minibatches", minimum=1, batch_size=batch_size)
    check_integers("minibatches", minimum=0, epochs=epochs)
    n = len(tensors[0])
    if any(len(t) != n for t in tensors):
        raise ValueError(f"tensors must share their first dimension, got {[len(t) for t in tensors]}")
    return _minibatches(tensors, n, epochs, batch_size, generator)


def _minibatches(
    tensors: tuple[Tensor, ...], n: int, epochs: int, batch_size: int, generator: torch.Generator | None
) -> Iterator[tuple[Tensor, ...]]:
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for i in range(0, n, batch_size):
            yield tuple(t[order[i : i + batch_size]] for t in tensors)
