"""Exercise checks for chapter 6.3, attention across machines (``attnsurvey.beyond.ring``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..beyond.ring import layout_segments, ring_work
from ..beyond.tiled import attention_stats, finalize
from ._answers import run_answer

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


def _merge_case(
    seed: int, n_q: int, bounds: Sequence[tuple[int, int]], d_v: int, shift: float
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Per-chunk ``(c, L)`` of causal attention over the key chunks ``bounds``, every L shifted by ``shift``, and
    the context over all keys (float64 SDPA with the same mask).

    The queries sit at positions spread over the sequence, so an early query sees no key of a late chunk: there
    its pair is ``(0, -inf)``. Adding ``shift`` to every score of a row changes no context and adds ``shift``
    to every L of that row.
    """
    g = torch.Generator().manual_seed(seed)
    n = bounds[-1][1]
    Q = torch.randn(n_q, 4, generator=g, dtype=torch.float64) * 2
    K = torch.randn(n, 4, generator=g, dtype=torch.float64)
    V = torch.randn(n, d_v, generator=g, dtype=torch.float64)
    positions = torch.linspace(0, n - 1, n_q).round().long()  # the first query at position 0, the last at n - 1
    mask = torch.arange(n)[None, :] <= positions[:, None]
    parts = []
    for a, b in bounds:
        c, L = finalize(*attention_stats(Q, K[a:b], V[a:b], mask[:, a:b]))
        parts.append((c, L + shift))
    return parts, F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)


def _merged(
    merge_outputs: Callable[[Sequence[tuple]], torch.Tensor], parts: Sequence[tuple], what: str
) -> torch.Tensor:
    got = torch.as_tensor(run_answer(merge_outputs, list(parts), what=what))
    want = parts[0][0]
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: return one context per query, shape {tuple(want.shape)}, got {tuple(got.shape)}")
    return got.to(want.dtype)


def check_merge_outputs(merge_outputs: Callable[[Sequence[tuple]], torch.Tensor]) -> None:
    """Exercise 2: ``merge_outputs(parts)`` turns per-chunk ``(c, L)`` pairs, in any order, into the context.

    parts: one ``(c, L)`` per key/value chunk, ``c`` ``(n_q, d_v)`` the context of the queries over that chunk
    and ``L`` ``(n_q,)`` their log-sum-exp there (``(0, -inf)`` for a row that the causal mask lets see no key
    of the chunk). Compared, to 1e-10, with attention over all keys in two orders of the chunks, once with every
    log-sum-exp near 1000 (where ``exp(L)`` overflows). Raises ``AssertionError`` with a hint that names
    neither the weights nor the formula.
    """
    for shift in (0.0, 1000.0):
        parts, want = _merge_case(1, 5, [(0, 4), (4, 11), (11, 15)], 3, shift)
        for order in ([0, 1, 2], [2, 0, 1]):
            what = f"chunks in the order {order}" + (", log-sum-exps near 1000" if shift else "")
            got = _merged(merge_outputs, [parts[i] for i in order], what)
            if not bool(torch.isfinite(got).all()):
                raise AssertionError(
                    f"{what}: your context is not finite. Which exponential overflows, or which difference is "
                    "-inf - (-inf)? Exponentiate only differences that cannot be positive"
                )
            if not torch.allclose(got, want, atol=1e-10):
                raise AssertionError(
                    f"{what}: the merged context differs from attention over all keys (max |yours - reference| = "
                    f"{float((got - want).abs().max()):.3g}); see how the backward pass recovers a row's weights "
                    "from its L alone"
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


def hidden_check_merge_outputs(merge_outputs: Callable[[Sequence[tuple]], torch.Tensor]) -> None:
    """Hidden test of Exercise 2: one chunk alone, and five chunks of uneven sizes, shuffled, with log-sum-exps
    near -1000 (where ``exp(L)`` underflows to 0). Raises ``AssertionError``.
    """
    bounds = [(0, 1), (1, 7), (7, 9), (9, 17), (17, 20)]
    for chosen, shift in (([0], 0.0), ([4, 0, 3, 1, 2], -1000.0)):
        parts, want = _merge_case(6, 6, [bounds[i] for i in range(max(chosen) + 1)], 2, shift)
        got = _merged(merge_outputs, [parts[i] for i in chosen], f"{len(chosen)} chunk(s)")
        if not torch.allclose(got, want, atol=1e-10):
            raise AssertionError(
                f"{len(chosen)} chunk(s) of uneven size: the merged context is not attention over their keys"
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
