"""Self-checks for the exercises of Chapter 3.1.1 (survey §3.1.1, multiplicity of features)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..feature_related import co_attention as ca
from ..general_mechanisms.scoring import dot_score

if TYPE_CHECKING:
    from ..data.aspect import AspectData
    from ..experiments.feature_related import AspectModel
from ._answers import run_answer


def _rand(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _close(got: object, want: Tensor, what: str, hint: str = "") -> None:
    got_t = torch.as_tensor(got)
    if got_t.shape != want.shape:
        raise AssertionError(f"{what}: expected shape {tuple(want.shape)}, got {tuple(got_t.shape)}")
    if not torch.allclose(got_t.to(want.dtype), want, atol=1e-6):
        raise AssertionError(f"{what}: values differ{hint}")


def check_ex1(e1_from_eq7: Callable[[Tensor, Tensor, Tensor], Tensor]) -> str:
    """Ex. 1: ``e1_from_eq7(K1, W1, w1)`` equals Eq. (14) with a zero affinity matrix and ``act = tanh``."""
    K1, K2 = _rand(4, 3, seed=31), _rand(5, 2, seed=32)
    W1, W2, w1, w2 = _rand(6, 3, seed=33), _rand(6, 2, seed=34), _rand(6, seed=35), _rand(6, seed=36)
    e1, _ = ca.parallel_co_attention_scores(K1, K2, torch.zeros(4, 5), W1, W2, w1, w2)
    _close(
        e1_from_eq7(K1, W1, w1),
        e1,
        "Eq. (14) with A = 0",
        " (the check uses act = tanh, as the chapter's code does, and no bias; keys are rows of K1)",
    )
    return "correct: your function is Eq. (14) with a zero affinity matrix, the query-less score of Eq. (7)"


def check_ex2(mean_pooled_scores: Callable[[Tensor], tuple[Tensor, Tensor]]) -> str:
    """Ex. 2: ``mean_pooled_scores(A)`` returns (row means, column means) of the affinity matrix."""
    Q, K = _rand(3, 4, seed=41), _rand(6, 4, seed=42)
    A = dot_score(Q, K)
    e_q, e_k = mean_pooled_scores(A)
    ref = ca.bidirectional_attention(Q, K, dot_score, granularity="fine", pool="mean")
    _close(torch.softmax(torch.as_tensor(e_q), -1), ref.a_q, "Q2K weights (softmax of the row means)")
    _close(torch.softmax(torch.as_tensor(e_k), -1), ref.a_k, "K2Q weights (softmax of the column means)")
    return "correct: mean pooling of the affinity matrix gives the review's fine-grained attention"


def check_ex3(
    model_rotatory: AspectModel,
    model_target_only: AspectModel,
    data: AspectData,
    acc_rotatory: float,
    acc_target_only: float,
) -> str:
    """Ex. 3: two trained aspect models evaluated on a test set where most contexts are empty.

    The check measures the share of sentences with an empty context in ``data``
    (at least 0.8), re-evaluates both models on it and compares with your numbers.
    """
    from ..experiments.feature_related import evaluate_aspect

    if getattr(model_rotatory, "kind", None) != "rotatory" or getattr(model_target_only, "kind", None) != "target-only":
        raise AssertionError("pass the rotatory model first and the target-only model second")
    empty = (~data.mask_l.any(-1) | ~data.mask_r.any(-1)).float().mean().item()
    if empty < 0.8:
        raise AssertionError(
            f"only {empty:.0%} of these sentences have an empty context: use make_aspect(..., p_empty=0.9)"
        )
    with torch.no_grad():
        measured = [evaluate_aspect(m, data)["accuracy"] for m in (model_rotatory, model_target_only)]
    for name, given, got in zip(("rotatory", "target-only"), (acc_rotatory, acc_target_only), measured):
        if not math.isclose(float(given), got, abs_tol=1e-6):
            raise AssertionError(f"your {name} accuracy is not what the model scores on this set: evaluate it on data")
    return "correct: both accuracies are what the models score on your mostly empty test set"


def hidden_check_ex1(e1_from_eq7: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 1: a batch of key sets ``K1 (2, 5, 3)`` in float64, to 1e-10.

    Eq. (7) scores every key of every set, so the function must work on the last
    two axes; one that transposes the whole tensor fails. Raises ``AssertionError``.
    """
    K1 = _rand(2, 5, 3, seed=131).double()
    W1, w1 = _rand(4, 3, seed=133).double(), _rand(4, seed=135).double()
    want = torch.stack([torch.tanh(K1[b] @ W1.T) @ w1 for b in range(2)])
    got = torch.as_tensor(
        run_answer(e1_from_eq7, K1, W1, w1, what="a batch of key sets K1 (2, 5, 3): work on the last two axes")
    )
    if got.shape != want.shape or not torch.allclose(got.double(), want, atol=1e-10):
        raise AssertionError("a batch of key sets K1 (2, 5, 3): each set's scores must come from that set's keys")


def hidden_check_ex2(mean_pooled_scores: Callable[[Tensor], tuple[Tensor, Tensor]]) -> None:
    """Hidden test of Ex. 2: a batch of affinity matrices ``(2, 3, 5)``; the means run over the last two axes.

    Raises ``AssertionError``.
    """
    Q, K = _rand(2, 3, 4, seed=141), _rand(2, 5, 4, seed=142)
    A = dot_score(Q, K)
    e_q, e_k = run_answer(mean_pooled_scores, A, what="a batch of affinity matrices (2, 3, 5)")
    for b in range(2):
        ref = ca.bidirectional_attention(Q[b], K[b], dot_score, granularity="fine", pool="mean")
        _close(
            torch.softmax(torch.as_tensor(e_q)[b], -1),
            ref.a_q,
            "a batch of affinity matrices: row means",
            " (average over the last axis, not the first)",
        )
        _close(
            torch.softmax(torch.as_tensor(e_k)[b], -1),
            ref.a_k,
            "a batch of affinity matrices: column means",
            " (average over the second-to-last axis, not the first)",
        )


def hidden_check_ex3(data: AspectData, acc_rotatory: float, acc_target_only: float) -> None:
    """Hidden test of Ex. 3: the test set holds the 500 sentences the exercise asks for, and both accuracies are fractions.

    Raises ``AssertionError``.
    """
    if len(data.label) != 500:
        raise AssertionError("the exercise's test set has 500 sentences")
    for name, acc in (("rotatory", acc_rotatory), ("target-only", acc_target_only)):
        if not 0.0 <= float(acc) <= 1.0:
            raise AssertionError(f"the {name} accuracy is a fraction in [0, 1]")
