"""Each self-check of chapter 6.7 accepts the solution and rejects plausible wrong answers."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.beyond import delta_rule as dr
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

    def by_package(K, beta, log_g):  # the check's own reference: the package's recurrence from S_0 = I, zero values
        zero = torch.zeros_like(K)
        return dr.delta_rule_recurrent(zero, K, zero, beta, log_g, S0=torch.eye(K.shape[-1], dtype=K.dtype))[1]

    def in_place(K, beta, log_g):  # the right value, with the caller's log-gates overwritten by their cumulative sum
        return log_g.cumsum_(0)[-1].exp() * right_carry(K, beta, torch.zeros_like(log_g))

    def ratios(K, beta, log_g):  # each step's gate as a ratio of running products Gamma_t / Gamma_{t-1}: 0 / 0 later
        gamma = torch.cat([log_g.new_ones(1), log_g.cumsum(0).exp()])
        eye = torch.eye(K.shape[-1], dtype=K.dtype)
        A = eye
        for t, (k, b) in enumerate(zip(K, beta, strict=True)):
            A = (gamma[t + 1] / gamma[t]) * (eye - b * torch.outer(k, k)) @ A
        return A

    for wrong, hint in ((reversed_order, "wrong order"), (no_gate, "gates are missing"), (first_order, "first order"),
                        (no_beta, "not right"), (old_shortcut, "matrix A"), (by_package, "package's delta rule"),
                        (in_place, "in place"), (ratios, "not finite"),
                        (lambda K, b, g: right_carry(K, b, g).float(), "dtype")):  # fmt: skip
        with pytest.raises(AssertionError, match=hint):
            ex.check_chunk_carry(wrong)
    assert not hasattr(ex, "chunk_carry_by_recurrence")  # the reference is not handed to the reader as ex.<name>
    # strong decay is compared at A's own scale (entries near 1e-260, whose squares underflow): the order shows there too
    strong = [case for case in ex._CARRY_CASES if case[-1] < 0][:1]
    assert float(ex._carry_by_recurrence(*ex._carry_case(*strong[0])).abs().max()) < 1e-250
    assert "wrong order" in (ex._carry_hint(reversed_order, strong) or "")


def right_parallel(Q, K, V, log_alpha):
    L = log_alpha.cumsum(0)
    future = torch.ones(Q.shape[0], Q.shape[0], dtype=torch.bool).triu(1)
    decay = (L[:, None, :] - L[None, :, :]).masked_fill(future[..., None], float("-inf")).exp()
    return (Q[:, None, :] * K[None, :, :] * decay).sum(-1) @ V


def test_gla_parallel():
    ex.check_gla_parallel(right_parallel)
    ex.hidden_check_gla_parallel(right_parallel)

    def select_after_exp(Q, K, V, la_):  # the future selected away after the exponential: finite outputs, right
        L = la_.cumsum(0)
        future = torch.ones(Q.shape[0], Q.shape[0], dtype=torch.bool).triu(1)[..., None]
        decay = (L[:, None, :] - L[None, :, :]).exp().masked_fill(future, 0)
        return (Q[:, None, :] * K[None, :, :] * decay).sum(-1) @ V

    ex.check_gla_parallel(select_after_exp)

    def rescaled(Q, K, V, la_):  # q_i e^{L_i}, k_j e^{-L_j}: right in exact arithmetic, e^{-L} overflows
        L = la_.cumsum(0)
        return ((Q * L.exp()) @ (K * (-L).exp()).T).tril() @ V

    def rescaled_mid(Q, K, V, la_):  # the same, centred on the middle position: finite over a span of 1400, not 1900
        L = la_.cumsum(0)
        L = L - L[Q.shape[0] // 2]
        return ((Q * L.exp()) @ (K * (-L).exp()).T).tril() @ V

    def mask_after_exp(Q, K, V, la_):  # e^{L_i - L_j} for all (i, j), the future cut afterwards: inf * 0
        L = la_.cumsum(0)
        A = (Q[:, None, :] * K[None, :, :] * (L[:, None, :] - L[None, :, :]).exp()).sum(-1)
        return (A * torch.ones_like(A).tril()) @ V

    def scalar(Q, K, V, la_):  # the gate averaged over the key coordinates
        return right_parallel(Q, K, V, la_.mean(-1, keepdim=True).expand_as(la_))

    def own_gate(Q, K, V, la_):  # the newest pair decayed by its own gate too
        return right_parallel(Q, K * la_.exp(), V, la_)

    def growth(Q, K, V, la_):  # e^{L_j - L_i}: the difference of the cumulative gates taken the wrong way round
        return right_parallel(Q, K, V, -la_)

    def old_step(S, q, k, v, la_):  # the old exercise's one-step answer
        S = la_.exp()[:, None] * S + k[:, None] * v[None, :]
        return S.T @ q, S

    def loop(Q, K, V, la_):  # the recurrence itself, one position at a time: right values, not a parallel form
        S, out = torch.zeros(Q.shape[1], V.shape[1], dtype=Q.dtype), []
        for q, k, v, a in zip(Q, K, V, la_.exp(), strict=True):
            S = a[:, None] * S + torch.outer(k, v)
            out.append(S.T @ q)
        return torch.stack(out)

    def overwrites(Q, K, V, la_):  # the right value, after turning the caller's log-gates into their cumulative sum
        L = la_.cumsum_(0)
        future = torch.ones(Q.shape[0], Q.shape[0], dtype=torch.bool).triu(1)
        decay = (L[:, None, :] - L[None, :, :]).masked_fill(future[..., None], float("-inf")).exp()
        return (Q[:, None, :] * K[None, :, :] * decay).sum(-1) @ V

    for wrong, hint in ((rescaled, "not finite"), (rescaled_mid, "not finite"), (mask_after_exp, "not finite"),
                        (scalar, "average"), (own_gate, "newest pair"), (growth, "wrong later"),
                        (old_step, "failed|tensor"), (loop, "torch operations"), (overwrites, "in place")):  # fmt: skip
        with pytest.raises(AssertionError, match=hint):
            ex.check_gla_parallel(wrong)
    assert not hasattr(ex, "vector_gate_outputs")  # the loop that the check compares with is not handed to the reader


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
