"""Self-checks for the exercises of chapter 6.1 (KV cache; multi-query and grouped-query attention).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..beyond.decoding import kv_cache_bytes

#: Exercise 1: an 80-layer model with 64 query heads, 8 K/V heads, d_head = 128, bfloat16, 4096 tokens, batch 1.
EX1 = {"n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "d_head": 128, "n_tokens": 4096, "bytes_per_value": 2}


def check_cache_gib(answer: float) -> None:
    """Exercise 1: the KV cache of :data:`EX1` in GiB (2^30 bytes), within 1 %."""
    cfg = {k: v for k, v in EX1.items() if k != "n_heads"}
    right = kv_cache_bytes(**cfg) / 2**30
    if math.isclose(answer, right / 2, rel_tol=0.01):
        raise AssertionError("half the right size: a cache stores keys AND values")
    if math.isclose(answer, right * EX1["n_heads"] / EX1["n_kv_heads"], rel_tol=0.01):
        raise AssertionError("that is the MHA cache: with GQA only the n_kv_heads K/V heads are cached")
    if not math.isclose(answer, right, rel_tol=0.01):
        raise AssertionError(f"{answer} GiB is not right; count 2 x layers x tokens x K/V heads x d_head x bytes")
    print("correct")


def check_expand_kv(expand_kv: Callable[[Tensor, int], Tensor]) -> None:
    """Exercise 2: ``expand_kv(k, h)`` turns ``(B, g, n, d)`` into ``(B, h, n, d)``, query head j reading K/V head j // (h/g).

    Two cases with different ``B``, ``g``, ``h / g``, ``n`` and ``d``, so an
    answer that takes the group size from the wrong axis fails.
    """
    for shape, h in [((2, 3, 2, 1), 6), ((1, 2, 3, 5), 8)]:
        B, g, n, d = shape
        k = torch.arange(B * g * n * d, dtype=torch.float32).reshape(shape)
        out = expand_kv(k, h)
        if tuple(out.shape) != (B, h, n, d):
            raise AssertionError(
                f"k of shape {shape}, h = {h}: expected shape {(B, h, n, d)}, got {tuple(out.shape)} "
                "(each K/V head serves h // g query heads)"
            )
        if torch.equal(out, k.repeat(1, h // g, 1, 1)):
            raise AssertionError(
                "the groups are tiled (head 1 reads K/V head 1); consecutive query heads must share one K/V head"
            )
        if not torch.equal(out, k.repeat_interleave(h // g, dim=1)):
            raise AssertionError(
                f"k of shape {shape}, h = {h}: query heads 0 .. h/g - 1 must read K/V head 0, the next h/g head 1, ..."
            )
    print("correct: consecutive query heads share a K/V head")


def score_counts(T: int) -> tuple[int, int]:
    """Scores ``q . k`` computed per layer and head to generate ``T`` tokens from a one-token prompt: (with cache, without)."""
    return T * (T + 1) // 2, T * (T + 1) * (2 * T + 1) // 6


def check_score_counts(with_cache: int, without_cache: int, T: int = 512) -> None:
    """Exercise 3: the counts of :func:`score_counts` for ``T`` generated tokens."""
    right = score_counts(T)
    if (with_cache, without_cache) == right[::-1]:
        raise AssertionError("swapped: the cache makes generation cheaper")
    if without_cache == T * T:
        raise AssertionError("T x T is only the last step; without a cache step t computes a t x t matrix: add them up")
    if (with_cache, without_cache) != right:
        raise AssertionError("not right; step t attends with 1 query (cache) or t queries (no cache) to t keys")
    print("correct")


def hidden_check_cache_gib(answer: float) -> None:
    """Hidden test of Exercise 1: the GiB of :data:`EX1` to a relative 1e-6, from the bytes counted factor by factor.

    Raises ``AssertionError``.
    """
    n_bytes = 2 * EX1["n_layers"] * EX1["n_tokens"] * EX1["n_kv_heads"] * EX1["d_head"] * EX1["bytes_per_value"]
    if not math.isclose(float(answer), n_bytes / 2**30, rel_tol=1e-6):
        raise AssertionError("the size is not exact: divide the bytes by 2^30, without rounding")


def hidden_check_expand_kv(expand_kv: Callable[[Tensor, int], Tensor]) -> None:
    """Hidden test of Exercise 2: multi-head (g = h), multi-query (g = 1) and a larger group, against an index.

    Raises ``AssertionError``.
    """
    for shape, h in [((1, 4, 2, 3), 4), ((2, 1, 3, 2), 5), ((1, 3, 2, 2), 12)]:
        B, g, n, d = shape
        k = torch.randn(shape, generator=torch.Generator().manual_seed(h))
        want = k[:, torch.arange(h) // (h // g)]
        out = expand_kv(k, h)
        if tuple(out.shape) != (B, h, n, d) or not torch.equal(out, want):
            raise AssertionError(f"k of shape {shape}, h = {h}: query head j must read K/V head j // (h // g)")


def hidden_check_score_counts(with_cache: int, without_cache: int, T: int = 512) -> None:
    """Hidden test of Exercise 3: both counts recounted step by step (whole numbers). Raises ``AssertionError``."""
    from ._answers import whole_number

    cached = sum(1 * t for t in range(1, T + 1))
    uncached = sum(t * t for t in range(1, T + 1))
    if whole_number(with_cache, "a count") != cached or whole_number(without_cache, "a count") != uncached:
        raise AssertionError("recount the scores step by step: step t has 1 or t queries against t keys")


#: Block-table exercise: the block size of the visible check.
EX4_BLOCK_SIZE = 4
#: Block-table exercise: the block tables of two sequences (physical block ids in logical order).
EX4_TABLES = {"a": [5, 0, 3], "b": [1, 7]}


def _slot_cases(block_size: int, tables: dict[str, list[int]]) -> list[tuple[list[int], int, tuple[int, int]]]:
    return [
        (table, t, (table[t // block_size], t % block_size))
        for table in tables.values()
        for t in range(block_size * len(table))
    ]


def _check_slot(slot: Callable[[list[int], int, int], tuple[int, int]], block_size: int, tables: dict) -> str | None:
    cases = _slot_cases(block_size, tables)
    got = [tuple(int(x) for x in slot(table, block_size, t)) for table, t, _ in cases]
    if got == [want for _, _, want in cases]:
        return None
    if got == [(t // block_size, t % block_size) for _, t, _ in cases]:
        return "that is the logical block number; the block table maps it to a physical block"
    return "position t lies in logical block t // block_size at offset t % block_size; look the block up in the table"


def check_block_slot(slot: Callable[[list[int], int, int], tuple[int, int]]) -> None:
    """Block-table exercise: ``slot(table, block_size, t)`` returns ``(physical block, offset)`` of position ``t``.

    Checked on every position of the block tables in :data:`EX4_TABLES`. Raises
    ``AssertionError`` with a hint.
    """
    hint = _check_slot(slot, EX4_BLOCK_SIZE, EX4_TABLES)
    if hint:
        raise AssertionError(hint)
    print("correct: every position of both block tables is found")


def hidden_check_block_slot(slot: Callable[[list[int], int, int], tuple[int, int]]) -> None:
    """Hidden test of the block-table exercise: other block sizes (1, 3, 16) and tables, against a real :class:`PagedKVCache`.

    Raises ``AssertionError``.
    """
    from ..beyond.kv_cache import PagedKVCache

    for block_size, lengths in ((1, (3, 2)), (3, (7, 4, 9)), (16, (40, 17))):
        cache = PagedKVCache(64, block_size, 1, 1)
        for s in range(len(lengths)):
            cache.allocate(s)
        for step in range(max(lengths)):  # interleaved appends: block tables that are not contiguous
            for s, n in enumerate(lengths):
                if step < n:
                    cache.append(s, torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))
        for s, n in enumerate(lengths):
            for t in range(n):
                if tuple(int(x) for x in slot(cache.tables[s], block_size, t)) != cache.slot(s, t):
                    raise AssertionError(f"block_size {block_size}: a position is not where the cache stores it")
