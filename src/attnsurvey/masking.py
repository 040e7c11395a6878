"""Masks: one builder per kind, the masked softmax, the masked mean, the dtype-aware minus infinity.

Mask convention (the same as ``torch.nn.functional.scaled_dot_product_attention``):
a boolean tensor, broadcastable to the scores ``(..., n_q, n_f)``, where
``True`` means *this query may attend to this feature vector*.
``torch.nn.MultiheadAttention`` uses the opposite polarity; convert with ``~mask``.

Two kinds of mask reach :func:`attnsurvey.attention.attend`, as different
arguments (as in torch): an *attention mask* ``(..., n_q, n_f)`` (one row per
query) and a *key-padding mask* ``(..., n_f)`` (one entry per feature vector,
shared by every query). A rank-2 attention mask ``(n, n_f)`` given to batched
scores whose batch size ``B`` equals ``n_q = n`` is ambiguous (is it per query, or
a ``(B, n_f)`` padding mask?) and is rejected by :func:`check_attn_mask`.

Masked positions are *inert*: code selects with ``torch.where`` rather than
multiplying by zero, so a NaN or Inf held at a masked position never reaches an
output or a gradient. A query whose row is masked everywhere has nothing to
attend to: it gets all-zero weights, so its context vector is the zero vector
(not NaN and not a uniform average). Fill values come from the dtype
(:func:`minus_inf`), so float16 and bfloat16 work.

Builders (registered in :data:`MASKS` by name): ``causal`` (:func:`causal_mask`),
``padding`` (:func:`padding_mask`, :func:`key_padding_mask`), ``band`` (local
window, :func:`band_mask`), ``forward`` and ``backward`` (DiSAN's directional
masks, :func:`forward_mask`, :func:`backward_mask`), ``prefix_lm``
(:func:`prefix_lm_mask`), ``document`` (packed documents, :func:`document_mask`)
and ``sink`` (StreamingLLM's attention sinks plus a rolling window, :func:`sink_mask`).

Shape legend: ``B`` batch (``...``: any leading axes), ``h`` heads, ``n_q`` queries,
``n_f`` feature vectors (keys), ``d`` a feature width (``d_k``, ``d_v``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ._checks import as_tensor, broadcast_batch, check_index_range, check_integers, require_tensor
from .catalog import catalogued
from .registry import Registry

#: Mask builders by name; every builder returns a boolean mask, ``True`` = may attend.
MASKS: Registry[Callable[..., Tensor]] = Registry("mask kind")


def minus_inf(dtype: torch.dtype) -> float:
    """The fill value for masked scores: the most negative finite number of ``dtype``.

    Finite (not ``-inf``), so a fully-masked row gives a finite softmax with finite
    gradients, which the caller then zeroes with ``torch.where``.

    Args:
        dtype: a floating-point dtype.

    Returns:
        ``torch.finfo(dtype).min``.

    Raises:
        TypeError: for a non-floating dtype.
    """
    if not dtype.is_floating_point:
        raise TypeError(f"minus_inf needs a floating-point dtype, got {dtype}")
    return torch.finfo(dtype).min


def check_boolean(mask: object, symbol: str, meaning: str = "may attend", *, who: str = "", why: str = "") -> None:
    """The package's one refusal of a mask that is not a boolean tensor.

    Args:
        mask: the mask to check; ``True`` = ``meaning``.
        symbol: its name in the message.
        meaning: what ``True`` means (default ``"may attend"``; ``"keep"`` for a masked mean).
        who: a prefix naming the caller.
        why: a suffix explaining the refusal.

    Raises:
        ValueError: naming ``symbol`` and the dtype (or type) seen.
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = f"dtype={mask.dtype}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{who}{symbol} must be a boolean tensor (True = {meaning}), got {got}{why}")


def check_mask(mask: Tensor, scores_shape: torch.Size, symbol: str = "mask") -> Tensor:
    """Validate a boolean ``mask`` against the scores and return it.

    Args:
        mask: boolean, ``True`` = may attend.
        scores_shape: the shape of the scores.
        symbol: the mask's name in the message.

    Shape:
        mask: broadcastable to ``scores_shape`` ``(..., n_q, n_f)`` without changing it.

    Returns:
        ``mask``.

    Raises:
        ValueError: if the mask is not a boolean tensor or does not broadcast to the scores.
    """
    check_boolean(mask, symbol)
    if mask.dim() > len(scores_shape) or any(
        m != 1 and m != s for m, s in zip(reversed(mask.shape), reversed(scores_shape))
    ):
        raise ValueError(
            f"{symbol} of shape {tuple(mask.shape)} does not broadcast to the scores e "
            f"of shape {tuple(scores_shape)} (..., n_q, n_f)"
        )
    return mask


