"""§3.3.2 Multiplicity of queries: multi-head attention, Eq. (38)-(40).

Each head ``j`` projects the query, keys and values with its own matrices
(``W_q^(j)``, ``W_K^(j)``, ``W_V^(j)``), attends with the scaled multiplicative
score, and the ``h`` head contexts are concatenated and mixed by ``W_O``.

In code the per-head matrices are stacked row-wise into one matrix per role,
exactly like ``torch.nn.MultiheadAttention``'s ``in_proj_weight`` chunks:
``W_Q`` is ``(h * d_k, d_q)``, ``W_K`` is ``(h * d_k, d_f)``, ``W_V`` is
``(h * d_v, d_f)``, and ``W_O`` is ``(d_o, h * d_v)``; rows ``j*d_k:(j+1)*d_k``
belong to head ``j``.

Also here: the review's matrix form of the same computation (review eq. 10-11,
one right-multiplied matrix per head, written as a loop over heads) and the
disagreement regularisation of Li et al. (2018), which rewards heads that differ.

Masks are boolean, ``True`` = may attend. A mask without a head axis
(``(..., n_q, n_f)``, rank <= the rank of ``Q``) is shared by all heads.
``torch.nn.MultiheadAttention`` uses the opposite polarity (``True`` = blocked)
and, by default, returns the *average* of the head weights.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_min_rank, check_weight
from ..catalog import catalogued
from ..general_mechanisms.scoring import scaled_dot_score
from ..general_model import attend

CHAPTER = "chapters/ch03_3_2_query_multiplicity.ipynb"


@catalogued("eq38")
def split_heads(X: Tensor, h: int) -> Tensor:
    """``(..., n, h * d)`` -> ``(..., h, n, d)``. Raises ``ValueError`` unless h divides the width."""
    if h < 1:
        raise ValueError(f"the number of heads h must be >= 1, got h={h}")
    if X.dim() < 2:
        raise ValueError(f"split_heads needs X of shape (..., n, h*d), got shape {tuple(X.shape)}")
    if X.shape[-1] % h:
        raise ValueError(f"width {X.shape[-1]} is not divisible by the number of heads h={h}")
    *batch, n, hd = X.shape
    return X.reshape(*batch, n, h, hd // h).transpose(-2, -3)


@catalogued("eq40")
def merge_heads(X: Tensor) -> Tensor:
    """``(..., h, n, d)`` -> ``(..., n, h * d)`` (the concatenation of Eq. 40)."""
    *batch, h, n, d = X.shape
    return X.transpose(-2, -3).reshape(*batch, n, h * d)


@catalogued(
    "eq38",
    title="Per-head projections of query, keys and values, q^(j) = W_q^(j) q, K^(j) = W_K^(j) F, V^(j) = W_V^(j) F",
    chapter=CHAPTER,
)
@catalogued("eq39", title="One context vector per head, c^(j) = sum_l a_l^(j) v_l^(j)", chapter=CHAPTER)
@catalogued("eq40", title="Concatenate the head contexts and mix, c = W_O concat(c^(1), ..., c^(h))", chapter=CHAPTER)
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
    mask: boolean, ``True`` = may attend. Either shared by the heads,
    ``(..., n_q, n_f)`` with rank at most ``Q``'s (a head axis is inserted), or
    per head, ``(..., h, n_q, n_f)`` with rank ``Q.dim() + 1``.
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
    mask = _head_mask(mask, Q.dim())
    c, a = attend(q, k, v, mask, scaled_dot_score)  # Eq. (39): one context per head
    return merge_heads(c) @ W_O.T, a  # Eq. (40): concatenate and mix


def _head_mask(mask: Tensor | None, q_rank: int) -> Tensor | None:
    """Insert the head axis into a mask shared by all heads (rank <= rank of Q)."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a boolean tensor (True = may attend), got {getattr(mask, 'dtype', type(mask))}")
    if mask.dim() < 2:
        raise ValueError(f"mask must have shape (..., n_q, n_f) or (..., h, n_q, n_f), got {tuple(mask.shape)}")
    return mask.unsqueeze(-3) if mask.dim() <= q_rank else mask


