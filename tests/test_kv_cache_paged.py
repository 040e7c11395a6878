"""Tests for the paged and sliding-window KV caches, beam reordering and the decoding roofline counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F_
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond import decoding as dec
from attnsurvey.beyond import kv_cache as kvc

from .helpers import rand

H, D = 4, 3


def _contiguous_reference(chunks_k, chunks_v, q, g):
    """The same sequence through the contiguous KVCache and grouped-query attention with an offset causal mask."""
    n = sum(k.shape[-2] for k in chunks_k)
    cache = dec.KVCache(1, g, n, D, dtype=q.dtype)
    for k, v in zip(chunks_k, chunks_v, strict=True):
        K, V = cache.append(k[None], v[None])
    n_q = q.shape[-2]
    return dec.grouped_query_attention(q[None], K, V, dec.offset_causal_mask(n_q, n))[0][0]


@pytest.mark.catalog("extra:paged-kv-cache")
@pytest.mark.parametrize("g", [H, 2, 1])  # MHA, GQA, MQA
def test_paged_attention_equals_the_contiguous_cache(g):
    cache = kvc.PagedKVCache(n_blocks=12, block_size=3, n_kv_heads=g, d_head=D, dtype=torch.float64)
    chunks: dict[str, tuple[list, list]] = {}
    seed = iter(range(1000))

    def put(s, n):
        k, v = rand(g, n, D, seed=next(seed), dtype=torch.float64), rand(g, n, D, seed=next(seed), dtype=torch.float64)
        cache.append(s, k, v)
        chunks[s][0].append(k)
        chunks[s][1].append(v)

    for s in "abc":
        cache.allocate(s)
        chunks[s] = ([], [])
    put("a", 4)  # blocks 0, 1
    put("b", 2)  # block 2
    put("a", 3)  # fills block 1, takes block 3
    put("c", 5)  # blocks 4, 5
    a_blocks = list(cache.tables["a"])
    cache.free("a")
    cache.allocate("d")
    chunks["d"] = ([], [])
    put("d", 7)  # reuses a's three blocks
    assert set(cache.tables["d"]) == set(a_blocks)
    put("b", 1)
    put("c", 1)
    put("b", 6)
    order = ["b", "c", "d"]  # lengths 9, 6, 7: padding and block boundaries differ per row
    for n_q in (1, 2):
        q = rand(3, H, n_q, D, seed=100 + n_q, dtype=torch.float64)
        c, a = kvc.paged_attention(q, cache, order)
        for row, s in enumerate(order):
            ref = _contiguous_reference(*chunks[s], q[row], g)
            torch.testing.assert_close(c[row], ref)
            assert float(a[row, ..., cache.lengths[s] :].abs().sum()) == 0.0  # padding gets no weight
    # the pool is fully accounted for
    used = {b for t in cache.tables.values() for b in t}
    assert cache.n_free + len(used) == 12


@pytest.mark.catalog("extra:paged-kv-cache")
def test_paged_attention_equals_sdpa_on_the_concatenated_keys():
    # an oracle outside the package: SDPA on each sequence's keys, causal over the last n_q positions
    cache = kvc.PagedKVCache(8, 4, 2, D)
    ks, vs = {}, {}
    for s, n in (("x", 5), ("y", 9)):
        cache.allocate(s)
        ks[s], vs[s] = rand(2, n, D, seed=n), rand(2, n, D, seed=n + 50)
        cache.append(s, ks[s], vs[s])
    q = rand(2, H, 2, D, seed=7)
    c, _ = kvc.paged_attention(q, cache, ["x", "y"])
    for row, s in enumerate("xy"):
        n = ks[s].shape[-2]
        ref = F_.scaled_dot_product_attention(
            q[row], ks[s], vs[s], attn_mask=dec.offset_causal_mask(2, n), enable_gqa=True
        )
        torch.testing.assert_close(c[row], ref, atol=1e-6, rtol=1e-5)


@pytest.mark.catalog("extra:paged-kv-cache")
def test_paged_cache_errors_are_clear():
    cache = kvc.PagedKVCache(n_blocks=2, block_size=2, n_kv_heads=1, d_head=D)
    with pytest.raises(ValueError, match="unknown sequence 'nope'"):
        cache.append("nope", rand(1, 1, D), rand(1, 1, D))
    with pytest.raises(ValueError, match="unknown sequence"):
        cache.free("nope")
    cache.allocate("s")
    with pytest.raises(ValueError, match="already allocated"):
        cache.allocate("s")
    cache.append("s", rand(1, 3, D), rand(1, 3, D))
    with pytest.raises(ValueError, match=r"pool exhausted: .* needs 1 free block\(s\) .* 0 of 2 are free"):
        cache.append("s", rand(1, 2, D), rand(1, 2, D))
    assert cache.lengths["s"] == 3  # a refused append changes nothing
    with pytest.raises(ValueError, match=r"k must have shape \(g, n_new, d_head\)"):
        cache.append("s", rand(2, 1, D), rand(2, 1, D))
    with pytest.raises(ValueError, match="dtype"):
        cache.append("s", rand(1, 1, D, dtype=torch.float64), rand(1, 1, D, dtype=torch.float64))
    with pytest.raises(ValueError, match="not cached"):
        cache.slot("s", 3)
    with pytest.raises(ValueError, match="n_q=4"):
        kvc.paged_attention(rand(1, H, 4, D), cache, ["s"])
    with pytest.raises(ValueError, match="B = 2 sequences"):
        kvc.paged_attention(rand(1, H, 1, D), cache, ["s", "s"])
    with pytest.raises(ValueError, match="block_size"):
        kvc.PagedKVCache(2, 0, 1, D)
    cache.free("s")
    assert cache.n_free == 2


@pytest.mark.catalog("extra:paged-kv-cache")
def test_block_table_lookup_by_hand():
    cache = kvc.PagedKVCache(n_blocks=6, block_size=4, n_kv_heads=1, d_head=1)
    cache.allocate("u")
    cache.allocate("w")
    cache.append("u", rand(1, 3, 1), rand(1, 3, 1))  # block 0
    cache.append("w", rand(1, 5, 1), rand(1, 5, 1))  # blocks 1, 2
    cache.append("u", rand(1, 4, 1), rand(1, 4, 1))  # fills block 0, then block 3
    assert cache.tables == {"u": [0, 3], "w": [1, 2]}
    assert cache.slot("u", 2) == (0, 2) and cache.slot("u", 4) == (3, 0) and cache.slot("u", 6) == (3, 2)
    assert cache.slot("w", 4) == (2, 0)
    k = rand(1, 1, 1, seed=9)
    cache.append("w", k, k)
    assert cache.K_pool[2, 0, 1, 0] == k.flatten()[0]


@pytest.mark.catalog("extra:paged-kv-cache")
@settings(max_examples=30)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["alloc", "append", "free", "fork"]), st.integers(0, 3), st.integers(1, 5)),
        max_size=25,
    )
)
def test_paged_cache_keeps_every_sequence_and_accounts_for_every_block(ops):
    # invariant: after any mix of operations, each sequence reads back exactly what was appended to it,
    # and every block is either free or referenced as often as the tables list it
    cache = kvc.PagedKVCache(n_blocks=10, block_size=2, n_kv_heads=1, d_head=1)
    truth: dict[int, list[float]] = {}
    counter = iter(range(10_000))
    for op, s, n in ops:
        if op == "alloc" and s not in truth:
            cache.allocate(s)
            truth[s] = []
        elif op == "free" and s in truth:
            cache.free(s)
            del truth[s]
        elif op == "fork" and s in truth and s + 4 not in truth:
            cache.fork(s, s + 4)
            truth[s + 4] = list(truth[s])
        elif op == "append" and s in truth:
            vals = [float(next(counter)) for _ in range(n)]
            t = torch.tensor(vals).view(1, n, 1)
            try:
                cache.append(s, t, -t)
            except ValueError as err:
                assert "exhausted" in str(err)
                continue
            truth[s] += vals
    refs = [0] * 10
    for t in cache.tables.values():
        for b in t:
            refs[b] += 1
    assert [cache.ref_count(b) for b in range(10)] == refs
    assert cache.n_free == refs.count(0)
    nonempty = [s for s in truth if truth[s]]
    if nonempty:
        K, V, valid = cache.gather(nonempty)
        for row, s in enumerate(nonempty):
            assert K[row, 0, : len(truth[s]), 0].tolist() == truth[s]
            assert V[row, 0, : len(truth[s]), 0].tolist() == [-x for x in truth[s]]
            assert int(valid[row].sum()) == len(truth[s])


def _beam_setup(g):
    prefixes = [rand(g, n, D, seed=n, dtype=torch.float64) for n in (5, 5, 5)]
    values = [rand(g, 5, D, seed=20 + i, dtype=torch.float64) for i in range(3)]
    return prefixes, values


@pytest.mark.catalog("extra:paged-kv-cache", "extra:kv-cache")
@pytest.mark.parametrize("g", [H, 1])
def test_reorder_equals_recomputation_on_the_reordered_prefixes(g):
    prefixes, values = _beam_setup(g)
    beam = [2, 0, 0]  # beam 0 continues old beam 2, beams 1 and 2 both continue old beam 0
    new_k = [rand(g, 2, D, seed=40 + i, dtype=torch.float64) for i in range(3)]
    new_v = [rand(g, 2, D, seed=50 + i, dtype=torch.float64) for i in range(3)]
    q = rand(3, H, 2, D, seed=60, dtype=torch.float64)
    # reference: recompute from the reordered prefixes, with SDPA
    ref = torch.stack(
        [
            F_.scaled_dot_product_attention(
                q[i],
                torch.cat([prefixes[beam[i]], new_k[i]], -2),
                torch.cat([values[beam[i]], new_v[i]], -2),
                attn_mask=dec.offset_causal_mask(2, 7),
                enable_gqa=True,
            )
            for i in range(3)
        ]
    )
    # contiguous cache
    cache = dec.KVCache(3, g, 8, D, dtype=torch.float64)
    cache.append(torch.stack(prefixes), torch.stack(values))
    cache.reorder(torch.tensor(beam))
    K, V = cache.append(torch.stack(new_k), torch.stack(new_v))
    c, _ = dec.grouped_query_attention(q, K, V, dec.offset_causal_mask(2, 7))
    torch.testing.assert_close(c, ref)
    # paged cache: block tables copied, the shared partial block copied on write
    paged = kvc.PagedKVCache(n_blocks=10, block_size=2, n_kv_heads=g, d_head=D, dtype=torch.float64)
    for i in range(3):
        paged.allocate(i)
        paged.append(i, prefixes[i], values[i])
    assert paged.n_free == 1
    paged.reorder([0, 1, 2], beam)
    assert paged.n_free == 4  # old beam 1 is gone
    assert paged.tables[1] == paged.tables[2] and paged.ref_count(paged.tables[1][0]) == 2
    for i in range(3):
        paged.append(i, new_k[i], new_v[i])
    assert paged.tables[1][:2] == paged.tables[2][:2] and paged.tables[1][2] != paged.tables[2][2]  # copy-on-write
    c_paged, _ = kvc.paged_attention(q, paged, [0, 1, 2])
    torch.testing.assert_close(c_paged, ref)
    with pytest.raises(ValueError, match="beam_indices"):
        cache.reorder(torch.tensor([0, 3, 1]))
    with pytest.raises(ValueError, match="beam_indices"):
        paged.reorder([0, 1, 2], [0, 1])


@pytest.mark.catalog("extra:kv-cache")
def test_reorder_caches_of_a_model_equals_recomputation():
    torch.manual_seed(0)
    lm = dec.TinyDecoderLM(11, d_model=16, n_heads=4, n_kv_heads=2, d_ff=32, n_layers=2, max_len=16).double().eval()
    tokens = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(3))
    nxt = torch.tensor([[1], [7], [4]])
    beam = torch.tensor([1, 1, 0])
    with torch.no_grad():
        caches = lm.new_caches(3, 8)
        lm(tokens, caches)
        for c in caches:
            c.reorder(beam)
        step = lm(nxt, caches)[:, -1]
        full = lm(torch.cat([tokens[beam], nxt], 1))[:, -1]
    torch.testing.assert_close(step, full)


@pytest.mark.catalog("extra:sliding-window-cache")
@pytest.mark.parametrize("g,w", [(H, 3), (2, 4), (1, 1)])
def test_sliding_window_cache_equals_full_attention_with_a_band_mask(g, w):
    T = 13
    q, k, v = rand(2, H, T, D, seed=1), rand(2, g, T, D, seed=2), rand(2, g, T, D, seed=3)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    band = (j <= i) & (j > i - w)
    ref = F_.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=True)
    cache = kvc.SlidingWindowCache(2, g, w, D)
    t = 0
    for n in (1, 1, 5, 1, 2, 1, 1, 1):  # single steps and chunks, one longer than some windows
        c, a = cache.step(q[:, :, t : t + n], k[:, :, t : t + n], v[:, :, t : t + n])
        torch.testing.assert_close(c, ref[:, :, t : t + n], atol=1e-6, rtol=1e-5)
        assert a.shape == (2, H, n, w + n)
        assert int((a > 0).sum(-1).max()) <= w
        t += n
    assert t == T and cache.length == T
    assert sorted(cache.positions.tolist()) == list(range(T - w, T))  # the buffer keeps the last w positions
    assert cache.nbytes == 2 * 2 * g * w * D * 4


@pytest.mark.catalog("extra:sliding-window-cache")
def test_sliding_window_cache_bad_inputs():
    with pytest.raises(ValueError, match="window"):
        kvc.SlidingWindowCache(1, 1, 0, D)
    cache = kvc.SlidingWindowCache(1, 2, 3, D)
    with pytest.raises(ValueError, match=r"k must have shape \(B, g, n, d_head\)"):
        cache.step(rand(1, H, 1, D), rand(1, 1, 1, D), rand(1, 1, 1, D))
    with pytest.raises(ValueError, match="must divide"):
        kvc.SlidingWindowCache(1, 3, 3, D).step(rand(1, H, 1, D), rand(1, 3, 1, D), rand(1, 3, 1, D))


def test_offset_mask_model_and_byte_count_refuse_bad_sizes():
    with pytest.raises(ValueError, match="offset_causal_mask needs n_f to be an integer, got n_f=3.5"):
        dec.offset_causal_mask(2, 3.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_q=2.0"):
        dec.offset_causal_mask(2.0, 3)  # type: ignore[arg-type]
    lm = dec.TinyDecoderLM(5, d_model=8, n_heads=2, d_ff=8, n_layers=1, max_len=4)
    with pytest.raises(ValueError, match=r"tokens must be integer ids in \[0, vocab=5\).*range \[0, 5\]"):
        lm(torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match="vocab=5"):
        lm(torch.tensor([[-1]]))
    with pytest.raises(ValueError, match="dtype torch.float32"):
        lm(torch.zeros(1, 2))
    for bad in ({"n_layers": -1}, {"d_head": -2}, {"batch": -1}, {"bytes_per_value": 1.5}):
        args = {"n_layers": 1, "n_kv_heads": 1, "d_head": 1, "n_tokens": 1, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            dec.kv_cache_bytes(**args)


@pytest.mark.catalog("extra:kv-cache", "extra:gqa")
def test_decode_cost_against_hand_counts():
    # d = 4, h = 2 (d_h = 2), g = 1, d_ff = 8, L = 1, vocab 3, n = 5, 2 bytes:
    # weights 2*16 (W_Q, W_O) + 2*1*2*4 (W_K, W_V) + 2*4*8 (FFN) + 3*4 (readout) = 124
    assert dec.decoder_weight_count(4, 2, 1, 8, 1, vocab=3) == 124
    cost = dec.decode_step_cost(4, 2, 1, 8, 1, n_context=5, vocab=3)
    # FLOPs 2*124 + 4 * 1 layer * 2 heads * 2 dims * 5 keys = 248 + 80; KV 2 * 5 keys * 1 head * 2 dims * 2 bytes
    assert cost == dec.DecodeCost(flops=328, weight_bytes=248, kv_bytes=40)
    assert cost.intensity == 328 / 288 and cost.kv_share == 40 / 288
    # a batch of 3 shares the weights: FLOPs and KV bytes triple, weight bytes do not
    assert dec.decode_step_cost(4, 2, 1, 8, 1, 5, vocab=3, batch=3) == dec.DecodeCost(984, 248, 120)
    # 7B-sized MHA at 4096 tokens, bfloat16: one FLOP per byte moved; a 2 GiB cache
    big = dec.decode_step_cost(4096, 32, 32, 16384, 32, 4096)
    assert big.kv_bytes == 2 * 2**30 and 0.9 < big.intensity < 1.1
    with pytest.raises(ValueError, match="must divide d_model"):
        dec.decoder_weight_count(10, 3, 1, 4, 1)
    with pytest.raises(ValueError, match="n_context"):
        dec.decode_step_cost(4, 2, 1, 8, 1, -1)


@pytest.mark.catalog("extra:kv-cache", "extra:gqa")
@pytest.mark.parametrize("g", [4, 2, 1])
def test_decode_cost_matches_the_model_and_torchs_flop_counter(g):
    from torch.utils.flop_counter import FlopCounterMode

    lm = dec.TinyDecoderLM(7, d_model=16, n_heads=4, n_kv_heads=g, d_ff=24, n_layers=2, max_len=12).eval()
    matrices = sum(m.weight.numel() for m in lm.modules() if isinstance(m, torch.nn.Linear))
    assert dec.decoder_weight_count(16, 4, g, 24, 2, vocab=7) == matrices
    caches = lm.new_caches(1, 12)
    with torch.no_grad():
        lm(torch.zeros(1, 8, dtype=torch.long), caches)
        with FlopCounterMode(display=False) as counter:
            lm(torch.ones(1, 1, dtype=torch.long), caches)  # the 9th token attends to 9 keys
    assert counter.get_total_flops() == dec.decode_step_cost(16, 4, g, 24, 2, 9, vocab=7).flops


def _right_position(table, block_size, block, offset):
    return table.index(block) * block_size + offset if block in table else None


def test_block_slot_exercise_accepts_the_solution_and_rejects_plausible_mistakes(capsys):
    from attnsurvey.exercises import beyond_decoding as exd

    exd.check_block_slot(_right_position)
    exd.hidden_check_block_slot(_right_position)
    out = capsys.readouterr().out
    assert "correct" in out
    wrong = {
        "physical block id": lambda table, bs, block, off: block * bs + off,  # the forward formula read backwards
        "return None": lambda table, bs, block, off: table.index(block) * bs + off if block in table else 0,
        "invert": lambda table, bs, block, off: table.index(block) * bs + off + 1 if block in table else None,
    }
    for hint, position in wrong.items():
        with pytest.raises(AssertionError, match=hint) as message:
            exd.check_block_slot(position)
        assert "table says" not in str(message.value)  # no hint says where the logical block number is found
        with pytest.raises(AssertionError, match="block_size"):
            exd.hidden_check_block_slot(position)
    # the displayed forward lookup is no answer: it takes a position, not a slot
    with pytest.raises((AssertionError, TypeError, IndexError)):
        exd.check_block_slot(lambda table, bs, t: (table[t // bs], t % bs))

    # a table hard-coded for the visible check's block size passes it but fails the hidden one
    def fixed_block_size(table, bs, block, off):
        return table.index(block) * 4 + off if block in table else None

    exd.check_block_slot(fixed_block_size)
    with pytest.raises(AssertionError, match="block_size 1"):
        exd.hidden_check_block_slot(fixed_block_size)
