"""The IO model (slow-memory accesses of standard attention and FlashAttention's Algorithm 1), against hand counts."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond.io_model import (
    Access,
    SlowMemory,
    algorithm1_schedule,
    fast_memory_elements,
    flash_forward,
    flash_io,
    flash_leading_term,
    io_table,
    paper_blocks,
    standard_io,
)


def closed_form(n_q, n_f, d_k, d_v, M):
    """Hand derivation of Algorithm 1's traffic: T_c outer passes, each reading and writing every query row once."""
    B_c = -(-M // (4 * d_k))  # ceil(M / 4d) with integers only
    T_c = -(-n_f // B_c)
    reads = n_f * (d_k + d_v) * (n_q > 0) + T_c * n_q * (
        d_k + d_v + 2
    )  # K, V once (if any query); Q_i, O_i, l_i, m_i on every pass
    writes = n_q * (d_v + 2) + T_c * n_q * (d_v + 2)  # initial O, l, m; O_i, l_i, m_i on every pass
    return reads, writes


@pytest.mark.catalog("extra:io-model")
def test_small_case_by_hand():
    # n = 8, d = 2, M = 16: B_c = ceil(16 / 8) = 2, B_r = min(2, 2) = 2, T_c = 4 passes over 8 query rows.
    # reads: K, V 8 * 4 = 32; per pass 8 * (2 + 2 + 2) = 48, times 4 = 192 -> 224
    # writes: O, l, m initialised 8 * 4 = 32; per pass 8 * (2 + 2) = 32, times 4 = 128 -> 160
    assert paper_blocks(16, 2) == (2, 2)
    c = flash_io(8, 2, 16)
    assert (c["reads"], c["writes"], c["total"]) == (224, 160, 384)
    # fast memory: K_j, V_j (2 * 2 * 2 = 8), Q_i, O_i, l_i, m_i (2 * 6 = 12), S_ij (2 * 2 = 4)
    assert c["fast"] == 24 == fast_memory_elements(16, 2)
    # standard attention: reads Q, K (16 + 16), S and P (64 + 64), V (16); writes S, P (64 + 64), O (16)
    s = standard_io(8, 2)
    assert (s["reads"], s["writes"]) == (176, 144)


@pytest.mark.catalog("extra:io-model")
@settings(max_examples=40, deadline=None)
@given(
    n_q=st.integers(0, 300),
    n_f=st.integers(0, 300),
    d_k=st.integers(1, 20),
    d_v=st.integers(0, 20),
    M=st.integers(1, 3000),
)
def test_count_equals_closed_form(n_q, n_f, d_k, d_v, M):
    M = max(M, d_k)
    c = flash_io(n_q, d_k, M, n_f=n_f, d_v=d_v)
    assert (c["reads"], c["writes"]) == closed_form(n_q, n_f, d_k, d_v, M)
    assert c["total"] == c["reads"] + c["writes"]


@pytest.mark.catalog("extra:io-model")
@pytest.mark.parametrize(
    "n_q,n_f,d,d_v,M", [(37, 53, 8, 5, 100), (64, 64, 16, 16, 256), (5, 70, 4, 4, 16), (1, 1, 3, 2, 3)]
)
def test_instrumented_forward_matches_sdpa_and_the_counting_loop(n_q, n_f, d, d_v, M):
    g = torch.Generator().manual_seed(3)
    Q = torch.randn(2, n_q, d, generator=g, dtype=torch.float64) * 2
    K = torch.randn(2, n_f, d, generator=g, dtype=torch.float64) * 2
    V = torch.randn(2, n_f, d_v, generator=g, dtype=torch.float64)
    O, c = flash_forward(Q, K, V, M)
    torch.testing.assert_close(O, F.scaled_dot_product_attention(Q, K, V), atol=1e-12, rtol=0)
    assert c == flash_io(n_q, d, M, n_f=n_f, d_v=d_v)
    assert (c["reads"], c["writes"]) == closed_form(n_q, n_f, d, d_v, M)


def _rows_read(log, name, n):
    times = torch.zeros(n, dtype=torch.int64)
    for acc in log:
        if acc.op == "read" and acc.name == name:
            times[acc.start : acc.stop] += 1
    return times


@pytest.mark.catalog("extra:io-model")
@pytest.mark.parametrize("n_q,n_f,d,d_v,M", [(37, 53, 8, 5, 100), (64, 64, 16, 16, 256), (5, 70, 4, 4, 16)])
def test_the_count_is_observed_on_the_tensors_and_catches_an_extra_load(n_q, n_f, d, d_v, M):
    """The kernel's count comes from the blocks it moved, not from the schedule: reloading K_j, V_j is caught."""
    g = torch.Generator().manual_seed(5)
    Q, K = (torch.randn(3, n, d, generator=g, dtype=torch.float64) for n in (n_q, n_f))
    V = torch.randn(3, n_f, d_v, generator=g, dtype=torch.float64)
    log: list[Access] = []
    O, c = flash_forward(Q, K, V, M, memory=log)
    # every key and value row is loaded exactly once; every query row once per outer pass
    T_c = len({s.j for s in algorithm1_schedule(n_q, n_f, *paper_blocks(M, d))})
    assert torch.equal(_rows_read(log, "K", n_f), torch.ones(n_f, dtype=torch.int64))
    assert torch.equal(_rows_read(log, "V", n_f), torch.ones(n_f, dtype=torch.int64))
    assert torch.equal(_rows_read(log, "Q", n_q), torch.full((n_q,), T_c, dtype=torch.int64))
    assert c["reads"] == sum(a.elements for a in log if a.op == "read")
    assert c["writes"] == sum(a.elements for a in log if a.op == "write")

    reload_log: list[Access] = []
    O2, c2 = flash_forward(Q, K, V, M, reload_kv=True, memory=reload_log)
    torch.testing.assert_close(O2, O, atol=0, rtol=0)  # the same result ...
    B_r, B_c = paper_blocks(M, d)
    extra = sum((s.ke - s.ks) * (d + d_v) for s in algorithm1_schedule(n_q, n_f, B_r, B_c) if not s.first_i)
    assert c2["reads"] - c["reads"] == extra > 0  # ... but the extra loads are counted
    assert c2["writes"] == c["writes"]
    assert c2 != flash_io(n_q, d, M, n_f=n_f, d_v=d_v)  # and the comparison with the analysis fails
    assert int(_rows_read(reload_log, "K", n_f).max()) == math.ceil(n_q / B_r)


def test_slow_memory_counts_rows_per_head():
    mem = SlowMemory(1, X=torch.zeros(4, 6, 3), s=torch.zeros(4, 6))
    block = mem.read("X", 1, 4)
    assert block.shape == (4, 3, 3) and mem.reads == 9
    mem.write("s", 0, 2, torch.ones(4, 2))
    assert mem.writes == 2 and float(mem.tensors["s"].sum()) == 8.0
    block += 1  # a read is a copy: slow memory is unchanged until written back
    assert float(mem.tensors["X"].abs().sum()) == 0.0
    assert [a.op for a in mem.log] == ["read", "write"]


def test_schedule_covers_every_pair_once_keys_outside():
    steps = list(algorithm1_schedule(10, 7, 4, 3))
    assert len(steps) == math.ceil(7 / 3) * math.ceil(10 / 4)
    seen = torch.zeros(10, 7, dtype=torch.int64)
    for s in steps:
        seen[s.qs : s.qe, s.ks : s.ke] += 1
    assert torch.equal(seen, torch.ones(10, 7, dtype=torch.int64))
    assert [s.j for s in steps] == sorted(s.j for s in steps)  # key/value blocks in the outer loop
    assert sum(s.first_i for s in steps) == 3


@pytest.mark.catalog("extra:io-model")
def test_standard_attention_by_hand_and_rectangular():
    # n_q = 3, n_f = 5, d_k = 2, d_v = 4: reads Q 6, K 10, S 15, P 15, V 20 = 66; writes S 15, P 15, O 12 = 42
    s = standard_io(3, 2, n_f=5, d_v=4)
    assert (s["reads"], s["writes"], s["total"], s["fast"]) == (66, 42, 108, 5)


@pytest.mark.catalog("extra:io-model")
def test_leading_term_and_where_it_is_close():
    assert flash_leading_term(1024, 64, 65536) == 12 * 1024**2 * 64**2 / 65536
    ratios = io_table([256, 16384], [16384, 262144])
    assert 1.0 < ratios[(16384, 16384)] < 1.05  # M << n d: the n^2 d^2 / M term dominates
    assert ratios[(256, 262144)] > 5  # M > n d: one pass, the n d terms dominate
    # the tiled count beats standard attention's n^2 terms once M is a few times d^2
    assert flash_io(4096, 64, 65536)["total"] < standard_io(4096, 64)["total"] / 4


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: flash_io(-1, 4, 16), "flash_io needs n_q to be an integer >= 0, got n_q=-1"),
        (lambda: flash_io(8, 0, 16), "paper_blocks needs d to be an integer >= 1, got d=0"),
        (lambda: flash_io(8, 4, 3), "paper_blocks needs M to be an integer >= 4, got M=3"),
        (lambda: standard_io(8, -2), "standard_io needs d_k to be an integer >= 1, got d_k=-2"),
        (lambda: flash_leading_term(-3, 4, 16), "flash_leading_term needs n to be an integer >= 0, got n=-3"),
        (
            lambda: list(algorithm1_schedule(4, 4, 0, 2)),
            "algorithm1_schedule needs B_r to be an integer >= 1, got B_r=0",
        ),
    ],
)
def test_bad_sizes_name_the_symbol(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_non_int_size_is_a_type_error_and_bad_tensors_are_refused():
    with pytest.raises(TypeError, match=r"paper_blocks needs M to be an integer >= 4, got M=16.0 \(float\)"):
        flash_io(8, 4, 16.0)  # type: ignore[arg-type]
    Q = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match="batch dimensions"):
        flash_forward(Q, torch.randn(1, 4, 3), torch.randn(1, 4, 3), 16)
    with pytest.raises(ValueError, match="d_k of Q"):
        flash_forward(Q, torch.randn(2, 4, 2), torch.randn(2, 4, 3), 16)
