"""Self-checks for the exercises of Chapter 3.1.1 (survey §3.1.1, multiplicity of features)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..feature_related import co_attention as ca
from ..general_mechanisms.scoring import additive_score

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


def _eq6_scores(answer: object, K1: Tensor, W1: Tensor, w1: Tensor, what: str) -> Tensor:
    """Eq. (6) with the reader's ``(q, W_q)``, the parallel model's ``W_1`` as key map, ``w_1`` and ``b = 0``."""
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        raise AssertionError(f"{what}: return a pair (q, W_q)")
    q, W_q = (torch.as_tensor(x, dtype=K1.dtype) for x in answer)
    if q.dim() != 1 or W_q.dim() != 2 or W_q.shape != (W1.shape[0], q.shape[0]):
        raise AssertionError(
            f"{what}: q must be a vector (d_q,) and W_q a matrix (d_w, d_q) with d_w = {W1.shape[0]}; "
            f"got q {tuple(q.shape)} and W_q {tuple(W_q.shape)}"
        )
    return additive_score(q[None], K1, W_q, W1, w1, torch.zeros(W1.shape[0], dtype=K1.dtype))[0]


def check_ex1(query_for_constant_affinity: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> str:
    """Ex. 1: with every entry of A equal to 1, Eq. (14) is the additive score of Eq. (6) with one query.

    ``query_for_constant_affinity(K2, W2)`` returns ``(q, W_q)``; the check scores
    set 1's keys with Eq. (6), ``w_1^T tanh(W_q q + W_1 k_l)``, and compares with
    Eq. (14) for ``A = 1``. Raises ``AssertionError`` with a hint.
    """
    K1, K2 = _rand(4, 3, seed=31), _rand(5, 2, seed=32)
    W1, W2, w1, w2 = _rand(6, 3, seed=33), _rand(6, 2, seed=34), _rand(6, seed=35), _rand(6, seed=36)
    e1, _ = ca.parallel_co_attention_scores(K1, K2, torch.ones(4, 5), W1, W2, w1, w2)
    what = "Eq. (6) with your (q, W_q) against Eq. (14) with A = 1"
    got = _eq6_scores(run_answer(query_for_constant_affinity, K2, W2, what=what), K1, W1, w1, what)
    if torch.allclose(got, ca.queryless_additive_score(K1, W1, w1, None), atol=1e-6):
        raise AssertionError(
            f"{what}: your scores do not depend on set 2, but with A = 1 the term W_2 K^(2) A^T is not zero"
        )
    _close(got, e1, what, " (write out column i of W_2 K^(2) A^T when every A_ij is 1)")
    return "correct: with a constant affinity matrix, parallel co-attention scores set 1 with a single query"


def check_ex2(row_mean_from_mean_key: Callable[[Tensor, Tensor, Tensor], Tensor], same_with_tanh: object = None) -> str:
    """Ex. 2: the row means of the bilinear affinity (Eq. 12, ``act`` = identity) from set 2's mean key alone.

    ``row_mean_from_mean_key(K1, k2_bar, W_A)`` never sees the keys of set 2; it
    must return the row means of ``K1 W_A K2^T``. ``same_with_tanh`` says whether
    the identity survives ``act = tanh`` (a bool). Raises ``AssertionError`` with a hint.
    """
    K1, K2, W_A = _rand(4, 3, seed=41), _rand(6, 5, seed=42), _rand(3, 5, seed=43)
    A = ca.affinity_matrix(K1, K2, W_A, act=lambda x: x)
    what = "row means of Eq. (12) without activation, from the mean key of set 2"
    _close(
        run_answer(row_mean_from_mean_key, K1, K2.mean(-2), W_A, what=what),
        A.mean(-1),
        what,
        " (the mean runs over j, and only k_j^(2) depends on j; mind which side of W_A each set sits on)",
    )
    if not isinstance(same_with_tanh, bool):
        raise AssertionError("same_with_tanh: answer True or False")
    A_tanh = ca.affinity_matrix(K1, K2, W_A)
    tanh_of_mean = torch.tanh(K1 @ W_A @ K2.mean(-2))
    if same_with_tanh != bool(torch.allclose(A_tanh.mean(-1), tanh_of_mean, atol=1e-6)):
        raise AssertionError("same_with_tanh: compute both sides with act = tanh on random keys and compare")
    return "correct: both answers are right"


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


def hidden_check_ex1(query_for_constant_affinity: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> None:
    """Hidden test of Ex. 1: another size of set 2 (``n_f^(2) = 9``) in float64, to 1e-9.

    An answer fitted to the visible check's five keys fails here. Raises ``AssertionError``.
    """
    K1, K2 = _rand(3, 4, seed=131).double(), _rand(9, 2, seed=132).double()
    W1, W2 = _rand(5, 4, seed=133).double(), _rand(5, 2, seed=134).double()
    w1, w2 = _rand(5, seed=135).double(), _rand(5, seed=136).double()
    e1, _ = ca.parallel_co_attention_scores(K1, K2, torch.ones(3, 9, dtype=torch.float64), W1, W2, w1, w2)
    what = "a set 2 of nine keys in float64"
    got = _eq6_scores(run_answer(query_for_constant_affinity, K2, W2, what=what), K1, W1, w1, what)
    if not torch.allclose(got.double(), e1, atol=1e-9):
        raise AssertionError(f"{what}: your (q, W_q) must follow the number of keys in set 2")


def hidden_check_ex2(
    row_mean_from_mean_key: Callable[[Tensor, Tensor, Tensor], Tensor], same_with_tanh: object = None
) -> None:
    """Hidden test of Ex. 2: a batch of key sets ``K1 (2, 4, 3)`` with mean keys ``(2, 5)``.

    Raises ``AssertionError``.
    """
    K1, K2, W_A = _rand(2, 4, 3, seed=141), _rand(2, 7, 5, seed=142), _rand(3, 5, seed=143)
    want = ca.affinity_matrix(K1, K2, W_A, act=lambda x: x).mean(-1)
    what = "a batch of key sets K1 (2, 4, 3) and mean keys (2, 5)"
    got = torch.as_tensor(run_answer(row_mean_from_mean_key, K1, K2.mean(-2), W_A, what=what))
    if got.shape != want.shape or not torch.allclose(got.to(want.dtype), want, atol=1e-5):
        raise AssertionError(f"{what}: each set's row means must come from its own mean key")


def hidden_check_ex3(data: AspectData, acc_rotatory: float, acc_target_only: float) -> None:
    """Hidden test of Ex. 3: the test set holds the 500 sentences the exercise asks for, and both accuracies are fractions.

    Raises ``AssertionError``.
    """
    if len(data.label) != 500:
        raise AssertionError("the exercise's test set has 500 sentences")
    for name, acc in (("rotatory", acc_rotatory), ("target-only", acc_target_only)):
        if not 0.0 <= float(acc) <= 1.0:
            raise AssertionError(f"the {name} accuracy is a fraction in [0, 1]")
