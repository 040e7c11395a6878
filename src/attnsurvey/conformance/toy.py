"""A small attention module with conventions of its own, for the adapter exercise of the conformance appendix.

:class:`ToyAttention` stands in for "one more library": it computes scaled
dot-product attention (through the book's core, so it is correct), but lays
its tensors out as ``(B, n, h, d)`` (heads after the positions, as many
fused kernels do) and takes a mask of the opposite polarity, ``blocked``
(``True`` = may *not* attend). An adapter maps the book's symbols onto it:
Q, K, V ``(B, h, n, d)`` and a mask with ``True`` = may attend.

:func:`check_toy_adapter` and :func:`hidden_check_toy_adapter` judge a
reader's adapter with the conformance machinery itself
(:func:`attnsurvey.conformance.evaluate`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .._checks import check_rank
from ..attention import attend
from . import TOLERANCE, Check, Result, evaluate
from .torch_target import rand, zero_dead_rows

#: The adapter the exercise asks for: ``(toy, Q, K, V, mask) -> c`` in the book's symbols.
Adapter = Callable[["ToyAttention", Tensor, Tensor, Tensor, Tensor], Tensor]


class ToyAttention(nn.Module):
    """Scaled dot-product attention with a ``(B, n, h, d)`` layout and a *blocked* mask.

    The module has no parameters.

    Shape:
        ``forward(q, k, v, blocked=None)``: q ``(B, n_q, h, d_k)``, k ``(B, n_f, h, d_k)``,
        v ``(B, n_f, h, d_v)``; blocked boolean ``(B, n_q, n_f)``, shared by the heads,
        ``True`` where query i may **not** attend key j (the opposite of the book);
        returns ``(B, n_q, h, d_v)``.

    Returns:
        ``forward`` returns the contexts in its own layout.

    Raises:
        TypeError: (from ``forward``) if q, k or v is not a floating-point tensor.
        ValueError: (from ``forward``) if ``blocked`` is not boolean or the shapes do not fit.
    """

    def forward(self, q: Tensor, k: Tensor, v: Tensor, blocked: Tensor | None = None) -> Tensor:
        """Attend in the toy's conventions (see the class docstring for the shapes).

        Args:
            q: queries ``(B, n_q, h, d_k)``.
            k: keys ``(B, n_f, h, d_k)``.
            v: values ``(B, n_f, h, d_v)``.
            blocked: boolean ``(B, n_q, n_f)``, ``True`` = blocked; None blocks nothing.

        Shape:
            Returns ``(B, n_q, h, d_v)``.

        Returns:
            The contexts.

        Raises:
            TypeError: if q, k or v is not a floating-point tensor (a list, NumPy array or integer tensor).
            ValueError: if q, k or v is not of rank 4, or ``blocked`` is not a boolean tensor of
                shape ``(B, n_q, n_f)``.
        """
        check_rank(q, 4, "q", "(B, n_q, h, d_k)")
        check_rank(k, 4, "k", "(B, n_f, h, d_k)")
        check_rank(v, 4, "v", "(B, n_f, h, d_v)")
        allowed = None
        if blocked is not None:
            B, n_q, n_f = q.shape[0], q.shape[1], k.shape[1]
            if not isinstance(blocked, Tensor) or blocked.dtype != torch.bool or blocked.shape != (B, n_q, n_f):
                raise ValueError(
                    f"blocked must be a boolean (B, n_q, n_f) = {(B, n_q, n_f)} tensor, got "
                    f"{getattr(blocked, 'dtype', type(blocked).__name__)} {tuple(getattr(blocked, 'shape', ()))}"
                )
            allowed = ~blocked[:, None]  # (B, 1, n_q, n_f): shared by the heads
        c, _ = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), allowed)
        return c.transpose(1, 2)


def toy_check(adapter: Adapter, B: int, h: int, n_q: int, n_f: int, d: int, seed: int = 0) -> Check:
    """The conformance check of an adapter for :class:`ToyAttention` (Eqs. (24)-(25) with a mask).

    Args:
        adapter: ``(toy, Q, K, V, mask) -> c`` with the book's layout and polarity.
        B: batch size. h: heads. n_q: queries. n_f: keys. d: head size (``d_k = d_v``).
        seed: the inputs' seed.

    Shape:
        The adapter gets Q ``(B, h, n_q, d)``, K and V ``(B, h, n_f, d)`` and mask
        ``(B, n_q, n_f)`` (``True`` = may attend, one row fully masked) and must return
        ``(B, h, n_q, d)``.

    Returns:
        A :class:`~attnsurvey.conformance.Check` (target ``"toy"``).
    """
    Q, K, V = rand(B, h, n_q, d, seed=seed), rand(B, h, n_f, d, seed=seed + 1), rand(B, h, n_f, d, seed=seed + 2)
    mask = rand(B, n_q, n_f, seed=seed + 3) > -0.3
    mask[0, n_q - 1] = False  # a query that may attend nothing
    mask[:, 0, 0] = True
    toy = ToyAttention()

    def run() -> tuple[Tensor, Tensor]:
        ours, _ = attend(Q, K, V, mask[:, None])
        return ours, adapter(toy, Q, K, V, mask)

    return Check("toy", "eq25", "ToyAttention", run)


def _verdict(result: Result, hint: str) -> None:
    if result.status != "conforms":
        raise AssertionError(f"the adapter does not conform (largest error {result.max_error:.2g}). Hint: {hint}")


def check_toy_adapter(adapter: Adapter) -> None:
    """Self-check of the exercise: the reader's adapter for :class:`ToyAttention` conforms to Eqs. (24)-(25).

    Args:
        adapter: ``(toy, Q, K, V, mask) -> c``; Q ``(B, h, n_q, d)``, mask ``True`` = may attend.

    Raises:
        AssertionError: with a hint (layout or polarity) if the adapter's output differs.
        ValueError: if the adapter returns a tensor of the wrong shape.
    """
    try:
        result = evaluate(toy_check(adapter, B=2, h=3, n_q=4, n_f=5, d=2))
    except ValueError as wrong_shape:
        raise AssertionError(f"the adapter's output has the wrong shape: {wrong_shape}") from None
    _verdict(result, "compare the toy's layout and mask polarity with the book's, one argument at a time")
    print("The adapter conforms: the toy computes Eqs. (24)-(25) once its conventions are mapped.")


def hidden_check_toy_adapter(adapter: Adapter) -> None:
    """Instructor check: the adapter also conforms where the shapes cannot reveal a swapped axis.

    Args:
        adapter: as :func:`check_toy_adapter`.

    Raises:
        AssertionError: if the adapter does not conform with ``h = n_q = n_f`` (a transposed
            layout keeps the shape there) or with a single head.
    """
    for B, h, n in ((3, 4, 4), (1, 1, 6)):
        try:
            result = evaluate(toy_check(adapter, B=B, h=h, n_q=n, n_f=n, d=4, seed=10 + h))
        except ValueError as wrong_shape:
            raise AssertionError(f"the adapter's output has the wrong shape: {wrong_shape}") from None
        _verdict(result, "an axis that happens to have the same size as another must still be mapped")
    print("hidden check passed")


# --------------------------------------------------------------------------- exercise 2: a forgotten polarity

#: ``rows_left(B, h, n_q, n_dead) -> int``, the reader's prediction for exercise 2.
RowsLeft = Callable[[int, int, int, int], int]


class _AnswerUsedTheMeasurement(RuntimeError):
    """Raised when the reader's ``rows_left`` calls the checker's own measurement instead of predicting."""


_judging = False  # True while the reader's function runs: the measurement then refuses to answer for it


def _rows_left_measured(B: int, h: int, n_q: int, n_f: int, n_dead: int, seed: int = 0) -> int:
    """Context rows that still differ once the "fully-masked rows" mapping is applied to an adapter that forgot the polarity.

    The adapter passes the book's mask to :class:`ToyAttention` as ``blocked`` unchanged. The
    mapping zeroes the library's rows of queries that may attend nothing
    (:func:`~attnsurvey.conformance.torch_target.zero_dead_rows`); a row still differs if any
    entry is off by more than :data:`~attnsurvey.conformance.TOLERANCE`.

    Args:
        B: batch size. h: heads. n_q: queries. n_f: keys (``n_f >= 2``).
        n_dead: how many queries, over the batch, may attend no key (at most ``B * n_q``);
            every other query may attend key 0 at least.
        seed: the inputs' seed.

    Shape:
        The context compared has shape ``(B, h, n_q, d_v)``: ``B * h * n_q`` rows.

    Returns:
        The number of rows that differ after the mapping.

    Raises:
        ValueError: if ``n_dead`` is out of range or ``n_f < 2``.
        _AnswerUsedTheMeasurement: if called from the reader's function while a check judges it.
    """
    if _judging:
        raise _AnswerUsedTheMeasurement(
            "the prediction must come from your reasoning, not from the checker's measurement"
        )
    if not 0 <= n_dead <= B * n_q or n_f < 2:
        raise ValueError(
            f"_rows_left_measured needs 0 <= n_dead <= B * n_q = {B * n_q} and n_f >= 2, got {n_dead}, {n_f}"
        )
    Q, K, V = rand(B, h, n_q, 3, seed=seed), rand(B, h, n_f, 3, seed=seed + 1), rand(B, h, n_f, 3, seed=seed + 2)
    mask = rand(B, n_q, n_f, seed=seed + 3) > -0.3
    mask[..., 0] = True
    for k in range(n_dead):  # spread over the batch, from the last query up
        mask[k % B, n_q - 1 - k // B] = False
    ours, _ = attend(Q, K, V, mask[:, None])
    forgetful = ToyAttention()(Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), blocked=mask).transpose(1, 2)
    mapped = zero_dead_rows(forgetful, mask[:, None])
    return int(((ours - mapped).abs().amax(-1) > TOLERANCE).sum())


def _whole_number(got: object) -> int | None:
    """``got`` as an int if it is integer-like (int, NumPy integer, 0-d integer tensor) or a whole float; else None."""
    if isinstance(got, bool) or (isinstance(got, Tensor) and (got.dim() != 0 or got.dtype == torch.bool)):
        return None  # True is not a count; a NumPy bool and a float tensor have no index and fall through
    if isinstance(got, float):  # 21.0 is a whole number of rows, 21.5 is not
        return int(got) if got.is_integer() else None
    try:
        return operator.index(got)  # type: ignore[arg-type]  # any object: index() raises for what is not an integer
    except TypeError:
        return None


def _call_the_answer(rows_left: RowsLeft, B: int, h: int, n_q: int, n_dead: int) -> object:
    global _judging
    _judging = True
    try:
        return rows_left(B, h, n_q, n_dead)
    finally:
        _judging = False


def _judge_rows_left(rows_left: RowsLeft, cases: tuple[tuple[int, int, int, int, int], ...]) -> None:
    for B, h, n_q, n_f, n_dead in cases:
        what = f"B = {B}, h = {h}, n_q = {n_q}, n_dead = {n_dead}"
        try:
            answer = _call_the_answer(rows_left, B, h, n_q, n_dead)
        except _AnswerUsedTheMeasurement as err:
            raise AssertionError(f"{what}: {err}") from None
        except Exception as err:  # the reader's function failing on these sizes is a wrong answer, with its reason
            raise AssertionError(f"{what}: your function failed ({type(err).__name__}: {err})") from err
        got = _whole_number(answer)
        if got is None:
            raise AssertionError(f"{what}: give a whole number of rows, got {answer!r}")
        want = _rows_left_measured(B, h, n_q, n_f, n_dead, seed=B + h + n_q + n_dead)
        if got == want:
            continue
        if got == 0:
            hint = "then the convention would explain the forgotten polarity; what does the toy attend for a query that may attend some keys?"
        elif got == B * h * n_q:
            hint = "the mapping does make some rows agree: which rows does it change, and what had the toy given them?"
        elif h > 1 and got == B * h * n_q - n_dead:
            hint = "the check compares rows of the context (B, h, n_q, d_v): how many rows does one query own?"
        else:
            hint = (
                "go through the kinds of query (may attend some keys, every key, no key): what does the toy attend "
                "for each when it reads the mask as blocked, and what does the mapping change?"
            )
        raise AssertionError(f"{what}: not the number of rows that still differ. Hint: {hint}")


def check_rows_left(rows_left: RowsLeft) -> None:
    """Self-check of exercise 2: ``rows_left(B, h, n_q, n_dead)`` predicts the rows a forgotten polarity leaves different.

    Compared with the count measured on the toy (the context rows that differ by more than
    :data:`~attnsurvey.conformance.TOLERANCE`) on the visible check's sizes and one more.

    Args:
        rows_left: the reader's function.

    Raises:
        AssertionError: with a hint that names no count, if a prediction is not the measured count
            or not a whole number (an int, a NumPy integer, a 0-d integer tensor or a whole float).
    """
    _judge_rows_left(rows_left, ((2, 3, 4, 5, 1), (3, 2, 3, 4, 2)))
    print("correct: the forgotten polarity leaves exactly as many rows different as you predicted")


def hidden_check_rows_left(rows_left: RowsLeft) -> None:
    """Instructor check of exercise 2: other sizes, including no fully-masked query and every query of the batch.

    Args:
        rows_left: the reader's function.

    Raises:
        AssertionError: if a prediction is not the measured count.
    """
    _judge_rows_left(rows_left, ((1, 1, 6, 6, 0), (2, 4, 4, 4, 3), (2, 2, 3, 5, 6), (4, 3, 2, 3, 5)))
    print("hidden check passed")
