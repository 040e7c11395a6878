"""Exercise self-checks of ch04_evaluation_taxonomy: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import taxonomy as tx
from attnsurvey.exercises import ch04_evaluation_taxonomy as ex


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(8)


def test_ex1_adding_instead_of_multiplying_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(2 + 4)


def test_ex1_not_a_whole_number_fails():
    assert "correct" in ex.check_ex1(8.0)
    with pytest.raises(AssertionError):
        ex.check_ex1(8.9)  # int() would truncate it to the right count


def _combined_rows():
    return [r.id for r in tx.TABLE3 if any(len(alt) > 1 for alt in r.point.query_type)]


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_combined_rows())


def test_ex2_rows_with_alternatives_fail():
    wrong = [r.id for r in tx.TABLE3 if len(r.point.query_type) > 1 or any(len(a) > 1 for a in r.point.query_type)]
    wrong = wrong if sorted(wrong) != sorted(_combined_rows()) else wrong + ["table3:row01"]
    with pytest.raises(AssertionError):
        ex.check_ex2(wrong)


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


def test_hidden_ex1_accepts_the_solution_and_rejects_a_sum():
    ex.hidden_check_ex1(8)
    with pytest.raises(AssertionError, match="count them"):
        ex.hidden_check_ex1(2 + 4)


def test_hidden_ex2_accepts_the_solution_and_rejects_rows_with_alternatives():
    ex.hidden_check_ex2(_combined_rows())
    with pytest.raises(AssertionError, match="once"):
        ex.hidden_check_ex2(_combined_rows()[:-1])


def test_hidden_ex3_accepts_the_solution_and_rejects_a_self_attention_query():
    from attnsurvey.data.taxonomy_tasks import two_marker_task

    g = torch.Generator().manual_seed(0)
    data = two_marker_task(512, 8, 16, 4, g), two_marker_task(512, 8, 16, 4, g)
    ex.hidden_check_ex3(_zhang(query_type=(("basic",),)), *data)
    with pytest.raises(AssertionError, match="query must be basic"):
        ex.hidden_check_ex3(_zhang(), *data)