def require_boolean_mask(mask: object, who: str, symbol: str = "mask") -> None:
    """Refuse a ``mask`` that is neither None nor boolean, for functions whose contract is a boolean mask.

    The core reads a float mask as torch does, as an additive bias, so a float 0/1 mask
    given where a boolean one (``True`` = may attend) is meant would silently shift the
    scores instead of selecting positions.

    Args:
        mask: None or the mask.
        who: the caller's name for the message.
        symbol: the argument's name.

    Raises:
        ValueError: naming ``who`` and ``symbol``.
    """
    if mask is not None:
        check_boolean(
            mask,
            symbol,
            who=f"{who}: ",
            why="; a float mask would be added to the scores as a bias instead of selecting positions",
        )


def check_attn_mask(mask: Tensor, scores_shape: torch.Size, symbol: str = "mask") -> Tensor:
    """:func:`check_mask` for an attention mask, rejecting ambiguous shapes.

    A rank-2 mask ``(n, n_f)`` applied to scores ``(B, ..., n_q, n_f)`` with
    ``B == n_q == n > 1`` could be a per-query mask or a ``(B, n_f)`` key-padding mask.

    Args:
        mask: boolean, ``True`` = may attend.
        scores_shape: the shape of the scores.
        symbol: the mask's name in the message.

    Shape:
        mask: broadcastable to ``scores_shape`` ``(..., n_q, n_f)``.

    Returns:
        ``mask``.

    Raises:
        ValueError: for a bad mask or an ambiguous one (pass ``key_padding_mask=`` for the
            latter reading, or add a leading axis, ``mask[None]``, for the former).
    """
    check_mask(mask, scores_shape, symbol)
    if (
        mask.dim() == 2
        and len(scores_shape) >= 3
        and mask.shape[0] > 1
        and mask.shape[0] == scores_shape[0] == scores_shape[-2]
    ):
        raise ValueError(
            f"{symbol} of shape {tuple(mask.shape)} is ambiguous for scores of shape {tuple(scores_shape)}: "
            f"the batch size B={scores_shape[0]} equals n_q={scores_shape[-2]}, so it could be a per-query "
            "(n_q, n_f) attention mask or a (B, n_f) key-padding mask. Pass key_padding_mask= for the "
            "latter, or add a leading axis (mask[None]) for the former"
        )
    return mask


def check_shared_key_mask(mask: Tensor, scores_shape: torch.Size, symbol: str = "mask") -> Tensor:
    """Validate a mask shared by every query of the scores; return it with a query axis.

    For functions that give the caller's per-key mask a query axis themselves: an error
    shows the shape the caller passed, not the reshaped one.

    Args:
        mask: boolean, ``True`` = may attend.
        scores_shape: the shape of the scores.
        symbol: the mask's name in the message.

    Shape:
        mask: ``(..., n_f)``, broadcastable to the scores without their query axis;
        returns ``(..., 1, n_f)``.

    Returns:
        The mask with a query axis.

    Raises:
        ValueError: for a non-boolean mask, a 0-d mask or a shape that does not broadcast.
    """
    check_boolean(mask, symbol)
    target = (*scores_shape[:-2], scores_shape[-1])
    out = broadcast_batch(mask.shape, target) if mask.dim() >= 1 else None
    if out != target:
        raise ValueError(
            f"{symbol} of shape {tuple(mask.shape)} does not broadcast to {tuple(target)} (..., n_f): one entry "
            f"per feature vector, for every query of the scores e of shape {tuple(scores_shape)} (..., n_q, n_f)"
        )
    return mask.unsqueeze(-2)


