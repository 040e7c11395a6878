"""Self-checks for the exercises of chapter §3.2.3 Attention dimensionality (``ch03_2_3_attention_dimensionality``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. Reference values come from
the modules' own parameter counts, per-feature loops, and the paired difference
over seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from ..experiments.general_mechanisms import FeatureLookupModel
from ..general_mechanisms import dimensionality as md
from ._answers import run_answer
from ._verdict import check_rerun, check_results_and_verdict

_DIMS = ((3, 4, 5, 6), (8, 8, 2, 16), (1, 2, 3, 4), (5, 1, 7, 2))


def check_ex1(count_fn: Callable[[int, int, int, int], int]) -> str:
    """Ex. 1: ``count_fn(d_q, d_k, d_v, d_w)`` is the number of weights of Eq. (31).

    Compared with the parameter count of ``md.MultiDimensionalAttention`` for
    several sizes (W_1, W_2, b and W_d; no bias after W_d).
    """
    for dims in _DIMS:
        want = sum(p.numel() for p in md.MultiDimensionalAttention(*dims).parameters())
        got = int(count_fn(*dims))
        if got != want:
            raise AssertionError(
                f"(d_q, d_k, d_v, d_w) = {dims}: your count {got} is not the module's "
                "(count the weights of Eq. (31) term by term; the first part of the exercise tells you whether "
                "anything follows W_d)"
            )
    return "correct: your count matches the module's parameters"


def _shift_cases(seed: int, sizes: Sequence[tuple[int, int]]) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Per size ``(n_f, d_v)``: the weights of Eq. (32) for random scores, a shift, and the weights of the shifted scores.

    Three kinds of shift per size: one constant per feature (the derivation's case: nothing
    changes), one constant per position (shared by the features) and one per entry.
    The reference recomputes Eq. (32) from the scores, which the reader never sees.
    """
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for n_f, d_v in sizes:
        e = torch.randn(1, n_f, d_v, generator=gen, dtype=torch.float64) * 2
        for beta in (
            torch.randn(1, d_v, generator=gen, dtype=torch.float64).expand(n_f, d_v) * 3,
            torch.randn(n_f, 1, generator=gen, dtype=torch.float64).expand(n_f, d_v),
            torch.randn(n_f, d_v, generator=gen, dtype=torch.float64),
        ):
            before = md.multidimensional_align(e)[0]
            after = md.multidimensional_align(e + beta)[0]
            cases.append((before, beta.clone(), after))
    return cases


def _judge_shift(fn: Callable[[Tensor, Tensor], Tensor], seed: int, sizes: Sequence[tuple[int, int]]) -> None:
    kinds = ("one constant per feature", "one constant per position", "a shift per entry")
    for k, (A, beta, want) in enumerate(_shift_cases(seed, sizes)):
        n_f, d_v = A.shape
        what = f"(n_f, d_v) = {(n_f, d_v)}, {kinds[k % 3]}"
        answer = torch.as_tensor(run_answer(fn, A.clone(), beta.clone(), what=what))
        got = answer.to(torch.float64)
        if tuple(got.shape) != (n_f, d_v):
            raise AssertionError(
                f"{what}: expected the weights' shape (n_f, d_v) = {(n_f, d_v)}, got {tuple(got.shape)}"
            )
        if torch.allclose(got, want, atol=1e-9, rtol=1e-7):
            continue
        lower = answer.dtype if answer.is_floating_point() and answer.dtype != torch.float64 else None
        if lower is not None:  # the answer was rounded to fewer bits: judge it at its own precision
            tol = 64 * torch.finfo(lower).eps  # a few roundings of exp, a product and a sum, with room
            if torch.allclose(got, want, atol=tol, rtol=tol):
                if lower == torch.float32:
                    continue  # float32 rounding, not a wrong formula
                raise AssertionError(
                    f"{what}: your weights agree with Eq. (32) only to {lower} precision; the inputs are "
                    "float64: compute in float64 (or float32)"
                )
        raise AssertionError(
            f"{what}: your weights are not those of Eq. (32) for the shifted scores "
            "(write Eq. (32) for the scores plus the shift, then express it through the weights you are given)"
        )


def check_ex1_shift(fn: Callable[[Tensor, Tensor], Tensor]) -> str:
    """Ex. 1, the derivation's result: ``fn(A, beta)`` gives the weights of Eq. (32) after a shift of the scores.

    ``A`` ``(n_f, d_v)`` holds one query's weights (every column sums to 1 over the
    positions); ``beta`` ``(n_f, d_v)`` is added to the scores, ``beta[l, i]`` to
    ``e_{l,i}``. The reference applies Eq. (32) to the shifted scores themselves,
    for shifts that are constant per feature, constant per position, or arbitrary.
    The answer is compared in float64 (to 1e-9); one computed in float32 is accepted
    within float32 rounding (64 eps), and one in float16 or bfloat16 that agrees only
    to its own precision is refused with a message that says so.
    """
    _judge_shift(fn, seed=5, sizes=((5, 3), (4, 6)))
    return "correct: your weights match Eq. (32) on the shifted scores"


