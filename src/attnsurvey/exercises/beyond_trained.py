"""Self-checks for the exercises of chapter 6.4 (a Transformer trained end to end).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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
            "that is an average over sentences; read again what the sums of m and its denominator run over"
        )
    if not math.isclose(answer, right, abs_tol=1e-3):
        raise AssertionError("not right: read again over what the measure m averages, and how often each length occurs")
    print("correct")


def _right_on_valid_positions(pred: Tensor, data: SeqBatch) -> float:
    """Fraction of rows whose first ``lengths[b]`` tokens equal the target's (what follows is ignored)."""
    valid = torch.arange(pred.shape[1])[None, :] < data.lengths[:, None]
    return float(((pred == data.tgt_out) | ~valid).all(1).float().mean())


def check_exact_match(exact_match: Callable[[Tensor, SeqBatch], float]) -> None:
    """Exercise 2: ``exact_match(pred, data)`` is the fraction of sequences right on their valid positions.

    Args:
        exact_match: the reader's function of ``pred (B, n)`` and a batch.

    Raises:
        AssertionError: with a hint, when the function counts padding, computes token accuracy or is otherwise wrong.
    """
    data = reversal_data(8, torch.Generator().manual_seed(0))
    pred = data.tgt_out.clone()
    pred[data.tgt_out == PAD] = 5  # garbage after each sequence's end must not count
    pred[0, 0] = 2 if pred[0, 0] != 2 else 3
    right = _right_on_valid_positions(pred, data)
    got = float(exact_match(pred, data))
    padded = float((pred == data.tgt_out).all(1).float().mean())
    if math.isclose(got, padded) and not math.isclose(got, right):
        raise AssertionError("padded positions counted: compare only the first lengths[b] tokens")
    token_acc = float((pred == data.tgt_out)[data.tgt_out != PAD].float().mean())
    if math.isclose(got, token_acc):
        raise AssertionError("that is token accuracy; exact match asks for the whole sequence")
    if not math.isclose(got, right):
        raise AssertionError(f"your exact match {got} is not right")
    print("correct")


def check_exact_by_length(answer: Sequence[float], model: Seq2SeqTransformer, data: SeqBatch) -> None:
    """Exercise 3: greedy exact match of ``model`` on the examples of each source length, shortest first.

    The check decodes ``data`` greedily with ``model`` itself (no training), so
    the reference does not rest on predictions the reader passes.
    """
    with torch.no_grad():
        pred = decode(model, data, 1)
    check_exact_by_length_of(answer, pred, data)


def _exact_by_length(pred: Tensor, data: SeqBatch) -> tuple[list[int], list[int]]:
    """Per length of :data:`LENGTHS` (shortest first): the right sequences and the number of sequences."""
    right, count = [], []
    for n in range(LENGTHS[0], LENGTHS[1] + 1):
        rows = data.lengths == n
        if not bool(rows.any()):
            raise ValueError(f"no example of length {n} in data")
        sub = SeqBatch(data.src[rows], data.tgt_in[rows], data.tgt_out[rows], data.lengths[rows])
        count.append(int(rows.sum()))
        right.append(round(scores(pred[rows], sub)["exact"] * count[-1]))
    return right, count


def check_exact_by_length_of(answer: Sequence[float], pred: Tensor, data: SeqBatch) -> None:
    """The comparison behind :func:`check_exact_by_length`, for given predictions ``pred``.

    Raises ``AssertionError`` with a hint that names no value.
    """
    right, count = _exact_by_length(pred, data)
    want = [k / c for k, c in zip(right, count)]
    got = [float(a) for a in answer]
    if len(got) != len(want):
        raise AssertionError(f"give one value per length {LENGTHS[0]} to {LENGTHS[1]}: {len(want)} values")
    if all(math.isclose(a, w, abs_tol=1e-6) for a, w in zip(got, want)):
        print("correct")
        return
    if got == [float(k) for k in right]:
        raise AssertionError("those are counts of sequences; give fractions of each length's sequences")
    if all(math.isclose(a, w, abs_tol=1e-6) for a, w in zip(got, want[::-1])):
        raise AssertionError("the order is reversed: the shortest length first")
    if len(set(got)) == 1:
        raise AssertionError("one value for every length: restrict the rows to each length in turn")
    wrong = [n for n, a, w in zip(range(LENGTHS[0], LENGTHS[1] + 1), got, want) if not math.isclose(a, w, abs_tol=1e-6)]
    raise AssertionError(
        f"not right for the lengths {wrong}: decode greedily (beam width 1) and count the rows of each length "
        "whose tokens all match"
    )


def hidden_check_uniform_mirrored(answer: float) -> None:
    """Hidden test of Exercise 1: the chance level to four correct decimals, from an exact fraction.

    Raises ``AssertionError``.
    """
    from fractions import Fraction

    ns = range(LENGTHS[0], LENGTHS[1] + 1)
    exact = Fraction(len(ns), sum(ns))  # n tokens get 1/n each: one unit of weight per sentence
    if not math.isclose(float(answer), float(exact), abs_tol=5e-5):
        raise AssertionError("give the chance level to at least four correct decimals")


def hidden_check_exact_match(exact_match: Callable[[Tensor, SeqBatch], float]) -> None:
    """Hidden test of Exercise 2: another batch, right everywhere, then wrong in the last valid token of one sequence.

    Raises ``AssertionError``.
    """
    data = reversal_data(6, torch.Generator().manual_seed(3))
    pred = data.tgt_out.clone()
    pred[data.tgt_out == PAD] = 7
    if not math.isclose(float(exact_match(pred, data)), 1.0, abs_tol=1e-6):
        raise AssertionError("every sequence is right on its valid positions: the exact match is 1")
    last = int(data.lengths[2]) - 1
    pred[2, last] = 3 if pred[2, last] != 3 else 4
    if not math.isclose(float(exact_match(pred, data)), 5 / 6, abs_tol=1e-6):
        raise AssertionError("one sequence wrong in its last valid token: your exact match is not right")


def hidden_check_exact_by_length(answer: Sequence[float], model: Seq2SeqTransformer, data: SeqBatch) -> None:
    """Hidden test of Exercise 3: every value is a fraction of its length's sequences (k / count, to 1e-9).

    Raises ``AssertionError``.
    """
    for n, a in zip(range(LENGTHS[0], LENGTHS[1] + 1), answer, strict=True):
        count = int((data.lengths == n).sum())
        k = float(a) * count
        if not abs(k - round(k)) < 1e-6 * max(count, 1):
            raise AssertionError(
                f"the exact match on the length-{n} rows is a whole number of sequences divided by their count"
            )
