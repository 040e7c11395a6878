"""Chapter 3.1.1 exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data import aspect
from attnsurvey.exercises import ch03_1_1_feature_multiplicity as ex
from attnsurvey.experiments.feature_related import evaluate_aspect, train_aspect
from attnsurvey.feature_related import co_attention as ca


def test_ex1_rejects_a_score_with_the_wrong_activation():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda K1, W1, w1: (K1 @ W1.T) @ w1)  # forgot the activation


@pytest.mark.parametrize("act", [torch.relu, torch.sigmoid], ids=["relu", "sigmoid"])
def test_ex1_names_the_activation_for_another_activation(act):
    with pytest.raises(AssertionError, match="tanh"):
        ex.check_ex1(lambda K1, W1, w1: act(K1 @ W1.T) @ w1)


def test_ex1_accepts_the_column_form_in_float64():
    assert "correct" in ex.check_ex1(lambda K1, W1, w1: (w1.double() @ torch.tanh(W1.double() @ K1.double().T)))


def test_ex1_accepts_the_solution():
    assert "correct" in ex.check_ex1(lambda K1, W1, w1: ca.queryless_additive_score(K1, W1, w1, None))


def test_ex2_rejects_swapped_axes():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda A: (A.mean(-2), A.mean(-1)))


def test_ex2_rejects_max_pooling():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda A: (A.max(-1).values, A.max(-2).values))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(lambda A: (A.mean(-1), A.mean(-2)))


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


def test_hidden_ex1_accepts_the_solution_and_rejects_a_whole_tensor_transpose():
    ex.hidden_check_ex1(lambda K1, W1, w1: ca.queryless_additive_score(K1, W1, w1, None))

    def transposed(K1, W1, w1):
        return w1 @ torch.tanh(W1 @ K1.T)  # right for one key set only

    assert "correct" in ex.check_ex1(transposed)
    with pytest.raises(AssertionError, match="batch of key sets"):
        ex.hidden_check_ex1(transposed)


def test_hidden_ex2_accepts_the_solution_and_rejects_means_over_fixed_axes():
    ex.hidden_check_ex2(lambda A: (A.mean(-1), A.mean(-2)))
    fixed = lambda A: (A.mean(1), A.mean(0))
    assert "correct" in ex.check_ex2(fixed)
    with pytest.raises(AssertionError, match="batch of affinity matrices"):
        ex.hidden_check_ex2(fixed)


def test_hidden_ex3_accepts_the_solution_and_rejects_a_small_test_set(models):
    rot, tgt = models
    data = aspect.make_aspect(500, p_empty=0.9, generator=torch.Generator().manual_seed(3))
    ex.hidden_check_ex3(data, *[evaluate_aspect(m, data)["accuracy"] for m in models])
    small = aspect.make_aspect(200, p_empty=0.9, generator=torch.Generator().manual_seed(1))
    acc = [evaluate_aspect(m, small)["accuracy"] for m in models]
    assert "correct" in ex.check_ex3(rot, tgt, small, *acc)
    with pytest.raises(AssertionError, match="500 sentences"):
        ex.hidden_check_ex3(small, *acc)
