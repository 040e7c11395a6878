"""Exercise self-checks of ch03_3_2_query_multiplicity: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import ast
import inspect

import pytest
import torch

from attnsurvey.exercises import ch03_3_2_query_multiplicity as ex
from attnsurvey.general_mechanisms.scoring import dot_score, scaled_dot_score
from attnsurvey.query_related import multihop as mh

from .helpers import refused_without_the_answer, rejected_under_python_o


def _unrolled(u1, reads, H):
    """u^(S+1) = H^S u^(1) + sum_s H^(S-s) o^(s), for rows (H applied as u @ H.T)."""
    S = len(reads)
    out = u1 @ torch.linalg.matrix_power(H.T, S)
    for s, o in enumerate(reads, 1):
        out = out + o @ torch.linalg.matrix_power(H.T, S - s)
    return out


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(_unrolled)


def test_ex1_last_read_only_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda u1, reads, H: u1 @ torch.linalg.matrix_power(H.T, len(reads)) + reads[-1])


def test_ex1_the_displayed_sum_without_H_fails():
    # the chapter displays u^(s+1) = u^(s) + o^(s); pasting its unrolled sum ignores H
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda u1, reads, H: u1 + sum(reads))


def test_ex1_every_read_through_H_S_times_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda u1, reads, H: (u1 + sum(reads)) @ torch.linalg.matrix_power(H.T, len(reads)))


def test_ex1_H_on_the_wrong_side_fails():
    def wrong(u1, reads, H):
        return _unrolled(u1, reads, H.T)

    with pytest.raises(AssertionError):
        ex.check_ex1(wrong)


def _gate(q, c, scale=True, swap=False):
    g = torch.sigmoid((q * c).sum(-1, keepdim=True) / (q.shape[-1] ** 0.5 if scale else 1.0))
    return g * q + (1 - g) * c if swap else (1 - g) * q + g * c


def _pieces(c0="question", score="query half", transform=_gate):
    """A ``gated_as_eq41``: the solution by default; each argument swaps in one plausible mistake."""

    def gated_as_eq41(q0):
        d = q0.shape[-1]
        scores = {
            "query half": lambda Q, K: dot_score(Q[..., :d], K),
            "context half": lambda Q, K: dot_score(Q[..., d:], K),
            "scaled": lambda Q, K: scaled_dot_score(Q[..., :d], K),
            "the chapter's, d = 4 typed in": lambda Q, K: dot_score(Q[..., :4], K),
        }
        first = {"question": q0, "zero": torch.zeros_like(q0), "default": None}[c0]
        return transform, scores[score], first

    return gated_as_eq41


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_pieces())
    ex.hidden_check_ex2(_pieces())


EX2_WRONG = {
    "c0 = 0, the memory network's choice pasted": _pieces(c0="zero"),
    "c0 left at the default (mean of the values)": _pieces(c0="default"),
    "the score reads the context half": _pieces(score="context half"),
    "the scaled dot product": _pieces(score="scaled"),
    "the chapter's q_half_score pasted (d = 4)": _pieces(score="the chapter's, d = 4 typed in"),
    "the gate on the wrong vector": _pieces(transform=lambda q, c: _gate(q, c, swap=True)),
    "the gate without 1/sqrt(d)": _pieces(transform=lambda q, c: _gate(q, c, scale=False)),
    "the additive transform kept": _pieces(transform=lambda q, c: q + c),
}


@pytest.mark.parametrize("name", EX2_WRONG)
def test_ex2_plausible_wrong_answers_fail(name):
    with pytest.raises(AssertionError):
        ex.check_ex2(EX2_WRONG[name])


def test_ex2_the_first_hop_hint_points_to_q1():
    with pytest.raises(AssertionError, match="hop 1 differ"):
        ex.check_ex2(EX2_WRONG["c0 = 0, the memory network's choice pasted"])
    with pytest.raises(AssertionError, match="hop 1 is right"):
        ex.check_ex2(EX2_WRONG["the gate on the wrong vector"])


def test_ex2_reference_addresses_like_the_memory_network():
    # hop 1 of the hop-by-hop reference does not depend on the gate: its weights and its read must be those of
    # memory_network_read, whose query after one hop is u^(1) + o^(1)
    gen = torch.Generator().manual_seed(3)
    q0, M, C = (
        torch.randn(2, 3, generator=gen),
        torch.randn(2, 5, 3, generator=gen),
        torch.randn(2, 5, 3, generator=gen),
    )
    o, P = ex._gated_memory_loop(q0, M, C, 1)
    u_mem, P_mem = mh.memory_network_read(q0, [M], [C])
    torch.testing.assert_close(P, P_mem)
    torch.testing.assert_close(o, u_mem - q0)


def _enrichment(a, pol):
    polar = (pol >= 0).to(a.dtype)
    share = polar.mean(-1)
    has = share > 0
    mass = (a * polar.unsqueeze(1)).sum(-1)
    return (mass[has] / share[has].unsqueeze(-1)).mean(0)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_enrichment)


def test_ex3_the_displayed_mass_without_the_share_fails():
    # the chapter's mass table computes the mass per polarity; summing it is not the exercise
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda a, pol: (a * (pol >= 0).unsqueeze(1)).sum(-1).mean(0))


def test_ex3_share_over_all_reviews_fails():
    def pooled(a, pol):
        polar = (pol >= 0).to(a.dtype)
        return (a * polar.unsqueeze(1)).sum(-1).mean(0) / polar.mean()

    with pytest.raises(AssertionError):
        ex.check_ex3(pooled)


def test_ex3_positive_words_only_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda a, pol: _enrichment(a, torch.where(pol == 0, -1, pol)))


def test_hidden_ex1_accepts_the_solution_and_rejects_three_reads_typed_in():
    ex.hidden_check_ex1(_unrolled)

    def three(u1, reads, H):  # written for the three hops of the visible check
        H3 = H.T @ H.T @ H.T
        return u1 @ H3 + reads[0] @ H.T @ H.T + reads[1] @ H.T + reads[2]

    assert "correct" in ex.check_ex1(three)
    with pytest.raises(AssertionError):
        ex.hidden_check_ex1(three)


def test_hidden_ex2_accepts_the_solution_and_rejects_a_gate_written_for_d_3():
    ex.hidden_check_ex2(_pieces())

    def fixed(q, c):  # the visible check's size typed in
        g = torch.sigmoid((q * c).sum(-1, keepdim=True) / 3**0.5)
        return (1 - g) * q + g * c

    assert "correct" in ex.check_ex2(_pieces(transform=fixed))
    with pytest.raises(AssertionError, match="gated memory network"):
        ex.hidden_check_ex2(_pieces(transform=fixed))


def test_hidden_ex3_accepts_the_solution_and_rejects_counting_reviews_without_polar_words():
    ex.hidden_check_ex3(_enrichment)

    def every_review(a, pol):  # divides by a zero share on a review without polar words
        polar = (pol >= 0).to(a.dtype)
        return ((a * polar.unsqueeze(1)).sum(-1) / polar.mean(-1).unsqueeze(-1)).mean(0)

    assert "correct" in ex.check_ex3(every_review)  # every visible review has a polar word ...
    with pytest.raises(AssertionError, match="not right"):
        ex.hidden_check_ex3(every_review)  # ... the hidden batch does not


def test_checks_raise_explicitly():
    # a bare assert disappears under python -O (PYTHONOPTIMIZE), and every check would then pass anything
    tree = ast.parse(inspect.getsource(ex))
    assert not [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]


def test_wrong_answers_are_rejected_under_python_o():
    rejected_under_python_o(
        "ch03_3_2_query_multiplicity",
        [
            "check_ex1(lambda u1, reads, H: u1 + sum(reads))",
            "check_ex2(lambda q0: (lambda q, c: q + c, lambda Q, K: (Q[..., :3] * K).sum(-1), q0 * 0))",
            "check_ex3(lambda a, pol: a.sum(-1).mean(0))",
        ],
    )


def test_no_check_message_states_the_answer():
    gen = torch.Generator().manual_seed(5)  # the inputs of check_ex1, to recompute the right answer
    u1 = torch.randn(3, 4, generator=gen)
    Ms = [torch.randn(3, 6, 4, generator=gen) for _ in range(3)]
    Cs = [torch.randn(3, 6, 4, generator=gen) for _ in range(3)]
    H = torch.randn(4, 4, generator=gen) / 2
    right = mh.memory_network_read(u1, Ms, Cs, H=H)[0]
    message = refused_without_the_answer(
        ex.check_ex1, lambda u1, reads, H: u1 + sum(reads), answers=[float(right[0, 0]), float(right[0, 1]), "H^"]
    )
    assert "update" in message
    message = refused_without_the_answer(
        ex.check_ex2, EX2_WRONG["c0 = 0, the memory network's choice pasted"], answers=["c0 = q", "q0", "identity"]
    )
    assert "q^(1)" in message  # it points to the first query, without saying what c^(0) must be
    refused_without_the_answer(ex.check_ex3, lambda a, pol: a.sum(-1).mean(0), answers=["share", ">= 0", "mean(0)"])
