"""Training and evaluation loops of the introduction (§1): the encoder-decoder of
:mod:`attnsurvey.seq2seq` on the transduction tasks of :mod:`attnsurvey.data.sequences`.

Shapes: as :mod:`attnsurvey.data.sequences` (B batch, n_x source, n_y target).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from ..data.sequences import transduction_batch
from ..seq2seq import Seq2Seq, sequence_accuracy, sequence_loss, token_accuracy
from ..training import History, train


def fit_transduction(
    model: Seq2Seq,
    steps: int,
    generator: torch.Generator,
    lengths: int | tuple[int, int] = (4, 16),
    batch_size: int = 64,
    task: str = "reverse",
    lr: float = 1e-2,
) -> History:
    """Train ``model`` with teacher forcing on fresh batches of ``task`` (Adam, clipped gradients).

    Data come from ``generator``, so a seed fixes the run (together with the model's
    initial weights).

    Args:
        model: the model to train.
        steps: the number of training steps.
        generator: the random generator of the batches.
        lengths: a fixed length or an inclusive range ``(min, max)``.
        batch_size: examples per batch.
        task: ``"reverse"``, ``"copy"`` or ``"sort"``.
        lr: the learning rate.

    Returns:
        The training :class:`attnsurvey.training.History`.
    """

    def batches() -> Iterator[tuple[Tensor, ...]]:
        for _ in range(steps):
            yield tuple(transduction_batch(batch_size, lengths, model.vocab_size, task, generator))

    def loss_fn(m: Seq2Seq, batch: tuple[Tensor, ...]) -> Tensor:
        src, tgt_in, tgt_out, lens = batch
        logits, _ = m(src, tgt_in, lens)
        return sequence_loss(logits, tgt_out)

    return train(model, loss_fn, batches(), lr=lr)


def evaluate_transduction(
    model: Seq2Seq, length: int, n: int, generator: torch.Generator, task: str = "reverse"
) -> dict[str, float]:
    """Greedy-decode ``n`` fresh examples of one ``length``; token and exact-match accuracy.

    Args:
        model: the trained model.
        length: the sequence length.
        n: the number of examples.
        generator: the random generator of the examples.
        task: ``"reverse"``, ``"copy"`` or ``"sort"``.

    Returns:
        ``{"token": token accuracy, "sequence": exact-match accuracy}``.
    """
    src, _, tgt_out, lens = transduction_batch(n, length, model.vocab_size, task, generator)
    tokens, logits, _ = model.greedy_decode(src, tgt_out.shape[1], lens)
    return {"token": token_accuracy(logits, tgt_out), "sequence": sequence_accuracy(tokens, tgt_out)}
