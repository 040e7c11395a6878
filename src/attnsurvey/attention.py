"""The attention core: Eq. (2)-(4) of the general attention model (Fig. 2) in one function, :func:`attend`.

Every mechanism of the package computes its weights and context here: the
scores (a Table II score, Eq. 2), the alignment (Eq. 3; a name of the registry
:data:`ALIGNMENTS` or a callable ``(e, mask) -> a``), and the context ``c = a V``
(Eq. 4). The options are those of ``torch.nn.functional.scaled_dot_product_attention``
(masks, bias, causality, dropout, scale, grouped-query attention), and one more, a
``sink`` logit (gpt-oss: an extra slot in the softmax's denominator); with
``need_weights=False`` and the plain configuration the call runs that kernel, and
:func:`dispatch_reason` says why another call does not.

Validation happens once, at the public edge: :func:`attend` checks and converts
its inputs and then calls :func:`attend_unchecked`, which trusts them (the
multi-head stack, having checked its own inputs, calls it directly). Both combine
their masks, causality and bias in one place, :func:`canonical_masks`, and hand the
core one :class:`CoreSettings` read by name. No step of
the default path reads a tensor's value on the host: masked positions are made
inert with ``torch.where``, so the core runs under ``torch.compile`` without
graph breaks.

Masks are boolean, ``True`` = may attend (built by :mod:`attnsurvey.masking`);
a float mask is an additive bias as in torch, its ``-inf`` entries masked.

Shape legend: ``B`` batch (any number of leading axes, ``...``), ``h`` heads,
``n_q`` queries, ``n_f`` feature vectors (keys and values), ``d_q``/``d_k`` the
query/key width, ``d_v`` the value width.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, TypedDict, Unpack, cast, overload

import torch
import torch.nn.functional as F_
from torch import Tensor

from ._checks import (
    as_tensor,
    broadcast_batch,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_positive,
    check_probability,
    check_same_dtype,
)
from .general_mechanisms.scoring import dot_score, scaled_dot_score, score_function
from .general_mechanisms.sparse_maps import entmax15, entmax_bisect, sparsemax
from .masking import (
    check_attn_mask,
    check_key_padding_mask,
    finite_rows,
    masked_log_softmax,
    masked_softmax,
    minus_inf,
)
from .registry import Registry

ScoreFn = Callable[[Tensor, Tensor], Tensor]
AlignFn = Callable[[Tensor, Tensor | None], Tensor]

#: Alignment (normalisation) functions by name: ``(e, mask) -> a`` with mask boolean or None.
ALIGNMENTS: Registry[AlignFn] = Registry("alignment function")


@ALIGNMENTS.register("softmax")
def softmax_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Soft alignment, Eq. (3)/(25): the masked softmax over the last axis.

    Args:
        e: the scores.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.

    Shape:
        e: ``(..., n_q, n_f)``; returns the same shape.

    Returns:
        The weights; a fully-masked row is all zeros.

    Raises:
        ValueError: for a mask that is not boolean or does not broadcast to ``e``.
    """
    return masked_softmax(e, mask, dim=-1)


ALIGNMENTS.register("sparsemax", sparsemax)  # (e, mask=None, ...) -> a: already an alignment
ALIGNMENTS.register("entmax15", entmax15)


def alpha_entmax_align(alpha: float, n_iter: int = 50) -> AlignFn:
    """The alignment ``(e, mask) -> a`` of alpha-entmax (bisection, any finite ``alpha > 0``).

    ``attend(..., align=alpha_entmax_align(1.2))``; the registered name
    ``"alpha-entmax"`` is ``alpha = 1.5`` computed by bisection.

    Args:
        alpha: the entmax exponent (1: softmax, 2: sparsemax).
        n_iter: bisection steps.

    Shape:
        the returned function maps scores ``(..., n_q, n_f)`` to weights of the same shape.

    Returns:
        The alignment function ``(e, mask) -> a``.

    Raises:
        ValueError: unless ``alpha > 0`` is finite and ``n_iter`` an integer >= 1.
    """
    check_positive("alpha-entmax", alpha=alpha)
    check_integers("alpha-entmax", minimum=1, n_iter=n_iter)

    def align(e: Tensor, mask: Tensor | None = None) -> Tensor:  # a def: mypy cannot type a lambda with a default
        return entmax_bisect(e, alpha, mask, n_iter=n_iter)

    return align


ALIGNMENTS.register("alpha-entmax", alpha_entmax_align(1.5))


@ALIGNMENTS.register("uniform")
def uniform_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Uniform weights over the allowed positions (the scores are ignored): the mean-pooling baseline.

    Args:
        e: the scores (only their shape is used).
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.

    Shape:
        e: ``(..., n_q, n_f)``; returns the same shape.

    Returns:
        ``1 / (number of allowed positions)`` at each allowed position; a fully-masked row is all zeros.

    Raises:
        ValueError: for a mask that is not boolean or does not broadcast to ``e``.
    """
    as_tensor(e, "e")
    return masked_softmax(torch.zeros_like(e), mask, dim=-1)


@ALIGNMENTS.register("hard")
def argmax_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Deterministic hard alignment, Eq. (26): one-hot on the first largest allowed score.

    Args:
        e: the scores, a floating-point tensor.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.

    Shape:
        e: ``(..., n_q, n_f)``; returns the same shape.

    Returns:
        One-hot weights (no gradient). A fully-masked row, and every row when ``n_f = 0``
        (an empty key set has nothing to point at), are all zeros.

    Raises:
        TypeError: if ``e`` is not a floating-point tensor (a list or NumPy array included).
        ValueError: for a mask that is not boolean or does not broadcast to ``e``.
    """
    as_tensor(e, "e")
    if mask is not None:
        check_attn_mask(mask, e.shape)
    if e.shape[-1] == 0:
        return torch.zeros_like(e)
    filled = e if mask is None else torch.where(mask, e, minus_inf(e.dtype))
    a = F_.one_hot(filled.argmax(-1), e.shape[-1]).to(e.dtype)
    if mask is not None:
        a = torch.where(mask.expand(e.shape).any(-1, keepdim=True), a, torch.zeros((), dtype=e.dtype))
    return a


