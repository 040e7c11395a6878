"""Conformance adapters for the attention of today's models in ``transformers``: gpt-oss and Gemma 3.

* **gpt-oss** (``GptOssAttention``): a learned sink logit per head (the core's
  ``sink`` option), RoPE on rotate-half pairs, grouped K/V heads, biases on the
  projections, and on its ``sliding_attention`` layers a sliding window.
* **Gemma 3** (``Gemma3Attention``): local and global layers
  (``layer_types``), a sliding window on the local ones, RoPE with another base per
  layer type, RMS norms of the per-head queries and keys, and the score scaled by
  ``query_pre_attn_scalar^(-1/2)`` instead of ``1/sqrt(d_k)``.

Modules come from tiny configurations with random weights (nothing is downloaded),
in float64, on the eager attention path. The library's masks are built by its own
mask functions (``transformers.masking_utils``) evaluated on the index grid, so the
checks compare the window's convention too: in both libraries, as in the book's
:func:`~attnsurvey.beyond.layer_caches.sliding_window_mask`, a query sees the
``w`` keys ``i - w < j <= i``, itself included. The attention modules take RoPE's
cosines and sines as an input; the adapter computes them with the library's
formula (``cos(t * base^(-2i/d))``) in float64 (:func:`rope_cos_sin`), where the
library's rotary modules compute the angles in float32 (an error near 1e-7).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F_
from torch import Tensor

from .._checks import check_integers
from ..attention import resolve_score
from ..beyond.layer_caches import sliding_window_mask
from ..beyond.positions import _check_base, apply_rope
from ..general_mechanisms.scoring import scaled_dot_score
from ..masking import causal_mask
from ..query_related.multihead import multi_head_attention
from . import Check, Convention, Pair, library
from .torch_target import rand
from .transformers_common import additive_mask, eager_config, random_init

#: Sizes of the gpt-oss and Gemma 3 checks: batch, length (longer than the window), width, heads, head size.
B, N, D_MODEL, H, H_KV, D_HEAD, WINDOW = 2, 7, 16, 4, 2, 4, 3


def library_mask(mask_function: Callable[..., Any], n: int) -> Tensor:
    """A ``transformers.masking_utils`` mask function evaluated on every (query, key) pair.

    Args:
        mask_function: ``(batch_idx, head_idx, q_idx, kv_idx) -> bool``, True = may attend.
        n: the sequence length.

    Shape:
        returns ``(n, n)``.

    Returns:
        The boolean mask, ``True`` = may attend.
    """
    zero, q_idx, kv_idx = torch.tensor(0), torch.arange(n)[:, None], torch.arange(n)[None, :]
    mask: Tensor = mask_function(zero, zero, q_idx, kv_idx)  # the library's functions take index tensors
    return mask.expand(n, n).to(torch.bool)


def rope_cos_sin(n: int, d: int, base: float, repeat: bool = False) -> tuple[Tensor, Tensor]:
    """RoPE's cosines and sines as ``transformers`` builds them, in float64: angle ``t * base^(-2i/d)``.

    Args:
        n: positions ``0 .. n - 1``.
        d: the head size (even).
        base: the frequency base (``rope_theta``).
        repeat: the angles twice (Gemma 3's and LLaMA's ``cat(freqs, freqs)``), else once (gpt-oss).

    Shape:
        returns two ``(1, n, d/2)`` tensors (``(1, n, d)`` with ``repeat``).

    Returns:
        ``(cos, sin)``.

    Raises:
        ValueError: unless ``n >= 0`` is an integer, ``d >= 2`` an even integer and ``base`` a finite number > 0.
    """
    check_integers("rope_cos_sin", minimum=0, n=n)
    check_integers("rope_cos_sin", minimum=1, d=d)
    if d % 2:
        raise ValueError(f"RoPE rotates pairs of coordinates and needs an even head size, got d={d}")
    base = _check_base(base)
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq
    if repeat:
        angles = torch.cat([angles, angles], -1)
    return angles.cos()[None], angles.sin()[None]


def rope_half_score(
    base: float, scale: float | None = None, norms: tuple[Any, Any] | None = None
) -> Callable[[Tensor, Tensor], Tensor]:
    """The per-head score of a RoPE model with rotate-half pairs, optionally after RMS norms of q and k.

    Args:
        base: RoPE's frequency base.
        scale: the factor of the product (None: ``1/sqrt(d_k)``).
        norms: Gemma 3's ``(q_norm, k_norm)`` modules (weight ``w``, ``eps``): ``x / rms(x) * (1 + w)``.

    Shape:
        the returned function maps q ``(..., n_q, d_k)`` and k ``(..., n_f, d_k)`` to ``(..., n_q, n_f)``.

    Returns:
        ``(q, k) -> e`` with q ``(..., n_q, d_k)`` and k ``(..., n_f, d_k)``.

    Raises:
        ValueError: unless ``base`` is a finite number > 0 and ``scale`` None or a finite number.
    """
    base = _check_base(base)
    _, scale = resolve_score(None, scale)  # checks the scale

    def score(q: Tensor, k: Tensor) -> Tensor:
        if norms is not None:
            q, k = (F_.rms_norm(x, (x.shape[-1],), 1.0 + m.weight, m.eps) for x, m in zip((q, k), norms, strict=True))
        q, k = apply_rope(q, base=base, convention="half"), apply_rope(k, base=base, convention="half")
        return scaled_dot_score(q, k) if scale is None else (q @ k.transpose(-1, -2)) * scale

    return score


def checks() -> list[Check]:
    """The gpt-oss (sink, sliding window) and Gemma 3 (local and global layers) checks.

    Returns:
        A list of :class:`~attnsurvey.conformance.Check`.
    """

    def gemma3_convention(layer: int) -> Convention:
        return Convention(
            "Gemma 3: q/k norms, query_pre_attn_scalar",
            "Gemma 3 RMS-normalises each head's query and key (x / rms(x) * (1 + w)) before RoPE and scales the "
            "scores by query_pre_attn_scalar^(-1/2) instead of 1/sqrt(d_k); with both in the score they agree "
            "(to about 1e-7: its eager path computes the softmax and these norms in float32).",
            lambda: gemma3_pair(layer, mapped=True),
        )

    return [
        Check("transformers", "sink", "GptOssAttention (full_attention)", lambda: gpt_oss_pair(1)),
        Check("transformers", "window", "GptOssAttention (sliding_attention)", lambda: gpt_oss_pair(0)),
        Check(
            "transformers",
            "local-global",
            "Gemma3Attention (sliding_attention)",
            lambda: gemma3_pair(0),
            gemma3_convention(0),
        ),
        Check(
            "transformers",
            "local-global",
            "Gemma3Attention (full_attention)",
            lambda: gemma3_pair(5),
            gemma3_convention(5),
        ),
    ]


def _masks(kind: str, book_window: int) -> tuple[Tensor, Tensor]:
    """The book's mask and the library's for a layer of this kind: ``(book, library)``, ``True`` = may attend."""
    masks = library("transformers.masking_utils")
    if kind == "sliding_attention":
        return sliding_window_mask(N, book_window), library_mask(masks.sliding_window_causal_mask_function(WINDOW), N)
    return causal_mask(N), library_mask(masks.causal_mask_function, N)


def gpt_oss_pair(layer: int, *, book_window: int = WINDOW, sink: bool = True) -> Pair:
    """gpt-oss attention (layer 0 slides over WINDOW keys, layer 1 is global) and the book's, same weights.

    Args:
        layer: 0 (``sliding_attention``) or 1 (``full_attention``).
        book_window: the book's window (another value than the library's WINDOW is a planted bug).
        sink: pass the sink logits to the book's core (False is a planted bug).

    Shape:
        both outputs ``(B, N, D_MODEL)``.

    Returns:
        ``(book, library)``.
    """
    m = library("transformers.models.gpt_oss.modeling_gpt_oss")
    theta = 150000.0
    cfg = eager_config(
        m.GptOssConfig,
        hidden_size=D_MODEL,
        num_attention_heads=H,
        num_key_value_heads=H_KV,
        head_dim=D_HEAD,
        num_hidden_layers=2,
        sliding_window=WINDOW,
        rope_parameters={"rope_type": "default", "rope_theta": theta},  # plain RoPE (no YaRN rescaling)
    )
    X = rand(B, N, D_MODEL, seed=41)
    attn = random_init(m.GptOssAttention(cfg, layer_idx=layer), 42 + layer)
    ours_mask, theirs_mask = _masks(cfg.layer_types[layer], book_window)
    theirs = attn(
        X, position_embeddings=rope_cos_sin(N, D_HEAD, theta), attention_mask=additive_mask(theirs_mask)[None, None]
    )[0]
    ours, _ = multi_head_attention(
        X,
        X,
        X,
        attn.q_proj,
        attn.k_proj,
        attn.v_proj,
        attn.o_proj,
        h=H,
        h_kv=H_KV,
        mask=ours_mask,
        score=rope_half_score(theta),
        sink=attn.sinks.reshape(H, 1, 1) if sink else None,
    )
    return ours, theirs


def gemma3_pair(layer: int, mapped: bool = False, *, book_window: int = WINDOW) -> Pair:
    """Gemma 3 attention (layers 0-4 local over WINDOW keys, RoPE base 1e4; layer 5 global, 1e6) and the book's.

    Args:
        layer: 0 .. 5.
        mapped: put Gemma's q/k RMS norms and its ``query_pre_attn_scalar^(-1/2)`` into the book's score.
        book_window: the book's window (another value than WINDOW is a planted bug).

    Shape:
        both outputs ``(B, N, D_MODEL)``.

    Returns:
        ``(book, library)``.
    """
    m = library("transformers.models.gemma3.modeling_gemma3")
    scalar = 2 * D_HEAD  # query_pre_attn_scalar != d_k: the scaling differs from the book's
    cfg = eager_config(
        m.Gemma3TextConfig,
        hidden_size=D_MODEL,
        num_attention_heads=H,
        num_key_value_heads=H_KV,
        head_dim=D_HEAD,
        num_hidden_layers=6,
        sliding_window=WINDOW,
        query_pre_attn_scalar=scalar,
    )
    X = rand(B, N, D_MODEL, seed=51)
    kind = cfg.layer_types[layer]
    attn = random_init(m.Gemma3Attention(cfg, layer_idx=layer), 52 + layer)
    ours_mask, theirs_mask = _masks(kind, book_window)
    base = cfg.rope_parameters[kind]["rope_theta"]
    theirs = attn(
        X,
        position_embeddings=rope_cos_sin(N, D_HEAD, base, repeat=True),
        attention_mask=additive_mask(theirs_mask)[None, None],
    )[0]
    score = rope_half_score(base, scalar**-0.5, (attn.q_norm, attn.k_norm)) if mapped else rope_half_score(base)
    ours, _ = multi_head_attention(
        X, X, X, attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, h=H, h_kv=H_KV, mask=ours_mask, score=score
    )
    return ours, theirs
