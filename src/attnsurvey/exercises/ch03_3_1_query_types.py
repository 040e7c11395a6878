"""Self-checks for the exercises of chapter §3.3.1 Types of queries (``ch03_3_1_query_types``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. Reference values come from
``redundancy_penalty``, from the chapter's layers run on a whole sequence, from
statistics of the reader's data, and from the paired difference over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ..query_related import types as qt
from ._answers import run_answer
from ._verdict import check_rerun, check_results_and_verdict


def check_ex1(penalty_uniform: Callable[[int, int], float]) -> str:
    """Ex. 1: ``penalty_uniform(r, n)`` is the redundancy penalty of r uniform rows over n tokens.

    Compared with ``qt.redundancy_penalty`` on uniform matrices for several (r, n),
    to a relative 1e-6 (a value computed in float32 is right).
    """
    for r in (1, 2, 3, 5):
        for n in (1, 2, 4, 9):
            expected = float(qt.redundancy_penalty(torch.full((r, n), 1.0 / n, dtype=torch.float64)))
            got = float(penalty_uniform(r, n))
            if not math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9):
                raise AssertionError(
                    f"r={r}, n={n}: your penalty {got:.10g} is not right "
                    "(work out A A^T - I by hand for r = n = 2 and compare your formula with it before generalising)"
                )
    return "correct: your formula matches redundancy_penalty"


def _identical_reference(f: Tensor, W_Vs: Sequence[Tensor], n_f: int, gen: torch.Generator) -> Tensor:
    """``n_f`` copies of ``f`` through QKV self-attention and Eq. (37) (no affine), one layer per ``W_V``.

    Every layer draws its own random ``W_Q``, ``W_K``; the layers run on the whole
    sequence with ``qt.self_attention`` and ``qt.update_residual_norm``. Returns
    the ``(n_f, d_f)`` result, whose rows all equal one vector.
    """
    F_ex = f.expand(n_f, -1).clone()
    for W_V in W_Vs:
        d = W_V.shape[0]
        W_Q, W_K = (2 * torch.randn(d, d, generator=gen, dtype=f.dtype) for _ in range(2))
        F_ex = qt.update_residual_norm(F_ex, qt.self_attention(F_ex, W_Q, W_K, W_V)[0])
    return F_ex


def _identical_cases(seed: int, cases: Sequence[tuple[int, int, int]]) -> list[tuple[Tensor, list[Tensor], Tensor]]:
    """``(f, W_Vs, reference row)`` for each ``(d_f, n_layers, n_f)``, reference checked to keep identical rows."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for d, layers, n_f in cases:
        f = 3 * torch.randn(d, generator=gen, dtype=torch.float64) + 1  # not normalised
        W_Vs = [torch.randn(d, d, generator=gen, dtype=torch.float64) for _ in range(layers)]
        ref = _identical_reference(f, W_Vs, n_f, gen)
        if not torch.allclose(ref, ref[:1].expand_as(ref), atol=1e-9):  # the premise of the exercise
            raise RuntimeError("the reference stack did not keep its rows identical")
        out.append((f, W_Vs, ref[0]))
    return out


def _identical_answer(identical_stack: Callable[[Tensor, list], Tensor], f: Tensor, W_Vs: list, what: str) -> Tensor:
    got = torch.as_tensor(run_answer(identical_stack, f, W_Vs, what=what))
    if tuple(got.shape) != tuple(f.shape):
        raise AssertionError(
            f"{what}: return the one vector every position holds, shape {tuple(f.shape)}, got {tuple(got.shape)}"
        )
    return got.to(f.dtype)


def check_ex2(identical_stack: Callable[[Tensor, list], Tensor]) -> str:
    """Ex. 2: ``identical_stack(f, W_Vs)``: the vector every position holds after Eq. (35) + Eq. (37) layers on copies of ``f``.

    f: ``(d_f,)``; W_Vs: one value matrix ``(d_f, d_f)`` per layer; no affine
    parameters. Compared, to 1e-5, with the layers run on sequences of 2 and 6
    copies of ``f`` with random query and key matrices (``qt.self_attention``,
    ``qt.update_residual_norm``). Raises ``AssertionError`` with a hint that
    names neither the weights nor the context.
    """
    for k, (f, W_Vs, want) in enumerate(_identical_cases(7, ((5, 1, 2), (5, 3, 6)))):
        what = f"d_f=5, {len(W_Vs)} layer(s)"
        got = _identical_answer(identical_stack, f, W_Vs, what)
        if not bool(torch.isfinite(got).all()):
            raise AssertionError(f"{what}: your vector is not finite")
        diff = float((got - want).abs().max())
        if diff < 1e-5:
            continue
        if k == 0:
            raise AssertionError(
                f"{what}: max |yours - the layer| = {diff:.3g}. Write out the scores of one query when every key is "
                "the same vector, then the context; then apply Eq. (37) to that position"
            )
        raise AssertionError(
            f"{what}: one layer is right, the stack is not (max |yours - the layers| = {diff:.3g}): what does the "
            "second layer receive?"
        )
    return "correct: copies of one vector stay copies, layer after layer"