def resolve_align(align: str | AlignFn) -> AlignFn:
    """The alignment function that ``align`` names (or ``align`` itself when it is a callable).

    Args:
        align: a name of :data:`ALIGNMENTS` or a callable ``(e, mask) -> a``.

    Returns:
        The callable.

    Raises:
        ValueError: for an unknown name.
        TypeError: for anything that is neither a string nor callable.
    """
    return ALIGNMENTS.resolve(align, "align", "(e, mask) -> a")


def resolve_score(score: str | ScoreFn | None, scale: float | None = None) -> tuple[ScoreFn | None, float | None]:
    """Normalise a score argument: ``(score function, or None for the plain dot product; scale of the product)``.

    Args:
        score: a Table II callable ``(Q, K) -> e``, a registered parameter-free name, or None
            (the scaled multiplicative score).
        scale: replaces the ``1/sqrt(d_k)`` of the scaled product; None keeps it.

    Returns:
        ``(fn, scale)``: ``fn`` is None for the (scaled) dot product, which the core computes
        itself (``scale`` None means ``1/sqrt(d_k)``; :func:`~attnsurvey.general_mechanisms.scoring.dot_score`
        gives scale 1).

    Raises:
        ValueError: for a scale that is not a finite number, or a scale with another score.
        TypeError: for a score that is neither a name nor callable.
    """
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"the score scale (1/sqrt(d_k) by default) must be a finite number, got scale={scale!r}")
    if isinstance(score, str):
        score = score_function(score)
    if score is None or score is scaled_dot_score:
        return None, scale
    if score is dot_score:
        return None, 1.0 if scale is None else scale
    if not callable(score):
        raise TypeError(f"score must be a callable (Q, K) -> e or a registered name, got {type(score).__name__}")
    if scale is not None:
        raise ValueError("scale applies to the (scaled) multiplicative score only; fold it into your score function")
    return score, None


def _dot_scale(d_k: int, scale: float | None) -> float:
    """The factor of the plain product: ``scale``, else ``1/sqrt(d_k)`` (1 for ``d_k = 0``, whose scores are 0)."""
    if scale is not None:
        return scale
    return 1.0 / math.sqrt(d_k) if d_k else 1.0


def _scores(Q: Tensor, K: Tensor, fn: ScoreFn | None, scale: float | None) -> Tensor:
    """Eq. (2) on checked inputs: the (scaled) dot product when ``fn`` is None, else ``fn(Q, K)``."""
    if fn is None:
        if scale is None and K.shape[-1]:  # divided, as scaled_dot_score does: the same bits
            return (Q @ K.transpose(-1, -2)) / math.sqrt(K.shape[-1])
        return (Q @ K.transpose(-1, -2)) * _dot_scale(K.shape[-1], scale)
    e = fn(Q, K)
    if e.shape[-2:] != (Q.shape[-2], K.shape[-2]):
        raise ValueError(
            f"score function returned shape {tuple(e.shape)}, expected (..., n_q={Q.shape[-2]}, n_f={K.shape[-2]})"
        )
    return e


def attention_scores(Q: Tensor, K: Tensor, score: str | ScoreFn | None = None, *, scale: float | None = None) -> Tensor:
    """Attention scores, Eq. (2): ``e_l = score(q, k_l)`` for every query and key.

    Args:
        Q: the queries.
        K: the keys.
        score: a function of Table II or a registered parameter-free name; default the scaled
            multiplicative score ``q^T k / sqrt(d_k)`` (``scale * q^T k`` when ``scale`` is given).
        scale: the factor of the multiplicative score.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; returns e ``(..., n_q, n_f)``.

    Returns:
        The scores. With ``d_k = 0`` the (scaled) product is 0 everywhere (an empty sum).

    Raises:
        TypeError: if Q or K is not a floating-point tensor, or for a bad score argument.
        ValueError: if the score's shape requirements fail or it returns the wrong shape.
    """
    as_tensor(Q, "Q")
    as_tensor(K, "K")
    check_min_rank(Q, 2, "Q", "(..., n_q, d_q)")
    check_min_rank(K, 2, "K", "(..., n_f, d_k)")
    fn, scale = resolve_score(score, scale)
    if fn is None:
        check_dim_equal(Q.shape[-1], K.shape[-1], "scaled multiplicative score", "d_q", "d_k")
    return _scores(Q, K, fn, scale)


def context(a: Tensor, V: Tensor) -> Tensor:
    """Context vectors, Eq. (4): ``c = sum_l a_l v_l``.

    A zero weight is inert: NaN/Inf in a value row that gets weight 0 does not reach c.

    Args:
        a: the attention weights.
        V: the values.

    Shape:
        a: ``(..., n_q, n_f)``; V: ``(..., n_f, d_v)``; returns c ``(..., n_q, d_v)``.

    Returns:
        The context vectors.

    Raises:
        TypeError: if a or V is not a floating-point tensor.
        ValueError: if the two ``n_f`` differ or the batch axes do not broadcast.
    """
    as_tensor(a, "a")
    as_tensor(V, "V")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_dim_equal(a.shape[-1], V.shape[-2], "context (Eq. 4)", "n_f of a", "n_f of V")
    if broadcast_batch(a.shape[:-2], V.shape[:-2]) is None:
        raise ValueError(f"batch dimensions of a {tuple(a.shape)} and V {tuple(V.shape)} do not broadcast")
    return _inert_product(a, V)


def _inert_product(a: Tensor, V: Tensor) -> Tensor:
    """``a @ V`` in which a zero weight ignores its value row even when that row holds NaN/Inf.

    Tensor operations only (no host synchronisation): non-finite value rows are replaced
    by 0 and a query that gives such a row a non-zero weight gets NaN.
    """
    good_v = torch.isfinite(V).all(-1)  # (..., n_f)
    V0 = torch.where(good_v[..., None], V, torch.zeros((), dtype=V.dtype, device=V.device))
    poisoned = ((a != 0) & ~good_v[..., None, :]).any(-1, keepdim=True)
    return torch.where(poisoned, torch.full((), float("nan"), dtype=V.dtype, device=V.device), a @ V0)


