"""Exact attention in linear memory: tiles and an online softmax (beyond the survey).

The book's attention core, :func:`attnsurvey.attention.attend`, forms the whole
score matrix ``e`` ``(n_q, n_f)`` and its softmax: memory grows as ``n^2``. This module
computes *the same* context vectors (Eq. 2-4 with the scaled multiplicative
score) one tile of ``block_q`` queries by ``block_k`` keys at a time, keeping
per query only three running quantities: the maximum and the normaliser of
Milakov & Gimelshein's online softmax, and the weighted sum of the values that
exact chunked attention (Rabe & Staats) and FlashAttention carry along with them:

* ``m``   the largest score seen so far,
* ``l``   the sum of ``exp(e - m)`` over the keys seen so far,
* ``acc`` the sum of ``exp(e - m) v`` over the keys seen so far.

Two such partial results over disjoint key sets merge exactly
(:func:`online_softmax_merge`), so the order and size of the tiles do not
change the result beyond rounding. The context is ``acc / l``.

The backward pass (:class:`TiledAttentionFunction`) stores only Q, K, V, the
context and the per-row log-sum-exp ``L = m + log l``; it recomputes the
weights of each tile as ``exp(e - L)`` instead of keeping the ``n_q x n_f``
matrix.

Masks are boolean, ``True`` = may attend (as ``F.scaled_dot_product_attention``).
A masked score is replaced by ``-inf`` inside each tile, so it contributes an
exact zero; a NaN/Inf in a query, key or value reaches only the queries that may
attend it (their context is NaN, as in :func:`attnsurvey.attention.attend`, whose
:func:`~attnsurvey.attention.context` forms each tile's product when a value is
non-finite). In the backward pass a NaN context passes no gradient (as the inert
product of :func:`attnsurvey.attention.attend`), so the gradients stay finite.
A query whose row is masked everywhere gets the zero context (and zero gradients), as
in :func:`attnsurvey.masking.masked_softmax`; its log-sum-exp is ``-inf``.

Precision: float16 and bfloat16 inputs are computed in float32 (scores, running
statistics and products) and the context is returned in the input dtype.

Dropout on the weights (``dropout_p``) draws its keep-mask from a counter-based
hash of ``(seed, batch index, query index, key index)``: the mask does not depend
on the tiles, the backward pass regenerates exactly the entries the forward pass
dropped from the one stored seed, and :func:`dropout_keep_mask` rebuilds the
whole mask for a dense reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, NamedTuple, TypedDict, Unpack

import torch
from torch import Tensor

from .._checks import (
    Default,
    as_tensor,
    check_batch_broadcast,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_same_dtype,
    option_defaults,
    with_defaults,
)
from ..attention import context
from ..catalog import catalogued
from ..masking import all_finite, check_attn_mask, check_mask

CHAPTER = "chapters/ch06_tiled_attention.ipynb"
#: Default number of queries per tile (``block_q``): with :data:`BLOCK_K`, big enough that each
#: tile is a real matrix product, small enough that a tile of scores (1 MiB in float32) stays in
#: cache (the fastest of 256-2048 on one CPU thread at n = 8192). Other modules import it from here.
BLOCK_Q = 256
#: Default number of keys per tile (``block_k``); see :data:`BLOCK_Q`.
BLOCK_K = 1024
#: Inputs of these dtypes are computed in float32 and the result cast back.
_LOW_PRECISION = (torch.float16, torch.bfloat16)

Stats = tuple[Tensor, Tensor, Tensor]


class TileOptions(TypedDict, total=False):
    """The keyword options of :func:`tiled_attend` and :func:`attention_stats` (defaults in :func:`tile_settings`).

    is_causal (False): query ``i`` may attend only to keys ``j <= i``;
    block_q, block_k (:data:`BLOCK_Q`, :data:`BLOCK_K`): the tile sizes;
    scale (None: ``1 / sqrt(d_k)``): the factor of the scores ``Q K^T``;
    dropout_p (0.0): probability of dropping each weight (the kept ones are scaled by ``1 / (1 - p)``);
    dropout_seed (None: drawn from ``generator``): the seed of the keep-mask (:func:`dropout_keep_mask`);
    generator (None: torch's global generator): where a missing ``dropout_seed`` is drawn from.
    """

    is_causal: Annotated[bool, Default(False)]
    block_q: Annotated[int, Default(BLOCK_Q)]
    block_k: Annotated[int, Default(BLOCK_K)]
    scale: Annotated[float | None, Default(None)]
    dropout_p: Annotated[float, Default(0.0)]
    dropout_seed: Annotated[int | None, Default(None)]
    generator: Annotated[torch.Generator | None, Default(None)]


#: Every :class:`TileOptions` option with its default (:func:`tile_settings` fills them in).
_TILE_DEFAULTS: TileOptions = option_defaults(TileOptions)


class _TileFields(NamedTuple):
    is_causal: bool
    block_q: int
    block_k: int
    scale: float
    dropout_p: float
    dropout_seed: int | None


class TileSettings(_TileFields):
    """The options of one call, validated; ``dropout_seed`` is None without dropout.

    The one place the options are checked: :func:`tile_settings` fills in the defaults and
    builds one, and the tile loops read its fields by name.

    Args:
        is_causal: query ``i`` may attend only to keys ``j <= i``.
        block_q: queries per tile.
        block_k: keys per tile.
        scale: the score scale.
        dropout_p: dropout probability.
        dropout_seed: seed of the keep-mask (None without dropout).

    Raises:
        TypeError: for a block size or seed that is not an int.
        ValueError: for a block size below 1, a scale that is not a finite number (as
            :func:`attnsurvey.attention.attend`) or ``dropout_p`` outside ``[0, 1)`` (NaN included).
    """

    __slots__ = ()

    def __new__(
        cls, is_causal: bool, block_q: int, block_k: int, scale: float, dropout_p: float, dropout_seed: int | None
    ) -> TileSettings:
        if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale)):
            raise ValueError(
                f"the score scale (1/sqrt(d_k) by default) must be a finite number, got a non-finite score scale "
                f"scale={scale!r}"
            )
        if not (isinstance(dropout_p, (int, float)) and 0.0 <= dropout_p < 1.0):
            raise ValueError(f"dropout_p must be a probability in [0, 1), got dropout_p={dropout_p!r}")
        check_integers("TileSettings", allow_none=True, dropout_seed=dropout_seed)
        check_integers("TileSettings", minimum=1, block_q=block_q, block_k=block_k)
        return super().__new__(
            cls,
            bool(is_causal),
            block_q,
            block_k,
            float(scale),
            float(dropout_p),
            dropout_seed,
        )


def tile_settings(d_k: int, options: TileOptions) -> TileSettings:
    """The options of ``options`` with the defaults filled in (the one place they are set).

    Defaults: ``is_causal=False``, ``block_q=BLOCK_Q``, ``block_k=BLOCK_K``,
    ``scale=1/sqrt(d_k)``, ``dropout_p=0``; with ``dropout_p > 0`` and no ``dropout_seed``, the seed is
    drawn here by :func:`draw_dropout_seed` from ``generator``.

    Args:
        d_k: key size (sets the default scale).
        options: the :class:`TileOptions` given by the caller.

    Returns:
        :class:`TileSettings`.

    Raises:
        TypeError: for an option name that :class:`TileOptions` does not declare (a typo
            such as ``is_casual`` is not ignored), a block size or seed that is not an int.
        ValueError: for a block size below 1, a scale that is not a finite number (as
            :func:`attnsurvey.attention.attend`), ``dropout_p`` outside ``[0, 1)``, or
            ``d_k = 0`` (refused: every score would be 0 and ``1 / sqrt(d_k)`` is undefined;
            the core returns zero contexts there and SDPA the mean of the values, so
            there is no one answer to match).
    """
    if d_k < 1:
        raise ValueError(f"tiled attention needs d_k >= 1 (the size of the queries and keys), got d_k={d_k}")
    full = with_defaults(options, _TILE_DEFAULTS, "TileOptions")
    p, seed = full["dropout_p"], full["dropout_seed"]
    drops = isinstance(p, (int, float)) and p > 0  # else no seed (an invalid p is refused by TileSettings)
    if drops and seed is None:
        seed = draw_dropout_seed(full["generator"])
    return TileSettings(  # checks every value
        full["is_causal"],
        full["block_q"],
        full["block_k"],
        1.0 / math.sqrt(d_k) if full["scale"] is None else full["scale"],
        p,
        seed if drops else None,
    )


def draw_dropout_seed(generator: torch.Generator | None = None) -> int:
    """Draw the seed of a dropout keep-mask: one integer in ``[0, 2^31)`` from ``generator``.

    :func:`tiled_attend` calls it once per call when ``dropout_p > 0`` and no
    ``dropout_seed`` is given; a generator seeded alike gives the same seed, so
    :func:`dropout_keep_mask` can rebuild the mask of that call.

    Args:
        generator: the random state; None uses torch's global generator.

    Returns:
        The seed.
    """
    return int(torch.randint(0, 2**31, (), generator=generator).item())


_M32 = 0xFFFFFFFF


def _mul32(x: Tensor, c: int) -> Tensor:
    """``x * c mod 2^32`` for int64 ``x`` in ``[0, 2^32)`` without int64 overflow (``c`` split in 16-bit halves)."""
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (x * (c & 0xFFFF) + hi) & _M32


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (the "lowbias32" mixer) of int64 ``x`` in ``[0, 2^32)``."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _keep(seed: int, batch: torch.Size, qs: int, qe: int, ks: int, ke: int, p: float, device: torch.device) -> Tensor:
    """Keep-mask ``(*batch, qe - qs, ke - ks)`` of queries ``qs:qe`` and keys ``ks:ke``: True = kept."""
    b = torch.arange(math.prod(batch), device=device).reshape(*batch, 1, 1)
    i = torch.arange(qs, qe, device=device)[:, None]
    j = torch.arange(ks, ke, device=device)[None, :]
    h = _mix32((_mix32((_mix32((b + (seed & _M32)) & _M32) + i) & _M32) + j) & _M32)
    return h >= round(p * 2**32)  # P(h < p 2^32) = p: dropped


@catalogued("extra:tiled-attention")
def dropout_keep_mask(
    seed: int, shape: tuple[int, ...] | torch.Size, p: float, device: torch.device | None = None
) -> Tensor:
    """The keep-mask that :func:`tiled_attend` with ``dropout_p=p, dropout_seed=seed`` applies to the weights.

    Entry ``(b, i, j)`` is kept when a 32-bit hash of ``(seed, b, i, j)`` (``b`` the
    flattened batch index) is at least ``p 2^32``, so each weight is dropped with
    probability ``p`` independently of the tile sizes. A dense reference is then
    ``((softmax(e) * keep) / (1 - p)) @ V``.

    Args:
        seed: the dropout seed (``dropout_seed``, or :func:`draw_dropout_seed`'s draw).
        shape: the shape of the weights ``(..., n_q, n_f)`` after broadcasting the batch.
        p: the dropout probability in ``[0, 1)``.
        device: where to build it (default CPU).

    Shape:
        Returns ``shape``.

    Returns:
        Boolean tensor, ``True`` = the weight is kept.

    Raises:
        ValueError: if ``shape`` has fewer than 2 dimensions or ``p`` is outside ``[0, 1)``.
    """
    if len(shape) < 2:
        raise ValueError(f"shape must be (..., n_q, n_f), got {tuple(shape)}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p must be a probability in [0, 1), got p={p!r}")
    *batch, n_q, n_f = shape
    return _keep(seed, torch.Size(batch), 0, n_q, 0, n_f, p, torch.device("cpu") if device is None else device)


@catalogued("extra:tiled-attention")
def online_softmax_merge(m1: Tensor, l1: Tensor, acc1: Tensor, m2: Tensor, l2: Tensor, acc2: Tensor) -> Stats:
    """Merge two partial softmax-attention results over disjoint key sets, exactly.

    Each partial result describes one query row over some keys: ``m`` ``(...,)``
    the largest score, ``l`` ``(...,)`` the sum of ``exp(e_l - m)``, ``acc``
    ``(..., d_v)`` the sum of ``exp(e_l - m) v_l``. The merged triple is the one
    the union of the two key sets would have given:
    ``m = max(m1, m2)``, ``l = exp(m1 - m) l1 + exp(m2 - m) l2``,
    ``acc = exp(m1 - m) acc1 + exp(m2 - m) acc2``.
    An empty part (no allowed key) is ``(-inf, 0, 0)`` and is the identity.

    Args:
        m1: largest score of part 1.
        l1: its sum of exponentials.
        acc1: its weighted sum of values.
        m2: largest score of part 2.
        l2: its sum of exponentials.
        acc2: its weighted sum of values.

    Shape:
        m, l ``(...,)``, acc ``(..., d_v)``; the two parts must broadcast (no validation:
        this runs inside the tile loop).

    Returns:
        The merged ``(m, l, acc)``.
    """
    m = torch.maximum(m1, m2)
    # m is -inf only where both parts are empty; subtract 0 there so exp gives 0, not NaN.
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w1, w2 = torch.exp(m1 - m_safe), torch.exp(m2 - m_safe)
    return m, w1 * l1 + w2 * l2, w1.unsqueeze(-1) * acc1 + w2.unsqueeze(-1) * acc2


def finalize(m: Tensor, l: Tensor, acc: Tensor) -> tuple[Tensor, Tensor]:
    """Turn running statistics into ``(c, L)``: context ``acc / l`` and log-sum-exp ``m + log l``.

    Rows with ``l = 0`` (no allowed key) get the zero context and ``L = -inf``.

    Args:
        m: largest score per query.
        l: sum of exponentials per query.
        acc: weighted sum of values per query.

    Shape:
        m, l ``(..., n_q)``; acc ``(..., n_q, d_v)``.

    Returns:
        ``c`` ``(..., n_q, d_v)`` and ``L`` ``(..., n_q)``.
    """
    c = acc / torch.where(l > 0, l, torch.ones_like(l)).unsqueeze(-1)
    return c, m + torch.log(l)


def _inert(x: Tensor, keep: Tensor) -> Tensor:
    """Zero the rows of ``x`` (..., r, d) whose ``keep`` (..., r) is False, so NaN there stays out."""
    if bool(keep.all()):
        return x
    return torch.where(keep.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype))


def _tile_mask(
    mask: Tensor | None, is_causal: bool, qs: int, qe: int, ks: int, ke: int, device: torch.device
) -> Tensor | None:
    """The allowed pairs of the tile (queries qs:qe, keys ks:ke), or None if all are allowed."""
    allowed = None
    if mask is not None:
        if mask.dim() == 1:  # one mask over the keys, shared by every query
            mask = mask.unsqueeze(0)
        rows = slice(qs, qe) if mask.shape[-2] != 1 else slice(None)
        cols = slice(ks, ke) if mask.shape[-1] != 1 else slice(None)
        allowed = mask[..., rows, cols]
    if is_causal and ke - 1 > qs:  # some key of the tile lies after some query of the tile
        tri = torch.arange(qs, qe, device=device)[:, None] >= torch.arange(ks, ke, device=device)[None, :]
        allowed = tri if allowed is None else allowed & tri
    return allowed


def _key_end(n_f: int, is_causal: bool, qe: int) -> int:
    """Keys beyond this index are masked for every query before ``qe`` under a causal mask."""
    return min(n_f, qe) if is_causal else n_f


def tile_stats(Qs: Tensor, K: Tensor, V: Tensor, allowed: Tensor | None = None, drop: Tensor | None = None) -> Stats:
    """Running statistics ``(m, l, acc)`` of one dense tile, with scores ``Qs K^T``.

    Masked scores become ``-inf`` (exact zeros after ``exp``); a non-finite value
    row reaches only the queries that give it a non-zero weight
    (:func:`~attnsurvey.attention.context`). With dropout, ``l`` sums the weights
    before dropping (the softmax's normaliser) and ``acc`` sums the dropped ones.

    Args:
        Qs: queries already multiplied by the score scale.
        K: keys.
        V: values.
        allowed: boolean, ``True`` = may attend; None allows every pair.
        drop: dropout factors (0 for a dropped weight, ``1 / (1 - p)`` for a kept one); None: no dropout.

    Shape:
        Qs ``(..., b_q, d_k)``, K ``(..., b_k, d_k)``, V ``(..., b_k, d_v)``, allowed and
        drop ``(..., b_q, b_k)``.

    Returns:
        m, l ``(..., b_q)`` and acc ``(..., b_q, d_v)``; ``b_k = 0`` gives ``(-inf, 0, 0)``.

    Raises:
        TypeError, ValueError: for Qs, K or V that are no floating-point tensors of rank >= 2
            (lists, NumPy arrays, integer tensors), mixed dtypes, mismatched ``d_k``/``b_k``,
            batch dimensions that do not broadcast, or ``allowed``/``drop`` that do not
            broadcast to the scores ``(..., b_q, b_k)`` (``allowed`` must be boolean).
    """
    check_qkv(Qs, K, V, "tile_stats", "b_q", "b_k", "Qs")
    check_batch_broadcast(Qs, K, "Qs", "K")
    check_batch_broadcast(K, V, "K", "V")
    batch = torch.broadcast_shapes(Qs.shape[:-2], K.shape[:-2], V.shape[:-2])
    scores = torch.Size((*batch, Qs.shape[-2], K.shape[-2]))
    if allowed is not None:
        check_mask(allowed, scores, "allowed")
    if drop is not None:
        as_tensor(drop, "drop")
        _check_drop(drop, scores)
    if K.shape[-2] == 0:
        m = Qs.new_full((*batch, Qs.shape[-2]), -math.inf)
        return m, Qs.new_zeros(m.shape), Qs.new_zeros((*m.shape, V.shape[-1]))
    return _tile_stats(Qs, K, V, allowed, drop)


def _tile_stats(Qs: Tensor, K: Tensor, V: Tensor, allowed: Tensor | None = None, drop: Tensor | None = None) -> Stats:
    """:func:`tile_stats` on trusted inputs (``b_k >= 1``), inside the tile loops."""
    S = Qs @ K.transpose(-1, -2)
    if allowed is not None:
        S = S.masked_fill_(~allowed, -math.inf)
        V = _inert(V, allowed.any(-2))
    m = S.amax(-1)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    P = S.sub_(m_safe.unsqueeze(-1)).exp_()
    l = P.sum(-1)
    if drop is not None:
        P = P.mul_(drop)
    return m, l, P @ V if all_finite(V) else context(P, V)


def _check_drop(drop: Tensor, scores: torch.Size) -> None:
    """Raise ``ValueError`` unless the dropout factors ``drop`` broadcast to the scores ``(..., b_q, b_k)``."""
    try:
        out = torch.broadcast_shapes(drop.shape, scores)
    except RuntimeError:
        out = None
    if out != scores:
        raise ValueError(
            f"drop of shape {tuple(drop.shape)} does not broadcast to the scores {tuple(scores)} (..., b_q, b_k)"
        )


def _drop(settings: TileSettings, batch: torch.Size, qs: int, qe: int, ks: int, ke: int, like: Tensor) -> Tensor | None:
    """Dropout factors of one tile (0 or ``1 / (1 - p)``, dtype of ``like``), or None without dropout."""
    if settings.dropout_seed is None:
        return None
    keep = _keep(settings.dropout_seed, batch, qs, qe, ks, ke, settings.dropout_p, like.device)
    return keep.to(like.dtype) / (1.0 - settings.dropout_p)


@catalogued("extra:tiled-attention")
def attention_stats(
    Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None, **options: Unpack[TileOptions]
) -> Stats:
    """Online-softmax statistics ``(m, l, acc)`` of every query over all keys, tile by tile.

    The context of :func:`tiled_attend` is ``finalize(m, l, acc)[0]``; ring attention
    merges such statistics across processes. A fully-masked query row gives
    ``m = -inf``, ``l = 0``, ``acc = 0``. Memory: ``O(block_q * block_k)`` beyond the
    inputs and outputs. float16/bfloat16 inputs are computed in float32 one tile at a
    time and the statistics are returned in the input dtype.

    Args:
        Q: queries.
        K: keys.
        V: values.
        mask: boolean, broadcastable to the scores, ``True`` = may attend; None allows all.
        **options: :class:`TileOptions`.

    Shape:
        Q ``(..., n_q, d_k)``, K ``(..., n_f, d_k)``, V ``(..., n_f, d_v)`` (batch dimensions
        broadcast); mask ``(..., n_q, n_f)``, or any shape that broadcasts to these scores
        (a 1-D key mask over the n_f keys too); a per-example key mask needs its query axis,
        ``(B, 1, n_f)``.

    Returns:
        m, l ``(..., n_q)`` and acc ``(..., n_q, d_v)``.

    Raises:
        TypeError, ValueError: for bad options (:func:`tile_settings`); Q, K or V that are no
            floating-point tensors of rank >= 2 (lists, NumPy arrays, integer tensors), mixed
            dtypes, mismatched ``d_k``/``n_f`` or batch dimensions that do not broadcast; a mask
            that is not boolean, does not broadcast to ``(..., n_q, n_f)`` (a ``(B, n_f)`` mask
            with ``B != n_q``) or is an ambiguous rank-2 ``(n, n_f)`` with ``B == n_q == n``.
    """
    check_qkv(Q, K, V, "attention_stats")
    check_batch_broadcast(Q, K, "Q", "K")
    check_batch_broadcast(K, V, "K", "V")
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    if mask is not None:
        check_attn_mask(mask, torch.Size((*batch, Q.shape[-2], K.shape[-2])))
    dtype = Q.dtype
    Q, K, V = Q.expand(*batch, *Q.shape[-2:]), K.expand(*batch, *K.shape[-2:]), V.expand(*batch, *V.shape[-2:])
    m, l, acc = _attention_stats(Q, K, V, mask, tile_settings(Q.shape[-1], options))
    return m.to(dtype), l.to(dtype), acc.to(dtype)


def _attention_stats(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None, settings: TileSettings) -> Stats:
    """:func:`attention_stats` on trusted inputs (equal batch dimensions), statistics in float32 for half precision."""
    is_causal, block_q, block_k = settings.is_causal, settings.block_q, settings.block_k
    work = torch.float32 if Q.dtype in _LOW_PRECISION else Q.dtype
    Qs = Q.to(work) * settings.scale
    batch, n_q, n_f = Qs.shape[:-2], Qs.shape[-2], K.shape[-2]
    m = Qs.new_full((*batch, n_q), -math.inf)
    l = Qs.new_zeros((*batch, n_q))
    acc = Qs.new_zeros((*batch, n_q, V.shape[-1]))
    for qs in range(0, n_q, block_q):
        qe = min(qs + block_q, n_q)
        run: Stats | None = None
        for ks in range(0, _key_end(n_f, is_causal, qe), block_k):
            ke = min(ks + block_k, n_f)
            part = _tile_stats(
                Qs[..., qs:qe, :],
                K[..., ks:ke, :].to(work),
                V[..., ks:ke, :].to(work),
                _tile_mask(mask, is_causal, qs, qe, ks, ke, Qs.device),
                _drop(settings, batch, qs, qe, ks, ke, Qs),
            )
            run = part if run is None else online_softmax_merge(*run, *part)
        if run is not None:
            m[..., qs:qe], l[..., qs:qe], acc[..., qs:qe, :] = run
    return m, l, acc


@catalogued("extra:tiled-attention")
class TiledAttentionFunction(torch.autograd.Function):
    """Autograd for tiled attention: backward recomputes each tile's weights from the log-sum-exp.

    ``apply(Q, K, V, mask, settings)`` (``settings`` a :class:`TileSettings`) returns the
    context. Saved for backward: Q, K, V, the context O, the log-sum-exp L
    ``(..., n_q)``, the mask and the dropout seed; never an ``n_q x n_f`` matrix. With
    ``P = exp(e - L)``, ``dP = dO V^T`` and ``D = rowsum(dO * O)``, the score
    gradient is ``dS = P * (dP - D)``; then ``dQ = scale dS K``,
    ``dK = scale dS^T Q``, ``dV = P^T dO``, accumulated tile by tile. With dropout
    factors ``Z`` (regenerated from the seed, tile by tile): ``dV = (P Z)^T dO`` and
    ``dP = (dO V^T) Z``; ``D = rowsum(dO * O)`` still holds.
    With a non-finite input, the rows whose context is NaN get ``dO = 0`` and
    ``P = 0``, non-finite value rows are zeroed in ``dP``, and ``dQ``/``dK``
    come from :func:`~attnsurvey.attention.context` (a zero ``dS`` ignores a NaN row);
    finite inputs take the plain products.

    Args:
        Q: queries (float32 or float64; :func:`tiled_attend` converts half precision first).
        K: keys.
        V: values.
        mask: boolean, ``True`` = may attend, or None.
        settings: :class:`TileSettings` (causality, tile sizes, scale, dropout and its seed).

    Shape:
        Q ``(..., n_q, d_k)``, K ``(..., n_f, d_k)``, V ``(..., n_f, d_v)`` with equal batch
        dimensions (the caller expands them); mask broadcastable to ``(..., n_q, n_f)``.

    Returns:
        The context ``(..., n_q, d_v)``.
    """

    @staticmethod
    def forward(ctx, Q, K, V, mask, settings):
        """The context ``(..., n_q, d_v)`` (arguments as :meth:`apply`).

        mask: None or boolean broadcastable to ``(..., n_q, n_f)``, ``True`` = may attend.
        """
        O, L = finalize(*_attention_stats(Q, K, V, mask, settings))
        ctx.save_for_backward(Q, K, V, O, L, mask)
        ctx.settings = settings
        return O

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dO):
        Q, K, V, O, L, mask = ctx.saved_tensors
        settings: TileSettings = ctx.settings
        is_causal, block_q, block_k, scale = settings.is_causal, settings.block_q, settings.block_k, settings.scale
        Qs = Q * scale
        batch = Q.shape[:-2]
        finite = all(all_finite(t) for t in (Q, K, V, O))  # else every product selects (0 * NaN is NaN)
        zero = torch.zeros((), dtype=O.dtype, device=O.device)
        live_q = Vd = None  # non-finite inputs only: the queries whose context is finite; V with its bad rows zeroed
        if not finite:  # as attend's inert product: a NaN context passes no gradient, a NaN row of V gets none
            live_q = torch.isfinite(O).all(-1, keepdim=True)
            dO, O = torch.where(live_q, dO, zero), torch.where(live_q, O, zero)
            Vd = torch.where(torch.isfinite(V).all(-1, keepdim=True), V, zero)
        D = (dO * O).sum(-1)
        L = torch.where(torch.isfinite(L), L, torch.full_like(L, math.inf))  # empty rows: P = exp(-inf) = 0
        dQ, dK, dV = torch.zeros_like(Qs), torch.zeros_like(K), torch.zeros_like(V)
        n_q, n_f = Q.shape[-2], K.shape[-2]
        for ks in range(0, n_f, block_k):
            ke = min(ks + block_k, n_f)
            first_q = (ks // block_q) * block_q if is_causal else 0  # earlier query tiles see none of these keys
            for qs in range(first_q, n_q, block_q):
                qe = min(qs + block_q, n_q)
                Qi, Kj, Vj, dOi = Qs[..., qs:qe, :], K[..., ks:ke, :], V[..., ks:ke, :], dO[..., qs:qe, :]
                S = Qi @ Kj.transpose(-1, -2)
                allowed = _tile_mask(mask, is_causal, qs, qe, ks, ke, Q.device)
                if allowed is not None:
                    S = S.masked_fill_(~allowed, -math.inf)
                    Qi, Kj, Vj = _inert(Qi, allowed.any(-1)), _inert(Kj, allowed.any(-2)), _inert(Vj, allowed.any(-2))
                P = S.sub_(L[..., qs:qe].unsqueeze(-1)).exp_()
                product: Callable[[Tensor, Tensor], Tensor] = torch.matmul
                if live_q is not None and Vd is not None:  # non-finite inputs: every product selects
                    live = live_q[..., qs:qe, :] if allowed is None else allowed & live_q[..., qs:qe, :]
                    P, Vj, product = torch.where(live, P, zero), Vd[..., ks:ke, :], context  # 0, not NaN
                dP = dOi @ Vj.transpose(-1, -2)
                drop = _drop(settings, batch, qs, qe, ks, ke, P)  # the forward's dropout factors, regenerated
                if drop is None:
                    dV[..., ks:ke, :] += P.transpose(-1, -2) @ dOi
                else:
                    dV[..., ks:ke, :] += (P * drop).transpose(-1, -2) @ dOi
                    dP = dP.mul_(drop)
                dS = P.mul_(dP - D[..., qs:qe].unsqueeze(-1))
                dQ[..., qs:qe, :] += product(dS, Kj)  # context: a zero dS ignores a NaN row of K or Q
                dK[..., ks:ke, :] += product(dS.transpose(-1, -2), Qi)
        return dQ * scale, dK, dV, None, None


def check_qkv(
    Q: Tensor, K: Tensor, V: Tensor, what: str, n_q: str = "n_q", n_f: str = "n_f", q_symbol: str = "Q"
) -> None:
    """Validate queries, keys and values for a tiled computation.

    Args:
        Q: queries.
        K: keys.
        V: values.
        what: names the caller in messages.
        n_q: name of the query count (ring attention calls it a chunk length).
        n_f: name of the key count.
        q_symbol: name of the queries in messages (``Qs`` for scaled queries).

    Shape:
        Q ``(..., n_q, d_k)``, K ``(..., n_f, d_k)``, V ``(..., n_f, d_v)``.

    Raises:
        TypeError, ValueError: (:class:`~attnsurvey._checks.InputTypeError`, both) for a
            non-tensor or non-float tensor, or mixed dtypes; ValueError for ranks below 2 or
            mismatched ``d_k``/``n_f``.
    """
    for x, name, layout in (
        (Q, q_symbol, f"(..., {n_q}, d_k)"),
        (K, "K", f"(..., {n_f}, d_k)"),
        (V, "V", f"(..., {n_f}, d_v)"),
    ):
        as_tensor(x, name)
        check_min_rank(x, 2, name, layout)
    check_same_dtype(**{q_symbol: Q, "K": K, "V": V})
    check_dim_equal(Q.shape[-1], K.shape[-1], what, f"d_k of {q_symbol}", "d_k of K")
    check_dim_equal(K.shape[-2], V.shape[-2], what, f"{n_f} of K", f"{n_f} of V")


@catalogued(
    "extra:tiled-attention",
    title="Exact attention in linear memory: tiles, online softmax and a recomputing backward (FlashAttention)",
)
def tiled_attend(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None, **options: Unpack[TileOptions]) -> Tensor:
    """Exact scaled dot-product attention (Eq. 2-4) computed tile by tile in linear memory.

    Equal to ``attend(Q, K, V, mask)[0]`` (:func:`attnsurvey.attention.attend`) up to
    rounding, also around NaN/Inf: a query's context is NaN exactly when it may
    attend a non-finite key or value (or is itself non-finite). Differentiable in
    Q, K and V (:class:`TiledAttentionFunction`). Fully-masked query rows and
    ``n_f = 0`` give the zero context; ``d_k = 0`` is refused (:func:`tile_settings`). float16 and bfloat16 inputs
    are computed in float32 (forward and backward) and the context is returned in the
    input dtype. With ``dropout_p > 0`` each weight is dropped with that probability
    (the kept ones scaled by ``1 / (1 - p)``) by a keep-mask drawn from one seed
    (``dropout_seed``, or :func:`draw_dropout_seed` from ``generator``) that the
    backward pass regenerates; :func:`dropout_keep_mask` rebuilds it.

    Args:
        Q: queries.
        K: keys.
        V: values.
        mask: boolean, ``True`` = may attend; combined with ``is_causal`` by AND.
        **options: keyword-only :class:`TileOptions`: ``is_causal`` (query ``i`` may attend only
            to keys ``j <= i``), ``block_q``, ``block_k`` (tile sizes, any positive ints; ``n``
            need not be a multiple), ``scale`` (default ``1 / sqrt(d_k)``), ``dropout_p``,
            ``dropout_seed``, ``generator``; defaults ``False``, :data:`BLOCK_Q`,
            :data:`BLOCK_K`, ``None``, ``0``, ``None``, ``None`` (:func:`tile_settings`).

    Shape:
        Q ``(..., n_q, d_k)``, K ``(..., n_f, d_k)``, V ``(..., n_f, d_v)`` (batch dimensions
        broadcast); mask ``(..., n_q, n_f)``, or any shape that broadcasts to these scores
        (a 1-D key mask over the n_f keys too; a per-example key mask ``(B, 1, n_f)``).
        Returns ``(..., n_q, d_v)``.

    Returns:
        The context ``c``.

    Raises:
        ValueError: on shape, dtype or mask problems (a mask that does not broadcast to the
            scores, or an ambiguous rank-2 ``(n, n_f)`` mask with ``B == n_q == n``: pass
            ``mask[None]`` or ``mask[:, None, :]``), ``d_k = 0``, a non-finite scale or
            ``dropout_p`` outside ``[0, 1)``.
        TypeError: for non-integer block sizes or seeds, or an unknown option.
    """
    check_qkv(Q, K, V, "tiled attention")
    check_batch_broadcast(Q, K, "Q", "K")
    check_batch_broadcast(K, V, "K", "V")
    settings = tile_settings(Q.shape[-1], options)
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    n_q, n_f = Q.shape[-2], K.shape[-2]
    if mask is not None:
        check_attn_mask(mask, torch.Size((*batch, n_q, n_f)))
    if n_f == 0 or n_q == 0:
        return V.new_zeros((*batch, n_q, V.shape[-1]))
    dtype = Q.dtype
    if dtype in _LOW_PRECISION:  # scores, statistics and gradients in float32; the cast back is differentiable
        Q, K, V = Q.float(), K.float(), V.float()
    Q, K, V = Q.expand(*batch, *Q.shape[-2:]), K.expand(*batch, *K.shape[-2:]), V.expand(*batch, *V.shape[-2:])
    return TiledAttentionFunction.apply(Q, K, V, mask, settings).to(dtype)


def _check_head_sizes(what: str, n_q: int, n_f: int, d_k: int, d_v: int) -> None:
    """Counts ``n_q``, ``n_f`` (0 allowed) and head sizes ``d_k``, ``d_v`` (at least 1) for the cost formulas."""
    check_integers(what, minimum=0, n_q=n_q, n_f=n_f)
    check_integers(what, minimum=1, d_k=d_k, d_v=d_v)


def tile_bytes(n_q: int, n_f: int, block_q: int, block_k: int, d_k: int, d_v: int, itemsize: int = 4) -> dict:
    """Bytes each method holds beyond its inputs and output, for one head (analytic, not measured).

    ``plain``: the score matrix and the weights, ``2 n_q n_f``. ``tiled``: one
    tile of scores ``min(block_q, n_q) x min(block_k, n_f)``, the running
    ``m, l`` and the tile's partial context for ``block_q`` rows, plus the
    query tile's running triple.

    Args:
        n_q: number of queries.
        n_f: number of keys.
        block_q: queries per tile.
        block_k: keys per tile.
        d_k: key size (unused by the counts; kept for a uniform signature).
        d_v: value size.
        itemsize: bytes per element.

    Returns:
        ``{"plain": int, "tiled": int, "tiles": int}`` where ``tiles`` is the number of
        tiles visited (no causal skipping).

    Raises:
        ValueError: for a negative ``n_q``/``n_f``, or ``d_k``, ``d_v``, ``itemsize`` or a block
            size below 1, naming the symbol.
        TypeError: for a size that is not an int.
    """
    _check_head_sizes("tile_bytes", n_q, n_f, d_k, d_v)
    check_integers("tile_bytes", minimum=1, itemsize=itemsize, block_q=block_q, block_k=block_k)
    bq, bk = min(block_q, n_q), min(block_k, n_f)
    plain = 2 * n_q * n_f * itemsize
    tiled = (bq * bk + 2 * (2 * bq + bq * d_v)) * itemsize
    return {"plain": plain, "tiled": tiled, "tiles": math.ceil(n_q / block_q) * math.ceil(n_f / block_k)}


def attention_flops(n_q: int, n_f: int, d_k: int, d_v: int, backward: bool = False) -> int:
    """Multiply-add count x 2 (FLOPs) of the two matrix products, plain or tiled alike.

    Forward: ``Q K^T`` (``2 n_q n_f d_k``) and ``P V`` (``2 n_q n_f d_v``).
    The tiled backward recomputes ``Q K^T`` and adds ``dO V^T``, ``P^T dO``,
    ``dS K`` and ``dS^T Q``: ``2 n_q n_f (3 d_k + 2 d_v)`` more. Exponentials are not counted.

    Args:
        n_q: number of queries.
        n_f: number of keys.
        d_k: key size.
        d_v: value size.
        backward: add the tiled backward pass.

    Returns:
        The FLOP count.

    Raises:
        ValueError: for a negative ``n_q``/``n_f`` or ``d_k``/``d_v`` below 1, naming the symbol.
        TypeError: for a size that is not an int.
    """
    _check_head_sizes("attention_flops", n_q, n_f, d_k, d_v)
    fwd = 2 * n_q * n_f * (d_k + d_v)
    return fwd + (2 * n_q * n_f * (3 * d_k + 2 * d_v) if backward else 0)
