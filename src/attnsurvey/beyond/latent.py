"""Multi-head latent attention (MLA, DeepSeek-V2, Liu et al. 2024): a KV cache of one small latent per token.

Multi-head attention caches ``2 h d_h`` numbers per token and layer; grouped-query
and multi-query attention shrink that by sharing key/value heads
(:mod:`attnsurvey.beyond.decoding`). MLA keeps every head its own keys and values
but makes them all linear functions of one *latent* vector per token:

* joint key/value compression: ``c_t = W_DKV h_t`` (``d_c`` numbers), optionally
  RMS-normalised; head ``i`` has the keys ``k_{t,i}^C = W_UK^(i) c_t`` and the values
  ``v_{t,i} = W_UV^(i) c_t`` (``W_UK^(i)`` is ``(d_h, d_c)``, ``W_UV^(i)`` is ``(d_v, d_c)``);
* query compression: ``c_t^Q = W_DQ h_t`` (``d_cq`` numbers, optionally normalised) and
  ``q_{t,i}^C = W_UQ^(i) c_t^Q``; without it the query is projected from ``h_t`` directly;
* decoupled RoPE: a per-head rotated query part ``q_{t,i}^R = RoPE(W_QR^(i) c_t^Q)`` and
  ONE rotated key ``k_t^R = RoPE(W_KR h_t)`` (``d_R`` numbers) shared by all heads.

The score of head ``i`` between query ``s`` and key ``t`` is
``(q_{s,i}^C . k_{t,i}^C + q_{s,i}^R . k_t^R) / sqrt(d_h + d_R)``, i.e. the scaled dot
product of the concatenations ``[q^C; q^R]`` and ``[k^C; k^R]``.

Why the RoPE part is separate: without rotation, ``q^C . W_UK^(i) c_t = (W_UK^(i)T q^C) . c_t``,
so ``W_UK`` can be folded into the query and the attention runs against the cached
latents ``c_t`` themselves (the **absorbed** form); likewise ``W_UV`` folds into ``W_O``.
A rotation ``R_t`` between ``W_UK`` and ``c_t`` depends on the key's position, so no fixed
matrix absorbs ``R_s^T R_t W_UK``; the rotated part therefore gets its own key ``k^R``,
which is cached as it is. The cache holds ``d_c + d_R`` numbers per token and layer
(576 at DeepSeek-V2's sizes, against ``2 h d_h = 32768`` for multi-head attention).

Both forms attend through the one core, :func:`attnsurvey.attention.attend_unchecked`,
with masks combined by :func:`attnsurvey.attention.canonical_masks`, and split and merge
heads with :mod:`attnsurvey.query_related.multihead`'s helpers:

* naive (:func:`latent_attention` with ``form="naive"``): materialise every head's keys
  ``[k^C; k^R]`` and values from ``c``; ``h`` key/value heads of width ``d_h + d_R``;
* absorbed (``form="absorbed"``): queries ``[W_UK^(i)T q^C; q^R]`` of width ``d_c + d_R``
  against ONE key head ``[c; k^R]`` and ONE value head ``c`` (a multi-query attention in
  the latent space, with the scale ``1/sqrt(d_h + d_R)`` of the naive form), then
  ``W_O [W_UV^(i)]``, folded once (:func:`absorbed_output`).

:class:`LatentCache` is the decode-time cache: it holds exactly ``c`` and ``k^R``.
:func:`cache_elements_per_token` counts the numbers per token a cache holds from the
tensors it stores, for it and for :class:`~attnsurvey.beyond.decoding.KVCache` (MHA, GQA, MQA).

Shapes: batch-first rows ``(..., n, d)``; heads as the axis before the sequence. Weights
keep the ``nn.Linear`` layout ``(d_out, d_in)``; head ``i`` owns rows ``i*d_h:(i+1)*d_h``
of ``W_UK``, ``W_UQ`` (and ``i*d_R:(i+1)*d_R`` of ``W_QR``, ``i*d_v:(i+1)*d_v`` of ``W_UV``).
Masks are boolean, ``True`` = may attend. Biases are left out (DeepSeek-V2 has none).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from .._checks import (
    as_tensor,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_positive,
    check_rank,
    check_same_dtype,
    check_weight,
)
from ..attention import CoreSettings, attend_unchecked, canonical_masks, refuse_overflowing_scores
from ..catalog import catalogued
from ..masking import require_boolean_mask, zero_unattended
from ..query_related.multihead import head_mask, merge_heads, split_heads
from .decoding import KVCache, offset_causal_mask
from .positions import RopeConvention, _check_base, _check_convention, apply_rope

CHAPTER = "chapters/ch06_5_latent_and_shared_caches.ipynb"

#: The two ways to compute MLA: per-head keys and values materialised, or W_UK and W_UV folded away.
LatentForm = Literal["naive", "absorbed"]
FORMS: tuple[str, ...] = ("naive", "absorbed")

Norm = Callable[[Tensor], Tensor]


class LatentWeights(NamedTuple):
    """The weights of one MLA layer (``nn.Linear`` layout, ``(d_out, d_in)``; no biases).

    Args:
        W_DKV: the joint key/value down-projection, ``(d_c, d)``.
        W_UK: the key up-projections of the ``h`` heads, stacked, ``(h*d_h, d_c)``.
        W_UV: the value up-projections, stacked, ``(h*d_v, d_c)``.
        W_KR: the shared RoPE key projection, ``(d_R, d)``.
        W_UQ: the query up-projections, ``(h*d_h, d_cq)`` (``(h*d_h, d)`` without ``W_DQ``).
        W_QR: the per-head RoPE query projections, ``(h*d_R, d_cq)`` (``(h*d_R, d)`` without ``W_DQ``).
        W_O: the output projection, ``(d_o, h*d_v)``.
        W_DQ: the query down-projection ``(d_cq, d)``, or None (queries from ``h_t`` directly).
        norm_kv: applied to ``c`` (DeepSeek's RMSNorm), or None.
        norm_q: applied to ``c^Q``, or None.
    """

    W_DKV: Tensor
    W_UK: Tensor
    W_UV: Tensor
    W_KR: Tensor
    W_UQ: Tensor
    W_QR: Tensor
    W_O: Tensor
    W_DQ: Tensor | None = None
    norm_kv: Norm | None = None
    norm_q: Norm | None = None


class _Sizes(NamedTuple):
    """The sizes of an MLA layer read from its weights (:func:`_check_weights`)."""

    d: int  #: the input width
    h: int  #: heads
    d_c: int  #: the key/value latent
    d_h: int  #: the per-head key/query (non-rotated) width
    d_v: int  #: the per-head value width
    d_R: int  #: the RoPE part of a key or query
    d_o: int  #: the output width


def _check_weights(W: LatentWeights, h: int) -> _Sizes:
    """Check the shapes of an MLA layer's weights against each other and read its sizes.

    Args:
        W: the weights.
        h: the number of heads.

    Returns:
        The sizes.

    Raises:
        TypeError: if a weight is not a floating-point tensor or the weights' dtypes differ.
        ValueError: if ``h`` is not an integer >= 1, does not divide ``W_UK``, ``W_UV``, ``W_QR``,
            a width is 0, ``d_R`` is odd, or a weight's shape disagrees with the others (the
            message names the weight, its layout and both shapes).
    """
    check_integers("MLA", minimum=1, h=h)
    for name in ("W_DKV", "W_UK", "W_UV", "W_KR", "W_UQ", "W_QR", "W_O"):
        check_rank(getattr(W, name), 2, name, "(d_out, d_in)")
    d_c, d = W.W_DKV.shape
    d_R = W.W_KR.shape[0]
    for name, rows in (("W_UK", "h*d_h"), ("W_UV", "h*d_v"), ("W_QR", "h*d_R")):
        if getattr(W, name).shape[0] % h:
            raise ValueError(
                f"{name} must have shape ({rows}, d_in) with h={h} dividing its rows, got {tuple(getattr(W, name).shape)}"
            )
    d_h, d_v = W.W_UK.shape[0] // h, W.W_UV.shape[0] // h
    check_integers("MLA", minimum=1, d_c=d_c, d=d, d_h=d_h, d_v=d_v, d_R=d_R)
    if d_R % 2:
        raise ValueError(f"RoPE rotates pairs: d_R must be even, got W_KR of shape {tuple(W.W_KR.shape)}")
    d_q = d if W.W_DQ is None else check_rank(W.W_DQ, 2, "W_DQ", "(d_cq, d)").shape[0]
    if W.W_DQ is not None:
        check_weight(W.W_DQ, (d_q, d), "W_DQ", "(d_cq, d)")
    in_q = "(h*{}, d_cq)" if W.W_DQ is not None else "(h*{}, d) without W_DQ"
    check_weight(W.W_UK, (h * d_h, d_c), "W_UK", "(h*d_h, d_c)")
    check_weight(W.W_UV, (h * d_v, d_c), "W_UV", "(h*d_v, d_c)")
    check_weight(W.W_KR, (d_R, d), "W_KR", "(d_R, d)")
    check_weight(W.W_UQ, (h * d_h, d_q), "W_UQ", in_q.format("d_h"))
    check_weight(W.W_QR, (h * d_R, d_q), "W_QR", in_q.format("d_R"))
    check_weight(W.W_O, (W.W_O.shape[0], h * d_v), "W_O", "(d_o, h*d_v)")
    check_integers("MLA", minimum=1, d_o=W.W_O.shape[0])
    named = {n: getattr(W, n) for n in ("W_DKV", "W_UK", "W_UV", "W_KR", "W_UQ", "W_QR", "W_O", "W_DQ")}
    check_same_dtype(**{n: t for n, t in named.items() if t is not None})
    return _Sizes(d, h, d_c, d_h, d_v, d_R, W.W_O.shape[0])


def _score_scale(d_h: int, d_R: int) -> float:
    """The factor of every MLA score: ``1/sqrt(d_h + d_R)``, the width of the naive form's keys."""
    return 1.0 / math.sqrt(d_h + d_R)


