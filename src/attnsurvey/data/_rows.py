"""Helpers shared by the data generators: datasets as rows of tensors, size checks."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

from torch import Tensor

R = TypeVar("R", bound="Rows")


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

    def subset(self: R, idx: Tensor | slice) -> R:
        """The examples at ``idx`` (a slice or index tensor), as the same dataclass."""
        return type(self)(**{k: v[idx] if isinstance(v, Tensor) else v for k, v in self._tensors().items()})


def check_positive(**sizes: int) -> None:
    """Raise ``ValueError`` naming the first size below 1, e.g. ``n_f must be >= 1, got n_f=0``."""
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {name}={value}")
