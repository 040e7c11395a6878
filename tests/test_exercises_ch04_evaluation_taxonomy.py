"""Exercise self-checks of ch04_evaluation_taxonomy: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import taxonomy as tx
from attnsurvey.exercises import ch04_evaluation_taxonomy as ex


def _fewest():
    return sum(max(len(getattr(r.point, d)) for d in tx.DIMENSIONS) for r in tx.TABLE3)


def test_ex1_solution_passes():
    assert _fewest() == 19  # 15 rows without alternatives, Luong et al. and Xu et al. two models each
    assert "correct" in ex.check_ex1(19)
    assert "correct" in ex.check_ex1(19.0)


@pytest.mark.parametrize(
    "wrong",
    [
        21,  # the largest sets, Eq. (eq-ch04-configs), pasted from the chapter's printout
        17,  # one model per row
        20,  # Luong et al.'s row counted as 2 + 2 - 1 (alternatives added)
        None,  # left blank
        19.5,
    ],
)
def test_ex1_plausible_wrong_answers_fail(wrong):
    with pytest.raises(AssertionError):
        ex.check_ex1(wrong)


def test_ex1_hint_does_not_state_the_answer():
    with pytest.raises(AssertionError) as err:
        ex.check_ex1(21)
    assert "19" not in str(err.value) and "max" not in str(err.value)


def _rows_using(value):
    return [r.id for r in tx.TABLE3 if any(value in alt for d in tx.DIMENSIONS for alt in getattr(r.point, d))]


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_rows_using)
    assert "correct" in ex.check_ex2(lambda v: tuple(reversed(_rows_using(v))))  # any order, any sequence


def test_ex2_exact_single_alternatives_fail():
    """Missing the "+" groups: a row that combines self-attention with another query type is left out."""

    def alone(value):
        return [r.id for r in tx.TABLE3 if any((value,) == alt for d in tx.DIMENSIONS for alt in getattr(r.point, d))]

    with pytest.raises(AssertionError, match="missing"):
        ex.check_ex2(alone)


def test_ex2_substring_of_the_printed_cell_fails():
    """'multiplicative' is a substring of 'scaled-multiplicative'."""

    def substring(value):
        return [r.id for r in tx.TABLE3 if any(value in text for text in r.point.as_strings().values())]

    with pytest.raises(AssertionError, match="listed"):
        ex.check_ex2(substring)


def test_ex2_first_alternative_only_fails():
    def first(value):
        return [r.id for r in tx.TABLE3 if any(value in getattr(r.point, d)[0] for d in tx.DIMENSIONS)]

    with pytest.raises(AssertionError, match="missing"):
        ex.check_ex2(first)


def test_ex2_duplicates_and_crashes_fail_with_a_message():
    with pytest.raises(AssertionError, match="more than once"):
        ex.check_ex2(lambda v: _rows_using(v) * 2)
    with pytest.raises(AssertionError, match="your function failed"):
        ex.check_ex2(lambda v: tx.table3_row(v))


def test_ex2_messages_do_not_list_the_rows():
    with pytest.raises(AssertionError) as err:
        ex.check_ex2(lambda v: [])
    assert "table3:row" not in str(err.value)


def _zhang(**change):
    z = tx.table3_row("table3:row11").point
    return tx.TaxonomyPoint(**{**{d: getattr(z, d) for d in tx.DIMENSIONS}, **change})


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_zhang(query_type=(("basic",),)))


def test_ex3_changing_two_dimensions_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_zhang(query_type=(("basic",),), scoring=(("additive",),)))
    with pytest.raises(AssertionError):
        ex.check_ex3(_zhang(query_type=(("self-attention", "basic"),)))


def test_hidden_ex1_accepts_the_solution_and_rejects_the_largest_sets():
    ex.hidden_check_ex1(19)
    with pytest.raises(AssertionError, match="row by row"):
        ex.hidden_check_ex1(21)


def test_hidden_ex2_accepts_the_solution_and_rejects_exact_single_alternatives():
    ex.hidden_check_ex2(_rows_using)
    with pytest.raises(AssertionError, match="missing"):
        ex.hidden_check_ex2(
            lambda v: [r.id for r in tx.TABLE3 if any((v,) == a for d in tx.DIMENSIONS for a in getattr(r.point, d))]
        )


def test_hidden_ex3_accepts_the_solution_and_rejects_a_self_attention_query():
    from attnsurvey.data.taxonomy_tasks import two_marker_task

    g = torch.Generator().manual_seed(0)
    data = two_marker_task(512, 8, 16, 4, g), two_marker_task(512, 8, 16, 4, g)
    ex.hidden_check_ex3(_zhang(query_type=(("basic",),)), *data)
    with pytest.raises(AssertionError, match="query must be basic"):
        ex.hidden_check_ex3(_zhang(), *data)
