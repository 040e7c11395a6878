"""Self-checks for the exercises of chapter 6.7 (attention as a recurrence).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right. The references are computed here from
the package's recurrent forms or from a brute-force sum, never from the closed
form the exercise asks for.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..beyond.linear_attention import LinearAttentionState, linear_attention_recurrent
from ..experiments.recall import run_recall
from ._answers import run_answer

CHAPTER = "chapters/ch06_7_recurrent_attention.ipynb"

#: Exercise 3: the run that is repeated with more training (mixer, stored pairs, seed, steps).
EX3: dict[str, Any] = {"mixer": "deltanet", "n_pairs": 8, "seed": 0, "steps": 200}

_F64 = torch.float64


# ---------------------------------------------------------------- exercise 1: the chunk's state update
def _log_gates(seed: int, c: int, shift: float = 1.0) -> Tensor:
    """Log-gates ``logsigmoid(x + shift)``; a shift of -30 gives strong decay, whose running products underflow."""
    gen = torch.Generator().manual_seed(seed)
    return torch.nn.functional.logsigmoid(torch.randn(c, generator=gen, dtype=_F64) + shift)


def chunk_state_weights_by_recurrence(log_g: Tensor) -> tuple[float, Tensor]:
    """``(carry, w)`` read off the recurrence ``S_t = g_t S_{t-1} + k_t v_t^T`` run over one chunk.

    With one-hot keys and values (``K = V = I``) and a zero initial state the final state is
    ``diag(w)``; with zero keys and the initial state ``I`` it is ``carry I``.
    """
    c = log_g.shape[-1]
    eye = torch.eye(c, dtype=_F64)
    _, written = linear_attention_recurrent(eye, eye, eye, feature_map="identity", log_gate=log_g, normalise=False)
    zero = torch.zeros(c, c, dtype=_F64)
    _, carried = linear_attention_recurrent(
        zero, zero, zero, feature_map="identity", log_gate=log_g, normalise=False,
        state=LinearAttentionState(eye, None),
    )  # fmt: skip
    return float(carried.S[0, 0]), written.S.diagonal()


def _weights_hint(fn: Callable[[Tensor], Any], seeds: Sequence[tuple[int, int, float]]) -> str | None:
    for seed, c, shift in seeds:
        log_g = _log_gates(seed, c, shift)
        answer = run_answer(fn, log_g.clone(), what=f"a chunk of {c} log-gates")
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            return "return a pair (carry, w): a number and a vector of one weight per position of the chunk"
        carry, w = float(answer[0]), torch.as_tensor(answer[1], dtype=_F64).reshape(-1)
        want_carry, want_w = chunk_state_weights_by_recurrence(log_g)
        if w.shape != want_w.shape:
            return f"w needs one weight per position of the chunk ({c}), got {tuple(w.shape)}"
        if not (math.isfinite(carry) and bool(torch.isfinite(w).all())):
            return (
                f"not finite on a chunk of {c} strongly decaying gates: products of many small gates underflow; "
                "how does the chapter compute the decay matrix?"
            )
        carry_ok = math.isclose(carry, want_carry, rel_tol=1e-9, abs_tol=1e-12)
        w_ok = bool(torch.allclose(w, want_w, rtol=1e-9, atol=1e-12))
        if carry_ok and w_ok:
            continue
        if w_ok:
            return "w is right; the carried state is not: what happens to S_0 at every step of the chunk?"
        if carry_ok and torch.allclose(w, want_w * log_g.exp(), rtol=1e-9, atol=1e-12):
            return "the newest pair's weight should be 1: is the gate of step r applied before or after k_r v_r^T is added?"
        if carry_ok and torch.allclose(w, log_g.cumsum(-1).exp(), rtol=1e-9, atol=1e-12):
            return "the weights run the wrong way along the chunk: which pair has decayed the most by the chunk's end?"
        return "w is not right: unroll the recurrence over a chunk of three positions and read off each pair's factor"
    return None


def check_chunk_state_weights(fn: Callable[[Tensor], Any]) -> None:
    """Exercise 1: ``fn(log_g) -> (carry, w)`` with ``S_C = carry S_0 + sum_r w_r k_r v_r^T`` over one chunk.

    Compared with the recurrence on chunks of 1, 4 and 7 positions and on one chunk of 40 strongly decaying
    gates, whose running products underflow (float64). Raises ``AssertionError``.
    """
    hint = _weights_hint(fn, [(0, 4, 1.0), (1, 7, 1.0), (2, 1, 1.0), (3, 40, -30.0)])
    if hint:
        raise AssertionError(hint)
    print("chunk state weights check passed")


def hidden_check_chunk_state_weights(fn: Callable[[Tensor], Any]) -> None:
    """Hidden test of Exercise 1: longer chunks (16, 64), a short one, and strong decay. Raises ``AssertionError``."""
    if _weights_hint(fn, [(10, 16, 1.0), (11, 64, 1.0), (12, 2, 1.0), (13, 64, -30.0)]):
        raise AssertionError("chunk_state_weights is not right on other chunks")


# ---------------------------------------------------------------- exercise 2: GLA's vector gate
def vector_gate_outputs(Q: Tensor, K: Tensor, V: Tensor, log_alpha: Tensor) -> Tensor:
    """Brute-force outputs of ``S_t = diag(alpha_t) S_{t-1} + k_t v_t^T``, ``o_t = S_t^T q_t`` (no recurrence).

    ``o_i = sum_{j <= i} sum_m q_im k_jm prod_{l = j+1..i} alpha_lm v_j``, summed term by term.

    Shape:
        Q, K, log_alpha ``(n, d_k)``; V ``(n, d_v)``; returns ``(n, d_v)``.
    """
    n = Q.shape[0]
    out = torch.zeros(n, V.shape[1], dtype=_F64)
    for i in range(n):
        for j in range(i + 1):
            decay = log_alpha[j + 1 : i + 1].sum(0).exp()  # (d_k,): empty sum for j = i
            out[i] += (Q[i] * K[j] * decay).sum() * V[j]
    return out


def _gla_case(seed: int, n: int, d_k: int, d_v: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    Q, K = (torch.randn(n, d_k, generator=gen, dtype=_F64) for _ in range(2))
    V = torch.randn(n, d_v, generator=gen, dtype=_F64)
    log_alpha = torch.nn.functional.logsigmoid(torch.randn(n, d_k, generator=gen, dtype=_F64) * 2 + 1)
    return Q, K, V, log_alpha


def _gla_hint(step: Callable[..., Any], cases: Sequence[tuple[int, int, int, int]]) -> str | None:
    for seed, n, d_k, d_v in cases:
        Q, K, V, log_alpha = _gla_case(seed, n, d_k, d_v)
        S = torch.zeros(d_k, d_v, dtype=_F64)
        outs = []
        for t in range(n):
            answer = run_answer(
                step, S.clone(), Q[t].clone(), K[t].clone(), V[t].clone(), log_alpha[t].clone(),
                what=f"d_k={d_k}, d_v={d_v}",
            )  # fmt: skip
            if not isinstance(answer, (tuple, list)) or len(answer) != 2:
                return "return the pair (o_t, S_t)"
            o, S = (torch.as_tensor(x, dtype=_F64) for x in answer)
            if S.shape != (d_k, d_v) or o.shape != (d_v,):
                return f"shapes: S_t must stay (d_k, d_v) = ({d_k}, {d_v}) and o_t be (d_v,) = ({d_v},)"
            outs.append(o)
        got, want = torch.stack(outs), vector_gate_outputs(Q, K, V, log_alpha)
        if torch.allclose(got, want, rtol=1e-9, atol=1e-10):
            continue
        scalar = log_alpha.mean(-1, keepdim=True).expand_as(log_alpha)
        if torch.allclose(got, vector_gate_outputs(Q, K, V, scalar), rtol=1e-9, atol=1e-10):
            return "each key coordinate has its own gate: do not average the gate over the coordinates"
        first = torch.allclose(got[0], want[0], rtol=1e-9, atol=1e-10)
        if first:
            return "right at the first step, wrong later: which rows of S does alpha_t scale, and before what?"
        if not bool(got[0].any()):
            return "o_t is zero at t = 0: read the state after this step's write"
        return "o_t is not right even at t = 0, where S_{t-1} = 0: does the gate touch the newest pair?"
    return None


def check_gla_step(step: Callable[..., Any]) -> None:
    """Exercise 2: ``step(S, q, k, v, log_alpha) -> (o, S_new)``, one step of GLA with a gate per key coordinate.

    Run over sequences with ``d_k != d_v`` and compared with a brute-force sum. Raises ``AssertionError``.
    """
    hint = _gla_hint(step, [(0, 6, 3, 5), (1, 9, 4, 2)])
    if hint:
        raise AssertionError(hint)
    print("GLA step check passed")


def hidden_check_gla_step(step: Callable[..., Any]) -> None:
    """Hidden test of Exercise 2: a longer sequence, one key coordinate, a wide value. Raises ``AssertionError``."""
    if _gla_hint(step, [(10, 14, 6, 3), (11, 5, 1, 7)]):
        raise AssertionError("the GLA step is not right on other sizes")


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
    "check_chunk_state_weights",
    "check_gla_step",
    "check_longer_training",
    "chunk_state_weights_by_recurrence",
    "hidden_check_chunk_state_weights",
    "hidden_check_gla_step",
    "hidden_check_longer_training",
    "longer_training_accuracy",
    "vector_gate_outputs",
]
