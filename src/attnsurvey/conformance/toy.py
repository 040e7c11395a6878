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

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .._checks import check_rank
from ..attention import attend
from . import Check, Result, evaluate
from .torch_target import rand

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
