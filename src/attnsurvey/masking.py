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
masks, :func:`forward_mask`, :func:`backward_mask`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ._checks import as_tensor, broadcast_batch
from .catalog import catalogued
from .registry import Registry

#: Mask builders by name; every builder returns a boolean mask, ``True`` = may attend.
MASKS: Registry[Callable[..., Tensor]] = Registry("mask kind")


def minus_inf(dtype: torch.dtype) -> float:
    """The fill value for masked scores: the most negative finite number of ``dtype``.

    Finite (not ``-inf``), so a fully-masked row gives a finite softmax with
    finite gradients, which the caller then zeroes with ``torch.where``.
    Raises ``TypeError`` for a non-floating dtype.
    """
    if not dtype.is_floating_point:
        raise TypeError(f"minus_inf needs a floating-point dtype, got {dtype}")
    return torch.finfo(dtype).min


def check_boolean(mask: object, symbol: str, meaning: str = "may attend", *, who: str = "", why: str = "") -> None:
    """The package's one refusal of a mask that is not a boolean tensor.

    mask: must be a boolean tensor, ``True`` = ``meaning`` (default ``"may attend"``;
    e.g. ``"keep"`` for a masked mean, ``"real word"`` for a word mask). Raises
    ``ValueError`` naming ``symbol`` and the dtype (or type) seen, prefixed by ``who``
    and followed by ``why`` when given.
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = f"dtype={mask.dtype}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{who}{symbol} must be a boolean tensor (True = {meaning}), got {got}{why}")


def check_mask(mask: Tensor, scores_shape: torch.Size, symbol: str = "mask") -> Tensor:
    """Validate a boolean ``mask`` against scores of shape ``(..., n_q, n_f)`` and return it.

    The mask must be boolean, ``True`` = may attend, broadcastable to the scores. Raises
    ``ValueError`` if the mask is not a boolean tensor or does not broadcast to the
    scores without changing their shape.
    """
    check_boolean(mask, symbol)
    if broadcast_batch(mask.shape, scores_shape) != tuple(scores_shape):
        raise ValueError(
            f"{symbol} of shape {tuple(mask.shape)} does not broadcast to the scores e "
            f"of shape {tuple(scores_shape)} (..., n_q, n_f)"
        )
    return mask


def require_boolean_mask(mask: object, who: str, symbol: str = "mask") -> None:
    """Refuse a ``mask`` that is neither None nor boolean, for functions whose contract is a boolean mask.

    Such a contract reads the mask as boolean, ``True`` = may attend. The core reads a
    float mask as torch does, as an additive bias, so a float 0/1 mask given where a
    boolean one is meant would silently shift the scores instead of selecting positions.
    Raises ``ValueError`` naming ``who`` and the argument ``symbol``.
    """
    if mask is not None:
        check_boolean(
            mask,
            symbol,
            who=f"{who}: ",
            why="; a float mask would be added to the scores as a bias instead of selecting positions",
        )


def check_attn_mask(mask: Tensor, scores_shape: torch.Size, symbol: str = "mask") -> Tensor:
    """:func:`check_mask` for an attention mask ``(..., n_q, n_f)``, rejecting ambiguous shapes.

    mask: boolean, ``True`` = may attend, broadcastable to the scores.
    A rank-2 mask ``(n, n_f)`` applied to scores ``(B, ..., n_q, n_f)`` with
    ``B == n_q == n > 1`` could be a per-query mask or a ``(B, n_f)`` key-padding
    mask; it raises ``ValueError`` (pass ``key_padding_mask=`` for the latter,
    or add a leading axis, ``mask[None]``, for the former).
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
    """Validate a mask ``(..., n_f)`` shared by every query of scores ``(..., n_q, n_f)``; return it as ``(..., 1, n_f)``.

    mask: boolean, ``True`` = may attend, broadcastable to the scores' shape without
    the query axis, ``(..., n_f)``. For functions that give the caller's per-key mask
    a query axis themselves: an error shows the shape the caller passed, not the
    reshaped one. Raises ``ValueError`` naming ``symbol`` for a non-boolean mask, a
    0-d mask or a shape that does not broadcast.
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
    """Validate a key mask ``(..., n_f)`` for one query per example; return it as ``(..., 1, n_f)``.

    mask: boolean, ``True`` = may attend, checked (as :func:`check_shared_key_mask`) against
    the scores ``(..., 1, n_f)`` of a query with batch axes ``query_batch`` and keys
    ``K`` ``(..., n_f, d_k)``, so an error shows the shape the caller passed. Where ``K``
    is no tensor of rank >= 2 or the batch axes do not broadcast, the mask only gets its
    query axis: the attention core then reports that problem first.
    Raises ``ValueError`` for a mask that does not fit.
    """
    if isinstance(K, Tensor) and K.dim() >= 2:
        try:
            batch = torch.broadcast_shapes(query_batch, K.shape[:-2])
        except RuntimeError:
            pass  # the core reports the batch mismatch
        else:
            return check_shared_key_mask(mask, torch.Size((*batch, 1, K.shape[-2])))
    return mask.unsqueeze(-2)


def check_key_padding_mask(kpm: Tensor, scores_shape: torch.Size, symbol: str = "key_padding_mask") -> Tensor:
    """Validate a key-padding mask ``(..., n_f)`` and return it as ``(..., 1, n_f)``.

    It needs one axis per batch axis of the scores ``(..., n_q, n_f)`` (rank
    ``len(scores_shape) - 1``; size 1 broadcasts), so its alignment is never
    guessed. Raises ``ValueError`` for a non-boolean mask or another rank/shape.
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

    e: floating scores, any shape; mask: boolean broadcastable to e (``True`` =
    may attend). Numerically safe for very large scores (it subtracts the row
    maximum); masked positions are inert (selected away, so NaN/Inf there do
    not matter); fully-masked rows get all-zero weights.
    Raises ``ValueError`` for a bad mask and ``TypeError`` for scores ``e`` that are
    not a floating-point tensor.
    """
    as_tensor(e, "e")
    if mask is None:
        return torch.softmax(e, dim=dim)
    check_mask(mask, e.shape)
    filled = torch.where(mask, e, minus_inf(e.dtype))
    a = torch.softmax(filled, dim=dim)
    return torch.where(mask, a, torch.zeros((), dtype=a.dtype, device=a.device))


def masked_log_softmax(e: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """``log softmax`` of ``e`` over ``dim`` restricted to the allowed positions.

    mask: boolean broadcastable to e, ``True`` = may attend. Allowed positions get their
    exact log-probability (also when it is far below the float range of the probability
    itself, e.g. -1000); masked positions and fully-masked rows get :func:`minus_inf`
    (probability 0 after ``exp``), never NaN; masked entries are inert. Raises
    ``ValueError`` for a bad mask and ``TypeError`` for scores ``e`` that are not a
    floating-point tensor.
    """
    as_tensor(e, "e")
    if mask is None:
        return torch.log_softmax(e, dim=dim)
    check_mask(mask, e.shape)
    low = minus_inf(e.dtype)
    logp = torch.log_softmax(torch.where(mask, e, low), dim=dim)
    return torch.where(mask & mask.expand(e.shape).any(dim, keepdim=True), logp, low)


def masked_mean(X: Tensor, mask: Tensor | None = None, dim: int = -2) -> Tensor:
    """Mean of ``X`` over ``dim``, counting only positions where ``mask`` is True.

    X: ``(..., n, d)`` (``dim=-2``, the default) or any shape; mask: boolean,
    ``True`` = counted in the mean (so a key-padding mask works as is),
    shaped like ``X`` without its last axis when ``dim=-2`` (``(..., n)``; fewer
    leading axes broadcast, so a 1-D ``(n,)`` mask is shared by the batch), or
    broadcastable to ``X`` otherwise. Masked entries are inert (NaN there is
    ignored). A slice with no allowed position (or ``n = 0``) gives 0, not NaN.
    float16 and bfloat16 are summed in float32 and the mean cast back, so a sum
    beyond the dtype's range (1000 values of 70 in float16) does not overflow.
    Raises ``ValueError`` for a non-boolean mask or a shape that does not fit, and
    ``TypeError`` (:func:`attnsurvey._checks.as_tensor`) for an X that is not a
    floating-point tensor (a list or NumPy array included).
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

    One reduction, without a temporary of X's size: a NaN or an infinity makes the
    sum NaN or infinite, so a finite sum proves every entry finite. Only a sum that
    overflows (entries near the dtype's largest value) or a real NaN/Inf falls
    through to the exact element-wise test. This matters for overlapping views
    such as the unfolded key windows of local attention, where an element-wise
    test would allocate the whole window tensor. Not differentiable (a test, not
    a value).
    """
    with torch.no_grad():
        if bool(torch.isfinite(X.sum())):
            return True
        return bool(torch.isfinite(X).all())


def nonfinite_rows(X: Tensor) -> Tensor | None:
    """``(..., n)`` True where a row of X ``(..., n, d)`` holds NaN/Inf; None when every entry is finite.

    The all-finite case (the usual one) costs one reduction and no temporary of X's size
    (:func:`all_finite`).
    """
    if all_finite(X):
        return None
    return ~torch.isfinite(X).all(-1)


def zero_masked(X: Tensor, mask: Tensor | None) -> Tensor:
    """``X`` ``(..., n_f, d)`` with its non-finite rows at masked positions replaced by 0 (selected, not multiplied).

    mask: boolean key mask ``(..., n_f)``, or an attention mask ``(..., n_q, n_f)``
    of X's rank (then the rows no query may attend are zeroed), ``True`` = may
    attend. Used before a score is computed from the features, so a NaN or Inf
    stored in a padded slot reaches neither the scores' gradients nor the
    parameters' (``0 * NaN`` in a backward pass is NaN). Finite rows are left
    as they are, so finite inputs give bit-identical results; a masked row that
    holds NaN/Inf gets weight 0 anyway (in self-attention its own, padded,
    output row becomes finite). A mask that does not fit is returned unchanged
    for the caller's own check to report.
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
    keep = km | torch.isfinite(X).all(-1)  # tensor ops only: no host synchronisation
    return torch.where(keep[..., None], X, torch.zeros((), dtype=X.dtype, device=X.device))


def attended_keys(mask: Tensor | None) -> Tensor | None:
    """The key mask ``(..., n_f)`` of a boolean attention mask ``(..., n_q, n_f)``: ``True`` where some query may attend.

    A key no query may attend is padding. A 1-D mask is a key mask already, and
    None or a float mask is returned unchanged, for the caller's own check to report.
    """
    if isinstance(mask, Tensor) and mask.dtype == torch.bool and mask.dim() >= 2:
        return mask.any(-2)
    return mask


def zero_unattended(X: Tensor, key_padding_mask: object = None, mask: object = None) -> Tensor:
    """:func:`zero_masked` with the masks a layer or multi-head call holds, used only where they line up with X.

    X: ``(..., n_f, d)`` features (keys, values, or a self-attention input).
    key_padding_mask: boolean ``(..., n_f)`` of rank ``X.dim() - 1``; mask: a
    boolean attention mask of X's rank (rows no query may attend are zeroed);
    both ``True`` = may attend.
    Any other mask (a shared ``(n_q, n_f)`` mask against batched X, a per-head
    mask, a float bias) is not used: its key axis cannot be matched to X's rows
    for certain. Finite rows are left as they are (bit-identical results).
    """
    if isinstance(key_padding_mask, Tensor) and key_padding_mask.dim() == X.dim() - 1:
        X = zero_masked(X, key_padding_mask)
    return zero_masked(X, mask) if isinstance(mask, Tensor) and mask.dim() == X.dim() else X


def additive_mask(mask: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """The additive form of a boolean mask: ``0`` where allowed, ``-inf`` where not.

    mask: boolean, any shape, ``True`` = may attend. dtype: the float dtype of the
    result (default: the default dtype). Raises ``ValueError`` for a non-boolean mask.
    """
    check_boolean(mask, "mask")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def _check_size(value: int, name: str, minimum: int = 0) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {kind}, got {name}={value!r}")


@MASKS.register("causal")
def causal_mask(n_q: int, n_f: int | None = None, device: torch.device | None = None, offset: int = 0) -> Tensor:
    """Boolean ``(n_q, n_f)`` mask where query ``i`` may attend to positions ``j <= i + offset``.

    ``offset = 0`` is the usual causal mask (top-left aligned, as ``is_causal``
    in ``F.scaled_dot_product_attention``); ``offset = n_m`` lets a segment see
    ``n_m`` memory positions first (Transformer-XL). ``n_f`` defaults to ``n_q``.
    Raises ``ValueError`` for negative sizes.
    """
    n_f = n_q if n_f is None else n_f
    _check_size(n_q, "n_q")
    _check_size(n_f, "n_f")
    return torch.ones(n_q, n_f, dtype=torch.bool, device=device).tril(offset)


@MASKS.register("padding")
def padding_mask(lengths: Tensor, n_f: int) -> Tensor:
    """Boolean ``(batch, 1, n_f)`` attention mask that allows the first ``lengths[b]`` positions.

    The query axis of size 1 makes it an attention mask for scores
    ``(batch, n_q, n_f)``; :func:`key_padding_mask` gives the ``(batch, n_f)`` form.
    Raises ``ValueError`` if a length is negative or exceeds ``n_f``.
    """
    return key_padding_mask(lengths, n_f)[:, None, :]


def key_padding_mask(lengths: Tensor, n_f: int) -> Tensor:
    """Boolean ``(batch, n_f)`` key-padding mask: ``True`` at the first ``lengths[b]`` positions.

    Raises ``ValueError`` if ``lengths`` is not 1-D or a length lies outside ``[0, n_f]``.
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
    _check_size(n_f, "n_f")
    if (lengths < 0).any() or (lengths > n_f).any():
        raise ValueError(f"lengths must lie in [0, n_f={n_f}], got {lengths.tolist()}")
    pos = torch.arange(n_f, device=lengths.device)
    return pos[None, :] < lengths[:, None]


@MASKS.register("band")
def band_mask(n_q: int, w: int, n_f: int | None = None, device: torch.device | None = None) -> Tensor:
    """Boolean ``(n_q, n_f)`` local-window mask ``|i - j| <= w`` (``True`` = may attend).

    Raises ``ValueError`` unless ``w >= 0`` and the sizes are ints >= 0.
    """
    n_f = n_q if n_f is None else n_f
    _check_size(n_q, "n_q")
    _check_size(n_f, "n_f")
    _check_size(w, "window half-width w")
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_f, device=device)[None, :]
    return (i - j).abs() <= w


@MASKS.register("forward")
def forward_mask(n: int, device: torch.device | None = None) -> Tensor:
    """Boolean ``(n, n)`` DiSAN forward mask: ``M[i, j] = j < i`` (``True`` = may attend).

    Query ``i`` (the row) sees only the earlier tokens, what a forward RNN has
    read before step ``i``; the first row is empty. This is the direction of
    the authors' released code, whose ``'forward'`` mask keeps row > column.
    Raises ``ValueError`` unless ``n >= 1``.
    """
    _check_size(n, "sequence length n", 1)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(-1)


@MASKS.register("backward")
def backward_mask(n: int, device: torch.device | None = None) -> Tensor:
    """Boolean ``(n, n)`` DiSAN backward mask: ``M[i, j] = j > i`` (``True`` = may attend).

    Query ``i`` (the row) sees only the later tokens; the last row is empty.
    Raises ``ValueError`` unless ``n >= 1``.
    """
    _check_size(n, "sequence length n", 1)
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def make_mask(kind: str, *args: object, **kwargs: object) -> Tensor:
    """Build a mask by its registered name (:data:`MASKS`): ``make_mask("causal", 4)``.

    Raises ``ValueError`` for an unknown kind (listing the known ones) or bad arguments.
    """
    return MASKS[kind](*args, **kwargs)
