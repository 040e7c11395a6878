"""Absolute position information for the Transformer (§3.3.2; review eq. 13).

Self-attention, Eq. (13) of the review, ``softmax(Q K^T / sqrt(d_k)) V``, is
permutation-equivariant: shuffle the rows of ``X`` and its output rows are
shuffled the same way. Word order therefore has to be added to the inputs.
The original Transformer adds a fixed sinusoidal code to each position;
a learned table (one trainable vector per position) is the alternative.
Both are added to the token embeddings: ``X + P[:n]``.

Shapes: ``...`` leading batch axes, n positions, d_model code width, max_len table length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_integers, check_min_rank, check_positive
from ..catalog import catalogued

CHAPTER = "chapters/ch03_3_3_transformer.ipynb"


@catalogued(
    "extra:sinusoidal-position",
    title="Sinusoidal absolute position encoding added to the inputs of self-attention (review eq. 13)",
)
def sinusoidal_position_encoding(
    n: int, d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The sinusoidal table ``P`` (Vaswani et al., 2017).

    ``P[t, 2i] = sin(t / base^(2i/d_model))`` and ``P[t, 2i+1] = cos(t / base^(2i/d_model))``.
    For any offset ``k``, ``P[t + k]`` is a fixed rotation of ``P[t]`` in every
    (sin, cos) pair, so relative offsets are linear functions of the code.

    Args:
        n: the number of positions.
        d_model: the code width.
        base: the base of the wavelengths.
        dtype: the dtype of the table.

    Shape:
        - Output: ``(n, d_model)``.

    Returns:
        The table ``P``.

    Raises:
        ValueError: unless ``n >= 0`` is an integer, ``d_model`` a positive even integer and
            ``base`` a finite number > 0 (its logarithm sets the wavelengths).
    """
    check_integers("sinusoidal_position_encoding", minimum=0, n=n)
    check_integers("sinusoidal_position_encoding", minimum=1, d_model=d_model)
    if d_model % 2:
        raise ValueError(f"sinusoidal encoding needs an even d_model > 0, got d_model={d_model}")
    check_positive("sinusoidal_position_encoding", base=base)
    t = torch.arange(n, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    P = torch.zeros(n, d_model, dtype=torch.float64)
    P[:, 0::2] = torch.sin(t * freq)
    P[:, 1::2] = torch.cos(t * freq)
    return P.to(dtype)


def _check_length(X: Tensor, max_len: int, what: str) -> None:
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d_model)")
    if X.shape[-2] > max_len:
        raise ValueError(
            f"{what} has a table of max_len={max_len} positions, but X has n={X.shape[-2]} "
            f"positions (shape {tuple(X.shape)})"
        )


@catalogued("extra:sinusoidal-position")
class SinusoidalPositionEncoding(nn.Module):
    """Adds the fixed sinusoidal code: ``forward(X) = X + P[:n]``.

    The table is precomputed for ``max_len`` positions (a buffer, not a parameter).

    Args:
        d_model: the model width (positive, even).
        max_len: the number of positions in the table.

    Shape:
        - X: ``(..., n, d_model)``.
        - Output: ``(..., n, d_model)``.

    Raises:
        ValueError: if ``max_len`` is not an integer >= 1, ``n > max_len`` or the width is not ``d_model``.
        TypeError: if X is not a floating-point tensor.
    """

    P: Tensor  # the (max_len, d_model) table, a buffer

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        check_integers("SinusoidalPositionEncoding", minimum=1, max_len=max_len)
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("P", sinusoidal_position_encoding(max_len, d_model), persistent=False)

    def forward(self, X: Tensor) -> Tensor:
        _check_length(X, self.max_len, "SinusoidalPositionEncoding")
        if X.shape[-1] != self.d_model:
            raise ValueError(f"X must have d_model={self.d_model} columns, got shape {tuple(X.shape)}")
        return X + self.P[: X.shape[-2]].to(X.dtype)


@catalogued("extra:learned-position", title="Learned absolute position embeddings (one trainable vector per position)")
class LearnedPositionEncoding(nn.Module):
    """Adds a learned vector per position: ``forward(X) = X + P[:n]``.

    Initialised with small normal values (std 0.02).

    Args:
        d_model: the model width.
        max_len: the number of positions with a vector.

    Shape:
        - P: ``(max_len, d_model)``; X: ``(..., n, d_model)``.
        - Output: ``(..., n, d_model)``.

    Raises:
        ValueError: if ``max_len`` or ``d_model`` is not an integer >= 1, ``n > max_len``
            (positions beyond ``max_len`` have no vector) or the width is not ``d_model``.
        TypeError: if X is not a floating-point tensor.
    """

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        check_integers("LearnedPositionEncoding", minimum=1, d_model=d_model, max_len=max_len)
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.P = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, X: Tensor) -> Tensor:
        _check_length(X, self.max_len, "LearnedPositionEncoding")
        if X.shape[-1] != self.d_model:
            raise ValueError(f"X must have d_model={self.d_model} columns, got shape {tuple(X.shape)}")
        return X + self.P[: X.shape[-2]]
