"""Conformance adapters for Hugging Face ``transformers``: BERT, GPT-2, LLaMA and T5 attention.

Each model's attention module is built from a tiny configuration with random
weights (nothing is downloaded) and run with the eager attention path. The
adapters map the book's boolean masks (``True`` = may attend) onto the additive
masks these modules take (0 where allowed, the dtype's most negative finite
number where not), the projection weights onto ``W_Q, W_K, W_V, W_O`` (GPT-2's
``Conv1D`` stores them transposed) and the outputs back.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..attention import attend
from ..beyond.positions import apply_rope, rope_permutation
from ..general_mechanisms.scoring import scaled_dot_score
from ..query_related.multihead import multi_head_attention, split_heads
from . import Check, Convention, Pair, library, transformers_caches
from .torch_target import linear, rand, zero_dead_rows
from .transformers_common import additive_mask
from .transformers_common import eager_config as _config
from .transformers_common import random_init as _init


def interleave_permutation(d: int) -> Tensor:
    """The coordinate order that turns rotate-half pairs ``(i, i + d/2)`` into adjacent pairs ``(2i, 2i+1)``.

    Args:
        d: the head size (even).

    Shape:
        Returns ``(d,)``.

    Returns:
        ``[0, d/2, 1, d/2 + 1, ...]``: row ``2i`` of a permuted projection is row ``i`` of the
        original, row ``2i + 1`` is row ``i + d/2``.

    Raises:
        ValueError: if ``d`` is not an even integer >= 2.
    """
    return rope_permutation(d, "half", "interleaved")  # the package's own: the check below then tests it too


def permute_heads(W: Tensor, h: int, perm: Tensor) -> Tensor:
    """Reorder the output rows of a stacked projection within every head.

    Args:
        W: a projection ``(h*d, d_in)`` (or its bias ``(h*d,)``).
        h: the number of heads.
        perm: the new order of the ``d`` rows of one head.

    Shape:
        W ``(h*d, ...)``; perm ``(d,)``; returns W's shape.

    Returns:
        W with each head's rows in the order ``perm``.
    """
    d = W.shape[0] // h
    index = (torch.arange(h)[:, None] * d + perm[None, :]).reshape(-1)
    return W[index]


def rope_score(q: Tensor, k: Tensor) -> Tensor:
    """The book's RoPE score: the scaled dot product of rotated per-head queries and keys.

    Args:
        q: per-head queries. k: per-head keys.

    Shape:
        q ``(..., n_q, d_k)``, k ``(..., n_f, d_k)``; returns ``(..., n_q, n_f)``.

    Returns:
        The scores ``(R q)^T (R k) / sqrt(d_k)``.
    """
    return scaled_dot_score(apply_rope(q), apply_rope(k))


def checks() -> list[Check]:
    """The transformers checks: BERT, GPT-2, LLaMA (RoPE, grouped K/V), T5 (relative bias), DeepSeek-V3 (MLA),
    gpt-oss, Gemma 3 and Qwen3-Next (the gated delta rule).

    Returns:
        A list of :class:`~attnsurvey.conformance.Check`.

    Raises:
        ModuleNotFoundError: if ``transformers`` is not installed (the DeepSeek-V3, gpt-oss, Gemma 3 and
            Qwen3-Next checks import it).
    """
    X = rand(B, N, D_MODEL, seed=11)
    return [
        *_bert_checks(X),
        *_gpt2_checks(X),
        *_llama_checks(),
        *_t5_checks(X),
        *library(f"{__package__}.transformers_mla").checks(),
        *transformers_caches.checks(),
        *library(f"{__package__}.transformers_qwen3next").checks(),
    ]


#: The sizes of the inputs shared by the BERT, GPT-2 and T5 checks (LLaMA's width is twice D_MODEL).
B, N, D_MODEL = 2, 5, 8


def _model(name: str) -> Any:
    return library(f"transformers.models.{name}.modeling_{name}")


def _bert_checks(X: Tensor) -> list[Check]:
    """BERT self-attention: Eq. (38)-(39) and the concatenation, no W_O (BertSelfOutput holds it)."""
    bert_m = _model("bert")
    bert = _init(bert_m.BertSelfAttention(_config(bert_m.BertConfig, hidden_size=D_MODEL, num_attention_heads=2)), 12)
    eye = torch.eye(D_MODEL, dtype=torch.float64)
    lengths = torch.tensor([5, 3])
    kpm = torch.arange(N)[None, :] < lengths[:, None]  # (B, n_f): True = a real token (may attend)
    dead_kpm = kpm.clone()
    dead_kpm[1] = False  # example 1: every key padded

    def bert_pair(keys: Tensor) -> Pair:
        ours, _ = multi_head_attention(X, X, X, bert.query, bert.key, bert.value, eye, h=2, key_padding_mask=keys)
        theirs = bert(X, attention_mask=additive_mask(keys[:, None, None, :]))[0]
        return ours, theirs

    def bert_dead_mapped() -> Pair:
        ours, theirs = bert_pair(dead_kpm)
        return ours, zero_dead_rows(theirs, dead_kpm[:, None, :].expand(B, N, N))

    return [
        Check("transformers", "eq38-40", "BertSelfAttention", lambda: bert_pair(kpm)),
        Check(
            "transformers",
            "fully-masked",
            "BertSelfAttention",
            lambda: bert_pair(dead_kpm),
            Convention(
                "fully-masked rows: mean",
                "transformers masks with the most negative finite number instead of -inf, so a query whose "
                "keys are all padded gets uniform weights and the mean of the values; the book gives zero.",
                bert_dead_mapped,
            ),
        ),
    ]


def _gpt2_checks(X: Tensor) -> list[Check]:
    """GPT-2 attention: causal, Conv1D weights (d_in, d_out) transposed to the survey's (d_out, d_in)."""
    gpt2_m = _model("gpt2")
    gpt2 = _init(gpt2_m.GPT2Attention(_config(gpt2_m.GPT2Config, n_embd=D_MODEL, n_head=2), layer_idx=0), 13)

    def gpt2_pair() -> Pair:
        Wqkv, bqkv = gpt2.c_attn.weight.T, gpt2.c_attn.bias
        W = [linear(Wqkv[i * D_MODEL : (i + 1) * D_MODEL], bqkv[i * D_MODEL : (i + 1) * D_MODEL]) for i in range(3)]
        WO = linear(gpt2.c_proj.weight.T, gpt2.c_proj.bias)
        ours, _ = multi_head_attention(X, X, X, W[0], W[1], W[2], WO, h=2, is_causal=True)
        causal = torch.ones(N, N, dtype=torch.bool).tril()
        return ours, gpt2(X, attention_mask=additive_mask(causal)[None, None])[0]

    return [Check("transformers", "causal", "GPT2Attention", gpt2_pair)]


