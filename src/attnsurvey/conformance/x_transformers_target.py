"""Conformance adapters for ``x-transformers``: its ``Attention`` with masks, grouped K/V, ALiBi, rotary and memory.

``x_transformers.x_transformers.Attention`` holds bias-free projections
``to_q, to_k, to_v, to_out`` (``nn.Linear``, so already the survey's
``(d_out, d_in)`` shape) and splits heads as ``b n (h d) -> b h n d``, as the
book does. Its ``mask`` is a key-padding mask with ``True`` = keep, the
book's polarity. Positions enter through ``forward``'s ``rel_pos`` (an
``AlibiPositionalBias``) and ``rotary_pos_emb`` (from a ``RotaryEmbedding``),
which is how ``AttentionLayers`` passes them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._checks import check_integers
from ..beyond.positions import alibi_bias, alibi_slopes
from ..query_related.multihead import multi_head_attention
from . import Check, Convention, Pair, library
from .torch_target import rand
from .transformers_target import rope_score


def _init(module: Any, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return module.double().eval()


def grouping_permutation(h: int, h_kv: int) -> Tensor:
    """Query-head order that turns x-transformers' grouping into the book's.

    x-transformers repeats the key/value heads as ``(r h_kv)`` (query head ``j`` reads K/V
    head ``j mod h_kv``); the book, as torch and LLaMA, as ``(h_kv r)`` (head ``j`` reads
    ``j div r``, ``r = h / h_kv``).

    Args:
        h: query heads.
        h_kv: key/value heads (divides h).

    Shape:
        Returns ``(h,)``.

    Returns:
        ``perm`` such that the book's query head ``b`` is x-transformers' head ``perm[b]``.

    Raises:
        ValueError: if ``h`` or ``h_kv`` is not an integer >= 1, or ``h_kv`` does not divide ``h``.
    """
    check_integers("grouping_permutation", minimum=1, h=h, h_kv=h_kv)
    if h % h_kv:
        raise ValueError(f"grouping_permutation needs h_kv to divide h, got h={h}, h_kv={h_kv}")
    r = h // h_kv
    b = torch.arange(h)
    return (b % r) * h_kv + b // r


def reorder_heads(W: Tensor, perm: Tensor, dim: int) -> Tensor:
    """Reorder the head blocks of a stacked projection along ``dim`` (rows of W_Q, columns of W_O).

    Args:
        W: the weight, ``h * d`` wide along ``dim``.
        perm: the new head order ``(h,)``.
        dim: 0 for a projection into the heads, 1 for the output projection.

    Shape:
        W ``(h*d, d_in)`` or ``(d_out, h*d)``; returns the same.

    Returns:
        The reordered weight.
    """
    h = len(perm)
    d = W.shape[dim] // h
    index = (perm[:, None] * d + torch.arange(d)[None, :]).reshape(-1)
    return W.index_select(dim, index)


def checks() -> list[Check]:
    """The x-transformers checks: multi-head, causal, grouped K/V, ALiBi, rotary, memory key/values.

    Returns:
        A list of :class:`~attnsurvey.conformance.Check`.
    """
    xt = library("x_transformers.x_transformers")
    X = rand(B, N, D_MODEL, seed=21)
    return [*_heads_checks(xt, X), *_position_checks(xt, X), *_memory_checks(xt, X)]


#: The sizes of the checks' input X.
B, N, D_MODEL = 2, 5, 8


def _book(X: Tensor, m: Any, h: int, **kw: Any) -> Tensor:
    """The book's multi-head attention on X with the projections of x-transformers' ``Attention`` m."""
    W = kw.pop("weights", (m.to_q.weight, m.to_k.weight, m.to_v.weight, m.to_out.weight))
    out, _ = multi_head_attention(X, X, X, W[0], W[1], W[2], W[3], h=h, **kw)
    return out


def _heads_checks(xt: Any, X: Tensor) -> list[Check]:
    """Attention with a padding mask, causal, and with grouped K/V heads."""
    keep = torch.arange(N)[None, :] < torch.tensor([5, 3])[:, None]  # (B, n_f): True = a real token
    plain = _init(xt.Attention(D_MODEL, dim_head=4, heads=2), 22)
    causal = _init(xt.Attention(D_MODEL, dim_head=4, heads=2, causal=True), 23)
    gqa = _init(xt.Attention(D_MODEL, dim_head=4, heads=4, kv_heads=2), 24)

    def gqa_book(mapped: bool) -> Tensor:
        W = (gqa.to_q.weight, gqa.to_k.weight, gqa.to_v.weight, gqa.to_out.weight)
        if mapped:
            perm = grouping_permutation(4, 2)
            W = (reorder_heads(W[0], perm, 0), W[1], W[2], reorder_heads(W[3], perm, 1))
        return _book(X, gqa, 4, weights=W, h_kv=2)

    return [
        Check(
            "x_transformers",
            "eq38-40",
            "Attention(mask)",
            lambda: (_book(X, plain, 2, key_padding_mask=keep), plain(X, mask=keep)),
            Convention(
                "padded queries zeroed",
                "x-transformers reads its mask as marking padded tokens on both sides: besides hiding the "
                "padded keys it sets the output of every padded query to zero; the book's key_padding_mask "
                "hides keys only, and a padded query still gets a context.",
                lambda: (_book(X, plain, 2, key_padding_mask=keep) * keep[..., None], plain(X, mask=keep)),
            ),
        ),
        Check(
            "x_transformers",
            "causal",
            "Attention(causal=True)",
            lambda: (_book(X, causal, 2, is_causal=True), causal(X)),
        ),
        Check(
            "x_transformers",
            "gqa",
            "Attention(kv_heads=2)",
            lambda: (gqa_book(False), gqa(X)),
            Convention(
                "head grouping order",
                "x-transformers repeats the key/value heads as (r h_kv), so query head j reads K/V head "
                "j mod h_kv; the book (as torch's enable_gqa and LLaMA) reads head j div r. Reordering the "
                "query heads (rows of W_Q, columns of W_O) maps one onto the other.",
                lambda: (gqa_book(True), gqa(X)),
            ),
        ),
    ]


def _position_checks(xt: Any, X: Tensor) -> list[Check]:
    """Attention with ALiBi and with rotary positions."""
    alibi_attn = _init(xt.Attention(D_MODEL, dim_head=4, heads=3), 25)
    alibi = xt.AlibiPositionalBias(heads=3, total_heads=3).double()
    rotary_attn = _init(xt.Attention(D_MODEL, dim_head=4, heads=2), 26)
    rotary = xt.RotaryEmbedding(4).double()

    def alibi_pair() -> Pair:
        bias = alibi_bias(alibi_slopes(3), N, N).unsqueeze(0)  # (1, h, n_q, n_f)
        return _book(X, alibi_attn, 3, bias=bias), alibi_attn(X, rel_pos=alibi)

    return [
        Check("x_transformers", "alibi", "Attention(rel_pos=AlibiPositionalBias)", alibi_pair),
        Check(
            "x_transformers",
            "rope",
            "Attention(rotary_pos_emb=RotaryEmbedding)",
            lambda: (
                _book(X, rotary_attn, 2, score=rope_score),
                rotary_attn(X, rotary_pos_emb=rotary.forward_from_seq_len(N)),
            ),
        ),
    ]


def _memory_checks(xt: Any, X: Tensor) -> list[Check]:
    """Attention with learned memory key/value pairs (num_mem_kv)."""
    mem_attn = _init(xt.Attention(D_MODEL, dim_head=4, heads=2, num_mem_kv=2), 27)

    def with_memory(k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        mem_k, mem_v = (t.expand(k.shape[0], *t.shape) for t in (mem_attn.mem_k, mem_attn.mem_v))
        return torch.cat([mem_k, k], dim=-2), torch.cat([mem_v, v], dim=-2)

    return [
        Check(
            "x_transformers",
            "memory-kv",
            "Attention(num_mem_kv=2)",
            lambda: (_book(X, mem_attn, 2, kv_transform=with_memory), mem_attn(X)),
        ),
    ]
