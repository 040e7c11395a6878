"""Self-checks for the exercises of chapter 6.2 (positions for long contexts).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ..beyond.positions import alibi_slopes, apply_rope
from ..experiments.long_positions import next_token_accuracy
from ..stats import DEFAULT_SEEDS
from ._verdict import check_rerun, check_results_and_verdict


def half_distances(h: int) -> list[float]:
    """The answer of Exercise 1: per head, the distance at which ALiBi's penalty alone halves a key's weight.

    With equal content scores the weight of a key at distance ``delta`` relative
    to the newest key is ``exp(-m_j delta)``; it is one half at ``ln 2 / m_j``.
    """
    return [math.log(2.0) / m for m in alibi_slopes(h).tolist()]


def check_half_distance_4(distances: Sequence[float]) -> None:
    """Exercise 1: for a 4-head ALiBi model, the distance at which each head halves a key's weight, largest slope first.

    Within a relative 1e-6. Raises ``AssertionError`` with a hint that names no value.
    """
    got = [float(x) for x in distances]
    if len(got) != 4:
        raise AssertionError(f"give one distance per head: 4 values, got {len(got)}")
    right = half_distances(4)

    def same(values: Sequence[float]) -> bool:
        return all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, values))

    if same(right):
        print("correct")
        return
    if same(half_distances(8)[:4]):
        raise AssertionError("those are the first 4 heads of an 8-head model; see how h enters Eq. (eq-alibi-score)")
    if same([1.0 / m for m in alibi_slopes(4).tolist()]):
        raise AssertionError(
            "that is where the penalty reaches one unit of score; the question is about the weight on the key"
        )
    if same(right[::-1]):
        raise AssertionError("the order is reversed: the steepest head first")
    raise AssertionError(
        "not right: write the weight of a far key relative to the newest one, then solve for the distance"
    )


def check_rotate(rotate: Callable[[Tensor, int], Tensor]) -> None:
    """Exercise 2: ``rotate(x, t)`` rotates each pair ``(x_2i, x_2i+1)`` of a ``(d,)`` vector by ``t * theta_i``."""
    x = torch.randn(8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    right = apply_rope(x[None], offset=5)[0]
    out = rotate(x.clone(), 5).to(torch.float64)
    angle = 5 * 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    c, s = torch.cos(angle), torch.sin(angle)
    flipped = torch.stack([x[0::2] * c + x[1::2] * s, -x[0::2] * s + x[1::2] * c], -1).flatten()  # angle negated
    if torch.allclose(out, flipped, atol=1e-6) and not torch.allclose(out, right, atol=1e-6):
        raise AssertionError("rotated the wrong way: compare the signs with Eq. (eq-rope-rotation)")
    if not torch.allclose(out, right, atol=1e-6):
        raise AssertionError("not the book's RoPE: compare the pairs and the angles with Eq. (eq-rope-rotation)")
    print("correct")


#: Exercise 3: the chapter's trained next-token models, evaluated at n = 512.
EX3_LENGTH = 512
#: test sequences per model at n = 512 (16 x 511 predictions; the table uses 32 per length)
EX3_BATCH = 16
EX3_ENCODINGS = ("sinusoidal", "none")


def check_sinusoidal_vs_none_at_512(
    acc_512: Mapping[str, Sequence[float]], verdict: str, table_at_256: Mapping[str, Sequence[float]]
) -> None:
    """Exercise 3: both encodings' accuracies at n = 512 over at least 5 seeds, and the verdict their paired difference supports.

    ``acc_512`` maps ``"sinusoidal"`` and ``"none"`` to accuracies per seed, in the same
    seed order; ``verdict`` is ``"sinusoidal"``, ``"none"`` (the more accurate one) or
    ``"not resolved"``. ``table_at_256`` holds the chapter's accuracies at n = 256 (the
    table's last column): rows that repeat them were not evaluated at n = 512 and fail, and
    so does a row with the same value for every seed (one seed's model repeated).
    Raises ``AssertionError`` with a hint that names neither a value nor the verdict.
    """
    check_results_and_verdict(
        acc_512,
        *EX3_ENCODINGS,
        verdict,
        not_from=table_at_256,
        not_from_hint="these are the table's accuracies at n = 256; evaluate at n = 512",
        varies=True,
    )
    print("correct: the verdict follows from your paired difference")


def hidden_check_half_distance_4(distances: Sequence[float]) -> None:
    """Hidden test of Exercise 1: the distances to a relative 1e-9, from the exact slopes 2^(-2), ..., 2^(-8).

    Raises ``AssertionError``.
    """
    got = [float(x) for x in distances]
    want = [math.log(2.0) * 4.0 ** (j + 1) for j in range(4)]
    if len(got) != 4 or not all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(got, want)):
        raise AssertionError("the distances are not exact: compute them from the exact slopes, unrounded")


def hidden_check_rotate(rotate: Callable[[Tensor, int], Tensor]) -> None:
    """Hidden test of Exercise 2: other sizes (d = 4, 16) and positions (0, 1, 300). Raises ``AssertionError``."""
    for d, t in ((4, 0), (16, 1), (16, 300), (4, 7)):
        x = torch.randn(d, generator=torch.Generator().manual_seed(d + t), dtype=torch.float64)
        want = apply_rope(x[None], offset=t)[0]
        out = torch.as_tensor(rotate(x.clone(), t)).to(torch.float64)
        if out.shape != want.shape or not torch.allclose(out, want, atol=1e-6):
            raise AssertionError(f"d = {d}, t = {t}: not the book's RoPE (take d from x)")


def hidden_check_sinusoidal_vs_none_at_512(
    acc_512: Mapping[str, Sequence[float]],
    trained: Mapping[tuple[str, int], torch.nn.Module],
    seeds: Sequence[int] = DEFAULT_SEEDS,
) -> None:
    """Hidden test of Exercise 3: the first and the last seed's models, evaluated again here, give both rows' values.

    ``trained`` maps ``(encoding, seed)`` to the chapter's trained models; ``seeds`` are the
    seeds of the rows, in their order. Raises ``AssertionError`` (results typed in, rounded,
    evaluated at another length or batch, or one seed's value given for every seed fail).
    """
    for encoding in EX3_ENCODINGS:
        for index in (0, -1):
            again = next_token_accuracy(trained[encoding, seeds[index]], EX3_LENGTH, batch=EX3_BATCH)
            check_rerun(acc_512[encoding], index, again, f"acc_512[{encoding!r}]")
