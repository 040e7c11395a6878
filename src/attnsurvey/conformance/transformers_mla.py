"""Conformance adapter for multi-head latent attention: ``transformers``' DeepSeek-V3 attention (MLA).

``DeepseekV3Attention`` is built from a tiny configuration with random weights (nothing
is downloaded) and run with the eager attention path in float64. The adapter maps its
weights onto the book's :class:`~attnsurvey.beyond.latent.MultiHeadLatentAttention`
(:func:`latent_from_deepseek`): DeepSeek stacks ``W_DKV`` and ``W_KR`` in one
projection (``kv_a_proj_with_mqa``), the rows of ``W_UK`` and ``W_UV`` per head in another
(``kv_b_proj``), and each head's non-rotated and rotated query rows in ``q_b_proj``; its
RMSNorms of the latents become the module's ``norm_kv`` and ``norm_q``.

Two choices of DeepSeek's code are named: with ``rope_interleave=False`` it rotates
halves (the book rotates adjacent pairs, as DeepSeek's code does by default), and its
cache holds the rotated key with the pairs' first coordinates before their second ones.
``transformers`` computes the RMSNorm, the RoPE frequencies and angles, and the softmax in
float32 even for float64 inputs, so the two sides agree to about 1e-8 (within the tolerance);
with those steps run in float64 they agree to float64 rounding
(``tests/test_beyond_latent.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..beyond.latent import LatentForm, MultiHeadLatentAttention
from ..beyond.positions import RopeConvention
from . import Check, Convention, Pair, library
from .torch_target import rand
from .transformers_target import _config, _init, additive_mask

#: The tiny MLA: width d, h heads, latents d_c and d_cq, per-head d_h (non-rotated), d_R (rotated), d_v.
D, H, D_C, D_CQ, D_H, D_R, D_V = 16, 3, 8, 7, 5, 4, 6
#: The inputs: batch, sequence length.
B, N = 2, 6


def latent_from_deepseek(attention: Any, convention: RopeConvention | None = None) -> MultiHeadLatentAttention:
    """The book's MLA module with the weights of a ``transformers`` ``DeepseekV3Attention``.

    Args:
        attention: a ``DeepseekV3Attention`` (any object with its projections, norms and ``config``).
        convention: the RoPE pair layout (default: ``"interleaved"`` when the configuration's
            ``rope_interleave`` is true, as in DeepSeek's code, else ``"half"``).

    Shape:
        the module maps ``(..., n, hidden_size)`` to ``(..., n, hidden_size)``.

    Returns:
        A new module on the layer's dtype, in eval mode.

    Raises:
        ValueError: for a RoPE scaling other than the default, grouped key/value heads, or biases.
    """
    cfg = attention.config
    rope = dict(getattr(cfg, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"only the default RoPE is supported, got rope_type={rope.get('rope_type')!r}")
    if cfg.attention_bias or cfg.num_key_value_heads != cfg.num_attention_heads:
        raise ValueError(
            "latent_from_deepseek needs bias-free projections and num_key_value_heads == num_attention_heads"
        )
    h, d_h, d_R, d_v = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    layout: RopeConvention = convention or ("interleaved" if cfg.rope_interleave else "half")
    W_O = attention.o_proj.weight
    mine = MultiHeadLatentAttention(
        cfg.hidden_size, h, cfg.kv_lora_rank, d_h, d_R, cfg.q_lora_rank, d_v, eps=cfg.rms_norm_eps,
        base=rope.get("rope_theta", 10000.0), convention=layout, dtype=W_O.dtype,
    )  # fmt: skip
    kv_a = attention.kv_a_proj_with_mqa.weight  # [W_DKV; W_KR]
    kv_b = attention.kv_b_proj.weight.reshape(h, d_h + d_v, -1)  # head i: [W_UK^(i); W_UV^(i)]
    q_in = attention.q_proj if cfg.q_lora_rank is None else attention.q_b_proj
    q_b = q_in.weight.reshape(h, d_h + d_R, -1)  # head i: [W_UQ^(i); W_QR^(i)]
    pairs = {
        mine.W_DKV.weight: kv_a[: cfg.kv_lora_rank],
        mine.W_KR.weight: kv_a[cfg.kv_lora_rank :],
        mine.W_UK.weight: kv_b[:, :d_h].reshape(h * d_h, -1),
        mine.W_UV.weight: kv_b[:, d_h:].reshape(h * d_v, -1),
        mine.W_UQ.weight: q_b[:, :d_h].reshape(h * d_h, -1),
        mine.W_QR.weight: q_b[:, d_h:].reshape(h * d_R, -1),
        mine.W_O.weight: W_O,
    }
    if mine.norm_kv is not None:
        pairs[mine.norm_kv.weight] = attention.kv_a_layernorm.weight
    if mine.W_DQ is not None and mine.norm_q is not None:
        pairs[mine.W_DQ.weight] = attention.q_a_proj.weight
        pairs[mine.norm_q.weight] = attention.q_a_layernorm.weight
    with torch.no_grad():
        for ours, theirs in pairs.items():
            ours.copy_(theirs)
    return mine.eval()


def _deepseek(seed: int, **kw: Any) -> tuple[Any, Any]:
    """A float64 ``DeepseekV3Attention`` with random weights and its rotary embedding."""
    ds = library("transformers.models.deepseek_v3.modeling_deepseek_v3")
    conf = library("transformers.models.deepseek_v3.configuration_deepseek_v3")
    sizes = {
        "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": H, "q_lora_rank": D_CQ,
        "kv_lora_rank": D_C, "qk_nope_head_dim": D_H, "qk_rope_head_dim": D_R, "v_head_dim": D_V,
        "num_hidden_layers": 1, "vocab_size": 8, "intermediate_size": 8, "moe_intermediate_size": 8,
        "n_routed_experts": 2, "num_experts_per_tok": 1,
    }  # fmt: skip
    cfg = _config(conf.DeepseekV3Config, **{**sizes, **kw})
    return _init(ds.DeepseekV3Attention(cfg, layer_idx=0), seed), ds.DeepseekV3RotaryEmbedding(cfg).double()


def _run(attention: Any, rotary: Any, X: Tensor, start: int = 0, cache: Any = None) -> Tensor:
    """DeepSeek's causal attention of the rows of X at positions ``start ..`` (after what ``cache`` holds)."""
    n = X.shape[-2]
    positions = torch.arange(start, start + n)[None].expand(X.shape[0], n)
    causal = torch.ones(n, start + n, dtype=torch.bool).tril(start)
    mask = additive_mask(causal)[None, None]
    out: Tensor = attention(X, position_embeddings=rotary(X, positions), attention_mask=mask, cache=cache)[0]
    return out


def _forward_checks(X: Tensor) -> list[Check]:
    """Full causal attention: both forms, with and without query compression, and the rotate-half layout."""
    ds, rotary = _deepseek(21)
    ds_q, rotary_q = _deepseek(22, q_lora_rank=None)
    ds_half, rotary_half = _deepseek(23, rope_interleave=False)

    def pair(attention: Any, rot: Any, form: LatentForm = "naive", convention: RopeConvention = "interleaved") -> Pair:
        ours, _ = latent_from_deepseek(attention, convention)(X, is_causal=True, form=form)
        return ours, _run(attention, rot, X)

    return [
        Check("transformers", "mla", "DeepseekV3Attention", lambda: pair(ds, rotary)),
        Check("transformers", "mla-absorbed", "DeepseekV3Attention", lambda: pair(ds, rotary, "absorbed")),
        Check("transformers", "mla", "DeepseekV3Attention (q_lora_rank=None)", lambda: pair(ds_q, rotary_q)),
        Check(
            "transformers",
            "mla",
            "DeepseekV3Attention (rope_interleave=False)",
            lambda: pair(ds_half, rotary_half),
            Convention(
                "RoPE pairing: rotate-half",
                "With rope_interleave=False DeepSeek's code rotates coordinate i with i + d_R/2 in the RoPE parts "
                "of the query and the key; the book rotates adjacent pairs (2i, 2i+1), as DeepSeek's code does "
                "with rope_interleave=True, the default. Running the book's module with convention='half' maps one onto the other.",
                lambda: pair(ds_half, rotary_half, convention="half"),
            ),
        ),
    ]


def _cache_checks(X: Tensor) -> list[Check]:
    """Decoding: a prompt of 2, then one token at a time, with the book's latent cache and DeepSeek's."""
    ds, rotary = _deepseek(24)
    cache_m = library("transformers.cache_utils")

    def decode() -> tuple[Tensor, Tensor, Any, Any]:
        mine = latent_from_deepseek(ds)
        ours_cache, theirs_cache = mine.new_cache(B, N), cache_m.DynamicCache(config=ds.config)
        ours, theirs = [], []
        for start, stop in [(0, 2), *((t, t + 1) for t in range(2, N))]:
            ours.append(mine.decode(X[:, start:stop], ours_cache)[0])
            theirs.append(_run(ds, rotary, X[:, start:stop], start, theirs_cache))
        return torch.cat(ours, 1), torch.cat(theirs, 1), ours_cache, theirs_cache.layers[0]

    def outputs() -> Pair:
        ours, theirs, _, _ = decode()
        return ours, theirs

    def cached(pairing: str = "interleaved") -> Pair:
        _, _, ours, theirs = decode()  # DeepSeek's layer holds the latents as keys and k^R as values, one head
        k_R = ours.k_R
        if pairing == "halves":  # DeepSeek writes each rotated pair's first coordinates, then the second ones
            k_R = torch.cat([k_R[..., 0::2], k_R[..., 1::2]], -1)
        return torch.cat([ours.c, k_R], -1), torch.cat([theirs.keys, theirs.values], -1).squeeze(1)

    return [
        Check("transformers", "mla-cache", "DeepseekV3Attention + DynamicCache (outputs)", outputs),
        Check(
            "transformers",
            "mla-cache",
            "DynamicCache contents (c, k^R)",
            cached,
            Convention(
                "cached k^R: pairs split",
                "DeepSeek's interleaved rotation returns the rotated pairs' first coordinates, then their second "
                "ones, and caches k^R in that order; the book keeps the pairs adjacent. Both caches hold d_c + d_R "
                "numbers per token and the same latents; the scores do not depend on the order of the pairs.",
                lambda: cached("halves"),
            ),
        ),
    ]


def checks() -> list[Check]:
    """The MLA checks against ``transformers``' DeepSeek-V3 attention.

    Returns:
        A list of :class:`~attnsurvey.conformance.Check`.
    """
    X = rand(B, N, D, seed=20)
    return [*_forward_checks(X), *_cache_checks(X)]
