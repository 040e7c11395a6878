"""Helpers shared by the data generators: datasets as rows of tensors, size checks."""

from __future__ import annotations

import operator
from dataclasses import fields
from typing import Any, TypeVar

import torch
from torch import Tensor

from .._checks import InputTypeError, check_integers

R = TypeVar("R", bound="Rows")


class ExampleIndexError(IndexError, ValueError):
    """An example index outside ``[-N, N)``: an ``IndexError`` (so iteration protocols keep working) that is also a
    ``ValueError``, like every other bad argument of the package."""


class Rows:
    """Mixin for a dataclass whose tensor fields hold one row per example (first dimension).

    ``len(data)`` is the number of rows; ``data.subset(idx)`` keeps the rows at
    ``idx`` (a slice or an index tensor) of every tensor field and passes the
    other fields (vocabularies, sizes) through unchanged.
    """

    def _tensors(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]  # a dataclass

    def __len__(self) -> int:
        return next(v.shape[0] for v in self._tensors().values() if isinstance(v, Tensor))

    def check_example(self, i: int, symbol: str = "i") -> int:
        """``i`` if it picks one of the ``N`` examples (``-N <= i < N``, negative counting from the end).

        Raises:
            InputTypeError: if ``i`` is not an integer.
            ExampleIndexError: (an ``IndexError`` and a ``ValueError``) naming ``symbol``, the range and ``i``.
        """
        index: dict[str, Any] = {symbol: i}  # typed Any, or mypy matches it against allow_none
        check_integers(type(self).__name__, **index)
        i = operator.index(i)
        n = len(self)
        if not -n <= i < n:
            raise ExampleIndexError(
                f"{symbol} must pick one of the N={n} examples: an integer in [-{n}, {n}), got {symbol}={i}"
            )
        return i

    def subset(self: R, idx: Tensor | slice | int) -> R:
        """The examples at ``idx`` (a slice, an index tensor, a boolean tensor of length N, or one index), as the
        same dataclass.

        Raises:
            ExampleIndexError: for an index outside ``[-N, N)`` (named with the range and the value).
            ValueError: for a boolean ``idx`` whose length is not N.
            InputTypeError: for an ``idx`` of another type.
        """
        n = len(self)
        if isinstance(idx, Tensor):
            if idx.dtype == torch.bool:
                if tuple(idx.shape) != (n,):
                    raise ValueError(f"a boolean idx must have shape (N,) = ({n},), got {tuple(idx.shape)}")
            elif idx.is_floating_point() or idx.is_complex():
                raise InputTypeError(f"idx must be an integer or boolean tensor, got dtype={idx.dtype}")
            elif idx.numel() and not bool(((idx >= -n) & (idx < n)).all()):
                bad = idx[(idx < -n) | (idx >= n)].flatten()[0]
                raise ExampleIndexError(
                    f"idx must pick examples among the N={n}: integers in [-{n}, {n}), got idx holding {int(bad)}"
                )
        elif not isinstance(idx, slice):
            self.check_example(idx, "idx")  # an int, or refused there
        return type(self)(**{k: v[idx] if isinstance(v, Tensor) else v for k, v in self._tensors().items()})


def check_positive(**sizes: int) -> None:
    """Raise ``ValueError`` naming the first size below 1, e.g. ``n_f must be >= 1, got n_f=0``."""
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {name}={value}")
