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


def test_ex2_hint_does_not_state_the_key_step():
    """The message points to the WER paragraph; it does not say what to sum or what to divide by."""
    with pytest.raises(AssertionError) as caught:
        checks.check_ex2(lambda r, h: _cer(r, h, by_hypothesis=True))
    message = str(caught.value).lower()
    for step in ("sum", "divide", "reference characters", "s + d + i"):
        if step in message:
            raise AssertionError(f"the ex. 2 hint states the step ({step!r}): {message}")


def _drop(model, x, y):
    learned, uniform = ex.uniform_attention_ablation(model, x, y)
    return learned - uniform


# drops like the chapter's: at 20 tokens its stored per-seed values, at 10 tokens values near its 0.75 ± 0.02;
# their paired interval includes zero
DROPS10 = [0.752, 0.72, 0.766, 0.756, 0.74]
DROPS20 = [0.718, 0.718, 0.542, 0.66, 0.766]
RESOLVED_LESS = [0.40, 0.42, 0.41, 0.39, 0.43]


def test_ex3_solution_passes():
    assert "correct" in checks.check_ex3(_drop, "unresolved", DROPS10, DROPS20)
    assert "correct" in checks.check_ex3(_drop, "less", DROPS10, RESOLVED_LESS)
    assert "correct" in checks.check_ex3(_drop, "more", RESOLVED_LESS, DROPS10)


def test_ex3_reversed_sign_fails():
    def drop(model, x, y):
        learned, uniform = ex.uniform_attention_ablation(model, x, y)
        return uniform - learned

    with pytest.raises(AssertionError):
        checks.check_ex3(drop, "unresolved", DROPS10, DROPS20)


@pytest.mark.parametrize(
    ("verdict", "drops20"),
    [
        ("less", DROPS20),  # the mean is lower (-0.07), but the interval includes zero
        ("more", DROPS20),  # "a plain average over 20 tokens dilutes the signal more": the expectation, not the result
        ("unresolved", RESOLVED_LESS),
        ("hardly", DROPS20),  # not one of the three words
    ],
)
def test_ex3_wrong_verdicts_fail(verdict, drops20):
    with pytest.raises(AssertionError, match="replacement_hurts"):
        checks.check_ex3(_drop, verdict, DROPS10, drops20)


def test_ex3_unpaired_drops_fail():
    with pytest.raises(AssertionError, match="same seeds"):
        checks.check_ex3(_drop, "unresolved", DROPS10, DROPS20[:3])


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
    checks.hidden_check_ex3(_drop, "unresolved", DROPS10, DROPS20)
    with pytest.raises(AssertionError, match="learned minus uniform"):
        checks.hidden_check_ex3(
            lambda m, x, y: ex.uniform_attention_ablation(m, x, y)[0], "unresolved", DROPS10, DROPS20
        )
    with pytest.raises(AssertionError, match="one drop per seed"):
        checks.hidden_check_ex3(_drop, "unresolved", DROPS10[:4], DROPS20[:4])
    with pytest.raises(AssertionError, match="replacement_hurts"):
        checks.hidden_check_ex3(_drop, "less", DROPS10, DROPS20)
