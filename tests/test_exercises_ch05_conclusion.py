"""Exercise self-checks of ch05_conclusion: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest

from attnsurvey import builder as B
from attnsurvey.exercises import ch05_conclusion as ex


def wd_total(d, h):
    return h * (d // h) ** 2  # h heads, each W_d (d/h) x (d/h)


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(wd_total, 64)  # h (d/h)^2 = d^2 / h <= 32^2, so d <= 32 sqrt(4) = 64


@pytest.mark.parametrize(
    "wrong",
    [
        lambda d, h: d * d,  # one head of the full width, heads ignored
        lambda d, h: (d // h) ** 2,  # one head only
        lambda d, h: h * d * (d // h),  # W_d read as d x (d/h) per head
        lambda d, h: d * d // 4,  # the chapter's exercise value of h written in
        lambda d, h: None,  # the template left in place
        64,  # the width where the function belongs
    ],
)
def test_ex1_wrong_counts_fail(wrong):
    with pytest.raises(AssertionError, match="wd_total"):
        ex.check_ex1(wrong, 64)


@pytest.mark.parametrize(
    "wrong",
    [
        32,  # the single head's width, heads ignored
        128,  # d <= 32 h: the budget read as h (d/h) d or d / h <= 32
        60,  # fits, but a wider multiple of h does too
        68,  # one multiple of h too wide (68^2 / 4 = 1156 > 1024)
        66,  # not a multiple of h
        None,
    ],
)
def test_ex1_plausible_wrong_answers_fail(wrong):
    with pytest.raises(AssertionError):
        ex.check_ex1(wd_total, wrong)


def test_ex1_hint_does_not_state_the_answer_or_the_step():
    for wrong in (32, 128):
        with pytest.raises(AssertionError) as err:
            ex.check_ex1(wd_total, wrong)
        assert "64" not in str(err.value) and "d^2" not in str(err.value) and "sqrt" not in str(err.value)


def test_ex1_not_a_whole_number_fails():
    assert "correct" in ex.check_ex1(wd_total, 64.0)
    with pytest.raises(AssertionError):
        ex.check_ex1(wd_total, 64.5)  # int() would truncate it to the right width


def test_ex2_solution_passes():
    m = B.build_model(
        B.point(alignment="hard", query_type="self-attention + basic", query_multiplicity="multi-head + multi-hop"),
        16,
        4,
    )
    assert "correct" in ex.check_ex2(m)


@pytest.mark.parametrize("qm", ["multi-head + multi-hop", "multi-hop + multi-head"])
@pytest.mark.parametrize("qt", ["self-attention + basic", "basic + self-attention"])
def test_ex2_either_spelling_of_a_combined_cell_passes(qm, qt):
    # the builder takes a "+" cell as a set: both spellings build the same model
    m = B.build_model(B.point(alignment="hard", query_type=qt, query_multiplicity=qm), 16, 4)
    assert "correct" in ex.check_ex2(m)


def test_ex2_without_multi_hop_fails():
    m = B.build_model(
        B.point(alignment="hard", query_type="self-attention + basic", query_multiplicity="multi-head"), 16, 4
    )
    with pytest.raises(AssertionError):
        ex.check_ex2(m)


def _md_mh(**kw):
    return B.build_model(B.point(dimensionality="multi-dimensional", query_multiplicity="multi-head"), 16, 4, **kw)


# the chapter's run, retrained here as the check retrains it (four heads 0.812 ± 0.006, two heads 0.816 ± 0.020)
ACC4 = list(ex._chapter_accuracies(4))
ACC2 = list(ex._chapter_accuracies(2))
LOWER = [0.70, 0.72, 0.71, 0.69, 0.70]


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_md_mh(heads=4), "unresolved", ACC4, ACC2)


@pytest.mark.parametrize(
    "verdict",
    [
        "worse",  # the mean is lower, but the interval includes zero
        "better",  # "more heads help": the expectation, not the result
        False,  # a yes/no answer to "is it better?"
    ],
)
def test_ex3_wrong_verdicts_fail(verdict):
    with pytest.raises(AssertionError, match="four_vs_two"):
        ex.check_ex3(_md_mh(heads=4), verdict, ACC4, ACC2)


@pytest.mark.parametrize(
    ("verdict", "acc4", "acc2"),
    [
        ("unresolved", ACC2, ACC2),  # the two-head accuracies handed in as the four-head ones
        ("unresolved", [0.8] * 5, ACC2),  # a constant of the right shape
        ("worse", LOWER, ACC2),  # made-up numbers with a verdict that follows from them
        ("unresolved", ACC4, ACC4),  # the reference replaced
        ("unresolved", ACC4[:3], ACC2[:3]),  # fewer seeds
    ],
)
def test_ex3_accuracies_not_from_the_run_fail(verdict, acc4, acc2):
    with pytest.raises(AssertionError, match="acc4|acc2"):
        ex.check_ex3(_md_mh(heads=4), verdict, acc4, acc2)


def test_ex3_default_two_heads_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_md_mh(), "unresolved", ACC4, ACC2)


def test_ex3_four_heads_without_multi_dimensional_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(B.build_model(B.point(query_multiplicity="multi-head"), 16, 4, heads=4), "unresolved", ACC4, ACC2)


def test_hidden_ex1_accepts_the_solution_and_rejects_a_boolean_or_the_single_head_width():
    ex.hidden_check_ex1(wd_total, 64)
    with pytest.raises(AssertionError):
        ex.hidden_check_ex1(wd_total, 32)
    with pytest.raises(AssertionError):
        ex.hidden_check_ex1(wd_total, True)
    with pytest.raises(AssertionError, match="wd_total"):
        ex.hidden_check_ex1(lambda d, h: d * d, 64)


def test_hidden_ex2_accepts_the_solution_and_rejects_an_extra_change():
    ex.hidden_check_ex2(
        B.build_model(
            B.point(alignment="hard", query_type="basic + self-attention", query_multiplicity="multi-hop + multi-head"),
            16,
            4,
        )
    )
    extra = B.build_model(
        B.point(
            scoring="multiplicative",
            alignment="hard",
            query_type="self-attention + basic",
            query_multiplicity="multi-head + multi-hop",
        ),
        16,
        4,
    )
    assert "correct" in ex.check_ex2(extra)  # the visible check reads three dimensions ...
    with pytest.raises(AssertionError, match="scoring"):
        ex.hidden_check_ex2(extra)  # ... the hidden one all of them


def test_hidden_ex3_accepts_the_solution_and_rejects_an_extra_change():
    ex.hidden_check_ex3(_md_mh(heads=4), "unresolved", ACC4, ACC2)
    extra = B.build_model(
        B.point(query_type="self-attention", dimensionality="multi-dimensional", query_multiplicity="multi-head"),
        16,
        4,
        heads=4,
    )
    assert "correct" in ex.check_ex3(extra, "unresolved", ACC4, ACC2)
    with pytest.raises(AssertionError, match="nothing else"):
        ex.hidden_check_ex3(extra, "unresolved", ACC4, ACC2)


def test_hidden_ex3_rejects_fewer_seeds_and_a_wrong_verdict():
    with pytest.raises(AssertionError, match="one accuracy per seed"):
        ex.hidden_check_ex3(_md_mh(heads=4), "unresolved", ACC4[:3], ACC2[:3])
    with pytest.raises(AssertionError, match="four_vs_two"):
        ex.hidden_check_ex3(_md_mh(heads=4), "better", ACC4, ACC2)
