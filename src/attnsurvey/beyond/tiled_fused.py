"""Tiled attention at the fused kernel's speed: one fused CPU kernel per tile, the book's merge between tiles.

:func:`~attnsurvey.beyond.tiled.tiled_attend` spells out each tile's work (scores,
maximum, ``exp``, sum, two products) so that a reader sees every step of the online
softmax; on a CPU each of those steps is a separate pass over the tile, which makes
it about 1.5 times slower than the fused kernel behind
``F.scaled_dot_product_attention``. This module is the *same algorithm* with the
inner step fused: every ``block_q x block_k`` tile is handed to torch's CPU flash
kernel (``aten._scaled_dot_product_flash_attention_for_cpu``), which returns the
tile's context ``o`` and log-sum-exp ``lse`` in one pass. A tile's result is a partial
softmax result in the book's form, ``(m, l, acc) = (lse, 1, o)`` (the weights
``exp(e - lse)`` sum to 1 and weight the values to ``o``), so consecutive key tiles
merge with :func:`~attnsurvey.beyond.tiled.online_softmax_merge`, the merge that
ring attention uses between processes, and :func:`~attnsurvey.beyond.tiled.finalize`
turns the result into the context and the global log-sum-exp ``L``.

The backward pass (:class:`FusedTiledAttentionFunction`) saves only Q, K, V, the
context O and ``L`` and calls the kernel's backward
(``aten._scaled_dot_product_flash_attention_for_cpu_backward``) once per tile with the
*global* O and L: it recomputes the tile's weights as ``exp(e - L)`` and uses
``D = rowsum(dO * O)``, so each call returns exactly the tile's share of dQ, dK and
dV (the derivation of :class:`~attnsurvey.beyond.tiled.TiledAttentionFunction`), and
the shares add up. No ``n_q x n_f`` tensor is formed: beyond the inputs and outputs,
memory is one tile's causal bias and what the kernel allocates for one tile.

Scope: this path is for speed and covers what the benchmark measures - scaled
dot-product attention with ``is_causal``, a score ``scale`` and tile sizes. Boolean
masks, dropout and the NaN bookkeeping of :func:`~attnsurvey.attention.attend` are
the teaching version's (:func:`~attnsurvey.beyond.tiled.tiled_attend`); with finite
inputs the two agree to rounding (tests/test_beyond_tiled_fused.py).
"""

from __future__ import annotations

import math
from typing import Any, Unpack

import torch
from torch import Tensor

from .._checks import check_batch_broadcast
from ..catalog import catalogued
from .tiled import Stats, TileOptions, TileSettings, check_qkv, finalize, online_softmax_merge, tile_settings

CHAPTER = "chapters/ch06_tiled_attention.ipynb"
#: Default tile sizes of the fused path: the kernel blocks each tile for the cache itself
#: (its own buffers do not grow with the tile), so the tile size only sets how many calls
#: and merges there are: 2048 x 2048 was faster than 1024 x 1024 at n = 4096 and 16,384 on
#: one CPU thread (``benchmarks/tiled_attention.py --speed-only``).
FUSED_BLOCK_Q = 2048
FUSED_BLOCK_K = 2048
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _causal_tile(qs: int, qe: int, ks: int, ke: int, like: Tensor) -> tuple[bool, Tensor | None]:
    """How the kernel masks a tile of a causal call: ``(is_causal, bias)``.

    A tile whose keys all precede its queries needs no mask ``(False, None)``; a tile on the
    diagonal that starts at the same position for queries and keys is the kernel's own
    ``is_causal`` (top-left aligned) ``(True, None)``; any other tile gets an additive bias
    ``(b_q, b_k)`` of 0 and ``-inf`` ``(False, bias)``.
    """
    if ke - 1 <= qs:
        return False, None
    if qs == ks:
        return True, None
    rows = torch.arange(qs, qe, device=like.device)[:, None]
    cols = torch.arange(ks, ke, device=like.device)[None, :]
    bias = torch.zeros((qe - qs, ke - ks), dtype=like.dtype, device=like.device)
    return False, bias.masked_fill_(cols > rows, -math.inf)