def check_one_query_mask(mask: Tensor, query_batch: torch.Size, K: object) -> Tensor:
    """Validate a key mask for one query per example; return it with a query axis.

    Where ``K`` is no tensor of rank >= 2 or the batch axes do not broadcast, the mask
    only gets its query axis: the attention core then reports that problem first.

    Args:
        mask: boolean, ``True`` = may attend.
        query_batch: the batch axes of the query.
        K: the keys.

    Shape:
        mask: ``(..., n_f)``; K: ``(..., n_f, d_k)``; returns ``(..., 1, n_f)``.

    Returns:
        The mask with a query axis.

    Raises:
        ValueError: for a mask that does not fit.
    """
    # broadcast_batch, not torch.broadcast_shapes (about 30 us a call): a decoder checks its mask at every step
    if isinstance(K, Tensor) and K.dim() >= 2 and (batch := broadcast_batch(query_batch, K.shape[:-2])) is not None:
        return check_shared_key_mask(mask, torch.Size((*batch, 1, K.shape[-2])))
    return mask.unsqueeze(-2)  # no keys of rank >= 2, or batch axes that do not broadcast: the core reports it


def check_key_padding_mask(kpm: Tensor, scores_shape: torch.Size, symbol: str = "key_padding_mask") -> Tensor:
    """Validate a key-padding mask and return it with a query axis.

    It needs one axis per batch axis of the scores (size 1 broadcasts), so its alignment
    is never guessed.

    Args:
        kpm: boolean, ``True`` = may attend.
        scores_shape: the shape of the scores.
        symbol: the mask's name in the message.

    Shape:
        kpm: ``(..., n_f)`` of rank ``len(scores_shape) - 1``; returns ``(..., 1, n_f)``.

    Returns:
        The mask with a query axis.

    Raises:
        ValueError: for a non-boolean mask or another rank or shape.
    """
    check_boolean(kpm, symbol)
    want = len(scores_shape) - 1
    if kpm.dim() != want:
        raise ValueError(
            f"{symbol} must have shape (..., n_f) with one axis per batch axis of the scores "
            f"{tuple(scores_shape)}, i.e. rank {want}; got shape {tuple(kpm.shape)}"
        )
    return check_shared_key_mask(kpm, scores_shape, symbol)


