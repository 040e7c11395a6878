"""Self-checks for the exercises of chapter §3.3.2 Multiplicity of queries (``ch03_3_2_query_multiplicity``).

Each ``check_ex<k>`` raises ``AssertionError`` (explicitly: no bare ``assert``,
which ``python -O`` removes) with a hint on a wrong answer and returns a short
confirmation string on a right one. Reference values come from
``memory_network_read``, from the models written out hop by hop, and from sums computed
inside the checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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


def _gated_memory_loop(q0: Tensor, M: Tensor, C: Tensor, n_hops: int) -> tuple[Tensor, Tensor]:
    """The gated memory network of Ex. 2, hop by hop: ``(last read o^(S), weights (B, S, n))``.

    ``u^(1) = q0``; hop s addresses with ``p = softmax(M u)``, reads ``o = sum_i p_i c_i``
    and updates ``u <- (1 - g) u + g o`` with ``g = sigmoid(u . o / sqrt(d))``, one gate per example.
    """
    u, weights, o = q0, [], q0
    for _ in range(n_hops):
        p = torch.softmax((M * u.unsqueeze(-2)).sum(-1), -1)
        o = (p.unsqueeze(-1) * C).sum(-2)
        g = torch.sigmoid((u * o).sum(-1, keepdim=True) / u.shape[-1] ** 0.5)
        u = (1 - g) * u + g * o
        weights.append(p)
    return o, torch.stack(weights, -2)


def _run_parts(
    gated_as_eq41: Callable[[Tensor], tuple], q0: Tensor, M: Tensor, C: Tensor, n_hops: int, what: str
) -> tuple[Tensor, Tensor]:
    """``mh.multi_hop_attention`` with the reader's ``(transform, score, c0)``: ``(last context, weights)``."""
    parts = run_answer(gated_as_eq41, q0, what=what)
    if not isinstance(parts, (tuple, list)) or len(parts) != 3:
        raise AssertionError(f"{what}: return the three pieces (transform, score, c0), got {type(parts).__name__}")
    transform, score, c0 = parts
    c, _, A = run_answer(
        lambda: mh.multi_hop_attention(q0, M, C, score, n_hops, transform=transform, c0=c0),
        what=f"{what}, multi_hop_attention with your pieces",
    )
    return torch.as_tensor(c), torch.as_tensor(A)


def _gated_cases(
    seed: int, sizes: tuple[tuple[int, int, int, int], ...]
) -> Iterator[tuple[Tensor, Tensor, Tensor, int]]:
    """``(q0, M, C, n_hops)`` per ``(B, n, d, n_hops)``; memories scaled so the first weights are far from uniform."""
    gen = torch.Generator().manual_seed(seed)
    for B, n, d, n_hops in sizes:
        yield (
            torch.randn(B, d, generator=gen),
            1.5 * torch.randn(B, n, d, generator=gen),
            torch.randn(B, n, d, generator=gen),
            n_hops,
        )


def check_ex2(gated_as_eq41: Callable[[Tensor], tuple]) -> str:
    """Ex. 2: ``gated_as_eq41(q0)`` returns ``(transform, score, c0)`` that make Eq. (41)-(42) the gated memory network.

    The model: ``u^(1) = q0``, weights ``p = softmax(u^T m_i)``, read ``o = sum_i p_i c_i``,
    ``u^(s+1) = (1 - g) u^(s) + g o^(s)`` with ``g = sigmoid(u^T o / sqrt(d))`` per example.
    ``mh.multi_hop_attention(q0, M, C, score, n_hops, transform=transform, c0=c0)`` must
    give this model's weights of every hop and its last read, for 1 and 3 hops on a
    batch of two examples with ``d = 3``; compared with the model written out hop by hop.
    Raises ``AssertionError`` with a hint that names none of the three pieces.
    """
    for q0, M, C, n_hops in _gated_cases(6, ((2, 5, 3, 1), (2, 5, 3, 3))):
        what = f"{n_hops} hop(s), d=3"
        c, A = _run_parts(gated_as_eq41, q0, M, C, n_hops, what)
        o, P = _gated_memory_loop(q0, M, C, n_hops)
        A = torch.as_tensor(A)
        _close_to(A, P, float("inf"), "row of weights per hop", "")  # the shape first
        _close_to(
            A[..., 0, :],
            P[..., 0, :],
            1e-5,
            "row of weights",
            f"{what}: the weights of hop 1 differ from the gated memory network's (with which query does "
            "Eq. (41) attend at hop 1, and with which the model? Write q^(1) out with your pieces)",
        )
        _close_to(
            A,
            P,
            1e-5,
            "row of weights per hop",
            f"{what}: hop 1 is right, a later hop is not (compare your transform with the model's update of u, and "
            "the part of the query your score reads with the vector the model addresses with)",
        )
        _close_to(torch.as_tensor(c), o, 1e-5, "context", f"{what}: the last context is not the model's last read")
    return "correct: the gated memory network is an instance of Eq. (41)-(42)"


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


def hidden_check_ex2(gated_as_eq41: Callable[[Tensor], tuple]) -> None:
    """Hidden test of Ex. 2: other sizes (d = 2 with 2 hops, d = 6 with 5 hops), weights of every hop to 1e-5.

    Raises ``AssertionError``.
    """
    for q0, M, C, n_hops in _gated_cases(16, ((3, 4, 2, 2), (1, 7, 6, 5))):
        what = f"d={q0.shape[-1]}, {n_hops} hops"
        c, A = _run_parts(gated_as_eq41, q0, M, C, n_hops, what)
        o, P = _gated_memory_loop(q0, M, C, n_hops)
        A, c = torch.as_tensor(A), torch.as_tensor(c)
        if A.shape != P.shape or not torch.allclose(A, P, atol=1e-5) or not torch.allclose(c, o, atol=1e-5):
            raise AssertionError(f"{what}: Eq. (41)-(42) with your pieces is not the gated memory network")


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
