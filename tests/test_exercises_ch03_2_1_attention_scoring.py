"""Exercise self-checks of ch03_2_1_attention_scoring: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import math

import pytest

from attnsurvey.data.lookup import key_lookup
from attnsurvey.exercises import ch03_2_1_attention_scoring as ex
from attnsurvey.general_mechanisms import scoring as sc


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda d, s: d * s**4, lambda d, s: s**2 * math.sqrt(d))


def test_ex1_sigma_squared_instead_of_fourth_power_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda d, s: d * s**2, lambda d, s: s * math.sqrt(d))


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(lambda Q, K, W: sc.general_score(Q, K, W) / math.sqrt(K.shape[-1]))


def test_ex2_forgotten_scaling_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda Q, K, W: sc.general_score(Q, K, W))


def test_ex2_scaling_by_query_size_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda Q, K, W: sc.general_score(Q, K, W) / math.sqrt(Q.shape[-1]))


RESULTS = {"scaled-multiplicative": [0.61, 0.63, 0.60, 0.64, 0.62], "additive": [0.41, 0.45, 0.40, 0.47, 0.43]}


def _harder(n, g):
    return key_lookup(n, n_f=16, noise=0.8, generator=g)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_harder, RESULTS, "scaled-multiplicative")


def test_ex3_default_task_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda n, g: key_lookup(n, generator=g), RESULTS, "scaled-multiplicative")


def test_ex3_wrong_noise_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda n, g: key_lookup(n, n_f=16, generator=g), RESULTS, "scaled-multiplicative")


def test_ex3_unsupported_verdict_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_harder, RESULTS, "not resolved")


def test_ex3_claiming_a_winner_on_noise_fails():
    tied = {"scaled-multiplicative": [0.6, 0.5, 0.7, 0.55, 0.62], "additive": [0.58, 0.6, 0.61, 0.57, 0.6]}
    with pytest.raises(AssertionError):
        ex.check_ex3(_harder, tied, "scaled-multiplicative")


def test_ex3_one_seed_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_harder, {k: v[:1] for k, v in RESULTS.items()}, "scaled-multiplicative")
