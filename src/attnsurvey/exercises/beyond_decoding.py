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

#: Exercise 1: a grouped-query model with a sliding window: 40 layers, 32 query heads, 8 K/V heads of size 128,
#: a window of 4,096 keys, bfloat16, a batch of 3 sequences of 32,768 tokens each.
EX1 = {
    "n_layers": 40,
    "n_heads": 32,
    "n_kv_heads": 8,
    "d_head": 128,
    "n_tokens": 32768,
    "window": 4096,
    "batch": 3,
    "bytes_per_value": 2,
}


def window_cache_gib() -> float:
    """The answer of Exercise 1: the rolling buffer holds ``window`` positions per sequence, ``n_kv_heads`` heads."""
    cfg = {k: EX1[k] for k in ("n_layers", "n_kv_heads", "d_head", "batch", "bytes_per_value")}
    return kv_cache_bytes(**cfg, n_tokens=min(EX1["window"], EX1["n_tokens"])) / 2**30


def check_cache_gib(answer: float) -> None:
    """Exercise 1: the sliding-window KV cache of :data:`EX1` in GiB (2^30 bytes), within 1 %.

    Raises ``AssertionError`` with a hint that names no size.
    """
    right = window_cache_gib()
    full_length = right * EX1["n_tokens"] / EX1["window"]
    wrong = {
        (
            "the formula above is for a cache that keeps every position; "
            "read again what the rolling buffer of the previous section holds"
        ): (full_length, full_length / EX1["batch"]),
        "count both tensors the cache stores per position": (right / 2,),
        "only the key/value heads are cached": (right * EX1["n_heads"] / EX1["n_kv_heads"],),
        "every sequence of the batch has its own buffer": (right / EX1["batch"],),
    }
    for hint, values in wrong.items():
        if any(math.isclose(float(answer), v, rel_tol=0.01) for v in values):
            raise AssertionError(hint)
    if not math.isclose(float(answer), right, rel_tol=0.01):
        raise AssertionError("not right: list what one cached position stores, then how many positions are kept")
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


#: Exercise 3: the window of the sliding-window cache and the number of generated tokens.
EX3 = {"window": 128, "T": 512}


def window_score_counts(T: int, w: int) -> tuple[int, float]:
    """Scores per layer and head to generate ``T`` tokens from a one-token prompt with a window of ``w`` keys.

    Returns the count and its fraction of the count with a full cache (step ``t`` attends to ``t`` keys).
    """
    window = sum(min(t, w) for t in range(1, T + 1))
    return window, window / sum(range(1, T + 1))


def check_score_counts(window_count: int, fraction: float) -> None:
    """Exercise 3: the score count of :data:`EX3` with a sliding-window cache, and its fraction of the full cache's.

    Raises ``AssertionError`` with a hint that names no count.
    """
    T, w = EX3["T"], EX3["window"]
    right, right_fraction = window_score_counts(T, w)
    if int(window_count) == T * w:
        raise AssertionError("count the keys SlidingWindowCache attends to in the first few steps, then compare")
    if int(window_count) == T * (T + 1) // 2:
        raise AssertionError("that is the full cache: the window caps the keys of every step")
    if int(window_count) == window_score_counts(T, w + 1)[0] or int(window_count) == window_score_counts(T, w - 1)[0]:
        raise AssertionError("off by one: how many keys, the current one included, does a query see?")
    if int(window_count) != right:
        raise AssertionError("not right: count the keys of each step, then add the steps up")
    if not math.isclose(float(fraction), right_fraction, rel_tol=1e-3):
        raise AssertionError("the count is right; the fraction is not (divide by the full cache's count)")
    print("correct")


def hidden_check_cache_gib(answer: float) -> None:
    """Hidden test of Exercise 1: the GiB of :data:`EX1` to a relative 1e-6, from the bytes counted factor by factor.

    Raises ``AssertionError``.
    """
    kept = min(EX1["window"], EX1["n_tokens"])
    n_bytes = 2 * EX1["n_layers"] * EX1["batch"] * kept * EX1["n_kv_heads"] * EX1["d_head"] * EX1["bytes_per_value"]
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


def hidden_check_score_counts(window_count: int, fraction: float) -> None:
    """Hidden test of Exercise 3: the count recounted step by step (a whole number), the fraction to 1e-9.

    Raises ``AssertionError``.
    """
    from ._answers import whole_number

    T, w = EX3["T"], EX3["window"]
    counted = 0
    for t in range(1, T + 1):
        counted += len(range(max(0, t - w), t))  # the keys of step t inside the window
    if whole_number(window_count, "a count") != counted:
        raise AssertionError("recount the scores step by step")
    if not math.isclose(float(fraction), counted / (T * (T + 1) // 2), rel_tol=1e-9):
        raise AssertionError("give the fraction unrounded")


#: Block-table exercise: the block size of the visible check.
EX4_BLOCK_SIZE = 4
#: Block-table exercise: the block tables of two sequences (physical block ids in logical order).
EX4_TABLES = {"a": [5, 0, 3], "b": [1, 7]}


def _position_cases(block_size: int, tables: dict[str, list[int]]) -> list[tuple[list[int], int, int, int | None]]:
    """``(table, block, offset, position)`` for every slot of every block of the pool that the tables use, and more.

    Blocks that a table does not hold map to ``None``.
    """
    pool = sorted({b for table in tables.values() for b in table} | {max(max(t) for t in tables.values()) + 1})
    return [
        (table, block, offset, table.index(block) * block_size + offset if block in table else None)
        for table in tables.values()
        for block in pool
        for offset in range(block_size)
    ]


def _check_position(
    position: Callable[[list[int], int, int, int], int | None], block_size: int, tables: dict
) -> str | None:
    cases = _position_cases(block_size, tables)
    got = [position(list(table), block_size, block, offset) for table, block, offset, _ in cases]
    got = [None if g is None else int(g) for g in got]
    if got == [want for *_, want in cases]:
        return None
    if all(g == block * block_size + offset for g, (_, block, offset, _w) in zip(got, cases)):
        return "that treats the physical block id as the logical block number; read Eq. (eq-kv-paged-slot) again"
    if all(g is not None for g in got):
        return "a block that is not in the sequence's table holds none of its positions: return None for it"
    return "not right: invert Eq. (eq-kv-paged-slot) for one block table"


def check_block_slot(position: Callable[[list[int], int, int, int], int | None]) -> None:
    """Block-table exercise: ``position(table, block_size, block, offset)``: the position stored in that slot, or None.

    Checked on every slot of the blocks that the tables of :data:`EX4_TABLES`
    use (and one they do not). Raises ``AssertionError`` with a hint.
    """
    hint = _check_position(position, EX4_BLOCK_SIZE, EX4_TABLES)
    if hint:
        raise AssertionError(hint)
    print("correct: every slot of both block tables is found")


def hidden_check_block_slot(position: Callable[[list[int], int, int, int], int | None]) -> None:
    """Hidden test of the block-table exercise: other block sizes (1, 3, 16) and tables, against a real :class:`PagedKVCache`.

    Every stored position is looked up from the slot where the cache keeps it.
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
                got = position(list(cache.tables[s]), block_size, *cache.slot(s, t))
                if got is None or int(got) != t:
                    raise AssertionError(
                        f"block_size {block_size}: a slot does not give the position the cache stored there"
                    )
            foreign = next(b for b in range(64) if b not in cache.tables[s])
            if position(list(cache.tables[s]), block_size, foreign, 0) is not None:
                raise AssertionError(
                    f"block_size {block_size}: a block outside the table holds no position of the sequence"
                )
