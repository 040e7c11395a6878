"""Exercise 4 of chapter 6 (slow-memory reads of FlashAttention's Algorithm 1): the check accepts the worked
solution and rejects plausible wrong answers; the hidden check catches an answer that ignores rounding."""

from __future__ import annotations

import math

import pytest

from attnsurvey.exercises import beyond_tiled as et


def solution(n, d, M):
    T_c = math.ceil(n / math.ceil(M / (4 * d)))  # passes of the outer loop
    return 2 * n * d + T_c * n * (2 * d + 2)  # K, V once; Q_i, O_i, l_i, m_i on every pass


def test_solution_passes_both_checks():
    assert solution(4096, 64, 65536) == 2 * 4096 * 64 + 16 * 4096 * 130  # by hand: B_c = 256, T_c = 16
    et.check_hbm_reads(solution)
    et.hidden_check_hbm_reads(solution)


@pytest.mark.parametrize(
    "wrong",
    [
        lambda n, d, M: 2 * n * d + n * (2 * d + 2),  # forgets the outer loop: Q and O read once
        lambda n, d, M: 2 * n * d + math.ceil(n / math.ceil(M / (4 * d))) * n * 2 * d,  # forgets l and m
        lambda n, d, M: math.ceil(n / math.ceil(M / (4 * d))) * n * (2 * d + 2),  # forgets K and V
        lambda n, d, M: 12 * n * n * d * d // M,  # the leading term only
    ],
)
def test_wrong_answers_are_rejected(wrong):
    with pytest.raises(AssertionError, match="differs from the instrumented count"):
        et.check_hbm_reads(wrong)


def test_hidden_check_rejects_an_answer_without_rounding():
    def no_rounding(n, d, M):
        return 2 * n * d + (4 * n * d / M) * n * (2 * d + 2)

    et.check_hbm_reads(no_rounding)  # exact where every block is full
    with pytest.raises(AssertionError, match="round"):
        et.hidden_check_hbm_reads(no_rounding)


def test_check_does_not_print_the_count(capsys):
    et.check_hbm_reads(solution)
    out = capsys.readouterr().out
    assert str(solution(4096, 64, 65536)) not in out and "passed" in out
