"""Tests for cross-layer KV sharing, local:global layer schedules with ring buffers, and the cache counts."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond import layer_caches as LC
from attnsurvey.beyond.kv_cache import SlidingWindowCache

from .helpers import rand

F64 = torch.float64
BOUNDED = settings(max_examples=40, deadline=None)
D_MODEL, H, G, D_FF = 8, 4, 2, 16

#: (schedule, share): Gemma 2's 1:1, Gemma 3's 5:1, cross-layer sharing of local and of global pairs, all global.
STACKS = [
    (LC.layer_schedule(4, LC.GEMMA2_LOCAL_PER_GLOBAL), 1),
    (LC.layer_schedule(6, LC.GEMMA3_LOCAL_PER_GLOBAL), 1),
    (["local", "local", "global", "global"], 2),
    (["local"] * 3 + ["global"] * 3, 3),
    (LC.layer_schedule(3, 0), 3),
]


def _stack(schedule, share, window=3, seed=0):
    torch.manual_seed(seed)
    return LC.HybridDecoder(D_MODEL, H, G, D_FF, schedule, window, share).double().eval()


@pytest.mark.catalog("extra:hybrid-local-global")
def test_schedules_are_gemma_2_and_gemma_3():
    assert LC.layer_schedule(4, 1) == ["local", "global", "local", "global"]
    assert LC.layer_schedule(12, 5) == (["local"] * 5 + ["global"]) * 2
    assert LC.layer_schedule(2, 0) == ["global", "global"]


@pytest.mark.catalog("extra:hybrid-local-global")
def test_schedules_match_the_layer_types_of_transformers():
    transformers = pytest.importorskip("transformers")
    kinds = {"sliding_attention": "local", "full_attention": "global"}
    gemma2 = transformers.Gemma2Config(num_hidden_layers=6)
    gemma3 = transformers.Gemma3TextConfig(num_hidden_layers=12)
    assert [kinds[t] for t in gemma2.layer_types] == LC.layer_schedule(6, LC.GEMMA2_LOCAL_PER_GLOBAL)
    assert [kinds[t] for t in gemma3.layer_types] == LC.layer_schedule(12, LC.GEMMA3_LOCAL_PER_GLOBAL)


@pytest.mark.catalog("extra:cross-layer-kv")
def test_kv_owners_are_the_first_layers_of_the_groups():
    assert LC.kv_owners(5, 2) == [0, 0, 2, 2, 4]
    assert LC.kv_owners(3, 1) == [0, 1, 2]
    with pytest.raises(ValueError, match="share"):
        LC.kv_owners(3, 0)


@BOUNDED
@given(st.integers(0, 12), st.integers(1, 6))
def test_sliding_window_mask_admits_the_last_w_keys(n, w):
    mask = LC.sliding_window_mask(n, w)
    brute = torch.tensor([[i - w < j <= i for j in range(n)] for i in range(n)], dtype=torch.bool).reshape(n, n)
    assert torch.equal(mask, brute)
    assert mask.sum(-1).tolist() == [min(i + 1, w) for i in range(n)]


def _brute_stack(model, X):
    """The stack by loops: each layer's heads attend to the allowed keys of the group's first layer (float64)."""
    owned: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    n = X.shape[-2]
    for i, block in enumerate(model.blocks):
        attn, Z = block.attn, block.norm1(X)
        q = Z @ attn.W_Q.weight.T
        if model.owners[i] == i:
            owned[i] = (Z @ attn.W_K.weight.T, Z @ attn.W_V.weight.T)
        k, v = owned[model.owners[i]]
        d = attn.d_k
        heads = torch.zeros(*X.shape[:-1], H * d, dtype=F64)
        for j in range(H):
            g = j // (H // G)
            for t in range(n):
                lo = t - model.window + 1 if model.kinds[i] == "local" else 0
                keys = list(range(max(0, lo), t + 1))
                e = torch.einsum("bd,bmd->bm", q[:, t, j * d : (j + 1) * d], k[:, keys, g * d : (g + 1) * d])
                a = torch.softmax(e / math.sqrt(d), -1)
                heads[:, t, j * d : (j + 1) * d] = torch.einsum("bm,bmd->bd", a, v[:, keys, g * d : (g + 1) * d])
        X = X + heads @ attn.W_O.weight.T
        X = X + block.ffn(block.norm2(X))
    return X


@pytest.mark.catalog("extra:hybrid-local-global", "extra:cross-layer-kv")
@pytest.mark.parametrize(("schedule", "share"), STACKS)
def test_recomputation_matches_the_brute_force_loop(schedule, share):
    model = _stack(schedule, share)
    X = rand(2, 7, D_MODEL, seed=1, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(model(X), _brute_stack(model, X), rtol=0, atol=1e-12)


def _decode_errors(model, X, caches, prefill=1):
    """Largest difference, at every step, between decoding with the caches and recomputing the prefix."""
    errors = []
    with torch.no_grad():
        out = model(X[:, :prefill], caches)
        errors.append(float((out - model(X[:, :prefill])).abs().max()))
        for t in range(prefill, X.shape[1]):
            step = model(X[:, t : t + 1], caches)
            errors.append(float((step - model(X[:, : t + 1])[:, -1:]).abs().max()))
    return errors


@pytest.mark.catalog("extra:hybrid-local-global", "extra:cross-layer-kv")
@pytest.mark.parametrize(("schedule", "share"), STACKS)
@pytest.mark.parametrize("prefill", [1, 5])
def test_decoding_with_ring_buffers_equals_recomputation_at_every_step(schedule, share, prefill):
    model = _stack(schedule, share, seed=2)
    X = rand(2, 11, D_MODEL, seed=3, dtype=F64)  # 11 > 3 * window: every ring buffer wraps
    caches = model.new_caches(2, 11)
    assert max(_decode_errors(model, X, caches, prefill)) < 1e-12
    rings = [c for c in caches if isinstance(c, SlidingWindowCache)]
    assert all(c.K.shape[-2] == 3 for c in rings) and len(rings) == len(
        {o for o, k in zip(model.owners, model.kinds, strict=True) if k == "local"}
    )


def test_the_decoding_check_rejects_a_ring_one_slot_too_wide():
    """The planted bug: a ring buffer of w + 1 positions lets a local layer see one key too many."""
    model = _stack(LC.layer_schedule(4, 1), 1, seed=4)
    X = rand(1, 8, D_MODEL, seed=5, dtype=F64)
    caches = [
        SlidingWindowCache(1, G, model.window + 1, D_MODEL // H, F64) if isinstance(c, SlidingWindowCache) else c
        for c in model.new_caches(1, 8)
    ]
    errors = _decode_errors(model, X, caches)
    assert max(errors[: model.window]) < 1e-12 and max(errors[model.window :]) > 1e-6


@pytest.mark.catalog("extra:cross-layer-kv")
def test_sharing_layers_project_no_keys_or_values():
    model = _stack(["global"] * 4, 2)
    rows = [b.attn.W_K.weight.shape[0] + b.attn.W_V.weight.shape[0] for b in model.blocks]
    assert rows == [2 * G * 2, 0, 2 * G * 2, 0]
    caches = model.new_caches(1, 4)
    assert [c is None for c in caches] == [False, True, False, True]


@pytest.mark.catalog("extra:hybrid-local-global", "extra:cross-layer-kv")
@pytest.mark.parametrize(("schedule", "share"), STACKS)
def test_measured_cache_elements_equal_the_formula(schedule, share):
    model = _stack(schedule, share, seed=6)
    caches = model.new_caches(2, 9)
    X = rand(2, 9, D_MODEL, seed=7, dtype=F64)
    with torch.no_grad():
        for t in range(9):
            model(X[:, t : t + 1], caches)
            measured = LC.cache_elements(caches)
            assert measured == LC.cache_elements_formula(schedule, t + 1, 3, G, D_MODEL // H, share, batch=2)


def test_cache_counts_by_hand():
    """Hand counts: per position 2 * g * d = 2 * 2 * 2 = 8 elements per caching layer."""
    gemma3 = LC.layer_schedule(6, 5)
    assert LC.cache_elements_formula(gemma3, 10, 3, 2, 2) == 8 * (5 * 3 + 10)
    assert LC.cache_elements_formula(["global"] * 6, 10, 3, 2, 2) == 8 * 60
    assert LC.cache_elements_formula(["global"] * 6, 10, 3, 2, 2, share=2) == 8 * 30
    n = 128 * 1024  # 128K tokens, Gemma 3's window: the local layers hold 1,024 positions each
    ratio = LC.cache_elements_formula(gemma3, n, LC.GEMMA3_WINDOW, 1, 1) / LC.cache_elements_formula(
        ["global"] * 6, n, LC.GEMMA3_WINDOW, 1, 1
    )
    assert ratio == (5 * 1024 + n) / (6 * n)
    assert ratio < 0.18


def test_bad_stacks_and_inputs_are_refused():
    with pytest.raises(ValueError, match=r"layer 1 \(global\) shares the keys and values of layer 0 \(local\)"):
        LC.HybridDecoder(D_MODEL, H, G, D_FF, ["local", "global"], 3, share=2)
    with pytest.raises(ValueError, match="'local' or 'global'"):
        LC.HybridDecoder(D_MODEL, H, G, D_FF, ["sliding"], 3)  # type: ignore[list-item]
    model = _stack(["local"], 1)
    with pytest.raises(ValueError, match=r"d_model of X"):
        model(rand(1, 3, D_MODEL + 1, dtype=F64))
    with pytest.raises(ValueError, match="one entry per layer"):
        model(rand(1, 3, D_MODEL, dtype=F64), [])
    with pytest.raises(TypeError, match="KVCache, SlidingWindowCache or None"):
        LC.cache_elements(["cache"])  # type: ignore[list-item]