def _check_input(X: Tensor, W: LatentWeights, d: int) -> None:
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d)")
    check_dim_equal(X.shape[-1], d, "MLA", "d of X", "d of W_DKV (its columns)")
    check_same_dtype(X=X, W_DKV=W.W_DKV)


def _check_form(form: object) -> None:
    if form not in FORMS:
        raise ValueError(f"MLA form must be one of {FORMS}, got form={form!r}")


@catalogued("extra:mla")
def latent_kv(
    X: Tensor, W: LatentWeights, offset: int = 0, base: float = 10000.0, convention: RopeConvention = "interleaved"
) -> tuple[Tensor, Tensor]:
    """What MLA caches per token: the latent ``c_t = norm(W_DKV h_t)`` and the shared RoPE key ``k_t^R``.

    ``k_t^R = RoPE(W_KR h_t)`` with row ``t`` at position ``offset + t``
    (:func:`~attnsurvey.beyond.positions.apply_rope`).

    Args:
        X: the inputs ``h_t``, one row per position.
        W: the layer's weights (only ``W_DKV``, ``W_KR`` and ``norm_kv`` are read; unchecked here).
        offset: the position of the first row.
        base: the RoPE frequency base.
        convention: the RoPE pair layout.

    Shape:
        X: ``(..., n, d)``; returns c ``(..., n, d_c)`` and k_R ``(..., n, d_R)``.

    Returns:
        ``(c, k_R)``.

    Raises:
        ValueError: as :func:`~attnsurvey.beyond.positions.apply_rope`.
    """
    c = X @ W.W_DKV.T
    c = c if W.norm_kv is None else W.norm_kv(c)
    return c, apply_rope(X @ W.W_KR.T, offset, base, convention)