def dropout_weights(a: Tensor, p: float, generator: torch.Generator | None = None) -> Tensor:
    """Attention dropout: zero each weight with probability ``p``, scale the rest by ``1/(1-p)``.

    Args:
        a: the weights.
        p: the drop probability; ``p = 1`` zeroes everything (a NaN weight stays NaN).
        generator: the random generator of the draws (reproducible); None: torch's global one.

    Shape:
        a: any; returns the same shape.

    Returns:
        The weights after dropout (selected with ``torch.where``).

    Raises:
        ValueError: unless ``0 <= p <= 1``.
    """
    as_tensor(a, "a")
    check_probability("attention dropout", dropout_p=p)
    return _dropout(a, p, generator)


def _dropout(a: Tensor, p: float, generator: torch.Generator | None) -> Tensor:
    """:func:`dropout_weights` on checked inputs (``0 <= p <= 1``)."""
    if p == 0.0:
        return a
    zero = torch.zeros((), dtype=a.dtype, device=a.device)
    if p == 1.0:
        return torch.where(torch.isnan(a), a, zero)  # every weight dropped (a NaN weight stays NaN)
    keep = torch.rand(a.shape, generator=generator, device=a.device) >= p
    return torch.where(keep, a / (1.0 - p), zero)


def _align(e: Tensor, mask: Tensor | None, align_fn: AlignFn, sink: Tensor | None = None) -> Tensor:
    """The alignment over the last axis on checked inputs: masked scores filled, masked weights set to 0.

    With a ``sink`` (softmax only, checked by the caller) the softmax runs over the scores and one more
    slot holding the sink logit, whose weight is then dropped: a row's weights sum to less than 1.
    """
    if sink is not None:
        if mask is not None:
            e = torch.where(mask, e, minus_inf(e.dtype))
        a = torch.softmax(torch.cat([e, sink.expand(*e.shape[:-1], 1)], dim=-1), dim=-1)[..., :-1]
        return a if mask is None else torch.where(mask, a, torch.zeros((), dtype=a.dtype, device=a.device))
    if mask is None:
        return torch.softmax(e, dim=-1) if align_fn is softmax_align else align_fn(e, None)
    e = torch.where(mask, e, minus_inf(e.dtype))
    a = torch.softmax(e, dim=-1) if align_fn is softmax_align else align_fn(e, mask)
    return torch.where(mask, a, torch.zeros((), dtype=a.dtype, device=a.device))


def align_scores(
    e: Tensor, mask: Tensor | None = None, align: str | AlignFn = "softmax", *, dim: int = -1, log: bool = False
) -> Tensor:
    """The alignment step of :func:`attend`, Eq. (3): scores to weights.

    Masked scores are replaced by :func:`attnsurvey.masking.minus_inf` before the alignment
    sees them and the weights there are set to exactly 0 afterwards (``torch.where``, so
    NaN/Inf at masked positions are inert).

    Args:
        e: the scores, a floating-point tensor.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.
        align: a name of :data:`ALIGNMENTS` or a callable ``(e, mask) -> a``.
        dim: the axis the weights are normalised over (default the last, ``n_f``;
            multi-dimensional attention, Eq. 32, normalises over positions, ``dim=-2``).
            The softmax normalises along ``dim`` in place; any other alignment sees ``e``
            (and the mask) with ``dim`` moved last, and its weights are moved back.
        log: return the log-weights ``log softmax(e)`` (a pointer network's output, exact
            where the weight itself underflows); masked positions and fully-masked rows get
            ``minus_inf`` (weight 0 after ``exp``), never NaN.

    Shape:
        e: ``(..., n_q, n_f)`` (or any shape with ``dim``); returns the same shape.

    Returns:
        The weights (log-weights with ``log=True``). A fully-masked row is all zeros, and so
        is every row of an empty key set (``n_f = 0``, nothing to attend to).

    Raises:
        TypeError: if ``e`` is not a floating-point tensor (lists and NumPy arrays included),
            or ``align`` is neither a name nor callable.
        ValueError: for a bad mask, an unknown alignment name, a ``dim`` out of range, or
            ``log=True`` with an alignment other than the softmax.
    """
    as_tensor(e, "e")
    align_fn = resolve_align(align)
    if not -e.dim() <= dim < e.dim():
        raise ValueError(f"dim={dim} is out of range for the scores e of shape {tuple(e.shape)}")
    dim %= e.dim()
    if mask is not None:
        check_attn_mask(mask, e.shape)
    if log:
        if align_fn is not softmax_align:
            raise ValueError("log-weights (log=True) exist for the softmax alignment only (log 0 = -inf elsewhere)")
        return masked_log_softmax(e, mask, dim=dim)
    if e.shape[dim] == 0:
        return torch.zeros_like(e)
    if dim != e.dim() - 1:
        if align_fn is softmax_align:
            return masked_softmax(e, mask, dim=dim)
        moved = None if mask is None else mask.expand(e.shape).movedim(dim, -1)
        return _align(e.movedim(dim, -1), moved, align_fn).movedim(-1, dim)
    return _align(e, mask, align_fn)


def attend_scores(
    e: Tensor, V: Tensor, mask: Tensor | None = None, align: str | AlignFn = "softmax"
) -> tuple[Tensor, Tensor]:
    """Eq. (3)-(4) for scores computed elsewhere: align ``e`` (:func:`align_scores`), then ``c = a V``.

    Args:
        e: the scores.
        V: the values.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend.
        align: as :func:`attend`.

    Shape:
        e: ``(..., n_f)`` (one query per example; V ``(..., n_f, d_v)`` has one more axis and
        c is ``(..., d_v)``) or ``(..., n_q, n_f)`` with V of the same rank (c ``(..., n_q, d_v)``).

    Returns:
        ``(c, a)``; a fully-masked row gives zero weights and a zero context.

    Raises:
        TypeError: if e or V is not a floating-point tensor.
        ValueError: if the ``n_f`` of e and V differ, or for a bad mask or alignment name.
    """
    as_tensor(e, "e")
    as_tensor(V, "V")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_dim_equal(e.shape[-1], V.shape[-2], "context (Eq. 4)", "n_f of e", "n_f of V")
    a = align_scores(e, mask, align)
    if a.dim() == V.dim() - 1:  # one query per example
        return _inert_product(a.unsqueeze(-2), V).squeeze(-2), a
    return _inert_product(a, V), a


