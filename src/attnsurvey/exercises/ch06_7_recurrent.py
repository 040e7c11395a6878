"""Self-checks for the exercises of chapter 6.7 (attention as a recurrence).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right. The references are computed here from
the package's recurrent forms or from a loop over positions, never from the
closed or parallel form the exercise asks for.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn
from unittest import mock

import torch
from torch import Tensor

from ..beyond import delta_rule
from ..beyond.delta_rule import delta_rule_recurrent
from ..experiments.recall import run_recall
from ._answers import run_on_copies, torch_calls

CHAPTER = "chapters/ch06_7_recurrent_attention.ipynb"

#: Exercise 3: the run that is repeated with more training (mixer, stored pairs, seed, steps).
EX3: dict[str, Any] = {"mixer": "deltanet", "n_pairs": 8, "seed": 0, "steps": 200}

_F64 = torch.float64


# ---------------------------------------------------------------- exercise 1: the delta rule's carry over a chunk
def _carry_case(seed: int, c: int, d_k: int, shift: float) -> tuple[Tensor, Tensor, Tensor]:
    """Unit keys ``(c, d_k)``, strengths ``beta`` in (0, 1) and log-gates ``logsigmoid(x + shift)`` (``(c,)`` each).

    A shift of -30 gives strong decay: every gate is about ``e^-30``.
    """
    gen = torch.Generator().manual_seed(seed)
    K = torch.nn.functional.normalize(torch.randn(c, d_k, generator=gen, dtype=_F64), dim=-1)
    beta = torch.sigmoid(torch.randn(c, generator=gen, dtype=_F64))
    log_g = torch.nn.functional.logsigmoid(torch.randn(c, generator=gen, dtype=_F64) + shift)
    return K, beta, log_g


def _carry_by_recurrence(K: Tensor, beta: Tensor, log_g: Tensor) -> Tensor:
    """The matrix ``A`` with ``S_C = A S_0 + (the state the chunk writes from S_0 = 0)``, read off the recurrence.

    Gated DeltaNet is linear in ``(S_0, V)``: run from ``S_0 = I`` with zero values, its final state is ``A``.
    K ``(C, d_k)``; beta, log_g ``(C,)``; returns ``(d_k, d_k)``.
    """
    d_k = K.shape[-1]
    zero = torch.zeros_like(K)
    _, carried = delta_rule_recurrent(zero, K, zero, beta, log_g, S0=torch.eye(d_k, dtype=K.dtype))
    return carried


#: Below this size a float64 result has lost its relative precision (subnormal numbers start near 2.2e-308).
_NEGLIGIBLE = 1e-290


def _close(got: Tensor, want: Tensor) -> bool:
    """Relative agreement to 1e-9 in norm, at ``want``'s own scale; both negligible where ``want`` is.

    Both are divided by ``want``'s largest entry first: the squares that a norm sums would underflow for a carry of
    strong decay (entries near 1e-260), and every answer would then look equal to it.
    """
    scale = float(want.abs().max())
    if scale < _NEGLIGIBLE:
        return float(got.abs().max()) < _NEGLIGIBLE
    return bool(((got - want) / scale).norm() <= 1e-9 * (want / scale).norm())


@contextlib.contextmanager
def _without_package_delta_rule() -> Iterator[None]:
    """A context in which the package's delta rule (every form, one step or a chunk at a time) raises."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(
            "your function runs the package's delta rule: compute A from the factors you derived instead"
        )

    with mock.patch.object(delta_rule, "_step", refuse), mock.patch.object(delta_rule, "_chunk", refuse):
        yield


def _carry_hint(fn: Callable[..., Any], cases: Sequence[tuple[int, int, int, float]]) -> str | None:
    for seed, c, d_k, shift in cases:
        K, beta, log_g = _carry_case(seed, c, d_k, shift)
        with _without_package_delta_rule():
            answer = run_on_copies(fn, K, beta, log_g, what=f"a chunk of {c} keys of width {d_k}")
        if not isinstance(answer, Tensor) or answer.shape != (d_k, d_k):
            return f"return one (d_k, d_k) = ({d_k}, {d_k}) matrix A that multiplies S_0"
        if answer.dtype != K.dtype:
            return f"return A in the inputs' dtype ({K.dtype}), got {answer.dtype}"
        if not bool(torch.isfinite(answer).all()):
            return f"not finite on a chunk of {c} strongly decaying gates"
        want = _carry_by_recurrence(K, beta, log_g)
        if _close(answer, want):
            continue
        if _close(answer, want.T):
            return "the factors are multiplied in the wrong order: which step's factor acts on S_0 first?"
        scale = log_g.sum().exp()
        if _close(answer * scale, want) or _close(answer * scale, want.T):
            return "the gates are missing: what does each step's alpha_t do to the carried state?"
        first_order = scale * (torch.eye(d_k, dtype=_F64) - (beta[:, None] * K).T @ K)
        if _close(answer, first_order):
            return "a sum of the removals is right only to first order in beta: the products of the factors matter"
        return "A is not right: unroll two steps of Gated DeltaNet from a nonzero S_0 with zero values"
    return None