@catalogued("extra:mla")
def latent_queries(
    X: Tensor,
    W: LatentWeights,
    h: int,
    offset: int = 0,
    base: float = 10000.0,
    convention: RopeConvention = "interleaved",
) -> tuple[Tensor, Tensor]:
    """The per-head queries of MLA: ``q^C = W_UQ c^Q`` and the rotated ``q^R = RoPE(W_QR c^Q)``.

    ``c^Q = norm_q(W_DQ h_t)``, or ``h_t`` itself when ``W.W_DQ`` is None; row ``t`` sits
    at position ``offset + t``.

    Args:
        X: the inputs ``h_t``.
        W: the layer's weights (unchecked here).
        h: the number of heads.
        offset: the position of the first row.
        base: the RoPE frequency base.
        convention: the RoPE pair layout.

    Shape:
        X: ``(..., n, d)``; returns q_C ``(..., h, n, d_h)`` and q_R ``(..., h, n, d_R)``.

    Returns:
        ``(q_C, q_R)``.

    Raises:
        ValueError: as :func:`~attnsurvey.beyond.positions.apply_rope`.
    """
    c_Q = X if W.W_DQ is None else X @ W.W_DQ.T
    c_Q = c_Q if W.norm_q is None or W.W_DQ is None else W.norm_q(c_Q)
    q_R = apply_rope(split_heads(c_Q @ W.W_QR.T, h), offset, base, convention)
    return split_heads(c_Q @ W.W_UQ.T, h), q_R


