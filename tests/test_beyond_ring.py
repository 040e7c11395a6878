"""Ring attention across processes (beyond the survey): exact against one process."""

from __future__ import annotations

import datetime
import inspect

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond import tiled
from attnsurvey.beyond.ring import (
    layout_segments,
    padded_length,
    ring_attention,
    ring_results,
    ring_step_bytes,
    ring_work,
    run_ring,
    seeded_chunk,
    sequence_parallel_bytes,
    shard,
    unshard,
)
from attnsurvey.beyond.ring_cli import seeded_error
from attnsurvey.beyond.tiled import tiled_attend

from .helpers import rand


def _sdpa_with_grads(Q, K, V, dO, causal):
    q, k, v = (x.clone().requires_grad_(True) for x in (Q, K, V))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(dO)
    return out.detach(), (q.grad, k.grad, v.grad)


def _check_against_sdpa(P, n, layout):
    """Spawned gloo processes (file rendezvous, 60 s timeout) vs single-process SDPA: contexts, gradients, work."""
    Q, K, V = rand(2, n, 8, seed=1), rand(2, n, 8, seed=2), rand(2, n, 6, seed=3)
    dO = rand(2, n, 6, seed=4)
    results = ring_results(Q, K, V, P, [False, True], layout=layout, dO=dO, timeout=60)
    for causal, r in zip((False, True), results):
        out, grads = _sdpa_with_grads(Q, K, V, dO, causal)
        torch.testing.assert_close(r.out, out, atol=1e-5, rtol=0)
        assert r.grads is not None
        for mine, theirs in zip(r.grads, grads):
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
        assert r.work == ring_work(n, P, layout, causal)  # the counts of the run are the plan's


@pytest.mark.catalog("extra:ring-attention", "extra:ring-attention-backward")
def test_ring_p2_any_n_forward_and_backward_match_one_process():
    """n = 25 on P = 2: padded to 26, the padding masked; both masks in one spawn."""
    _check_against_sdpa(2, 25, "contiguous")


@pytest.mark.catalog("extra:ring-attention-backward", "extra:ring-balanced-causal")
def test_ring_p3_zigzag_forward_and_backward_match_one_process():
    """n = 25 on P = 3 in the zigzag layout: six pieces of 5, the last 5 positions padding."""
    _check_against_sdpa(3, 25, "zigzag")


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group(
        "gloo",
        init_method=(tmp_path / "rendezvous").as_uri(),
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=30),
    )
    yield
    dist.destroy_process_group()


@pytest.mark.catalog("extra:ring-attention")
def test_ring_p1_is_tiled_attention(one_rank_group):
    Q, K, V = rand(1, 30, 8, seed=4), rand(1, 30, 8, seed=5), rand(1, 30, 8, seed=6)
    for causal in (False, True):
        torch.testing.assert_close(
            ring_attention(Q, K, V, is_causal=causal, block_q=7, block_k=4),
            tiled_attend(Q, K, V, is_causal=causal),
            atol=1e-6,
            rtol=0,
        )


def test_seeded_error_reference_never_forms_the_score_matrix(one_rank_group, monkeypatch):
    """The torchrun check's reference goes to SDPA as 4-D input (fused kernel, O(n d) memory), not 3-D (plain path)."""
    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append((q.dim(), int(torch._fused_sdp_choice(q, k, v, **kw))))
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    for causal in (False, True):
        assert float(seeded_error(64, 8, causal)) < 1e-5
    assert seen == [(4, 1), (4, 1)]  # 1 = the flash kernel; 0 would be the plain path


def test_ring_rejects_bad_chunks(one_rank_group):
    Q = rand(1, 8, 4)
    with pytest.raises(ValueError, match="chunk length of Q"):
        ring_attention(Q, rand(1, 6, 4), rand(1, 6, 4))
    with pytest.raises(ValueError, match="d_k of Q"):
        ring_attention(Q, rand(1, 8, 3), rand(1, 8, 4))


def test_ring_needs_a_process_group_and_divisible_n():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="process group"):
        ring_attention(rand(4, 2), rand(4, 2), rand(4, 2))
    with pytest.raises(ValueError, match="P to be an integer >= 1, got P=0"):
        run_ring(rand(1, 10, 2), rand(1, 10, 2), rand(1, 10, 2), P=0)


def test_seeded_chunks_are_the_same_sequence_for_every_p():
    whole = seeded_chunk("K", 0, 1, 16, 3)
    for P in (2, 4):
        torch.testing.assert_close(
            torch.cat([seeded_chunk("K", r, P, 16, 3) for r in range(P)], -2), whole, atol=0, rtol=0
        )
    with pytest.raises(ValueError, match="P dividing"):
        seeded_chunk("Q", 0, 3, 16, 3)
    for rank in (-1, 2):
        with pytest.raises(ValueError, match=f"rank must be an integer in 0..P-1 = 0..1, got rank={rank}"):
            seeded_chunk("Q", rank, 2, 16, 3)


