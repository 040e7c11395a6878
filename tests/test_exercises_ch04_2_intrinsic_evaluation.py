"""Exercise self-checks of ch04_2_intrinsic_evaluation: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.evaluation import intrinsic as it
from attnsurvey.exercises import ch04_2_intrinsic_evaluation as ex


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(0.5 + 3 * 0.5 / 24)


def test_ex1_forgetting_the_other_regions_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(0.5)


def _pr(A, S, P, union=True):
    P = P | S if union else P
    return float((A & P).sum() / A.sum()), float((A & S).sum() / S.sum())


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_pr)


def test_ex2_possible_without_sure_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda A, S, P: _pr(A, S, P, union=False))


def _corpus_aer(model, x, S, P):
    with torch.no_grad():
        return it.alignment_error_rate(it.hard_alignment(model(x)[1]), S, P)


def _aer_without_possible_links(model, x, S, P):
    with torch.no_grad():
        return it.alignment_error_rate(it.hard_alignment(model(x)[1]), S)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_corpus_aer)


def test_ex3_ignoring_possible_links_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_aer_without_possible_links)