def _tile_mask_args(
    settings: TileSettings, qs: int, qe: int, ks: int, ke: int, like: Tensor
) -> tuple[bool, Tensor | None]:
    """``(is_causal, attn_mask)`` of one tile for the kernel (and its backward)."""
    return _causal_tile(qs, qe, ks, ke, like) if settings.is_causal else (False, None)


def _fused_tile(Qi: Tensor, Kj: Tensor, Vj: Tensor, settings: TileSettings, qs: int, ks: int) -> Stats:
    """The running statistics ``(m, l, acc)`` of one tile from one call of the fused kernel.

    The kernel returns the tile's context ``o`` and log-sum-exp ``lse``, i.e. ``(lse, 1, o)``.
    A causal tile may hold query rows before its first key: the kernel gives them ``o = 0``
    and ``lse = 0``; they are the merge's identity ``(-inf, 0, 0)``.
    """
    qe, ke = qs + Qi.shape[-2], ks + Kj.shape[-2]
    causal, bias = _tile_mask_args(settings, qs, qe, ks, ke, Qi)
    o, lse = _FLASH(Qi, Kj, Vj, is_causal=causal, attn_mask=bias, scale=settings.scale)
    if not settings.is_causal or qs >= ks:  # every query row sees key ks
        return lse, torch.ones_like(lse), o
    seen = torch.arange(qs, qe, device=Qi.device) >= ks  # rows with at least one allowed key in this tile
    return lse.masked_fill(~seen, -math.inf), seen.to(lse.dtype).expand_as(lse), o


def _key_tiles(n_f: int, settings: TileSettings, qe: int) -> range:
    """Starts of the key tiles that queries before ``qe`` may see (all of them without ``is_causal``)."""
    return range(0, min(n_f, qe) if settings.is_causal else n_f, settings.block_k)


def _fused_forward(Q: Tensor, K: Tensor, V: Tensor, settings: TileSettings) -> tuple[Tensor, Tensor]:
    """Context ``(1, H, n_q, d_v)`` and log-sum-exp ``(1, H, n_q)`` of 4-D inputs ``(1, H, n, d)``."""
    n_q, n_f = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -math.inf)
    l = Q.new_zeros(Q.shape[:-1])
    acc = Q.new_zeros((*Q.shape[:-1], V.shape[-1]))
    for qs in range(0, n_q, settings.block_q):
        qe = min(qs + settings.block_q, n_q)
        run: Stats | None = None
        for ks in _key_tiles(n_f, settings, qe):
            ke = min(ks + settings.block_k, n_f)
            part = _fused_tile(Q[..., qs:qe, :], K[..., ks:ke, :], V[..., ks:ke, :], settings, qs, ks)
            run = part if run is None else online_softmax_merge(*run, *part)
        if run is not None:
            m[..., qs:qe], l[..., qs:qe], acc[..., qs:qe, :] = run
    return finalize(m, l, acc)


@catalogued("extra:tiled-attention")
class FusedTiledAttentionFunction(torch.autograd.Function):
    """Autograd of the fused tiled path: backward calls the fused backward kernel per tile with the global O and L.

    ``apply(Q, K, V, settings)`` with 4-D inputs ``(1, H, n, d)`` (float32 or float64) and a
    :class:`~attnsurvey.beyond.tiled.TileSettings` without dropout returns the context.
    Saved for backward: Q, K, V, the context O and the log-sum-exp L ``(1, H, n_q)``.
    """

    @staticmethod
    def forward(ctx: Any, Q: Tensor, K: Tensor, V: Tensor, settings: TileSettings) -> Tensor:
        O, L = _fused_forward(Q, K, V, settings)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.settings = settings
        return O

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grad_outputs: Tensor) -> tuple[Tensor | None, ...]:
        (dO,) = grad_outputs
        Q, K, V, O, L = ctx.saved_tensors
        settings: TileSettings = ctx.settings
        dO = dO.contiguous()
        dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
        n_q, n_f = Q.shape[-2], K.shape[-2]
        for qs in range(0, n_q, settings.block_q):
            qe = min(qs + settings.block_q, n_q)
            rows = slice(qs, qe)
            for ks in _key_tiles(n_f, settings, qe):
                ke = min(ks + settings.block_k, n_f)
                keys = slice(ks, ke)
                causal, bias = _tile_mask_args(settings, qs, qe, ks, ke, Q)
                dq, dk, dv = _FLASH_BACKWARD(
                    dO[..., rows, :],
                    Q[..., rows, :],
                    K[..., keys, :],
                    V[..., keys, :],
                    O[..., rows, :],
                    L[..., rows],
                    0.0,
                    causal,
                    attn_mask=bias,
                    scale=settings.scale,
                )
                dQ[..., rows, :] += dq
                dK[..., keys, :] += dk
                dV[..., keys, :] += dv
        return dQ, dK, dV, None


