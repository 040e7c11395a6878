"""Exercise checks for chapter 6.3, attention across machines (``attnsurvey.beyond.ring``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..beyond.ring import layout_segments, ring_work
from ..beyond.tiled import attention_stats

CHAPTER = "chapters/ch06_3_ring_attention.ipynb"


#: Exercise 1: the grouped-query layers the visible check tries, (n, d, P, itemsize, h, h_kv), P >= 2.
EX1_CASES = [(16384, 64, 4, 4, 8, 8), (4096, 128, 8, 2, 32, 8), (6000, 32, 3, 8, 6, 2), (640, 16, 2, 4, 4, 1)]


def training_ring_bytes(n: int, d: int, P: int, itemsize: int, h: int, h_kv: int) -> int:
    """Bytes one rank sends in one training step of one layer: the forward ring and the backward ring.

    Forward: ``P - 1`` key/value chunks. Backward: the key/value chunks again
    (``P - 1`` hops) and their gradients, which travel with them and take one more
    hop home (``P`` hops). Only the ``h_kv`` key/value heads move; ``h`` does not
    enter. Counted hop by hop, as the loops of :mod:`attnsurvey.beyond.ring` send.
    """
    chunk = (n // P) * 2 * d * h_kv * itemsize  # one K and one V chunk of n/P rows, or their gradients
    if P == 1:
        return 0
    forward = sum(chunk for _hop in range(P - 1))
    backward = sum(chunk for _hop in range(P - 1)) + sum(chunk for _hop in range(P))
    return forward + backward


def _ring_bytes_hint(ring_bytes: Callable[..., int], case: tuple[int, ...]) -> str | None:
    n, d, P, size, h, h_kv = case
    got = int(ring_bytes(n, d, P, size, h, h_kv))
    want = training_ring_bytes(*case)
    if got == want:
        return None
    chunk = (n // P) * 2 * d * h_kv * size
    if h != h_kv and got == want * h // h_kv:
        return "the query heads do not travel around the ring: which tensors does a rank send?"
    if got == (P - 1) * chunk:
        return "that is the forward ring alone: a training step also runs the backward ring"
    if got == 2 * (P - 1) * chunk:
        return "the backward ring sends more than the key/value chunks: what else travels with them?"
    if got == 3 * (P - 1) * chunk:
        return "count the hops of the gradients: where must they end up?"
    return f"ring_bytes(n={n}, d={d}, P={P}, itemsize={size}, h={h}, h_kv={h_kv}) is not right"


def check_ring_bytes(ring_bytes: Callable[..., int]) -> None:
    """Exercise 1: ``ring_bytes(n, d, P, itemsize, h, h_kv)``: bytes one rank sends in a training step of a layer.

    One sequence, ``h`` query heads sharing ``h_kv`` key/value heads of size
    ``d`` (``d_k = d_v = d``), ``P >= 2`` ranks, the forward and the backward
    ring. Raises ``AssertionError`` with a hint that names no count.
    """
    for case in EX1_CASES:
        hint = _ring_bytes_hint(ring_bytes, case)
        if hint:
            raise AssertionError(hint)
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
        if not torch.allclose(got, want, atol=1e-10):
            raise AssertionError(
                "the merged context differs from attention over all keys; "
                "merge the statistics (m, l, acc) with chapter 6's merge rule before you finalize"
            )
    print("merge check passed: the order of the chunks does not matter")


def causal_pairs(P: int, c: int, layout: str = "contiguous") -> list[int]:
    """Query-key pairs a causal mask allows to each rank's queries (chunks of ``c`` tokens), counted on the mask.

    ``layout`` is ``"contiguous"`` or ``"zigzag"`` (:func:`attnsurvey.beyond.ring.layout_segments`).
    """
    from ..masking import causal_mask

    mask = causal_mask(P * c)
    rows = [[torch.arange(a, a + s) for a, s in layout_segments(r, P, P * c, layout)] for r in range(P)]  # type: ignore[arg-type]  # layout: a str checked by layout_segments
    return [int(mask[torch.cat(r)].sum()) for r in rows]


def check_causal_work(answer: Sequence[int], P: int = 4, c: int = 1024) -> None:
    """Exercise 3: per rank, the query-key pairs a causal mask allows in the zigzag layout (``P = 4``, ``c = 1024``).

    Raises ``AssertionError`` with a hint that names no count.
    """
    got = [int(a) for a in answer]
    if len(got) != P:
        raise AssertionError(f"give one count per rank: {P} counts")
    if got == causal_pairs(P, c, "contiguous"):
        raise AssertionError("those are the counts of the contiguous layout; the exercise asks for the zigzag one")
    if got == [w["score_entries"] for w in ring_work(P * c, P, "zigzag")]:
        raise AssertionError("those are the score entries of whole tiles; count the pairs the mask allows")
    if got != causal_pairs(P, c, "zigzag"):
        raise AssertionError("not right: each rank holds two pieces; count what each piece may see, diagonal included")
    print("causal work check passed")


def hidden_check_ring_bytes(ring_bytes: Callable[..., int]) -> None:
    """Hidden test of Exercise 1: other rings (P = 2, 16; d = 1; multi-query), counted hop by hop. Raises ``AssertionError``."""
    for case in [(512, 1, 2, 4, 2, 2), (65536, 96, 16, 2, 64, 8), (30, 7, 3, 1, 5, 1)]:
        if int(ring_bytes(*case)) != training_ring_bytes(*case):
            raise AssertionError("ring_bytes({}, {}, {}, {}, {}, {}) is not right".format(*case))


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
    """Hidden test of Exercise 3: the counts against a causal mask summed over each rank's two pieces. Raises ``AssertionError``."""
    from ..masking import causal_mask

    mask, piece = causal_mask(P * c), c // 2
    want = []
    for r in range(P):
        early, late = r * piece, (2 * P - 1 - r) * piece
        want.append(int(mask[early : early + piece].sum()) + int(mask[late : late + piece].sum()))
    if len(list(answer)) != P or [int(a) for a in answer] != want:
        raise AssertionError("count the allowed pairs of each rank's two pieces of the causal mask")
