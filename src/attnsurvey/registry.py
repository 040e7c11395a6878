"""Name registries for the pluggable parts of attention: scores, alignments, masks.

A :class:`Registry` maps a name (the survey's spelling, e.g. ``"scaled-multiplicative"``)
to an object. Every list of names in the package is read from a registry, so adding
a score, an alignment or a mask builder is one definition plus one ``register`` call
(usually as a decorator). Looking up an unknown name raises ``ValueError`` listing the
known names. This module sits at the bottom of the package: it imports nothing from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, cast, overload

T = TypeVar("T")


class Registry(Generic[T]):
    """An ordered ``name -> object`` table with helpful errors.

    ``register(name)`` is a decorator; ``register(name, obj)`` registers directly.
    ``registry[name]`` returns the object or raises ``ValueError`` listing the
    known names; ``names()`` returns them in registration order.

    Args:
        kind: names what is registered (``"score function"``); it appears in errors.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    @overload
    def register(self, name: str, obj: None = None) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, obj: T) -> T: ...
    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name`` (or return a decorator that does).

        Raises ``ValueError`` if ``name`` is already taken (names are unique).
        """

        def add(o: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = o
            return o

        return add if obj is None else add(obj)

    def __getitem__(self, name: str) -> T:
        if not isinstance(name, str) or name not in self._items:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {list(self._items)}")
        return self._items[name]

    def resolve(self, value: str | T, arg: str, signature: str) -> T:
        """``value`` itself if it is callable, else the object registered under that name.

        For the arguments that take a registered name or a function of their own
        (an alignment, a feature map).

        Args:
            value: a registered name or a callable.
            arg: the argument's name, for the error message.
            signature: what a callable must look like, for the error message (``"(e, mask) -> a"``).

        Returns:
            The callable.

        Raises:
            ValueError: for an unknown name.
            TypeError: for anything that is neither a string nor callable.
        """
        if isinstance(value, str):
            return self[value]
        if not callable(value):
            raise TypeError(
                f"{arg} must be a registered name {list(self._items)} or a callable {signature}, "
                f"got {type(value).__name__}"
            )
        return cast(T, value)  # a callable given in place of a name, checked just above

    def get(self, name: str, default: T | None = None) -> T | None:
        """The object registered under ``name``, or ``default``."""
        return self._items.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._items)

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs in registration order."""
        return list(self._items.items())
