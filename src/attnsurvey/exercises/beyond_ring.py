"""Exercise checks for chapter 6.3, attention across machines (``attnsurvey.beyond.ring``)."""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from ..beyond.ring import ring_step_bytes

CHAPTER = "chapters/ch06_3_ring_attention.ipynb"


def check_ring_bytes(ring_bytes: Callable[[int, int, int, int], int]) -> None:
    """Exercise 1: ``ring_bytes(n, d, P, itemsize)``: bytes one rank sends in a whole ring pass (d_k = d_v = d)."""
    for n, d, P, size in [(16384, 64, 4, 4), (4096, 128, 8, 2), (1024, 64, 1, 4), (6000, 32, 3, 8)]:
        want = ring_step_bytes(n, d, d, P, size)["per_rank"]
        got = int(ring_bytes(n, d, P, size))
        assert got == want, (f"ring_bytes({n}, {d}, {P}, {size}) = {got}, expected {want}: "
                             "P - 1 steps, each sending one K and one V chunk of n/P rows")
    print("ring bytes check passed")


def check_merge_parts(merge_parts: Callable[[Sequence[tuple]], torch.Tensor]) -> None:
    """Exercise 2: ``merge_parts(parts)`` turns per-chunk ``(m, l, acc)`` statistics, in any order, into the context."""
    from ..beyond.tiled import attention_stats

    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(5, 4, generator=g, dtype=torch.float64) * 3 for _ in range(3))
    K = K.repeat(3, 1) + torch.randn(15, 4, generator=g, dtype=torch.float64)
    V = V.repeat(3, 1) + 2 * torch.randn(15, 4, generator=g, dtype=torch.float64)
    parts = [attention_stats(Q, K[s:s + 5], V[s:s + 5]) for s in (0, 5, 10)]
    want = F.scaled_dot_product_attention(Q, K, V)
    for order in ([0, 1, 2], [2, 0, 1]):
        got = merge_parts([parts[i] for i in order])
        assert torch.allclose(got, want, atol=1e-10), (
            "the merged context differs from attention over all keys; "
            "averaging the chunk contexts ignores how much weight each chunk carries")
    print("merge check passed: the order of the chunks does not matter")


def causal_pairs(P: int, c: int) -> list[int]:
    """Unmasked query-key pairs each rank computes under a causal mask (chunks of ``c`` tokens)."""
    return [r * c * c + c * (c + 1) // 2 for r in range(P)]


def check_causal_work(answer: Sequence[int], P: int = 4, c: int = 1024) -> None:
    """Exercise 3: the list, per rank, of allowed query-key pairs under a causal mask."""
    want = causal_pairs(P, c)
    assert [int(a) for a in answer] == want, (
        f"got {list(answer)}, expected {want}: rank r sees r whole chunks and one triangle (with its diagonal)")
    print(f"causal work check passed: the last rank does {want[-1] / want[0]:.1f} times the work of rank 0")
