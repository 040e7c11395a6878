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
one right-multiplied matrix per head, spelled on top of the one stack) and the
disagreement regularisation of Li et al. (2018), which rewards heads that differ.

Masks are boolean, ``True`` = may attend. A mask without a head axis
(``(..., n_q, n_f)``, rank <= the rank of ``Q``) is shared by all heads.
``torch.nn.MultiheadAttention`` uses the opposite polarity (``True`` = blocked)
and, by default, returns the *average* of the head weights.

One multi-head stack
--------------------
:func:`multi_head_attention` is the only multi-head computation in the package:
project (Eq. 38), attend per head through :func:`attnsurvey.attention.attend`
(Eq. 39), concatenate and mix (Eq. 40). Its keyword-only hooks make each
Transformer variant a configuration of it: ``memory`` (states prepended to the
keys and values, Transformer-XL), ``kv_transform`` (a map of the per-head keys
and values, e.g. Linformer's length projections), ``score`` (a per-head score
function, e.g. relative positions or synthesised weights), ``bias`` (additive
score terms, e.g. a Gaussian or ALiBi bias), ``mask``/``key_padding_mask``/
``is_causal`` (windows, buckets, causality), ``align`` (sparse or hard
alignments), ``h_kv`` (grouped-query attention), and torch's ``bias_k``/``bias_v``
and ``add_zero_attn``. :class:`MultiHeadAttention` is its module form (the survey's
argument names, ``True`` = may attend), :class:`SelfAttentionVariant` its self-attention
form that the positional and Linformer variants subclass; the drop-in replacement
for ``torch.nn.MultiheadAttention`` (torch's signature and mask polarity) is
:class:`attnsurvey.query_related.torch_mha.TorchMultiheadAttention`.
One call, step by step (:func:`_multi_head`): options resolved and checked once;
``_features`` (memory prepended, unattended non-finite rows cleared); ``_project_inputs``
(Eq. 38); ``_extra_keys`` (torch's ``bias_k``/``bias_v`` and zero attention);
:func:`split_heads`; the ``kv_transform`` hook; ``_head_masks`` (the masks in the heads'
layout, combined by :func:`attnsurvey.attention.canonical_masks`); the grouped K/V heads
repeated; :func:`attnsurvey.attention.attend_unchecked` (Eq. 39); the ``context_hook``;
:func:`merge_heads` and ``W_O`` (Eq. 40). :class:`Heads` holds what a stack is made of
and :class:`HeadsCall` what one call passes, so the function and the module each name
their arguments once. A new mechanism plugs in where the heads' q, k, v and one mask and
bias are ready, just before the core is called (marked in the code).
The review's matrix form (:func:`multi_head_matrix_form`) is a spelling of it, and
the taxonomy builder's heads (:class:`attnsurvey.attention_step.Heads`) call it with
per-head score and alignment hooks; their one exception, multi-dimensional
attention (Eq. 30-32), has a weight per feature, so its context is not ``a V``.

Shape legend: ``B`` batch (``...``: any leading axes), ``h`` heads (``h_kv`` key/value
heads), ``n_q`` queries, ``n_f`` feature vectors, ``d_q``/``d_f`` the query/feature
widths, ``d_k``/``d_v`` the per-head key/value widths, ``d_o`` the output width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Unpack, cast, overload

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import (
    as_tensor,
    broadcast_batch,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_probability,
    check_same_dtype,
    check_weight,
    with_defaults,
)
from ..attention import (
    ATTEND_DEFAULTS,
    AlignFn,
    AttendOptions,
    CoreSettings,
    ScoreFn,
    attend_unchecked,
    canonical_masks,
    check_sink,
    refuse_overflowing_scores,
    resolve_align,
    resolve_score,
)
from ..catalog import catalogued
from ..masking import check_attn_mask, check_key_padding_mask, zero_unattended

CHAPTER = "chapters/ch03_3_2_query_multiplicity.ipynb"

KVTransform = Callable[[Tensor, Tensor], "tuple[Tensor, Tensor]"]
#: A projection of multi-head attention: a stacked weight matrix, or an ``nn.Linear`` (its weight and bias).
Projection = Tensor | nn.Linear


@catalogued("eq38")
def split_heads(X: Tensor, h: int) -> Tensor:
    """Split the stacked head columns: head ``j`` gets columns ``j*d:(j+1)*d``.

    Args:
        X: the stacked projections.
        h: the number of heads.

    Shape:
        X: ``(..., n, h*d)``; returns ``(..., h, n, d)``.

    Returns:
        The per-head tensor.

    Raises:
        ValueError: if ``h < 1``, X has rank < 2, or h does not divide the width.
    """
    as_tensor(X, "X")
    check_integers("split_heads", h=h)
    if h < 1:
        raise ValueError(f"the number of heads h must be >= 1, got h={h}")
    if X.dim() < 2:
        raise ValueError(f"split_heads needs X of shape (..., n, h*d), got shape {tuple(X.shape)}")
    if X.shape[-1] % h:
        raise ValueError(f"width {X.shape[-1]} is not divisible by the number of heads h={h}")
    return _split_heads(X, h)


def _split_heads(X: Tensor, h: int) -> Tensor:
    """:func:`split_heads` on checked inputs."""
    *batch, n, hd = X.shape
    return X.reshape(*batch, n, h, hd // h).transpose(-2, -3)


@catalogued("eq40")
def merge_heads(X: Tensor) -> Tensor:
    """Concatenate the heads (Eq. 40), the inverse of :func:`split_heads`.

    Args:
        X: the per-head tensor.

    Shape:
        X: ``(..., h, n, d)``; returns ``(..., n, h*d)``.

    Returns:
        The concatenation.

    Raises:
        TypeError: if X is not a floating-point tensor.
        ValueError: if X has rank < 3.
    """
    as_tensor(X, "X")
    check_min_rank(X, 3, "X", "(..., h, n, d)")
    return _merge_heads(X)


def _merge_heads(X: Tensor) -> Tensor:
    """:func:`merge_heads` on checked inputs."""
    *batch, h, n, d = X.shape
    return X.transpose(-2, -3).reshape(*batch, n, h * d)


def head_mask(
    mask: Tensor | None, q_rank: int, n_q: int | None = None, n_f: int | None = None, batch: Sequence[int] = ()
) -> Tensor | None:
    """Give an attention mask or float bias a head axis: shared ``(..., n_q, n_f)`` -> ``(..., 1, n_q, n_f)``.

    With ``n_q``, ``n_f`` and the batch shape, a boolean shared mask is checked first (an
    ambiguous ``(B, n_f)`` shape raises, see :func:`attnsurvey.masking.check_attn_mask`).

    Args:
        mask: boolean (``True`` = may attend) or a float additive bias; None passes through.
        q_rank: the rank of the (unsplit) queries; a mask of rank ``<= q_rank`` is shared
            by the heads, one of rank ``q_rank + 1`` is per head.
        n_q: the number of queries (for the check).
        n_f: the number of keys (for the check).
        batch: the batch shape of the scores (for the check).

    Shape:
        mask: ``(..., n_q, n_f)`` (shared) or ``(..., h, n_q, n_f)`` (per head);
        returns ``(..., 1 or h, n_q, n_f)``.

    Returns:
        The mask with a head axis, or None.

    Raises:
        ValueError: for a mask that is neither boolean nor floating, of rank < 2, or ambiguous.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or not (mask.dtype == torch.bool or mask.is_floating_point()):
        raise ValueError(
            f"mask must be a boolean tensor (True = may attend) or a float bias, got {getattr(mask, 'dtype', type(mask))}"
        )
    if mask.dim() < 2:
        raise ValueError(f"mask must have shape (..., n_q, n_f) or (..., h, n_q, n_f), got {tuple(mask.shape)}")
    if mask.dim() > q_rank:
        return mask
    if mask.dtype == torch.bool and n_q is not None and n_f is not None:
        check_attn_mask(mask, torch.Size((*batch, n_q, n_f)))
    return mask.unsqueeze(-3)


@overload
def _pad_keys(x: Tensor, extra: int, fill: float | bool) -> Tensor: ...
@overload
def _pad_keys(x: Tensor | None, extra: int, fill: float | bool) -> Tensor | None: ...
def _pad_keys(x: Tensor | None, extra: int, fill: float | bool) -> Tensor | None:
    """Append ``extra`` key columns holding ``fill`` to a mask or bias (for bias_k/v and zero attention)."""
    if x is None or extra == 0:
        return x
    pad = torch.full((*x.shape[:-1], extra), fill, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=-1)


def _weight_and_bias(W: Projection) -> tuple[Tensor, Tensor | None]:
    return (W.weight, W.bias) if isinstance(W, nn.Linear) else (W, None)


def _project(X: Tensor, W: Tensor, b: Tensor | None) -> Tensor:
    return X @ W.T if b is None else F_.linear(X, W, b)


def _refuse_positional_options(options: AttendOptions, transformed: bool, has_memory: bool, n_keys: int) -> None:
    """``is_causal`` and ``key_padding_mask`` name input positions: refuse them where key ``j`` is no longer
    input position ``j`` (after a kv_transform; ``is_causal`` also after memory is prepended)."""
    for option, moved in (("is_causal", transformed or has_memory), ("key_padding_mask", transformed)):
        value = options.get(option)
        if moved and value is not None and value is not False:
            raise ValueError(
                f"{option} refers to input positions, which {'a kv_transform' if transformed else 'memory'} "
                f"moves: pass an explicit mask over the {n_keys} keys instead, shape (..., n_q, {n_keys})"
            )


def _check_memory(memory: Tensor, F_k: Tensor, F_v: Tensor) -> None:
    """Memory ``(..., n_m, d_f)`` is prepended to F_k and F_v: it needs their batch axes and width exactly."""
    as_tensor(memory, "memory")
    check_min_rank(memory, 2, "memory", "(..., n_m, d_f)")
    for sym, F in (("F_k", F_k), ("F_v", F_v)):
        if memory.shape[-1] != F.shape[-1] or memory.shape[:-2] != F.shape[:-2]:
            raise ValueError(
                f"memory (..., n_m, d_f) is prepended to {sym}, so it needs the batch axes {tuple(F.shape[:-2])} "
                f"and the width d_f={F.shape[-1]} of {sym} {tuple(F.shape)}; got memory {tuple(memory.shape)}"
            )


def _check_bias_kv(bias: object, symbol: str, width: int, layout: str) -> None:
    """A learned extra key/value: ``width = h*d_k`` (``h*d_v``) values, shape ``(width,)`` (a module's ``(1, 1, width)``)."""
    b = as_tensor(bias, symbol)
    if b.numel() != width:
        raise ValueError(f"{symbol} must have shape ({layout},) = ({width},), got {tuple(b.shape)}")


@catalogued(
    "eq38",
    title="Per-head projections of query, keys and values, q^(j) = W_q^(j) q, K^(j) = W_K^(j) F, V^(j) = W_V^(j) F",
)
@catalogued("eq39", title="One context vector per head, c^(j) = sum_l a_l^(j) v_l^(j)")
@catalogued("eq40", title="Concatenate the head contexts and mix, c = W_O concat(c^(1), ..., c^(h))")
def multi_head_attention(
    Q: Tensor,
    F_k: Tensor,
    F_v: Tensor,
    W_Q: Projection,
    W_K: Projection,
    W_V: Projection,
    W_O: Projection,
    h: int,
    mask: Tensor | None = None,
    *,
    need_weights: bool = True,
    average_attn_weights: bool = False,
    bias_k: Tensor | None = None,
    bias_v: Tensor | None = None,
    add_zero_attn: bool = False,
    memory: Tensor | None = None,
    kv_transform: KVTransform | None = None,
    score: ScoreFn | None = None,
    h_kv: int | None = None,
    context_hook: Callable[[Tensor, Tensor], Tensor] | None = None,
    **options: Unpack[AttendOptions],
) -> tuple[Tensor, Tensor | None]:
    """Multi-head attention, Eq. (38)-(40): ``h`` heads attend in parallel, then concatenate and mix.

    Inputs, weights, masks and options are checked here once; the heads then go through
    :func:`~attnsurvey.attention.attend_unchecked`. Feature rows that the key_padding_mask,
    or a boolean mask of their rank, leaves unattended and that hold NaN/Inf are set to 0
    before they are projected, so they reach neither the outputs nor any weight's gradient
    (in self-attention, where Q is F_k, the padded queries too). ``is_causal`` is refused
    with memory or a kv_transform, and ``key_padding_mask`` with a kv_transform: both name
    input positions, and key ``j`` is then no longer input position ``j``.

    Args:
        Q: the queries.
        F_k: features for keys.
        F_v: features for values (usually the same tensor as F_k).
        W_Q: query projection, a weight matrix or an ``nn.Linear`` (its bias is then added).
        W_K: key projection, likewise.
        W_V: value projection, likewise.
        W_O: output projection, likewise.
        h: the number of heads.
        mask: boolean (``True`` = may attend) or float additive; shared by the heads (rank at
            most ``r``, a head axis is inserted) or per head (rank ``r + 1``), where ``r`` is 2
            plus the number of batch axes of Q and F_k broadcast.
        need_weights: return the weights.
        average_attn_weights: average the weights over the heads.
        bias_k: one extra learned key appended to the sequence (as torch's add_bias_kv).
        bias_v: one extra learned value, likewise.
        add_zero_attn: append a zero key and value (masks get an allowed column).
        memory: states prepended to both F_k and F_v (masks must then cover ``n_m + n_f`` keys).
        kv_transform: ``(k, v) -> (k, v)`` on the per-head keys and values before attending
            (masks must match the transformed length).
        score: a per-head ``(q, k) -> e``, as the ``score`` of :func:`attnsurvey.attention.attend`.
        h_kv: the number of key/value heads (default h; fewer give grouped-query attention).
        context_hook: ``(c, a) -> c`` on the per-head contexts and weights before the heads
            are merged (e.g. Shaw et al.'s value-side relative positions); it makes the
            weights be computed.
        **options: :class:`attnsurvey.attention.AttendOptions` for every head, with
            :func:`~attnsurvey.attention.attend`'s defaults; key_padding_mask is boolean
            ``(..., n_f)`` (the batch axes of the scores), ``True`` = may attend; bias is
            float, shaped like ``mask``; sink (a logit per head, an extra slot of the softmax)
            broadcasts to ``(..., h, n_q, 1)``, e.g. ``(h, 1, 1)``.

    Shape:
        Q: ``(..., n_q, d_q)``; F_k, F_v: ``(..., n_f, d_f)``; W_Q ``(h*d_k, d_q)``,
        W_K ``(h_kv*d_k, d_f)``, W_V ``(h_kv*d_v, d_f)``, W_O ``(d_o, h*d_v)``;
        memory ``(..., n_m, d_f)``; bias_k ``(h*d_k,)``, bias_v ``(h*d_v,)``.

    Returns:
        The output ``(..., n_q, d_o)`` and the weights ``(..., h, n_q, n_f')`` (or
        ``(..., n_q, n_f')`` averaged; None when ``need_weights=False``), ``n_f'`` counting
        memory and extra keys.

    Raises:
        TypeError: for inputs that are not floating-point tensors (lists and NumPy arrays
            included) or an unknown option.
        ValueError: if ``h`` does not divide the projection widths, a weight has the wrong
            shape, a mask is bad, or ``is_causal`` or ``key_padding_mask`` meets memory or a
            kv_transform as described above.
    """
    for sym, t in (("Q", Q), ("F_k", F_k), ("F_v", F_v)):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, "(..., n, d)")
    h_kv = _check_head_counts("multi_head_attention", h, h_kv)
    weights = tuple(map(_weight_and_bias, (W_Q, W_K, W_V, W_O)))
    (W_Q, _), (W_K, _), (W_V, _), (W_O, _) = weights
    hdk, hdv = W_Q.shape[0], W_V.shape[0] * h // h_kv
    if hdk % h or hdv % h:
        raise ValueError(f"h={h} must divide h*d_k={hdk} and h*d_v={hdv}")
    check_weight(W_Q, (hdk, Q.shape[-1]), "W_Q", "(h*d_k, d_q)")
    check_weight(W_K, (hdk // h * h_kv, F_k.shape[-1]), "W_K", "(h*d_k, d_f)")
    check_weight(W_V, (hdv // h * h_kv, F_v.shape[-1]), "W_V", "(h*d_v, d_f)")
    check_weight(W_O, (W_O.shape[0], hdv), "W_O", "(d_o, h*d_v)")
    heads = Heads(weights, h, h_kv, bias_k, bias_v, add_zero_attn, score, kv_transform, context_hook)
    call = HeadsCall(mask, memory, need_weights, average_attn_weights, options)
    return _multi_head(Q, F_k, F_v, heads, call)


def _check_head_counts(what: str, h: int, h_kv: int | None) -> int:
    """``h >= 1`` query heads and ``h_kv`` key/value heads dividing it (None: ``h``); returns ``h_kv``."""
    h_kv = h if h_kv is None else h_kv
    check_integers(what, minimum=1, h=h, h_kv=h_kv)
    if h % h_kv:
        raise ValueError(f"the number of key/value heads h_kv={h_kv} must divide h={h}")
    return h_kv


class Heads(NamedTuple):
    """What a multi-head stack is made of (checked): its four projections, head counts and hooks.

    :func:`multi_head_attention` builds it from its arguments, :class:`MultiHeadAttention`
    from its parameters and hooks; :func:`_multi_head` reads it by name.
    """

    weights: tuple[tuple[Tensor, Tensor | None], ...]  #: ``(W, b)`` of W_Q, W_K, W_V, W_O (b None: no bias)
    h: int
    h_kv: int
    bias_k: Tensor | None = None
    bias_v: Tensor | None = None
    add_zero_attn: bool = False
    score: ScoreFn | None = None
    kv_transform: KVTransform | None = None
    context_hook: Callable[[Tensor, Tensor], Tensor] | None = None


class HeadsCall(NamedTuple):
    """The per-call arguments of a multi-head stack besides its inputs (see :func:`multi_head_attention`).

    ``finite_inputs``: the caller guarantees that the inputs hold no NaN or Inf (a model
    whose inputs are tokens), so no step makes masked slots inert
    (:class:`attnsurvey.attention.CoreSettings`).
    """

    mask: Tensor | None
    memory: Tensor | None
    need_weights: bool
    average_attn_weights: bool
    options: AttendOptions
    finite_inputs: bool = False


def _multi_head(Q: Tensor, F_k: Tensor, F_v: Tensor, heads: Heads, call: HeadsCall) -> tuple[Tensor, Tensor | None]:
    """:func:`multi_head_attention` after its checks of Q, F_k, F_v (tensors of rank >= 2) and the weights.

    One named step per job, each check made once; the heads attend through
    :func:`~attnsurvey.attention.attend_unchecked`.
    """
    opts = with_defaults(call.options, ATTEND_DEFAULTS, "AttendOptions")
    check_probability("attention dropout", dropout_p=opts["dropout_p"])
    score_fn, scale = resolve_score(heads.score, opts["scale"])
    align_fn = resolve_align(opts["align"])
    Q, F_k, F_v = _features(Q, F_k, F_v, call, opts["key_padding_mask"])
    q, k, v = _project_inputs(Q, F_k, F_v, heads.weights)  # Eq. (38): one query, key and value per head (stacked)
    batch = broadcast_batch(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if batch is None:
        raise ValueError(
            f"batch dimensions of Q {tuple(Q.shape)}, F_k {tuple(F_k.shape)} and F_v {tuple(F_v.shape)} do not broadcast"
        )
    k, v, extra = _extra_keys(k, v, heads, batch)
    q, k, v = _split_heads(q, heads.h), _split_heads(k, heads.h_kv), _split_heads(v, heads.h_kv)  # widths checked
    if heads.kv_transform is not None:
        k, v = heads.kv_transform(k, v)
        check_dim_equal(k.shape[-2], v.shape[-2], "kv_transform", "n_f of k", "n_f of v")
    _refuse_positional_options(opts, heads.kv_transform is not None, call.memory is not None, k.shape[-2])
    if score_fn is None:
        check_dim_equal(q.shape[-1], k.shape[-1], "scaled multiplicative score", "d_q", "d_k")
    allowed, bias = _head_masks(call.mask, opts, batch, heads.h, q, k, extra)
    if heads.h_kv != heads.h:  # grouped-query attention: each key/value head serves h / h_kv query heads
        k, v = (t.repeat_interleave(heads.h // heads.h_kv, dim=-3) for t in (k, v))
    # The hook point of the stack: the heads' q, k, v and one mask and bias are ready. A mechanism
    # that changes how the heads attend plugs in here (as score, align and kv_transform do).
    need_weights = call.need_weights or heads.context_hook is not None  # a hook reads the weights
    sink = check_sink(opts["sink"], torch.Size((*batch, heads.h, q.shape[-2], k.shape[-2])), q.dtype, align_fn)
    settings = CoreSettings(
        allowed,
        bias,
        score_fn,
        scale,
        align_fn,
        opts["dropout_p"],
        opts["generator"],
        need_weights,
        call.finite_inputs,
        sink,
    )
    c, a = attend_unchecked(q, k, v, settings)  # Eq. (39): one context per head
    if not call.finite_inputs:  # callers that vouch for their inputs (token models) skip the check, for speed
        refuse_overflowing_scores(c, q, k, settings)
    if heads.context_hook is not None:
        c = heads.context_hook(c, cast(Tensor, a))
        a = a if call.need_weights else None
    W_O, b_O = heads.weights[3]
    out = _project(_merge_heads(c), W_O, b_O)  # Eq. (40): concatenate and mix
    if a is not None and call.average_attn_weights:
        a = a.mean(-3)
    return out, a


def _features(
    Q: Tensor, F_k: Tensor, F_v: Tensor, call: HeadsCall, kpm: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Q, F_k, F_v before projection: memory prepended to F_k and F_v, unattended non-finite rows set to 0.

    A row that the key_padding_mask, or a boolean mask of its rank, leaves unattended and
    that holds NaN/Inf becomes 0, so it reaches no weight's gradient; in self-attention
    (Q is F_k) the padded queries too. Nothing is cleared for ``call.finite_inputs``.
    """
    self_attention = Q is F_k and call.memory is None
    if call.memory is not None:
        _check_memory(call.memory, F_k, F_v)
        F_k, F_v = torch.cat([call.memory, F_k], dim=-2), torch.cat([call.memory, F_v], dim=-2)
    if call.finite_inputs:
        return Q, F_k, F_v
    same_kv = F_v is F_k
    F_k = zero_unattended(F_k, kpm, call.mask)
    F_v = F_k if same_kv else zero_unattended(F_v, kpm, call.mask)
    return (F_k if self_attention else Q), F_k, F_v  # a padded position is a query too


def _project_inputs(
    Q: Tensor, F_k: Tensor, F_v: Tensor, weights: tuple[tuple[Tensor, Tensor | None], ...]
) -> tuple[Tensor, Tensor, Tensor]:
    """Eq. (38) for every head at once: the stacked projections ``q``, ``k``, ``v`` (one dtype)."""
    (W_Q, b_Q), (W_K, b_K), (W_V, b_V), _ = weights
    q, k, v = _project(Q, W_Q, b_Q), _project(F_k, W_K, b_K), _project(F_v, W_V, b_V)
    check_same_dtype(Q=q, K=k, V=v)
    return q, k, v


def _extra_keys(k: Tensor, v: Tensor, heads: Heads, batch: tuple[int, ...]) -> tuple[Tensor, Tensor, int]:
    """torch's extra keys and values: the learned ``bias_k``/``bias_v`` pair, then a zero key and value.

    Returns ``(k, v, extra)``, ``extra`` the number of keys appended (the masks get as many columns).
    """
    if (heads.bias_k is None) != (heads.bias_v is None):
        raise ValueError("bias_k and bias_v go together (add_bias_kv)")
    extra = 0
    if heads.bias_k is not None and heads.bias_v is not None:  # both or neither (checked above)
        _check_bias_kv(heads.bias_k, "bias_k", k.shape[-1], "h*d_k")
        _check_bias_kv(heads.bias_v, "bias_v", v.shape[-1], "h*d_v")
        k, v = (
            torch.cat([t.expand(*batch, *t.shape[-2:]), b.reshape(1, -1).expand(*batch, 1, t.shape[-1])], dim=-2)
            for t, b in ((k, heads.bias_k), (v, heads.bias_v))
        )
        extra += 1
    if heads.add_zero_attn:
        k, v = (torch.cat([t, t.new_zeros(*t.shape[:-2], 1, t.shape[-1])], dim=-2) for t in (k, v))
        extra += 1
    return k, v, extra


def _head_masks(
    mask: Tensor | None, opts: AttendOptions, batch: tuple[int, ...], h: int, q: Tensor, k: Tensor, extra: int
) -> tuple[Tensor | None, Tensor | None]:
    """The caller's masks and bias in the heads' layout, combined by :func:`~attnsurvey.attention.canonical_masks`.

    A mask or bias shared by the heads gets a head axis, and every one gets ``extra``
    columns for the appended keys (allowed, bias 0). The key_padding_mask is checked here,
    once, in the caller's layout (``(..., n_f)``, memory included), so that an error shows the
    shape the caller passed; canonical_masks combines it without a second check.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    rank = len(batch) + 2  # of the scores of one head: the queries' and features' batch axes, broadcast
    bias = head_mask(_pad_keys(opts.get("bias"), extra, 0.0), rank)
    mask = head_mask(_pad_keys(mask, extra, mask is not None and mask.dtype == torch.bool), rank, n_q, n_k, batch)
    kpm = opts.get("key_padding_mask")
    if kpm is not None:
        kpm = check_key_padding_mask(kpm, torch.Size((*batch, n_q, n_k - extra)))  # (..., 1, n_f)
        kpm = _pad_keys(kpm.expand(*kpm.shape[:-1], n_k - extra), extra, True)  # (..., 1, n_k): 1 the head axis
        kpm = kpm.unsqueeze(-2)  # (..., 1, 1, n_k): the query axis
    return canonical_masks(
        torch.Size((*batch, h, n_q, n_k)),
        mask,
        checked_key_mask=kpm,
        is_causal=bool(opts.get("is_causal")),
        bias=bias,
        dtype=q.dtype,
        device=q.device,
    )


@catalogued("eq40")
class MultiHeadAttention(nn.Module):
    """Multi-head attention (Eq. 38-40) with learned ``W_Q, W_K, W_V, W_O``: the module form of :func:`multi_head_attention`.

    The weights are made to fit in ``__init__``; ``forward`` checks its inputs once and
    runs the stack without re-checking the weights. ``forward(X_q, X_kv=None, mask=None,
    *, X_v=None, need_weights=True, average_attn_weights=None, memory=None,
    kv_transform=None, context_hook=None, **options)`` returns ``(output, weights)`` with masks
    ``True`` = may attend; ``X_kv=None`` is self-attention, ``X_v`` (default ``X_kv``) gives
    separate value features; ``kv_transform`` and ``context_hook`` replace the module's hooks
    for this call (e.g. a KV cache's ``append``, an output gate computed from this call's
    input); ``options`` (:class:`attnsurvey.attention.AttendOptions`) go to
    the stack, with ``dropout_p`` defaulting to ``dropout`` in training mode (0 in eval
    mode) and ``align`` to the module's ``align`` hook.

    Args:
        d_model: the query and output size.
        h: the number of heads.
        d_k: the per-head key size (default ``d_model // h``).
        d_v: the per-head value size (default ``d_model // h``).
        bias: biases on the projections.
        dropout: attention dropout (training mode only).
        add_bias_kv: one learned extra key and value.
        add_zero_attn: one extra zero key and value.
        kdim: the key feature size (default d_model).
        vdim: the value feature size (default d_model).
        batch_first: ``(B, n, d)`` inputs (default); False: ``(n, B, d)``.
        average_attn_weights: return the head-averaged weights by default.
        h_kv: key/value heads (default h; fewer, each shared by a group of query heads,
            give grouped-query attention).
        device: where the parameters live.
        dtype: the parameters' dtype.

    Shape:
        forward: X_q ``(..., n_q, d_model)``, X_kv ``(..., n_f, kdim)``, X_v ``(..., n_f, vdim)``;
        returns ``(..., n_q, d_model)`` and weights ``(..., h, n_q, n_f)`` (``(..., n_q, n_f)`` averaged).

    Raises:
        ValueError: if ``h < 1`` or ``h`` does not divide ``d_model`` when d_k/d_v are not
            given, ``h_kv`` does not divide ``h``, or ``dropout`` is outside ``[0, 1]``;
            ``forward`` as :func:`multi_head_attention`.
    """

    #: Hooks a variant overrides (see the module notes): a per-head score
    #: ``(q, k) -> e``, the alignment, and a map of the per-head keys and values.
    score_fn: ScoreFn | None = None
    align: str | AlignFn = "softmax"
    kv_transform: KVTransform | None = None
    context_hook: Callable[[Tensor, Tensor], Tensor] | None = None

    def __init__(
        self,
        d_model: int,
        h: int,
        d_k: int | None = None,
        d_v: int | None = None,
        bias: bool = False,
        *,
        dropout: float = 0.0,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = True,
        average_attn_weights: bool = False,
        h_kv: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        h_kv = _check_head_counts("MultiHeadAttention", h, h_kv)
        if (d_k is None or d_v is None) and d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads h={h}")
        check_probability("MultiHeadAttention", dropout=dropout)
        d_k = d_model // h if d_k is None else d_k
        d_v = d_model // h if d_v is None else d_v
        check_integers("MultiHeadAttention", minimum=1, d_model=d_model, d_k=d_k, d_v=d_v)  # h: _check_head_counts
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.h, self.h_kv, self.d_k, self.d_v, self.d_model = h, h_kv, d_k, d_v, d_model
        self.kdim, self.vdim = kdim or d_model, vdim or d_model
        self.dropout, self.add_zero_attn, self.batch_first = dropout, add_zero_attn, batch_first
        self.average_attn_weights = average_attn_weights
        self.W_Q = nn.Linear(d_model, h * d_k, bias=bias, **kw)
        self.W_K = nn.Linear(self.kdim, h_kv * d_k, bias=bias, **kw)
        self.W_V = nn.Linear(self.vdim, h_kv * d_v, bias=bias, **kw)
        self.W_O = nn.Linear(h * d_v, d_model, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k: nn.Parameter | None = nn.Parameter(nn.init.xavier_normal_(torch.empty(1, 1, h_kv * d_k, **kw)))
            self.bias_v: nn.Parameter | None = nn.Parameter(nn.init.xavier_normal_(torch.empty(1, 1, h_kv * d_v, **kw)))
        else:
            self.bias_k = self.bias_v = None

    def _heads(
        self, kv_transform: KVTransform | None, context_hook: Callable[[Tensor, Tensor], Tensor] | None = None
    ) -> Heads:
        """The module's stack (:class:`Heads`): its own weights, made to fit in ``__init__``, and its hooks."""
        weights = tuple(_weight_and_bias(W) for W in (self.W_Q, self.W_K, self.W_V, self.W_O))
        return Heads(
            weights, self.h, self.h_kv, self.bias_k, self.bias_v, self.add_zero_attn, self.score_fn, kv_transform,
            self.context_hook if context_hook is None else context_hook,
        )  # fmt: skip

    def forward(
        self,
        X_q: Tensor,
        X_kv: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        X_v: Tensor | None = None,
        need_weights: bool = True,
        average_attn_weights: bool | None = None,
        memory: Tensor | None = None,
        kv_transform: KVTransform | None = None,
        context_hook: Callable[[Tensor, Tensor], Tensor] | None = None,
        _finite_inputs: bool = False,
        **options: Unpack[AttendOptions],
    ) -> tuple[Tensor, Tensor | None]:
        X_kv = X_q if X_kv is None else X_kv
        X_v = X_kv if X_v is None else X_v
        for sym, t, d in (("X_q", X_q, self.d_model), ("X_kv", X_kv, self.kdim), ("X_v", X_v, self.vdim)):
            as_tensor(t, sym)
            check_min_rank(t, 2, sym, "(..., n, d_model)")
            check_dim_equal(t.shape[-1], d, "MultiHeadAttention", f"d_model of {sym}", "d_model of the module")
        if not self.batch_first:
            X_q, X_kv, X_v = (x.transpose(-2, -3) if x.dim() >= 3 else x for x in (X_q, X_kv, X_v))
        avg = self.average_attn_weights if average_attn_weights is None else average_attn_weights
        options.setdefault("dropout_p", self.dropout if self.training else 0.0)
        options.setdefault("align", self.align)
        heads = self._heads(self.kv_transform if kv_transform is None else kv_transform, context_hook)
        out, a = _multi_head(X_q, X_kv, X_v, heads, HeadsCall(mask, memory, need_weights, avg, options, _finite_inputs))
        if not self.batch_first and out.dim() >= 3:
            out = out.transpose(-2, -3)
        return out, a


class SelfAttentionVariant(MultiHeadAttention):
    """Base of the self-attention variants: :class:`MultiHeadAttention` on one input, weights always returned.

    The variants with positions or projections inside the attention (relative
    positions, the Gaussian local bias, Linformer, RoPE, ALiBi) subclass it and
    set a hook of :class:`MultiHeadAttention` (``score_fn``, ``context_hook``,
    ``kv_transform``) or override :meth:`attend_options` for per-call options
    such as a ``bias`` that depends on the length. Constructor as
    :class:`MultiHeadAttention`.

    ``forward(X, X_kv=None, mask=None, **options)``: ``X_kv`` must be None or X
    itself; mask (boolean ``True`` = may attend, or a float additive bias) and
    ``options`` (:class:`~attnsurvey.attention.AttendOptions`: key_padding_mask,
    is_causal, bias, ...) as for :class:`MultiHeadAttention`, so a variant also
    serves as the ``self_attn`` of a Transformer layer with padding or causal masks.
    It returns ``(output, weights)``.

    Shape:
        X: ``(..., n, d_model)``; returns output ``(..., n, d_model)`` and weights ``(..., h, n, n_f)``.

    Raises:
        ValueError: if ``X_kv`` is another tensor, X is not floating point, has fewer than 2 dimensions
            or the wrong width, or an option is one the variant sets itself (see :meth:`attend_options`).
        TypeError: if X is not a tensor.
    """

    def attend_options(self, X: Tensor) -> AttendOptions:
        """Options for :func:`~attnsurvey.attention.attend` computed from the input ``X`` (none here)."""
        return {}

    # ignore: self-attention on X alone, the weights always returned: narrower than MultiHeadAttention.forward
    def forward(  # type: ignore[override]
        self, X: Tensor, X_kv: Tensor | None = None, mask: Tensor | None = None, **options: Unpack[AttendOptions]
    ) -> tuple[Tensor, Tensor]:
        name = type(self).__name__
        if X_kv is not None and X_kv is not X:
            raise ValueError(f"{name} is self-attention: X_kv must be None or X")
        as_tensor(X, "X")
        check_min_rank(X, 2, "X", "(..., n, d_model)")
        check_dim_equal(X.shape[-1], self.d_model, name, "d_model of X", "d_model of the module")
        own = self.attend_options(X)
        if clash := sorted(own.keys() & options.keys()):
            raise ValueError(f"{name} sets {', '.join(clash)} itself; it cannot also be passed to forward")
        options.update(own)
        out, a = super().forward(X, None, mask, **options)
        assert a is not None  # need_weights is left at True
        return out, a


@catalogued(
    "extra:multihead-matrix-form",
    title="Review eq. 10-11: head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), MultiHead = Concat(heads) W^O",
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
    review's right-multiplied matrices.

    A spelling of :func:`multi_head_attention`, not a second computation: the
    per-head matrices, transposed and stacked, are its ``W_Q = [W_1^Q ... W_h^Q]^T``
    (head ``i`` owns rows ``(i-1) d_k .. i d_k``), likewise ``W_K`` and ``W_V``,
    and ``W_O = (W^O)^T``; concatenating the heads is :func:`merge_heads`.

    Args:
        Q: queries.
        K: keys.
        V: values.
        W_Q: one query matrix ``W_i^Q`` per head.
        W_K: one key matrix ``W_i^K`` per head.
        W_V: one value matrix ``W_i^V`` per head.
        W_O: the output matrix ``W^O``.
        mask: optional boolean mask, ``True`` = may attend.

    Shape:
        Q: ``(..., n_q, d_model)``; K, V: ``(..., n_f, d_model)``; each ``W_i^Q``, ``W_i^K``:
        ``(d_model, d_k)``; each ``W_i^V``: ``(d_model, d_v)``; W_O: ``(h*d_v, d_model)``;
        mask: ``(..., n_q, n_f)``; returns ``(..., n_q, d_model)``.

    Returns:
        ``MultiHead(Q, K, V)``.

    Raises:
        ValueError: if the head lists are empty or differ in length, the heads differ in ``d_k`` or
            ``d_v``, a shape is wrong, or a tensor is not floating point (and as :func:`multi_head_attention`).
        TypeError: if a weight is not a tensor.
    """
    h = len(W_Q)
    if h == 0 or len(W_K) != h or len(W_V) != h:
        raise ValueError(f"need one W_i^Q, W_i^K, W_i^V per head, got {len(W_Q)}, {len(W_K)}, {len(W_V)}")
    d_k, d_v = as_tensor(W_Q[0], "W_1^Q").shape[-1], as_tensor(W_V[0], "W_1^V").shape[-1]
    for i in range(h):  # shapes only: each head's matrices, named as in the review
        check_weight(W_Q[i], (Q.shape[-1], d_k), f"W_{i + 1}^Q", "(d_model, d_k)")
        check_weight(W_K[i], (K.shape[-1], d_k), f"W_{i + 1}^K", "(d_model, d_k)")
        check_weight(W_V[i], (V.shape[-1], d_v), f"W_{i + 1}^V", "(d_model, d_v)")
    check_weight(W_O, (h * d_v, as_tensor(W_O, "W^O").shape[-1]), "W^O", "(h*d_v, d_model)")
    stack = lambda Ws: torch.cat(list(Ws), dim=-1).T  # noqa: E731  [W_1 ... W_h]^T: head i's rows
    out, _ = multi_head_attention(Q, K, V, stack(W_Q), stack(W_K), stack(W_V), W_O.T, h, mask, need_weights=False)
    return out  # eq. (10) per head, eq. (11) Concat(...) W^O


def _pairwise_cosine(X: Tensor) -> Tensor:
    """Mean over all head pairs (i, j), i = j included, of cos(X_i, X_j); X is ``(..., h, m)``.

    A cosine does not change with the scale of a row, so a row whose squares could overflow (its largest
    magnitude above ``max ** (1/4)`` of the dtype, e.g. near 1e20 in float32) is divided by that magnitude
    before its norm is taken; every other row is used as it is."""
    s = X.detach().abs().amax(-1, keepdim=True) if X.shape[-1] else X.detach().sum(-1, keepdim=True)
    tiny = torch.finfo(X.dtype).tiny
    X = torch.where(s > torch.finfo(X.dtype).max ** 0.25, X / s.clamp_min(tiny), X)
    Xn = X / X.norm(dim=-1, keepdim=True).clamp_min(tiny**0.5)
    return (Xn @ Xn.transpose(-1, -2)).mean(dim=(-1, -2))


@catalogued(
    "extra:disagreement-regularisation",
    title="Disagreement regularisation between heads (subspace, position, output; Li et al. 2018)",
)
def disagreement_regularisation(heads: Tensor, kind: str = "output") -> Tensor:
    """Disagreement between attention heads (Li et al., 2018; review §(3)), to be *maximised*.

    ``kind="subspace"`` or ``"output"``: ``heads`` are the per-head value
    vectors or contexts; the result is
    ``D = -(1/h^2) sum_i sum_j cos(O^i, O^j)`` with each head's ``(n, d)`` block
    flattened (the i = j terms are included, as in the paper). For these cosine
    kinds D is -1 when every head is identical and -1/h for pairwise orthogonal heads.
    ``kind="position"``: ``heads`` are the weights and
    ``D = -(1/h^2) sum_i sum_j |A^i * A^j|`` (elementwise product, summed);
    identical heads give ``-sum(A * A)``, which is ``-n_q`` when every row is
    one-hot, and heads whose weights never overlap give
    ``-(1/h^2) sum_i sum(A^i * A^i)`` (``-n_q/h`` for one-hot rows).
    Add ``-lambda * D.mean()`` to a training loss.

    Args:
        heads: per-head value vectors or contexts, or per-head weights (``kind="position"``).
        kind: ``"subspace"``, ``"output"`` or ``"position"``.

    Shape:
        heads: ``(..., h, n, d)`` or ``(..., h, n_q, n_f)``; returns ``(...)``.

    Returns:
        The disagreement D.

    Raises:
        ValueError: for an unknown ``kind``, a tensor of rank < 3 or a non-float tensor.
        TypeError: if heads is not a tensor.
    """
    as_tensor(heads, "heads")
    check_min_rank(heads, 3, "heads", "(..., h, n, d)")
    h = heads.shape[-3]
    if kind not in ("subspace", "output", "position"):
        raise ValueError(f"kind must be 'subspace', 'output' or 'position', got {kind!r}")
    if h == 0:  # no head pairs: a loss over nothing is 0, still on the graph
        return heads.sum(dim=(-3, -2, -1))
    if kind in ("subspace", "output"):
        return -_pairwise_cosine(heads.flatten(-2))
    if kind == "position":
        A = heads.flatten(-2)
        return -(A @ A.transpose(-1, -2)).sum(dim=(-1, -2)) / h**2
    raise ValueError(f"kind must be 'subspace', 'output' or 'position', got {kind!r}")
