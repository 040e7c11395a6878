"""Self-checks for the exercises of Chapter 2 (survey §2, the general attention model)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .. import general_model as gm

#: The task of Exercise 3: the chapter's match-the-query task with 32 items.
EX3_TASK = dict(n_items=32, d_u=8, n_classes=4, noise=0.3, layout="sequence")
EX3_EVAL_SEED, EX3_EVAL_N = 1, 1000


def check_ex1(weights_equal_scores: Sequence[float], shift_changes_weights: bool) -> str:
    """Ex. 1: the weights of Eq. (3) for 4 equal scores, and whether adding a constant to every score changes them."""
    w = torch.as_tensor(weights_equal_scores, dtype=torch.float64)
    if w.shape != (4,):
        raise AssertionError(f"give one weight per score: 4 numbers, got shape {tuple(w.shape)}")
    want = torch.full((4,), 0.25, dtype=torch.float64)  # exp(7) / (4 exp(7)), by hand
    if not torch.allclose(w, want, atol=1e-6):
        raise AssertionError(f"equal scores give equal weights that sum to one; got {w.tolist()}")
    if shift_changes_weights is not False:
        raise AssertionError(
            "exp(e_l + b) / sum_j exp(e_j + b): the factor exp(b) cancels, so the weights do not change"
        )
    return "correct: equal scores give 1/n_f each, and a common shift cancels"


def check_ex2(fn: Callable[..., Sequence[float]]) -> str:
    """Ex. 2: ``fn(q, K, V)`` is scaled dot-product attention for one query, written with loops.

    Compared with :func:`attnsurvey.general_model.attend` on random inputs, including
    scores near ±10^4 (a softmax that does not subtract the maximum overflows).
    """
    gg = torch.Generator().manual_seed(5)
    for scale in (1.0, 1e4):
        qx, Kx, Vx = (
            scale * torch.randn(6, generator=gg),
            torch.randn(7, 6, generator=gg),
            torch.randn(7, 3, generator=gg),
        )
        c_ref, _ = gm.attend(qx[None].double(), Kx.double(), Vx.double())
        try:
            got = fn(qx.double(), Kx.double(), Vx.double())
        except OverflowError as err:
            raise AssertionError(
                f"overflow with scores of size {scale:g}: subtract the largest score first ({err})"
            ) from err
        c_mine = torch.as_tensor(got, dtype=torch.float64)
        if c_mine.shape != c_ref[0].shape or not torch.isfinite(c_mine).all():
            raise AssertionError(f"expected a finite context of shape {tuple(c_ref[0].shape)}, got {c_mine.tolist()}")
        if not torch.allclose(c_mine, c_ref[0], atol=1e-6, rtol=1e-6):
            raise AssertionError(
                f"context differs from attend at score scale {scale:g}: did you divide the scores by sqrt(d_k)?"
            )
    return "correct: matches attend, also for very large scores"


def check_ex3(model_mean: gm.TaskModel, model_attention: gm.TaskModel, acc_mean: float, acc_attention: float) -> str:
    """Ex. 3: two trained task models on 32 items, and the accuracies you measured for them.

    The check evaluates both models itself on the 32-item task (``EX3_TASK``,
    generator seed ``EX3_EVAL_SEED``, ``EX3_EVAL_N`` examples) and compares.
    """
    from ..experiments.general_model import evaluate_match_query

    if getattr(model_mean, "pool", None) != "mean" or getattr(model_attention, "pool", None) != "attention":
        raise AssertionError("pass the mean-pooling model first and the attention model second")
    measured = {}
    with torch.no_grad():
        for name, model in (("mean", model_mean), ("attention", model_attention)):
            measured[name] = evaluate_match_query(
                model, EX3_EVAL_N, torch.Generator().manual_seed(EX3_EVAL_SEED), **EX3_TASK
            )["accuracy"]
    for name, given in (("mean", acc_mean), ("attention", acc_attention)):
        if not math.isclose(float(given), measured[name], abs_tol=1e-6):
            raise AssertionError(
                f"your {name} accuracy {float(given):.3f} is not what the model scores on the 32-item task "
                f"({measured[name]:.3f}): evaluate with n_items=32"
            )
    if measured["attention"] - measured["mean"] < 0.2:
        raise AssertionError(
            f"attention {measured['attention']:.2f} vs mean pooling {measured['mean']:.2f}: train both as in the chapter"
        )
    return "correct: with 32 items the average says even less about the item that matches"
