"""Bad and edge-case inputs of attnsurvey.beyond: clear errors at the public entry, documented results otherwise."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnsurvey.beyond import decoding, io_model, positions, search, tiled


def _qkv(B: int = 2, n_q: int = 3, n_f: int = 5, d: int = 4, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, n, d, generator=g, dtype=torch.float64) for n in (n_q, n_f, n_f))


# ------------------------------------------------------------------------------------------------ tiled


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("fn", [tiled.attention_stats, tiled.tile_stats, tiled.tiled_attend])
@pytest.mark.parametrize("arg", [0, 1, 2])
@pytest.mark.parametrize("kind", ["list", "numpy", "int"])
def test_tiled_entries_refuse_non_float_tensors_by_name(fn, arg, kind):
    args = list(_qkv())
    x = args[arg]
    args[arg] = {"list": x.tolist(), "numpy": x.numpy(), "int": x.long()}[kind]
    symbol = ("Qs" if fn is tiled.tile_stats else "Q", "K", "V")[arg]
    with pytest.raises(TypeError, match=rf"^{symbol} must be a"):
        fn(*args)


@pytest.mark.catalog("extra:tiled-attention")
def test_tile_stats_with_no_keys_is_the_empty_part_and_the_merge_identity():
    Qs, K, V = _qkv(n_f=0)
    m, l, acc = tiled.tile_stats(Qs, K, V)
    assert m.shape == (2, 3) and bool(torch.isneginf(m).all())
    assert bool((l == 0).all()) and acc.shape == (2, 3, 4) and bool((acc == 0).all())
    Qs, K, V = _qkv(n_f=5)
    part = tiled.tile_stats(Qs, K, V)
    for a, b in zip(tiled.online_softmax_merge(m, l, acc, *part), part, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.catalog("extra:tiled-attention")
def test_tile_stats_refuses_a_mask_that_does_not_fit_the_tile():
    Qs, K, V = _qkv()
    with pytest.raises(ValueError, match=r"allowed of shape \(2, 5\) does not broadcast to the scores"):
        tiled.tile_stats(Qs, K, V, torch.ones(2, 5, dtype=torch.bool))


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("fn", [tiled.attention_stats, tiled.tiled_attend])
def test_a_per_example_key_mask_without_its_query_axis_is_refused(fn):
    Q, K, V = _qkv()  # B = 2 != n_q = 3: (B, n_f) cannot broadcast to (B, n_q, n_f)
    with pytest.raises(
        ValueError, match=r"mask of shape \(2, 5\) does not broadcast to the scores e of shape \(2, 3, 5\)"
    ):
        fn(Q, K, V, torch.ones(2, 5, dtype=torch.bool))


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("fn", [tiled.attention_stats, tiled.tiled_attend])
def test_an_ambiguous_rank2_mask_is_refused(fn):
    Q, K, V = _qkv(B=3, n_q=3)  # B == n_q: (3, n_f) could be per query or per example
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) is ambiguous"):
        fn(Q, K, V, torch.ones(3, 5, dtype=torch.bool))


@pytest.mark.catalog("extra:tiled-attention")
def test_a_per_example_key_mask_with_its_query_axis_masks_each_example_alone():
    Q, K, V = _qkv()
    keep = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    got = tiled.tiled_attend(Q, K, V, keep[:, None, :])
    for b in range(2):  # oracle: SDPA on the example's kept keys only
        k = keep[b]
        want = F.scaled_dot_product_attention(Q[b], K[b][k], V[b][k])
        torch.testing.assert_close(got[b], want, atol=1e-12, rtol=0)
    m, l, acc = tiled.attention_stats(Q, K, V, keep[:, None, :])
    torch.testing.assert_close(tiled.finalize(m, l, acc)[0], got, atol=1e-12, rtol=0)


@pytest.mark.catalog("extra:tiled-attention")
def test_attention_stats_follow_the_input_dtype_in_half_precision():
    Q, K, V = (x.half() for x in _qkv())
    m, l, acc = tiled.attention_stats(Q, K, V)
    assert m.dtype == l.dtype == acc.dtype == torch.float16
    want = F.scaled_dot_product_attention(Q.double(), K.double(), V.double())
    torch.testing.assert_close(tiled.finalize(m.double(), l.double(), acc.double())[0], want, atol=5e-3, rtol=5e-3)


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize(
    "kw,match",
    [
        ({"scale": math.nan}, "finite score scale"),
        ({"dropout_p": math.nan}, "dropout_p must be a probability in"),
        ({"dropout_p": -1.0}, "dropout_p must be a probability in"),
        ({"block_q": 0}, "TileSettings needs block_q to be an integer >= 1, got block_q=0"),
    ],
)
def test_tile_settings_refuse_invalid_values(kw, match):
    base = {"is_causal": False, "block_q": 2, "block_k": 2, "scale": 0.5, "dropout_p": 0.0, "dropout_seed": None}
    assert tiled.TileSettings(**base).scale == 0.5
    with pytest.raises(ValueError, match=match):
        tiled.TileSettings(**{**base, **kw})


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("name", ["d_k", "d_v"])
@pytest.mark.parametrize("value,error", [(0, ValueError), (2.5, TypeError)])
def test_tile_counts_need_positive_integer_head_sizes(name, value, error):
    sizes = {"n_q": 4, "n_f": 4, "d_k": 8, "d_v": 8}
    assert tiled.attention_flops(**sizes) == 2 * 4 * 4 * 16  # hand count: 2 n_q n_f (d_k + d_v)
    with pytest.raises(error, match=name):
        tiled.attention_flops(**{**sizes, name: value})
    with pytest.raises(error, match=name):
        tiled.tile_bytes(block_q=2, block_k=2, **{**sizes, name: value})


# ------------------------------------------------------------------------------------------------ io model


@pytest.mark.catalog("extra:io-model")
@pytest.mark.parametrize("kw", [{"d": 0}, {"d": 4, "d_v": 0}])
def test_standard_io_needs_positive_head_sizes(kw):
    with pytest.raises(ValueError, match=r"standard_io needs d_[kv] to be an integer >= 1"):
        io_model.standard_io(8, **kw)


# ------------------------------------------------------------------------------------------------ decoding


@pytest.mark.catalog("extra:kv-cache")
def test_kv_cache_bytes_needs_a_positive_integer_head_size():
    assert decoding.kv_cache_bytes(2, 3, 4, 5, 1, 2) == 2 * 2 * 3 * 4 * 5 * 2  # hand product
    with pytest.raises(ValueError, match="d_head to be an integer >= 1, got d_head=0"):
        decoding.kv_cache_bytes(2, 3, 0, 5)
    with pytest.raises(ValueError, match="n_tokens to be an integer >= 0, got n_tokens=2.5"):
        decoding.kv_cache_bytes(2, 3, 4, 2.5)


@pytest.mark.catalog("extra:kv-cache", "extra:gqa")
@pytest.mark.parametrize("fn", [decoding.decoder_weight_count, decoding.decode_step_cost])
@pytest.mark.parametrize("name", ["d_model", "d_ff"])
def test_decoder_costs_need_a_positive_width(fn, name):
    sizes = {"d_model": 8, "n_heads": 2, "n_kv_heads": 1, "d_ff": 16, "n_layers": 2}
    extra = {"n_context": 4} if fn is decoding.decode_step_cost else {}
    with pytest.raises(ValueError, match=f"{fn.__name__} needs {name} to be an integer >= 1"):
        fn(**{**sizes, name: 0}, **extra)


@pytest.mark.catalog("extra:kv-cache", "extra:gqa")
def test_decode_step_cost_kv_bytes_match_kv_cache_bytes():
    cost = decoding.decode_step_cost(8, 2, 1, 16, 3, 7, batch=2, bytes_per_value=4)
    assert cost.kv_bytes == decoding.kv_cache_bytes(3, 1, 4, 7, 2, 4)


@pytest.mark.catalog("extra:gqa")
@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: decoding.GroupedQueryAttention(0, 2), "d_model"),
        (lambda: decoding.GroupedQueryAttention(8, 2, 0), "n_kv_heads"),
        (lambda: decoding.DecoderBlock(8, 2, 1, 0), "d_ff"),
        (lambda: decoding.TinyDecoderLM(vocab=0), "vocab"),
        (lambda: decoding.TinyDecoderLM(vocab=7, n_layers=-1), "n_layers"),
        (lambda: decoding.TinyDecoderLM(vocab=7, d_model=2.5), "d_model"),
        (lambda: positions.ALiBiSelfAttention(0, 2), "d_model"),
        (lambda: positions.RotarySelfAttention(0, 2), "d_model"),
        (lambda: positions.RotarySelfAttention(8, 2, d_k=0), "d_k"),
    ],
)
def test_modules_refuse_invalid_sizes_by_name(make, match):
    with pytest.raises(ValueError, match=f"needs {match} to be an integer >= 1|needs {match} to be an integer >= 0"):
        make()


@pytest.mark.catalog("extra:kv-cache")
@pytest.mark.parametrize("kind", ["list", "numpy", "int"])
def test_decoder_block_refuses_non_float_input(kind):
    torch.manual_seed(0)
    block = decoding.DecoderBlock(8, 2, 1, 16)
    X = torch.randn(2, 3, 8)
    assert block(X).shape == (2, 3, 8)
    bad = {"list": X.tolist(), "numpy": X.numpy(), "int": X.long()}[kind]
    with pytest.raises(TypeError, match="^X must be a"):
        block(bad)
    with pytest.raises(ValueError, match="d_model of X"):
        block(torch.randn(2, 3, 6))


# ------------------------------------------------------------------------------------------------ positions


@pytest.mark.catalog("extra:alibi")
@pytest.mark.parametrize("arg", [1, 2])
def test_alibi_attention_refuses_lists(arg):
    g = torch.Generator().manual_seed(1)
    args = [
        torch.randn(2, 2, 3, 4, generator=g),
        torch.randn(2, 2, 5, 4, generator=g),
        torch.randn(2, 2, 5, 4, generator=g),
    ]
    slopes = positions.alibi_slopes(2)
    c, _ = positions.alibi_attention(*args, slopes)
    assert c.shape == (2, 2, 3, 4)
    args[arg] = args[arg].tolist()
    with pytest.raises(TypeError, match=f"^{'QKV'[arg]} must be a"):
        positions.alibi_attention(*args, slopes)


# ------------------------------------------------------------------------------------------------ search


@pytest.mark.catalog("extra:length-penalty")
def test_coverage_penalty_checks_its_inputs():
    cov = torch.tensor([[0.5, 1.5, 0.25], [1.0, 0.1, 2.0]], dtype=torch.float64)
    want = 0.2 * torch.tensor([math.log(0.5) + math.log(0.25), math.log(0.1)], dtype=torch.float64)  # hand
    torch.testing.assert_close(search.coverage_penalty(cov, 0.2), want)
    keep = torch.tensor([[True, True, False], [True, True, True]])
    torch.testing.assert_close(
        search.coverage_penalty(cov, 0.2, keep), 0.2 * torch.tensor([math.log(0.5), math.log(0.1)], dtype=torch.float64)
    )
    for bad in (cov.tolist(), cov.numpy(), cov.long()):
        with pytest.raises(TypeError, match="^coverage must be a"):
            search.coverage_penalty(bad, 0.2)
    with pytest.raises(ValueError, match="coverage >= 0"):
        search.coverage_penalty(-cov, 0.2)
    with pytest.raises(ValueError, match=r"source_mask broadcastable to coverage .* got source_mask \(2, 1, 3\)"):
        search.coverage_penalty(cov, 0.2, keep[:, None, :])
