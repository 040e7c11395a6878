"""Smaller KV caches across layers: cross-layer sharing and local:global layer schedules (beyond the survey).

Grouped-query attention shrinks the cache within a layer (:mod:`attnsurvey.beyond.decoding`).
Two later ideas shrink it across the layers of a decoder:

* **Cross-layer KV sharing** (Brandon et al. 2024, cross-layer attention): the
  layers are cut into groups of ``share`` consecutive layers; only the first layer
  of a group projects keys and values and caches them, and the other layers of the
  group attend to those keys and values with their own queries. The cache shrinks
  by the factor ``share``.
* **Local:global schedules** (Gemma 2: one local layer per global layer; Gemma 3:
  five local layers per global one, with a window of 1,024 tokens): a *local*
  layer attends with a sliding window (query ``i`` sees keys ``i - w < j <= i``,
  ``w`` keys, itself included), so when decoding it keeps a ring buffer of ``w``
  positions (:class:`~attnsurvey.beyond.kv_cache.SlidingWindowCache`) instead of
  the whole prefix; only the global layers' caches grow with the context.

:class:`HybridDecoder` is a small pre-norm decoder stack built from the package's
multi-head module (:class:`~attnsurvey.query_related.multihead.MultiHeadAttention`),
feed-forward layer and layer norm, with both ideas as options: decoding token by
token with its caches gives the outputs of recomputing the whole prefix.
:func:`cache_elements` counts the numbers its caches hold, and
:func:`cache_elements_formula` the same count from the schedule alone (for long
contexts that are not run).

Shapes: ``(B, n, d_model)`` inputs; caches ``(B, g, n, d_head)``. Masks are
boolean, ``True`` = may attend.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Literal, cast

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank
from ..catalog import catalogued
from ..masking import band_mask, causal_mask
from ..query_related.multihead import MultiHeadAttention
from ..transformer.model import FeedForward, LayerNorm, residual_norm
from .decoding import KVCache, offset_causal_mask
from .kv_cache import SlidingWindowCache

CHAPTER = "chapters/ch06_5_latent_and_shared_caches.ipynb"

LayerKind = Literal["local", "global"]
#: Local layers per global layer: Gemma 2 alternates (1:1), Gemma 3 has five local layers per global one.
GEMMA2_LOCAL_PER_GLOBAL, GEMMA3_LOCAL_PER_GLOBAL = 1, 5
#: Gemma 3's sliding window, in tokens (each query of a local layer sees this many keys, itself included).
GEMMA3_WINDOW = 1024
#: A layer's cache: a full KV cache (global), a ring buffer (local), or None (it reads its group's).
LayerCache = KVCache | SlidingWindowCache | None


@catalogued(
    "extra:hybrid-local-global",
    title="Local:global layer schedules (Gemma 2 1:1, Gemma 3 5:1, window 1,024) with ring-buffer caches",
)
def layer_schedule(n_layers: int, local_per_global: int) -> list[LayerKind]:
    """The kinds of a decoder's layers: ``local_per_global`` local layers, then one global, repeated.

    Layer ``i`` is global when ``(i + 1) % (local_per_global + 1) == 0``, as the
    ``layer_types`` of Gemma 2 (``local_per_global = 1``) and Gemma 3 (5) in ``transformers``;
    0 makes every layer global.

    Args:
        n_layers: the number of layers.
        local_per_global: local layers before each global one.

    Returns:
        ``"local"`` or ``"global"`` for each layer.

    Raises:
        ValueError: unless ``n_layers >= 1`` and ``local_per_global >= 0`` are integers.
    """
    check_integers("layer_schedule", minimum=1, n_layers=n_layers)
    check_integers("layer_schedule", minimum=0, local_per_global=local_per_global)
    return ["global" if (i + 1) % (local_per_global + 1) == 0 else "local" for i in range(n_layers)]


@catalogued(
    "extra:cross-layer-kv",
    title="Cross-layer KV sharing: groups of consecutive layers reuse their first layer's K/V (Brandon et al. 2024)",
)
def kv_owners(n_layers: int, share: int) -> list[int]:
    """For each layer, the layer whose keys and values it attends to (groups of ``share`` consecutive layers).

    Args:
        n_layers: the number of layers.
        share: layers per group (1: every layer its own keys and values).

    Returns:
        ``owner[i] = i - i % share``, the first layer of layer ``i``'s group.

    Raises:
        ValueError: unless ``n_layers >= 1`` and ``share >= 1`` are integers.
    """
    check_integers("kv_owners", minimum=1, n_layers=n_layers, share=share)
    return [i - i % share for i in range(n_layers)]


@catalogued("extra:hybrid-local-global")
def sliding_window_mask(n: int, window: int, device: torch.device | None = None) -> Tensor:
    """Causal sliding-window mask: query ``i`` may attend key ``j`` when ``i - w < j <= i`` (``w`` keys).

    The causal mask (:func:`~attnsurvey.masking.causal_mask`) and the band ``|i - j| <= w - 1``
    (:func:`~attnsurvey.masking.band_mask`) together; a query sees ``min(i + 1, w)`` keys,
    itself included, as in ``transformers`` (``kv_idx > q_idx - sliding_window``).

    Args:
        n: the sequence length.
        window: ``w``, the keys a query sees (an integer >= 1).
        device: where to build the mask.

    Shape:
        returns ``(n, n)``, boolean, ``True`` = may attend.

    Returns:
        The mask.

    Raises:
        ValueError: unless ``n >= 0`` and ``window >= 1`` are integers.
    """
    check_integers("sliding_window_mask", minimum=1, window=window)
    return causal_mask(n, device=device) & band_mask(n, window - 1, device=device)


def _check_groups(kinds: Sequence[LayerKind], owners: Sequence[int]) -> None:
    """A group shares one cache, so its layers must be of one kind."""
    for i, o in enumerate(owners):
        if kinds[i] != kinds[o]:
            raise ValueError(
                f"layer {i} ({kinds[i]}) shares the keys and values of layer {o} ({kinds[o]}): a group of "
                f"share consecutive layers must be all local or all global (schedule {list(kinds)})"
            )


class _Block(nn.Module):
    """Pre-norm block: ``X + attn(LN(X))``, then ``X + FFN(LN(X))`` (the stack runs it)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, owns_kv: bool) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads, h_kv=n_kv_heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        if not owns_kv:  # a sharing layer projects no keys or values: its W_K, W_V have no rows (and see no rows)
            for W in (self.attn.W_K, self.attn.W_V):
                W.weight = nn.Parameter(W.weight.detach()[:0])
                W.out_features = 0


