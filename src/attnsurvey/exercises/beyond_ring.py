"""Exercise checks for chapter 6.3, attention across machines (``attnsurvey.beyond.ring``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..beyond.ring import ring_step_bytes
from ..beyond.tiled import attention_stats

CHAPTER = "chapters/ch06_3_ring_attention.ipynb"


def check_ring_bytes(ring_bytes: Callable[[int, int, int, int], int]) -> None:
    """Exercise 1: ``ring_bytes(n, d, P, itemsize)``: bytes one rank sends in a whole ring pass (d_k = d_v = d)."""
    for n, d, P, size in [(16384, 64, 4, 4), (4096, 128, 8, 2), (1024, 64, 1, 4), (6000, 32, 3, 8)]:
        want = ring_step_bytes(n, d, d, P, size)["per_rank"]
        got = int(ring_bytes(n, d, P, size))
        assert got == want, (
            f"ring_bytes({n}, {d}, {P}, {size}) = {got} is not right: "
            "P - 1 steps, each sending one K and one V chunk of n/P rows"
        )
    print("ring bytes check passed")


def check_merge_parts(merge_parts: Callable[[Sequence[tuple]], torch.Tensor]) -> None:
    """Exercise 2: ``merge_parts(parts)`` turns per-chunk ``(m, l, acc)`` statistics, in any order, into the context."""
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(5, 4, generator=g, dtype=torch.float64) * 3 for _ in range(3))
    K = K.repeat(3, 1) + torch.randn(15, 4, generator=g, dtype=torch.float64)
    V = V.repeat(3, 1) + 2 * torch.randn(15, 4, generator=g, dtype=torch.float64)
    parts = [attention_stats(Q, K[s : s + 5], V[s : s + 5]) for s in (0, 5, 10)]
    want = F.scaled_dot_product_attention(Q, K, V)
    for order in ([0, 1, 2], [2, 0, 1]):
        got = merge_parts([parts[i] for i in order])
        assert torch.allclose(got, want, atol=1e-10), (
            "the merged context differs from attention over all keys; "
            "averaging the chunk contexts ignores how much weight each chunk carries"
        )
    print("merge check passed: the order of the chunks does not matter")


def causal_pairs(P: int, c: int) -> list[int]:
    """Unmasked query-key pairs each rank computes under a causal mask (chunks of ``c`` tokens)."""
    return [r * c * c + c * (c + 1) // 2 for r in range(P)]


def check_causal_work(answer: Sequence[int], P: int = 4, c: int = 1024) -> None:
    """Exercise 3: the list, per rank, of allowed query-key pairs under a causal mask."""
    want = causal_pairs(P, c)
    assert (
        [int(a) for a in answer] == want
    ), f"got {list(answer)}, which is not right: rank r sees r whole chunks and one triangle (with its diagonal)"
    print("causal work check passed")


def hidden_check_ring_bytes(ring_bytes: Callable[[int, int, int, int], int]) -> None:
    """Hidden test of Exercise 1: other rings (P = 2, 16; d = 1), counted chunk by chunk. Raises ``AssertionError``."""
    for n, d, P, size in [(512, 1, 2, 4), (65536, 96, 16, 2), (30, 7, 3, 1)]:
        chunk = n // P
        want = sum(chunk * d * size + chunk * d * size for _step in range(P - 1))  # one K and one V chunk per step
        if int(ring_bytes(n, d, P, size)) != want:
            raise AssertionError(f"ring_bytes({n}, {d}, {P}, {size}) is not right")


def hidden_check_merge_parts(merge_parts: Callable[[Sequence[tuple]], torch.Tensor]) -> None:
    """Hidden test of Exercise 2: one part alone, and five parts of uneven sizes in a shuffled order.

    Raises ``AssertionError``.
    """
    g = torch.Generator().manual_seed(6)
    Q, K, V = (
        torch.randn(3, 4, generator=g, dtype=torch.float64) * 4,
        torch.randn(20, 4, generator=g, dtype=torch.float64),
        torch.randn(20, 2, generator=g, dtype=torch.float64),
    )
    bounds = [(0, 1), (1, 7), (7, 9), (9, 17), (17, 20)]
    parts = [attention_stats(Q, K[a:b], V[a:b]) for a, b in bounds]
    for chosen in ([2], [4, 0, 3, 1, 2]):
        keys = torch.cat([K[bounds[i][0] : bounds[i][1]] for i in chosen])
        vals = torch.cat([V[bounds[i][0] : bounds[i][1]] for i in chosen])
        got = merge_parts([parts[i] for i in chosen])
        if not torch.allclose(torch.as_tensor(got), F.scaled_dot_product_attention(Q, keys, vals), atol=1e-10):
            raise AssertionError(
                f"{len(chosen)} part(s) of uneven size: the merged context is not attention over their keys"
            )


def hidden_check_causal_work(answer: Sequence[int], P: int = 4, c: int = 1024) -> None:
    """Hidden test of Exercise 3: the counts against a causal mask summed rank by rank. Raises ``AssertionError``."""
    from ..masking import causal_mask

    mask = causal_mask(P * c)
    want = [int(mask[r * c : (r + 1) * c].sum()) for r in range(P)]
    if len(list(answer)) != P or [int(a) for a in answer] != want:
        raise AssertionError("count the allowed pairs of each rank's rows of the causal mask")
