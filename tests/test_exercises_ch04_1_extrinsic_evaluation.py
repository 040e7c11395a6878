"""Exercise self-checks of ch04_1_extrinsic_evaluation: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.evaluation import extrinsic as ex
from attnsurvey.exercises import ch04_1_extrinsic_evaluation as checks

C_HALF = 40 / (1 + math.log(2))  # BP = exp(1 - r / c) = 1/2 with r = 40


def test_ex1_solution_passes():
    assert "correct" in checks.check_ex1(C_HALF)
    assert "correct" in checks.check_ex1(23.62)  # two decimals, as the exercise asks
    assert "correct" in checks.check_ex1(torch.tensor(C_HALF))


@pytest.mark.parametrize(
    "wrong",
    [
        40 / 2,  # half the reference length: the case the chapter displays (BP = e^-1)
        40 * math.log(2),  # r ln 2: solving r / c = ln 2 instead of 1 - r / c = -ln 2
        40 / (1 - math.log(2)),  # a sign slip: longer than r, where BP is 1
        math.exp(1 - 40 / 30),  # the old exercise's penalty, pasted
    ],
)
def test_ex1_plausible_wrong_answers_fail(wrong):
    with pytest.raises(AssertionError, match="gives BP"):
        checks.check_ex1(wrong)
    with pytest.raises(AssertionError):
        checks.hidden_check_ex1(wrong)


def test_ex1_hint_does_not_state_the_answer():
    with pytest.raises(AssertionError) as err:
        checks.check_ex1(20)
    assert "23.6" not in str(err.value) and "1 + ln" not in str(err.value) and "log(2)" not in str(err.value)


@pytest.mark.parametrize("blank", [None, True, "23.62", float("nan"), -23.62])
def test_ex1_blank_or_non_numbers_fail_with_a_message(blank):
    with pytest.raises(AssertionError, match="c_half"):
        checks.check_ex1(blank)


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


def test_hidden_ex1_accepts_the_solution_and_rejects_a_length_off_by_a_hundredth():
    checks.hidden_check_ex1(C_HALF)
    checks.hidden_check_ex1(23.62)
    with pytest.raises(AssertionError, match="brevity penalty of 1/2"):
        checks.hidden_check_ex1(C_HALF + 0.01)


def test_hidden_ex2_accepts_the_solution_and_rejects_the_hypothesis_length():
    checks.hidden_check_ex2(_cer)
    checks.hidden_check_ex2(lambda r, h: torch.tensor(_cer(r, h), dtype=torch.float32))
    with pytest.raises(AssertionError, match="your function failed|disagrees"):
        checks.hidden_check_ex2(lambda r, h: _cer(r, h, by_hypothesis=True))  # fails on the empty hypothesis


def test_hidden_ex3_accepts_the_solution_and_rejects_the_learned_accuracy_alone():
    checks.hidden_check_ex3(lambda m, x, y: (lambda lu: lu[0] - lu[1])(ex.uniform_attention_ablation(m, x, y)))
    with pytest.raises(AssertionError, match="learned minus uniform"):
        checks.hidden_check_ex3(lambda m, x, y: ex.uniform_attention_ablation(m, x, y)[0])