@catalogued("eq3", "eq25")
def masked_softmax(e: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax of scores ``e`` over ``dim``, ignoring positions where ``mask`` is False.

    Numerically safe for very large scores (it subtracts the row maximum); masked
    positions are inert (selected away, so NaN/Inf there do not matter).

    Args:
        e: floating-point scores.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.
        dim: the axis normalised over.

    Shape:
        e: any, e.g. ``(..., n_q, n_f)``; returns the same shape.

    Returns:
        The weights; fully-masked rows get all-zero weights.

    Raises:
        ValueError: for a bad mask.
        TypeError: for scores that are not a floating-point tensor.
    """
    as_tensor(e, "e")
    if mask is None:
        return torch.softmax(e, dim=dim)
    check_attn_mask(mask, e.shape)
    filled = torch.where(mask, e, minus_inf(e.dtype))
    a = torch.softmax(filled, dim=dim)
    return torch.where(mask, a, torch.zeros((), dtype=a.dtype, device=a.device))


def masked_log_softmax(e: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """``log softmax`` of ``e`` over ``dim`` restricted to the allowed positions.

    Allowed positions get their exact log-probability (also far below the float range of
    the probability itself, e.g. -1000); masked entries are inert.

    Args:
        e: floating-point scores.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.
        dim: the axis normalised over.

    Shape:
        e: any; returns the same shape.

    Returns:
        The log-weights; masked positions and fully-masked rows get :func:`minus_inf`
        (probability 0 after ``exp``), never NaN.

    Raises:
        ValueError: for a bad mask.
        TypeError: for scores that are not a floating-point tensor.
    """
    as_tensor(e, "e")
    if mask is None:
        return torch.log_softmax(e, dim=dim)
    check_attn_mask(mask, e.shape)
    low = minus_inf(e.dtype)
    logp = torch.log_softmax(torch.where(mask, e, low), dim=dim)
    return torch.where(mask & mask.expand(e.shape).any(dim, keepdim=True), logp, low)


def masked_mean(X: Tensor, mask: Tensor | None = None, dim: int = -2) -> Tensor:
    """Mean of ``X`` over ``dim``, counting only positions where ``mask`` is True.

    Masked entries are inert (NaN there is ignored). float16 and bfloat16 are summed in
    float32 and the mean cast back, so a sum beyond the dtype's range does not overflow.

    Args:
        X: floating-point values.
        mask: boolean, ``True`` = counted in the mean (so a key-padding mask works as is);
            None: a plain mean.
        dim: the axis averaged over.

    Shape:
        X: ``(..., n, d)`` with ``dim=-2`` (the default) and mask ``(..., n)`` (fewer leading
        axes broadcast, so a 1-D ``(n,)`` mask is shared by the batch); otherwise mask is
        broadcastable to X. Returns X without axis ``dim``.

    Returns:
        The mean; a slice with no allowed position (or ``n = 0``) gives 0, not NaN.

    Raises:
        ValueError: for a non-boolean mask or a shape that does not fit.
        TypeError: for an X that is not a floating-point tensor (a list or NumPy array
            included; :func:`attnsurvey._checks.as_tensor`).
    """
    as_tensor(X, "X")
    if mask is None:
        if X.shape[dim] == 0:
            return X.sum(dim)
        return X.mean(dim)
    check_boolean(mask, "mask", "keep")
    m = mask.unsqueeze(-1) if dim == -2 and mask.dim() < X.dim() else mask  # (..., n) masks, 1-D shared ones too
    try:
        m = m.expand(X.shape)
    except RuntimeError:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not fit X of shape {tuple(X.shape)} (mean over dim {dim})"
        ) from None
    kept = torch.where(m, X, torch.zeros((), dtype=X.dtype, device=X.device))
    if X.dtype in (torch.float16, torch.bfloat16):  # accumulate in float32, cast the mean back
        total, count = kept.sum(dim, dtype=torch.float32), m.sum(dim).to(torch.float32)
        return torch.where(count > 0, total / count.clamp_min(1), torch.zeros((), device=X.device)).to(X.dtype)
    total = kept.sum(dim)
    count = m.sum(dim).to(X.dtype)
    return torch.where(count > 0, total / count.clamp_min(1), torch.zeros((), dtype=X.dtype, device=X.device))


def all_finite(X: Tensor) -> bool:
    """True when every entry of ``X`` is finite (no NaN, no +-Inf); an empty tensor counts as finite.

    One reduction, without a temporary of X's size, except when the sum overflows or a
    real NaN/Inf is present. It reads the result on the host (a synchronisation), so the
    attention core does not use it; it is for tests and non-differentiable decisions.

    Args:
        X: any tensor.

    Shape:
        X: any shape, empty included.

    Returns:
        A Python bool.

    Raises:
        TypeError: ``X`` is not a tensor.
    """
    require_tensor(X, "X")
    with torch.no_grad():
        if bool(torch.isfinite(X.sum())):
            return True
        return bool(torch.isfinite(X).all())


def finite_rows(X: Tensor) -> Tensor:
    """True where a row of ``X`` (its last axis) holds only finite numbers; tensor operations only.

    ``X * 0`` is 0 at a finite entry and NaN at NaN or +-Inf, so the row sum of ``X * 0``
    is 0 exactly when the row is finite; the sum cannot overflow, however large the
    finite entries (a sum of X itself would). No host synchronisation.

    Args:
        X: a floating-point tensor of rank >= 1.

    Shape:
        X: ``(..., n, d)``; returns ``(..., n)``.

    Returns:
        Boolean, True at a finite row (an empty row, ``d = 0``, is finite).

    Raises:
        TypeError: ``X`` is not a floating-point tensor.
    """
    as_tensor(X, "X")
    return (X * 0).sum(-1) == 0


def nonfinite_rows(X: Tensor) -> Tensor | None:
    """The rows of ``X`` that hold NaN/Inf, or None when every entry is finite.

    Args:
        X: any tensor of rank >= 1.

    Shape:
        X: ``(..., n, d)``; returns ``(..., n)``.

    Returns:
        Boolean, True at a non-finite row; None when all are finite (decided on the host:
        :func:`all_finite`).
    """
    if all_finite(X):
        return None
    return ~finite_rows(X)


def zero_masked(X: Tensor, mask: Tensor | None) -> Tensor:
    """``X`` with its non-finite rows at masked positions replaced by 0 (selected, not multiplied).

    Used before a score is computed from the features, so a NaN or Inf stored in a padded
    slot reaches neither the scores' gradients nor the parameters'. Finite rows keep their
    values (bit-identical results); tensor operations only, no host synchronisation. A mask
    that does not fit is ignored, for the caller's own check to report.

    Args:
        X: the features.
        mask: boolean key mask, or an attention mask of X's rank (then the rows no query
            may attend are zeroed), ``True`` = may attend; None: X unchanged.

    Shape:
        X: ``(..., n_f, d)``; mask: ``(..., n_f)`` or ``(..., n_q, n_f)``; returns X's shape
        (broadcast against the mask's batch axes).

    Returns:
        The cleaned features.
    """
    if (
        mask is None
        or not isinstance(mask, Tensor)
        or mask.dtype != torch.bool
        or not isinstance(X, Tensor)
        or X.dim() < 1
    ):
        return X
    km = mask.any(-2) if mask.dim() >= 2 and mask.dim() == X.dim() else mask
    if km.dim() >= X.dim() or km.shape[-1] != X.shape[-2] or (1 < km.dim() < X.dim() - 1):
        return X
    if broadcast_batch(km.shape[:-1], X.shape[:-2]) is None:  # the caller's own check reports it
        return X
    keep = km | finite_rows(X)  # tensor ops only: no host synchronisation
    return torch.where(keep[..., None], X, 0.0)


def attended_keys(mask: Tensor | None) -> Tensor | None:
    """The key mask of a boolean attention mask: ``True`` where some query may attend.

    A key no query may attend is padding. A 1-D mask is a key mask already, and None or
    a float mask is returned unchanged, for the caller's own check to report.

    Args:
        mask: boolean, ``True`` = may attend, or None.

    Shape:
        mask: ``(..., n_q, n_f)``; returns ``(..., n_f)``.

    Returns:
        The key mask (or ``mask`` itself, see above).
    """
    if isinstance(mask, Tensor) and mask.dtype == torch.bool and mask.dim() >= 2:
        return mask.any(-2)
    return mask


def zero_unattended(X: Tensor, key_padding_mask: object = None, mask: object = None) -> Tensor:
    """:func:`zero_masked` with the masks a layer or multi-head call holds, used only where they line up with X.

    Any other mask (a shared ``(n_q, n_f)`` mask against batched X, a per-head mask, a
    float bias) is not used: its key axis cannot be matched to X's rows for certain.

    Args:
        X: features (keys, values, or a self-attention input).
        key_padding_mask: boolean, ``True`` = may attend, of rank ``X.dim() - 1``.
        mask: a boolean attention mask of X's rank, ``True`` = may attend.

    Shape:
        X: ``(..., n_f, d)``; key_padding_mask: ``(..., n_f)``; mask: ``(..., n_q, n_f)``.

    Returns:
        X with the non-finite rows that no query may attend set to 0.
    """
    if isinstance(key_padding_mask, Tensor) and key_padding_mask.dim() == X.dim() - 1:
        X = zero_masked(X, key_padding_mask)
    return zero_masked(X, mask) if isinstance(mask, Tensor) and mask.dim() == X.dim() else X


def additive_mask(mask: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """The additive form of a boolean mask: ``0`` where allowed, ``-inf`` where not.

    Args:
        mask: boolean, ``True`` = may attend.
        dtype: the float dtype of the result (default: the default dtype).

    Shape:
        mask: any; returns the same shape.

    Returns:
        The additive mask.

    Raises:
        ValueError: for a non-boolean mask.
    """
    check_boolean(mask, "mask")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


@MASKS.register("causal")
def causal_mask(n_q: int, n_f: int | None = None, device: torch.device | None = None, offset: int = 0) -> Tensor:
    """Boolean causal mask: query ``i`` may attend (``True``) to positions ``j <= i + offset``.

    ``offset = 0`` is the usual causal mask (top-left aligned, as ``is_causal`` in
    ``F.scaled_dot_product_attention``); ``offset = n_m`` lets a segment see ``n_m``
    memory positions first (Transformer-XL).

    Args:
        n_q: the number of queries.
        n_f: the number of keys (default ``n_q``).
        device: where to build it.
        offset: how many positions beyond the diagonal each query sees.

    Shape:
        returns ``(n_q, n_f)``.

    Returns:
        The mask.

    Raises:
        ValueError: for negative sizes.
    """
    n_f = n_q if n_f is None else n_f
    check_integers("causal_mask", minimum=0, n_q=n_q, n_f=n_f)
    return torch.ones(n_q, n_f, dtype=torch.bool, device=device).tril(offset)


@MASKS.register("padding")
def padding_mask(lengths: Tensor, n_f: int) -> Tensor:
    """Boolean attention mask that allows (``True`` = may attend) the first ``lengths[b]`` positions.

    The query axis of size 1 makes it an attention mask for scores ``(B, n_q, n_f)``;
    :func:`key_padding_mask` gives the ``(B, n_f)`` form.

    Args:
        lengths: one length per example.
        n_f: the number of positions.

    Shape:
        lengths: ``(B,)``; returns ``(B, 1, n_f)``.

    Returns:
        The mask.

    Raises:
        ValueError: as :func:`key_padding_mask`.
    """
    return key_padding_mask(lengths, n_f)[:, None, :]


def key_padding_mask(lengths: Tensor, n_f: int) -> Tensor:
    """Boolean key-padding mask: ``True`` (may attend) at the first ``lengths[b]`` positions.

    Args:
        lengths: one length per example, integers (whole-number floats are accepted).
        n_f: the number of positions.

    Shape:
        lengths: ``(B,)``; returns ``(B, n_f)``.

    Returns:
        The mask.

    Raises:
        ValueError: if ``lengths`` is not 1-D, holds a fractional or non-numeric length,
            or a length lies outside ``[0, n_f]``.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dtype == torch.bool or lengths.is_complex():
        raise ValueError(f"lengths must be integers (batch,), got dtype={lengths.dtype}")
    if lengths.is_floating_point():
        if not bool((lengths == lengths.round()).all()):  # host sync: a builder, not the attention path
            raise ValueError(f"lengths must be whole numbers (batch,), got {lengths.tolist()}")
        lengths = lengths.long()
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (batch,), got shape {tuple(lengths.shape)}")
    check_integers("key_padding_mask", minimum=0, n_f=n_f)
    if (lengths < 0).any() or (lengths > n_f).any():
        raise ValueError(f"lengths must lie in [0, n_f={n_f}], got {lengths.tolist()}")
    pos = torch.arange(n_f, device=lengths.device)
    return pos[None, :] < lengths[:, None]


@MASKS.register("band")
def band_mask(n_q: int, w: int, n_f: int | None = None, device: torch.device | None = None) -> Tensor:
    """Boolean local-window mask ``|i - j| <= w`` (``True`` = may attend).

    Args:
        n_q: the number of queries.
        w: the window half-width.
        n_f: the number of keys (default ``n_q``).
        device: where to build it.

    Shape:
        returns ``(n_q, n_f)``.

    Returns:
        The mask.

    Raises:
        ValueError: unless ``w >= 0`` and the sizes are ints >= 0.
    """
    n_f = n_q if n_f is None else n_f
    check_integers("band_mask", minimum=0, n_q=n_q, n_f=n_f, w=w)  # w: the window half-width
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_f, device=device)[None, :]
    return (i - j).abs() <= w


