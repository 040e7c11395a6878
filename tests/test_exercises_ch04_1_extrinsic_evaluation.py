"""Exercise self-checks of ch04_1_extrinsic_evaluation: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.evaluation import extrinsic as ex
from attnsurvey.exercises import ch04_1_extrinsic_evaluation as checks


def test_ex1_solution_passes():
    assert "correct" in checks.check_ex1(math.exp(1 - 40 / 30))


def test_ex1_swapped_lengths_fail():
    with pytest.raises(AssertionError):
        checks.check_ex1(math.exp(1 - 30 / 40))


def test_ex1_value_rounded_as_in_the_solution_passes():
    assert "correct" in checks.check_ex1(0.7165)  # the Solution box prints "approx. 0.7165"


def test_ex1_too_coarse_rounding_fails_with_a_rounding_hint():
    with pytest.raises(AssertionError, match="four decimals"):
        checks.check_ex1(0.72)


def _cer(references, hypotheses, by_hypothesis=False):
    errors = sum(sum(ex.edit_counts(list(r), list(h))[:3]) for r, h in zip(references, hypotheses))
    return errors / sum(len(t) for t in (hypotheses if by_hypothesis else references))


def test_ex2_solution_passes():
    assert "correct" in checks.check_ex2(_cer)


def test_ex2_float32_answer_passes():
    assert "correct" in checks.check_ex2(lambda r, h: torch.tensor(_cer(r, h), dtype=torch.float32))


def test_ex2_dividing_by_hypothesis_length_fails():
    with pytest.raises(AssertionError):
        checks.check_ex2(lambda r, h: _cer(r, h, by_hypothesis=True))


def test_ex3_solution_passes():
    def drop(model, x, y):
        learned, uniform = ex.uniform_attention_ablation(model, x, y)
        return learned - uniform

    assert "correct" in checks.check_ex3(drop)


def test_ex3_reversed_sign_fails():
    def drop(model, x, y):
        learned, uniform = ex.uniform_attention_ablation(model, x, y)
        return uniform - learned

    with pytest.raises(AssertionError):
        checks.check_ex3(drop)


def test_hidden_ex1_accepts_the_solution_and_rejects_a_value_rounded_the_wrong_way():
    checks.hidden_check_ex1(math.exp(1 - 40 / 30))
    checks.hidden_check_ex1(0.7165)
    assert "correct" in checks.check_ex1(0.71656)  # within the visible tolerance ...
    with pytest.raises(AssertionError, match="four decimals"):
        checks.hidden_check_ex1(0.71656)  # ... but it rounds to the wrong fourth decimal


def test_hidden_ex2_accepts_the_solution_and_rejects_the_hypothesis_length():
    checks.hidden_check_ex2(_cer)
    checks.hidden_check_ex2(lambda r, h: torch.tensor(_cer(r, h), dtype=torch.float32))
    with pytest.raises(AssertionError, match="your function failed|disagrees"):
        checks.hidden_check_ex2(lambda r, h: _cer(r, h, by_hypothesis=True))  # fails on the empty hypothesis


def test_hidden_ex3_accepts_the_solution_and_rejects_the_learned_accuracy_alone():
    checks.hidden_check_ex3(lambda m, x, y: (lambda lu: lu[0] - lu[1])(ex.uniform_attention_ablation(m, x, y)))
    with pytest.raises(AssertionError, match="learned minus uniform"):
        checks.hidden_check_ex3(lambda m, x, y: ex.uniform_attention_ablation(m, x, y)[0])
