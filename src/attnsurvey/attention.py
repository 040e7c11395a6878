"""The one attention core: every mechanism's weights and context go through :func:`attend`.

New core API (for everyone adapting code to it)
------------------------------------------------
:func:`attend` is the general attention module of Fig. 2 (Eq. 2-4) with the
options of ``torch.nn.functional.scaled_dot_product_attention``. The positional
call ``attend(Q, K, V, mask, score)`` is unchanged and returns ``(c, a)``; every
new option is keyword-only. The score is any Table II callable ``(Q, K) -> e``
or a registered parameter-free name (``"scaled-multiplicative"``, ...,
:data:`attnsurvey.general_mechanisms.scoring.SCORES`); the alignment is a name
of :data:`ALIGNMENTS` (``"softmax"``, ``"sparsemax"``, ``"entmax15"``,
``"hard"``) or a callable ``(e, mask) -> a`` (e.g. local alignment with
``lambda e, m: local_align(e, p, D, m)``). ``mask`` (boolean, ``True`` = may
attend, ``(..., n_q, n_f)``; a float mask is an additive bias as in torch) and
``key_padding_mask`` (boolean ``(..., n_f)``, one axis per batch axis of the
scores) are different arguments; ``bias`` adds float scores (relative
positions, ALiBi); ``is_causal`` adds the top-left causal mask. With
``need_weights=False`` the weights are not returned (``a is None``) and, for the
plain scaled dot-product + softmax configuration, the call dispatches to
``F.scaled_dot_product_attention``. Masks are built by :mod:`attnsurvey.masking`.

Signatures::

    attend(Q, K, V, mask=None, score=None, *, key_padding_mask=None, bias=None,
           is_causal=False, dropout_p=0.0, generator=None, scale=None,
           enable_gqa=False, need_weights=True, align="softmax") -> (c, a | None)
    AttendOptions: TypedDict  # the pass-through keyword options (all but need_weights, enable_gqa)
    attention_scores(Q, K, score=None, *, scale=None) -> e
    align_scores(e, mask=None, align="softmax", *, dim=-1, log=False) -> a   # the alignment step, masks inert
    attend_scores(e, V, mask=None, align="softmax") -> (c, a)  # Eq. (3)-(4) for scores computed elsewhere
    allowed_positions(scores_shape, mask=None, key_padding_mask=None, is_causal=False, device=None) -> bool | None
    context(a, V) -> c
    ALIGNMENTS: Registry  # name -> (e, mask) -> a: softmax, sparsemax, entmax15, alpha-entmax, uniform, hard
    alpha_entmax_align(alpha, n_iter=50) -> (e, mask) -> a
    dropout_weights(a, p, generator=None) -> a

    # attnsurvey.query_related.multihead: the one multi-head stack
    multi_head_attention(Q, F_k, F_v, W_Q, W_K, W_V, W_O, h, mask=None, *, need_weights=True,
        average_attn_weights=False, bias_k, bias_v, add_zero_attn, memory, kv_transform,
        score, h_kv, context_hook, **options: AttendOptions) -> (out, a | None)
        # W_Q, ..., W_O: weight matrices or nn.Linear modules (weight and bias)
    MultiHeadAttention(d_model, h, d_k=None, d_v=None, bias=False, *, dropout, add_bias_kv,
        add_zero_attn, kdim, vdim, batch_first=True, ...)   # hooks: score_fn, align, kv_transform, context_hook
    MultiheadAttention(...)  # drop-in for torch.nn.MultiheadAttention (torch's mask polarity), .from_torch(m)

    # attnsurvey.masking: minus_inf(dtype), masked_softmax, masked_log_softmax, masked_mean,
    # causal_mask(n_q, n_f, offset), padding_mask / key_padding_mask(lengths, n_f), band_mask,
    # forward_mask, backward_mask, additive_mask, MASKS registry, make_mask(kind, ...)

Layering: this module imports only :mod:`attnsurvey.masking`, the score
functions, the sparse maps and :mod:`attnsurvey._checks`; everything else
(``general_model``, multi-head, the Transformer variants) imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, TypedDict, Unpack, overload

import torch
import torch.nn.functional as F_
from torch import Tensor

from ._checks import as_tensor, check_batch_broadcast, check_dim_equal, check_min_rank, check_same_dtype
from .general_mechanisms.scoring import dot_score, scaled_dot_score, score_function
from .general_mechanisms.sparse_maps import entmax15, entmax_bisect, sparsemax
from .masking import (
    check_attn_mask,
    check_key_padding_mask,
    check_mask,
    masked_log_softmax,
    masked_softmax,
    minus_inf,
    nonfinite_rows,
)
from .registry import Registry

ScoreFn = Callable[[Tensor, Tensor], Tensor]
AlignFn = Callable[[Tensor, Tensor | None], Tensor]

#: Alignment functions by name: ``(e, mask) -> a`` with mask boolean or None.
ALIGNMENTS: Registry[AlignFn] = Registry("alignment function")


@ALIGNMENTS.register("softmax")
def softmax_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Soft alignment, Eq. (3)/(25): the masked softmax over the last axis (fully-masked rows: 0).

    e: scores ``(..., n_q, n_f)``; mask: boolean broadcastable to e, ``True`` = may attend.
    """
    return masked_softmax(e, mask, dim=-1)


