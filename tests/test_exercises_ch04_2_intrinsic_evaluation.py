"""Exercise self-checks of ch04_2_intrinsic_evaluation: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.evaluation import intrinsic as it
from attnsurvey.exercises import ch04_2_intrinsic_evaluation as ex

EXACT = [0.0] * 5  # the chapter's stored AERs without the echo and without supervision
ECHO_LIKE = [1.0, 0.167, 0.333, 0.5, 0.667]  # the chapter's stored AERs with the echo, without supervision


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


def test_ex2_formula_as_stated_passes():
    # the chapter defines P as containing S, so |A & P| / |A| needs no P | S
    assert "correct" in ex.check_ex2(lambda A, S, P: _pr(A, S, P, union=False))


def test_ex2_swapped_or_sure_only_precision_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda A, S, P: _pr(A, S, P)[::-1])
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda A, S, P: (float((A & S).sum() / A.sum()), float((A & S).sum() / S.sum())))


def _corpus_aer(model, x, S, P):
    with torch.no_grad():
        return it.alignment_error_rate(it.hard_alignment(model(x)[1]), S, P)


def _aer_without_possible_links(model, x, S, P):
    with torch.no_grad():
        return it.alignment_error_rate(it.hard_alignment(model(x)[1]), S)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_corpus_aer, False, EXACT)


def test_ex3_ignoring_possible_links_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_aer_without_possible_links, False, EXACT)


def _mean_of_sentence_aers(model, x, S, P):
    with torch.no_grad():
        A = it.hard_alignment(model(x)[1])
    return sum(it.alignment_error_rate(A[b], S[b], P[b]) for b in range(len(x))) / len(x)


def test_ex3_mean_of_sentence_aers_fails():
    with pytest.raises(AssertionError, match="per-sentence"):
        ex.check_ex3(_mean_of_sentence_aers, False, EXACT)


def test_hidden_ex1_accepts_the_solution_and_rejects_a_rounded_value():
    ex.hidden_check_ex1(0.5 + 3 * 0.5 / 24)
    assert "correct" in ex.check_ex1(0.5625004)  # within the visible tolerance ...
    with pytest.raises(AssertionError, match="not exact"):
        ex.hidden_check_ex1(0.5625004)


def test_hidden_ex2_accepts_the_solution_and_rejects_swapped_numbers():
    ex.hidden_check_ex2(_pr)
    ex.hidden_check_ex2(lambda A, S, P: _pr(A, S, P, union=False))
    with pytest.raises(AssertionError, match="precision, recall"):
        ex.hidden_check_ex2(lambda A, S, P: _pr(A, S, P)[::-1])


def test_hidden_ex3_accepts_the_solution_and_rejects_a_mean_of_sentence_aers():
    ex.hidden_check_ex3(_corpus_aer, False, EXACT)
    with pytest.raises(AssertionError, match="corpus AER"):
        ex.hidden_check_ex3(_mean_of_sentence_aers, False, EXACT)


def test_ex1_hints_do_not_state_the_key_step():
    for check in (ex.check_ex1, ex.hidden_check_ex1):
        with pytest.raises(AssertionError) as err:
            check(0.5)
        message = str(err.value)
        assert "24" not in message and "three" not in message and "0.5625" not in message


def test_ex3_verdicts_follow_the_readers_aers():
    assert "correct" in ex.check_ex3(_corpus_aer, True, ECHO_LIKE)
    assert "correct" in ex.check_ex3(_corpus_aer, True, [0.0, 0.0, 0.0, 0.0, 0.2])  # one seed misaligned


@pytest.mark.parametrize(
    ("verdict", "aers"),
    [
        (True, EXACT),  # "supervision is always needed": the chapter's echo result carried over
        (False, ECHO_LIKE),
        ("no", EXACT),  # not a bool
        (False, EXACT[:3]),  # not one AER per seed
    ],
)
def test_ex3_wrong_verdicts_fail(verdict, aers):
    with pytest.raises(AssertionError, match="supervision_needed|five seeds"):
        ex.check_ex3(_corpus_aer, verdict, aers)
    with pytest.raises(AssertionError):
        ex.hidden_check_ex3(_corpus_aer, verdict, aers)


def test_ex3_hints_do_not_state_the_key_step():
    with pytest.raises(AssertionError) as err:
        ex.check_ex3(_mean_of_sentence_aers, False, EXACT)
    assert "sums" not in str(err.value) and "over all sentences first" not in str(err.value)
