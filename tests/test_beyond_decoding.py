"""Tests for the KV cache and grouped-query attention (beyond the survey)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F_

from attnsurvey.beyond import decoding as dec

from .helpers import rand


@pytest.mark.catalog("extra:gqa")
@pytest.mark.parametrize("h,g", [(8, 8), (8, 2), (8, 1), (6, 3)])
def test_gqa_equals_sdpa_enable_gqa(h, g):
    q, k, v = rand(2, h, 5, 4, seed=1), rand(2, g, 7, 4, seed=2), rand(2, g, 7, 3, seed=3)
    mask = dec.offset_causal_mask(5, 7)
    c, a = dec.grouped_query_attention(q, k, v, mask)
    ref = F_.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(c, ref, atol=1e-6, rtol=1e-5)
    assert a.shape == (2, h, 5, 7)
    torch.testing.assert_close(a.sum(-1), torch.ones(2, h, 5))


@pytest.mark.catalog("extra:gqa")
def test_gqa_module_equals_sdpa():
    torch.manual_seed(0)
    m = dec.GroupedQueryAttention(16, 4, 2)
    X = rand(3, 6, 16)
    out, _ = m(X)
    q = m.W_Q(X).view(3, 6, 4, 4).transpose(1, 2)
    k = m.W_K(X).view(3, 6, 2, 4).transpose(1, 2)
    v = m.W_V(X).view(3, 6, 2, 4).transpose(1, 2)
    ref = F_.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, m.W_O(ref.transpose(1, 2).reshape(3, 6, 16)), atol=1e-6, rtol=1e-5)


@pytest.mark.catalog("extra:gqa")
def test_mha_and_mqa_are_the_extremes():
    # MQA with g = 1 equals MHA whose K/V heads are all copies of the single one
    q, k1, v1 = rand(1, 4, 3, 2, seed=4), rand(1, 1, 5, 2, seed=5), rand(1, 1, 5, 2, seed=6)
    c_mqa, _ = dec.grouped_query_attention(q, k1, v1)
    c_mha, _ = dec.grouped_query_attention(q, k1.expand(1, 4, 5, 2), v1.expand(1, 4, 5, 2))
    torch.testing.assert_close(c_mqa, c_mha)
    # head 3 of an 4/2 grouping uses K/V head 1 (consecutive heads share), not head 3 % 2
    k2, v2 = rand(1, 2, 5, 2, seed=7), rand(1, 2, 5, 2, seed=8)
    c, _ = dec.grouped_query_attention(q, k2, v2)
    alone, _ = dec.grouped_query_attention(q[:, 3:4], k2[:, 1:2], v2[:, 1:2])
    torch.testing.assert_close(c[:, 3:4], alone)


@pytest.mark.catalog("extra:gqa")
def test_gqa_bad_inputs_raise():
    with pytest.raises(ValueError, match="must divide"):
        dec.grouped_query_attention(rand(1, 4, 2, 2), rand(1, 3, 2, 2), rand(1, 3, 2, 2))
    with pytest.raises(ValueError, match="n_kv_heads"):
        dec.GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError, match="d_model"):
        dec.GroupedQueryAttention(15, 4, 1)
    with pytest.raises(ValueError, match="n_q <= n_f"):
        dec.offset_causal_mask(5, 3)


@pytest.mark.catalog("extra:kv-cache")
def test_offset_causal_mask_is_the_tail_of_the_causal_mask():
    full = torch.ones(7, 7, dtype=torch.bool).tril()
    assert torch.equal(dec.offset_causal_mask(3, 7), full[4:])
    assert torch.equal(dec.offset_causal_mask(7, 7), full)


@pytest.mark.catalog("extra:kv-cache", "extra:gqa")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("g", [4, 2, 1])
def test_incremental_decoding_matches_full_recomputation(dtype, g):
    torch.manual_seed(0)
    lm = dec.TinyDecoderLM(11, d_model=16, n_heads=4, n_kv_heads=g, d_ff=32, n_layers=2, max_len=32).to(dtype).eval()
    tokens = torch.randint(0, 11, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = lm(tokens)
        caches = lm.new_caches(2, 20)
        parts = [lm(tokens[:, :5], caches)]  # a prompt chunk, then one token per step
        parts += [lm(tokens[:, t : t + 1], caches) for t in range(5, 20)]
    step = torch.cat(parts, dim=1)
    assert caches[0].length == 20
    assert float((step - full).abs().max()) < 1e-6


@pytest.mark.catalog("extra:kv-cache")
def test_generate_with_and_without_cache_agree():
    torch.manual_seed(0)
    lm = dec.TinyDecoderLM(13, d_model=16, n_heads=4, n_kv_heads=2, d_ff=32, n_layers=2, max_len=64).double().eval()
    prompt = torch.randint(0, 13, (3, 4), generator=torch.Generator().manual_seed(2))
    a = dec.generate(lm, prompt, 30, use_cache=True)
    b = dec.generate(lm, prompt, 30, use_cache=False)
    assert a.shape == (3, 34) and torch.equal(a, b) and torch.equal(a[:, :4], prompt)


@pytest.mark.catalog("extra:kv-cache")
def test_cache_contract():
    cache = dec.KVCache(2, 3, 5, 4)
    K, V = cache.append(rand(2, 3, 2, 4, seed=1), rand(2, 3, 2, 4, seed=2))
    assert K.shape == (2, 3, 2, 4) and cache.length == 2
    K, V = cache.append(rand(2, 3, 3, 4, seed=3), rand(2, 3, 3, 4, seed=4))
    torch.testing.assert_close(K[:, :, 2:], rand(2, 3, 3, 4, seed=3))
    torch.testing.assert_close(V[:, :, :2], rand(2, 3, 2, 4, seed=2))
    with pytest.raises(ValueError, match="full"):
        cache.append(rand(2, 3, 1, 4), rand(2, 3, 1, 4))
    cache.reset()
    with pytest.raises(ValueError, match="shape"):
        cache.append(rand(2, 2, 1, 4), rand(2, 2, 1, 4))
    with pytest.raises(ValueError, match="dtype"):
        cache.append(rand(2, 3, 1, 4, dtype=torch.float64), rand(2, 3, 1, 4, dtype=torch.float64))
    lm = dec.TinyDecoderLM(5, d_model=8, n_heads=2, d_ff=8, n_layers=1, max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        lm(torch.zeros(1, 5, dtype=torch.long))


@pytest.mark.catalog("extra:kv-cache", "extra:gqa")
def test_cache_bytes_analytic_and_allocated():
    # 2 (K and V) x 32 layers x 4096 tokens x 8 heads x 128 dims x 2 bytes = 512 MiB
    assert dec.kv_cache_bytes(32, 8, 128, 4096) == 512 * 2**20
    assert dec.kv_cache_bytes(32, 32, 128, 4096) == 4 * dec.kv_cache_bytes(32, 8, 128, 4096)
    cache = dec.KVCache(3, 2, 10, 4)
    assert cache.nbytes == dec.kv_cache_bytes(1, 2, 4, 10, batch=3, bytes_per_value=4)
    with pytest.raises(ValueError, match="n_tokens"):
        dec.kv_cache_bytes(1, 1, 1, -1)


@pytest.mark.catalog("extra:gqa")
def test_kv_sharing_variants_train_and_differ_only_in_kv_heads():
    from attnsurvey.experiments import kv_sharing as ks

    sizes = {}
    for name, g in ks.KV_VARIANTS.items():
        m = ks.train_kv_variant(g, 0, n_train=16, steps=3)
        sizes[name] = sum(p.numel() for p in m.parameters())
        assert m.blocks[0].attn.g == g and not m.training
    # W_K and W_V shrink with the number of K/V heads: 2 * 32 * 8 parameters per K/V head
    assert sizes["MHA"] - sizes["MQA"] == 2 * 32 * 8 * 3
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['step'\]"):
        ks.train_kv_variant(1, 0, step=3)


def test_grouped_query_attention_refuses_a_float_mask():
    """Review 2, E: a float 0/1 mask was added to the scores as a bias instead of selecting keys."""
    q, k, v = rand(2, 4, 3, 4, seed=1), rand(2, 2, 3, 4, seed=2), rand(2, 2, 3, 4, seed=3)
    keep = torch.tensor([True, True, False]).expand(3, 3)
    assert torch.equal(dec.grouped_query_attention(q, k, v, keep)[1][..., 2], torch.zeros(2, 4, 3))
    with pytest.raises(
        ValueError, match=r"grouped_query_attention: mask must be a boolean tensor .*dtype=torch.float32"
    ):
        dec.grouped_query_attention(q, k, v, keep.float())


def test_new_cache_lives_on_the_layers_device():
    """Review 2, F: KVCache took no device, so new_cache of a layer on another device made a CPU cache."""
    layer = dec.GroupedQueryAttention(8, 2).to("meta")
    cache = layer.new_cache(2, 6)
    assert cache.K.device.type == cache.V.device.type == "meta"
    assert dec.KVCache(1, 1, 2, 2, device="meta").K.device.type == "meta"
    assert dec.KVCache(1, 1, 2, 2).K.device.type == "cpu"