ALIGNMENTS.register("sparsemax", sparsemax)  # (e, mask=None, ...) -> a: already an alignment
ALIGNMENTS.register("entmax15", entmax15)


def alpha_entmax_align(alpha: float, n_iter: int = 50) -> AlignFn:
    """The alignment ``(e, mask) -> a`` of alpha-entmax (bisection, any ``alpha >= 1``).

    ``attend(..., align=alpha_entmax_align(1.2))``; the registered name
    ``"alpha-entmax"`` is ``alpha = 1.5`` computed by bisection. Raises
    ``ValueError`` (when called) unless ``alpha >= 1`` is finite.
    """

    def align(e: Tensor, mask: Tensor | None = None) -> Tensor:  # a def: mypy cannot type a lambda with a default
        return entmax_bisect(e, alpha, mask, n_iter=n_iter)

    return align


ALIGNMENTS.register("alpha-entmax", alpha_entmax_align(1.5))


@ALIGNMENTS.register("uniform")
def uniform_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Uniform weights over the allowed positions (the scores are ignored): the mean-pooling baseline.

    e: scores ``(..., n_q, n_f)``; mask: boolean broadcastable to e, ``True`` =
    may attend. A fully-masked row is all zeros.
    """
    return masked_softmax(torch.zeros_like(e), mask, dim=-1)


@ALIGNMENTS.register("hard")
def argmax_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Deterministic hard alignment, Eq. (26): one-hot on the first largest allowed score.

    e: scores ``(..., n_q, n_f)``; mask: boolean broadcastable to e, ``True`` =
    may attend. A fully-masked row is all zeros. The one-hot weights carry no gradient.
    """
    filled = e if mask is None else torch.where(mask, e, minus_inf(e.dtype))
    a = F_.one_hot(filled.argmax(-1), e.shape[-1]).to(e.dtype)
    if mask is not None:
        a = torch.where(mask.expand(e.shape).any(-1, keepdim=True), a, torch.zeros((), dtype=e.dtype))
    return a


def _resolve_align(align: str | AlignFn) -> AlignFn:
    if isinstance(align, str):
        return ALIGNMENTS[align]
    if not callable(align):
        raise TypeError(
            f"align must be a registered name {list(ALIGNMENTS)} or a callable (e, mask) -> a, got {type(align).__name__}"
        )
    return align


def _resolve_score(score: str | ScoreFn | None, scale: float | None) -> tuple[ScoreFn | None, float | None]:
    """``(score function or None for the plain dot product, scale of the plain product)``."""
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


