"""Synthesizer: attention weights without query-key dot products (Tay et al., 2021).

*Dense* Synthesizer: each token predicts its own row of weights from itself
alone, ``B_i = W_2 relu(W_1 x_i + b_1) + b_2`` (a vector of ``l = max_len``
logits), ``A = softmax(B[:, :n])``.
*Random* Synthesizer: the weights are a learned (or fixed) matrix ``R``
``(l, l)`` that ignores the input entirely, ``A = softmax(R[:n, :n])``.
In both, the output is ``Y = A G(X)`` with a value projection ``G``.
That these compete with dot-product attention on some tasks questions how
much the *pairwise* comparison matters. Masks are boolean, ``True`` = may attend.

Shapes: ``...`` leading batch axes, n tokens, d model width, d_h hidden width, l longest sequence.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_integers, check_min_rank, check_weight
from ..attention import align_scores, context
from ..catalog import catalogued
from ..masking import attended_keys, zero_masked

CHAPTER = "chapters/ch03_3_4_transformer_variants.ipynb"


def _values(X: Tensor, W_V: nn.Linear, mask: Tensor | None) -> Tensor:
    """``G(X)`` with padded tokens holding NaN/Inf zeroed first, so they reach no output or gradient."""
    return W_V(zero_masked(X, attended_keys(mask)))


def _check_len(n: int, max_len: int, what: str) -> None:
    if n > max_len:
        raise ValueError(f"{what} synthesizes weights for max_len l={max_len} positions, got n={n}")


@catalogued("extra:synthesizer-dense", title="Dense Synthesizer: each token predicts its own row of attention weights")
def dense_synthesizer_weights(
    X: Tensor, W_1: Tensor, b_1: Tensor, W_2: Tensor, b_2: Tensor, mask: Tensor | None = None
) -> Tensor:
    """Dense Synthesizer weights ``A = softmax(W_2 relu(W_1 x_i + b_1) + b_2)[:, :n]``.

    Args:
        X: the inputs.
        W_1: the first weight.
        b_1: the first bias.
        W_2: the second weight.
        b_2: the second bias.
        mask: boolean broadcastable to ``(..., n, n)``, ``True`` = may attend
            (a fully-masked row is all 0).

    Shape:
        - X: ``(..., n, d)``; W_1: ``(d_h, d)``; b_1: ``(d_h,)``; W_2: ``(l, d_h)``;
          b_2: ``(l,)`` with ``l >= n``.
        - Output: A ``(..., n, n)``.

    Returns:
        The weights A.

    Raises:
        ValueError: if ``n > l`` or a weight has the wrong shape.
        TypeError: if X is not a floating-point tensor.
    """
    for symbol, x in {"X": X, "W_1": W_1, "b_1": b_1, "W_2": W_2, "b_2": b_2}.items():
        as_tensor(x, symbol)
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d)")
    d_h, l = W_1.shape[0], W_2.shape[0]
    check_weight(W_1, (d_h, X.shape[-1]), "W_1", "(d_h, d)")
    check_weight(b_1, (d_h,), "b_1", "(d_h,)")
    check_weight(W_2, (l, d_h), "W_2", "(l, d_h)")
    check_weight(b_2, (l,), "b_2", "(l,)")
    n = X.shape[-2]
    _check_len(n, l, "the Dense Synthesizer")
    X = zero_masked(X, attended_keys(mask))  # a padded token holding NaN is inert in the gradients too
    B = torch.relu(X @ W_1.T + b_1) @ W_2[:n].T + b_2[:n]
    return align_scores(B, mask)  # the alignment step of attend, on synthesised scores


@catalogued(
    "extra:synthesizer-random", title="Random Synthesizer: input-independent (learned or fixed) attention weights"
)
def random_synthesizer_weights(R: Tensor, n: int, mask: Tensor | None = None) -> Tensor:
    """Random Synthesizer weights ``A = softmax(R[:n, :n])``, the same for every input.

    Args:
        R: the random logits.
        n: the sequence length.
        mask: boolean broadcastable to ``(n, n)``, ``True`` = may attend.

    Shape:
        - R: ``(l, l)``.
        - Output: A ``(n, n)``.

    Returns:
        The weights A.

    Raises:
        ValueError: if ``n > l`` or R is not square.
        TypeError: if R is not a floating-point tensor.
    """
    check_integers("random_synthesizer_weights", minimum=0, n=n)
    as_tensor(R, "R")
    if R.dim() != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"R must have shape (l, l), got {tuple(R.shape)}")
    _check_len(n, R.shape[0], "the Random Synthesizer")
    return align_scores(R[:n, :n], mask)


@catalogued("extra:synthesizer-dense")
class DenseSynthesizer(nn.Module):
    """Dense Synthesizer layer: forward returns ``(W_O (A W_V X), A)``.

    A key no query may attend is padding: NaN/Inf stored there reaches neither the
    output nor any gradient (parameters included); a fully-masked query row gets the
    context 0 (output ``W_O 0``, its bias).

    Args:
        d_model: the model width.
        max_len: the longest sequence ``l``.
        d_hidden: the hidden width ``d_h`` (None: d_model).

    Shape:
        - X: ``(..., n, d_model)`` with ``n <= max_len``.
        - mask: boolean ``(..., n, n)`` or ``(n, n)``, ``True`` = may attend.
        - Output: ``(output (..., n, d_model), A (..., n, n))``.

    Raises:
        ValueError: if a size is not an integer >= 1, or ``n > max_len`` (see :func:`dense_synthesizer_weights`).
    """

    def __init__(self, d_model: int, max_len: int, d_hidden: int | None = None) -> None:
        check_integers("DenseSynthesizer", minimum=1, d_model=d_model, max_len=max_len)
        check_integers("DenseSynthesizer", minimum=1, allow_none=True, d_hidden=d_hidden)
        super().__init__()
        d_hidden = d_hidden or d_model
        self.lin1 = nn.Linear(d_model, d_hidden)
        self.lin2 = nn.Linear(d_hidden, max_len)
        self.W_V = nn.Linear(d_model, d_model)
        self.W_O = nn.Linear(d_model, d_model)

    def forward(self, X: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        A = dense_synthesizer_weights(X, self.lin1.weight, self.lin1.bias, self.lin2.weight, self.lin2.bias, mask)
        return self.W_O(context(A, _values(X, self.W_V, mask))), A


@catalogued("extra:synthesizer-random")
class RandomSynthesizer(nn.Module):
    """Random Synthesizer layer: forward returns ``(W_O (A W_V X), A)``.

    Padding is inert as in :class:`DenseSynthesizer`.

    Args:
        d_model: the model width.
        max_len: the longest sequence ``l`` (``R`` is ``(l, l)``).
        fixed: keep ``R`` at its random initial value (not trained).

    Shape:
        - X: ``(..., n, d_model)`` with ``n <= max_len``.
        - mask: boolean ``(n, n)``, ``True`` = may attend.
        - Output: ``(output (..., n, d_model), A (n, n))``.

    Raises:
        ValueError: if a size is not an integer >= 1, or ``n > max_len`` (see :func:`random_synthesizer_weights`).
    """

    def __init__(self, d_model: int, max_len: int, fixed: bool = False) -> None:
        check_integers("RandomSynthesizer", minimum=1, d_model=d_model, max_len=max_len)
        super().__init__()
        self.R = nn.Parameter(torch.randn(max_len, max_len), requires_grad=not fixed)
        self.W_V = nn.Linear(d_model, d_model)
        self.W_O = nn.Linear(d_model, d_model)

    def forward(self, X: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        as_tensor(X, "X")
        A = random_synthesizer_weights(self.R, X.shape[-2], mask)
        return self.W_O(context(A, _values(X, self.W_V, mask))), A
