"""Self-checks for the exercises of chapter §3.3.2 Multiplicity of queries (``ch03_3_2_query_multiplicity``).

Each ``check_ex<k>`` raises ``AssertionError`` (explicitly: no bare ``assert``,
which ``python -O`` removes) with a hint on a wrong answer and returns a short
confirmation string on a right one. Reference values come from
``memory_network_read``, from explicit loops over hops, and from sums computed
inside the checks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..query_related import multihop as mh
from ._answers import run_answer


def _reads(u1: Tensor, Ms: list[Tensor], Cs: list[Tensor], H: Tensor) -> tuple[Tensor, list[Tensor]]:
    """``u^(S+1)`` of ``memory_network_read`` with the query map H, and the reads o^(1..S) of its hops."""
    u_final, P = mh.memory_network_read(u1, Ms, Cs, H=H)
    return u_final, [(P[:, k].unsqueeze(-2) @ Cs[k]).squeeze(-2) for k in range(len(Cs))]


def check_ex1(unrolled: Callable[[Tensor, list, Tensor], Tensor]) -> str:
    """Ex. 1: ``unrolled(u1, reads, H)`` is the memory-network query after all hops with ``u^(s+1) = H u^(s) + o^(s)``.

    u1: ``(B, d)`` rows; reads: the S reads ``o^(1..S)``, each ``(B, d)``; H: ``(d, d)``,
    applied to a row as ``u @ H.T``. Compared with ``mh.memory_network_read(..., H=H)``
    for three hops. Raises ``AssertionError`` with a hint on a wrong answer.
    """
    gen = torch.Generator().manual_seed(5)
    u1 = torch.randn(3, 4, generator=gen)
    Ms = [torch.randn(3, 6, 4, generator=gen) for _ in range(3)]
    Cs = [torch.randn(3, 6, 4, generator=gen) for _ in range(3)]
    H = torch.randn(4, 4, generator=gen) / 2
    u_final, reads = _reads(u1, Ms, Cs, H)
    got = torch.as_tensor(run_answer(unrolled, u1, reads, H, what="three hops"))
    if tuple(got.shape) != tuple(u_final.shape):
        raise AssertionError(f"expected one query per example, shape {tuple(u_final.shape)}, got {tuple(got.shape)}")
    diff = float((got - u_final).abs().max())
    if not diff < 1e-4:
        raise AssertionError(
            f"max |yours - memory_network_read| = {diff:.3g}: write u^(2), u^(3) and u^(4) out from the update "
            "rule by hand and compare them with your formula before generalising"
        )
    return "correct: your unrolled query matches memory_network_read"


def check_ex2(averaging_hops: Callable[..., Tensor]) -> str:
    """Ex. 2: ``averaging_hops(q0, K, V, score, n_hops)`` runs Eq. (41)-(42) with transform(q, c) = (q + c) / 2.

    Returns the last context; compared with an explicit loop (c^(0) = mean of the values).
    """
    gen = torch.Generator().manual_seed(6)
    q0, K, V = (
        torch.randn(2, 3, generator=gen),
        torch.randn(2, 5, 6, generator=gen),
        torch.randn(2, 5, 3, generator=gen),
    )

    def score(Q: Tensor, K_: Tensor) -> Tensor:  # (d_q + d_v = 6 = d_k)
        return Q @ K_.transpose(-1, -2)

    for n_hops in (1, 3):
        q, c = q0, V.mean(-2)
        for _ in range(n_hops):
            q = (q + c) / 2
            a = torch.softmax(score(torch.cat([q, c], -1).unsqueeze(-2), K).squeeze(-2), -1)
            c = (a.unsqueeze(-2) @ V).squeeze(-2)
        got = averaging_hops(q0, K, V, score, n_hops)
        diff = float((got - c).abs().max())
        if not diff < 1e-5:
            raise AssertionError(
                f"{n_hops} hops: max |yours - loop| = {diff:.3g} (read Eq. (41)-(42) again: which comes first in "
                "a hop, and which vector does the score see?)"
            )
    return "correct: Eq. (41)-(42) with an averaging transform"


def check_ex3(polar_mass: Callable[[Tensor, Tensor], Tensor]) -> str:
    """Ex. 3: ``polar_mass(a, polarity)`` is each capsule's mean attention mass on polar words.

    a: capsule weights ``(B, d_y, n)`` (rows sum to 1); polarity: ``(B, n)`` with
    -1 for neutral words and 0/1 for negative/positive ones. Returns ``(d_y,)``:
    for every capsule, the weight on polar words summed over the words of a
    review and averaged over reviews. Compared with a loop on random weights.
    """
    gen = torch.Generator().manual_seed(9)
    a = torch.softmax(torch.randn(7, 3, 10, generator=gen) * 2, -1)
    polarity = torch.randint(-1, 2, (7, 10), generator=gen)
    want = torch.tensor([sum(float(a[b, c][polarity[b] >= 0].sum()) for b in range(7)) / 7 for c in range(3)])
    got = torch.as_tensor(polar_mass(a, polarity), dtype=want.dtype)
    if tuple(got.shape) != (3,):
        raise AssertionError(f"expected one value per capsule, shape (3,), got {tuple(got.shape)}")
    if not torch.allclose(got, want, atol=1e-5):
        raise AssertionError(
            f"your masses {[round(x, 4) for x in got.tolist()]} are not right (reread the exercise: over which "
            "words is the mass summed, and over what is it averaged?)"
        )
    return "correct: mean attention mass on polar words per capsule"


def hidden_check_ex1(unrolled: Callable[[Tensor, list, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 1: one hop and five hops, against ``memory_network_read``. Raises ``AssertionError``."""
    gen = torch.Generator().manual_seed(15)
    for hops in (1, 5):
        u1 = torch.randn(2, 3, generator=gen)
        Ms = [torch.randn(2, 4, 3, generator=gen) for _ in range(hops)]
        Cs = [torch.randn(2, 4, 3, generator=gen) for _ in range(hops)]
        H = torch.randn(3, 3, generator=gen) / 2
        u_final, reads = _reads(u1, Ms, Cs, H)
        got = torch.as_tensor(run_answer(unrolled, u1, reads, H, what=f"{hops} hop(s)"))
        if got.shape != u_final.shape or not torch.allclose(got, u_final, atol=1e-4):
            raise AssertionError(f"{hops} hop(s): your query differs from memory_network_read (use every read)")


def hidden_check_ex2(averaging_hops: Callable[..., Tensor]) -> None:
    """Hidden test of Ex. 2: other sizes and hop counts (2 and 5 hops), against an explicit loop. Raises ``AssertionError``."""
    gen = torch.Generator().manual_seed(16)
    q0, K, V = (
        torch.randn(3, 2, generator=gen),
        torch.randn(3, 4, 4, generator=gen),
        torch.randn(3, 4, 2, generator=gen),
    )

    def score(Q: Tensor, K_: Tensor) -> Tensor:
        return Q @ K_.transpose(-1, -2)

    for n_hops in (2, 5):
        q, c = q0, V.mean(-2)
        for _ in range(n_hops):
            q = (q + c) / 2
            a = torch.softmax(score(torch.cat([q, c], -1).unsqueeze(-2), K).squeeze(-2), -1)
            c = (a.unsqueeze(-2) @ V).squeeze(-2)
        got = torch.as_tensor(averaging_hops(q0, K, V, score, n_hops))
        if got.shape != c.shape or not torch.allclose(got, c, atol=1e-5):
            raise AssertionError(
                f"{n_hops} hops: the last context differs from Eq. (41)-(42) with the averaging transform"
            )


def hidden_check_ex3(polar_mass: Callable[[Tensor, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 3: one review with four capsules, and a batch with a review without any polar word.

    Raises ``AssertionError``.
    """
    gen = torch.Generator().manual_seed(19)
    for B, d_y, n, neutral in ((1, 4, 6, False), (3, 2, 5, True)):
        a = torch.softmax(torch.randn(B, d_y, n, generator=gen), -1)
        polarity = torch.randint(-1, 2, (B, n), generator=gen)
        if neutral:
            polarity[0] = -1  # a review without a polar word
        want = (a * (polarity >= 0).unsqueeze(1)).sum(-1).mean(0)
        got = torch.as_tensor(polar_mass(a, polarity), dtype=want.dtype)
        if got.shape != want.shape or not torch.allclose(got, want, atol=1e-6):
            raise AssertionError(f"{B} review(s), {d_y} capsules: your masses are not right")
