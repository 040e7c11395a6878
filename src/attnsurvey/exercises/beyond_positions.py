"""Self-checks for the exercises of chapter 6.2 (positions for long contexts).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..beyond.positions import alibi_slopes, apply_rope
from ..experiments.long_positions import next_token_accuracy, train_next_token


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


#: Exercise 3: the chapter's next-token experiment, trained at n = 16 for 150 steps.
EX3_TASK = {"n_train": 16, "steps": 150}


def _sinusoidal_seed0() -> torch.nn.Module:
    return train_next_token("sinusoidal", 0, n_train=EX3_TASK["n_train"], steps=EX3_TASK["steps"])


def check_sinusoidal_at_512(answer: float) -> None:
    """Exercise 3: next-token accuracy at n = 512 of the chapter's sinusoidal model, seed 0 (within 0.01)."""
    model = _sinusoidal_seed0()
    right = next_token_accuracy(model, 512)
    at_train = next_token_accuracy(model, EX3_TASK["n_train"])
    if math.isclose(float(answer), at_train, abs_tol=1e-9) and not math.isclose(float(answer), right, abs_tol=0.01):
        raise AssertionError("that is the accuracy at the training length 16; evaluate at n=512")
    if not math.isclose(float(answer), right, abs_tol=0.01):
        raise AssertionError("that is not what seed 0 gives at n=512")
    print("correct")


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


def hidden_check_sinusoidal_at_512(answer: float) -> None:
    """Hidden test of Exercise 3: the accuracy at n = 512 as measured, to 1e-6 (the visible check allows 0.01).

    Raises ``AssertionError``.
    """
    if not math.isclose(float(answer), next_token_accuracy(_sinusoidal_seed0(), 512), abs_tol=1e-6):
        raise AssertionError("give the accuracy as measured at n=512, unrounded")
