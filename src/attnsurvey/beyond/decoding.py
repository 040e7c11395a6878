"""Decoding with a KV cache; multi-query and grouped-query attention (beyond the survey).

An autoregressive decoder produces one token per step. Its causal
self-attention at step ``t`` needs the keys and values of *all* earlier
positions, but those never change once computed (query ``i`` attends to keys
``j <= i`` only). A **KV cache** stores them: each step projects only the new
token and appends its key and value, so a step costs ``O(t)`` instead of
recomputing the whole prefix, ``O(t^2)``.

The cache is what limits batch size and context length at inference, so
later models shrink it by sharing keys and values between query heads:

* multi-head attention (MHA): ``n_kv_heads = n_heads``, every head its own K, V;
* grouped-query attention (GQA, Ainslie et al. 2023): ``n_kv_heads`` groups,
  query head ``j`` reads the K, V of group ``j // (n_heads / n_kv_heads)``;
* multi-query attention (MQA, Shazeer 2019): ``n_kv_heads = 1``.

Shapes: heads are the axis before the sequence, ``(B, heads, n, d_head)``.
The cache holds ``(B, n_kv_heads, n_cached, d_head)`` keys and values. Masks
are boolean, ``True`` = may attend. The attention core is
:func:`attnsurvey.general_model.attend` with ``enable_gqa=True``, which expands
each K/V head to the query heads of its group.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, require_tensor
from ..catalog import catalogued
from ..general_model import attend
from ..masking import require_boolean_mask
from ..query_related.multihead import MultiHeadAttention
from ..transformer.model import FeedForward, LayerNorm, residual_norm
from ..transformer.positional import sinusoidal_position_encoding

CHAPTER = "chapters/ch06_1_decoding.ipynb"


@catalogued("extra:kv-cache")
def offset_causal_mask(n_q: int, n_f: int, device: torch.device | None = None) -> Tensor:
    """Causal mask for the last ``n_q`` of ``n_f`` positions: ``True`` where ``j <= i + n_f - n_q`` (may attend).

    Query ``i`` of a chunk appended after ``n_f - n_q`` cached positions may attend
    to every cached key and to the new keys up to its own position. With
    ``n_q = n_f`` it is the ordinary causal mask.

    Args:
        n_q: number of queries, the newest positions.
        n_f: number of keys, cached and new.
        device: device of the mask (default the default device).

    Shape:
        returns ``(n_q, n_f)``, boolean, ``True`` = may attend.

    Returns:
        The mask.

    Raises:
        ValueError: if a size is not an integer, is negative, or ``n_q > n_f``.
    """
    check_integers("offset_causal_mask", n_q=n_q, n_f=n_f)
    if n_q < 0 or n_f < n_q:
        raise ValueError(f"need 0 <= n_q <= n_f, got n_q={n_q}, n_f={n_f}")
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_f, device=device)[None, :]
    return j <= i + (n_f - n_q)


@catalogued(
    "extra:gqa", title="Grouped-query and multi-query attention: query heads share K/V heads (beyond the survey)"
)
def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Grouped-query attention: query head ``j`` attends with K/V head ``j // (h / g)``.

    ``g`` (the number of K/V heads) divides ``h``; ``g = h`` is multi-head,
    ``g = 1`` multi-query attention. Same result as
    ``F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)``.

    Args:
        q: queries.
        k: keys, ``g`` heads.
        v: values, ``g`` heads.
        mask: boolean, ``True`` = may attend; default all keys.

    Shape:
        q: ``(..., h, n_q, d_k)``; k: ``(..., g, n_f, d_k)``; v: ``(..., g, n_f, d_v)``;
        mask: broadcastable to ``(..., h, n_q, n_f)``.

    Returns:
        ``(c, a)``: contexts ``(..., h, n_q, d_v)`` and weights ``(..., h, n_q, n_f)``.

    Raises:
        ValueError: if ``g`` does not divide ``h``, the ranks are below 3 or the mask is
            not boolean (a float mask would be added to the scores as a bias).
    """
    require_boolean_mask(mask, "grouped_query_attention")
    for sym, t, layout in (
        ("q", q, "(..., h, n_q, d_k)"),
        ("k", k, "(..., g, n_f, d_k)"),
        ("v", v, "(..., g, n_f, d_v)"),
    ):
        as_tensor(t, sym)
        check_min_rank(t, 3, sym, layout)
    h, g = q.shape[-3], k.shape[-3]
    check_dim_equal(k.shape[-3], v.shape[-3], "grouped-query attention", "K/V heads of k", "K/V heads of v")
    if g < 1 or h % g:
        raise ValueError(
            f"the number of K/V heads g={g} must divide the number of query heads h={h} (q {tuple(q.shape)}, k {tuple(k.shape)})"
        )
    # every K/V head serves h / g consecutive query heads: the core's enable_gqa expands them
    c, a = attend(q, k, v, mask, enable_gqa=True)
    assert a is not None  # need_weights is left at True: attend returns the weights
    return c, a


