"""Self-checks for the exercises of chapter 6.8 (attention that selects: MoBA, NSA, DSA, differential attention).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right. No check uses a bare ``assert``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ..beyond.selective import dense_causal_cost, dsa_cost, moba_gate_scores, moba_mask
from ..experiments.recall import accuracy, moba_from_dense
from ._answers import run_on_copies

CHAPTER = "chapters/ch06_8_selective_attention.ipynb"

#: Exercise 3: the variation (blocks of 4 keys, 4 blocks: the same 16 keys as the chapter's 2 blocks of 8).
EX3_BLOCK, EX3_TOP_K = 4, 4


# ---------------------------------------------------------------------------------------------------------------
# Exercise 1: the number of heads from which DSA's FLOPs fall below dense attention's
# ---------------------------------------------------------------------------------------------------------------
def _breakeven_heads(n: int, d: int, top_k: int, index_heads: int, d_index: int) -> int | None:
    """The fewest heads ``H`` with ``dsa_cost(..., n_heads=H)`` below ``H`` dense heads, by search; None if none."""
    dense = dense_causal_cost(n, d).total_flops  # one head
    one, two = (dsa_cost(n, d, top_k, index_heads, d_index, n_heads=h).total_flops for h in (1, 2))
    attn = two - one  # one head's attention over the selection
    saved = dense - attn  # what the selection saves per head
    if saved <= 0:
        return None
    index = one - attn  # the indexer, paid once
    return index // saved + 1


def _breakeven_hint(fn: Callable[..., int | None], cases: Sequence[tuple[int, int, int, int, int]]) -> str | None:
    for n, d, top_k, h_i, d_i in cases:
        want = _breakeven_heads(n, d, top_k, h_i, d_i)
        got = fn(n, d, top_k, h_i, d_i)
        if got is None and want is None:
            continue
        if got is None or want is None:
            return (
                f"for n={n}, top_k={top_k}: can the selection save anything when every query may read top_k keys "
                "or fewer? Return None only then"
            )
        if not isinstance(got, int) and not (isinstance(got, float) and got.is_integer()):
            return "a number of heads is a whole number: the smallest H for which DSA costs less"
        if int(got) == want:
            continue
        if int(got) == want - 1:
            return "at that many heads DSA is not yet cheaper: 'below' is strict, check the rounding"
        return (
            f"not right for n={n}, d={d}, top_k={top_k}, H_I={h_i}, d_I={d_i}: count both sums over t "
            "(all visible keys, and min(top_k, t + 1)) exactly"
        )
    return None


def check_breakeven_heads(fn: Callable[..., int | None]) -> None:
    """Exercise 1: ``fn(n, d, top_k, index_heads, d_index)`` is the fewest heads for which DSA's FLOPs are below dense.

    Compared with a search over :func:`~attnsurvey.beyond.selective.dsa_cost`. Raises ``AssertionError`` with a hint.
    """
    # (32, 8, 16, 8, 16): the indexer is exactly 33 heads' saving, so a rounding that is not strict fails
    cases = [(4096, 128, 512, 64, 128), (1000, 64, 100, 4, 16), (300, 32, 64, 8, 32), (32, 8, 16, 8, 16)]
    hint = _breakeven_hint(fn, cases)
    if hint:
        raise AssertionError(hint)
    print("break-even check passed")


def hidden_check_breakeven_heads(fn: Callable[..., int | None]) -> None:
    """Hidden test of Exercise 1: no saving, a cheap indexer, an exact tie, DeepSeek's sizes. Raises ``AssertionError``."""
    cases = [(64, 16, 64, 2, 8), (65, 16, 64, 2, 8), (2000, 128, 7, 1, 4), (128, 16, 64, 16, 64)]
    cases.append((32768, 128, 2048, 64, 128))
    if _breakeven_hint(fn, cases):
        raise AssertionError("break_even_heads is not right on other sizes")


# ---------------------------------------------------------------------------------------------------------------
# Exercise 2: one block selection shared by a group of heads
# ---------------------------------------------------------------------------------------------------------------
def _wide(x: Tensor) -> Tensor:
    """The heads' vectors side by side: ``(batch, h, n, d) -> (batch, n, h d)``, head 1's entries first."""
    return x.transpose(-3, -2).flatten(-2)


def _shared_mask_reference(q: Tensor, k: Tensor, block_size: int, top_k: int) -> Tensor:
    """The goal taken literally: MoBA's token mask for one head of width ``h d`` holding the heads' vectors.

    q, k ``(batch, h, n, d)``; returns ``(batch, n, n)``. It never forms the heads' own gates.
    """
    return moba_mask(_wide(q), _wide(k), block_size, top_k)


def _shared_case(seed: int, h: int, n: int, d: int, ties: bool = False) -> tuple[Tensor, Tensor]:
    """Queries and keys ``(2, h, n, d)``; with ``ties``, entries in {-1, 0, 1}, so that blocks often tie on the gate."""
    gen = torch.Generator().manual_seed(seed)
    if ties:
        q, k = (torch.randint(-1, 2, (2, h, n, d), generator=gen).double() for _ in range(2))
    else:
        q, k = (torch.randn(2, h, n, d, generator=gen, dtype=torch.float64) for _ in range(2))
    return q, k