def allowed_positions(
    scores_shape: torch.Size,
    mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    device: torch.device | None = None,
) -> Tensor | None:
    """Combine an attention mask, a key-padding mask and causality into one boolean mask.

    Args:
        scores_shape: the shape of the scores.
        mask: boolean, broadcastable, ``True`` = may attend (rank-2 ambiguous shapes are
            rejected, see :func:`attnsurvey.masking.check_attn_mask`).
        key_padding_mask: boolean, one axis per batch axis of the scores, ``True`` = may attend.
        is_causal: query ``i`` may attend to ``j <= i``.
        device: where the causal mask is built.

    Shape:
        scores_shape: ``(..., n_q, n_f)``; mask: broadcastable to it; key_padding_mask:
        ``(..., n_f)``; returns a mask broadcastable to the scores.

    Returns:
        The combined mask, or None when nothing is masked.

    Raises:
        ValueError: for a bad mask.
    """
    scores_shape = torch.Size(scores_shape)
    allowed = None
    if mask is not None:
        allowed = check_attn_mask(mask, scores_shape)
    if key_padding_mask is not None:
        kpm = check_key_padding_mask(key_padding_mask, scores_shape)
        allowed = kpm if allowed is None else allowed & kpm
    if is_causal:
        n_q, n_f = scores_shape[-2], scores_shape[-1]
        causal = torch.ones(n_q, n_f, dtype=torch.bool, device=device).tril()
        allowed = causal if allowed is None else allowed & causal
    return allowed


def split_float_mask(mask: Tensor) -> tuple[Tensor, Tensor]:
    """torch's float attention mask as ``(allowed, bias)``: its ``-inf`` entries masked, the rest added.

    Tensor operations only (no host synchronisation), so the split costs the same
    whether or not the mask holds ``-inf``.

    Args:
        mask: a floating-point additive mask.

    Shape:
        mask: any; both results have its shape.

    Returns:
        ``(allowed, bias)``: boolean ``allowed``, ``True`` = may attend (where the mask is not
        ``-inf``); the mask with its
        ``-inf`` entries replaced by 0.

    Raises:
        TypeError: if the mask is not a floating-point tensor.
    """
    as_tensor(mask, "mask")
    blocked = mask == float("-inf")
    return ~blocked, mask.masked_fill(blocked, 0.0)


def check_bias(bias: Tensor, scores_shape: torch.Size, dtype: torch.dtype) -> Tensor:
    """Check an additive score bias against the scores and return it in ``dtype``.

    Args:
        bias: a floating-point tensor added to the scores.
        scores_shape: the shape of the scores.
        dtype: the dtype of the scores.

    Shape:
        bias: broadcastable to ``scores_shape`` ``(..., n_q, n_f)`` without changing it.

    Returns:
        ``bias`` cast to ``dtype``.

    Raises:
        ValueError: for a bias that is not a floating-point tensor or does not broadcast.
    """
    if not isinstance(bias, Tensor) or not bias.is_floating_point():
        raise ValueError(
            f"bias must be a floating-point tensor added to the scores, got {getattr(bias, 'dtype', type(bias).__name__)}"
        )
    if broadcast_batch(bias.shape, scores_shape) != tuple(scores_shape):
        raise ValueError(
            f"bias of shape {tuple(bias.shape)} does not broadcast to the scores e of shape {tuple(scores_shape)}"
        )
    return bias.to(dtype)


def check_sink(sink: Tensor | None, scores_shape: torch.Size, dtype: torch.dtype, align_fn: AlignFn) -> Tensor | None:
    """Check a sink logit (an extra slot of the softmax's denominator) and return it in ``dtype``.

    Args:
        sink: a floating-point tensor of sink logits, or None.
        scores_shape: the shape of the scores ``(..., n_q, n_f)``.
        dtype: the dtype of the scores.
        align_fn: the resolved alignment (a sink exists for the softmax only).

    Shape:
        sink: broadcastable to ``(..., n_q, 1)`` without changing it (one logit per head: ``(h, 1, 1)``).

    Returns:
        ``sink`` cast to ``dtype``, or None.

    Raises:
        ValueError: for a sink that is not a floating-point tensor or does not broadcast, or an
            alignment other than the softmax.
    """
    if sink is None:
        return None
    if align_fn is not softmax_align:
        raise ValueError("a sink logit is an extra slot of the softmax's denominator: it needs align='softmax'")
    if not isinstance(sink, Tensor) or not sink.is_floating_point():
        raise ValueError(
            f"sink must be a floating-point tensor of logits, got {getattr(sink, 'dtype', type(sink).__name__)}"
        )
    column = (*scores_shape[:-1], 1)
    if sink.dim() < 1 or broadcast_batch(sink.shape, column) != column:
        raise ValueError(
            f"sink of shape {tuple(sink.shape)} does not broadcast to (..., n_q, 1) = {column} "
            f"(the scores e have shape {tuple(scores_shape)}; one logit per head is (h, 1, 1))"
        )
    return sink.to(dtype)