@catalogued("extra:kv-cache", title="Incremental decoding with a key/value cache (beyond the survey)")
class KVCache:
    """A preallocated, contiguous key/value cache for one attention layer.

    Holds ``K`` and ``V`` and the number of filled positions ``length``.
    :meth:`append` writes blocks after the filled part; :meth:`reorder` reorders
    the batch rows for beam search.

    Args:
        batch: ``B``, sequences in the batch.
        n_kv_heads: ``g``, key/value heads.
        max_len: positions reserved per sequence.
        d_head: size of one head.
        dtype: dtype of the buffer (default float32).
        device: device of the buffer (default the default device).

    Shape:
        K, V: ``(B, g, max_len, d_head)``.

    Raises:
        ValueError: if a size is below 1.
    """

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        max_len: int,
        d_head: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_integers("KVCache", batch=batch, n_kv_heads=n_kv_heads, max_len=max_len, d_head=d_head)
        if min(batch, n_kv_heads, max_len, d_head) < 1:
            raise ValueError(
                f"KVCache sizes must be >= 1, got batch={batch}, n_kv_heads={n_kv_heads}, max_len={max_len}, d_head={d_head}"
            )
        self.K = torch.zeros(batch, n_kv_heads, max_len, d_head, dtype=dtype, device=device)
        self.V = torch.zeros(batch, n_kv_heads, max_len, d_head, dtype=dtype, device=device)
        self.length = 0

    @property
    def max_len(self) -> int:
        """Positions reserved per sequence."""
        return self.K.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes allocated for keys and values (the whole preallocated buffer)."""
        return self.K.element_size() * (self.K.numel() + self.V.numel())

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the keys and values of ``n_new`` positions after the filled part.

        Args:
            k: new keys.
            v: new values.

        Shape:
            k, v: ``(B, g, n_new, d_head)``; returns two ``(B, g, length, d_head)``.

        Returns:
            Views (no copy) of all keys and values cached so far.

        Raises:
            ValueError: if the append would exceed ``max_len`` or a block has the wrong shape or dtype.
        """
        expected = (*self.K.shape[:2], k.shape[-2] if k.dim() == 4 else -1, self.K.shape[-1])
        for sym, t in (("k", k), ("v", v)):
            if t.dim() != 4 or tuple(t.shape) != expected or t.dtype != self.K.dtype:
                raise ValueError(
                    f"{sym} must have shape (B, g, n_new, d_head) = {expected} and dtype {self.K.dtype}, got {tuple(t.shape)} {t.dtype}"
                )
        n_new = k.shape[-2]
        if self.length + n_new > self.max_len:
            raise ValueError(f"KVCache full: {self.length} cached + {n_new} new > max_len={self.max_len}")
        self.K[:, :, self.length : self.length + n_new] = k
        self.V[:, :, self.length : self.length + n_new] = v
        self.length += n_new
        return self.K[:, :, : self.length], self.V[:, :, : self.length]

    def reset(self) -> None:
        """Forget the cached positions (the buffer is kept)."""
        self.length = 0

    def reorder(self, beam_indices: Tensor) -> None:
        """Beam-search reordering: batch row ``b`` becomes a copy of row ``beam_indices[b]``.

        Args:
            beam_indices: for each row, the row whose cache it continues.

        Shape:
            beam_indices: ``(B,)`` integers in ``[0, B)``.

        Raises:
            ValueError: if ``beam_indices`` is not ``B`` integers in range.
        """
        B = self.K.shape[0]
        idx = torch.as_tensor(beam_indices)
        if (
            idx.shape != (B,)
            or idx.is_floating_point()
            or idx.dtype == torch.bool
            or bool(((idx < 0) | (idx >= B)).any())
        ):
            raise ValueError(f"beam_indices must be {B} integers in [0, {B}), got {idx.tolist()}")
        idx = idx.to(device=self.K.device, dtype=torch.long)
        self.K.copy_(self.K.index_select(0, idx))  # index_select copies, so rows may repeat safely
        self.V.copy_(self.V.index_select(0, idx))


