"""Exercise self-checks of ch05_conclusion: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest

from attnsurvey import builder as B
from attnsurvey.exercises import ch05_conclusion as ex

from .helpers import refused_without_the_answer, rejected_under_python_o


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


def _three(**kw):
    opts = {k: kw.pop(k) for k in ("heads", "hops", "hop_form") if k in kw}
    point = dict(alignment="hard", query_type="self-attention + basic", query_multiplicity="multi-head + multi-hop")
    return B.build_model(B.point(**{**point, **kw}), 16, 4, **opts)


# the count from the experiment's params column: the multi-head row (1652; hops and hard alignment add nothing),
# plus the token-to-token layer, W_Q_self (16 x 16) and a second two-head stack like the main one (1652 - 272 - 68)
N_THREE = 1652 + 256 + (1652 - 272 - 68)


def test_ex2_solution_passes_and_the_count_is_the_built_models():
    assert N_THREE == B.count_parameters(_three()) == 3220  # the derivation, an independent count of the parts
    assert "correct" in ex.check_ex2(_three(), N_THREE)
    assert "correct" in ex.check_ex2(_three(), float(N_THREE))


@pytest.mark.parametrize("qm", ["multi-head + multi-hop", "multi-hop + multi-head"])
@pytest.mark.parametrize("qt", ["self-attention + basic", "basic + self-attention"])
def test_ex2_either_spelling_of_a_combined_cell_passes(qm, qt):
    # the builder takes a "+" cell as a set: both spellings build the same model
    assert "correct" in ex.check_ex2(_three(query_type=qt, query_multiplicity=qm), N_THREE)


#: plausible wrong models: each misreads one part of the description
EX2_WRONG_MODELS = {
    "no token-to-token layer (a basic query)": dict(query_type="basic"),
    "a learned query that never reads G": dict(query_type="self-attention"),
    "the soft alignment left in place": dict(alignment="global"),
    "no second round": dict(query_multiplicity="multi-head"),
    "one head": dict(query_multiplicity="multi-hop"),
    "an extra change of the score": dict(scoring="multiplicative"),
    "four heads instead of the default": dict(heads=4),
    "three hops instead of the default (same count)": dict(hops=3),
    "Eq. (41)'s hop form instead of the default": dict(hop_form="eq41"),
}


@pytest.mark.parametrize("case", list(EX2_WRONG_MODELS))
def test_ex2_wrong_models_fail_in_both_checks(case):
    model = _three(**EX2_WRONG_MODELS[case])
    with pytest.raises(AssertionError):
        ex.check_ex2(model, B.count_parameters(model))  # even with that model's own count
    with pytest.raises(AssertionError):
        ex.hidden_check_ex2(model, B.count_parameters(model))


def test_ex2_a_wrong_dimension_is_named_without_its_value():
    message = refused_without_the_answer(
        ex.check_ex2, _three(alignment="global"), N_THREE, answers=["hard"], match="alignment"
    )
    assert "global" in message  # it names what the model has, not what it should have


#: plausible wrong counts, each a slip in pricing the parts
EX2_WRONG_COUNTS = [
    1652,  # the multi-head row: the token-to-token layer forgotten
    1652 + 256,  # the token-to-token layer priced as its query projection W_Q_self only
    1652 + 256 + (1396 - 272 - 68),  # the token-to-token layer as one single-head step
    N_THREE + (1652 - 272 - 68),  # the second hop priced as a second copy of the main attention
    2708,  # heads forgotten everywhere: the single-head model with the token-to-token layer
    N_THREE + 0.5,
    None,
    True,
]


@pytest.mark.parametrize("wrong", EX2_WRONG_COUNTS)
def test_ex2_wrong_counts_fail_in_both_checks(wrong):
    with pytest.raises(AssertionError):
        ex.check_ex2(_three(), wrong)
    with pytest.raises(AssertionError):
        ex.hidden_check_ex2(_three(), wrong)


def test_ex2_count_hint_does_not_state_the_answer():
    for wrong in EX2_WRONG_COUNTS[:5]:
        refused_without_the_answer(ex.check_ex2, _three(), wrong, answers=[N_THREE], match="n_params|parameters")


def test_ex2_not_a_built_model_fails():
    with pytest.raises(AssertionError, match="build_model"):
        ex.check_ex2(None, N_THREE)


def test_ex2_wrong_answers_are_rejected_under_python_o():
    rejected_under_python_o(
        "ch05_conclusion",
        [
            "check_ex2(ex.B.build_model(ex.EX2_POINT, 16, 4), 1652)",
            "check_ex2(ex.B.build_model(ex.B.point(query_multiplicity='multi-head'), 16, 4), 1652)",
            "hidden_check_ex2(ex.B.build_model(ex.EX2_POINT, 16, 4), 1908)",
        ],
    )


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


def test_hidden_ex2_accepts_the_solution():
    ex.hidden_check_ex2(_three(query_type="basic + self-attention", query_multiplicity="multi-hop + multi-head"), 3220)


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
