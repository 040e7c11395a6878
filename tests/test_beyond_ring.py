"""Ring attention across processes (beyond the survey): exact against one process."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from attnsurvey.beyond.ring import ring_attention, ring_step_bytes, run_ring, seeded_chunk, seeded_error
from attnsurvey.beyond.tiled import tiled_attend

from .helpers import rand


@pytest.mark.catalog("extra:ring-attention")
def test_ring_p2_matches_one_process():
    """Two spawned gloo processes on 127.0.0.1 (file rendezvous, 60 s timeout) vs single-process SDPA, both masks in one spawn."""
    Q, K, V = rand(2, 48, 8, seed=1), rand(2, 48, 8, seed=2), rand(2, 48, 6, seed=3)
    contexts = run_ring(Q, K, V, P=2, is_causal=[False, True], timeout=60)
    for causal, c in zip((False, True), contexts):
        torch.testing.assert_close(c, F.scaled_dot_product_attention(Q, K, V, is_causal=causal), atol=1e-5, rtol=0)


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
    with pytest.raises(ValueError, match="P >= 1 dividing n"):
        run_ring(rand(1, 10, 2), rand(1, 10, 2), rand(1, 10, 2), P=4)


def test_seeded_chunks_are_the_same_sequence_for_every_p():
    whole = seeded_chunk("K", 0, 1, 16, 3)
    for P in (2, 4):
        torch.testing.assert_close(
            torch.cat([seeded_chunk("K", r, P, 16, 3) for r in range(P)], -2), whole, atol=0, rtol=0
        )
    with pytest.raises(ValueError, match="P dividing"):
        seeded_chunk("Q", 0, 3, 16, 3)


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