def attention_scores(Q: Tensor, K: Tensor, score: str | ScoreFn | None = None, *, scale: float | None = None) -> Tensor:
    """Attention scores, Eq. (2): ``e_l = score(q, k_l)`` for every query and key.

    Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; returns e ``(..., n_q, n_f)``.
    ``score`` is any function of Table II or a registered parameter-free name
    (default: the scaled multiplicative score ``q^T k / sqrt(d_k)``, or
    ``scale * q^T k`` when ``scale`` is given). Raises ``ValueError`` if the
    score function's shape requirements fail or it returns the wrong shape.
    """
    fn, scale = _resolve_score(score, scale)
    if fn is None:
        if scale is None:
            e = scaled_dot_score(Q, K)
        else:
            e = dot_score(Q, K) * scale
    else:
        e = fn(Q, K)
    if e.shape[-2:] != (Q.shape[-2], K.shape[-2]):
        raise ValueError(
            f"score function returned shape {tuple(e.shape)}, expected (..., n_q={Q.shape[-2]}, n_f={K.shape[-2]})"
        )
    return e


def context(a: Tensor, V: Tensor) -> Tensor:
    """Context vectors, Eq. (4): ``c = sum_l a_l v_l``.

    a: ``(..., n_q, n_f)``; V: ``(..., n_f, d_v)``; returns c ``(..., n_q, d_v)``.
    A zero weight is inert: NaN/Inf in a value row that gets weight 0 does not
    reach c. Raises ``ValueError`` if the two ``n_f`` differ or the batch axes do not broadcast.
    """
    as_tensor(a, "a")
    as_tensor(V, "V")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_dim_equal(a.shape[-1], V.shape[-2], "context (Eq. 4)", "n_f of a", "n_f of V")
    check_batch_broadcast(a, V, "a", "V")
    return _inert_product(a, V)


def _inert_product(a: Tensor, V: Tensor, bad_v: Tensor | None = None) -> Tensor:
    """``a @ V`` in which a zero weight ignores its value row even when that row holds NaN/Inf.

    ``0 * NaN`` is NaN in a plain product; here a masked (zero-weight) value is
    inert, and a query that gives a non-finite value row a non-zero weight gets NaN.
    bad_v: the rows of V to treat as non-finite (default: found here).
    """
    bad_v = nonfinite_rows(V) if bad_v is None else bad_v
    if bad_v is None:
        return a @ V
    V0 = torch.where(bad_v[..., None], torch.zeros((), dtype=V.dtype), V)
    poisoned = ((a != 0) & bad_v[..., None, :]).any(-1, keepdim=True)
    return torch.where(poisoned, torch.full((), float("nan"), dtype=V.dtype), a @ V0)