def _llama_checks() -> list[Check]:
    """LLaMA attention: RoPE (rotate-half pairing) and grouped K/V heads (h = 4, h_kv = 2)."""
    llama_m = _model("llama")
    h, h_kv, d_k = 4, 2, 4
    lcfg = _config(
        llama_m.LlamaConfig, hidden_size=D_MODEL * 2, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d_k
    )
    llama = _init(llama_m.LlamaAttention(lcfg, layer_idx=0), 14)
    rotary = llama_m.LlamaRotaryEmbedding(lcfg).double()
    XL = rand(B, N, D_MODEL * 2, seed=15)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    positions = torch.arange(N)[None].expand(B, N)
    cos, sin = rotary(XL, positions)

    def llama_out(rotate: bool = True) -> Tensor:
        emb = (cos, sin) if rotate else (torch.ones_like(cos), torch.zeros_like(sin))  # no rotation: positions 0
        out: Tensor = llama(XL, position_embeddings=emb, attention_mask=additive_mask(causal)[None, None])[0]
        return out

    def llama_book(rotate: bool = True, pairing: str = "interleaved") -> Tensor:
        WQ, WK = llama.q_proj.weight, llama.k_proj.weight
        if pairing == "rotate-half":  # the book's adjacent pairs made from LLaMA's halves
            perm = interleave_permutation(d_k)
            WQ, WK = permute_heads(WQ, h, perm), permute_heads(WK, h_kv, perm)
        out, _ = multi_head_attention(
            XL,
            XL,
            XL,
            WQ,
            WK,
            llama.v_proj.weight,
            llama.o_proj.weight,
            h=h,
            h_kv=h_kv,
            score=rope_score if rotate else None,
            is_causal=True,
        )
        return out

    return [
        Check(
            "transformers",
            "gqa",
            "LlamaAttention (no rotation)",
            lambda: (llama_book(rotate=False), llama_out(rotate=False)),
        ),
        Check(
            "transformers",
            "rope",
            "LlamaAttention",
            lambda: (llama_book(), llama_out()),
            Convention(
                "RoPE pairing: rotate-half",
                "LLaMA rotates coordinate i with i + d/2 (rotate_half); the book, as RoFormer, rotates the "
                "adjacent pair (2i, 2i+1). Reordering each head's rows of W_Q and W_K maps one onto the other.",
                lambda: (llama_book(pairing="rotate-half"), llama_out()),
            ),
        ),
    ]


def _t5_checks(X: Tensor) -> list[Check]:
    """T5 attention: relative position bias, unscaled scores, no bias on the projections."""
    t5_m = _model("t5")
    tcfg = _config(
        t5_m.T5Config, d_model=D_MODEL, d_kv=4, num_heads=2, relative_attention_num_buckets=8, dropout_rate=0.0
    )
    t5 = _init(t5_m.T5Attention(tcfg, has_relative_attention_bias=True, layer_idx=0), 16)

    def t5_pair(scale: float | None = None) -> Pair:
        theirs, position_bias = t5(X)[:2]
        q, k, v = (split_heads(m(X), 2) for m in (t5.q, t5.k, t5.v))
        c, _ = attend(q, k, v, bias=position_bias, scale=scale)  # the bias enters before the softmax
        ours: Tensor = t5.o(c.transpose(1, 2).reshape(B, N, -1))
        return ours, theirs

    return [
        Check(
            "transformers",
            "relative-bias",
            "T5Attention",
            t5_pair,
            Convention(
                "T5: unscaled scores",
                "T5 does not divide q^T k by sqrt(d_k) (its initialisation absorbs the factor); "
                "the book's default is the scaled dot product. With scale=1 they agree.",
                lambda: t5_pair(scale=1.0),
            ),
        ),
    ]