@catalogued("extra:kv-cache", "extra:gqa")
def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, d_head: int, n_tokens: int, batch: int = 1, bytes_per_value: int = 2
) -> int:
    """Analytic size of a KV cache: ``2 * n_layers * batch * n_tokens * n_kv_heads * d_head * bytes_per_value``.

    The factor 2 counts keys and values.

    Args:
        n_layers: ``L``, attention layers.
        n_kv_heads: ``g``, key/value heads per layer.
        d_head: ``d_h``, size of one head.
        n_tokens: ``n``, cached positions per sequence.
        batch: ``B``, sequences.
        bytes_per_value: 2 for float16/bfloat16, 4 for float32.

    Returns:
        The size in bytes.

    Raises:
        ValueError: if a count (``n_layers``, ``n_kv_heads``, ``n_tokens``, ``batch``) is negative
            or not an integer, or ``d_head`` or ``bytes_per_value`` is not an integer >= 1.
    """
    check_integers(
        "kv_cache_bytes", minimum=0, n_layers=n_layers, n_kv_heads=n_kv_heads, n_tokens=n_tokens, batch=batch
    )
    check_integers("kv_cache_bytes", minimum=1, d_head=d_head, bytes_per_value=bytes_per_value)
    return _kv_bytes(n_layers, n_kv_heads, d_head, n_tokens, batch, bytes_per_value)


def _kv_bytes(n_layers: int, n_kv_heads: int, d_head: int, n_tokens: int, batch: int, bytes_per_value: int) -> int:
    """:func:`kv_cache_bytes` on checked sizes."""
    return 2 * n_layers * batch * n_tokens * n_kv_heads * d_head * bytes_per_value


@catalogued("extra:kv-cache", "extra:gqa")
def decoder_weight_count(d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, n_layers: int, vocab: int = 0) -> int:
    """Matrix weights a decoder-only model multiplies with for every generated token.

    Per layer: ``W_Q`` and ``W_O`` (``d_model^2`` each), ``W_K`` and ``W_V``
    (``g * d_h * d_model`` each, ``d_h = d_model / h``) and the two feed-forward
    matrices (``d_model * d_ff`` each); plus the readout ``vocab * d_model``.
    Biases, layer norms and the embedding table (of which one row is read) are left out.

    Args:
        d_model: model width.
        n_heads: ``h``, query heads (must divide ``d_model``).
        n_kv_heads: ``g``, key/value heads.
        d_ff: feed-forward width.
        n_layers: ``L``, decoder blocks.
        vocab: vocabulary size of the readout (0 leaves it out).

    Returns:
        The number of weights.

    Raises:
        ValueError: if ``d_model``, ``h`` or ``d_ff`` is not an integer >= 1, a count (``g``,
            ``L``, ``vocab``) is negative or not an integer, or ``h`` does not divide ``d_model``.
    """
    _check_weight_sizes("decoder_weight_count", d_model, n_heads, n_kv_heads, d_ff, n_layers, vocab)
    return _weight_count(d_model, n_heads, n_kv_heads, d_ff, n_layers, vocab)


def _check_weight_sizes(
    what: str, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, n_layers: int, vocab: int
) -> None:
    """The size checks of :func:`decoder_weight_count`, naming ``what``."""
    check_integers(what, minimum=1, d_model=d_model, n_heads=n_heads, d_ff=d_ff)
    check_integers(what, minimum=0, n_kv_heads=n_kv_heads, n_layers=n_layers, vocab=vocab)
    if d_model % n_heads:
        raise ValueError(f"{what}: n_heads h={n_heads} must divide d_model={d_model}")


def _weight_count(d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, n_layers: int, vocab: int) -> int:
    """:func:`decoder_weight_count` on checked sizes."""
    d_head = d_model // n_heads
    per_layer = 2 * d_model * d_model + 2 * n_kv_heads * d_head * d_model + 2 * d_model * d_ff
    return n_layers * per_layer + vocab * d_model


