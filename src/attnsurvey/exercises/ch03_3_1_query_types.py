"""Self-checks for the exercises of chapter §3.3.1 Types of queries (``ch03_3_1_query_types``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. Reference values come from
``redundancy_penalty``, from ``torch.nn.functional`` (SDPA, layer norm), from
statistics of the reader's data, and from the paired difference over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F_
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


def _pre_norm_stack(F_ex: Tensor, weights: list) -> Tensor:
    """Two pre-norm layers, ``f + c(Normalize(f))``, with SDPA and ``F.layer_norm`` (no affine parameters)."""
    out = F_ex
    for W_q, W_k, W_v in weights:
        x = F_.layer_norm(out, out.shape[-1:])
        out = out + F_.scaled_dot_product_attention(x @ W_q.T, x @ W_k.T, x @ W_v.T)
    return out


def check_ex2(two_layers: Callable[[Tensor, list], Tensor]) -> str:
    """Ex. 2: ``two_layers(F, weights)`` stacks two pre-norm self-attention layers, ``f_new = f + c(Normalize(f))``.

    The context of each layer comes from QKV self-attention of the *normalised*
    vectors and is added to the un-normalised ones (no affine parameters).
    Compared with ``F.scaled_dot_product_attention`` and ``F.layer_norm``, and
    checked to stay permutation-equivariant. Raises ``AssertionError`` with a hint.
    """
    gen = torch.Generator().manual_seed(7)
    F_ex = 3 * torch.randn(9, 6, generator=gen) + 1  # not already normalised
    weights = [tuple(torch.randn(6, 6, generator=gen) for _ in range(3)) for _ in range(2)]
    out = torch.as_tensor(run_answer(two_layers, F_ex, weights, what="n_f=9, d_f=6"))
    ref = _pre_norm_stack(F_ex, weights)
    if tuple(out.shape) != (9, 6):
        raise AssertionError(f"expected (n_f, d_f) = (9, 6), got {tuple(out.shape)}")
    diff = float((out - ref).abs().max())
    if not diff < 1e-4:
        raise AssertionError(
            f"max |yours - reference| = {diff:.3g}: in a pre-norm layer, which vectors does the attention read, "
            "and which vectors is its context added to?"
        )
    p = torch.randperm(9, generator=gen)
    if not torch.allclose(torch.as_tensor(two_layers(F_ex[p], weights)), out[p], atol=1e-4):
        raise AssertionError("the stack must be permutation-equivariant")
    return "correct, and the stack is permutation-equivariant"


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


def hidden_check_ex2(two_layers: Callable[[Tensor, list], Tensor]) -> None:
    """Hidden test of Ex. 2: other sizes (d_f = 4 with 3 tokens, one token with d_f = 8), to 1e-5.

    Raises ``AssertionError``.
    """
    gen = torch.Generator().manual_seed(71)
    for n, d in ((3, 4), (1, 8)):
        F_ex = 2 * torch.randn(n, d, generator=gen) - 1
        weights = [tuple(torch.randn(d, d, generator=gen) for _ in range(3)) for _ in range(2)]
        ref = _pre_norm_stack(F_ex, weights)
        out = torch.as_tensor(run_answer(two_layers, F_ex, weights, what=f"n_f={n}, d_f={d}"))
        if out.shape != ref.shape or not torch.allclose(out, ref, atol=1e-5):
            raise AssertionError(f"n_f={n}, d_f={d}: the stack differs from two pre-norm layers")


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