def dropout_weights(a: Tensor, p: float, generator: torch.Generator | None = None) -> Tensor:
    """Attention dropout: zero each weight with probability ``p``, scale the rest by ``1/(1-p)``.

    Uses ``generator`` for the draws (reproducible), selects with ``torch.where``.
    ``p = 1`` zeroes everything. Raises ``ValueError`` unless ``0 <= p <= 1``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability dropout_p must lie in [0, 1], got {p}")
    if p == 0.0:
        return a
    zero = torch.zeros((), dtype=a.dtype, device=a.device)
    if p == 1.0:
        return torch.where(torch.isnan(a), a, zero)  # every weight dropped (a NaN weight stays NaN)
    keep = torch.rand(a.shape, generator=generator, device=a.device) >= p
    return torch.where(keep, a / (1.0 - p), zero)


def align_scores(
    e: Tensor, mask: Tensor | None = None, align: str | AlignFn = "softmax", *, dim: int = -1, log: bool = False
) -> Tensor:
    """The alignment step of :func:`attend`, Eq. (3): scores ``e`` ``(..., n_q, n_f)`` to weights.

    mask: boolean broadcastable to e, ``True`` = may attend; masked scores are
    replaced by :func:`attnsurvey.masking.minus_inf` before ``align`` sees them
    and the weights there are set to exactly 0 afterwards (``torch.where``, so
    NaN/Inf at masked positions are inert); a fully-masked row is all zeros.
    align: a name of :data:`ALIGNMENTS` or a callable ``(e, mask) -> a``.
    dim: the axis the weights are normalised over (default the last, ``n_f``;
    multi-dimensional attention, Eq. 32, normalises over positions ``dim=-2``
    for every feature). The softmax normalises along ``dim`` in place (the
    kernel of ``torch.softmax(e, dim)``); any other alignment sees ``e`` (and
    the mask) with ``dim`` moved last, and its weights are moved back.
    log: return the log-weights ``log softmax(e)`` (a pointer network's output,
    exact where the weight itself underflows); masked positions and
    fully-masked rows get ``minus_inf`` (weight 0 after ``exp``), never NaN.
    Raises ``ValueError`` for a bad mask, an unknown alignment name, a ``dim``
    out of range, or ``log=True`` with an alignment other than the softmax.
    """
    align_fn = _resolve_align(align)
    if not -e.dim() <= dim < e.dim():
        raise ValueError(f"dim={dim} is out of range for the scores e of shape {tuple(e.shape)}")
    dim %= e.dim()
    if mask is not None:
        check_mask(mask, e.shape)
    if log:
        if align_fn is not softmax_align:
            raise ValueError("log-weights (log=True) exist for the softmax alignment only (log 0 = -inf elsewhere)")
        return masked_log_softmax(e, mask, dim=dim)
    if dim != e.dim() - 1:
        if align_fn is softmax_align:
            return masked_softmax(e, mask, dim=dim)
        moved = None if mask is None else mask.expand(e.shape).movedim(dim, -1)
        return align_scores(e.movedim(dim, -1), moved, align_fn).movedim(-1, dim)
    if mask is not None:
        e = torch.where(mask, e, minus_inf(e.dtype))
    a = align_fn(e, mask)
    if mask is not None:
        a = torch.where(mask, a, torch.zeros((), dtype=a.dtype, device=a.device))
    return a


def attend_scores(
    e: Tensor, V: Tensor, mask: Tensor | None = None, align: str | AlignFn = "softmax"
) -> tuple[Tensor, Tensor]:
    """Eq. (3)-(4) for scores computed elsewhere: align ``e`` (:func:`align_scores`), then ``c = a V``.

    e: ``(..., n_f)`` (one query per example; then V is ``(..., n_f, d_v)`` with one
    more axis than e and c is ``(..., d_v)``) or ``(..., n_q, n_f)`` with V of the
    same rank (c is ``(..., n_q, d_v)``). mask: boolean broadcastable to e, ``True``
    = may attend; align as :func:`attend`. Returns ``(c, a)``; a fully-masked row
    gives zero weights and a zero context. Raises ``ValueError`` if the ``n_f`` of
    e and V differ, or for a bad mask or alignment name.
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

    scores_shape: ``(..., n_q, n_f)``; mask: boolean, broadcastable, ``True`` =
    may attend (rank-2 ambiguous shapes rejected, see
    :func:`attnsurvey.masking.check_attn_mask`); key_padding_mask: boolean
    ``(..., n_f)`` with one axis per batch axis of the scores; is_causal: query
    ``i`` may attend to ``j <= i``. Returns a mask broadcastable to the scores,
    or None when nothing is masked. Raises ``ValueError`` on bad masks.
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