#: Exercise 1's visible cases (seed, C, d_k, shift): short and long chunks, one step, and strong decay
#: (20 steps of about e^-30: a carry near 1e-260, compared at its own scale; 40 steps: below the smallest float64).
_CARRY_CASES = [(0, 4, 3, 2.0), (1, 7, 5, 2.0), (2, 1, 4, 2.0), (3, 20, 4, -30.0), (4, 40, 3, -30.0)]


def check_chunk_carry(fn: Callable[..., Any]) -> None:
    """Exercise 1: ``fn(K, beta, log_g) -> A`` with ``S_C = A S_0 + (the chunk's own writes)`` under Gated DeltaNet.

    Compared with the recurrence run from ``S_0 = I`` on chunks of 1 to 40 unit keys, two of them strongly decaying
    (relative error 1e-9 at A's own scale). ``fn`` may not run the package's delta rule nor change its inputs.
    Raises ``AssertionError`` with a hint.
    """
    hint = _carry_hint(fn, _CARRY_CASES)
    if hint:
        raise AssertionError(hint)
    print("chunk carry check passed")


def hidden_check_chunk_carry(fn: Callable[..., Any]) -> None:
    """Hidden test of Exercise 1: other chunks (one key coordinate, a wide key, strong decay). Raises ``AssertionError``."""
    cases = [(10, 16, 8, 1.0), (11, 5, 1, 1.0), (12, 3, 16, 0.0), (13, 22, 6, -30.0), (14, 50, 5, -30.0)]
    if _carry_hint(fn, cases):
        raise AssertionError("chunk_carry is not right on other chunks")


# ---------------------------------------------------------------- exercise 2: GLA's parallel form
def _gla_by_recurrence(Q: Tensor, K: Tensor, V: Tensor, log_alpha: Tensor) -> Tensor:
    """Outputs of ``S_t = diag(alpha_t) S_{t-1} + k_t v_t^T``, ``o_t = S_t^T q_t`` by the recurrence itself.

    Q, K, log_alpha ``(n, d_k)``; V ``(n, d_v)``; returns ``(n, d_v)``.
    """
    S = torch.zeros(Q.shape[1], V.shape[1], dtype=_F64)
    out = []
    for q, k, v, a in zip(Q, K, V, log_alpha.exp(), strict=True):
        S = a[:, None] * S + k[:, None] * v[None, :]
        out.append(S.T @ q)
    return torch.stack(out)


def _gla_case(seed: int, n: int, d_k: int, d_v: int, shift: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    Q, K = (torch.randn(n, d_k, generator=gen, dtype=_F64) for _ in range(2))
    V = torch.randn(n, d_v, generator=gen, dtype=_F64)
    log_alpha = torch.nn.functional.logsigmoid(torch.randn(n, d_k, generator=gen, dtype=_F64) * 2 + shift)
    return Q, K, V, log_alpha


def _loop_hint(fn: Callable[..., Any]) -> str | None:
    """A hint if ``fn`` calls more torch operations on a longer sequence (a Python loop over the positions)."""
    calls = [torch_calls(fn, *_gla_case(20, n, 3, 2, 1.0), what=f"n={n}, d_k=3, d_v=2") for n in (8, 16)]
    if calls[0] != calls[1]:
        return (
            f"your function calls {calls[0]} torch operations at n = 8 and {calls[1]} at n = 16: a Python loop over "
            "the positions (or chunks)? The parallel form computes every output with the same operations whatever n is"
        )
    return None


def _gla_hint(fn: Callable[..., Any], cases: Sequence[tuple[int, int, int, int, float]]) -> str | None:
    for seed, n, d_k, d_v, shift in cases:
        Q, K, V, log_alpha = _gla_case(seed, n, d_k, d_v, shift)
        answer = run_on_copies(fn, Q, K, V, log_alpha, what=f"n={n}, d_k={d_k}, d_v={d_v}")
        if not isinstance(answer, Tensor) or answer.shape != (n, d_v):
            return f"return the outputs as one (n, d_v) = ({n}, {d_v}) tensor"
        if answer.dtype != Q.dtype:
            return f"return the outputs in the inputs' dtype ({Q.dtype}), got {answer.dtype}"
        if not bool(torch.isfinite(answer).all()):
            return (
                f"not finite on {n} positions of strong gates (cumulative log-gates down to "
                f"{float(log_alpha.cumsum(0).min()):.0f}): which exponentials in your form can be positive?"
            )
        want = _gla_by_recurrence(Q, K, V, log_alpha)
        if torch.allclose(answer, want, rtol=1e-9, atol=1e-10):
            continue
        scalar = log_alpha.mean(-1, keepdim=True).expand_as(log_alpha)
        if torch.allclose(answer, _gla_by_recurrence(Q, K, V, scalar), rtol=1e-9, atol=1e-10):
            return "each key coordinate has its own gate: do not average the gate over the coordinates"
        if not torch.allclose(answer[0], want[0], rtol=1e-9, atol=1e-10):
            return "o_1 is not right, and it reads only the first pair: does the gate touch the newest pair?"
        return "right at the first position, wrong later: which gates act between writing pair j and reading at i?"
    return _loop_hint(fn)


def check_gla_parallel(fn: Callable[..., Any]) -> None:
    """Exercise 2: ``fn(Q, K, V, log_alpha) -> O``, GLA's outputs with a gate per key coordinate, in parallel form.

    Compared with the recurrence on sequences with ``d_k != d_v``, one of them 64 positions of strong gates whose
    cumulative log-gates fall below -1900 (too wide a range for any one rescaling of the queries and keys). ``fn``
    must call as many torch operations at n = 8 as at n = 16 (no loop over the positions) and leave its inputs
    unchanged. Raises ``AssertionError`` with a hint.
    """
    hint = _gla_hint(fn, [(0, 6, 3, 5, 1.0), (1, 9, 4, 2, 1.0), (2, 64, 3, 2, -30.0)])
    if hint:
        raise AssertionError(hint)
    print("GLA parallel form check passed")


def hidden_check_gla_parallel(fn: Callable[..., Any]) -> None:
    """Hidden test of Exercise 2: a longer sequence, one key coordinate, strong gates. Raises ``AssertionError``."""
    if _gla_hint(fn, [(10, 14, 6, 3, 1.0), (11, 5, 1, 7, 1.0), (12, 96, 5, 4, -30.0)]):
        raise AssertionError("the GLA parallel form is not right on other sequences")


# ---------------------------------------------------------------- exercise 3: more training for DeltaNet
def _key(settings: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, v) for k, v in settings.items() if k not in ("steps", "seeds")))


