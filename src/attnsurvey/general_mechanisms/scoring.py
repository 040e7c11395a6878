"""§3.2.1 Attention scoring: Eq. (23) and every row of Table II.

Each score function maps queries ``Q`` of shape ``(..., n_q, d_q)`` and keys
``K`` of shape ``(..., n_f, d_k)`` to scores ``e`` of shape ``(..., n_q, n_f)``,
computed in matrix form for all queries and keys at once (the survey notes that
this is the efficient way). Weights keep the survey's shapes, which are also
``nn.Linear.weight``'s: ``W_1`` is ``(d_w, d_q)``, ``W`` is ``(d_k, d_q)``.

Functional forms take explicit weights; ``ScoreModule`` subclasses own them.

Shapes: n_q queries, n_f keys (feature vectors), d_q query size, d_k key size,
d_w hidden size of the additive scores; ``...`` any batch dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import (
    as_tensor,
    check_batch_broadcast,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_nonempty,
    check_positive,
    check_weight,
)
from ..catalog import catalogued
from ..masking import check_attn_mask, masked_softmax
from ..numeric_env import portable_sqrt
from ..registry import Registry

Activation = Callable[[Tensor], Tensor]

CHAPTER = "chapters/ch03_2_1_attention_scoring.ipynb"


def _check_qk(Q: Tensor, K: Tensor) -> None:
    """Validate queries ``(..., n_q, d_q)`` and keys ``(..., n_f, d_k)``."""
    as_tensor(Q, "Q")
    as_tensor(K, "K")
    check_min_rank(Q, 2, "Q", "(..., n_q, d_q)")
    check_min_rank(K, 2, "K", "(..., n_f, d_k)")
    check_nonempty(Q, -2, "Q", "n_q")
    check_nonempty(Q, -1, "Q", "d_q")
    check_nonempty(K, -2, "K", "n_f")
    check_nonempty(K, -1, "K", "d_k")
    check_batch_broadcast(Q, K, "Q", "K")
    if Q.dtype != K.dtype:
        raise ValueError(f"Q and K must share a dtype, got Q={Q.dtype}, K={K.dtype}")


def _check_param_dtype(Q: Tensor, **params: Tensor | None) -> None:
    """Raise unless every weight tensor has the dtype of the queries."""
    for name, p in params.items():
        if isinstance(p, Tensor) and p.dtype != Q.dtype:
            raise ValueError(f"{name} must have the dtype of Q ({Q.dtype}), got {p.dtype}")


@catalogued("table2:multiplicative", title="Multiplicative score q^T k_l")
def dot_score(Q: Tensor, K: Tensor) -> Tensor:
    """Multiplicative (dot-product) score ``q^T k_l`` (Table II, row 2).

    Args:
        Q: queries.
        K: keys.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)`` (batch dims broadcast).
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``d_q != d_k``, Q or K is empty or has fewer than 2 dims,
            their batch dims do not broadcast, or their dtypes differ.
    """
    _check_qk(Q, K)
    check_dim_equal(Q.shape[-1], K.shape[-1], "multiplicative score", "d_q", "d_k")
    return Q @ K.transpose(-1, -2)


@catalogued("table2:scaled-multiplicative", title="Scaled multiplicative score q^T k_l / sqrt(d_k)")
def scaled_dot_score(Q: Tensor, K: Tensor) -> Tensor:
    """Scaled multiplicative score ``q^T k_l / sqrt(d_k)`` (Table II, row 3).

    Args:
        Q: queries.
        K: keys.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)`` (batch dims broadcast).
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``d_q != d_k``, Q or K is empty or has fewer than 2 dims,
            their batch dims do not broadcast, or their dtypes differ.
    """
    _check_qk(Q, K)
    check_dim_equal(Q.shape[-1], K.shape[-1], "scaled multiplicative score", "d_q", "d_k")
    return (Q @ K.transpose(-1, -2)) / math.sqrt(K.shape[-1])


@catalogued(
    "eq6",
    title="General additive score w^T act(W_1 q + W_2 k_l + b), the score of alternating co-attention",
    chapter="chapters/ch03_1_1_feature_multiplicity.ipynb",
)
@catalogued("table2:additive", title="Additive score w^T act(W_1 q + W_2 k_l + b)")
def additive_score(
    Q: Tensor,
    K: Tensor,
    W1: Tensor,
    W2: Tensor,
    w: Tensor,
    b: Tensor | None = None,
    act: Activation = torch.tanh,
) -> Tensor:
    """Additive (concatenate) score ``w^T act(W_1 q + W_2 k_l + b)`` (Table II, row 1).

    Memory is ``O(n_q * n_f * d_w)`` because the activation is not bilinear.

    Args:
        Q: queries.
        K: keys.
        W1: the query map ``W_1``.
        W2: the key map ``W_2``.
        w: the output vector ``w``.
        b: the bias ``b``, or None for no bias.
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; W1: ``(d_w, d_q)``;
        W2: ``(d_w, d_k)``; w: ``(d_w,)``; b: ``(d_w,)``.
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on a shape mismatch of Q, K or a weight, or a weight whose
            dtype differs from Q's.
    """
    _check_qk(Q, K)
    d_q, d_k = Q.shape[-1], K.shape[-1]
    as_tensor(W1, "W_1")
    if W1.dim() != 2:
        raise ValueError(f"W_1 must have shape (d_w, d_q) with d_q={d_q}, got {tuple(W1.shape)}")
    d_w = W1.shape[0]  # from W_1, so a wrong w or W_2 is reported as itself
    check_weight(W1, (d_w, d_q), "W_1", "(d_w, d_q)")
    check_weight(W2, (d_w, d_k), "W_2", "(d_w, d_k)")
    check_weight(w, (d_w,), "w", "(d_w,)")
    _check_param_dtype(Q, W_1=W1, W_2=W2, w=w, b=b)
    q_part = Q @ W1.T  # (..., n_q, d_w)
    k_part = K @ W2.T  # (..., n_f, d_w)
    if b is not None:
        check_weight(b, (d_w,), "b", "(d_w,)")
        k_part = k_part + b
    h = act(q_part.unsqueeze(-2) + k_part.unsqueeze(-3))  # (..., n_q, n_f, d_w)
    return h @ w


@catalogued(
    "extra:concat-score",
    title="Concat score v^T tanh(W [q; k_l]) (Luong et al.; NLP review eq. 1) = additive with W = [W_1, W_2], b = 0",
)
def concat_score(Q: Tensor, K: Tensor, W: Tensor, v: Tensor, act: Activation = torch.tanh) -> Tensor:
    """Concat score ``v^T tanh(W [q; k_l])`` (Luong et al., 2015; NLP review eq. 1).

    Equal to :func:`additive_score` with ``W = [W_1, W_2]`` and no bias.

    Args:
        Q: queries.
        K: keys.
        W: the map of the concatenation ``[q; k_l]``.
        v: the output vector ``v``.
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; W: ``(d_w, d_q + d_k)``;
        v: ``(d_w,)``. Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on a shape mismatch of Q, K, W or v, or a weight whose dtype
            differs from Q's.
    """
    _check_qk(Q, K)
    d_q, d_k = Q.shape[-1], K.shape[-1]
    as_tensor(v, "v")
    if v.dim() != 1:
        raise ValueError(f"v must have shape (d_w,), got {tuple(v.shape)}")
    check_weight(W, (v.shape[0], d_q + d_k), "W", "(d_w, d_q + d_k)")
    _check_param_dtype(Q, W=W, v=v)
    # Concatenating [q; k] for every pair and multiplying by W is the same as
    # splitting W column-wise; we concatenate explicitly to mirror the formula.
    n_q, n_f = Q.shape[-2], K.shape[-2]
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2])
    q_rep = Q.unsqueeze(-2).expand(*batch, n_q, n_f, d_q)
    k_rep = K.unsqueeze(-3).expand(*batch, n_q, n_f, d_k)
    qk = torch.cat([q_rep, k_rep], dim=-1)
    return act(qk @ W.T) @ v


@catalogued("table2:general", title="General score k_l^T W q")
def general_score(Q: Tensor, K: Tensor, W: Tensor) -> Tensor:
    """General score ``k_l^T W q`` (Table II, row 4).

    Args:
        Q: queries.
        K: keys.
        W: the map ``W``.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; W: ``(d_k, d_q)``.
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if W's shape does not match ``(d_k, d_q)``, on a shape
            mismatch of Q and K, or a dtype mismatch.
    """
    _check_qk(Q, K)
    check_weight(W, (K.shape[-1], Q.shape[-1]), "W", "(d_k, d_q)")
    _check_param_dtype(Q, W=W)
    return (Q @ W.T) @ K.transpose(-1, -2)


@catalogued("table2:biased-general", title="Biased general score k_l^T (W q + b)")
def biased_general_score(Q: Tensor, K: Tensor, W: Tensor, b: Tensor) -> Tensor:
    """Biased general score ``k_l^T (W q + b)`` (Table II, row 5).

    Args:
        Q: queries.
        K: keys.
        W: the map ``W``.
        b: the bias ``b``.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; W: ``(d_k, d_q)``;
        b: ``(d_k,)``. Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on a shape mismatch of Q, K, W or b, or a dtype mismatch.
    """
    _check_qk(Q, K)
    check_weight(W, (K.shape[-1], Q.shape[-1]), "W", "(d_k, d_q)")
    check_weight(b, (K.shape[-1],), "b", "(d_k,)")
    _check_param_dtype(Q, W=W, b=b)
    return (Q @ W.T + b) @ K.transpose(-1, -2)


@catalogued("table2:activated-general", title="Activated general score act(k_l^T W q + b)")
def activated_general_score(Q: Tensor, K: Tensor, W: Tensor, b: Tensor | float, act: Activation = torch.tanh) -> Tensor:
    """Activated general score ``act(k_l^T W q + b)`` (Table II, row 6).

    Args:
        Q: queries.
        K: keys.
        W: the map ``W``.
        b: the scalar bias ``b`` (a float or a one-element tensor).
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; W: ``(d_k, d_q)``.
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on a shape mismatch of Q, K or W, or a tensor ``b`` with more
            than one element.
    """
    _check_qk(Q, K)
    check_weight(W, (K.shape[-1], Q.shape[-1]), "W", "(d_k, d_q)")
    if isinstance(b, Tensor) and b.numel() != 1:
        raise ValueError(f"b must be a scalar for the activated general score, got shape {tuple(b.shape)}")
    return act(general_score(Q, K, W) + b)


@catalogued("table2:similarity", title="Similarity score: cosine similarity and negative Euclidean distance")
def cosine_score(Q: Tensor, K: Tensor, eps: float = 1e-8) -> Tensor:
    """Similarity score: cosine similarity of ``q`` and ``k_l`` (Table II, row 7).

    Zero vectors get similarity 0 (norms are clamped by ``eps``). Vectors whose
    norm overflows the dtype (entries around 1e20 in float32, a few hundred in
    float16) are rescaled by their largest entry first, so the score stays the cosine.

    Args:
        Q: queries.
        K: keys.
        eps: the smallest norm a vector is divided by.

    Shape:
        Q: ``(..., n_q, d)``; K: ``(..., n_f, d)`` (``d = d_q = d_k``).
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``, in ``[-1, 1]``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``d_q != d_k``, on another shape or dtype mismatch of Q and K, or
            if ``eps`` is not a finite number > 0.
    """
    check_positive("cosine_score", eps=eps)
    _check_qk(Q, K)
    check_dim_equal(Q.shape[-1], K.shape[-1], "cosine similarity score", "d_q", "d_k")
    return _unit_rows(Q, eps) @ _unit_rows(K, eps).transpose(-1, -2)


def _overflow_safe_norm(X: Tensor) -> Tensor:
    """``||x||_2`` over the last axis; a row whose sum of squares overflows is rescaled by ``max |x_i|`` first.

    Rows without overflow take the plain formula.
    A row holding Inf or NaN keeps its plain (non-finite) norm.
    """
    n = X.norm(dim=-1)
    over = torch.isinf(n) & torch.isfinite(X).all(-1)
    if not bool(over.any()):
        return n
    s = torch.where(over, X.abs().amax(-1), torch.ones((), dtype=X.dtype, device=X.device))
    return torch.where(over, s * (X / s.unsqueeze(-1)).norm(dim=-1), n)


def _unit_rows(X: Tensor, eps: float) -> Tensor:
    """``x / max(||x||, eps)`` row by row, with the norm of :func:`_overflow_safe_norm`."""
    return X / _overflow_safe_norm(X).unsqueeze(-1).clamp_min(eps)


@catalogued("table2:similarity")
def euclidean_score(Q: Tensor, K: Tensor) -> Tensor:
    """Similarity score: negative Euclidean (L2) distance ``-||q - k_l||_2`` (Table II, row 7).

    Closer keys score higher. A distance whose squares overflow the dtype is
    computed on the difference rescaled by its largest entry (finite wherever the
    distance itself is).

    Args:
        Q: queries.
        K: keys.

    Shape:
        Q: ``(..., n_q, d)``; K: ``(..., n_f, d)`` (``d = d_q = d_k``).
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e`` (all ``<= 0``).

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``d_q != d_k`` or on another shape or dtype mismatch of Q and K.
    """
    _check_qk(Q, K)
    check_dim_equal(Q.shape[-1], K.shape[-1], "Euclidean similarity score", "d_q", "d_k")
    diff = Q.unsqueeze(-2) - K.unsqueeze(-3)  # (..., n_q, n_f, d)
    # sqrt of a sum of squares has an infinite gradient at 0; adding a tiny
    # epsilon keeps gradients finite when a query equals a key.
    dist = portable_sqrt((diff * diff).sum(-1) + torch.finfo(Q.dtype).tiny)
    over = torch.isinf(dist) & torch.isfinite(diff).all(-1)
    if bool(over.any()):  # the squares overflow (inputs ~1e20 in float32): rescale those pairs
        dist = torch.where(over, _overflow_safe_norm(diff), dist)
    return -dist


@catalogued(
    "extra:bilinear-score",
    title="Bilinear score q^T W k_l: nndl eq. 8.5's x^T W q (the general score) written query-first, W transposed",
)
def bilinear_score(Q: Tensor, K: Tensor, W: Tensor) -> Tensor:
    """Bilinear score ``q^T W k_l``, the query-first form of nndl eq. 8.5.

    nndl eq. 8.5 writes the bilinear model key first, ``s(x, q) = x^T W q``: that
    is the general score ``k_l^T W q`` (:func:`general_score`). The book writes it
    query-first, ``q^T W k_l``, i.e. the general score with W transposed:
    ``bilinear_score(Q, K, W) == general_score(Q, K, W.T)``.

    Args:
        Q: queries.
        K: keys.
        W: the bilinear map ``W``.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; W: ``(d_q, d_k)``.
        Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if W's shape does not match ``(d_q, d_k)``, on a shape
            mismatch of Q and K, or a dtype mismatch.
    """
    _check_qk(Q, K)
    check_weight(W, (Q.shape[-1], K.shape[-1]), "W", "(d_q, d_k)")
    _check_param_dtype(Q, W=W)
    return (Q @ W) @ K.transpose(-1, -2)


def location_score(Q: Tensor, W_a: Tensor, n_f: int) -> Tensor:
    """Luong et al.'s *location-based* score: ``e = W_a q``, from the query alone.

    Luong et al. [4] tried it next to the content-based (multiplicative) score
    (Table III, row 2). The score of position ``l`` is the ``l``-th entry of
    ``W_a q``; the keys are not used, so ``W_a`` must have a row for every
    position: it is ``(n_max, d_q)`` and the model can attend to at most
    ``n_max`` feature vectors (the first ``n_f`` rows are used).

    Args:
        Q: queries.
        W_a: the location map ``W_a``, one row per position.
        n_f: the number of feature vectors to score.

    Shape:
        Q: ``(..., n_q, d_q)``; W_a: ``(n_max, d_q)``. Returns e: ``(..., n_q, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``n_f > n_max``, ``n_f < 1``, Q has fewer than 2 dims or
            W_a is not ``(n_max, d_q)``.
    """
    as_tensor(Q, "Q")
    check_min_rank(Q, 2, "Q", "(..., n_q, d_q)")
    as_tensor(W_a, "W_a")
    if W_a.dim() != 2 or W_a.shape[1] != Q.shape[-1]:
        raise ValueError(f"W_a must have shape (n_max, d_q) with d_q={Q.shape[-1]}, got {tuple(W_a.shape)}")
    n_max = W_a.shape[0]
    check_integers("location_score", n_f=n_f)
    if not 1 <= n_f <= n_max:
        raise ValueError(f"location score needs 1 <= n_f <= n_max, got n_f={n_f}, n_max={n_max}")
    return Q @ W_a[:n_f].T


# --------------------------------------------------------------------------
# Modules: each owns its weights and calls the functional form above.
# --------------------------------------------------------------------------


@catalogued("eq23")
class ScoreModule(nn.Module):
    """Base class of the score modules: ``forward(Q, K) -> e``.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``. Returns e: ``(..., n_q, n_f)``.

    Raises:
        NotImplementedError: from this base class's ``forward`` (subclasses override it).
    """

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class FunctionScore(ScoreModule):
    """Base class of the score modules that only call their functional form: ``function(Q, K, *weights())``.

    A subclass names the function in its class statement,
    ``class DotScore(FunctionScore, function=dot_score)``, and, if it learns
    weights, returns them from :meth:`weights` in the function's argument
    order (none by default); shapes, masks and errors are the function's.

    Shape:
        As the function's: Q ``(..., n_q, d_q)``, K ``(..., n_f, d_k)`` to
        e ``(..., n_q, n_f)``.
    """

    function: staticmethod[..., Tensor]

    def __init_subclass__(cls, function: Callable[..., Tensor] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if function is not None:
            cls.function = staticmethod(function)

    def weights(self) -> tuple[Tensor, ...]:
        """The learned weights passed to ``function`` after ``Q`` and ``K`` (none here)."""
        return ()

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return self.function(Q, K, *self.weights())


class LinearMapScore(FunctionScore):
    """A :class:`FunctionScore` learning one map ``W`` ``(d_k, d_q)``, and its bias ``b`` ``(d_k,)`` if ``bias``.

    ``W`` is ``nn.Linear(d_q, d_k)``: its weight is the survey's ``W``, its bias
    (a subclass declared with ``bias=True``) the survey's ``b``.

    Args:
        d_q: the query size.
        d_k: the key size.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as the subclass's function.
    """

    bias = False

    def __init_subclass__(cls, bias: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.bias = bias

    def __init__(self, d_q: int, d_k: int) -> None:
        check_integers(type(self).__name__, minimum=1, d_q=d_q, d_k=d_k)
        super().__init__()
        self.W = nn.Linear(d_q, d_k, bias=self.bias)

    def weights(self) -> tuple[Tensor, ...]:
        """``(W,)``, or ``(W, b)`` with a bias."""
        return (self.W.weight,) if self.W.bias is None else (self.W.weight, self.W.bias)


@catalogued("table2:multiplicative")
class DotScore(FunctionScore, function=dot_score):
    """Module form of :func:`dot_score` (no parameters)."""


@catalogued("table2:scaled-multiplicative")
class ScaledDotScore(FunctionScore, function=scaled_dot_score):
    """Module form of :func:`scaled_dot_score` (no parameters)."""


@catalogued("table2:additive")
class AdditiveScore(ScoreModule):
    """Module form of :func:`additive_score` with learned ``W_1, W_2, w, b``.

    Args:
        d_q: the query size.
        d_k: the key size.
        d_w: the hidden size of the additive score.
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``. Returns e: ``(..., n_q, n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as :func:`additive_score`.
    """

    def __init__(self, d_q: int, d_k: int, d_w: int, act: Activation = torch.tanh) -> None:
        check_integers("AdditiveScore", minimum=1, d_q=d_q, d_k=d_k, d_w=d_w)
        super().__init__()
        self.W1 = nn.Linear(d_q, d_w, bias=False)
        self.W2 = nn.Linear(d_k, d_w, bias=True)  # its bias is the survey's b
        self.w = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))
        self.act = act

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return additive_score(Q, K, self.W1.weight, self.W2.weight, self.w, self.W2.bias, self.act)


@catalogued("extra:concat-score")
class ConcatScore(ScoreModule):
    """Module form of :func:`concat_score` with learned ``W`` and ``v``.

    Args:
        d_q: the query size.
        d_k: the key size.
        d_w: the hidden size (rows of ``W``).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``. Returns e: ``(..., n_q, n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as :func:`concat_score`.
    """

    def __init__(self, d_q: int, d_k: int, d_w: int) -> None:
        check_integers("ConcatScore", minimum=1, d_q=d_q, d_k=d_k, d_w=d_w)
        super().__init__()
        self.W = nn.Linear(d_q + d_k, d_w, bias=False)
        self.v = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return concat_score(Q, K, self.W.weight, self.v)


@catalogued("table2:general")
class GeneralScore(LinearMapScore, function=general_score):
    """Module form of :func:`general_score` with learned ``W`` of shape ``(d_k, d_q)``."""


@catalogued("table2:biased-general")
class BiasedGeneralScore(LinearMapScore, function=biased_general_score, bias=True):
    """Module form of :func:`biased_general_score` with learned ``W`` and ``b``."""


@catalogued("table2:activated-general")
class ActivatedGeneralScore(ScoreModule):
    """Module form of :func:`activated_general_score` with learned ``W`` and scalar ``b``.

    Args:
        d_q: the query size.
        d_k: the key size.
        act: the activation (``tanh`` by default).

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``. Returns e: ``(..., n_q, n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as
            :func:`activated_general_score`.
    """

    def __init__(self, d_q: int, d_k: int, act: Activation = torch.tanh) -> None:
        check_integers("ActivatedGeneralScore", minimum=1, d_q=d_q, d_k=d_k)
        super().__init__()
        self.W = nn.Linear(d_q, d_k, bias=False)
        self.b = nn.Parameter(torch.zeros(()))
        self.act = act

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return activated_general_score(Q, K, self.W.weight, self.b, self.act)


@catalogued("table2:similarity")
class CosineScore(ScoreModule):
    """Module form of :func:`cosine_score`, with an optional learned temperature.

    Cosine scores lie in [-1, 1], so a softmax over them is nearly uniform; a
    scale ``s`` (learned when ``learn_scale=True``) sharpens it: ``s * cos``.
    ``s = 1 / temperature``.

    Args:
        scale: the initial scale ``s`` (1 / temperature).
        learn_scale: learn ``s`` as a parameter instead of keeping it fixed.

    Shape:
        Q: ``(..., n_q, d)``; K: ``(..., n_f, d)``. Returns e: ``(..., n_q, n_f)``.

    Raises:
        ValueError: unless ``s`` is finite and ``> 0`` (a temperature of 0 or
            below has no meaning).
    """

    def __init__(self, scale: float = 1.0, learn_scale: bool = False) -> None:
        super().__init__()
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"the cosine score's scale s (1 / temperature) must be finite and > 0, got s={scale}")
        t = torch.tensor(float(scale))
        self.scale = nn.Parameter(t) if learn_scale else t

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return self.scale * cosine_score(Q, K)


@catalogued("table2:similarity")
class EuclideanScore(FunctionScore, function=euclidean_score):
    """Module form of :func:`euclidean_score` (no parameters)."""


@catalogued("extra:bilinear-score")
class BilinearScore(ScoreModule):
    """Module form of :func:`bilinear_score` with learned ``W`` of shape ``(d_q, d_k)``.

    Args:
        d_q: the query size.
        d_k: the key size.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``. Returns e: ``(..., n_q, n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as :func:`bilinear_score`.
    """

    def __init__(self, d_q: int, d_k: int) -> None:
        check_integers("BilinearScore", minimum=1, d_q=d_q, d_k=d_k)
        super().__init__()
        # same scale as nn.Linear(d_q, d_k).weight.T, so it matches GeneralScore at init
        self.W = nn.Parameter((torch.rand(d_q, d_k) * 2 - 1) / math.sqrt(d_q))

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return bilinear_score(Q, K, self.W)


class LocationScore(ScoreModule):
    """Module form of :func:`location_score` with a learned ``W_a`` ``(n_max, d_q)``.

    ``forward(Q, K)`` reads only the number of keys ``n_f = K.shape[-2]``.

    Args:
        d_q: the query size.
        n_max: the most feature vectors the score can address.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)`` (only ``n_f`` is read).
        Returns e: ``(..., n_q, n_f)``.

    Raises:
        ValueError: if ``d_q`` or ``n_max`` is not an integer >= 1, or (in ``forward``) if
            ``n_f > n_max``.
    """

    def __init__(self, d_q: int, n_max: int) -> None:
        check_integers("LocationScore", minimum=1, d_q=d_q, n_max=n_max)
        super().__init__()
        if n_max < 1:
            raise ValueError(f"location score needs n_max >= 1, got n_max={n_max}")
        self.W_a = nn.Linear(d_q, n_max, bias=False)

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return location_score(Q, self.W_a.weight, as_tensor(K, "K").shape[-2])


# --------------------------------------------------------------------------
# The registry: one entry per score; every list of score names is read from it.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreSpec:
    """One registered score function.

    Attributes:
        build: ``(d_q, d_k, d_w, n_max) -> ScoreModule``.
        module: its class.
        function: the parameter-free functional form ``(Q, K) -> e`` (None when
            the score has weights).
        equal_dims: needs ``d_q == d_k``.
        taxonomy: its Table III name (what :func:`attnsurvey.builder.describe` reports).
        content: False for scores that ignore the keys' content (location).
    """

    build: Callable[[int, int, int, int | None], ScoreModule]
    module: type
    function: Callable[[Tensor, Tensor], Tensor] | None = None
    equal_dims: bool = False
    taxonomy: str = ""
    content: bool = True


#: Every score function by name (Table II rows and the other sources' extras).
SCORES: Registry[ScoreSpec] = Registry("score function")
#: Other spellings of registered names (Table III says "similarity" for the cosine).
SCORE_ALIASES = {"similarity": "cosine"}


def _location(d_q: int, d_k: int, d_w: int, n_max: int | None) -> ScoreModule:
    if n_max is None:
        raise ValueError("the location score needs n_max (the longest n_f it can score)")
    return LocationScore(d_q, n_max)


for _name, _spec in (
    ("additive", ScoreSpec(lambda q, k, w, n: AdditiveScore(q, k, w), AdditiveScore)),
    ("multiplicative", ScoreSpec(lambda q, k, w, n: DotScore(), DotScore, dot_score, True)),
    ("scaled-multiplicative", ScoreSpec(lambda q, k, w, n: ScaledDotScore(), ScaledDotScore, scaled_dot_score, True)),
    ("general", ScoreSpec(lambda q, k, w, n: GeneralScore(q, k), GeneralScore)),
    ("biased-general", ScoreSpec(lambda q, k, w, n: BiasedGeneralScore(q, k), BiasedGeneralScore)),
    ("activated-general", ScoreSpec(lambda q, k, w, n: ActivatedGeneralScore(q, k), ActivatedGeneralScore)),
    (
        "cosine",
        ScoreSpec(
            lambda q, k, w, n: CosineScore(scale=math.sqrt(k), learn_scale=True),
            CosineScore,
            cosine_score,
            True,
            "similarity",
        ),
    ),
    ("euclidean", ScoreSpec(lambda q, k, w, n: EuclideanScore(), EuclideanScore, euclidean_score, True, "similarity")),
    ("concat", ScoreSpec(lambda q, k, w, n: ConcatScore(q, k, w), ConcatScore, taxonomy="additive")),
    ("bilinear", ScoreSpec(lambda q, k, w, n: BilinearScore(q, k), BilinearScore, taxonomy="general")),
    ("location", ScoreSpec(_location, LocationScore, taxonomy="location", content=False)),
):
    SCORES.register(_name, replace(_spec, taxonomy=_spec.taxonomy or _name))


def score_spec(name: str) -> ScoreSpec:
    """The registry entry of a score name (aliases such as ``"similarity"`` allowed).

    Args:
        name: a registered score name or an alias of :data:`SCORE_ALIASES`.

    Returns:
        Its :class:`ScoreSpec`.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    return SCORES[SCORE_ALIASES.get(name, name)]


@catalogued("eq23", title="Attention score of one key, e_l = score(q, k_l), for all queries and keys at once")
def make_score(name: str, d_q: int, d_k: int, d_w: int | None = None, n_max: int | None = None) -> ScoreModule:
    """Build a score module by its registered name (:data:`SCORES`).

    Names: those registered in :data:`SCORES` (the content-based ones are
    :data:`SCORE_NAMES`; ``location`` needs ``n_max``) and the aliases of
    :data:`SCORE_ALIASES` (``similarity`` is the cosine). ``cosine`` gets a
    learned scale ``s`` that starts at ``sqrt(d_k)``: the cosine of two random
    ``d_k``-vectors has a spread of about ``1 / sqrt(d_k)``, so its first scores
    spread about as widely as the scaled dot product's.

    Args:
        name: the score's registered name or alias.
        d_q: the query size.
        d_k: the key size.
        d_w: the hidden size of the additive and concat scores (defaults to ``d_k``).
        n_max: the most feature vectors the location score can address.

    Returns:
        A fresh :class:`ScoreModule`.

    Raises:
        ValueError: for an unknown name (listing the known ones), for
            ``d_q != d_k`` where the score needs equality, or for ``location``
            without ``n_max`` or with ``n_max < 1``.
    """
    spec = score_spec(name)
    if spec.equal_dims:
        check_dim_equal(d_q, d_k, f"{name} score", "d_q", "d_k")
    return spec.build(d_q, d_k, d_k if d_w is None else d_w, n_max)


#: Names of the content-based scores (Table II and extras), in registry order.
SCORE_NAMES = tuple(name for name, spec in SCORES.items() if spec.content)


def score_function(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """The parameter-free functional form ``(Q, K) -> e`` of a registered score.

    Args:
        name: the score's registered name or alias.

    Shape:
        The returned function maps Q ``(..., n_q, d_q)`` and K ``(..., n_f, d_k)``
        to e ``(..., n_q, n_f)``.

    Returns:
        The function.

    Raises:
        ValueError: for an unknown name or a score that has weights (build those
            with :func:`make_score` and pass the module).
    """
    spec = score_spec(name)
    if spec.function is None:
        free = [n for n, s in SCORES.items() if s.function is not None]
        raise ValueError(f"score {name!r} has learned weights; build it with make_score(), or choose one of {free}")
    return spec.function


# --------------------------------------------------------------------------
# Why the multiplicative score is scaled by 1/sqrt(d_k) (§3.2.1, [13]).
# --------------------------------------------------------------------------


@catalogued(
    "extra:scaling-variance",
    title="Var(q^T k) = d_k for unit-variance entries; softmax saturation and vanishing gradients without 1/sqrt(d_k)",
)
def dot_product_variance(
    d_k: int, n_samples: int = 20_000, scaled: bool = False, generator: torch.Generator | None = None
) -> float:
    """Empirical variance of ``q^T k`` (or ``q^T k / sqrt(d_k)``) for random unit-variance vectors.

    Draws ``n_samples`` pairs ``q, k`` with i.i.d. ``N(0, 1)`` entries in
    ``R^{d_k}`` and measures the sample variance of their multiplicative score
    (Table II, row 2) or, with ``scaled=True``, of the scaled one (row 3).
    Theory (§3.2.1): ``Var(q^T k) = d_k`` and ``Var(q^T k / sqrt(d_k)) = 1``.

    Args:
        d_k: the vector size.
        n_samples: the number of pairs drawn.
        scaled: score with the scaled multiplicative score.
        generator: the random generator (the global one if None).

    Returns:
        The sample variance, a float.

    Raises:
        ValueError: if ``d_k < 1`` or ``n_samples < 2``.
    """
    check_integers("dot_product_variance", d_k=d_k, n_samples=n_samples)
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2 to estimate a variance, got {n_samples}")
    return float(_random_dot_scores(d_k, n_samples, 1, scaled, generator).var())


def _random_dot_scores(d_k: int, n_samples: int, n_f: int, scaled: bool, generator: torch.Generator | None) -> Tensor:
    """Scores ``(n_samples, n_f)`` of random queries, each against its own ``n_f`` random keys.

    Queries and keys have i.i.d. ``N(0, 1)`` entries in ``R^{d_k}`` (float64, the
    queries drawn first); the score is the multiplicative one, scaled if ``scaled``.
    Raises ``ValueError`` if ``d_k < 1``.
    """
    if d_k < 1:
        raise ValueError(f"d_k must be >= 1, got d_k={d_k}")
    q = torch.randn(n_samples, 1, d_k, generator=generator, dtype=torch.float64)
    K = torch.randn(n_samples, n_f, d_k, generator=generator, dtype=torch.float64)
    return (scaled_dot_score if scaled else dot_score)(q, K)[:, 0]


@catalogued("extra:scaling-variance")
def softmax_jacobian(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Jacobian of the softmax alignment, ``d a_i / d e_j = a_i (delta_ij - a_j)``.

    When one weight is close to 1 (a saturated softmax) every entry is close to
    0: the scores receive almost no gradient.

    Args:
        e: the scores.
        mask: as in :func:`attnsurvey.masking.masked_softmax` (``True`` = may
            attend), or None.

    Shape:
        e: ``(..., n_f)``; mask broadcastable to e. Returns ``(..., n_f, n_f)``.

    Returns:
        The Jacobian of the weights with respect to the scores.

    Raises:
        TypeError: if ``e`` is not a floating-point tensor.
        ValueError: for a mask that is not boolean or does not broadcast to e.
    """
    as_tensor(e, "e")
    if isinstance(mask, Tensor) and mask.dtype == torch.bool:
        check_attn_mask(mask, e.shape)  # a rank-2 mask with B == n_q is ambiguous
    a = masked_softmax(e, mask, dim=-1)
    return torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)


@catalogued("extra:scaling-variance")
def softmax_saturation(
    d_k: int,
    n_f: int = 10,
    n_samples: int = 2_000,
    scaled: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[float, float]:
    """How saturated the softmax over dot-product scores is, for keys of size ``d_k``.

    Draws ``n_samples`` queries ``q`` and ``n_f`` keys each, with i.i.d.
    ``N(0, 1)`` entries, scores them with the (scaled, if ``scaled``)
    multiplicative score and applies the softmax.

    Args:
        d_k: the vector size.
        n_f: the number of keys per query.
        n_samples: the number of queries drawn.
        scaled: score with the scaled multiplicative score.
        generator: the random generator (the global one if None).

    Returns:
        The mean largest weight ``max_l a_l`` and the mean Frobenius norm of the
        softmax Jacobian (:func:`softmax_jacobian`), i.e. how much gradient
        reaches the scores.

    Raises:
        ValueError: if ``d_k < 1``, ``n_f < 2`` or ``n_samples`` is not an integer >= 1 (the
            means over no draws would be 0/0).
    """
    check_integers("softmax_saturation", d_k=d_k, n_f=n_f)
    check_integers("softmax_saturation", minimum=1, n_samples=n_samples)
    if n_f < 2:
        raise ValueError(f"n_f must be >= 2 for a softmax to saturate, got n_f={n_f}")
    e = _random_dot_scores(d_k, n_samples, n_f, scaled, generator)
    a = torch.softmax(e, dim=-1)
    J = softmax_jacobian(e)
    return float(a.max(-1).values.mean()), float(torch.linalg.matrix_norm(J).mean())


# --------------------------------------------------------------------------
# The chapter's task model: one attention layer whose score function varies.
# --------------------------------------------------------------------------
