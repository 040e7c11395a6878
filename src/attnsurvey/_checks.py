"""Input validation shared by every public function.

Each public function checks and converts its inputs once, at its edge, with these
helpers, then calls private code that trusts them. Errors name the survey's symbols (Table I) and the shapes that were seen, so a
reader who passes ``F`` with the wrong width learns *which* symbol was wrong.
"""

from __future__ import annotations

import functools
import operator
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from torch import Tensor


class InputTypeError(TypeError, ValueError):
    """An argument of the wrong type: a ``TypeError`` that is also a ``ValueError``.

    The package does not convert NumPy arrays, Python lists or integer tensors
    silently (an int tensor would truncate random rotations, a list has no
    dtype to follow): it raises this error naming the argument, what it got and
    how to convert. It subclasses ``ValueError`` too, so a caller that catches
    ``ValueError`` for any bad argument catches it as well.
    """


def as_tensor(x: object, symbol: str) -> Tensor:
    """Return ``x`` if it is a floating-point ``torch.Tensor``, else raise :class:`InputTypeError`.

    The one place where inputs are type-checked: NumPy arrays, Python lists and scalars,
    and integer/boolean tensors are rejected (not converted) with a message naming
    ``symbol`` and the conversion to apply (``torch.as_tensor(x, dtype=torch.float32)``).

    Args:
        x: the argument.
        symbol: its name (the survey's symbol) for the message.

    Shape:
        x: any shape, returned unchanged.

    Returns:
        ``x``.

    Raises:
        InputTypeError: a ``TypeError`` (and ``ValueError``) for anything else.
    """
    if not isinstance(x, Tensor):
        raise InputTypeError(
            f"{symbol} must be a torch.Tensor (floating point), got {type(x).__module__}.{type(x).__name__}; "
            f"convert it with torch.as_tensor({symbol}, dtype=torch.float32)"
        )
    if not x.is_floating_point():
        raise InputTypeError(
            f"{symbol} must be a floating-point tensor (float16, bfloat16, float32 or float64), got dtype={x.dtype}; "
            f"convert it with {symbol}.float()"
        )
    return x


def mean_or_zero(x: Tensor) -> Tensor:
    """Mean of every entry of ``x``; an empty ``x`` gives 0 (still on x's graph).

    The package's convention for *losses* averaged over a batch or over the unpadded
    tokens; metrics raise instead (:func:`check_scored`).

    Args:
        x: the values.

    Shape:
        x: any shape, empty included; returns ``()``.

    Returns:
        A 0-d tensor.
    """
    return x.mean() if x.numel() else x.sum()


def check_scored(count: int, what: str, symbols: str) -> None:
    """Raise when a metric has nothing to score (its mean would be 0/0 = NaN).

    Args:
        count: the number of items scored.
        what: the metric's name.
        symbols: the inputs, named in the message.

    Raises:
        ValueError: when ``count == 0``.
    """
    if count == 0:
        raise ValueError(f"{what} is undefined over no items: {symbols} holds nothing to score (empty or all padding)")


def check_min_rank(x: Tensor, rank: int, symbol: str, layout: str) -> None:
    """Check that ``x`` has at least ``rank`` dimensions.

    Args:
        x: the tensor.
        rank: the least rank.
        symbol: its name for the message.
        layout: its shape in symbols, e.g. ``"(..., n_f, d_k)"``.

    Shape:
        x: any shape with at least ``rank`` dimensions.

    Raises:
        ValueError: naming ``symbol``, ``layout`` and the shape seen.
    """
    if x.dim() < rank:
        raise ValueError(f"{symbol} must have shape {layout}, got shape {tuple(x.shape)}")


def check_rank(x: Tensor, rank: int, symbol: str, layout: str) -> Tensor:
    """Return ``x`` if it is a floating-point tensor with exactly ``rank`` dimensions.

    Args:
        x: the argument.
        rank: the rank required.
        symbol: its name for the message.
        layout: its shape in symbols.

    Shape:
        x: exactly ``rank`` dimensions, returned unchanged.

    Returns:
        ``x``.

    Raises:
        InputTypeError: for a non-tensor (see :func:`as_tensor`).
        ValueError: naming ``symbol``, ``layout`` and the shape seen.
    """
    as_tensor(x, symbol)
    if x.dim() != rank:
        raise ValueError(f"{symbol} must have shape {layout}, got {tuple(x.shape)}")
    return x


