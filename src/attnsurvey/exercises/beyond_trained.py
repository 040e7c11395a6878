"""Self-checks for the exercises of chapter 6.4 (a Transformer trained end to end).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..data.sequences import PAD, SeqBatch
from ..experiments.trained_transformer import LENGTHS, decode, reversal_data, scores
from ..transformer.model import Seq2SeqTransformer


def uniform_mirrored_weight(lo: int = LENGTHS[0], hi: int = LENGTHS[1]) -> float:
    """The mirrored weight of uniform attention, token-averaged, lengths uniform in ``[lo, hi]``."""
    ns = range(lo, hi + 1)
    return sum(n * (1 / n) for n in ns) / sum(ns)


def check_uniform_mirrored(answer: float) -> None:
    """Exercise 1: the chance level of the mirrored-weight measure (within 1e-3)."""
    right = uniform_mirrored_weight()
    per_sentence = sum(1 / n for n in range(LENGTHS[0], LENGTHS[1] + 1)) / (LENGTHS[1] - LENGTHS[0] + 1)
    if math.isclose(answer, per_sentence, abs_tol=1e-4):
        raise AssertionError(
            "that averages 1/n over sentences; the measure averages over output tokens, and long sentences have more"
        )
    if not math.isclose(answer, right, abs_tol=1e-3):
        raise AssertionError("not right: sum over lengths of n * (1/n), divided by the number of tokens")
    print(f"correct: {right:.4f}")


def check_exact_match(exact_match: Callable[[Tensor, SeqBatch], float]) -> None:
    """Exercise 2: ``exact_match(pred, data)`` is the fraction of sequences right on their valid positions."""
    data = reversal_data(8, torch.Generator().manual_seed(0))
    pred = data.tgt_out.clone()
    pred[data.tgt_out == PAD] = 5  # garbage after each sequence's end must not count
    pred[0, 0] = 2 if pred[0, 0] != 2 else 3
    right = scores(pred, data)["exact"]
    got = float(exact_match(pred, data))
    padded = float((pred == data.tgt_out).all(1).float().mean())
    if math.isclose(got, padded) and not math.isclose(got, right):
        raise AssertionError("padded positions counted: compare only the first lengths[b] tokens")
    token_acc = float((pred == data.tgt_out)[data.tgt_out != PAD].float().mean())
    if math.isclose(got, token_acc):
        raise AssertionError("that is token accuracy; exact match asks for the whole sequence")
    if not math.isclose(got, right):
        raise AssertionError(f"{got} != {right}")
    print(f"correct: {right:.3f}")


def check_length_exact(answer: float, model: Seq2SeqTransformer, data: SeqBatch, n: int) -> None:
    """Exercise 3: greedy exact match of ``model`` restricted to the examples of ``data`` of length ``n``.

    The check decodes ``data`` greedily with ``model`` itself (no training), so
    the reference does not rest on predictions the reader passes.
    """
    with torch.no_grad():
        pred = decode(model, data, 1)
    check_length_exact_of(answer, pred, data, n)


def check_length_exact_of(answer: float, pred: Tensor, data: SeqBatch, n: int) -> None:
    """The comparison behind :func:`check_length_exact`, for given predictions ``pred``."""
    rows = data.lengths == n
    if not bool(rows.any()):
        raise ValueError(f"no example of length {n} in data")
    sub = SeqBatch(data.src[rows], data.tgt_in[rows], data.tgt_out[rows], data.lengths[rows])
    right = scores(pred[rows], sub)["exact"]
    overall = scores(pred, data)["exact"]
    if math.isclose(answer, overall) and not math.isclose(answer, right):
        raise AssertionError("that is the exact match over all lengths; keep only the rows with lengths == n")
    if not math.isclose(answer, right, abs_tol=1e-6):
        raise AssertionError(
            f"{answer} is not right: decode greedily (beam width 1) and count the length-{n} rows whose "
            "tokens all match"
        )
    print(f"correct: {right:.3f} on {int(rows.sum())} sequences of length {n}")