@MASKS.register("forward")
def forward_mask(n: int, device: torch.device | None = None) -> Tensor:
    """Boolean DiSAN forward mask: ``M[i, j] = j < i`` (``True`` = may attend).

    Query ``i`` (the row) sees only the earlier tokens, what a forward RNN has read
    before step ``i``; the first row is empty. This is the direction of the authors'
    released code, whose ``'forward'`` mask keeps row > column.

    Args:
        n: the sequence length.
        device: where to build it.

    Shape:
        returns ``(n, n)``.

    Returns:
        The mask.

    Raises:
        ValueError: unless ``n >= 1``.
    """
    check_integers("forward_mask", minimum=1, n=n)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(-1)


@MASKS.register("backward")
def backward_mask(n: int, device: torch.device | None = None) -> Tensor:
    """Boolean DiSAN backward mask: ``M[i, j] = j > i`` (``True`` = may attend).

    Query ``i`` (the row) sees only the later tokens; the last row is empty.

    Args:
        n: the sequence length.
        device: where to build it.

    Shape:
        returns ``(n, n)``.

    Returns:
        The mask.

    Raises:
        ValueError: unless ``n >= 1``.
    """
    check_integers("backward_mask", minimum=1, n=n)
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


@MASKS.register("prefix_lm")
def prefix_lm_mask(prefix_lengths: Tensor, n: int) -> Tensor:
    """Boolean prefix-LM mask: query ``i`` may attend (``True``) to key ``j`` when ``j <= i`` or ``j < p_b``.

    The first ``p_b = prefix_lengths[b]`` positions of example ``b`` (the prefix, e.g. a
    prompt) are seen by every query, so the prefix attends to itself in both directions;
    the rest is causal (T5's prefix LM, UniLM).

    Args:
        prefix_lengths: one prefix length per example, in ``[0, n]`` (0: a causal mask).
        n: the sequence length (queries and keys).

    Shape:
        prefix_lengths: ``(B,)``; returns ``(B, n, n)``.

    Returns:
        The mask.

    Raises:
        ValueError: as :func:`key_padding_mask` for the lengths, or a negative ``n``.
    """
    prefix = key_padding_mask(prefix_lengths, n)  # (B, n): key j lies in example b's prefix
    return causal_mask(n, device=prefix.device)[None] | prefix[:, None, :]