@catalogued("extra:hybrid-local-global", "extra:cross-layer-kv")
class HybridDecoder(nn.Module):
    """A pre-norm decoder stack with local and global layers and cross-layer KV sharing.

    Each layer is causal multi-head self-attention (the package's
    :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`, ``g`` key/value
    heads) and a feed-forward layer. A local layer attends within a sliding window of
    ``window`` keys (:func:`sliding_window_mask`), a global layer to the whole prefix.
    Layer ``i`` attends to the keys and values of layer ``kv_owners(L, share)[i]``,
    which projects them from its own input; the others of the group only project
    queries. Positions are not added here (add them to X, as
    :class:`~attnsurvey.beyond.decoding.TinyDecoderLM` does).

    ``forward(X, caches=None)``: without caches, the whole sequence; with the caches of
    :meth:`new_caches`, X holds the next ``n`` positions after what they hold.

    Args:
        d_model: the model width.
        n_heads: ``h``, query heads.
        n_kv_heads: ``g``, key/value heads (divides ``h``).
        d_ff: the feed-forward width.
        schedule: each layer's kind, ``"local"`` or ``"global"`` (:func:`layer_schedule`).
        window: ``w``, the keys a local layer's query sees.
        share: consecutive layers per key/value group (:func:`kv_owners`; 1: no sharing).

    Shape:
        forward: X ``(B, n, d_model)`` -> ``(B, n, d_model)``.

    Raises:
        ValueError: for sizes that are not integers >= 1, an unknown kind, a group that mixes
            local and global layers, or ``g`` not dividing ``h``; forward: for a bad X or caches.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        d_ff: int,
        schedule: Sequence[LayerKind],
        window: int,
        share: int = 1,
    ) -> None:
        super().__init__()
        check_integers(
            "HybridDecoder",
            minimum=1,
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            d_ff=d_ff,
            window=window,
        )
        if bad := [k for k in schedule if k not in ("local", "global")]:
            raise ValueError(f"schedule entries must be 'local' or 'global', got {bad}")
        self.kinds: list[LayerKind] = list(schedule)
        self.owners = kv_owners(len(self.kinds), share)
        _check_groups(self.kinds, self.owners)
        self.window, self.d_model = window, d_model
        self.blocks = nn.ModuleList(
            _Block(d_model, n_heads, n_kv_heads, d_ff, owns_kv=o == i) for i, o in enumerate(self.owners)
        )

    def _attn(self, i: int) -> MultiHeadAttention:
        # cast: nn.ModuleList is not generic; __init__ fills it with _Block only
        return cast(_Block, self.blocks[i]).attn

    def new_caches(self, batch: int, max_len: int, dtype: torch.dtype | None = None) -> list[LayerCache]:
        """Empty caches: a :class:`~attnsurvey.beyond.decoding.KVCache` per global group, a ring buffer per local one.

        Args:
            batch: ``B``, sequences.
            max_len: positions a global cache reserves.
            dtype: the caches' dtype (default the parameters').

        Returns:
            One entry per layer: the first layer of each group holds its group's cache, the
            others None.
        """
        attn0 = self._attn(0) if self.blocks else None
        if attn0 is None:
            return []
        w = attn0.W_Q.weight
        g, d, dtype = attn0.h_kv, attn0.d_k, dtype or w.dtype
        caches: list[LayerCache] = []
        for i, o in enumerate(self.owners):
            if o != i:
                caches.append(None)
            elif self.kinds[i] == "global":
                caches.append(KVCache(batch, g, max_len, d, dtype, w.device))
            else:
                caches.append(SlidingWindowCache(batch, g, self.window, d, dtype, w.device))
        return caches

    def forward(self, X: Tensor, caches: Sequence[LayerCache] | None = None) -> Tensor:
        as_tensor(X, "X")
        check_min_rank(X, 3, "X", "(B, n, d_model)")
        check_dim_equal(X.shape[-1], self.d_model, "HybridDecoder", "d_model of X", "d_model of the stack")
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(f"caches must hold one entry per layer ({len(self.blocks)}), got {len(caches)}")
        shared: dict[int, tuple[Tensor, Tensor, Tensor]] = {}  # owner -> its (k, v, mask) of this call
        for i, block in enumerate(self.blocks):
            block = cast(_Block, block)
            cache = None if caches is None else caches[self.owners[i]]
            X = residual_norm(X, partial(self._attend, i, cache=cache, shared=shared), block.norm1, True)
            X = residual_norm(X, block.ffn, block.norm2, True)
        return X

    def _attend(self, i: int, Z: Tensor, cache: LayerCache, shared: dict[int, tuple[Tensor, Tensor, Tensor]]) -> Tensor:
        """Layer ``i``'s attention: the owner of a group projects (and caches) K and V, the others read them."""
        attn, o, n = self._attn(i), self.owners[i], Z.shape[-2]
        if o != i:  # cross-layer sharing: this layer's queries, the owner's keys and values (no rows to project)
            k, v, mask = shared[o]
            out, _ = attn(Z, Z[..., :0, :], mask, kv_transform=lambda *_: (k, v), need_weights=False)
            return out
        if isinstance(cache, SlidingWindowCache):
            mask, store = cache.next_mask(n), cache.extend  # the ring buffer of a local layer
        elif isinstance(cache, KVCache):
            mask, store = offset_causal_mask(n, cache.length + n, Z.device), cache.append
        elif self.kinds[i] == "local":
            mask, store = sliding_window_mask(n, self.window, Z.device), None
        else:
            mask, store = causal_mask(n, device=Z.device), None
        mask = mask[None]  # (1, n_q, n_f): shared by the batch and the heads

        def keep(k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            k, v = (k, v) if store is None else store(k, v)
            shared[i] = (k, v, mask)
            return k, v

        out, _ = attn(Z, None, mask, kv_transform=keep, need_weights=False)
        return out


@catalogued("extra:hybrid-local-global", "extra:cross-layer-kv")
def cache_elements(caches: Sequence[LayerCache]) -> int:
    """The numbers a stack's caches hold for the positions cached so far (keys and values).

    A :class:`~attnsurvey.beyond.decoding.KVCache` counts its filled positions, a ring
    buffer its filled slots (at most ``w``); a layer that reads another's cache (None)
    holds nothing.

    Args:
        caches: one entry per layer (:meth:`HybridDecoder.new_caches`).

    Returns:
        ``sum 2 * B * g * d_head * (positions held)`` over the caches.

    Raises:
        TypeError: for an entry that is not a cache or None.
    """
    total = 0
    for c in caches:
        if c is None:
            continue
        if not isinstance(c, KVCache | SlidingWindowCache):
            raise TypeError(f"caches must hold KVCache, SlidingWindowCache or None, got {type(c).__name__}")
        held = c.length if isinstance(c, KVCache) else int((c.positions >= 0).sum())
        B, g, _, d = c.K.shape
        total += 2 * B * g * d * held
    return total


@catalogued("extra:hybrid-local-global", "extra:cross-layer-kv")
def cache_elements_formula(
    schedule: Sequence[LayerKind],
    n_tokens: int,
    window: int,
    n_kv_heads: int,
    d_head: int,
    share: int = 1,
    batch: int = 1,
) -> int:
    """The cache size of a schedule after ``n_tokens`` positions, without running it.

    ``sum over the groups' first layers of 2 * B * g * d_head * (n if global else min(n, w))``:
    what :func:`cache_elements` measures on a :class:`HybridDecoder`, for any length.

    Args:
        schedule: each layer's kind.
        n_tokens: ``n``, positions decoded.
        window: ``w``, the local window.
        n_kv_heads: ``g``, key/value heads.
        d_head: the head size.
        share: consecutive layers per key/value group.
        batch: ``B``, sequences.

    Returns:
        The number of cached keys' and values' elements.

    Raises:
        ValueError: for sizes out of range, an unknown kind, or a group that mixes kinds.
    """
    check_integers("cache_elements_formula", minimum=0, n_tokens=n_tokens)
    check_integers(
        "cache_elements_formula", minimum=1, window=window, n_kv_heads=n_kv_heads, d_head=d_head, batch=batch
    )
    if bad := [k for k in schedule if k not in ("local", "global")]:
        raise ValueError(f"schedule entries must be 'local' or 'global', got {bad}")
    owners = kv_owners(len(schedule), share)
    _check_groups(schedule, owners)
    per_position = 2 * batch * n_kv_heads * d_head
    return sum(
        per_position * (n_tokens if schedule[i] == "global" else min(n_tokens, window))
        for i, o in enumerate(owners)
        if o == i
    )


__all__ = [
    "GEMMA2_LOCAL_PER_GLOBAL",
    "GEMMA3_LOCAL_PER_GLOBAL",
    "GEMMA3_WINDOW",
    "HybridDecoder",
    "cache_elements",
    "cache_elements_formula",
    "kv_owners",
    "layer_schedule",
    "sliding_window_mask",
]