def check_same_shape(a: Tensor, b: Tensor, name_a: str, name_b: str, what: str) -> None:
    """Check that ``a`` and ``b`` have one shape.

    Args:
        a: the first tensor.
        b: the second tensor.
        name_a: the first's name.
        name_b: the second's name.
        what: the lead-in of the message.

    Shape:
        a, b: any shape, the same for both.

    Raises:
        ValueError: ``what``, then both shapes.
    """
    if a.shape != b.shape:
        raise ValueError(f"{what}, got {name_a} {tuple(a.shape)}, {name_b} {tuple(b.shape)}")


def check_nonempty(x: Tensor, dim: int, symbol: str, size_name: str) -> None:
    """Check that dimension ``dim`` of ``x`` is not empty.

    Args:
        x: the tensor.
        dim: the axis.
        symbol: its name for the message.
        size_name: the axis' symbol, e.g. ``"n_f"``.

    Shape:
        x: any shape with ``x.shape[dim] > 0``.

    Raises:
        ValueError: if the axis has size 0.
    """
    if x.shape[dim] == 0:
        raise ValueError(f"{symbol} is empty: {size_name}=0 in shape {tuple(x.shape)}")


def check_same_dtype(**tensors: Tensor) -> None:
    """Check that the named tensors share one dtype.

    Args:
        **tensors: the tensors by name.

    Shape:
        each tensor: any shape.

    Raises:
        InputTypeError: listing every dtype seen.
    """
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        seen = ", ".join(f"{n}={d}" for n, d in dtypes.items())
        raise InputTypeError(f"dtype mismatch: {seen}; the inputs must share one floating-point dtype")


def check_dim_equal(a: int, b: int, what: str, name_a: str, name_b: str) -> None:
    """Check that two sizes are equal.

    Args:
        a: the first size.
        b: the second size.
        what: the lead-in of the message.
        name_a: the first's symbol.
        name_b: the second's symbol.

    Raises:
        ValueError: with both sizes, if they differ.
    """
    if a != b:
        raise ValueError(f"{what} needs {name_a} == {name_b}, got {name_a}={a}, {name_b}={b}")


def check_weight(W: Tensor, shape: Sequence[int], symbol: str, layout: str) -> None:
    """Check that weight ``W`` is a floating-point tensor of exactly ``shape``.

    Args:
        W: the weight.
        shape: the shape required.
        symbol: its name for the message.
        layout: the shape in symbols.

    Shape:
        W: exactly ``shape``.

    Raises:
        InputTypeError: for a non-tensor.
        ValueError: for another shape.
    """
    as_tensor(W, symbol)
    if tuple(W.shape) != tuple(shape):
        raise ValueError(f"{symbol} must have shape {layout} = {tuple(shape)}, got {tuple(W.shape)}")


def check_batch_broadcast(a: Tensor, b: Tensor, name_a: str, name_b: str, tail: int = 2) -> None:
    """Check that the leading (batch) dimensions of ``a`` and ``b`` broadcast.

    Args:
        a: the first tensor.
        b: the second tensor.
        name_a: the first's name.
        name_b: the second's name.
        tail: how many trailing (non-batch) axes each has.

    Shape:
        a: ``(*batch_a, *tail_a)``, b: ``(*batch_b, *tail_b)``, ``tail`` trailing axes each; the batches broadcast.

    Raises:
        ValueError: with both shapes, if they do not broadcast.
    """
    if broadcast_batch(a.shape[:-tail], b.shape[:-tail]) is None:
        raise ValueError(
            f"batch dimensions of {name_a} {tuple(a.shape)} and {name_b} {tuple(b.shape)} do not broadcast"
        )