class DecodeCost(NamedTuple):
    """FLOPs and bytes moved to generate one token per sequence (see :func:`decode_step_cost`).

    Args:
        flops: floating-point operations (a multiply-add counts 2).
        weight_bytes: bytes of the weights read (once for the whole batch).
        kv_bytes: bytes of the KV cache read (every sequence its own).
    """

    flops: int
    weight_bytes: int
    kv_bytes: int

    @property
    def bytes(self) -> int:
        """Bytes moved: weights plus KV cache."""
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def kv_share(self) -> float:
        """Fraction of the bytes moved that is KV cache."""
        return self.kv_bytes / self.bytes


@catalogued("extra:kv-cache", "extra:gqa")
def decode_step_cost(
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    d_ff: int,
    n_layers: int,
    n_context: int,
    vocab: int = 0,
    batch: int = 1,
    bytes_per_value: int = 2,
) -> DecodeCost:
    """FLOPs and bytes of one decoding step with a KV cache: the roofline's two axes.

    Each of the ``B`` sequences feeds one token that attends to ``n`` cached keys
    (its own included). With ``W`` = :func:`decoder_weight_count` and ``b`` bytes
    per number:

    * FLOPs ``= B * (2 W + 4 L h d_h n)``: a multiply-add per weight, and per
      layer and query head ``n`` scores ``q . k`` and a weighted sum of ``n``
      values of size ``d_h``;
    * weight bytes ``= W b`` (read once, shared by the batch);
    * KV bytes ``= 2 L B n g d_h b`` (:func:`kv_cache_bytes`: every key and value read once).

    The softmax, norms, biases and activations are left out (``O(n + d)`` each).
    Sharing K/V heads (smaller ``g``) shrinks the KV bytes and ``W_K``, ``W_V``,
    while the attention FLOPs stay those of ``h`` query heads.

    Args:
        d_model: model width.
        n_heads: ``h``, query heads.
        n_kv_heads: ``g``, key/value heads.
        d_ff: feed-forward width.
        n_layers: ``L``, decoder blocks.
        n_context: ``n``, keys each new token attends to.
        vocab: vocabulary size of the readout (0 leaves it out).
        batch: ``B``, sequences decoded together.
        bytes_per_value: ``b``, 2 for float16/bfloat16, 4 for float32.

    Returns:
        A :class:`DecodeCost` (``flops``, ``weight_bytes``, ``kv_bytes``, ``intensity``, ``kv_share``).

    Raises:
        ValueError: if ``d_model``, ``h``, ``d_ff`` or ``bytes_per_value`` is not an integer >= 1,
            a count (``g``, ``L``, ``n``, ``vocab``, ``B``) is negative or not an integer, or ``h``
            does not divide ``d_model``.
    """
    _check_weight_sizes("decode_step_cost", d_model, n_heads, n_kv_heads, d_ff, n_layers, vocab)
    check_integers("decode_step_cost", minimum=0, n_context=n_context, batch=batch)
    check_integers("decode_step_cost", minimum=1, bytes_per_value=bytes_per_value)
    W = _weight_count(d_model, n_heads, n_kv_heads, d_ff, n_layers, vocab)
    d_head = d_model // n_heads
    flops = batch * (2 * W + 4 * n_layers * n_heads * d_head * n_context)
    kv = _kv_bytes(n_layers, n_kv_heads, d_head, n_context, batch, bytes_per_value)
    return DecodeCost(flops, W * bytes_per_value, kv)


