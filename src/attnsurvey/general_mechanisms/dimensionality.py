"""§3.2.3 Attention dimensionality: multi-dimensional (feature-wise) attention, Eq. (30)-(32).

Single-dimensional attention gives each value vector ``v_l`` one scalar weight
``a_l``. Multi-dimensional attention gives it a weight *vector*
``a_l in R^{d_v}``, one weight per feature, so feature ``i`` of the context
can come from other positions than feature ``j``:

* Eq. (31)  a score vector per key:  ``e_l = W_d^T act(W_1 q + W_2 k_l + b)``
* Eq. (32)  a softmax over positions, separately for every feature ``i``:
  ``a_{l,i} = exp(e_{l,i}) / sum_j exp(e_{j,i})``
* Eq. (30)  an element-wise context: ``c = sum_l a_l o v_l``

Shapes are batch-first rows: queries ``(..., n_q, d_q)``, keys
``(..., n_f, d_k)``, values ``(..., n_f, d_v)``; the score and weight tensors
are ``(..., n_q, n_f, d_v)`` (the survey's ``d_v x n_f`` matrix, transposed,
for every query). Weights keep the survey's shapes: ``W_1`` ``(d_w, d_q)``,
``W_2`` ``(d_w, d_k)``, ``W_d`` ``(d_w, d_v)``.

Masks are boolean ``(..., n_q, n_f)``, ``True`` = may attend; a masked position
gets weight 0 for every feature, and a query with every position masked gets
the zero context vector.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import (
    as_tensor,
    check_batch_broadcast,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_nonempty,
    check_weight,
)
from ..attention import align_scores
from ..catalog import catalogued
from ..masking import check_attn_mask, zero_masked
from .scoring import Activation, _check_param_dtype, _check_qk

CHAPTER = "chapters/ch03_2_3_attention_dimensionality.ipynb"


@catalogued("eq31", title="Multi-dimensional score vector, e_l = W_d^T act(W_1 q + W_2 k_l + b)")
def multidimensional_scores(
    Q: Tensor,
    K: Tensor,
    W1: Tensor,
    W2: Tensor,
    W_d: Tensor,
    b: Tensor | None = None,
    act: Activation = torch.tanh,
) -> Tensor:
    """Multi-dimensional score vectors, Eq. (31): ``e_l = W_d^T act(W_1 q + W_2 k_l + b)``.

    The additive score of Table II with its vector ``w`` widened to a matrix
    ``W_d``: one score per feature of the values.

    Args:
        Q: queries.
        K: keys.
        W1: the query map ``W_1``.
        W2: the key map ``W_2``.
        W_d: the output matrix ``W_d``.
        b: the bias ``b``, or None.
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; W1: ``(d_w, d_q)``;
        W2: ``(d_w, d_k)``; W_d: ``(d_w, d_v)``; b: ``(d_w,)``.
        Returns e: ``(..., n_q, n_f, d_v)``; ``e[..., j, l, i]`` is ``e_{l,i}`` for query j.

    Returns:
        The score vectors ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape or dtype mismatches and empty inputs.
    """
    _check_qk(Q, K)
    as_tensor(W_d, "W_d")
    if W_d.dim() != 2:
        raise ValueError(f"W_d must have shape (d_w, d_v), got {tuple(W_d.shape)}")
    d_w = W_d.shape[0]
    check_weight(W1, (d_w, Q.shape[-1]), "W_1", "(d_w, d_q)")
    check_weight(W2, (d_w, K.shape[-1]), "W_2", "(d_w, d_k)")
    if b is not None:
        check_weight(b, (d_w,), "b", "(d_w,)")
    _check_param_dtype(Q, W_1=W1, W_2=W2, W_d=W_d, b=b)
    k_part = K @ W2.T  # (..., n_f, d_w)
    if b is not None:
        k_part = k_part + b
    # every (query, key) pair: (..., n_q, 1, d_w) + (..., 1, n_f, d_w)
    h = act((Q @ W1.T).unsqueeze(-2) + k_part.unsqueeze(-3))
    return h @ W_d  # (..., n_q, n_f, d_v): row l is W_d^T h_l


@catalogued("eq32", title="Multi-dimensional alignment: a softmax over positions for every feature")
def multidimensional_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Multi-dimensional attention weights, Eq. (32): a softmax over positions for every feature.

    Masked positions get weight 0 for every feature.

    Args:
        e: score vectors.
        mask: boolean, broadcastable to ``(..., n_q, n_f)``, ``True`` = may attend.

    Shape:
        e: ``(..., n_q, n_f, d_v)``. Returns ``(..., n_q, n_f, d_v)``.

    Returns:
        The weights; every feature column ``a[..., j, :, i]`` sums to 1 over the
        ``n_f`` positions (or is all zero if query ``j`` may attend to nothing).

    Raises:
        TypeError: for a non-float ``e``.
        ValueError: for an ``e`` of rank < 3 or a bad mask.
    """
    as_tensor(e, "e")
    check_min_rank(e, 3, "e", "(..., n_q, n_f, d_v)")
    if mask is not None:
        check_attn_mask(mask, e.shape[:-1])
        mask = mask.unsqueeze(-1)  # the same mask for every feature
    return align_scores(e, mask, dim=-2)  # the core's alignment step, over the positions


