"""§3.3.2 Multiplicity of queries: multi-head attention, Eq. (38)-(40).

Each head ``j`` projects the query, keys and values with its own matrices
(``W_q^(j)``, ``W_K^(j)``, ``W_V^(j)``), attends with the scaled multiplicative
score, and the ``h`` head contexts are concatenated and mixed by ``W_O``.

In code the per-head matrices are stacked row-wise into one matrix per role,
exactly like ``torch.nn.MultiheadAttention``'s ``in_proj_weight`` chunks:
``W_Q`` is ``(h * d_k, d_q)``, ``W_K`` is ``(h * d_k, d_f)``, ``W_V`` is
``(h * d_v, d_f)``, and ``W_O`` is ``(d_o, h * d_v)``; rows ``j*d_k:(j+1)*d_k``
belong to head ``j``.
"""
from __future__ import annotations

from torch import Tensor, nn

from .._checks import as_tensor, check_min_rank, check_weight
from ..general_mechanisms.scoring import scaled_dot_score
from ..general_model import attend


def split_heads(X: Tensor, h: int) -> Tensor:
    """``(..., n, h * d)`` -> ``(..., h, n, d)``. Raises ``ValueError`` unless h divides the width."""
    if X.shape[-1] % h:
        raise ValueError(f"width {X.shape[-1]} is not divisible by the number of heads h={h}")
    *batch, n, hd = X.shape
    return X.reshape(*batch, n, h, hd // h).transpose(-2, -3)


def merge_heads(X: Tensor) -> Tensor:
    """``(..., h, n, d)`` -> ``(..., n, h * d)`` (the concatenation of Eq. 40)."""
    *batch, h, n, d = X.shape
    return X.transpose(-2, -3).reshape(*batch, n, h * d)


def multi_head_attention(
    Q: Tensor,
    F_k: Tensor,
    F_v: Tensor,
    W_Q: Tensor,
    W_K: Tensor,
    W_V: Tensor,
    W_O: Tensor,
    h: int,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Multi-head attention, Eq. (38)-(40).

    Q: ``(..., n_q, d_q)`` queries; F_k: ``(..., n_f, d_f)`` features for keys;
    F_v: ``(..., n_f, d_f)`` features for values (usually the same tensor).
    W_Q ``(h*d_k, d_q)``, W_K ``(h*d_k, d_f)``, W_V ``(h*d_v, d_f)``, W_O ``(d_o, h*d_v)``.
    mask: boolean, broadcastable to ``(..., h, n_q, n_f)`` (a ``(..., n_q, n_f)``
    mask needs an extra head axis: ``mask.unsqueeze(-3)``); ``True`` = may attend.
    Returns the output ``(..., n_q, d_o)`` and the per-head weights ``(..., h, n_q, n_f)``.
    Raises ``ValueError`` if ``h`` does not divide the projection widths or a
    weight has the wrong shape.
    """
    for sym, t in (("Q", Q), ("F_k", F_k), ("F_v", F_v)):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, "(..., n, d)")
    if h < 1:
        raise ValueError(f"the number of heads h must be >= 1, got h={h}")
    hdk, hdv = W_Q.shape[0], W_V.shape[0]
    if hdk % h or hdv % h:
        raise ValueError(f"h={h} must divide h*d_k={hdk} and h*d_v={hdv}")
    check_weight(W_Q, (hdk, Q.shape[-1]), "W_Q", "(h*d_k, d_q)")
    check_weight(W_K, (hdk, F_k.shape[-1]), "W_K", "(h*d_k, d_f)")
    check_weight(W_V, (hdv, F_v.shape[-1]), "W_V", "(h*d_v, d_f)")
    check_weight(W_O, (W_O.shape[0], hdv), "W_O", "(d_o, h*d_v)")
    q = split_heads(Q @ W_Q.T, h)  # Eq. (38): one query per head
    k = split_heads(F_k @ W_K.T, h)
    v = split_heads(F_v @ W_V.T, h)
    c, a = attend(q, k, v, mask, scaled_dot_score)  # Eq. (39): one context per head
    return merge_heads(c) @ W_O.T, a  # Eq. (40): concatenate and mix


class MultiHeadAttention(nn.Module):
    """Module form of :func:`multi_head_attention` with learned projections.

    Args: d_model (query and feature size), h (heads), d_k/d_v per head
    (default ``d_model // h``), bias (adds biases to the projections, as
    ``nn.MultiheadAttention`` does by default). Raises ``ValueError`` if ``h``
    does not divide ``d_model`` when d_k/d_v are not given.

    ``forward(X_q, X_kv=None, mask=None)`` returns ``(output, weights)``; with
    ``X_kv=None`` it is self-attention.
    """

    def __init__(self, d_model: int, h: int, d_k: int | None = None, d_v: int | None = None, bias: bool = False) -> None:
        super().__init__()
        if (d_k is None or d_v is None) and d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads h={h}")
        d_k = d_model // h if d_k is None else d_k
        d_v = d_model // h if d_v is None else d_v
        self.h, self.d_k, self.d_v = h, d_k, d_v
        self.W_Q = nn.Linear(d_model, h * d_k, bias=bias)
        self.W_K = nn.Linear(d_model, h * d_k, bias=bias)
        self.W_V = nn.Linear(d_model, h * d_v, bias=bias)
        self.W_O = nn.Linear(h * d_v, d_model, bias=bias)

    def forward(self, X_q: Tensor, X_kv: Tensor | None = None, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        X_kv = X_q if X_kv is None else X_kv
        if self.W_Q.bias is None:
            return multi_head_attention(
                X_q, X_kv, X_kv, self.W_Q.weight, self.W_K.weight, self.W_V.weight, self.W_O.weight, self.h, mask
            )
        # With biases, project with the Linear layers and attend per head.
        q, k, v = (split_heads(lin(x), self.h) for lin, x in ((self.W_Q, X_q), (self.W_K, X_kv), (self.W_V, X_kv)))
        c, a = attend(q, k, v, mask, scaled_dot_score)
        return self.W_O(merge_heads(c)), a
