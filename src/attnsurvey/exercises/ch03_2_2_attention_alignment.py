"""Self-checks for the exercises of chapter §3.2.2 Attention alignment (``ch03_2_2_attention_alignment``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. Reference values come from
autograd on an enumerated expectation, from masks built inside the check, and
from the paired difference over seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ._verdict import check_rerun, check_results_and_verdict


def _compare(answer: object, want: Tensor, case: str, hint: str, atol: float, digits: int) -> None:
    """Raise ``AssertionError`` unless ``answer`` (any array-like) has ``want``'s shape and values, to ``atol``.

    The message shows the reader's values, never ``want``.
    """
    got = torch.as_tensor(answer, dtype=want.dtype)
    if got.shape != want.shape:
        raise AssertionError(f"{case}: expected shape {tuple(want.shape)}, got {tuple(got.shape)}")
    if not torch.allclose(got, want, atol=atol):
        shown = [round(x, digits) for x in got.tolist()]
        raise AssertionError(f"{case}: your function gave {shown}, which is not right ({hint})")


def check_ex1(grad_fn: Callable[[Tensor, Tensor, float], Tensor]) -> str:
    """Ex. 1: ``grad_fn(a, L, b)`` is the expected REINFORCE gradient with respect to the scores, in closed form.

    a: softmax weights ``(n,)``; L: loss of each choice ``(n,)``; b: a baseline.
    Compared with autograd on the enumerated expectation ``sum_m a_m L_m`` for
    several sizes and two baselines (the expectation must not depend on b).
    """
    gen = torch.Generator().manual_seed(7)
    for n in (2, 5, 9):
        e = torch.randn(n, generator=gen, dtype=torch.float64, requires_grad=True)
        L = torch.randn(n, generator=gen, dtype=torch.float64) + 2.0
        (torch.softmax(e, -1) * L).sum().backward()
        grad = e.grad
        if grad is None:  # cannot happen: e is a leaf with requires_grad, so backward() filled its grad
            raise RuntimeError("autograd gave no gradient for the scores")
        a = torch.softmax(e.detach(), -1)
        for b in (0.0, 3.0):
            hint = "write the expectation out term by term for one score e_l, and check what becomes of b"
            _compare(grad_fn(a, L, b), grad, f"n={n}, b={b}", hint, atol=1e-9, digits=4)
    return "correct: your closed form matches autograd for both baselines"


def check_ex2(fn: Callable[[Tensor, int, int], Tensor]) -> str:
    """Ex. 2: ``fn(e, p, D)`` is local attention with a window shifted inwards at the ends (no Gaussian).

    The window always holds ``min(2D + 1, n_f)`` consecutive positions around
    ``p`` (moved inwards, never clipped), and the weights are the softmax of the
    scores inside it. Compared with a softmax over a window built here.
    """
    e = torch.randn(10, generator=torch.Generator().manual_seed(3))
    for n, p, D in ((10, 5, 2), (10, 0, 2), (10, 1, 2), (10, 8, 2), (10, 9, 2), (10, 9, 1), (3, 1, 2), (10, 4, 0)):
        width = min(2 * D + 1, n)
        start = min(max(p - D, 0), n - width)
        want = torch.zeros(n)
        want[start : start + width] = torch.softmax(e[:n][start : start + width], -1)
        hint = "shift the window inwards so that it keeps min(2D + 1, n_f) positions; no Gaussian"
        _compare(fn(e[:n], p, D), want, f"n_f={n}, p={p}, D={D}", hint, atol=1e-6, digits=3)
    return "correct: the shifted window always holds min(2D + 1, n_f) positions"


def check_ex3(results: Mapping[str, Sequence[float]], verdict: str, table_d2: Sequence[float]) -> str:
    """Ex. 3: predictive local attention with D = 4 against D = 2 over the same seeds, and the verdict.

    ``results`` maps ``"D=4"`` and ``"D=2"`` to test accuracies per seed;
    ``results["D=2"]`` must be the local-p row of the chapter's experiment
    (``table_d2``: same seeds, same recipe), and ``results["D=4"]`` must not be
    that row again (a run that left ``D`` at 2). ``verdict`` is ``"D=4"``,
    ``"D=2"`` or ``"not resolved"``, as the paired difference decides.
    """
    if "D=2" not in results:
        raise AssertionError(f"results need the key 'D=2', got {sorted(results)}")
    if [round(float(x), 6) for x in results["D=2"]] != [round(float(x), 6) for x in table_d2]:
        raise AssertionError(
            "results['D=2'] must be the local-p accuracies of the experiment above (same seeds, same recipe)"
        )
    check_results_and_verdict(
        results,
        "D=4",
        "D=2",
        verdict,
        not_from={"D=4": table_d2},
        not_from_hint="these are the D = 2 accuracies; train local-p with D=4",
    )
    return "correct: the verdict follows from your paired difference"


def hidden_check_ex1(grad_fn: Callable[[Tensor, Tensor, float], Tensor]) -> None:
    """Hidden test of Ex. 1: other sizes (1, 4, 20 choices) and baselines (-5, 100), against autograd, to 1e-10.

    Raises ``AssertionError``.
    """
    gen = torch.Generator().manual_seed(77)
    for n in (1, 4, 20):
        e = torch.randn(n, generator=gen, dtype=torch.float64, requires_grad=True)
        L = 3 * torch.randn(n, generator=gen, dtype=torch.float64)
        (torch.softmax(e, -1) * L).sum().backward()
        grad = e.grad
        if grad is None:  # cannot happen: e is a leaf with requires_grad
            raise RuntimeError("autograd gave no gradient for the scores")
        a = torch.softmax(e.detach(), -1)
        for b in (-5.0, 100.0):
            hint = "the baseline must cancel, for any b"
            _compare(grad_fn(a, L, b), grad, f"n={n}, b={b}", hint, atol=1e-10, digits=4)


def hidden_check_ex2(fn: Callable[[Tensor, int, int], Tensor]) -> None:
    """Hidden test of Ex. 2: other lengths and windows (n_f = 1, 6, 15; D = 1, 3, 7), at both ends and inside.

    Raises ``AssertionError``.
    """
    e = 2 * torch.randn(15, generator=torch.Generator().manual_seed(8))
    for n, p, D in ((1, 0, 1), (6, 0, 3), (6, 5, 3), (15, 2, 3), (15, 13, 3), (15, 7, 7), (15, 14, 1)):
        width = min(2 * D + 1, n)
        start = min(max(p - D, 0), n - width)
        want = torch.zeros(n)
        want[start : start + width] = torch.softmax(e[:n][start : start + width], -1)
        _compare(
            fn(e[:n], p, D), want, f"n_f={n}, p={p}, D={D}", "the window keeps min(2D + 1, n_f) positions", 1e-6, 3
        )


def hidden_check_ex3(
    results: Mapping[str, Sequence[float]], run_alignment: Callable[..., Mapping[str, float]], seeds: Sequence[int]
) -> None:
    """Hidden test of Ex. 3: the first seed of local-p trained again with D = 4 gives the first value of ``results["D=4"]``.

    ``run_alignment(kind, seed, D=...)`` is the chapter's training function.
    Raises ``AssertionError``.
    """
    check_rerun(results["D=4"], 0, float(run_alignment("local-p", seeds[0], D=4)["accuracy"]), "results['D=4']")