@catalogued("eq30", title="Multi-dimensional context, c = sum_l a_l o v_l (element-wise weights)")
def multidimensional_context(A: Tensor, V: Tensor) -> Tensor:
    """Element-wise context, Eq. (30): ``c = sum_l a_l o v_l``.

    A zero weight ignores its value entry (NaN or Inf at a masked position does
    not reach c).

    Args:
        A: weight vectors.
        V: values.

    Shape:
        A: ``(..., n_q, n_f, d_v)``; V: ``(..., n_f, d_v)``. Returns c: ``(..., n_q, d_v)``.

    Returns:
        The contexts ``c``.

    Raises:
        TypeError: if A or V is not a floating-point tensor.
        ValueError: if ``n_f`` or ``d_v`` of the two differ, a rank is too small
            or the batch dims do not broadcast.
    """
    as_tensor(A, "A")
    as_tensor(V, "V")
    check_min_rank(A, 3, "A", "(..., n_q, n_f, d_v)")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_dim_equal(A.shape[-2], V.shape[-2], "multi-dimensional context (Eq. 30)", "n_f of A", "n_f of V")
    check_dim_equal(A.shape[-1], V.shape[-1], "multi-dimensional context (Eq. 30)", "d_v of A", "d_v of V")
    check_batch_broadcast(A, V.unsqueeze(-3), "A", "V", tail=3)
    terms = A * V.unsqueeze(-3)
    # a zero weight (masked position) is inert even when its value holds NaN/Inf
    return torch.where(A == 0, torch.zeros((), dtype=terms.dtype, device=terms.device), terms).sum(-2)


@catalogued("eq30")
def multidimensional_attend(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    W1: Tensor,
    W2: Tensor,
    W_d: Tensor,
    b: Tensor | None = None,
    mask: Tensor | None = None,
    act: Activation = torch.tanh,
) -> tuple[Tensor, Tensor]:
    """Multi-dimensional attention, Eq. (31), (32) and (30) in one call.

    Args:
        Q: queries.
        K: keys.
        V: values.
        W1: the query map ``W_1``.
        W2: the key map ``W_2``.
        W_d: the output matrix ``W_d``.
        b: the bias ``b``, or None.
        mask: boolean ``(..., n_q, n_f)`` (broadcastable), ``True`` = may attend.
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``;
        weights as in :func:`multidimensional_scores`.
        Returns c: ``(..., n_q, d_v)``, A: ``(..., n_q, n_f, d_v)``.

    Returns:
        ``(c, A)``: the contexts and the weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape problems (e.g. ``W_d`` with ``d_v`` columns
            different from the values' ``d_v``) or a bad mask.
    """
    as_tensor(V, "V")
    as_tensor(K, "K")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_min_rank(K, 2, "K", "(..., n_f, d_k)")
    check_nonempty(V, -1, "V", "d_v")
    check_dim_equal(K.shape[-2], V.shape[-2], "multi-dimensional attention", "n_f of K", "n_f of V")
    as_tensor(W_d, "W_d")
    if W_d.dim() == 2:
        check_dim_equal(W_d.shape[1], V.shape[-1], "multi-dimensional attention", "d_v of W_d", "d_v of V")
    e = multidimensional_scores(Q, zero_masked(K, mask), W1, W2, W_d, b, act)  # unattended keys inert in gradients
    A = multidimensional_align(e, mask)
    return multidimensional_context(A, V), A


@catalogued("eq30")
class MultiDimensionalAttention(nn.Module):
    """Module form of :func:`multidimensional_attend` with learned ``W_1``, ``W_2``, ``b``, ``W_d``.

    ``forward(Q, K, V, mask=None)`` with mask boolean broadcastable to
    ``(..., n_q, n_f)``, ``True`` = may attend, returns ``(c, A)``.

    Args:
        d_q: the query size.
        d_k: the key size.
        d_v: the value size (columns of ``W_d``).
        d_w: the hidden size.
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``.
        Returns c: ``(..., n_q, d_v)``, A: ``(..., n_q, n_f, d_v)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as
            :func:`multidimensional_attend`.
    """

    def __init__(self, d_q: int, d_k: int, d_v: int, d_w: int, act: Activation = torch.tanh) -> None:
        check_integers("MultiDimensionalAttention", minimum=1, d_q=d_q, d_k=d_k, d_v=d_v, d_w=d_w)
        super().__init__()
        self.W1 = nn.Linear(d_q, d_w, bias=False)
        self.W2 = nn.Linear(d_k, d_w, bias=True)  # its bias is the survey's b
        self.W_d = nn.Parameter(torch.randn(d_w, d_v) / math.sqrt(d_w))
        self.act = act

    def forward(self, Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return multidimensional_attend(Q, K, V, self.W1.weight, self.W2.weight, self.W_d, self.W2.bias, mask, self.act)


_M = "attnsurvey.general_mechanisms.dimensionality."