def broadcast_batch(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The broadcast of ``shapes`` (torch's rules), or None when they do not broadcast.

    Args:
        *shapes: sizes of tensors' leading (batch) axes.

    Returns:
        The broadcast shape as a tuple, or None. Plain Python on tuples: cheaper than
        ``torch.broadcast_shapes``, which the attention core would otherwise call per head.
    """
    if not shapes:
        return ()
    first = shapes[0]
    for s in shapes:  # the common case first: one shape (a list and a tuple differ here; the loop below decides)
        if s != first:
            break
    else:
        return tuple(first)
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for i, size in enumerate(s, start=rank - len(s)):
            if size != 1:
                if out[i] != 1 and out[i] != size:
                    return None
                out[i] = size
    return tuple(out)


_Options = TypeVar("_Options", bound=Mapping[str, object])


@dataclass(frozen=True)
class Default:
    """The default of an option, carried by its annotation in the options' TypedDict.

    ``heads: Annotated[int, Default(2)]`` declares the option ``heads``, its type and its
    default in one line; :func:`option_defaults` collects them.

    Args:
        value: the value a call that leaves the option out gets.
    """

    value: object


@functools.cache
def _declared_defaults(options: type) -> tuple[tuple[str, object], ...]:
    hints = typing.get_type_hints(options, include_extras=True)
    out = []
    for name, hint in hints.items():
        found = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Default)]
        if len(found) != 1:
            raise TypeError(f"{options.__name__}.{name} must be annotated Annotated[type, Default(value)]")
        out.append((name, found[0].value))
    return tuple(out)


def option_defaults(options: Any) -> Any:
    """A new dict holding the default of every option that the TypedDict ``options`` declares.

    Each option is declared once, as ``name: Annotated[type, Default(value)]``: this
    reads the ``Default`` of every annotation (inherited ones included).

    Args:
        options: a TypedDict class whose every annotation carries one :class:`Default`.

    Returns:
        ``{name: default}`` in declaration order, typed as the TypedDict by the caller.

    Raises:
        TypeError: for an option declared without a ``Default``.
    """
    return dict(_declared_defaults(options))


def with_defaults(given: _Options, defaults: _Options, declared_by: str) -> _Options:
    """Every option: ``given`` over ``defaults`` (which holds all that the TypedDict ``declared_by`` declares).

    The one place where a function that takes ``**options: Unpack[SomeOptions]``
    fills in its defaults.

    Args:
        given: the options of the call.
        defaults: a value for every declared option.
        declared_by: the TypedDict's name, for the message.

    Returns:
        A new mapping: ``defaults`` updated with ``given``.

    Raises:
        TypeError: for a name that ``declared_by`` does not declare, as a call with an unknown keyword would.
    """
    if unknown := sorted(given.keys() - defaults.keys()):
        raise TypeError(f"unknown option(s) {unknown}; {declared_by} declares {list(defaults)}")
    return cast(_Options, {**defaults, **given})


def check_nonnegative(what: str, **values: float) -> None:
    """Check that every named value (a width ``sigma``, a window) is a finite number >= 0.

    Args:
        what: the caller's name, for the message.
        **values: the values by their symbol.

    Raises:
        ValueError: for a value that is a bool, not an int or float, not finite, or negative.
    """
    for name, value in values.items():
        if not _finite_number(value) or value < 0:
            raise ValueError(f"{what} needs {name} to be a finite number >= 0, got {name}={value!r}")


def check_positive(what: str, **values: float) -> None:
    """Check that every named value (an ``eps``, a scale) is a finite number > 0.

    Args:
        what: the caller's name, for the message.
        **values: the values by their symbol.

    Raises:
        ValueError: for a value that is a bool, not an int or float, not finite, or <= 0.
    """
    for name, value in values.items():
        if not _finite_number(value) or value <= 0:
            raise ValueError(f"{what} needs {name} to be a finite number > 0, got {name}={value!r}")


def check_probability(what: str, **values: float) -> None:
    """Check that every named value (a dropout probability) is a number in ``[0, 1]``.

    Args:
        what: the caller's name, for the message.
        **values: the values by their symbol.

    Raises:
        ValueError: for a value that is a bool, not an int or float, or outside ``[0, 1]`` (NaN included).
    """
    for name, value in values.items():
        if not _finite_number(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{what} needs {name} to be a probability in [0, 1], got {name}={value!r}")


def require_tensor(x: object, symbol: str) -> Tensor:
    """Return ``x`` if it is a ``torch.Tensor`` of any dtype (counts, labels), else raise :class:`InputTypeError`.

    For arguments that may legitimately hold integers; floating-point inputs use :func:`as_tensor`.

    Args:
        x: the argument.
        symbol: its name (the survey's symbol) for the message.

    Shape:
        x: any shape, returned unchanged.

    Returns:
        ``x``.

    Raises:
        InputTypeError: a ``TypeError`` (and ``ValueError``) if x is not a tensor.
    """
    if not isinstance(x, Tensor):
        raise InputTypeError(
            f"{symbol} must be a torch.Tensor, got {type(x).__module__}.{type(x).__name__}; "
            f"convert it with torch.as_tensor({symbol})"
        )
    return x


def _finite_number(value: object) -> bool:
    """Whether ``value`` is a Python int or float (not a bool) that is finite (neither NaN nor +-inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value == value and value not in (float("inf"), float("-inf"))


def check_index_range(
    x: Tensor, high: int | None, symbol: str, what: str, ignore: int | None = None, low: int = 0
) -> Tensor:
    """Check that the integer tensor ``x`` (targets, tokens, positions) holds values in ``[low, high)``.

    The error names ``symbol``, the range and a value outside it, instead of the ``IndexError``
    that an embedding, a ``gather`` or a cross-entropy raises from inside torch.

    Args:
        x: the indices.
        high: the exclusive upper bound (e.g. the number of classes ``C``); None = no upper bound
            (token ids of an unknown vocabulary: only ``low`` is checked).
        symbol: its name (the survey's symbol) for the message.
        what: the caller's name and the bound's name, e.g. ``"accuracy (C classes)"``.
        ignore: a value that is skipped (an ``ignore_index``), or None.
        low: the least valid value.

    Shape:
        x: any shape, returned unchanged.

    Returns:
        ``x``.

    Raises:
        InputTypeError: if ``x`` is not an integer tensor.
        ValueError: naming ``symbol``, ``[low, high)`` and the first value outside it.
    """
    if not isinstance(x, Tensor):
        raise InputTypeError(
            f"{symbol} must be an integer torch.Tensor, got {type(x).__module__}.{type(x).__name__}; "
            f"convert it with torch.as_tensor({symbol}, dtype=torch.long)"
        )
    if x.is_floating_point() or x.is_complex() or str(x.dtype) == "torch.bool":
        raise InputTypeError(
            f"{symbol} must be an integer tensor (indices), got dtype={x.dtype}; convert it with {symbol}.long()"
        )
    bad = x < low
    if high is not None:
        bad = bad | (x >= high)
    if ignore is not None:
        bad = bad & (x != ignore)
    if x.numel() and bool(bad.any()):
        seen = int(x[bad].flatten()[0])
        span = f"[{low}, {high})" if high is not None else f">= {low}"
        skip = f" (or ignore_index={ignore})" if ignore is not None else ""
        raise ValueError(f"{what}: {symbol} must hold integers in {span}{skip}, got {symbol} holding {seen}")
    return x


def check_integers(what: str, /, *, minimum: int | None = None, allow_none: bool = False, **values: object) -> None:
    """Check that every named size or count (``d_k=..``, ``n=..``) is an integer, and at least ``minimum`` if given.

    The package's one rule for integer arguments, checked before a value reaches torch (a float
    such as ``2.5`` would otherwise fail inside ``torch.randint`` or ``range`` with a message about
    tuples of ints): an integer is anything with ``__index__`` (``int``, NumPy integers) except a
    ``bool``. Both messages name the caller, the symbol and the value seen, e.g.
    ``"Seq2Seq needs d_h to be an integer >= 1, got d_h=0"``.

    Args:
        what: the caller's name, for the message.
        minimum: the least value allowed (1 for a size, 0 for a count); None checks the type only.
        allow_none: skip values that are ``None`` (left to a default).
        **values: the values by their symbol.

    Raises:
        InputTypeError: (a ``TypeError`` and a ``ValueError``) naming the first value that is a bool
            or not an integer.
        ValueError: naming the first integer below ``minimum``.
    """
    bound = "" if minimum is None else f" >= {minimum}"
    for name, value in values.items():
        if value is None and allow_none:
            continue
        if not _is_integer(value):
            raise InputTypeError(
                f"{what} needs {name} to be an integer{bound}, got {name}={value!r} ({type(value).__name__})"
            )
        if minimum is not None and operator.index(cast(Any, value)) < minimum:
            raise ValueError(f"{what} needs {name} to be an integer{bound}, got {name}={value!r}")


def _is_integer(value: object) -> bool:
    """Whether ``value`` has ``__index__`` (an int, a NumPy integer) and is not a bool."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(cast(Any, value))
    except TypeError:
        return False
    return True