def _check_bias(bias: Tensor, scores_shape: torch.Size, dtype: torch.dtype) -> Tensor:
    if not isinstance(bias, Tensor) or not bias.is_floating_point():
        raise ValueError(
            f"bias must be a floating-point tensor added to the scores, got {getattr(bias, 'dtype', type(bias).__name__)}"
        )
    try:
        ok = torch.broadcast_shapes(bias.shape, scores_shape) == scores_shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"bias of shape {tuple(bias.shape)} does not broadcast to the scores e of shape {tuple(scores_shape)}"
        )
    return bias.to(dtype)


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
    ``MultiHeadAttention.forward`` take them as ``**options`` and hand them to
    :func:`attend` for every head; :func:`attend` itself also takes
    ``need_weights`` and ``enable_gqa`` (which multi-head attention sets from
    its own arguments). Defaults and
    meanings are :func:`attend`'s: key_padding_mask (None), bias (None),
    is_causal (False), dropout_p (0.0), generator (None), scale (None:
    ``1/sqrt(d_k)``), align (``"softmax"``).
    """

    key_padding_mask: Tensor | None
    bias: Tensor | None
    is_causal: bool
    dropout_p: float
    generator: torch.Generator | None
    scale: float | None
    align: str | AlignFn


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
) -> tuple[Tensor, Tensor | None]:
    """The general attention module (Fig. 2): Eq. (2), (3) and (4) in one call.

    Q: ``(..., n_q, d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``.
    mask: attention mask broadcastable to ``(..., n_q, n_f)``, boolean with
    ``True`` = may attend (a float mask is added to the scores, as in torch;
    its ``-inf`` entries count as masked, so a row of them gives a zero context).
    score: a Table II callable ``(Q, K) -> e`` or a parameter-free registered
    name; default the scaled multiplicative score (``scale`` replaces its
    ``1/sqrt(d_k)``). key_padding_mask: boolean ``(..., n_f)``, one axis per
    batch axis of the scores, ``True`` = may attend. bias: float, broadcastable
    to the scores, added before the alignment (relative positions, ALiBi).
    is_causal: query ``i`` may attend to keys ``j <= i`` (top-left, as SDPA).
    dropout_p: attention dropout on the weights (draws from ``generator``).
    enable_gqa: K and V may have fewer heads (axis -3) than Q, each shared by a
    group of query heads. need_weights: return the weights (after dropout) or
    None. align: a name of :data:`ALIGNMENTS` or a callable ``(e, mask) -> a``.
    The keyword options other than need_weights and enable_gqa are the ones
    callers pass through (:class:`AttendOptions`).

    Returns ``(c, a)``: context ``(..., n_q, d_v)`` and weights ``(..., n_q, n_f)``
    (``a`` is None when ``need_weights=False``). Masked positions are inert:
    NaN/Inf in a masked key or value reaches neither the outputs nor the
    gradients (a query that may attend a non-finite key or value gets NaN).
    A fully-masked row, and an empty feature set (``n_f = 0``), give all-zero
    weights and a zero context; NaN/Inf in the query of a fully-masked row
    reaches no gradient either. The plain configuration (scaled dot product,
    softmax, ``need_weights=False``, no generator) runs
    ``F.scaled_dot_product_attention``.
    Raises ``ValueError`` for shape, dtype or mask problems (an ambiguous
    rank-2 mask included) and ``TypeError`` for a bad score/align argument.
    """
    for sym, t, layout in (("Q", Q, "(..., n_q, d_q)"), ("K", K, "(..., n_f, d_k)"), ("V", V, "(..., n_f, d_v)")):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, layout)
    check_dim_equal(K.shape[-2], V.shape[-2], "attention", "n_f of K", "n_f of V")
    check_same_dtype(Q=Q, K=K, V=V)
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability dropout_p must lie in [0, 1], got {dropout_p}")
    fn, scale = _resolve_score(score, scale)
    align_fn = _resolve_align(align)
    if enable_gqa:
        K, V = _expand_gqa(Q, K, V)
    check_batch_broadcast(Q, K, "Q", "K")
    check_batch_broadcast(K, V, "K", "V")
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    n_q, n_f = Q.shape[-2], K.shape[-2]
    scores_shape = torch.Size((*batch, n_q, n_f))
    blocked = None
    if mask is not None and isinstance(mask, Tensor) and mask.is_floating_point():
        # torch's float attn_mask is an additive bias; its -inf entries mask, as a boolean False does
        blocked = mask == float("-inf")
        if bool(blocked.any()):
            mask = mask.masked_fill(blocked, 0.0)
        else:
            blocked = None
        bias = mask if bias is None else bias + mask
        mask = None
    allowed = allowed_positions(scores_shape, mask, key_padding_mask, is_causal, Q.device)
    if bias is not None:
        bias = _check_bias(bias, scores_shape, Q.dtype)  # a float mask included: its shape is checked here
    if blocked is not None:
        allowed = ~blocked if allowed is None else allowed & ~blocked
    if n_f == 0 or Q.numel() == 0:
        a = Q.new_zeros(scores_shape)
        return V.new_zeros(*batch, n_q, V.shape[-1]), (a if need_weights else None)
    bad_k = bad_v = None
    if allowed is not None:  # masked positions may hold NaN/Inf: find them so they stay inert
        bad_k, bad_v, bad_q = nonfinite_rows(K), nonfinite_rows(V), nonfinite_rows(Q)
        if bad_q is not None:  # a query that may attend nothing: its NaN would reach dK and dV as 0 * NaN
            Q = torch.where((bad_q & ~allowed.any(-1))[..., None], torch.zeros((), dtype=Q.dtype), Q)
    plain = fn is None and align_fn is softmax_align
    if plain and not need_weights and bad_k is None and bad_v is None and (generator is None or dropout_p == 0.0):
        check_dim_equal(Q.shape[-1], K.shape[-1], "scaled multiplicative score", "d_q", "d_k")
        Q, K, V = (t if t.shape[:-2] == batch else t.expand(*batch, *t.shape[-2:]) for t in (Q, K, V))
        return _sdpa(Q, K, V, allowed, bias, scale, dropout_p), None
    if bad_k is not None:
        K = torch.where(bad_k[..., None], torch.zeros((), dtype=K.dtype), K)
    e = attention_scores(Q, K, fn, scale=scale)
    if bad_k is not None:  # a query allowed to see a non-finite key gets a NaN score there
        e = torch.where(bad_k[..., None, :], torch.full((), float("nan"), dtype=e.dtype), e)
    if bias is not None:
        e = e + bias
    a = dropout_weights(align_scores(e, allowed, align_fn), dropout_p, generator)
    c = a @ V if bad_v is None else _inert_product(a, V, bad_v)
    return c, (a if need_weights else None)


def _sdpa(
    Q: Tensor, K: Tensor, V: Tensor, allowed: Tensor | None, bias: Tensor | None, scale: float | None, dropout_p: float
) -> Tensor:
    """``F.scaled_dot_product_attention`` with this package's mask semantics (fully-masked rows give 0).

    Q, K, V share their batch shape. Inputs of another rank are viewed as
    ``(batch, 1, n, d)``: SDPA's fused (flash) CPU kernel, linear in memory, only
    runs on 4-D inputs.
    """
    if Q.dim() != 4:
        batch, n_q, n_f = Q.shape[:-2], Q.shape[-2], K.shape[-2]
        to4 = lambda t: t.reshape(-1, 1, *t.shape[-2:])  # noqa: E731
        if allowed is not None:
            allowed = to4(allowed.expand(*batch, n_q, n_f))
        if bias is not None:
            bias = to4(bias.expand(*batch, n_q, n_f))
        c = _sdpa(to4(Q), to4(K), to4(V), allowed, bias, scale, dropout_p)
        return c.reshape(*batch, n_q, V.shape[-1])
    if allowed is None:
        return F_.scaled_dot_product_attention(Q, K, V, attn_mask=bias, dropout_p=dropout_p, scale=scale)
    alive = allowed.any(-1, keepdim=True)
    if not bool(alive.all()):
        allowed = allowed | ~alive  # let dead rows attend anywhere (finite), then zero them below
    attn_mask: Tensor = (
        allowed if bias is None else torch.where(allowed, bias, torch.full((), float("-inf"), dtype=bias.dtype))
    )
    c = F_.scaled_dot_product_attention(Q, K, V, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    if not bool(alive.all()):
        c = torch.where(alive, c, torch.zeros((), dtype=c.dtype))
    return c


def scaled_dot_product(Q: Tensor, K: Tensor, V: Tensor, **options: Any) -> Tensor:
    """The context of plain scaled dot-product attention, ``softmax(Q K^T / sqrt(d_k)) V``.

    A shorthand for ``attend(Q, K, V, need_weights=False, **options)[0]``
    (so it dispatches to ``F.scaled_dot_product_attention``). Options and
    errors as :func:`attend`.
    """
    return attend(Q, K, V, need_weights=False, **options)[0]


__all__ = [
    "ALIGNMENTS",
    "AttendOptions",
    "align_scores",
    "allowed_positions",
    "alpha_entmax_align",
    "attend_scores",
    "uniform_align",
    "argmax_align",
    "attend",
    "attention_scores",
    "context",
    "dropout_weights",
    "scaled_dot_product",
    "softmax_align",
]