@catalogued("extra:gqa", "extra:kv-cache")
class GroupedQueryAttention(MultiHeadAttention):
    """Causal self-attention with ``n_heads`` query heads sharing ``n_kv_heads`` K/V heads.

    A configuration of :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`
    (``h_kv = g``, no biases) whose cache's ``append`` is the per-call ``kv_transform``.
    ``forward(X, cache=None)``: without a cache, causal self-attention over X. With a
    :class:`KVCache`, X holds the ``n`` *new* positions; their keys and values are
    appended and the queries attend to everything cached (an offset causal mask).

    Args:
        d_model: model width.
        n_heads: ``h``, query heads.
        n_kv_heads: ``g``, key/value heads, must divide ``h``; default ``h`` (MHA); 1 is MQA.

    Shape:
        W_Q, W_O: ``(d_model, d_model)``; W_K, W_V: ``(g * d_head, d_model)`` with
        ``d_head = d_model / h``. forward: X ``(B, n, d_model)`` -> output
        ``(B, n, d_model)``, weights ``(B, h, n, n_cached)``.

    Raises:
        ValueError: if ``d_model``, ``h`` or ``g`` is not an integer >= 1, ``g`` does not divide
            ``h``, ``h`` does not divide ``d_model``, or X has the wrong width.
        TypeError: if X is not a floating-point tensor.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None) -> None:
        g = n_heads if n_kv_heads is None else n_kv_heads
        check_integers("GroupedQueryAttention", minimum=1, d_model=d_model, n_heads=n_heads, n_kv_heads=g)
        if n_heads % g:
            raise ValueError(f"n_kv_heads g={g} must divide n_heads h={n_heads}")
        super().__init__(d_model, n_heads, h_kv=g)  # no biases, as in many recent decoder-only models (LLaMA)
        self.g, self.d_head = g, self.d_k

    def new_cache(self, batch: int, max_len: int, dtype: torch.dtype | None = None) -> KVCache:
        """An empty cache sized for this layer, on its device.

        Args:
            batch: ``B``, sequences.
            max_len: positions to reserve.
            dtype: the cache's dtype, default the layer's.

        Returns:
            A :class:`KVCache` with ``g`` heads of ``d_head``.
        """
        weight = self.W_K.weight
        return KVCache(batch, self.g, max_len, self.d_head, dtype or weight.dtype, weight.device)

    # ignore: causal self-attention on X with an optional cache, weights always returned: narrower than the base
    def forward(self, X: Tensor, cache: KVCache | None = None) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        as_tensor(X, "X")
        check_min_rank(X, 3, "X", "(B, n, d_model)")
        check_dim_equal(X.shape[-1], self.d_model, "GroupedQueryAttention", "d_model of X", "d_model of the module")
        n = X.shape[-2]
        n_f = n + (0 if cache is None else cache.length)  # the keys once the new ones are cached
        mask = offset_causal_mask(n, n_f, X.device)[None]  # (1, n_q, n_f): shared by batch and heads
        # the per-head keys and values of X go into the cache, and attention reads all of it
        out, a = super().forward(X, None, mask, kv_transform=None if cache is None else cache.append)
        assert a is not None  # need_weights is left at True
        return out, a


class DecoderBlock(nn.Module):
    """Pre-norm decoder-only block: ``X + GQA(LN(X))``, then ``X + FFN(LN(X))``.

    Args:
        d_model: model width.
        n_heads: ``h``, query heads.
        n_kv_heads: ``g``, key/value heads.
        d_ff: width of the feed-forward layer.

    Shape:
        forward: X ``(B, n, d_model)`` (with an optional :class:`KVCache`) -> ``(B, n, d_model)``.

    Raises:
        ValueError: as :class:`GroupedQueryAttention`, or ``d_ff`` is not an integer >= 1.
        TypeError: if X is not a floating-point tensor (a list, NumPy array or integer tensor).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int) -> None:
        check_integers("DecoderBlock", minimum=1, d_ff=d_ff)
        super().__init__()
        self.attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)

    def forward(self, X: Tensor, cache: KVCache | None = None) -> Tensor:
        as_tensor(X, "X")
        check_min_rank(X, 3, "X", "(B, n, d_model)")
        check_dim_equal(X.shape[-1], self.attn.d_model, "DecoderBlock", "d_model of X", "d_model of the block")
        X = residual_norm(X, lambda Z: self.attn(Z, cache)[0], self.norm1, True)
        return residual_norm(X, self.ffn, self.norm2, True)