@catalogued("eq40")
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
        if h < 1:
            raise ValueError(f"the number of heads h must be >= 1, got h={h}")
        if (d_k is None or d_v is None) and d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads h={h}")
        d_k = d_model // h if d_k is None else d_k
        d_v = d_model // h if d_v is None else d_v
        self.h, self.d_k, self.d_v, self.d_model = h, d_k, d_v, d_model
        self.W_Q = nn.Linear(d_model, h * d_k, bias=bias)
        self.W_K = nn.Linear(d_model, h * d_k, bias=bias)
        self.W_V = nn.Linear(d_model, h * d_v, bias=bias)
        self.W_O = nn.Linear(h * d_v, d_model, bias=bias)

    def forward(self, X_q: Tensor, X_kv: Tensor | None = None, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        X_kv = X_q if X_kv is None else X_kv
        for sym, t in (("X_q", X_q), ("X_kv", X_kv)):
            as_tensor(t, sym)
            check_min_rank(t, 2, sym, "(..., n, d_model)")
            check_dim_equal(t.shape[-1], self.d_model, "MultiHeadAttention", f"d_model of {sym}", "d_model of the module")
        if self.W_Q.bias is None:
            return multi_head_attention(
                X_q, X_kv, X_kv, self.W_Q.weight, self.W_K.weight, self.W_V.weight, self.W_O.weight, self.h, mask
            )
        # With biases, project with the Linear layers and attend per head.
        q, k, v = (split_heads(lin(x), self.h) for lin, x in ((self.W_Q, X_q), (self.W_K, X_kv), (self.W_V, X_kv)))
        c, a = attend(q, k, v, _head_mask(mask, X_q.dim()), scaled_dot_score)
        return self.W_O(merge_heads(c)), a


@catalogued(
    "extra:multihead-matrix-form",
    title="Review eq. 10-11: head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), MultiHead = Concat(heads) W^O",
    chapter=CHAPTER,
)
def multi_head_matrix_form(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    W_Q: Sequence[Tensor],
    W_K: Sequence[Tensor],
    W_V: Sequence[Tensor],
    W_O: Tensor,
    mask: Tensor | None = None,
) -> Tensor:
    """Multi-head attention in the review's matrix form (review eq. 10-11).

    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` (eq. 10) and
    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` (eq. 11), with the
    review's right-multiplied matrices: ``W_i^Q``, ``W_i^K`` are ``(d_model, d_k)``,
    ``W_i^V`` is ``(d_model, d_v)`` and ``W^O`` is ``(h*d_v, d_model)``.
    Q ``(..., n_q, d_model)``; K, V ``(..., n_f, d_model)``; mask boolean
    ``(..., n_q, n_f)``, ``True`` = may attend. Written as an explicit loop over
    heads; it equals :func:`multi_head_attention` with ``W_Q = cat_i(W_i^Q)^T``.
    Raises ``ValueError`` if the head lists differ in length or a shape is wrong.
    """
    h = len(W_Q)
    if h == 0 or len(W_K) != h or len(W_V) != h:
        raise ValueError(f"need one W_i^Q, W_i^K, W_i^V per head, got {len(W_Q)}, {len(W_K)}, {len(W_V)}")
    heads = []
    for i in range(h):
        check_weight(W_Q[i], (Q.shape[-1], W_Q[i].shape[-1]), f"W_{i + 1}^Q", "(d_model, d_k)")
        check_weight(W_K[i], (K.shape[-1], W_Q[i].shape[-1]), f"W_{i + 1}^K", "(d_model, d_k)")
        check_weight(W_V[i], (V.shape[-1], W_V[i].shape[-1]), f"W_{i + 1}^V", "(d_model, d_v)")
        c, _ = attend(Q @ W_Q[i], K @ W_K[i], V @ W_V[i], mask, scaled_dot_score)  # eq. (10)
        heads.append(c)
    concat = torch.cat(heads, dim=-1)
    check_weight(W_O, (concat.shape[-1], W_O.shape[-1]), "W^O", "(h*d_v, d_model)")
    return concat @ W_O  # eq. (11)


def _pairwise_cosine(X: Tensor) -> Tensor:
    """Mean over all head pairs (i, j), i = j included, of cos(X_i, X_j); X is ``(..., h, m)``."""
    Xn = X / X.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(X.dtype).tiny ** 0.5)
    return (Xn @ Xn.transpose(-1, -2)).mean(dim=(-1, -2))


@catalogued(
    "extra:disagreement-regularisation",
    title="Disagreement regularisation between heads (subspace, position, output; Li et al. 2018)",
    chapter=CHAPTER,
)
def disagreement_regularisation(heads: Tensor, kind: str = "output") -> Tensor:
    """Disagreement between attention heads (Li et al., 2018; review §(3)), to be *maximised*.

    ``kind="subspace"`` or ``"output"``: ``heads`` are the per-head value
    vectors or contexts, ``(..., h, n, d)``; the result is
    ``D = -(1/h^2) sum_i sum_j cos(O^i, O^j)`` with each head's ``(n, d)`` block
    flattened (the i = j terms are included, as in the paper).
    ``kind="position"``: ``heads`` are the weights ``(..., h, n_q, n_f)`` and
    ``D = -(1/h^2) sum_i sum_j |A^i * A^j|`` (elementwise product, summed).
    Returns ``D`` of shape ``(...)``: -1 when every head is identical, -1/h for
    pairwise orthogonal heads. Add ``-lambda * D.mean()`` to a training loss.
    Raises ``ValueError`` for an unknown ``kind`` or a tensor of rank < 3.
    """
    as_tensor(heads, "heads")
    check_min_rank(heads, 3, "heads", "(..., h, n, d)")
    h = heads.shape[-3]
    if kind in ("subspace", "output"):
        return -_pairwise_cosine(heads.flatten(-2))
    if kind == "position":
        A = heads.flatten(-2)
        return -(A @ A.transpose(-1, -2)).sum(dim=(-1, -2)) / h**2
    raise ValueError(f"kind must be 'subspace', 'output' or 'position', got {kind!r}")