def check_ex3(
    noisy_data: Callable[[int, torch.Generator], tuple[Tensor, Tensor, Tensor]],
    results: Mapping[str, Sequence[float]],
    verdict: str,
    default_run: Mapping[str, Sequence[float]] | None = None,
) -> str:
    """Ex. 3: the louder data (noise 0.4), both models over five seeds, and the verdict.

    ``noisy_data(n, generator)`` must return ``keyword_features`` data with 12
    tokens, 4 classes and noise 0.4 (checked from the spread of the is-key entry
    of the distractors). ``results`` maps ``"learned query"`` and
    ``"mean pooling"`` to test accuracies per seed; ``verdict`` is one of the
    two names or ``"not resolved"``. ``default_run`` is the chapter's run on the
    default data (``{name: accuracies}``): rows of ``results`` that repeat it
    were not trained on the noisy data and fail. The check trains nothing: it
    checks the data function and that ``verdict`` follows from the numbers given.
    """
    F, y, key = noisy_data(2000, torch.Generator().manual_seed(13))
    if tuple(F.shape[1:]) != (12, 5):
        raise AssertionError(f"expected sequences of 12 tokens with d_f = 5, got {tuple(F.shape[1:])}")
    distractor = torch.ones(F.shape[:2], dtype=torch.bool)
    distractor[torch.arange(len(key)), key] = False
    noise = float(F[..., -1][distractor].std())
    if not abs(noise - 0.4) < 0.05:
        raise AssertionError(f"the distractors' is-key entry has spread {noise:.2f}; use noise=0.4")
    check_results_and_verdict(
        results,
        "learned query",
        "mean pooling",
        verdict,
        not_from=default_run,
        not_from_hint="these accuracies come from the default data; train with make_data=noisy_data",
    )
    return "correct: the verdict follows from your paired difference"


def hidden_check_ex1(penalty_uniform: Callable[[int, int], float]) -> None:
    """Hidden test of Ex. 1: other sizes (r up to 12, n up to 50) against exact fractions, to a relative 1e-9.

    Raises ``AssertionError``.
    """
    from fractions import Fraction

    for r, n in ((12, 50), (7, 3), (4, 4)):
        entry = Fraction(1, n)  # every entry of A A^T
        exact = r * (entry - 1) ** 2 + (r * r - r) * entry**2
        if not math.isclose(float(penalty_uniform(r, n)), float(exact), rel_tol=1e-9):
            raise AssertionError(f"r={r}, n={n}: your penalty is not right")


def hidden_check_ex2(identical_stack: Callable[[Tensor, list], Tensor]) -> None:
    """Hidden test of Ex. 2: other sizes (d_f = 3 with one token and four layers, d_f = 8 with 11 tokens), to 1e-5.

    Raises ``AssertionError``.
    """
    for f, W_Vs, want in _identical_cases(71, ((3, 4, 1), (8, 2, 11))):
        what = f"d_f={f.shape[0]}, {len(W_Vs)} layers"
        got = _identical_answer(identical_stack, f, W_Vs, what)
        if not bool((got - want).abs().max() < 1e-5):
            raise AssertionError(f"{what}: your vector differs from the layers run on copies of f")


def hidden_check_ex3(
    results: Mapping[str, Sequence[float]],
    run: Callable[..., Mapping[str, float]],
    seeds: Sequence[int],
    noisy_data: Callable[..., tuple[Tensor, Tensor, Tensor]],
) -> None:
    """Hidden test of Ex. 3: the first seed trained again on ``noisy_data`` gives the first value of both rows.

    ``run(seed, make_data=...)`` is the chapter's training function, returning
    ``{name: accuracy}``. Raises ``AssertionError``.
    """
    again = run(seeds[0], make_data=noisy_data)
    for name in ("learned query", "mean pooling"):
        check_rerun(results[name], 0, float(again[name]), f"results[{name!r}]")