@catalogued("extra:tiled-attention")
def fused_tiled_attend(Q: Tensor, K: Tensor, V: Tensor, **options: Unpack[TileOptions]) -> Tensor:
    """Exact scaled dot-product attention (Eq. 2-4) tile by tile, each tile in one fused kernel call.

    The same tiles and the same exact merge as :func:`~attnsurvey.beyond.tiled.tiled_attend`
    (so equal to it, and to ``attend(Q, K, V)[0]``, up to float rounding on finite inputs),
    at the speed of torch's fused CPU kernel. Differentiable in Q, K and V
    (:class:`FusedTiledAttentionFunction`). float16 and bfloat16 inputs are computed in
    float32 and the context is returned in the input dtype; ``n_q = 0``, ``n_f = 0`` or an
    empty batch gives an empty or zero context.

    Args:
        Q: queries.
        K: keys.
        V: values.
        **options: keyword-only :class:`~attnsurvey.beyond.tiled.TileOptions`: ``is_causal``,
            ``block_q``, ``block_k`` (defaults :data:`FUSED_BLOCK_Q`, :data:`FUSED_BLOCK_K`) and
            ``scale`` (default ``1 / sqrt(d_k)``); ``dropout_p`` must stay 0 (dropout is the
            teaching version's).

    Shape:
        Q ``(..., n_q, d_k)``, K ``(..., n_f, d_k)``, V ``(..., n_f, d_v)`` (batch dimensions
        broadcast); returns ``(..., n_q, d_v)``.

    Returns:
        The context ``c``.

    Raises:
        ValueError: on shape or dtype problems, ``d_k = 0``, a non-finite scale, or ``dropout_p > 0``.
        TypeError: for non-integer block sizes or an unknown option.
    """
    check_qkv(Q, K, V, "fused tiled attention")
    check_batch_broadcast(Q, K, "Q", "K")
    check_batch_broadcast(K, V, "K", "V")
    settings = tile_settings(Q.shape[-1], {"block_q": FUSED_BLOCK_Q, "block_k": FUSED_BLOCK_K, **options})
    if settings.dropout_p > 0:
        raise ValueError(
            f"fused tiled attention has no dropout (dropout_p={settings.dropout_p}); use tiled_attend, whose "
            "keep-mask the backward pass regenerates"
        )
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    n_q, n_f = Q.shape[-2], K.shape[-2]
    if n_f == 0 or n_q == 0 or batch.numel() == 0:  # torch's CPU flash kernel divides by zero on an empty batch
        return V.new_zeros((*batch, n_q, V.shape[-1]))
    dtype = Q.dtype
    if dtype in _LOW_PRECISION:  # computed in float32; the cast back is differentiable
        Q, K, V = Q.float(), K.float(), V.float()
    d_k, d_v = Q.shape[-1], V.shape[-1]
    if d_k != d_v:  # the kernel needs one head size: zero columns change neither the scores nor the context
        d = max(d_k, d_v)
        Q, K, V = (torch.nn.functional.pad(x, (0, d - x.shape[-1])) for x in (Q, K, V))
    # the kernel takes (B, h, n, d): every batch dimension becomes a head of one batch
    Q4, K4, V4 = (x.expand(*batch, *x.shape[-2:]).reshape(1, -1, *x.shape[-2:]) for x in (Q, K, V))
    O = FusedTiledAttentionFunction.apply(Q4, K4, V4, settings)
    return O[..., :d_v].reshape(*batch, n_q, d_v).to(dtype)
