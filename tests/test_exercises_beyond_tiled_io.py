"""Exercise 4 of chapter 6 (slow-memory reads of FlashAttention's Algorithm 1): the check accepts the worked
solution and rejects plausible wrong answers, among them the chapter's square count and a count taken from
``io_model``; the hidden check catches an answer that ignores rounding."""

from __future__ import annotations

import math

import pytest

from attnsurvey.beyond import io_model
from attnsurvey.beyond.io_model import flash_io
from attnsurvey.exercises import beyond_tiled as et


def solution(n_q, n_f, d, M):
    T_c = math.ceil(n_f / math.ceil(M / (4 * d)))  # passes of the outer loop, over key blocks
    return 2 * n_f * d + T_c * n_q * (2 * d + 2)  # K, V once; Q_i, O_i, l_i, m_i of every query on every pass


def test_solution_passes_both_checks():
    assert solution(4096, 2048, 64, 65536) == 2 * 2048 * 64 + 8 * 4096 * 130  # by hand: B_c = 256, T_c = 8
    et.check_hbm_reads(solution)
    et.hidden_check_hbm_reads(solution)


@pytest.mark.parametrize(
    "wrong",
    [
        lambda n_q, n_f, d, M: 2 * n_f * d + n_q * (2 * d + 2),  # forgets the outer loop: Q and O read once
        lambda n_q, n_f, d, M: 2 * n_f * d + math.ceil(n_f / math.ceil(M / (4 * d))) * n_q * 2 * d,  # forgets l, m
        lambda n_q, n_f, d, M: math.ceil(n_f / math.ceil(M / (4 * d))) * n_q * (2 * d + 2),  # forgets K and V
        lambda n_q, n_f, d, M: 12 * n_q * n_f * d * d // M,  # the leading term only
        lambda n_q, n_f, d, M: solution(n_q, n_q, d, M),  # the chapter's square count, n = n_q
        lambda n_q, n_f, d, M: solution(n_f, n_f, d, M),  # the chapter's square count, n = n_f
        lambda n_q, n_f, d, M: solution(n_f, n_q, d, M),  # the two lengths swapped: passes over query blocks
    ],
)
def test_wrong_answers_are_rejected(wrong):
    with pytest.raises(AssertionError, match="differs from the instrumented count"):
        et.check_hbm_reads(wrong)


@pytest.mark.parametrize(
    "copied",
    [
        lambda n_q, n_f, d, M: io_model.flash_io(n_q, d, M, n_f=n_f)["reads"],  # the chapter's call, one more argument
        lambda n_q, n_f, d, M: flash_io(n_q, d, M, n_f=n_f)["reads"],  # imported before the check ran
    ],
)
def test_a_count_taken_from_io_model_is_refused(copied):
    assert copied(4096, 2048, 64, 65536) == solution(4096, 2048, 64, 65536)  # right, but not derived
    with pytest.raises(AssertionError, match="derive the count"):
        et.check_hbm_reads(copied)
    assert io_model.flash_io(300, 64, 4096)["reads"] == 779400  # the module is restored after the check


def test_hidden_check_rejects_an_answer_without_rounding():
    def no_rounding(n_q, n_f, d, M):
        return 2 * n_f * d + (4 * n_f * d / M) * n_q * (2 * d + 2)

    et.check_hbm_reads(no_rounding)  # exact where every block is full
    with pytest.raises(AssertionError, match="round"):
        et.hidden_check_hbm_reads(no_rounding)


def test_check_does_not_print_the_count(capsys):
    et.check_hbm_reads(solution)
    out = capsys.readouterr().out
    assert str(solution(4096, 2048, 64, 65536)) not in out and "passed" in out
