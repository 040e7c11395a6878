"""Chapter 3.1.1 exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data import aspect
from attnsurvey.exercises import ch03_1_1_feature_multiplicity as ex
from attnsurvey.experiments.feature_related import evaluate_aspect, train_aspect


def _constant_affinity_solution(K2, W2):
    return K2.mean(-2), K2.shape[-2] * W2  # the mean key of Eq. (10) as query, n_f^(2) W_2 as its map


def test_ex1_rejects_the_zero_affinity_answer():
    """The case A = 0 (the previous version of the exercise): set 2 drops out."""
    with pytest.raises(AssertionError, match="do not depend on set 2"):
        ex.check_ex1(lambda K2, W2: (torch.zeros(K2.shape[-1]), W2))


def test_ex1_rejects_the_mean_key_without_the_count():
    """The plausible slip: the mean key with W_2 itself, a factor n_f^(2) too small."""
    with pytest.raises(AssertionError, match="values differ"):
        ex.check_ex1(lambda K2, W2: (K2.mean(-2), W2))


def test_ex1_rejects_a_query_that_is_not_a_vector():
    with pytest.raises(AssertionError, match="q must be a vector"):
        ex.check_ex1(lambda K2, W2: (K2, W2))


def test_ex1_accepts_the_solution_and_the_equivalent_sum():
    assert "correct" in ex.check_ex1(_constant_affinity_solution)
    assert "correct" in ex.check_ex1(lambda K2, W2: (K2.sum(-2), W2))


def test_ex1_hidden_rejects_a_count_fitted_to_the_visible_check():
    ex.hidden_check_ex1(_constant_affinity_solution)
    fitted = lambda K2, W2: (K2.mean(-2), 5 * W2)  # right only for five keys
    assert "correct" in ex.check_ex1(fitted)
    with pytest.raises(AssertionError, match="number of keys in set 2"):
        ex.hidden_check_ex1(fitted)


def _row_mean_solution(K1, k2_bar, W_A):
    return (K1 @ (W_A @ k2_bar.unsqueeze(-1))).squeeze(-1)


def test_ex2_rejects_the_transposed_map():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda K1, k2_bar, W_A: K1 @ W_A.T @ k2_bar, False)


def test_ex2_rejects_the_activation_left_in():
    with pytest.raises(AssertionError, match="values differ"):
        ex.check_ex2(lambda K1, k2_bar, W_A: torch.tanh(_row_mean_solution(K1, k2_bar, W_A)), False)


@pytest.mark.parametrize("answer", [True, None, "no"])
def test_ex2_rejects_a_wrong_or_missing_tanh_answer(answer):
    with pytest.raises(AssertionError, match="same_with_tanh"):
        ex.check_ex2(_row_mean_solution, answer)


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(_row_mean_solution, False)


def test_ex2_hidden_rejects_an_answer_that_works_for_one_set_only():
    ex.hidden_check_ex2(_row_mean_solution, False)
    one_set = lambda K1, k2_bar, W_A: K1 @ W_A @ k2_bar
    assert "correct" in ex.check_ex2(one_set, False)
    with pytest.raises(AssertionError, match="batch of key sets"):
        ex.hidden_check_ex2(one_set, False)


@pytest.fixture(scope="module")
def models():
    g = torch.Generator().manual_seed(0)
    train = aspect.make_aspect(300, generator=g)
    return (
        train_aspect("rotatory", train, steps=5, batch_size=32, seed=0),
        train_aspect("target-only", train, steps=5, batch_size=32, seed=0),
    )


def test_ex3_rejects_the_ordinary_test_set(models):
    rot, tgt = models
    data = aspect.make_aspect(200, generator=torch.Generator().manual_seed(1))
    acc = [evaluate_aspect(m, data)["accuracy"] for m in models]
    with pytest.raises(AssertionError, match="empty context"):
        ex.check_ex3(rot, tgt, data, *acc)


def test_ex3_rejects_swapped_models(models):
    rot, tgt = models
    data = aspect.make_aspect(200, p_empty=0.9, generator=torch.Generator().manual_seed(1))
    acc = [evaluate_aspect(m, data)["accuracy"] for m in models]
    with pytest.raises(AssertionError):
        ex.check_ex3(tgt, rot, data, acc[1], acc[0])


def test_ex3_accepts_the_solution(models):
    rot, tgt = models
    data = aspect.make_aspect(200, p_empty=0.9, generator=torch.Generator().manual_seed(1))
    acc = [evaluate_aspect(m, data)["accuracy"] for m in models]
    assert "correct" in ex.check_ex3(rot, tgt, data, *acc)


def test_hidden_ex3_accepts_the_solution_and_rejects_a_small_test_set(models):
    rot, tgt = models
    data = aspect.make_aspect(500, p_empty=0.9, generator=torch.Generator().manual_seed(3))
    ex.hidden_check_ex3(data, *[evaluate_aspect(m, data)["accuracy"] for m in models])
    small = aspect.make_aspect(200, p_empty=0.9, generator=torch.Generator().manual_seed(1))
    acc = [evaluate_aspect(m, small)["accuracy"] for m in models]
    assert "correct" in ex.check_ex3(rot, tgt, small, *acc)
    with pytest.raises(AssertionError, match="500 sentences"):
        ex.hidden_check_ex3(small, *acc)
