"""Shared pieces of the self-checks: a count given as a whole number, a real number, a verdict on a paired difference, a taxonomy point against a reference.

Each raises ``AssertionError`` with a hint, as every check does, so a check
reads as the exercise's own logic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import taxonomy as tx


def whole_number(answer: object, what: str) -> int:
    """``answer`` as an ``int``; raises ``AssertionError`` (naming ``what``) unless it is a whole number.

    Accepts ints, floats with no fraction (``8.0``), numpy and 0-d torch numbers.
    """
    try:
        value = float(answer)  # type: ignore[arg-type]  # any number-like answer; a non-number is the reader's slip
    except (TypeError, ValueError):
        raise AssertionError(f"got {answer!r}: {what} is a number") from None
    if not value.is_integer():
        raise AssertionError(f"got {answer}: {what} is a whole number")
    return int(value)


def real_number(answer: object, what: str) -> float:
    """``answer`` as a finite ``float``; raises ``AssertionError`` (naming ``what``) for None, a bool or a non-number.

    Accepts ints, floats, numpy and 0-d torch numbers.
    """
    if answer is None or isinstance(answer, (bool, str, bytes)):
        raise AssertionError(f"set {what} to a number (got {answer!r})")
    try:
        value = float(answer)  # type: ignore[arg-type]  # any number-like answer; a non-number is the reader's slip
    except (TypeError, ValueError):
        raise AssertionError(f"got {answer!r}: {what} is a number") from None
    if not math.isfinite(value):
        raise AssertionError(f"got {answer}: {what} is a finite number")
    return value


def paired_verdict(
    verdict: object, a: Sequence[float], b: Sequence[float], name: str, words: tuple[str, str, str]
) -> None:
    """Check a reader's verdict on ``a - b`` (paired over seeds) against its 95% interval.

    ``words`` name the three cases: the interval above zero, below zero, and
    containing zero. Raises ``AssertionError`` (naming ``name``) for another word,
    unpaired lists, or a verdict the interval does not give.
    """
    from ..stats import paired_difference

    if verdict not in words:
        raise AssertionError(f"{name} must be one of {words}, got {verdict!r}")
    a, b = list(a), list(b)
    if len(a) != len(b) or len(a) < 2:
        raise AssertionError(f"{name}: give one value per seed for both, on the same seeds (got {len(a)} and {len(b)})")
    diff = paired_difference(a, b)
    want = words[0] if diff.low > 0 else words[1] if diff.high < 0 else words[2]
    if verdict != want:
        raise AssertionError(f"{name} = {verdict!r} does not follow from the paired 95% interval of your own results")


def dimensions_changed(point: object, reference: tx.TaxonomyPoint) -> list[str]:
    """The taxonomy dimensions in which ``point`` differs from ``reference``, in the order of :data:`tx.DIMENSIONS`.

    Raises ``AssertionError`` unless ``point`` is a :class:`~attnsurvey.taxonomy.TaxonomyPoint`.
    """
    if not isinstance(point, tx.TaxonomyPoint):
        raise AssertionError(f"build a TaxonomyPoint with B.point(...), got {type(point).__name__}")
    return [d for d in tx.DIMENSIONS if getattr(point, d) != getattr(reference, d)]


def not_the_same_model(model: torch.nn.Module, other: torch.nn.Module | None, hint: str) -> None:
    """Raise ``AssertionError`` with ``hint`` if ``model`` is ``other`` or holds exactly its parameters.

    It catches an exercise run that hands in the chapter's own trained model
    instead of training a new one with the exercise's setting.
    """
    if other is None:
        return
    if model is other:
        raise AssertionError(hint)
    mine, theirs = model.state_dict(), other.state_dict()
    if mine.keys() == theirs.keys() and all(
        mine[k].shape == theirs[k].shape and torch.equal(mine[k], theirs[k]) for k in mine
    ):
        raise AssertionError(hint)


def run_answer(fn: Callable[..., Any], *args: Any, what: str) -> Any:
    """``fn(*args)``, the reader's function on a check's inputs.

    An error such a function typically raises on inputs it was not written for
    (a shape it did not expect, an overflow, a division by zero) becomes an
    ``AssertionError`` that names ``what`` the inputs were.
    """
    try:
        return fn(*args)
    except (RuntimeError, ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError) as err:
        raise AssertionError(f"{what}: your function failed ({type(err).__name__}: {err})") from err


class _NoLibraryAttention(torch.overrides.TorchFunctionMode):
    """A torch function mode in which the library's matrix products, softmax and fused attention raise."""

    BLOCKED = frozenset(
        {
            torch.softmax,
            torch.nn.functional.softmax,
            torch.Tensor.softmax,
            torch.nn.functional.scaled_dot_product_attention,
            torch.matmul,
            torch.Tensor.__matmul__,
            torch.Tensor.__rmatmul__,
            torch.mm,
            torch.bmm,
            torch.baddbmm,
            torch.einsum,
        }
    )

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in self.BLOCKED:
            name = getattr(func, "__name__", str(func))
            raise AssertionError(
                f"your function calls torch's {name}: this exercise asks for Python loops and scalars only"
            )
        return func(*args, **(kwargs or {}))


def run_by_hand(fn: Callable[..., Any], *args: Any, what: str) -> Any:
    """:func:`run_answer`, with torch's matrix products, softmax and fused attention forbidden.

    For exercises that ask for a computation written out with loops: a function that
    calls ``attend`` (or ``@``, ``torch.softmax``, ``F.scaled_dot_product_attention``)
    raises ``AssertionError`` instead of passing by reusing the chapter's code.
    """
    with by_hand():
        return run_answer(fn, *args, what=what)


def by_hand() -> torch.overrides.TorchFunctionMode:
    """A context in which torch's matrix products, softmax and fused attention raise ``AssertionError``."""
    return _NoLibraryAttention()


def run_on_copies(fn: Callable[..., Any], *args: Any, what: str) -> Any:
    """:func:`run_answer` on copies of the tensor arguments, which must come back unchanged.

    A function that edits its inputs in place (``x.mul_(a)``, ``x[0] = 0``) would change
    the caller's tensors; it raises ``AssertionError`` naming ``what`` the inputs were.
    The inputs must hold no NaN (a NaN never equals itself).
    """
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    answer = run_answer(fn, *copies, what=what)
    if any(isinstance(a, torch.Tensor) and not torch.equal(a, c) for a, c in zip(args, copies, strict=True)):
        raise AssertionError(
            f"{what}: your function changed one of its inputs in place; compute on new tensors (x = x * a, not x.mul_(a))"
        )
    return answer


class _CountCalls(torch.overrides.TorchFunctionMode):
    """A torch function mode that counts the torch functions and tensor methods called under it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def torch_calls(fn: Callable[..., Any], *args: Any, what: str) -> int:
    """How many torch functions and tensor methods :func:`run_answer` ``(fn, *args)`` calls directly.

    Calls made inside a torch function are not counted. A Python loop over a sequence's
    positions calls more of them as the sequence grows; a parallel form calls as many
    whatever its length.
    """
    with _CountCalls() as mode:
        run_answer(fn, *args, what=what)
    return mode.calls