@catalogued("extra:mla-absorbed")
def absorbed_query(q_C: Tensor, W_UK: Tensor) -> Tensor:
    """Fold ``W_UK`` into the queries: ``W_UK^(i)T q_i^C`` per head, so that ``q_i^C . k_i^C = (W_UK^(i)T q_i^C) . c``.

    Args:
        q_C: the non-rotated per-head queries.
        W_UK: the stacked key up-projections.

    Shape:
        q_C: ``(..., h, n, d_h)``; W_UK: ``(h*d_h, d_c)``; returns ``(..., h, n, d_c)``.

    Returns:
        The queries in the latent space.

    Raises:
        TypeError: if q_C or W_UK is not a floating-point tensor, or their dtypes differ.
        ValueError: if q_C has rank < 3 or W_UK is not ``(h*d_h, d_c)`` for q_C's ``h`` and ``d_h``.
    """
    as_tensor(q_C, "q_C")
    check_min_rank(q_C, 3, "q_C", "(..., h, n, d_h)")
    h, d_h = q_C.shape[-3], q_C.shape[-1]
    check_weight(W_UK, (h * d_h, as_tensor(W_UK, "W_UK").shape[-1]), "W_UK", "(h*d_h, d_c) for q_C's h and d_h")
    check_same_dtype(q_C=q_C, W_UK=W_UK)
    return q_C @ W_UK.reshape(h, d_h, -1)  # head i: (n, d_h) @ (d_h, d_c)


@catalogued("extra:mla-absorbed")
def absorbed_output(W_O: Tensor, W_UV: Tensor, h: int) -> Tensor:
    """Fold ``W_UV`` into ``W_O``: ``W_O^(i) W_UV^(i)`` per head, stacked as the columns of one ``(d_o, h*d_c)`` matrix.

    Then ``W_O concat_i(W_UV^(i) o_i) = W_OV concat_i(o_i)`` for latent head contexts ``o_i``.

    Args:
        W_O: the output projection.
        W_UV: the stacked value up-projections.
        h: the number of heads.

    Shape:
        W_O: ``(d_o, h*d_v)``; W_UV: ``(h*d_v, d_c)``; returns ``(d_o, h*d_c)``.

    Returns:
        The folded output projection ``W_OV``.

    Raises:
        TypeError: if W_O or W_UV is not a floating-point tensor, or their dtypes differ.
        ValueError: if ``h`` is not an integer >= 1 or the shapes do not fit ``(d_o, h*d_v)`` and ``(h*d_v, d_c)``.
    """
    check_integers("absorbed_output", minimum=1, h=h)
    for sym, W in (("W_O", W_O), ("W_UV", W_UV)):
        check_rank(W, 2, sym, "(d_o, h*d_v)" if sym == "W_O" else "(h*d_v, d_c)")
    if W_UV.shape[0] % h or W_O.shape[1] != W_UV.shape[0]:
        raise ValueError(
            f"absorbed_output needs W_O (d_o, h*d_v) and W_UV (h*d_v, d_c) with h={h} dividing h*d_v, "
            f"got W_O {tuple(W_O.shape)} and W_UV {tuple(W_UV.shape)}"
        )
    check_same_dtype(W_O=W_O, W_UV=W_UV)
    d_o, d_c = W_O.shape[0], W_UV.shape[-1]
    W_Oi = W_O.reshape(d_o, h, -1).transpose(0, 1)  # (h, d_o, d_v): head i's columns
    return (W_Oi @ W_UV.reshape(h, -1, d_c)).transpose(0, 1).reshape(d_o, h * d_c)