@pytest.mark.catalog("extra:ring-attention")
def test_communication_volume():
    # n = 16384, d = 64, P = 4, float32: each step moves a K and a V chunk of 4096 x 64 floats = 2 MiB
    v = ring_step_bytes(16384, 64, 64, 4)
    assert v["per_step"] == 4096 * 128 * 4 == 2 * 2**20
    assert v["per_rank"] == 3 * v["per_step"]
    assert v["total"] == 12 * v["per_step"]
    assert ring_step_bytes(1024, 64, 64, 1)["total"] == 0
    with pytest.raises(ValueError, match="dividing n"):
        ring_step_bytes(10, 4, 4, 3)
    for kwargs, symbol in (({"n": -4}, "n"), ({"d_k": -1}, "d_k"), ({"d_v": -2}, "d_v"), ({"itemsize": 0}, "itemsize")):
        args = {"n": 8, "d_k": 4, "d_v": 4, "P": 2, **kwargs}
        with pytest.raises(ValueError, match=f"ring_step_bytes needs {symbol} to be an integer"):
            ring_step_bytes(**args)


@pytest.mark.catalog("extra:ring-attention-backward")
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_p1_backward_with_padding_and_small_tiles(one_rank_group, layout):
    """One rank, chunk of 30 holding n = 27 (3 padding rows), tiles of 7 x 4: gradients as SDPA on the 27 rows."""
    Q, K, V, dO = (rand(2, 27, 5, seed=s, dtype=torch.float64) for s in range(4))
    for causal in (False, True):
        q, k, v = (shard(x, 1, layout)[0] for x in (Q, K, V))
        q, k, v = (torch.cat([x, rand(2, 30 - x.shape[-2], 5, seed=9, dtype=torch.float64)], -2) for x in (q, k, v))
        q, k, v = (x.requires_grad_(True) for x in (q, k, v))  # the padding holds noise, not zeros: it must stay out
        out = ring_attention(q, k, v, is_causal=causal, block_q=7, block_k=4, layout=layout, n=27)
        out.backward(torch.cat([dO, torch.ones(2, 3, 5, dtype=torch.float64)], -2))
        want, grads = _sdpa_with_grads(Q, K, V, dO, causal)
        torch.testing.assert_close(out[..., :27, :].detach(), want)
        assert float(out.detach()[..., 27:, :].abs().max()) == 0.0  # padded query rows: zero context
        for mine, theirs in zip((q.grad, k.grad, v.grad), grads):
            torch.testing.assert_close(mine[..., :27, :], theirs)
            assert float(mine[..., 27:, :].abs().max()) == 0.0  # and no gradient


@pytest.mark.catalog("extra:ring-balanced-causal")
def test_zigzag_layout_by_hand_and_shard_round_trip():
    assert layout_segments(0, 2, 8, "zigzag") == [(0, 2), (6, 2)]
    assert layout_segments(1, 2, 8, "zigzag") == [(2, 2), (4, 2)]
    assert layout_segments(1, 2, 8) == [(4, 4)]
    assert (padded_length(25, 2), padded_length(25, 2, "zigzag"), padded_length(25, 3, "zigzag")) == (26, 28, 30)
    X = torch.arange(7.0)[None, :, None]  # n = 7 on P = 2, zigzag: padded to 8, pieces of 2
    chunks = shard(X, 2, "zigzag")
    assert chunks[0].flatten().tolist() == [0, 1, 6, 0]  # position 7 is padding (zero)
    assert chunks[1].flatten().tolist() == [2, 3, 4, 5]
    torch.testing.assert_close(unshard(chunks, 7, "zigzag"), X, atol=0, rtol=0)
    with pytest.raises(ValueError, match="rank must be an integer in 0..P-1 = 0..1, got rank=2"):
        layout_segments(2, 2, 8)
    with pytest.raises(ValueError, match="layout must be one of"):
        shard(X, 2, "striped")