@catalogued("extra:kv-cache")
class TinyDecoderLM(nn.Module):
    """A decoder-only language model of :class:`DecoderBlock` layers with sinusoidal positions.

    ``forward(tokens, caches=None)``: with ``caches`` (one :class:`KVCache` per
    layer, see :meth:`new_caches`) the tokens are the next ``n`` positions after
    what the caches hold.

    Args:
        vocab: vocabulary size; token ids are ``0 .. vocab - 1``.
        d_model: model width.
        n_heads: ``h``, query heads.
        n_kv_heads: ``g``, key/value heads (default ``h``).
        d_ff: width of the feed-forward layers.
        n_layers: ``L``, decoder blocks.
        max_len: the longest sequence, prompt plus generated tokens.

    Shape:
        forward: tokens ``(B, n)`` integers -> logits ``(B, n, vocab)``.

    Raises:
        ValueError: if ``vocab``, ``d_model``, ``h``, ``g``, ``d_ff`` or ``max_len`` is not an integer
            >= 1, ``L`` is negative or not an integer, ``g`` does not divide ``h`` or ``h`` does not
            divide ``d_model`` (:class:`GroupedQueryAttention`); in forward, if the sequence would
            exceed ``max_len`` or a token id is outside ``[0, vocab)``.
        TypeError: if tokens is not a tensor.
    """

    P: Tensor  # a buffer (registered in __init__)

    def __init__(
        self,
        vocab: int,
        d_model: int = 64,
        n_heads: int = 8,
        n_kv_heads: int | None = None,
        d_ff: int = 128,
        n_layers: int = 2,
        max_len: int = 1024,
    ) -> None:
        super().__init__()
        g = n_heads if n_kv_heads is None else n_kv_heads
        check_integers(
            "TinyDecoderLM", minimum=1, vocab=vocab, d_model=d_model, n_heads=n_heads, d_ff=d_ff, max_len=max_len
        )
        check_integers("TinyDecoderLM", minimum=0, n_layers=n_layers)
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("P", sinusoidal_position_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, n_heads, g, d_ff) for _ in range(n_layers))
        self.norm = LayerNorm(d_model)
        self.readout = nn.Linear(d_model, vocab)

    def new_caches(self, batch: int, max_len: int | None = None) -> list[KVCache]:
        """One empty :class:`KVCache` per layer.

        Args:
            batch: ``B``, sequences.
            max_len: positions to reserve, default the model's ``max_len``.

        Returns:
            A list of ``n_layers`` caches.
        """
        n = self.P.shape[0] if max_len is None else max_len
        # cast: nn.ModuleList is not generic; __init__ fills self.blocks with DecoderBlocks only
        return [cast(DecoderBlock, b).attn.new_cache(batch, n, self.embed.weight.dtype) for b in self.blocks]

    def forward(self, tokens: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        require_tensor(tokens, "tokens")
        start = 0 if caches is None else caches[0].length
        n, vocab = tokens.shape[-1], self.embed.num_embeddings
        if tokens.is_floating_point() or (tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < vocab):
            raise ValueError(
                f"tokens must be integer ids in [0, vocab={vocab}), got dtype {tokens.dtype}, "
                f"shape {tuple(tokens.shape)}"
                + (f", range [{int(tokens.min())}, {int(tokens.max())}]" if tokens.numel() else "")
            )
        if start + n > self.P.shape[0]:
            raise ValueError(f"positions {start}..{start + n - 1} exceed max_len={self.P.shape[0]}")
        X = self.embed(tokens) + self.P[start : start + n].to(self.embed.weight.dtype)
        for i, block in enumerate(self.blocks):
            X = block(X, None if caches is None else caches[i])
        return self.readout(self.norm(X))


@catalogued("extra:kv-cache")
@torch.no_grad()
def generate(model: TinyDecoderLM, prompt: Tensor, n_new: int, use_cache: bool = True) -> Tensor:
    """Greedy generation of ``n_new`` tokens after ``prompt``.

    With ``use_cache`` the prompt is encoded once into per-layer caches and each
    step feeds only the newest token; without, every step reruns the model on
    the whole sequence. Both give the same tokens (up to floating-point ties).

    Args:
        model: the language model.
        prompt: token ids.
        n_new: tokens to generate.
        use_cache: decode with a KV cache (default) or recompute every step.

    Shape:
        prompt: ``(B, n_p)``; returns ``(B, n_p + n_new)``.

    Returns:
        The prompt followed by the generated tokens.

    Raises:
        ValueError: if ``n_new < 0`` or the prompt is empty.
    """
    if n_new < 0 or prompt.dim() != 2 or prompt.shape[-1] < 1:
        raise ValueError(f"need a (B, n_p >= 1) prompt and n_new >= 0, got prompt {tuple(prompt.shape)}, n_new={n_new}")
    seq = prompt
    if use_cache:
        caches = model.new_caches(prompt.shape[0], prompt.shape[-1] + n_new)
        logits = model(prompt, caches)
        for _ in range(n_new):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
            logits = model(nxt, caches)
        return seq
    for _ in range(n_new):
        nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq
