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


def _close_to(got: Tensor, want: Tensor, tol: float, what: str, hint: str) -> None:
    """Raise ``AssertionError`` unless ``got`` has ``want``'s shape and lies within ``tol`` of it (``want`` not shown)."""
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"expected one {what} per example, shape {tuple(want.shape)}, got {tuple(got.shape)}")
    diff = float((got - want).abs().max())
    if not diff < tol:
        raise AssertionError(f"max |yours - reference| = {diff:.3g}: {hint}")


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
    _close_to(
        got,
        u_final,
        1e-4,
        "query",
        "write u^(2), u^(3) and u^(4) out from the update rule by hand and compare them with your formula "
        "before generalising",
    )
    return "correct: your unrolled query matches memory_network_read"


def _gated(q: Tensor, c: Tensor) -> Tensor:
    """The gated transform of Ex. 2 for rows: ``(1 - g) q + g c`` with ``g = sigmoid(q . c / sqrt(d))``, one g per row."""
    g = torch.sigmoid((q * c).sum(-1, keepdim=True) / q.shape[-1] ** 0.5)
    return (1 - g) * q + g * c


def _gated_loop(q0: Tensor, K: Tensor, V: Tensor, score: Callable[[Tensor, Tensor], Tensor], n_hops: int) -> Tensor:
    """Eq. (41)-(42) with the gated transform, written out hop by hop (c^(0) = mean of the values)."""
    q, c = q0, V.mean(-2)
    for _ in range(n_hops):
        q = _gated(q, c)
        a = torch.softmax(score(torch.cat([q, c], -1).unsqueeze(-2), K).squeeze(-2), -1)
        c = (a.unsqueeze(-2) @ V).squeeze(-2)
    return c


def _dot(Q: Tensor, K_: Tensor) -> Tensor:
    return Q @ K_.transpose(-1, -2)


def check_ex2(gated_hops: Callable[..., Tensor]) -> str:
    """Ex. 2: ``gated_hops(q0, K, V, score, n_hops)`` runs Eq. (41)-(42) with a gated transform, for a batch.

    transform(q, c) = (1 - g) q + g c with the scalar gate g = sigmoid(q^T c / sqrt(d))
    of each example (d = d_q = d_v). Returns the last context; compared with an
    explicit loop (c^(0) = mean of the values) on a batch of two examples.
    Raises ``AssertionError`` with a hint on a wrong answer.
    """
    gen = torch.Generator().manual_seed(6)
    q0, K, V = (
        torch.randn(2, 3, generator=gen),
        torch.randn(2, 5, 6, generator=gen),  # d_k = d_q + d_v: the score sees [q; c]
        torch.randn(2, 5, 3, generator=gen),
    )
    for n_hops in (1, 3):
        want = _gated_loop(q0, K, V, _dot, n_hops)
        got = torch.as_tensor(run_answer(gated_hops, q0, K, V, _dot, n_hops, what=f"{n_hops} hop(s), batch of 2"))
        _close_to(
            got,
            want,
            1e-5,
            "context",
            f"{n_hops} hops (how many gates does a batch of two examples need, and which of q and c does g weight?)",
        )
    return "correct: Eq. (41)-(42) with a gated transform"


def _enrichment(a: Tensor, polarity: Tensor) -> Tensor:
    """Reference for Ex. 3, by loops: per capsule, mean over reviews with a polar word of mass / share."""
    B, d_y, n = a.shape
    out = []
    for c in range(d_y):
        ratios = []
        for b in range(B):
            polar = [l for l in range(n) if int(polarity[b, l]) >= 0]
            if polar:
                ratios.append(sum(float(a[b, c, l]) for l in polar) / (len(polar) / n))
        out.append(sum(ratios) / len(ratios))
    return torch.tensor(out, dtype=torch.float64)


def check_ex3(polar_enrichment: Callable[[Tensor, Tensor], Tensor]) -> str:
    """Ex. 3: ``polar_enrichment(a, polarity)``: each capsule's attention mass on polar words over the share of them.

    a: capsule weights ``(B, d_y, n)`` (rows sum to 1); polarity: ``(B, n)`` with
    -1 for neutral words and 0/1 for negative/positive ones. Returns ``(d_y,)``:
    for every capsule, the weight on polar words (either polarity) in a review
    divided by the fraction of that review's words that are polar (what uniform
    weights would put there), averaged over the reviews that have a polar word.
    Compared with loops on random weights, with the share of polar words varying
    from review to review. Raises ``AssertionError`` with a hint on a wrong answer.
    """
    gen = torch.Generator().manual_seed(9)
    a = torch.softmax(torch.randn(7, 3, 10, generator=gen) * 2, -1)
    polarity = torch.randint(-1, 2, (7, 10), generator=gen)
    polarity[0, :8] = -1  # reviews with few and with many polar words
    polarity[1, :] = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0, -1, 1])
    want = _enrichment(a, polarity)
    got = torch.as_tensor(run_answer(polar_enrichment, a, polarity, what="7 reviews, 3 capsules"), dtype=want.dtype)
    if tuple(got.shape) != (3,):
        raise AssertionError(f"expected one value per capsule, shape (3,), got {tuple(got.shape)}")
    if not torch.allclose(got, want, atol=1e-5):
        raise AssertionError(
            f"your values {[round(x, 4) for x in got.tolist()]} are not right (reread the exercise: what is "
            "divided by what, per review or over all reviews, and which reviews count?)"
        )
    return "correct: attention on polar words relative to their share, per capsule"


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


def hidden_check_ex2(gated_hops: Callable[..., Tensor]) -> None:
    """Hidden test of Ex. 2: other sizes (d = 2, d = 4) and hop counts (2 and 5), against the loop. Raises ``AssertionError``."""
    gen = torch.Generator().manual_seed(16)
    for B, n_f, d, n_hops in ((3, 4, 2, 2), (1, 6, 4, 5)):
        q0, K, V = (
            torch.randn(B, d, generator=gen),
            torch.randn(B, n_f, 2 * d, generator=gen),
            torch.randn(B, n_f, d, generator=gen),
        )
        want = _gated_loop(q0, K, V, _dot, n_hops)
        got = torch.as_tensor(run_answer(gated_hops, q0, K, V, _dot, n_hops, what=f"d={d}, {n_hops} hops"))
        if got.shape != want.shape or not torch.allclose(got, want, atol=1e-5):
            raise AssertionError(f"d={d}, {n_hops} hops: the last context differs from Eq. (41)-(42) with the gate")


def hidden_check_ex3(polar_enrichment: Callable[[Tensor, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 3: one review with four capsules, and a batch with a review without any polar word.

    Raises ``AssertionError``.
    """
    gen = torch.Generator().manual_seed(19)
    for B, d_y, n, neutral in ((1, 4, 6, False), (3, 2, 5, True)):
        a = torch.softmax(torch.randn(B, d_y, n, generator=gen), -1)
        polarity = torch.randint(-1, 2, (B, n), generator=gen)
        polarity[-1, 0] = 1  # at least one review with a polar word
        if neutral:
            polarity[0] = -1  # a review without a polar word: it does not count
        want = _enrichment(a, polarity)
        got = torch.as_tensor(
            run_answer(polar_enrichment, a, polarity, what=f"{B} review(s), {d_y} capsules"), dtype=want.dtype
        )
        if got.shape != want.shape or not torch.allclose(got, want, atol=1e-6):
            raise AssertionError(f"{B} review(s), {d_y} capsules: your values are not right")
