"""Self-checks for the exercises of chapter §3.2.1 Attention scoring (``ch03_2_1_attention_scoring``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. Reference values are
computed inside the checks (simulation, per-pair loops, the paired difference),
so a constant or a mis-specified answer fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ._answers import run_answer
from ._verdict import check_rerun, check_results_and_verdict

_VARIANCE_CASES = ((8, 0.5), (64, 2.0), (256, 1.5))


def check_ex1(var_fn: Callable[[int, float], float], scale_fn: Callable[[int, float], float]) -> str:
    """Ex. 1: ``var_fn(d_k, sigma)`` is Var(q^T k) and ``scale_fn(d_k, sigma)`` the divisor that makes it 1.

    The entries of q and k are i.i.d. with mean 0 and standard deviation sigma.
    The check simulates 20 000 pairs for three (d_k, sigma) and accepts 10 % error.
    """
    gen = torch.Generator().manual_seed(5)
    for d, s in _VARIANCE_CASES:
        q, k = s * torch.randn(20_000, d, generator=gen), s * torch.randn(20_000, d, generator=gen)
        dots = (q * k).sum(-1)
        got_var = float(var_fn(d, s))
        if not got_var > 0:
            raise AssertionError(f"d_k={d}, sigma={s}: a variance must be positive, got {got_var}")
        ratio = float(dots.var()) / got_var
        if not abs(ratio - 1) < 0.1:
            raise AssertionError(
                f"d_k={d}, sigma={s}: your variance does not match the simulation "
                "(work out the mean and the variance of one product q_i k_i first)"
            )
        scaled_var = float((dots / float(scale_fn(d, s))).var())
        if not abs(scaled_var - 1) < 0.1:
            raise AssertionError(
                f"d_k={d}, sigma={s}: dividing by your scale does not leave variance 1 "
                "(dividing a quantity by a constant divides its variance by the square of that constant)"
            )
    return "correct: both functions match the simulation"


def check_ex2(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> str:
    """Ex. 2: ``fn(Q, K, W)`` is the general score k_l^T W q scaled to unit variance, for all pairs.

    For q and k with independent zero-mean unit-variance entries and a fixed W,
    Var(k^T W q) = ||W||_F^2, so the score is divided by the Frobenius norm of W
    (sqrt(d_k) when W = I). Q: (n_q, d_q), K: (n_f, d_k), W: (d_k, d_q); returns
    (n_q, n_f). Compared with a per-pair loop for two random W, so that a
    divisor from the sizes alone fails. Raises ``AssertionError`` with a hint.
    """
    gen = torch.Generator().manual_seed(7)
    for d_q, d_k in ((5, 6), (3, 16)):
        Qx, Kx = torch.randn(3, d_q, generator=gen), torch.randn(4, d_k, generator=gen)
        Wx = torch.randn(d_k, d_q, generator=gen)
        try:
            e = torch.as_tensor(fn(Qx, Kx, Wx))
        except (RuntimeError, ValueError, TypeError) as err:
            raise AssertionError(
                f"your function failed for Q {tuple(Qx.shape)}, K {tuple(Kx.shape)}, W {tuple(Wx.shape)} "
                f"({type(err).__name__}: {err}); W maps a query (d_q) to the key space (d_k), "
                "so check the order of the factors and which of them is transposed"
            ) from err
        if tuple(e.shape) != (3, 4):
            raise AssertionError(f"expected shape (n_q, n_f) = (3, 4), got {tuple(e.shape)}")
        norm = math.sqrt(float((Wx * Wx).sum()))
        for j in range(3):
            for l in range(4):
                want = float(Kx[l] @ Wx @ Qx[j]) / norm
                if not math.isclose(float(e[j, l]), want, rel_tol=1e-4, abs_tol=1e-5):
                    raise AssertionError(
                        f"d_q={d_q}, d_k={d_k}, pair (j={j}, l={l}): your score {float(e[j, l]):.5g} is not "
                        "k_l^T W q at unit variance (write Var(k^T W q) as a double sum over the entries of W)"
                    )
    return "correct: the general score, scaled to unit variance"


def _estimated_noise(x_q: Tensor, F: Tensor, d_key: int = 8) -> float:
    """Root mean squared distance from each query to its nearest key, per key dimension."""
    keys = F[..., :d_key]
    d2 = ((keys - x_q.unsqueeze(-2)) ** 2).sum(-1).min(-1).values
    return math.sqrt(float(d2.mean()) / d_key)


def check_ex3(
    harder_task: Callable[[int, torch.Generator], tuple[Tensor, Tensor, Tensor]],
    results: Mapping[str, Sequence[float]],
    verdict: str,
    first_run: Mapping[str, Sequence[float]],
) -> str:
    """Ex. 3: the harder key look-up (16 items, query noise 0.8), both scores over 5 seeds, and the verdict.

    ``harder_task(n, generator)`` must return ``key_lookup`` data with 16 stored
    items and noise 0.8 (checked from the data: the number of items and the
    distance from each query to its nearest key). ``results`` maps
    ``"scaled-multiplicative"`` and ``"additive"`` to test accuracies over the
    same seeds; ``verdict`` is the better score's name or ``"not resolved"``,
    as the paired difference decides. ``first_run`` is the chapter's experiment
    on the default task (``{score name: accuracies}``): rows of ``results`` that
    repeat it come from the wrong task and fail.
    """
    x_q, F, y = harder_task(4000, torch.Generator().manual_seed(11))
    if not (F.dim() == 3 and F.shape[1] == 16):
        raise AssertionError(f"the harder task stores 16 items; F has shape {tuple(F.shape)}")
    noise = _estimated_noise(x_q, F)
    if not abs(noise - 0.8) < 0.1:
        raise AssertionError(f"the queries sit about {noise:.2f} from their keys per dimension; use noise=0.8")
    check_results_and_verdict(
        results,
        "scaled-multiplicative",
        "additive",
        verdict,
        not_from=first_run,
        not_from_hint="these accuracies come from the default task; train with task=harder_task",
    )
    return "correct: the verdict follows from your paired difference"


def hidden_check_ex1(var_fn: Callable[[int, float], float], scale_fn: Callable[[int, float], float]) -> None:
    """Hidden test of Ex. 1: both functions against the exact moments, to a relative 1e-9, at other (d_k, sigma).

    The exact variance is the sum of d_k products' variances E[q_i^2] E[k_i^2]
    (computed here term by term). Raises ``AssertionError``.
    """
    for d, s in ((1, 0.3), (3, 3.0), (50, 0.9)):
        exact = sum(s**2 * s**2 for _ in range(d))
        if not math.isclose(float(var_fn(d, s)), exact, rel_tol=1e-9):
            raise AssertionError(f"d_k={d}, sigma={s}: the variance is not exact (the simulation allows 10 %)")
        if not math.isclose(float(scale_fn(d, s)) ** 2, exact, rel_tol=1e-9):
            raise AssertionError(f"d_k={d}, sigma={s}: the scale is not exactly the standard deviation")


def hidden_check_ex2(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 2: other shapes (one query; d_q = 1; d_k = 2) in float64, to 1e-10, and W = 2I.

    Raises ``AssertionError``.
    """
    gen = torch.Generator().manual_seed(17)
    shapes = ((1, 3, 4, 2, None), (2, 1, 1, 9, None), (2, 3, 4, 4, 2.0))
    for n_q, n_f, d_q, d_k, eye in shapes:
        Qx, Kx = (
            torch.randn(n_q, d_q, generator=gen, dtype=torch.float64),
            torch.randn(n_f, d_k, generator=gen, dtype=torch.float64),
        )
        if eye is None:
            Wx = torch.randn(d_k, d_q, generator=gen, dtype=torch.float64)
        else:  # a multiple of the identity: the scale is eye * sqrt(d_k), not sqrt(d_k)
            Wx = eye * torch.eye(d_k, dtype=torch.float64)
        norm = math.sqrt(float((Wx * Wx).sum()))
        want = torch.tensor(
            [[float(Kx[l] @ Wx @ Qx[j]) / norm for l in range(n_f)] for j in range(n_q)], dtype=torch.float64
        )
        e = torch.as_tensor(
            run_answer(fn, Qx, Kx, Wx, what=f"n_q={n_q}, n_f={n_f}, d_q={d_q}, d_k={d_k}"), dtype=torch.float64
        )
        if e.shape != want.shape or not torch.allclose(e, want, rtol=1e-10, atol=1e-10):
            raise AssertionError(
                f"n_q={n_q}, n_f={n_f}, d_q={d_q}, d_k={d_k}: the scores are not k_l^T W q at unit variance"
            )


def hidden_check_ex3(
    results: Mapping[str, Sequence[float]],
    train_scores: Callable[..., Mapping[str, tuple[object, float]]],
    harder_task: Callable[..., tuple[Tensor, Tensor, Tensor]],
    seeds: Sequence[int],
    steps: int = 320,
) -> None:
    """Hidden test of Ex. 3: the first seed trained again on ``harder_task`` for ``steps`` gives the first value of both rows.

    ``train_scores(seed, names, task=..., steps=...)`` is the chapter's training
    function, returning ``{name: (model, accuracy)}``; results after another
    number of steps (the 80 of the first table) fail. Raises ``AssertionError``.
    """
    names = ("scaled-multiplicative", "additive")
    again = train_scores(seeds[0], names, task=harder_task, steps=steps)
    for name in names:
        check_rerun(results[name], 0, float(again[name][1]), f"results[{name!r}]")
