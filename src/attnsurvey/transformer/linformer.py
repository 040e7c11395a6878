"""Linformer: attention with low-rank projected keys and values (Wang et al., 2020).

The ``n x n`` weight matrix of self-attention is close to low rank, so
Linformer projects the ``n`` keys and values down to ``k`` rows with learned
matrices ``E, F`` ``(k, n)`` before attending::

    head = softmax( Q (E K)^T / sqrt(d_k) ) (F V)

The weights are ``(n, k)``: time and memory grow linearly in ``n`` for a
fixed ``k``. The projections fix a maximum length ``n_max``; shorter inputs
use the first ``n`` columns. Causal masks are not possible (each projected
key mixes all positions), so this is for encoders.

Shapes: ``...`` leading batch axes, n tokens (``n <= n_max``), k projected length, d_k key size, d_v
value size, h heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_same_dtype
from ..attention import attend
from ..catalog import catalogued
from ..query_related.multihead import SelfAttentionVariant

CHAPTER = "chapters/ch03_3_4_transformer_variants.ipynb"


def linformer_projection(K: Tensor, V: Tensor, E: Tensor, F: Tensor) -> tuple[Tensor, Tensor]:
    """Linformer's length projections of the keys and values: ``(E K, F V)``.

    Args:
        K: the keys.
        V: the values.
        E: the key projection (columns ``:n`` are used).
        F: the value projection (columns ``:n`` are used).

    Shape:
        - K: ``(..., n, d_k)``; V: ``(..., n, d_v)``; E, F: ``(k, n_max)`` with ``n <= n_max``.
        - Output: ``(E K (..., k, d_k), F V (..., k, d_v))``.

    Returns:
        ``(E K, F V)``.

    Raises:
        ValueError: if ``n > n_max`` or shapes differ.
        TypeError: if an input is not a floating-point tensor or the four do not share a dtype.
    """
    for sym, t in (("K", K), ("V", V), ("E", E), ("F", F)):
        as_tensor(t, sym)
    check_same_dtype(K=K, V=V, E=E, F=F)
    check_min_rank(K, 2, "K", "(..., n, d_k)")
    check_dim_equal(K.shape[-2], V.shape[-2], "Linformer attention", "n of K", "n of V")
    if E.dim() != 2 or E.shape != F.shape:
        raise ValueError(f"E and F must both have shape (k, n_max), got E={tuple(E.shape)}, F={tuple(F.shape)}")
    n, n_max = K.shape[-2], E.shape[-1]
    if n > n_max:
        raise ValueError(
            f"Linformer projections E, F of shape (k, n_max)={tuple(E.shape)} cover n_max={n_max} positions, "
            f"but K has n={n} (shape {tuple(K.shape)})"
        )
    return E[:, :n] @ K, F[:, :n] @ V


@catalogued(
    "extra:linformer", title="Linformer: keys and values projected to length k, softmax(Q (E K)^T / sqrt(d_k)) (F V)"
)
def linformer_attention(Q: Tensor, K: Tensor, V: Tensor, E: Tensor, F: Tensor) -> tuple[Tensor, Tensor]:
    """Linformer attention ``softmax(Q (E K)^T / sqrt(d_k)) (F V)``: :func:`attend` on projected keys.

    With ``k = n`` and ``E = F = I`` it is full attention.

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        E: the key projection (columns ``:n`` are used).
        F: the value projection (columns ``:n`` are used).

    Shape:
        - Q: ``(..., n, d_k)``; K: ``(..., n, d_k)``; V: ``(..., n, d_v)``;
          E, F: ``(k, n_max)`` with ``n <= n_max``.
        - Output: ``(c (..., n, d_v), a (..., n, k))``.

    Returns:
        ``(c, a)``: the contexts and the weights over the ``k`` projected keys.

    Raises:
        ValueError: if ``n > n_max`` or shapes differ.
        TypeError: if an input is not a floating-point tensor or the dtypes differ.
    """
    as_tensor(Q, "Q")
    check_dim_equal(Q.shape[-1], K.shape[-1], "Linformer attention", "d_q", "d_k")
    Kp, Vp = linformer_projection(K, V, E, F)
    c, a = attend(Q, Kp, Vp)
    return c, a


@catalogued("extra:linformer")
class LinformerSelfAttention(SelfAttentionVariant):
    """Multi-head Linformer self-attention: :class:`MultiHeadAttention` whose ``kv_transform``
    projects the keys and values to length ``k``; ``E`` and ``F`` are shared by the heads.

    A mask or bias covers the ``k`` projected keys; ``key_padding_mask`` and
    ``is_causal`` (which refer to input positions) are refused.

    Args:
        d_model: the model width.
        h: the number of heads (must divide d_model).
        n_max: the longest input (>= 1).
        k: the projected length (>= 1).

    Shape:
        ``forward(X, mask=None, **options)``: X ``(..., n, d_model)`` with ``n <= n_max``;
        returns ``(output (..., n, d_model), weights (..., h, n, k))``.

    Raises:
        ValueError: if ``h`` does not divide ``d_model`` or ``n_max`` or ``k`` is not an
            integer >= 1.
    """

    def __init__(self, d_model: int, h: int, n_max: int, k: int) -> None:
        check_integers("LinformerSelfAttention", minimum=1, d_model=d_model, h=h, n_max=n_max)
        if h < 1 or d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads h={h}")
        check_integers("LinformerSelfAttention", minimum=1, n_max=n_max, k=k)
        super().__init__(d_model, h, bias=True)
        self.E = nn.Parameter(torch.randn(k, n_max) / math.sqrt(k))
        self.F = nn.Parameter(torch.randn(k, n_max) / math.sqrt(k))

    # ignore: the base declares the hook as an attribute (None: no hook); a variant fills it with a method
    def kv_transform(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        return linformer_projection(k, v, self.E, self.F)