def _latent_heads(
    q_C: Tensor,
    q_R: Tensor,
    c: Tensor,
    k_R: Tensor,
    W: LatentWeights,
    sizes: _Sizes,
    allowed: Tensor | None,
    form: str,
    need_weights: bool,
) -> tuple[Tensor, Tensor | None]:
    """The heads of MLA on checked inputs: one call of the core in either form, then ``W_O``."""
    settings = CoreSettings(allowed, scale=_score_scale(sizes.d_h, sizes.d_R), need_weights=need_weights)
    k_R = k_R.unsqueeze(-3)  # (..., 1, n_f, d_R): one RoPE key for all heads
    if form == "naive":  # per-head keys [k^C; k^R] and values, materialised from c
        k_C, v = split_heads(c @ W.W_UK.T, sizes.h), split_heads(c @ W.W_UV.T, sizes.h)
        k = torch.cat([k_C, k_R.expand(*k_C.shape[:-1], sizes.d_R)], dim=-1)
        q = torch.cat([q_C, q_R], dim=-1)
        o, a = attend_unchecked(q, k, v, settings)
        refuse_overflowing_scores(o, q, k, settings)  # finite inputs whose scores overflow: an error, not NaN
        return merge_heads(o) @ W.W_O.T, a
    # absorbed: every head attends to one key head [c; k^R] and one value head c (the cached latents)
    q = torch.cat([absorbed_query(q_C, W.W_UK), q_R], dim=-1)
    c1 = c.unsqueeze(-3)
    k = torch.cat([c1, k_R], dim=-1)
    o, a = attend_unchecked(q, k, c1, settings)
    refuse_overflowing_scores(o, q, k, settings)
    return merge_heads(o) @ absorbed_output(W.W_O, W.W_UV, sizes.h).T, a


def _allowed(mask: Tensor | None, is_causal: bool, X: Tensor, c: Tensor, h: int) -> Tensor | None:
    """The boolean mask in the heads' layout (``(..., h, n_q, n_f)``), from the caller's mask and causality."""
    batch = tuple(torch.broadcast_shapes(X.shape[:-2], c.shape[:-2]))
    n_q, n_f = X.shape[-2], c.shape[-2]
    shared = head_mask(mask, len(batch) + 2, n_q, n_f, batch)  # a mask without a head axis gets one
    allowed, _ = canonical_masks(
        torch.Size((*batch, h, n_q, n_f)), shared, is_causal=is_causal, dtype=c.dtype, device=c.device
    )
    return allowed


@catalogued("extra:mla", title="Multi-head latent attention (MLA, DeepSeek-V2): keys and values from one cached latent")
@catalogued(
    "extra:mla-absorbed",
    title="MLA absorbed: W_UK folded into the queries, W_UV into W_O; attention on the latent cache",
)
def latent_attention(
    X: Tensor,
    W: LatentWeights,
    h: int,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    form: LatentForm = "naive",
    need_weights: bool = True,
    base: float = 10000.0,
    convention: RopeConvention = "interleaved",
) -> tuple[Tensor, Tensor | None]:
    """Multi-head latent attention (self-attention) of the rows of ``X`` at positions ``0..n-1``.

    ``form="naive"`` materialises the per-head keys and values from the latent ``c``;
    ``form="absorbed"`` attends with ``W_UK`` folded into the queries and ``W_UV`` into
    ``W_O``. Both give the same output up to rounding. Rows of X that a boolean mask of X's
    rank lets no query attend and that hold NaN/Inf are set to 0 before they are projected,
    so they reach neither the outputs nor any weight's gradient (as in the multi-head stack).

    Args:
        X: the inputs ``h_t``.
        W: the layer's weights.
        h: the number of heads.
        mask: boolean, ``True`` = may attend; shared by the heads ``(..., n, n)`` or per head
            ``(..., h, n, n)``.
        is_causal: query ``s`` may attend to keys ``t <= s``.
        form: ``"naive"`` or ``"absorbed"``.
        need_weights: return the weights.
        base: the RoPE frequency base.
        convention: the RoPE pair layout, ``"interleaved"`` (the book's, DeepSeek's) or ``"half"``.

    Shape:
        X: ``(..., n, d)``; returns ``(..., n, d_o)`` and weights ``(..., h, n, n)``.

    Returns:
        ``(output, weights)`` (weights None when ``need_weights=False``).

    Raises:
        TypeError: if X or a weight is not a floating-point tensor, or their dtypes differ.
        ValueError: for weights that disagree (:func:`_check_weights`), X of the wrong
            width, a mask that is not boolean or has the wrong shape, an unknown form, or a bad
            RoPE base or convention.
    """
    sizes = _check_weights(W, h)
    _check_input(X, W, sizes.d)
    _check_form(form)
    _check_base(base)
    _check_convention(convention)
    require_boolean_mask(mask, "MLA")
    X = zero_unattended(X, None, mask)  # rows no query may attend, if non-finite, reach no weight's gradient
    c, k_R = latent_kv(X, W, 0, base, convention)
    q_C, q_R = latent_queries(X, W, h, 0, base, convention)
    allowed = _allowed(mask, is_causal, X, c, h)
    return _latent_heads(q_C, q_R, c, k_R, W, sizes, allowed, form, need_weights)


