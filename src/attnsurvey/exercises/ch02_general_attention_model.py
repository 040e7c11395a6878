"""Self-checks for the exercises of Chapter 2 (survey §2, the general attention model)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .. import general_model as gm
from ._answers import by_hand, run_by_hand

#: The task of Exercise 3: the chapter's match-the-query task with 32 items.
EX3_TASK = dict(n_items=32, d_u=8, n_classes=4, noise=0.3, layout="sequence")
EX3_EVAL_SEED, EX3_EVAL_N = 1, 1000


def check_ex1(weights_equal_scores: Sequence[float], shift_changes_weights: bool) -> str:
    """Ex. 1: the softmax weights of Eq. (3) for 4 equal scores, and whether adding a constant to every score changes them."""
    w = torch.as_tensor(weights_equal_scores, dtype=torch.float64)
    if w.shape != (4,):
        raise AssertionError(f"give one weight per score: 4 numbers, got shape {tuple(w.shape)}")
    want = torch.full((4,), 0.25, dtype=torch.float64)  # exp(7) / (4 exp(7)), by hand
    if not torch.allclose(w, want, atol=1e-6):
        raise AssertionError(f"(a) is not right yet: apply Eq. (3)'s softmax to four equal scores; got {w.tolist()}")
    if shift_changes_weights is None or isinstance(shift_changes_weights, str):
        raise AssertionError(f"answer (b) with True or False, not {shift_changes_weights!r}")
    if bool(shift_changes_weights):
        raise AssertionError("(b) is not right yet: write out the softmax of the shifted scores e_l + b")
    return "correct: both answers are right"


def check_ex2(fn: Callable[..., Sequence[float]]) -> str:
    """Ex. 2: ``fn(q, K, V)`` is scaled dot-product attention for one query, written with loops.

    Compared with :func:`attnsurvey.general_model.attend` on random inputs, including
    scores near ±10^4 (a softmax that does not subtract the maximum overflows).
    A wrong context is compared with the usual slips (another scale, no
    normalisation) so that the hint names the one it matches. The function runs with
    torch's matrix products, softmax and fused attention forbidden (:func:`by_hand`).
    """

    def slips(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> dict[str, torch.Tensor]:
        d_k, d_v = K.shape[1], V.shape[1]
        out = {}
        for hint, div in (
            ("the scores are not divided by sqrt(d_k)", 1.0),
            ("the scores are divided by d_k; the scale is sqrt(d_k)", float(d_k)),
            ("the scores are divided by sqrt(d_v); the scale uses the size of the keys and query", math.sqrt(d_v)),
        ):
            out[hint] = torch.softmax(K @ q / div, -1) @ V
        e = K @ q / math.sqrt(d_k)
        out["the weights do not sum to one: divide the exponentials by their sum"] = torch.exp(e - e.max()) @ V
        return out

    gg = torch.Generator().manual_seed(5)
    for scale in (1.0, 1e4):
        qx, Kx, Vx = (
            scale * torch.randn(6, generator=gg),
            torch.randn(7, 6, generator=gg),
            torch.randn(7, 3, generator=gg),
        )
        c_ref, _ = gm.attend(qx[None].double(), Kx.double(), Vx.double())
        try:
            with by_hand():  # loops and scalars only: reusing attend, @ or torch.softmax does not count
                got = fn(qx.double(), Kx.double(), Vx.double())
        except OverflowError as err:
            raise AssertionError(
                f"overflow with scores of size {scale:g}: subtract the largest score first ({err})"
            ) from err
        c_mine = torch.as_tensor(got, dtype=torch.float64)
        if c_mine.shape != c_ref[0].shape:
            raise AssertionError(
                f"expected a context of shape {tuple(c_ref[0].shape)} (one number per value dimension), "
                f"got shape {tuple(c_mine.shape)}"
            )
        if not torch.isfinite(c_mine).all():
            raise AssertionError(
                f"the context is not finite with scores of size {scale:g} ({c_mine.tolist()}): "
                "subtract the largest score before exponentiating"
            )
        if not torch.allclose(c_mine, c_ref[0], atol=1e-6, rtol=1e-6):
            q64, K64, V64 = qx.double(), Kx.double(), Vx.double()
            matched = [h for h, c in slips(q64, K64, V64).items() if torch.allclose(c_mine, c, atol=1e-6, rtol=1e-6)]
            hint = (
                matched[0]
                if matched
                else "check the scores (q . k_l / sqrt(d_k)), the softmax over the n_f keys "
                "and the weighted sum of the values"
            )
            raise AssertionError(f"context differs from attend at score scale {scale:g}: {hint}")
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
        if given is None:
            raise AssertionError(f"the {name} accuracy is still None: give the accuracy you measured")
        if not math.isclose(float(given), measured[name], abs_tol=1e-6):
            model = model_mean if name == "mean" else model_attention
            with torch.no_grad():
                on16 = evaluate_match_query(
                    model, EX3_EVAL_N, torch.Generator().manual_seed(EX3_EVAL_SEED), **dict(EX3_TASK, n_items=16)
                )["accuracy"]
            cause = (
                "it is the accuracy on 16 items: evaluate with n_items=32"
                if math.isclose(float(given), on16, abs_tol=1e-6)
                else f"evaluate on EX3_TASK with EX3_EVAL_N = {EX3_EVAL_N} examples drawn from a generator "
                f"seeded with EX3_EVAL_SEED = {EX3_EVAL_SEED}"
            )
            raise AssertionError(f"your {name} accuracy is not what this model scores on the 32-item task: {cause}")
    if measured["attention"] - measured["mean"] < 0.2:
        raise AssertionError(
            "attention is not clearly ahead of mean pooling on the 32-item task: train both as in the chapter"
        )
    return "correct: both accuracies are what your models score on the 32-item task"


def hidden_check_ex1(weights_equal_scores: Sequence[float], shift_changes_weights: bool) -> None:
    """Hidden test of Ex. 1: the weights to 1e-12 against a softmax of 4 equal scores computed here, and (b) again.

    Raises ``AssertionError``.
    """
    w = torch.as_tensor(weights_equal_scores, dtype=torch.float64)
    want = torch.softmax(torch.full((4,), 3.7, dtype=torch.float64), -1)
    if w.shape != (4,) or not torch.allclose(w, want, atol=1e-12, rtol=0):
        raise AssertionError("the weights are not exact: give the value the softmax gives, not a rounded one")
    if bool(torch.as_tensor(shift_changes_weights)):
        raise AssertionError("(b) is not right yet: write out the softmax of the shifted scores e_l + b")


def hidden_check_ex2(fn: Callable[..., Sequence[float]]) -> None:
    """Hidden test of Ex. 2: other sizes (d_k = 1, 4, 11; n_f = 1, 3; d_v = 1, 5) and scores near -10^4.

    A scale fixed to the visible check's d_k fails here. Raises ``AssertionError``.
    """
    gg = torch.Generator().manual_seed(55)
    for d_k, n_f, d_v, scale in ((4, 3, 5, 1.0), (1, 3, 1, 1.0), (11, 1, 2, 1.0), (4, 3, 5, -1e4)):
        qx = scale * torch.rand(d_k, generator=gg, dtype=torch.float64)
        Kx, Vx = (
            torch.randn(n_f, d_k, generator=gg, dtype=torch.float64),
            torch.randn(n_f, d_v, generator=gg, dtype=torch.float64),
        )
        c_ref, _ = gm.attend(qx[None], Kx, Vx)
        got = torch.as_tensor(run_by_hand(fn, qx, Kx, Vx, what=f"d_k={d_k}, n_f={n_f}, d_v={d_v}"), dtype=torch.float64)
        if got.shape != c_ref[0].shape or not torch.allclose(got, c_ref[0], atol=1e-9, rtol=1e-9):
            raise AssertionError(
                f"d_k={d_k}, n_f={n_f}, d_v={d_v}: context differs from attend "
                "(take every size from the inputs: the scale uses the key size)"
            )


def hidden_check_ex3(model_mean: gm.TaskModel, model_attention: gm.TaskModel) -> None:
    """Hidden test of Ex. 3: both models on a second sample of the 32-item task (2000 examples, seed 2).

    Attention must stay clearly ahead (by 0.2) and mean pooling well below
    attention's level. Raises ``AssertionError``.
    """
    from ..experiments.general_model import evaluate_match_query

    if getattr(model_mean, "pool", None) != "mean" or getattr(model_attention, "pool", None) != "attention":
        raise AssertionError("pass the mean-pooling model first and the attention model second")
    with torch.no_grad():
        acc = {
            name: evaluate_match_query(m, 2000, torch.Generator().manual_seed(2), **EX3_TASK)["accuracy"]
            for name, m in (("mean", model_mean), ("attention", model_attention))
        }
    if acc["attention"] - acc["mean"] < 0.2:
        raise AssertionError("on other 32-item examples attention is not clearly ahead: train both as in the chapter")