def check_ex2(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> str:
    """Ex. 2: ``fn(Q, K, V)`` is multi-dimensional attention with scores q_i k_{l,i} / sqrt(d).

    Q: (n_q, d), K: (n_f, d), V: (n_f, d); returns (n_q, d). Compared with a loop
    over queries and features: a softmax over positions for every feature.
    """
    gen = torch.Generator().manual_seed(3)
    for d in (4, 9):
        Qx, Kx, Vx = (torch.randn(n, d, generator=gen) * 2 for n in (2, 5, 5))
        c = torch.as_tensor(fn(Qx, Kx, Vx))
        if tuple(c.shape) != (2, d):
            raise AssertionError(f"expected (n_q, d) = (2, {d}), got {tuple(c.shape)}")
        for j in range(2):
            for i in range(d):
                a = torch.softmax(Qx[j, i] * Kx[:, i] / d**0.5, 0)
                want = float((a * Vx[:, i]).sum())
                if not abs(float(c[j, i]) - want) < 1e-5:
                    raise AssertionError(
                        f"d={d}, query {j}, feature {i}: your context entry {float(c[j, i]):.5g} differs from the "
                        "per-feature loop (over which axis does each feature's softmax run, and what is the scale?)"
                    )
    return "correct: one softmax over positions per feature"


def check_ex3(
    make_model: Callable[[bool], nn.Module],
    results: Mapping[str, Sequence[float]],
    verdict: str,
    default_run: Mapping[str, Sequence[float]],
) -> str:
    """Ex. 3: both models with d_w = 8 over five seeds, and the verdict the paired difference supports.

    ``make_model(multi_dimensional)`` must build ``FeatureLookupModel`` with
    d_q = 16, d_k = d_v = 4 and d_w = 8 (checked from its parameter shapes);
    ``results`` maps ``"multi-dimensional"`` and ``"single-dimensional"`` to
    feature accuracies per seed; ``verdict`` is one of the two names or
    ``"not resolved"``. ``default_run`` is the chapter's experiment with the
    default d_w = 32 (``{name: accuracies}``): rows of ``results`` that repeat
    it were not trained with d_w = 8 and fail.
    """
    for multi in (False, True):
        m = make_model(multi)
        ref = FeatureLookupModel(d_q=16, d_k=4, d_v=4, d_w=8, multi_dimensional=multi)
        got = {k: tuple(v.shape) for k, v in m.named_parameters()}
        want = {k: tuple(v.shape) for k, v in ref.named_parameters()}
        if got != want:
            raise AssertionError(
                f"multi_dimensional={multi}: your model's parameter shapes {got} are not those of the task model "
                "with d_w = 8 (build it as the chapter's run() does, changing only d_w)"
            )
    check_results_and_verdict(
        results,
        "multi-dimensional",
        "single-dimensional",
        verdict,
        not_from=default_run,
        not_from_hint="these accuracies come from the default d_w = 32; train with d_w = 8",
    )
    return "correct: the verdict follows from your paired difference"


def hidden_check_ex1(count_fn: Callable[[int, int, int, int], int]) -> None:
    """Hidden test of Ex. 1: other sizes, counted matrix by matrix here (W_1, W_2, b, W_d). Raises ``AssertionError``."""
    for d_q, d_k, d_v, d_w in ((7, 3, 11, 5), (64, 64, 64, 128), (2, 9, 1, 1)):
        want = d_w * d_q + d_w * d_k + d_w + d_w * d_v
        if int(count_fn(d_q, d_k, d_v, d_w)) != want:
            raise AssertionError(f"(d_q, d_k, d_v, d_w) = {(d_q, d_k, d_v, d_w)}: your count is not right")


def hidden_check_ex1_shift(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 1's shift: other sizes (one position, one feature, a long row). Raises ``AssertionError``."""
    _judge_shift(fn, seed=51, sizes=((1, 4), (7, 1), (40, 2)))


def hidden_check_ex2(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 2: other sizes (one position; d = 1; three queries) in float64, to 1e-10.

    Raises ``AssertionError``.
    """
    gen = torch.Generator().manual_seed(31)
    for n_q, n_f, d in ((3, 1, 5), (1, 4, 1), (2, 6, 3)):
        Qx, Kx, Vx = (torch.randn(n, d, generator=gen, dtype=torch.float64) for n in (n_q, n_f, n_f))
        want = torch.stack(
            [
                torch.stack([(torch.softmax(Qx[j, i] * Kx[:, i] / d**0.5, 0) * Vx[:, i]).sum() for i in range(d)])
                for j in range(n_q)
            ]
        )
        c = torch.as_tensor(run_answer(fn, Qx, Kx, Vx, what=f"n_q={n_q}, n_f={n_f}, d={d}"), dtype=torch.float64)
        if c.shape != want.shape or not torch.allclose(c, want, atol=1e-10):
            raise AssertionError(f"n_q={n_q}, n_f={n_f}, d={d}: the contexts differ from one softmax per feature")


def hidden_check_ex3(
    results: Mapping[str, Sequence[float]],
    run: Callable[..., Mapping[str, float]],
    seeds: Sequence[int],
    make_model: Callable[[bool], nn.Module],
) -> None:
    """Hidden test of Ex. 3: the first seed trained again with ``make_model`` gives the first value of both rows.

    ``run(seed, make_model=...)`` is the chapter's training function, returning
    ``{name: accuracy}``. Raises ``AssertionError``.
    """
    again = run(seeds[0], make_model=make_model)
    for name in ("multi-dimensional", "single-dimensional"):
        check_rerun(results[name], 0, float(again[name]), f"results[{name!r}]")
