"""Exercise self-checks of ch03_3_1_query_types: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data.sentiment import keyword_features
from attnsurvey.exercises import ch03_3_1_query_types as ex
from attnsurvey.query_related import types as qt


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda r, n: r * (1 - 1 / n) ** 2 + r * (r - 1) / n**2)


@pytest.mark.parametrize(
    "penalty",
    [
        lambda r, n: torch.tensor(r * (1 - 1 / n) ** 2 + r * (r - 1) / n**2),  # a float32 tensor
        lambda r, n: qt.redundancy_penalty(torch.full((r, n), 1.0 / n)),  # computed numerically in float32
    ],
)
def test_ex1_float32_answers_pass(penalty):
    assert "correct" in ex.check_ex1(penalty)


def test_ex1_forgotten_off_diagonal_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda r, n: r * (1 - 1 / n) ** 2)


def _two_layers(F, weights, residual=True):
    for W_q, W_k, W_v in weights:
        C, _ = qt.self_attention(F, W_q, W_k, W_v)
        F = qt.update_residual_norm(F, C) if residual else qt.update_replace(F, C)
    return F


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_two_layers)


def test_ex2_replacement_instead_of_residual_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda F, w: _two_layers(F, w, residual=False))


RESULTS = {"learned query": [0.9, 0.92, 0.88, 0.91, 0.9], "mean pooling": [0.5, 0.52, 0.49, 0.55, 0.5]}


def _noisy(n, g):
    return keyword_features(n, 12, 4, noise=0.4, generator=g)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_noisy, RESULTS, "learned query")


def test_ex3_default_noise_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda n, g: keyword_features(n, 12, 4, generator=g), RESULTS, "learned query")


def test_ex3_unsupported_verdict_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_noisy, RESULTS, "mean pooling")