def _expand_gqa(Q: Tensor, K: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
    """Repeat the K/V heads (axis -3) so that every query head has its group's K and V."""
    for sym, t in (("Q", Q), ("K", K), ("V", V)):
        check_min_rank(t, 3, sym, "(..., heads, n, d) for grouped-query attention")
    h_q, h_k = Q.shape[-3], K.shape[-3]
    if V.shape[-3] != h_k or h_k < 1 or h_q % h_k:
        raise ValueError(
            f"grouped-query attention needs the K and V head counts equal and dividing the query heads, "
            f"got h_q={h_q}, h_k={h_k}, h_v={V.shape[-3]}"
        )
    r = h_q // h_k
    return K.repeat_interleave(r, dim=-3), V.repeat_interleave(r, dim=-3)


class AttendOptions(TypedDict, total=False):
    """The keyword options of :func:`attend` that a caller passes through unchanged.

    :func:`attnsurvey.query_related.multihead.multi_head_attention` and
    ``MultiHeadAttention.forward`` take them as ``**options`` and hand them on for
    every head; :func:`attend` itself also takes ``need_weights`` and ``enable_gqa``
    (which multi-head attention sets from its own arguments). Defaults and meanings
    are :func:`attend`'s (:data:`ATTEND_DEFAULTS`).

    Args:
        key_padding_mask: boolean ``(..., n_f)``, ``True`` = may attend (default None).
        bias: float, added to the scores (default None).
        is_causal: top-left causal mask (default False).
        dropout_p: attention dropout (default 0.0).
        generator: the dropout's random generator (default None).
        scale: the factor of the multiplicative score (default None: ``1/sqrt(d_k)``).
        align: a name of :data:`ALIGNMENTS` or a callable (default ``"softmax"``).
        sink: a sink logit per row of scores, an extra slot of the softmax (default None).
    """

    key_padding_mask: Tensor | None
    bias: Tensor | None
    is_causal: bool
    dropout_p: float
    generator: torch.Generator | None
    scale: float | None
    align: str | AlignFn
    sink: Tensor | None


def dispatch_reason(
    score: str | ScoreFn | None = None,
    *,
    align: str | AlignFn = "softmax",
    need_weights: bool = True,
    dropout_p: float = 0.0,
    generator: torch.Generator | None = None,
    empty: bool = False,
    sink: Tensor | None = None,
) -> str | None:
    """Why :func:`attend` with these arguments does not run ``F.scaled_dot_product_attention``, or None if it does.

    As torch's ``MultiheadAttention`` reports why it left its fast path. Masks, a bias,
    ``is_causal``, ``scale`` and grouped-query attention never block the kernel.

    Args:
        score: as :func:`attend` (None or the scaled/plain dot product keep the kernel).
        align: as :func:`attend` (only the softmax keeps the kernel).
        need_weights: True asks for the weights, which the kernel does not return.
        dropout_p: the attention dropout.
        generator: a seeded generator for the dropout: the kernel draws from torch's own.
        empty: the call has no key (``n_f = 0``) or no query: its result is zeros.
        sink: a sink logit: the kernel has no slot for it in its denominator.

    Shape:
        sink: as :func:`attend`'s (only whether it is given matters here).

    Returns:
        None when the kernel runs, else one of the reasons, naming the argument:
        ``"need_weights=True: the weights are requested"``, ``"score: a custom score function"``,
        ``"align: not the softmax"``, ``"generator: seeded dropout"``, ``"empty: no key or no query"``,
        ``"sink: an extra slot in the softmax"``.

    Raises:
        TypeError, ValueError: for a score or alignment that :func:`attend` would refuse.
    """
    check_probability("attention dropout", dropout_p=dropout_p)
    fn, _ = resolve_score(score)
    return _dispatch_reason(fn, resolve_align(align), need_weights, dropout_p, generator, empty, sink is not None)


def _dispatch_reason(
    fn: ScoreFn | None,
    align_fn: AlignFn,
    need_weights: bool,
    dropout_p: float,
    generator: torch.Generator | None,
    empty: bool,
    sink: bool = False,
) -> str | None:
    if empty:
        return "empty: no key or no query"
    if need_weights:
        return "need_weights=True: the weights are requested"
    if fn is not None:
        return "score: a custom score function"
    if align_fn is not softmax_align:
        return "align: not the softmax"
    if generator is not None and dropout_p > 0.0:
        return "generator: seeded dropout"
    if sink:
        return "sink: an extra slot in the softmax"
    return None


# The weights are a Tensor unless need_weights=False: callers that keep the default get (Tensor, Tensor).
@overload
def attend(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    mask: Tensor | None = None,
    score: str | ScoreFn | None = None,
    *,
    need_weights: Literal[True] = True,
    enable_gqa: bool = False,
    **options: Unpack[AttendOptions],
) -> tuple[Tensor, Tensor]: ...
@overload
def attend(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    mask: Tensor | None = None,
    score: str | ScoreFn | None = None,
    *,
    need_weights: bool,
    enable_gqa: bool = False,
    **options: Unpack[AttendOptions],
) -> tuple[Tensor, Tensor | None]: ...
def attend(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    mask: Tensor | None = None,
    score: str | ScoreFn | None = None,
    *,
    key_padding_mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    generator: torch.Generator | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    need_weights: bool = True,
    align: str | AlignFn = "softmax",
    sink: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """The general attention module (Fig. 2): Eq. (2), (3) and (4) in one call.

    Masked positions are inert: NaN/Inf in a masked key or value reaches neither the
    outputs nor the gradients (a query that may attend a non-finite key or value gets
    NaN). A fully-masked row and an empty feature set (``n_f = 0``) give all-zero weights
    and a zero context; NaN/Inf in the query of a fully-masked row reaches no gradient.
    With ``d_k = 0`` every score is 0 (an empty sum), so the weights are uniform over the
    allowed keys and the context is their mean, as in ``F.scaled_dot_product_attention``.
    The plain configuration (scaled dot product, softmax, ``need_weights=False``, no
    seeded dropout) runs ``F.scaled_dot_product_attention``; :func:`dispatch_reason`
    says why another does not. The checks run here once; the computation is
    :func:`attend_unchecked`.

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        mask: attention mask, boolean with ``True`` = may attend (a float mask is added to
            the scores, as in torch; its ``-inf`` entries count as masked).
        score: a Table II callable ``(Q, K) -> e`` or a parameter-free registered name;
            default the scaled multiplicative score (``scale`` replaces its ``1/sqrt(d_k)``).
        key_padding_mask: boolean, one axis per batch axis of the scores, ``True`` = may attend.
        bias: float, broadcastable to the scores, added before the alignment (relative
            positions, ALiBi).
        is_causal: query ``i`` may attend to keys ``j <= i`` (top-left, as SDPA).
        dropout_p: attention dropout on the weights (draws from ``generator``).
        generator: the random generator of the dropout.
        scale: the factor of the multiplicative score.
        enable_gqa: K and V may have fewer heads (axis -3) than Q, each shared by a group
            of query heads.
        need_weights: return the weights (after dropout), else None.
        align: a name of :data:`ALIGNMENTS` or a callable ``(e, mask) -> a``.
        sink: a learned sink logit ``s`` (gpt-oss; softmax only): one more slot in the softmax's
            denominator, ``a_l = exp(e_l) / (exp(s) + sum_j exp(e_j))`` over the allowed keys, with
            no value (it adds nothing to the context), so a row's weights sum to less than 1; a
            fully-masked row stays all zeros. None: no sink.

    Shape:
        Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``;
        mask and bias: broadcastable to ``(..., n_q, n_f)``; key_padding_mask: ``(..., n_f)``;
        sink: broadcastable to ``(..., n_q, 1)`` (one logit per head: ``(h, 1, 1)``).

    Returns:
        ``(c, a)``: context ``(..., n_q, d_v)`` and weights ``(..., n_q, n_f)`` (None when
        ``need_weights=False``).

    Raises:
        TypeError: if Q, K or V is not a floating-point tensor (lists and NumPy arrays
            included; see :func:`attnsurvey._checks.as_tensor`), the dtypes differ, or for
            a bad score/align argument.
        ValueError: for shape or mask problems (an ambiguous rank-2 mask included), a
            dropout probability outside ``[0, 1]``, a sink that does not broadcast or meets
            an alignment other than the softmax, or finite Q and K whose scores overflow their
            dtype (e.g. ``|q . k| > 3.4e38`` in float32), which would give NaN weights.
    """
    for sym, t, layout in (("Q", Q, "(..., n_q, d_q)"), ("K", K, "(..., n_f, d_k)"), ("V", V, "(..., n_f, d_v)")):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, layout)
    check_dim_equal(K.shape[-2], V.shape[-2], "attention", "n_f of K", "n_f of V")
    if not Q.dtype == K.dtype == V.dtype:
        check_same_dtype(Q=Q, K=K, V=V)
    check_probability("attention dropout", dropout_p=dropout_p)
    fn, scale = resolve_score(score, scale)
    align_fn = resolve_align(align)
    if enable_gqa:
        K, V = _expand_gqa(Q, K, V)
    batch = broadcast_batch(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    if batch is None:
        raise ValueError(
            f"batch dimensions of Q {tuple(Q.shape)}, K {tuple(K.shape)} and V {tuple(V.shape)} do not broadcast"
        )
    if fn is None:
        check_dim_equal(Q.shape[-1], K.shape[-1], "scaled multiplicative score", "d_q", "d_k")
    allowed, bias = canonical_masks(
        torch.Size((*batch, Q.shape[-2], K.shape[-2])),
        mask,
        key_padding_mask=key_padding_mask,
        is_causal=is_causal,
        bias=bias,
        dtype=Q.dtype,
        device=Q.device,
    )
    sink = check_sink(sink, torch.Size((*batch, Q.shape[-2], K.shape[-2])), Q.dtype, align_fn)
    settings = CoreSettings(allowed, bias, fn, scale, align_fn, dropout_p, generator, need_weights, sink=sink)
    c, a = attend_unchecked(Q, K, V, settings)
    refuse_overflowing_scores(c, Q, K, settings)
    return c, a


def refuse_overflowing_scores(c: Tensor, Q: Tensor, K: Tensor, settings: CoreSettings) -> None:
    """Raise if the context ``c`` is not finite because a finite query and key gave an infinite score.

    The weights of such a row would be NaN (``inf - inf`` in the softmax) although nothing in
    the inputs is: a silent wrong result that this turns into an error. The common path pays
    one sum over the context (and one host synchronisation); the scores are recomputed
    only when that sum is not finite (the context holds a non-finite number, or its sum overflows). Called by :func:`attend` and the
    multi-head stack after :func:`attend_unchecked`. Inside ``torch.compile`` it checks nothing
    (a data-dependent branch would break the graph), nor on the ``meta`` device (no data).

    Args:
        c: the context :func:`attend_unchecked` returned.
        Q: the queries, K: the keys it was given.
        settings: the settings it was given.

    Shape:
        as :func:`attend_unchecked`.

    Raises:
        ValueError: naming the shapes and dtype, if a finite query and a finite key it may
            attend give an infinite score.
    """
    if torch.compiler.is_compiling() or c.is_meta:  # a host-side test breaks a compiled graph; meta holds no data
        return
    if math.isfinite(float(c.detach().sum())):  # one reduction: a NaN or Inf anywhere makes the sum non-finite
        return  # (a finite c whose sum overflows takes the path below, which finds nothing to refuse)
    e = _scores(Q, K, settings.score_fn, settings.scale)
    over = torch.isinf(e) & finite_rows(Q)[..., :, None] & finite_rows(K)[..., None, :]
    if settings.allowed is not None:
        over = over & settings.allowed
    if bool(over.any()):
        raise ValueError(
            f"attention: the scores e of Q {tuple(Q.shape)} and K {tuple(K.shape)} overflow {Q.dtype} "
            f"({int(over.sum())} finite query-key pairs give an infinite score), so the weights would be NaN; "
            "compute in float64 or scale Q or K down"
        )


#: The default of every :class:`AttendOptions` option: :func:`attend`'s own (read from its signature).
ATTEND_DEFAULTS: AttendOptions = cast(
    AttendOptions, {name: inspect.signature(attend).parameters[name].default for name in AttendOptions.__annotations__}
)


def canonical_masks(
    scores_shape: torch.Size,
    mask: Tensor | None = None,
    *,
    key_padding_mask: Tensor | None = None,
    checked_key_mask: Tensor | None = None,
    is_causal: bool = False,
    bias: Tensor | None = None,
    dtype: torch.dtype,
    device: torch.device | None = None,
) -> tuple[Tensor | None, Tensor | None]:
    """Every mask and bias of one attention call as one boolean mask and one additive bias, each checked once.

    The one place where masks are combined (torch's ``_canonical_mask`` plays this part):
    :func:`attend` and the multi-head stack both call it. A float ``mask`` is torch's
    additive mask: its ``-inf`` entries are masked and the rest is added to ``bias``
    (:func:`split_float_mask`); a boolean ``mask``, the ``key_padding_mask`` and
    causality become one boolean mask (:func:`allowed_positions`).

    Args:
        scores_shape: the shape of the scores.
        mask: boolean (``True`` = may attend) or float (additive), broadcastable to the scores.
        key_padding_mask: boolean, one axis per batch axis of the scores, ``True`` = may attend.
        checked_key_mask: a key-padding mask that its owner has checked in its caller's layout and
            laid out for these scores (the multi-head stack: head and query axes, appended keys):
            combined, not checked again.
        is_causal: query ``i`` may attend to keys ``j <= i``.
        bias: float, broadcastable to the scores.
        dtype: the dtype of the scores (the bias is cast to it).
        device: where the causal mask is built.

    Shape:
        scores_shape: ``(..., n_q, n_f)``; checked_key_mask: broadcastable to it; the results broadcast to it.

    Returns:
        ``(allowed, bias)``: the boolean mask (None when nothing is masked) and the bias
        (None when there is none).

    Raises:
        ValueError: for a bad mask or bias.
    """
    blocked = None
    if isinstance(mask, Tensor) and mask.is_floating_point():
        blocked, float_bias = split_float_mask(mask)
        bias = float_bias if bias is None else bias + float_bias
        mask = None
    allowed = allowed_positions(scores_shape, mask, key_padding_mask, is_causal, device)
    if checked_key_mask is not None:
        allowed = checked_key_mask if allowed is None else allowed & checked_key_mask
    if bias is not None:
        bias = check_bias(bias, scores_shape, dtype)  # a float mask included: its shape is checked here
    if blocked is not None:
        allowed = blocked if allowed is None else allowed & blocked
    return allowed, bias


class CoreSettings(NamedTuple):
    """Everything :func:`attend_unchecked` needs besides Q, K and V, each already checked and resolved.

    Built by :func:`attend` and by the multi-head stack after their checks; read by name.

    Args:
        allowed: one boolean mask, ``True`` = may attend (from :func:`canonical_masks`), or None.
        bias: float additive scores in the dtype of Q (from :func:`canonical_masks`), or None.
        score_fn: a score callable ``(Q, K) -> e``, or None for the (scaled) dot product
            (:func:`resolve_score`).
        scale: the factor of the dot product (None: ``1/sqrt(d_k)``).
        align_fn: an alignment callable (:func:`resolve_align`).
        dropout_p: attention dropout, in ``[0, 1]``.
        generator: the dropout's random generator.
        need_weights: return the weights.
        finite_inputs: the caller guarantees that Q, K and V hold no NaN or Inf (a model
            whose inputs are tokens, see :class:`attnsurvey.transformer.model.Seq2SeqTransformer`),
            so nothing needs to be made inert; False: the core makes masked entries inert itself.
        sink: sink logits broadcastable to ``(..., n_q, 1)`` in the dtype of Q (:func:`check_sink`;
            softmax only), an extra slot of the softmax's denominator with no value; None: none.
    """

    allowed: Tensor | None = None
    bias: Tensor | None = None
    score_fn: ScoreFn | None = None
    scale: float | None = None
    align_fn: AlignFn = softmax_align
    dropout_p: float = 0.0
    generator: torch.Generator | None = None
    need_weights: bool = True
    finite_inputs: bool = False
    sink: Tensor | None = None


def _attend_trusted(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    mask: Tensor | None = None,
    score: str | ScoreFn | None = None,
    *,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    need_weights: bool = True,
    align: str | AlignFn = "softmax",
) -> tuple[Tensor, Tensor | None]:
    """:func:`attend` for a layer of a model of tokens, which vouches that Q, K and V are finite and fit.

    The masks are combined and checked as in :func:`attend`, the scores' overflow is still refused,
    but the core makes nothing inert (``CoreSettings.finite_inputs``): the same bits for finite inputs.
    """
    fn, scale = resolve_score(score, None)
    batch = cast(tuple[int, ...], broadcast_batch(Q.shape[:-2], K.shape[:-2], V.shape[:-2]))  # fits: the caller's word
    allowed, bias = canonical_masks(
        torch.Size((*batch, Q.shape[-2], K.shape[-2])),
        mask,
        key_padding_mask=key_padding_mask,
        is_causal=is_causal,
        dtype=Q.dtype,
        device=Q.device,
    )
    settings = CoreSettings(
        allowed, bias, fn, scale, resolve_align(align), need_weights=need_weights, finite_inputs=True
    )
    c, a = attend_unchecked(Q, K, V, settings)
    refuse_overflowing_scores(c, Q, K, settings)
    return c, a


def attend_unchecked(Q: Tensor, K: Tensor, V: Tensor, settings: CoreSettings) -> tuple[Tensor, Tensor | None]:
    """:func:`attend` on inputs that the caller has checked: no validation, no host synchronisation.

    For callers that validated their inputs once at their own public edge (the multi-head
    stack); everyone else calls :func:`attend`, which checks and then calls this.

    Args:
        Q: the queries, K: the keys, V: the values (one floating dtype, broadcastable batch axes).
        settings: the checked masks and options (:class:`CoreSettings`).

    Shape:
        as :func:`attend`; ``settings.allowed`` and ``settings.bias`` broadcast to ``(..., n_q, n_f)``.

    Returns:
        ``(c, a)`` as :func:`attend`.
    """
    batch = cast(tuple[int, ...], broadcast_batch(Q.shape[:-2], K.shape[:-2], V.shape[:-2]))  # checked by the caller
    allowed, need_weights = settings.allowed, settings.need_weights
    n_q, n_f = Q.shape[-2], K.shape[-2]
    if n_f == 0 or n_q == 0 or 0 in batch:
        a = Q.new_zeros(*batch, n_q, n_f)
        return V.new_zeros(*batch, n_q, V.shape[-1]), (a if need_weights else None)
    bad_k = bad_v = None
    if allowed is not None and allowed.dim() < 2:
        allowed = allowed.reshape((1,) * (2 - allowed.dim()) + tuple(allowed.shape))
    if allowed is not None and not settings.finite_inputs:  # masked positions may hold NaN/Inf: make them inert
        Q, K, V, bad_k, bad_v = _inert_inputs(Q, K, V, allowed)
    reason = _dispatch_reason(
        settings.score_fn,
        settings.align_fn,
        need_weights,
        settings.dropout_p,
        settings.generator,
        False,
        settings.sink is not None,
    )
    if reason is None:
        if not Q.shape[:-2] == K.shape[:-2] == V.shape[:-2] == batch:
            Q, K, V = (t.expand(*batch, *t.shape[-2:]) for t in (Q, K, V))
        c = _sdpa(Q, K, V, allowed, settings.bias, _dot_scale(K.shape[-1], settings.scale), settings.dropout_p)
        if bad_k is not None and bad_v is not None and allowed is not None:  # who may see a non-finite row: NaN
            c = c + _nan_where((allowed & (bad_k | bad_v)[..., None, :]).any(-1, keepdim=True), c)
        return c, None
    e = _scores(Q, K, settings.score_fn, settings.scale)
    if bad_k is not None:  # a query allowed to see a non-finite key gets a NaN score there
        e = e + _nan_where(bad_k[..., None, :], e)
    if settings.bias is not None:
        e = e + settings.bias
    a = _dropout(_align(e, allowed, settings.align_fn, settings.sink), settings.dropout_p, settings.generator)
    c = a @ V
    if bad_v is not None:  # a non-zero weight on a non-finite value row: NaN
        c = c + _nan_where(((a != 0) & bad_v[..., None, :]).any(-1, keepdim=True), c)
    return c, (a if need_weights else None)


def _nan_where(cond: Tensor, like: Tensor) -> Tensor:
    """NaN where ``cond``, 0 elsewhere, in the dtype of ``like`` (added to make rows NaN)."""
    return torch.where(cond, torch.full((), float("nan"), dtype=like.dtype, device=like.device), 0.0).to(like.dtype)


def _inert_inputs(
    Q: Tensor, K: Tensor, V: Tensor, allowed: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """Q, K, V with the entries that no output may see set to 0, by tensor operations (no host synchronisation).

    The query of a row that may attend nothing becomes 0 (its NaN would reach dK and dV
    as ``0 * NaN``). For a key mask shared by the queries (``allowed`` ``(..., 1, n_f)``)
    the key and value rows that no query may attend become 0, and the non-finite rows that
    the queries may attend stay as they are, so they reach exactly those queries. For a
    mask that varies over the queries every non-finite key and value row becomes 0 and
    the rows are returned (``(..., n_f)`` each) for the caller to poison the queries
    that may see them.
    """
    Q = _where_kept(Q, allowed.any(-1, keepdim=True))  # (..., n_q, 1): a query that may attend something
    if allowed.shape[-2] == 1:  # one key mask for every query
        seen = allowed.transpose(-1, -2)
        return Q, _where_kept(K, seen), _where_kept(V, seen), None, None
    bad_k, bad_v = ~finite_rows(K), ~finite_rows(V)
    return Q, K.nan_to_num(0.0, 0.0, 0.0), V.nan_to_num(0.0, 0.0, 0.0), bad_k, bad_v


def _where_kept(X: Tensor, keep: Tensor) -> Tensor:
    """X where ``keep`` (broadcast), +0.0 elsewhere, whatever X holds there."""
    return torch.where(keep, X, 0.0)


def _sdpa(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    allowed: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float,
) -> Tensor:
    """``F.scaled_dot_product_attention`` with this package's mask semantics (fully-masked rows give 0).

    Q, K, V share their batch shape. Inputs of another rank are viewed as
    ``(batch, 1, n, d)``: SDPA's fused (flash) CPU kernel, linear in memory, only runs on
    4-D inputs.
    """
    if Q.dim() != 4:
        batch, n_q, n_f = Q.shape[:-2], Q.shape[-2], K.shape[-2]
        rows = math.prod(batch)  # not -1: a tensor with no elements (d_k = 0) leaves -1 ambiguous
        to4 = lambda t: t.reshape(rows, 1, *t.shape[-2:])  # noqa: E731
        if allowed is not None:
            allowed = to4(allowed.expand(*batch, n_q, n_f))
        if bias is not None:
            bias = to4(bias.expand(*batch, n_q, n_f))
        c = _sdpa(to4(Q), to4(K), to4(V), allowed, bias, scale, dropout_p)
        return c.reshape(*batch, n_q, V.shape[-1])
    if allowed is None:
        return F_.scaled_dot_product_attention(Q, K, V, attn_mask=bias, dropout_p=dropout_p, scale=scale)
    alive = None
    if not Q.is_cpu:  # torch's CPU kernels give a fully-masked row 0 and finite gradients; elsewhere
        alive = allowed.any(-1, keepdim=True)  # dead rows attend anywhere (finite: their query is 0), zeroed below
        allowed = allowed | ~alive
    attn_mask: Tensor = (
        allowed if bias is None else torch.where(allowed, bias, torch.full((), float("-inf"), dtype=bias.dtype))
    )
    c = F_.scaled_dot_product_attention(Q, K, V, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    return c if alive is None else c * alive  # a dead row's context is finite (its query and keys are): exactly 0


def scaled_dot_product(Q: Tensor, K: Tensor, V: Tensor, **options: Any) -> Tensor:
    """The context of plain scaled dot-product attention, ``softmax(Q K^T / sqrt(d_k)) V``.

    A shorthand for ``attend(Q, K, V, need_weights=False, **options)[0]`` (so it
    dispatches to ``F.scaled_dot_product_attention``).

    Args:
        Q: the queries, K: the keys, V: the values.
        **options: the keyword options of :func:`attend`.

    Shape:
        as :func:`attend`; returns ``(..., n_q, d_v)``.

    Returns:
        The context.

    Raises:
        TypeError, ValueError: as :func:`attend`.
    """
    return attend(Q, K, V, need_weights=False, **options)[0]


__all__ = [
    "ALIGNMENTS",
    "ATTEND_DEFAULTS",
    "check_bias",
    "check_sink",
    "AttendOptions",
    "align_scores",
    "allowed_positions",
    "alpha_entmax_align",
    "attend_scores",
    "attend_unchecked",
    "canonical_masks",
    "refuse_overflowing_scores",
    "CoreSettings",
    "uniform_align",
    "argmax_align",
    "attend",
    "attention_scores",
    "context",
    "dispatch_reason",
    "dropout_weights",
    "resolve_align",
    "resolve_score",
    "scaled_dot_product",
    "softmax_align",
    "split_float_mask",
]
