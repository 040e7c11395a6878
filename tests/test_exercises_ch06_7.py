"""Each self-check of chapter 6.7 accepts the solution and rejects plausible wrong answers."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.exercises import ch06_7_recurrent as ex
from attnsurvey.experiments.recall import run_recall


def right_weights(log_g):
    L = log_g.cumsum(-1)
    return float(L[-1].exp()), (L[-1] - L).exp()


def test_chunk_state_weights():
    ex.check_chunk_state_weights(right_weights)
    ex.hidden_check_chunk_state_weights(right_weights)
    for wrong, hint in (
        (lambda lg: (1.0, right_weights(lg)[1]), "carried state"),  # S_0 not decayed
        (lambda lg: (right_weights(lg)[0], right_weights(lg)[1] * lg.exp()), "before or after"),  # own gate too
        (lambda lg: (right_weights(lg)[0], lg.cumsum(-1).exp()), "wrong way"),  # decayed from the chunk's start
        (lambda lg: (right_weights(lg)[0], torch.ones_like(lg)), "not right"),  # no decay of the pairs
        (lambda lg: right_weights(lg)[1], "pair"),  # only w
        # right in exact arithmetic, but the running products of strong gates underflow to 0 / 0
        (lambda lg: (float(lg.exp().prod()), lg.exp().prod() / lg.exp().cumprod(-1)), "not finite"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_chunk_state_weights(wrong)


def right_step(S, q, k, v, log_alpha):
    S = log_alpha.exp()[:, None] * S + k[:, None] * v[None, :]
    return S.T @ q, S


def test_gla_step():
    ex.check_gla_step(right_step)
    ex.hidden_check_gla_step(right_step)

    def value_axis(S, q, k, v, la):  # the gate on the value axis: a shape error when d_k != d_v
        S = S * la.exp()[None, :] + k[:, None] * v[None, :]
        return S.T @ q, S

    def after_write(S, q, k, v, la):  # the gate applied after the write
        S = la.exp()[:, None] * (S + k[:, None] * v[None, :])
        return S.T @ q, S

    def scalar(S, q, k, v, la):  # the gate averaged into one scalar
        S = la.mean().exp() * S + k[:, None] * v[None, :]
        return S.T @ q, S

    def old_state(S, q, k, v, la):  # read before the write
        new = la.exp()[:, None] * S + k[:, None] * v[None, :]
        return S.T @ q, new

    for wrong, hint in ((value_axis, "failed|shapes"), (after_write, "newest pair"), (scalar, "average"),
                        (old_state, "after this step")):  # fmt: skip
        with pytest.raises(AssertionError, match=hint):
            ex.check_gla_step(wrong)


TASK = {"n_queries": None, "n_keys": 16, "n_values": 16}
RUN = {"steps": 2, "batch": 4, "lr": 3e-2, "d_model": 8, "n_heads": 2}


def test_longer_training(monkeypatch):
    monkeypatch.setitem(ex.EX3, "steps", 30)  # a small run: the check's logic, not the chapter's numbers
    ex._longer_run.cache_clear()
    task = {**TASK, "n_pairs": ex.EX3["n_pairs"]}
    run = {k: v for k, v in RUN.items() if k != "steps"}
    right = run_recall(ex.EX3["mixer"], task, ex.EX3["seed"], 30, **run)
    ex.check_longer_training(right, TASK, RUN)
    ex.hidden_check_longer_training(right, TASK, RUN)
    short = run_recall(ex.EX3["mixer"], task, ex.EX3["seed"], RUN["steps"], **run)
    other = run_recall("softmax", task, ex.EX3["seed"], 30, **run)
    assert short != right and other != right  # the wrong answers below differ from the right one
    for wrong, hint in ((short, "chapter's number of steps"), (other, "not the accuracy"), ("high", "one number")):
        with pytest.raises(AssertionError, match=hint):
            ex.check_longer_training(wrong, TASK, RUN)
    ex._longer_run.cache_clear()
