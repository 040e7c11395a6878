"""Exercise 2 of the conformance appendix: the check accepts the right prediction and rejects plausible wrong ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsurvey.conformance import toy


def _right(B, h, n_q, n_dead):
    return B * h * n_q - h * n_dead  # every row differs, except the h rows of each fully-masked query


def test_the_measured_count_is_the_derived_one_on_every_size_the_checks_use():
    for case in ((2, 3, 4, 5, 1), (3, 2, 3, 4, 2), (1, 1, 6, 6, 0), (2, 4, 4, 4, 3), (2, 2, 3, 5, 6), (4, 3, 2, 3, 5)):
        B, h, n_q, n_f, n_dead = case
        assert toy._rows_left_measured(B, h, n_q, n_f, n_dead, seed=B + h + n_q + n_dead) == _right(B, h, n_q, n_dead)


def test_a_correct_adapter_leaves_no_row_and_the_forgetful_one_is_unexplained():
    # the measurement is not a formula in disguise: the verdict of the conformance machinery agrees with it
    result = toy.evaluate(
        toy.toy_check(
            lambda t, Q, K, V, m: t(Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), m).transpose(1, 2),
            2,
            3,
            4,
            5,
            2,
        )
    )
    assert result.status == "differs" and result.convention is None


def test_the_right_prediction_passes_both_checks(capsys):
    toy.check_rows_left(_right)
    toy.hidden_check_rows_left(_right)
    out = capsys.readouterr().out
    assert "correct" in out and "hidden check passed" in out
    toy.check_rows_left(lambda B, h, n_q, n_dead: float(_right(B, h, n_q, n_dead)))  # 21.0 is a whole number


@pytest.mark.parametrize("integer", [np.int64, np.int32, torch.tensor], ids=["np.int64", "np.int32", "0-d tensor"])
def test_integer_like_answers_are_whole_numbers(integer, capsys):
    # a NumPy integer or a 0-d integer tensor is a count like an int; before, "give a whole number of rows" refused it
    toy.check_rows_left(lambda B, h, n_q, n_dead: integer(_right(B, h, n_q, n_dead)))
    toy.hidden_check_rows_left(lambda B, h, n_q, n_dead: integer(_right(B, h, n_q, n_dead)))
    assert "hidden check passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "not_a_count",
    [
        lambda r: r + 0.5,
        lambda r: True,
        lambda r: np.True_,
        lambda r: torch.tensor(True),
        lambda r: torch.tensor(float(r)),
        lambda r: torch.tensor([r]),
    ],
    ids=["21.5", "True", "np.True_", "bool tensor", "float tensor", "1-d tensor"],
)
def test_fractions_bools_and_non_scalars_are_still_refused(not_a_count):
    with pytest.raises(AssertionError, match="whole number"):
        toy.check_rows_left(lambda B, h, n_q, n_dead: not_a_count(_right(B, h, n_q, n_dead)))


def test_the_measurement_is_private_and_an_answer_that_calls_it_is_refused():
    assert not hasattr(toy, "rows_left_measured")  # no public name (and so no entry on the API page)
    assert "_rows_left_measured" not in (toy.check_rows_left.__doc__ or "")  # not documented as the answer
    with pytest.raises(AssertionError, match="not from the checker's measurement"):
        toy.check_rows_left(lambda B, h, n_q, n_dead: toy._rows_left_measured(B, h, n_q, 3, n_dead))
    with pytest.raises(AssertionError, match="not from the checker's measurement"):
        toy.hidden_check_rows_left(lambda B, h, n_q, n_dead: toy._rows_left_measured(B, h, n_q, 3, n_dead))
    assert toy._rows_left_measured(2, 3, 4, 5, 1, seed=10) == _right(2, 3, 4, 1)  # outside a check it still measures


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        pytest.param(lambda B, h, n_q, n_dead: 0, "convention would explain", id="the-convention-explains-it"),
        pytest.param(
            lambda B, h, n_q, n_dead: B * h * n_q, "mapping does make some rows agree", id="mapping-changes-nothing"
        ),
        pytest.param(
            lambda B, h, n_q, n_dead: B * h * n_q - n_dead, "how many rows does one query own", id="queries-not-rows"
        ),
        pytest.param(lambda B, h, n_q, n_dead: h * n_dead, "kinds of query", id="only-the-dead-rows"),
        pytest.param(lambda B, h, n_q, n_dead: B * n_q - n_dead, "kinds of query", id="heads-forgotten"),
    ],
)
def test_plausible_wrong_predictions_fail_with_a_hint_that_names_no_count(wrong, hint):
    with pytest.raises(AssertionError, match=hint) as err:
        toy.check_rows_left(wrong)
    assert str(_right(2, 3, 4, 1)) not in str(err.value)  # the first case the check tries
    with pytest.raises(AssertionError):
        toy.hidden_check_rows_left(wrong)


def test_non_numbers_and_failing_functions_are_refused():
    with pytest.raises(AssertionError, match="whole number"):
        toy.check_rows_left(lambda B, h, n_q, n_dead: "21")
    with pytest.raises(AssertionError, match="failed"):
        toy.check_rows_left(lambda B, h, n_q, n_dead: 1 // 0)
