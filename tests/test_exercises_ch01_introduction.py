"""Chapter 1 exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import pytest

from attnsurvey.data.sequences import target_positions
from attnsurvey.exercises import ch01_introduction as ex


def hit_rate(weights, src, lengths, task, tolerance=0):
    ideal = target_positions(task, src, lengths)
    valid = ideal >= 0
    hit = (weights.argmax(-1) - ideal).abs() <= tolerance
    return float(hit[valid].float().mean())


def hit_rate_counting_padding(weights, src, lengths, task, tolerance=0):
    ideal = target_positions(task, src, lengths)
    return float(((weights.argmax(-1) - ideal).abs() <= tolerance).float().mean())


def test_ex1_rejects_one_score_per_output_step():
    with pytest.raises(AssertionError):
        ex.check_ex1(12, 0)


def test_ex1_rejects_scores_for_the_bottleneck():
    with pytest.raises(AssertionError):
        ex.check_ex1(144, 12)


def test_ex1_accepts_the_solution():
    assert "correct" in ex.check_ex1(144, 0)


def test_ex2_rejects_a_rate_that_counts_padded_steps():
    with pytest.raises(AssertionError):
        ex.check_ex2(hit_rate_counting_padding)


def test_ex2_rejects_a_rate_that_ignores_the_tolerance():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda w, s, n, task, tolerance=0: hit_rate(w, s, n, task, 0))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(hit_rate)


def test_ex3_rejects_rates_measured_against_the_wrong_task():
    with pytest.raises(AssertionError):
        ex.check_ex3(0.25, 0.97)  # measured against the reversal alignment by mistake


def test_ex3_accepts_a_diagonal_alignment():
    assert "correct" in ex.check_ex3(0.95, 0.25)