@pytest.mark.catalog("extra:ring-balanced-causal")
def test_zigzag_balances_causal_work_at_p4_and_contiguous_does_not():
    # contiguous, n = 64, P = 4, one tile per chunk pair: rank r computes r + 1 tiles of 16 x 16 (by hand)
    assert [w["score_entries"] for w in ring_work(64, 4)] == [256, 512, 768, 1024]
    # zigzag: pieces of 8; rank r's pieces r and 7 - r see r + 1 and 8 - r pieces: 9 tiles of 8 x 8 each
    assert [w["score_entries"] for w in ring_work(64, 4, "zigzag")] == [576] * 4
    for n, blocks in (
        (4096, {}),
        (16384, {}),
        (1000, {"block_q": 64, "block_k": 128}),
        (333, {"block_q": 16, "block_k": 16}),
    ):
        for layout, within in (("zigzag", True), ("contiguous", False)):
            work = [w["score_entries"] for w in ring_work(n, 4, layout, **blocks)]
            mean = sum(work) / 4
            assert (max(abs(w - mean) for w in work) <= 0.1 * mean) == within, (n, layout, work)
    # without the mask every layout computes the same work on every rank
    assert len({w["score_entries"] for w in ring_work(64, 4, "contiguous", is_causal=False)}) == 1


def test_ring_uses_the_tile_sizes_of_tiled_attention():
    defaults = inspect.signature(ring_attention).parameters
    assert (defaults["block_q"].default, defaults["block_k"].default) == (tiled.BLOCK_Q, tiled.BLOCK_K)


@pytest.mark.catalog("extra:ring-vs-ulysses")
def test_ring_vs_ulysses_bytes_by_hand():
    # n = 1024, d = 64, h = 8, P = 4, float32: a rank's rows of one head are 256 x 64 x 4 B = 64 KiB
    v = sequence_parallel_bytes(1024, 64, 8, 4)
    assert v["ring"] == 3 * 2**16 * 2 * 8  # 3 steps, K and V of 8 heads
    assert v["ulysses"] == 3 * 2**16 * (2 * 8 + 2 * 8) // 4  # 4 all-to-alls of 8 heads, 3/4 of each sent
    assert v["ring"] == 2 * v["ulysses"]  # ratio P / 2
    two = sequence_parallel_bytes(1024, 64, 8, 2)
    assert two["ring"] == two["ulysses"]  # equal at P = 2
    assert sequence_parallel_bytes(1024, 64, 6, 4)["ulysses"] is None  # P must divide h
    gqa = sequence_parallel_bytes(1024, 64, 8, 4, h_kv=4)
    assert gqa["ring"] == 3 * 2**16 * 2 * 4 and gqa["ulysses"] == 3 * 2**16 * (16 + 8) // 4
    with pytest.raises(ValueError, match="sequence_parallel_bytes needs d to be an integer >= 1, got d=-1"):
        sequence_parallel_bytes(1024, -1, 8, 4)


@pytest.mark.catalog("extra:ring-balanced-causal")
@settings(max_examples=40)
@given(n=st.integers(1, 70), P=st.integers(1, 5), layout=st.sampled_from(["contiguous", "zigzag"]))
def test_layouts_cover_every_position_once_and_tiles_cover_every_allowed_pair(n, P, layout):
    X = torch.arange(float(n))[None, :, None]
    chunks = shard(X, P, layout)
    assert len({c.shape for c in chunks}) == 1  # equal chunks on every rank
    torch.testing.assert_close(unshard(chunks, n, layout), X, atol=0, rtol=0)
    # tiles never touch padding: without the mask the ranks compute exactly the n x n scores, no more
    assert sum(w["score_entries"] for w in ring_work(n, P, layout, is_causal=False, block_q=4, block_k=3)) == n * n
    # with it they compute at least the n (n + 1) / 2 allowed pairs (tiles the diagonal crosses are computed whole)
    causal = sum(w["score_entries"] for w in ring_work(n, P, layout, block_q=4, block_k=3))
    assert n * (n + 1) // 2 <= causal <= n * n


_GOOD = dict(Q=torch.randn(6, 4), K=torch.randn(6, 4), V=torch.randn(6, 3), P=2)


@pytest.mark.parametrize("launch", [ring_results, run_ring])
@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(P=0), "P"),
        (dict(P=1.5), "P"),
        (dict(P=True), "P"),
        (dict(Q=torch.randn(6)), "Q"),
        (dict(K=torch.randn(5, 4)), "n of K"),
        (dict(V=torch.randn(5, 3)), "n of V"),
        (dict(K=torch.randn(6, 3)), "d_k of K"),
        (dict(Q=[[1.0]]), "Q"),
        (dict(layout="diagonal"), "layout"),
    ],
)
def test_launchers_refuse_bad_input_before_starting_a_process(launch, change, words, monkeypatch):
    """The edge-case sweep does not call the launchers (a launch outlasts its per-call limit): their
    input checks are tested here; a spawn would fail the test, so each error comes before it."""
    import torch.multiprocessing as mp

    monkeypatch.setattr(mp, "start_processes", lambda *a, **k: pytest.fail("spawned a process"))
    monkeypatch.setattr(mp, "spawn", lambda *a, **k: pytest.fail("spawned a process"))
    with pytest.raises((ValueError, TypeError), match=words):
        launch(**{**_GOOD, **change})
