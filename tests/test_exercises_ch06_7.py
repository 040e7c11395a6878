"""Each self-check of chapter 6.7 accepts the solution and rejects plausible wrong answers."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.beyond import linear_attention as la
from attnsurvey.exercises import ch06_7_recurrent as ex
from attnsurvey.experiments.recall import run_recall


def right_carry(K, beta, log_g):
    A = torch.eye(K.shape[-1], dtype=K.dtype)
    for k, b in zip(K, beta, strict=True):
        A = (torch.eye(K.shape[-1], dtype=K.dtype) - b * torch.outer(k, k)) @ A
    return log_g.sum().exp() * A


def test_chunk_carry():
    ex.check_chunk_carry(right_carry)
    ex.hidden_check_chunk_carry(right_carry)
    K, beta, log_g = ex._carry_case(0, 4, 3, 2.0)
    assert not torch.allclose(right_carry(K, beta, log_g), right_carry(K, beta, log_g).T)  # the order is tested

    def reversed_order(K, beta, log_g):  # the first step's factor on the left
        return right_carry(K, beta, log_g).T

    def no_gate(K, beta, log_g):  # DeltaNet's carry: the decay left out
        return right_carry(K, beta, torch.zeros_like(log_g))

    def first_order(K, beta, log_g):  # I - sum_t beta_t k_t k_t^T: the products of the factors dropped
        return log_g.sum().exp() * (torch.eye(K.shape[-1], dtype=K.dtype) - (beta[:, None] * K).T @ K)

    def no_beta(K, beta, log_g):  # the factors I - k k^T, full removal
        return right_carry(K, torch.ones_like(beta), log_g)

    def old_shortcut(K, beta, log_g):  # the scalar gate's last row of the decay matrix
        return float(log_g.sum().exp()), la.decay_matrix(log_g)[-1]

    for wrong, hint in ((reversed_order, "wrong order"), (no_gate, "gates are missing"), (first_order, "first order"),
                        (no_beta, "not right"), (old_shortcut, "matrix A")):  # fmt: skip
        with pytest.raises(AssertionError, match=hint):
            ex.check_chunk_carry(wrong)


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
