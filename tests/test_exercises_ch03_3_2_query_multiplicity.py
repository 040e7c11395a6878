"""Exercise self-checks of ch03_3_2_query_multiplicity: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest

from attnsurvey.exercises import ch03_3_2_query_multiplicity as ex
from attnsurvey.query_related import multihop as mh


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda u1, reads: u1 + sum(reads))


def test_ex1_last_read_only_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda u1, reads: u1 + reads[-1])


def _gated(q0, K, V, score, n_hops, transform=lambda q, c: (q + c) / 2):
    c, _, _ = mh.multi_hop_attention(q0, K, V, score, n_hops, transform=transform)
    return c


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_gated)


def test_ex2_sum_transform_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda *args: _gated(*args, transform=lambda q, c: q + c))


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(lambda a, pol: (a * (pol >= 0).unsqueeze(1)).sum(-1).mean(0))


def test_ex3_positive_words_only_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda a, pol: (a * (pol == 1).unsqueeze(1)).sum(-1).mean(0))


def test_ex3_mean_over_words_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda a, pol: (a * (pol >= 0).unsqueeze(1)).mean(-1).mean(0))


def test_hidden_ex1_accepts_the_solution_and_rejects_three_reads_typed_in():
    ex.hidden_check_ex1(lambda u1, reads: u1 + sum(reads))
    three = lambda u1, reads: u1 + reads[0] + reads[1] + reads[2]
    assert "correct" in ex.check_ex1(three)
    with pytest.raises((AssertionError, IndexError)):
        ex.hidden_check_ex1(three)


def test_hidden_ex2_accepts_the_solution_and_rejects_the_additive_transform():
    def hops(q0, K, V, score, n_hops, transform=lambda q, c: (q + c) / 2):
        return mh.multi_hop_attention(q0, K, V, score, n_hops, transform=transform)[0]

    ex.hidden_check_ex2(hops)
    with pytest.raises(AssertionError, match="averaging transform"):
        ex.hidden_check_ex2(lambda *args: hops(*args, transform=lambda q, c: q + c))


def test_hidden_ex3_accepts_the_solution_and_rejects_a_sum_over_reviews():
    ex.hidden_check_ex3(lambda a, pol: (a * (pol >= 0).unsqueeze(1)).sum(-1).mean(0))
    with pytest.raises(AssertionError, match="not right"):
        ex.hidden_check_ex3(lambda a, pol: (a * (pol >= 0).unsqueeze(1)).sum(-1).sum(0))