@catalogued("extra:mla-absorbed")
class LatentCache:
    """The decode-time cache of MLA: the latents ``c`` and the shared RoPE keys ``k^R``, nothing else.

    Preallocated for ``max_len`` positions; :meth:`append` writes after the filled part.

    Args:
        batch: ``B``, sequences.
        max_len: positions reserved per sequence.
        d_c: the latent width.
        d_R: the RoPE key width.
        dtype: the dtype of the buffers (default float32).
        device: where they live.

    Shape:
        c: ``(B, max_len, d_c)``; k_R: ``(B, max_len, d_R)``.

    Raises:
        ValueError: if a size is not an integer >= 1.
    """

    def __init__(
        self,
        batch: int,
        max_len: int,
        d_c: int,
        d_R: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_integers("LatentCache", minimum=1, batch=batch, max_len=max_len, d_c=d_c, d_R=d_R)
        self.c = torch.zeros(batch, max_len, d_c, dtype=dtype, device=device)
        self.k_R = torch.zeros(batch, max_len, d_R, dtype=dtype, device=device)
        self.length = 0

    @property
    def max_len(self) -> int:
        """Positions reserved per sequence."""
        return self.c.shape[-2]

    def append(self, c: Tensor, k_R: Tensor) -> tuple[Tensor, Tensor]:
        """Write the latents and RoPE keys of ``n_new`` positions after the filled part.

        Args:
            c: the new latents.
            k_R: their rotated RoPE keys.

        Shape:
            c: ``(B, n_new, d_c)``; k_R: ``(B, n_new, d_R)``; returns ``(B, length, d_c)`` and ``(B, length, d_R)``.

        Returns:
            Views of everything cached so far.

        Raises:
            ValueError: if a block has the wrong shape or dtype, or the cache would overflow.
        """
        n_new = c.shape[-2] if isinstance(c, Tensor) and c.dim() == 3 else -1
        for sym, t, buf, layout in (("c", c, self.c, "(B, n_new, d_c)"), ("k_R", k_R, self.k_R, "(B, n_new, d_R)")):
            as_tensor(t, sym)
            expected = (buf.shape[0], n_new, buf.shape[-1])
            if tuple(t.shape) != expected or t.dtype != buf.dtype:
                raise ValueError(
                    f"LatentCache.append: {sym} must have shape {layout} = {expected} and dtype {buf.dtype}, "
                    f"got {tuple(t.shape)} {t.dtype}"
                )
        if self.length + n_new > self.max_len:
            raise ValueError(f"LatentCache full: {self.length} cached + {n_new} new > max_len={self.max_len}")
        end = self.length + n_new
        self.c[:, self.length : end], self.k_R[:, self.length : end] = c, k_R
        self.length = end
        return self.c[:, :end], self.k_R[:, :end]

    def tensors(self) -> tuple[Tensor, ...]:
        """The tensors the cache holds, ``(c, k_R)`` (read by :func:`cache_elements_per_token`)."""
        return self.c, self.k_R


@catalogued("extra:mla-absorbed")
def cache_elements_per_token(cache: LatentCache | KVCache) -> int:
    """The numbers a cache stores per token (and layer), counted from the tensors it holds.

    Every stored tensor has the batch first and the positions second to last; the count is
    ``sum(t.numel()) / (B * max_len)``: ``d_c + d_R`` for a :class:`LatentCache`,
    ``2 * g * d_h`` for a :class:`~attnsurvey.beyond.decoding.KVCache` with ``g`` key/value
    heads (``g = h``: MHA; ``1 < g < h``: GQA; ``g = 1``: MQA).

    Args:
        cache: a latent cache or a key/value cache.

    Returns:
        The number of stored elements per token.

    Raises:
        TypeError: for another object.
    """
    if isinstance(cache, LatentCache):
        stored = cache.tensors()
    elif isinstance(cache, KVCache):
        stored = (cache.K, cache.V)
    else:
        raise TypeError(f"cache must be a LatentCache or a KVCache, got {type(cache).__name__}")
    return sum(t.numel() // (t.shape[0] * t.shape[-2]) for t in stored)


@catalogued("extra:mla-absorbed")
def latent_decode_step(
    X: Tensor,
    W: LatentWeights,
    h: int,
    cache: LatentCache,
    *,
    form: LatentForm = "absorbed",
    need_weights: bool = True,
    base: float = 10000.0,
    convention: RopeConvention = "interleaved",
) -> tuple[Tensor, Tensor | None]:
    """Decode ``n_new`` positions with a :class:`LatentCache`: append their ``c`` and ``k^R``, attend causally.

    The new rows sit at positions ``cache.length ..``; query ``s`` attends to every cached
    position and to the new ones up to its own
    (:func:`~attnsurvey.beyond.decoding.offset_causal_mask`). The absorbed form reads only
    the cache's ``c`` and ``k^R``.

    Args:
        X: the inputs of the new positions.
        W: the layer's weights.
        h: the number of heads.
        cache: the layer's cache (updated in place).
        form: ``"absorbed"`` (default) or ``"naive"``.
        need_weights: return the weights.
        base: the RoPE frequency base.
        convention: the RoPE pair layout.

    Shape:
        X: ``(B, n_new, d)``; returns ``(B, n_new, d_o)`` and weights ``(B, h, n_new, length)``.

    Returns:
        ``(output, weights)``.

    Raises:
        TypeError: if X or a weight is not a floating-point tensor, or their dtypes differ.
        ValueError: as :func:`latent_attention`, for X not of rank 3, or a cache of other sizes,
            dtype or batch, or one that would overflow.
    """
    sizes = _check_weights(W, h)
    check_rank(X, 3, "X", "(B, n_new, d)")
    _check_input(X, W, sizes.d)
    _check_form(form)
    _check_base(base)
    _check_convention(convention)
    offset, n_new = cache.length, X.shape[-2]
    c_new, k_R_new = latent_kv(X, W, offset, base, convention)
    q_C, q_R = latent_queries(X, W, h, offset, base, convention)
    c, k_R = cache.append(c_new, k_R_new)
    allowed = offset_causal_mask(n_new, cache.length, device=X.device)
    return _latent_heads(q_C, q_R, c, k_R, W, sizes, allowed, form, need_weights)


@catalogued("extra:mla")
class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention with learned weights: the module form of :func:`latent_attention`.

    Holds ``W_DQ`` (when ``d_cq`` is given), ``W_UQ``, ``W_QR``, ``W_DKV``, ``W_KR``, ``W_UK``,
    ``W_UV``, ``W_O`` as bias-free ``nn.Linear`` layers and, with ``rms_norm=True``, the
    ``nn.RMSNorm`` of the latents (``norm_kv``, and ``norm_q`` with query compression), as
    DeepSeek-V2/V3 apply them. ``forward(X, mask=None, *, is_causal=False, form="naive",
    need_weights=True)`` is :func:`latent_attention` (mask boolean, ``True`` = may attend); :meth:`decode` is
    :func:`latent_decode_step` with a cache from :meth:`new_cache`.

    Args:
        d_model: the input and output width ``d``.
        h: the number of heads.
        d_c: the key/value latent width.
        d_h: the per-head width of the non-rotated keys and queries.
        d_R: the RoPE width (even).
        d_cq: the query latent width (None: no query compression).
        d_v: the per-head value width (default ``d_h``).
        rms_norm: normalise the latents with ``nn.RMSNorm`` (learned gain).
        eps: the RMSNorm's epsilon.
        base: the RoPE frequency base.
        convention: the RoPE pair layout.
        device: where the parameters live.
        dtype: the parameters' dtype.

    Shape:
        forward: X ``(..., n, d_model)``; returns ``(..., n, d_model)`` and weights ``(..., h, n, n)``.

    Raises:
        ValueError: if a size is not an integer >= 1, ``d_R`` is odd, ``eps`` is not a finite number > 0, or the
            RoPE base or convention is bad.
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        d_c: int,
        d_h: int,
        d_R: int,
        d_cq: int | None = None,
        d_v: int | None = None,
        *,
        rms_norm: bool = True,
        eps: float = 1e-6,
        base: float = 10000.0,
        convention: RopeConvention = "interleaved",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        d_v = d_h if d_v is None else d_v
        check_integers("MultiHeadLatentAttention", minimum=1, d_model=d_model, h=h, d_c=d_c, d_h=d_h, d_R=d_R, d_v=d_v)
        if d_cq is not None:
            check_integers("MultiHeadLatentAttention", minimum=1, d_cq=d_cq)
        if d_R % 2:
            raise ValueError(f"RoPE rotates pairs: d_R must be even, got d_R={d_R}")
        check_positive("MultiHeadLatentAttention", eps=eps)
        self.base, self.convention, self.h = _check_base(base), convention, h
        _check_convention(convention)
        d_q = d_model if d_cq is None else d_cq

        def linear(d_in: int, d_out: int) -> nn.Linear:
            return nn.Linear(d_in, d_out, bias=False, device=device, dtype=dtype)

        def rms(width: int) -> nn.RMSNorm:
            return nn.RMSNorm(width, eps=eps, device=device, dtype=dtype)

        self.W_DQ = None if d_cq is None else linear(d_model, d_cq)
        self.W_UQ, self.W_QR = linear(d_q, h * d_h), linear(d_q, h * d_R)
        self.W_DKV, self.W_KR = linear(d_model, d_c), linear(d_model, d_R)
        self.W_UK, self.W_UV = linear(d_c, h * d_h), linear(d_c, h * d_v)
        self.W_O = linear(h * d_v, d_model)
        self.norm_kv = rms(d_c) if rms_norm else None
        self.norm_q = rms(d_cq) if rms_norm and d_cq is not None else None

    def weights(self) -> LatentWeights:
        """The module's weights as a :class:`LatentWeights` (the parameters themselves, no copy).

        Returns:
            The weights and norms.
        """
        return LatentWeights(
            self.W_DKV.weight, self.W_UK.weight, self.W_UV.weight, self.W_KR.weight, self.W_UQ.weight,
            self.W_QR.weight, self.W_O.weight, None if self.W_DQ is None else self.W_DQ.weight, self.norm_kv,
            self.norm_q,
        )  # fmt: skip

    def new_cache(self, batch: int, max_len: int) -> LatentCache:
        """An empty :class:`LatentCache` for this layer (its ``d_c``, ``d_R``, dtype and device).

        Args:
            batch: sequences.
            max_len: positions reserved per sequence.

        Returns:
            The cache.
        """
        W = self.W_DKV.weight
        return LatentCache(batch, max_len, W.shape[0], self.W_KR.weight.shape[0], W.dtype, W.device)

    def forward(
        self,
        X: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        form: LatentForm = "naive",
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        return latent_attention(
            X, self.weights(), self.h, mask, is_causal=is_causal, form=form, need_weights=need_weights,
            base=self.base, convention=self.convention,
        )  # fmt: skip

    def decode(
        self, X: Tensor, cache: LatentCache, *, form: LatentForm = "absorbed", need_weights: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        """One decoding step: :func:`latent_decode_step` with this layer's weights.

        Args:
            X: the inputs of the new positions.
            cache: the layer's cache (from :meth:`new_cache`; updated in place).
            form: ``"absorbed"`` (default) or ``"naive"``.
            need_weights: return the weights.

        Shape:
            X: ``(B, n_new, d_model)``; returns ``(B, n_new, d_model)`` and weights ``(B, h, n_new, length)``.

        Returns:
            ``(output, weights)``.

        Raises:
            ValueError: as :func:`latent_decode_step`.
        """
        return latent_decode_step(
            X, self.weights(), self.h, cache, form=form, need_weights=need_weights, base=self.base,
            convention=self.convention,
        )  # fmt: skip
