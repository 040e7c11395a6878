"""Attention sinks and output gates: where a head puts the weight it does not want to spend (beyond the survey).

A softmax row must sum to 1, so a head with nothing to look at still spreads its
weight over some keys. Trained models put that weight on the first tokens (the
*attention sink* of Xiao et al. 2024). Three answers of today's models:

* **StreamingLLM's cache** (Xiao et al. 2024): keep the first ``n_sink`` tokens
  in the KV cache for ever, plus a rolling window of the last ``window`` tokens.
  Positions are assigned *inside the cache*: the keys are stored before RoPE and
  rotated by their index in the cache at every step, and the query by its own
  index, so the offsets a model sees never exceed the cache size
  (:class:`StreamingCache`).
* **A learned sink logit** (gpt-oss): one more slot in the softmax's denominator,
  ``a_l = exp(e_l) / (exp(s_j) + sum_m exp(e_m))`` with one learned logit ``s_j``
  per head and no value behind it, so a row's weights sum to
  ``1 - exp(s_j) / (exp(s_j) + sum_m exp(e_m)) < 1``. It is the core's ``sink``
  option (:func:`attnsurvey.attention.attend`); :class:`SinkAttention` owns the
  logits.
* **Gated attention** (Qiu et al. 2025): multiply each head's context elementwise
  by ``sigmoid(W_G x)``, computed from the layer input ``x``, before ``W_O``; a
  head can then output (nearly) nothing without a sink (:class:`GatedAttention`,
  the multi-head module's per-call ``context_hook``).

Weights and contexts come from the package's core through the multi-head module.
Shapes: heads the axis before the sequence, ``(B, h, n, d_head)``; ``g`` key/value
heads. Masks are boolean, ``True`` = may attend.
"""

from __future__ import annotations

from typing import Any, Unpack

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_integers, check_min_rank
from ..attention import AttendOptions
from ..catalog import catalogued
from ..masking import zero_unattended
from ..query_related.multihead import (
    MultiHeadAttention,
    Projection,
    SelfAttentionVariant,
    _split_heads,
    _weight_and_bias,
    multi_head_attention,
)
from .decoding import grouped_query_attention
from .kv_cache import check_step_inputs
from .positions import RopeConvention, _check_base, _check_convention, apply_rope

CHAPTER = "chapters/ch06_6_sinks_and_gates.ipynb"