@functools.lru_cache(maxsize=4)
def _longer_run(task_key: tuple[tuple[str, Any], ...], run_key: tuple[tuple[str, Any], ...], steps: int) -> float:
    task = {**dict(task_key), "n_pairs": EX3["n_pairs"]}
    return run_recall(str(EX3["mixer"]), task, int(EX3["seed"]), steps, **dict(run_key))


def longer_training_accuracy(task_kwargs: Mapping[str, Any], run_kwargs: Mapping[str, Any]) -> float:
    """The held-out accuracy of the run of :data:`EX3` (the chapter's settings, ``EX3["steps"]`` steps)."""
    return _longer_run(_key(task_kwargs), _key(run_kwargs), int(EX3["steps"]))


def _longer_hint(
    answer: object, task_kwargs: Mapping[str, Any], run_kwargs: Mapping[str, Any], tol: float
) -> str | None:
    try:
        got = float(answer)  # type: ignore[arg-type]  # any object: float() raises for what is not a number
    except (TypeError, ValueError):
        return "give the accuracy as one number"
    if math.isclose(got, longer_training_accuracy(task_kwargs, run_kwargs), abs_tol=tol):
        return None
    short = _longer_run(_key(task_kwargs), _key(run_kwargs), int(run_kwargs.get("steps", 80)))
    if math.isclose(got, short, abs_tol=tol):
        return "that is the accuracy after the chapter's number of steps: train for the exercise's steps"
    return "not the accuracy of that run: check the mixer, the number of pairs, the seed and the steps"


def check_longer_training(answer: object, task_kwargs: Mapping[str, Any], run_kwargs: Mapping[str, Any]) -> None:
    """Exercise 3: the accuracy of :data:`EX3`'s run with the chapter's other settings (to 1e-6).

    Args:
        answer: the reader's accuracy.
        task_kwargs: the chapter's task settings (``n_pairs`` is set from EX3).
        run_kwargs: the chapter's training settings (``steps`` is set from EX3).

    Raises:
        AssertionError: with a hint, for a wrong accuracy.
    """
    hint = _longer_hint(answer, task_kwargs, run_kwargs, 1e-6)
    if hint:
        raise AssertionError(hint)
    print("longer training check passed")


def hidden_check_longer_training(answer: object, task_kwargs: Mapping[str, Any], run_kwargs: Mapping[str, Any]) -> None:
    """Hidden test of Exercise 3: the same accuracy to 1e-9. Raises ``AssertionError``."""
    if _longer_hint(answer, task_kwargs, run_kwargs, 1e-9):
        raise AssertionError("the accuracy is not that of the exercise's run")


__all__ = [
    "EX3",
    "check_chunk_carry",
    "check_gla_parallel",
    "check_longer_training",
    "hidden_check_chunk_carry",
    "hidden_check_gla_parallel",
    "hidden_check_longer_training",
    "longer_training_accuracy",
]