@MASKS.register("document")
def document_mask(doc_ids: Tensor) -> Tensor:
    """Boolean mask of documents packed in one sequence: query ``i`` may attend (``True``) to key ``j`` of its own document.

    ``doc_ids[..., t]`` names the document of position ``t``; positions with equal ids
    attend to each other. Combine it with :func:`causal_mask` for a packed decoder and
    with a key-padding mask for the padding at the end.

    Args:
        doc_ids: integer document ids (any values; padding may carry an id of its own).

    Shape:
        doc_ids: ``(..., n)``; returns ``(..., n, n)``.

    Returns:
        The mask.

    Raises:
        InputTypeError: if ``doc_ids`` is not an integer tensor.
        ValueError: if it has no axis.
    """
    low = torch.iinfo(torch.int64).min  # any integer is an id: only the type is checked
    check_index_range(doc_ids, None, "doc_ids", "document_mask", low=low)
    if doc_ids.dim() < 1:
        raise ValueError("document_mask needs doc_ids of shape (..., n), got a 0-d tensor")
    return doc_ids[..., :, None] == doc_ids[..., None, :]


@MASKS.register("sink")
def sink_mask(n: int, n_sink: int, window: int, device: torch.device | None = None) -> Tensor:
    """Boolean attention-sink mask (StreamingLLM, Xiao et al. 2024): the first keys plus a rolling window.

    Query ``i`` may attend (``True``) to key ``j <= i`` when ``j < n_sink`` (the sinks,
    always visible) or ``i - window < j`` (the last ``window`` keys, its own included,
    the window of :class:`attnsurvey.beyond.kv_cache.SlidingWindowCache`).

    Args:
        n: the sequence length (queries and keys).
        n_sink: the number of sink keys (>= 0; 0 gives a plain causal sliding window).
        window: keys in the rolling window (>= 1).
        device: where to build it.

    Shape:
        returns ``(n, n)``.

    Returns:
        The mask.

    Raises:
        ValueError: unless ``n`` and ``n_sink`` are ints >= 0 and ``window`` an int >= 1.
    """
    check_integers("sink_mask", minimum=0, n_sink=n_sink)
    check_integers("sink_mask", minimum=1, window=window)
    recent = causal_mask(n, device=device) & band_mask(n, window - 1, device=device)  # i - window < j <= i
    sinks = torch.arange(n, device=device) < n_sink
    return recent | (causal_mask(n, device=device) & sinks[None, :])


def make_mask(kind: str, *args: object, **kwargs: object) -> Tensor:
    """Build a mask by its registered name (:data:`MASKS`): ``make_mask("causal", 4)``.

    Args:
        kind: a name of :data:`MASKS`.
        *args: the builder's positional arguments.
        **kwargs: the builder's keyword arguments.

    Shape:
        returns the builder's mask, e.g. ``(n_q, n_f)`` for ``"causal"``, broadcastable to the
        scores ``(..., n_q, n_f)``.

    Returns:
        The boolean mask, ``True`` = may attend.

    Raises:
        ValueError: for an unknown kind (listing the known ones) or bad arguments.
    """
    return MASKS[kind](*args, **kwargs)