def _shared_hint(fn: Callable[..., Tensor], cases: Sequence[tuple[int, int, int, int, int, int, bool]]) -> str | None:
    for seed, h, n, d, block, top_k, ties in cases:
        q, k = _shared_case(seed, h, n, d, ties)
        gates = moba_gate_scores(q, k, block)  # each head's own gate, (batch, h, n, n_b)
        want = _shared_mask_reference(q, k, block, top_k)
        got = run_on_copies(fn, gates, block, top_k, what=f"h={h} heads, n={n}, B={block}, top_k={top_k}")
        if not isinstance(got, Tensor) or got.dtype != torch.bool:
            return "return a boolean tensor, True = may attend"
        if got.shape != want.shape:
            if got.shape == (*gates.shape[:-1], n):
                return "one mask per head: the group shares one selection, so the head axis goes away"
            return f"the mask should have shape (batch, n, n) = {tuple(want.shape)}, got {tuple(got.shape)}"
        if torch.equal(got, want):
            continue
        if (got & ~torch.ones(n, n, dtype=torch.bool).tril()).any():
            return "a query reads a later key: keep the selection causal inside the own block"
        own = moba_mask(q, k, block, top_k)  # each head's own choice, (batch, h, n, n)
        if torch.equal(got, own.any(-3)):
            return "that is the union of the heads' own choices: a group reads top_k blocks in all, ranked once"
        if torch.equal(got, own.all(-3)):
            return "that is the intersection of the heads' own choices: a group reads top_k blocks in all, ranked once"
        if h > 1 and torch.equal(got, own[..., 0, :, :]):
            return "that is the first head's own choice: the wide head's query holds every head's query"
        return (
            f"not right for h={h}, n={n}, B={block}, top_k={top_k}: write the wide head's gate for a block, "
            "then see how it ranks the blocks (ties included) and which blocks are forced"
        )
    return None


def check_shared_mask(fn: Callable[..., Tensor]) -> None:
    """Exercise 2: ``fn(gates, block_size, top_k)`` is one MoBA-style token mask for all the heads of a group.

    gates ``(batch, h, n, n_b)``, each head's MoBA gate; the answer ``(batch, n, n)``, compared with MoBA's mask of
    one wide head that holds the heads' queries and keys side by side, on random and on tied gates. ``fn`` may not
    change its input. Raises ``AssertionError`` with a hint.
    """
    cases = [(0, 2, 16, 4, 4, 2, False), (1, 4, 24, 8, 4, 3, False), (2, 3, 20, 4, 8, 2, False)]
    hint = _shared_hint(fn, [*cases, (3, 2, 16, 2, 2, 3, True)])
    if hint:
        raise AssertionError(hint)
    print("shared selection check passed")


def hidden_check_shared_mask(fn: Callable[..., Tensor]) -> None:
    """Hidden test of Exercise 2: one head, every block, a short last block, ties. Raises ``AssertionError``."""
    cases = [(10, 1, 12, 4, 4, 2, False), (11, 2, 16, 4, 4, 4, False), (12, 4, 30, 8, 8, 2, False)]
    if _shared_hint(fn, [*cases, (13, 2, 9, 2, 2, 1, False), (14, 3, 22, 3, 2, 4, True)]):
        raise AssertionError("the shared mask is not right on other inputs")


# ---------------------------------------------------------------------------------------------------------------
# Exercise 3: MoBA with smaller blocks on the trained needle model
# ---------------------------------------------------------------------------------------------------------------
def moba_accuracy(model: nn.Module, x: Tensor, y: Tensor, block_size: int, top_k: int) -> float:
    """The accuracy of ``model`` (a :class:`~attnsurvey.experiments.recall.RecallModel`) with MoBA mixers.

    Each softmax mixer is replaced by a :class:`~attnsurvey.beyond.selective.MoBALayer` sharing its weights;
    the model's mixers are restored afterwards. Raises ``TypeError`` for a model without a ``mixers`` ModuleList.
    """
    dense = model.mixers
    if not isinstance(dense, nn.ModuleList):
        raise TypeError(f"moba_accuracy needs a RecallModel (mixers in a ModuleList), got {type(model).__name__}")
    try:
        model.mixers = nn.ModuleList(moba_from_dense(m, block_size * top_k, block_size) for m in dense)
        return accuracy(model, x, y)
    finally:
        model.mixers = dense


def check_moba_variation(answer: float | None, model: nn.Module, x: Tensor, y: Tensor) -> None:
    """Exercise 3: ``answer`` is the needle accuracy of ``model`` with MoBA reading 4 blocks of 4 keys.

    Raises ``AssertionError`` with a hint.
    """
    if answer is None or not isinstance(answer, (int, float)) or not math.isfinite(answer):
        raise AssertionError("put the accuracy, a number between 0 and 1, in the variable")
    want = moba_accuracy(model, x, y, EX3_BLOCK, EX3_TOP_K)
    if math.isclose(answer, want, abs_tol=1e-9):
        print("MoBA variation check passed")
        return
    if math.isclose(answer, moba_accuracy(model, x, y, 8, 2), abs_tol=1e-9):
        raise AssertionError("that is the chapter's setting (2 blocks of 8): change the block size and the count")
    if math.isclose(answer, accuracy(model, x, y), abs_tol=1e-9):
        raise AssertionError("that is the dense model: swap its mixers for MoBA layers with its weights")
    raise AssertionError("not the accuracy of that variation: are the blocks 4 keys long, 16 keys in all?")


def hidden_check_moba_variation(answer: float | None, model: nn.Module, x: Tensor, y: Tensor) -> None:
    """Hidden test of Exercise 3 (the same comparison, no hint). Raises ``AssertionError``."""
    if answer is None or not math.isclose(answer, moba_accuracy(model, x, y, EX3_BLOCK, EX3_TOP_K), abs_tol=1e-9):
        raise AssertionError("the MoBA variation's accuracy is not right")


__all__ = [
    "EX3_BLOCK",
    "EX3_TOP_K",
    "check_breakeven_heads",
    "check_moba_variation",
    "check_shared_mask",
    "hidden_check_breakeven_heads",
    "hidden_check_moba_variation",
    "hidden_check_shared_mask",
    "moba_accuracy",
]