@catalogued(
    "extra:attention-sinks",
    title="Attention sinks: StreamingLLM's cache (first tokens + rolling window, positions in the cache) "
    "and gpt-oss's learned sink logit",
)
class StreamingCache:
    """StreamingLLM's KV cache: the first ``n_sink`` positions and the last ``window`` positions.

    Keys are stored *before* RoPE. At every step the cache holds ``m <= n_sink + window``
    positions in their original order; key ``i`` of the cache is rotated to position
    ``i`` and the newest query to position ``m - 1`` (its own index), whatever the
    tokens' positions in the text. A new position is appended, then the oldest
    position after the sinks is evicted when the cache holds more than
    ``n_sink + window``.

    Args:
        batch: ``B``, sequences decoded together.
        n_kv_heads: ``g``, key/value heads.
        d_head: the head size (even, for RoPE).
        n_sink: positions kept from the start (an integer >= 0; 4 in the paper).
        window: the most recent positions kept (an integer >= 1), the new one included.
        base: RoPE's frequency base.
        convention: RoPE's pairing (``"half"`` as LLaMA, or ``"interleaved"``).
        dtype: dtype of the cache (default float32).
        device: device of the cache.

    Shape:
        K, V: ``(B, g, m, d_head)``; positions: ``(m,)``, the positions in the text.

    Raises:
        ValueError: for sizes that are not integers in range, an odd ``d_head``, a ``base`` that is not a
            finite number > 0, or an unknown convention.
    """

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        d_head: int,
        n_sink: int,
        window: int,
        base: float = 10000.0,
        convention: RopeConvention = "half",
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_integers("StreamingCache", minimum=1, batch=batch, n_kv_heads=n_kv_heads, d_head=d_head, window=window)
        check_integers("StreamingCache", minimum=0, n_sink=n_sink)
        if d_head % 2:
            raise ValueError(f"StreamingCache rotates keys with RoPE and needs an even d_head, got d_head={d_head}")
        _check_convention(convention)
        base = _check_base(base)
        self.K = torch.zeros(batch, n_kv_heads, 0, d_head, dtype=dtype, device=device)
        self.V = torch.zeros_like(self.K)
        self.positions = torch.zeros(0, dtype=torch.long, device=device)
        self.n_sink, self.window, self.base, self.convention = n_sink, window, base, convention
        self.length = 0

    @property
    def capacity(self) -> int:
        """The most positions the cache holds, ``n_sink + window``."""
        return self.n_sink + self.window

    def _push(self, k: Tensor, v: Tensor) -> None:
        """Append one position (``(B, g, 1, d)`` each), then evict the oldest position after the sinks."""
        self.K, self.V = torch.cat([self.K, k], -2), torch.cat([self.V, v], -2)
        self.positions = torch.cat([self.positions, self.positions.new_full((1,), self.length)])
        self.length += 1
        if self.K.shape[-2] > self.capacity:
            keep = torch.cat(
                [torch.arange(self.n_sink), torch.arange(self.K.shape[-2] - self.window, self.K.shape[-2])]
            )
            keep = keep.to(self.positions.device)
            self.K, self.V, self.positions = self.K[..., keep, :], self.V[..., keep, :], self.positions[keep]

    def step(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Decode ``n`` new positions one at a time: append each, evict, attend with positions in the cache.

        Args:
            q: the new positions' queries, before RoPE.
            k: their keys, before RoPE.
            v: their values.

        Shape:
            q: ``(B, h, n, d_head)``; k, v: ``(B, g, n, d_head)``; returns ``(B, h, n, d_head)``.

        Returns:
            The contexts of the new positions; each attends to the sinks and its window (itself included).

        Raises:
            ValueError: if a tensor has the wrong shape or dtype, or ``g`` does not divide ``h``.
        """
        n = check_step_inputs(self.K, q, k, v, "StreamingCache.step")
        base, conv = self.base, self.convention
        contexts = []
        for i in range(n):
            self._push(k[..., i : i + 1, :], v[..., i : i + 1, :])
            m = self.K.shape[-2]
            q_i = apply_rope(q[..., i : i + 1, :], m - 1, base, conv)  # the query at its own index in the cache
            c, _ = grouped_query_attention(q_i, apply_rope(self.K, 0, base, conv), self.V)  # keys at 0 .. m - 1
            contexts.append(c)
        return torch.cat(contexts, -2) if contexts else q.new_zeros(*q.shape[:-1], self.K.shape[-1])


@catalogued("extra:attention-sinks")
class SinkAttention(SelfAttentionVariant):
    """Multi-head self-attention with a learned sink logit per head (gpt-oss).

    The logits ``s_j`` (``sinks``, shape ``(h,)``, initialised to 0) go to the core as
    its ``sink`` option: head ``j``'s weights are ``exp(e_l) / (exp(s_j) + sum_m exp(e_m))``
    over the allowed keys and sum to less than 1. Constructor and ``forward(X,
    X_kv=None, mask=None, **options)`` as
    :class:`~attnsurvey.query_related.multihead.SelfAttentionVariant` (pass
    ``is_causal=True`` or a sliding-window mask for a decoder).

    Args:
        d_model: the model width.
        h: the number of query heads.
        **kwargs: the other arguments of
            :class:`~attnsurvey.query_related.multihead.MultiHeadAttention` (``h_kv``, ``bias``, ...).

    Shape:
        sinks: ``(h,)``; X: ``(..., n, d_model)``; returns ``(..., n, d_model)`` and weights ``(..., h, n, n)``.

    Raises:
        ValueError: as :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`; ``forward``
            also if ``sink`` is passed (the module sets it).
    """

    def __init__(self, d_model: int, h: int, **kwargs: Any) -> None:
        super().__init__(d_model, h, **kwargs)
        self.sinks = nn.Parameter(torch.zeros(h, device=self.W_Q.weight.device, dtype=self.W_Q.weight.dtype))

    def attend_options(self, X: Tensor) -> AttendOptions:
        """The core's ``sink`` option: one logit per head, ``(h, 1, 1)``."""
        return {"sink": self.sinks.reshape(-1, 1, 1)}


@catalogued(
    "extra:gated-attention",
    title="Gated attention: c^(j) * sigmoid(W_G x) per head before W_O (Qiu et al. 2025)",
)
def output_gate(X: Tensor, W_G: Projection, h: int) -> Tensor:
    """The output gate of gated attention, ``sigmoid(W_G x)``, split into the heads (Qiu et al. 2025).

    Elementwise (one gate per coordinate of every head's context, ``W_G`` ``(h*d_v, d)``)
    or headwise (one gate per head, ``W_G`` ``(h, d)``), as the rows of ``W_G`` say.

    Args:
        X: the layer input (after the pre-norm), the rows the queries come from.
        W_G: the gate projection, a weight matrix or an ``nn.Linear`` (its bias is then added).
        h: the number of heads.

    Shape:
        X: ``(..., n, d)``; W_G: ``(h*d_v, d)`` or ``(h, d)``; returns ``(..., h, n, d_v)`` or ``(..., h, n, 1)``.

    Returns:
        Gates in ``(0, 1)``.

    Raises:
        TypeError: if X or the weight is not a floating-point tensor.
        ValueError: if ``h`` does not divide the rows of ``W_G`` or the widths differ.
    """
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d)")
    W, b = _weight_and_bias(W_G)
    as_tensor(W, "W_G")
    check_integers("output_gate", minimum=1, h=h)
    if W.dim() != 2 or W.shape[0] % h or W.shape[1] != X.shape[-1]:
        raise ValueError(
            f"W_G must have shape (h*d_v, d) or (h, d) with h={h} and d={X.shape[-1]} (the width of X "
            f"{tuple(X.shape)}), got {tuple(W.shape)}"
        )
    z = X @ W.T if b is None else nn.functional.linear(X, W, b)
    return _split_heads(torch.sigmoid(z), h)


@catalogued("extra:gated-attention")
def gated_multi_head_attention(
    X: Tensor,
    W_Q: Projection,
    W_K: Projection,
    W_V: Projection,
    W_O: Projection,
    W_G: Projection,
    h: int,
    mask: Tensor | None = None,
    **options: Any,
) -> tuple[Tensor, Tensor | None]:
    """Gated multi-head self-attention: each head's context times ``sigmoid(W_G x)`` before ``W_O``.

    :func:`~attnsurvey.query_related.multihead.multi_head_attention` with the gate of
    :func:`output_gate` as its ``context_hook``: ``out = W_O concat_j(c^(j) * g^(j))``.

    Args:
        X: the layer input (queries, keys and values come from it).
        W_Q: query projection. W_K: key projection. W_V: value projection. W_O: output projection.
        W_G: the gate projection (:func:`output_gate`).
        h: the number of heads.
        mask: boolean, ``True`` = may attend (as :func:`~attnsurvey.query_related.multihead.multi_head_attention`).
        **options: the other keyword arguments of
            :func:`~attnsurvey.query_related.multihead.multi_head_attention` (``is_causal``, ``h_kv``, ``sink``, ...).

    Shape:
        X: ``(..., n, d)``; weights as :func:`~attnsurvey.query_related.multihead.multi_head_attention`;
        returns ``(..., n, d_o)`` and the weights ``(..., h, n, n)``.

    Returns:
        ``(output, weights)``.

    Raises:
        TypeError, ValueError: as :func:`output_gate` and
            :func:`~attnsurvey.query_related.multihead.multi_head_attention`.
    """
    gate = output_gate(X, W_G, h)
    return multi_head_attention(X, X, X, W_Q, W_K, W_V, W_O, h, mask, context_hook=lambda c, a: c * gate, **options)


@catalogued("extra:gated-attention")
class GatedAttention(MultiHeadAttention):
    """Multi-head self-attention with an output gate per head (Qiu et al. 2025): the module form.

    ``W_G`` is an ``nn.Linear(d_model, h*d_v)`` (elementwise) or ``nn.Linear(d_model, h)``
    (headwise), with a bias. ``forward(X, mask=None, *, need_weights=True, **options)``
    computes the gate from ``X`` and passes it to the multi-head stack as this call's
    ``context_hook``; the mask is boolean, ``True`` = may attend.

    Args:
        d_model: the model width.
        h: the number of heads.
        headwise: one gate per head instead of one per coordinate.
        **kwargs: the other arguments of :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`.

    Shape:
        X: ``(..., n, d_model)``; returns ``(..., n, d_model)`` and weights ``(..., h, n, n)`` (or None).

    Raises:
        ValueError: as :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`.
    """

    def __init__(self, d_model: int, h: int, headwise: bool = False, **kwargs: Any) -> None:
        super().__init__(d_model, h, **kwargs)
        w = self.W_Q.weight
        self.W_G = nn.Linear(d_model, h if headwise else h * self.d_v, device=w.device, dtype=w.dtype)

    # ignore: self-attention on X with the gate computed from X: narrower than the base's forward
    def forward(  # type: ignore[override]
        self, X: Tensor, mask: Tensor | None = None, *, need_weights: bool = True, **options: Unpack[AttendOptions]
    ) -> tuple[Tensor, Tensor | None]:
        # the gate reads the rows the stack reads: a padded row's NaN/Inf is cleared there and here alike
        rows = X if self.batch_first or X.dim() < 3 else X.transpose(-2, -3)  # (..., n, d), as the stack's
        gate = output_gate(zero_unattended(rows, options.get("key_padding_mask"), mask), self.W_G, self.h)
        return super().forward(X, None, mask, need_weights=need_weights, context_hook=lambda c, a: c * gate, **options)


__all__ = [
    "GatedAttention",
    "SinkAttention",
    "StreamingCache",
    "gated_multi_head_attention",
    "output_gate",
]
