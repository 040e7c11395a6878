"""Exercise self-checks of ch03_2_3_attention_dimensionality: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import ast
import inspect

import pytest
import torch

from attnsurvey.exercises import ch03_2_3_attention_dimensionality as ex
from attnsurvey.experiments.general_mechanisms import FeatureLookupModel
from attnsurvey.general_mechanisms import dimensionality as md

from .helpers import refused_without_the_verdict


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda d_q, d_k, d_v, d_w: d_w * (d_q + d_k + d_v + 1))


def test_ex1_forgotten_bias_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda d_q, d_k, d_v, d_w: d_w * (d_q + d_k + d_v))


def test_ex1_single_dimensional_count_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda d_q, d_k, d_v, d_w: d_w * (d_q + d_k + 2))


def _elementwise(Q, K, V, scale=True):
    e = Q.unsqueeze(-2) * K.unsqueeze(-3)
    if scale:
        e = e / K.shape[-1] ** 0.5
    return md.multidimensional_context(md.multidimensional_align(e), V)


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_elementwise)


def test_ex2_unscaled_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda Q, K, V: _elementwise(Q, K, V, scale=False))


def test_ex2_softmax_over_features_fails():
    import torch

    def wrong(Q, K, V):
        e = Q.unsqueeze(-2) * K.unsqueeze(-3) / K.shape[-1] ** 0.5
        return (torch.softmax(e, -1) * V.unsqueeze(-3)).sum(-2)

    with pytest.raises(AssertionError):
        ex.check_ex2(wrong)


RESULTS = {"multi-dimensional": [0.95, 0.93, 0.96, 0.94, 0.95], "single-dimensional": [0.74, 0.75, 0.73, 0.76, 0.74]}
# the chapter's run with the default d_w = 32 (made-up numbers of the same kind)
DEFAULT = {"multi-dimensional": [1.0, 1.0, 1.0, 1.0, 1.0], "single-dimensional": [0.77, 0.76, 0.78, 0.77, 0.76]}


def _make(multi, d_w=8):
    return FeatureLookupModel(d_q=16, d_k=4, d_v=4, d_w=d_w, multi_dimensional=multi)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_make, RESULTS, "multi-dimensional", DEFAULT)


def test_ex3_wrong_hidden_size_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda m: _make(m, d_w=32), RESULTS, "multi-dimensional", DEFAULT)


def test_ex3_unsupported_verdict_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_make, RESULTS, "not resolved", DEFAULT)


def test_ex3_claim_on_a_tie_fails():
    tie = {"multi-dimensional": [0.9, 0.8, 0.85, 0.7, 0.95], "single-dimensional": [0.85, 0.86, 0.8, 0.8, 0.88]}
    with pytest.raises(AssertionError):
        ex.check_ex3(_make, tie, "multi-dimensional", DEFAULT)


def test_ex3_results_of_the_default_run_fail():
    with pytest.raises(AssertionError, match="d_w = 8"):
        ex.check_ex3(_make, DEFAULT, "multi-dimensional", DEFAULT)


def test_ex3_misspelt_verdict_fails_without_naming_the_supported_one():
    refused_without_the_verdict(ex.check_ex3, _make, RESULTS, "multi dimensional", DEFAULT, match="must be one of")


def test_ex2_numpy_and_float64_results_pass():
    from attnsurvey.general_mechanisms import dimensionality as md

    def ew(Q, K, V):
        return md.multidimensional_context(
            md.multidimensional_align(Q.unsqueeze(-2) * K.unsqueeze(-3) / K.shape[-1] ** 0.5), V
        )

    assert "correct" in ex.check_ex2(lambda Q, K, V: ew(Q, K, V).numpy())
    assert "correct" in ex.check_ex2(lambda Q, K, V: ew(Q, K, V).double())


def test_checks_raise_explicitly_and_survive_python_o():
    # a bare assert disappears under python -O (PYTHONOPTIMIZE), and every check would then pass anything
    tree = ast.parse(inspect.getsource(ex))
    asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert not asserts, f"bare assert on lines {asserts}"


def test_hidden_ex1_accepts_the_solution_and_rejects_a_count_without_the_bias():
    ex.hidden_check_ex1(lambda d_q, d_k, d_v, d_w: d_w * (d_q + d_k + d_v + 1))
    with pytest.raises(AssertionError, match="not right"):
        ex.hidden_check_ex1(lambda d_q, d_k, d_v, d_w: d_w * (d_q + d_k + d_v))


def test_hidden_ex2_accepts_the_solution_and_rejects_a_scale_from_the_number_of_positions():
    ex.hidden_check_ex2(_elementwise)

    def by_positions(Q, K, V):
        e = Q.unsqueeze(-2) * K.unsqueeze(-3) / K.shape[-2] ** 0.5  # n_f instead of d
        return md.multidimensional_context(md.multidimensional_align(e), V)

    with pytest.raises(AssertionError, match="one softmax per feature"):
        ex.hidden_check_ex2(by_positions)


def test_hidden_ex3_accepts_a_repeatable_run_and_rejects_typed_in_numbers():
    def run(seed, make_model=None):  # stands in for the chapter's training: deterministic per seed
        return {name: vals[seed] for name, vals in RESULTS.items()}

    ex.hidden_check_ex3(RESULTS, run, [0, 1, 2, 3, 4], _make)
    typed = {n: [v - 0.02 for v in vals] for n, vals in RESULTS.items()}
    assert "correct" in ex.check_ex3(_make, typed, "multi-dimensional", DEFAULT)
    with pytest.raises(AssertionError, match="another value"):
        ex.hidden_check_ex3(typed, run, [0, 1, 2, 3, 4], _make)


def test_no_check_message_states_the_answer():
    import torch

    from .helpers import refused_without_the_answer

    # ex. 1: the count for the first sizes the check tries, nor the list of what to count
    d_q, d_k, d_v, d_w = ex._DIMS[0]
    refused_without_the_answer(
        ex.check_ex1,
        lambda d_q, d_k, d_v, d_w: d_w * (d_q + d_k + d_v),
        answers=[d_w * (d_q + d_k + d_v + 1), "W_1, W_2"],
    )
    # ex. 2: the first context entry the check compares, recomputed here (the message used to print it)
    gen = torch.Generator().manual_seed(3)
    Qx, Kx, Vx = (torch.randn(n, 4, generator=gen) * 2 for n in (2, 5, 5))
    right = float((torch.softmax(Qx[0, 0] * Kx[:, 0] / 2, 0) * Vx[:, 0]).sum())
    refused_without_the_answer(ex.check_ex2, lambda Q, K, V: _elementwise(Q, K, V, scale=False), answers=[right])
    # ex. 3: the shapes of the right model
    right_shapes = str({k: tuple(v.shape) for k, v in _make(True).named_parameters()})
    refused_without_the_answer(
        ex.check_ex3,
        lambda m: _make(m, d_w=32),
        RESULTS,
        "multi-dimensional",
        DEFAULT,
        answers=[right_shapes, "(8, 16)"],
    )


def _shifted(A, beta):  # the derivation's result: the weights times exp(beta), renormalised over the positions
    w = A * beta.exp()
    return w / w.sum(0, keepdim=True)


def test_ex1_shift_solution_passes_in_the_check_and_the_hidden_check():
    assert "correct" in ex.check_ex1_shift(_shifted)
    ex.hidden_check_ex1_shift(_shifted)
    # the same result through the log-weights: log a = e - const per feature
    assert "correct" in ex.check_ex1_shift(lambda A, beta: md.multidimensional_align((A.log() + beta)[None])[0])


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda A, beta: A, id="any-shift-cancels"),
        pytest.param(lambda A, beta: A * beta.exp(), id="not-renormalised"),
        pytest.param(lambda A, beta: (A * beta.exp()) / (A * beta.exp()).sum(-1, keepdim=True), id="over-features"),
        pytest.param(lambda A, beta: A + beta.softmax(0), id="added-weights"),
        pytest.param(lambda A, beta: beta.softmax(0), id="shift-alone"),
    ],
)
def test_ex1_shift_plausible_wrong_answers_fail_both_checks(wrong):
    with pytest.raises(AssertionError, match="Eq. \\(32\\) for the shifted scores"):
        ex.check_ex1_shift(wrong)
    with pytest.raises(AssertionError):
        ex.hidden_check_ex1_shift(wrong)


def test_ex1_shift_a_float32_answer_passes_and_a_float16_one_is_told_its_precision(capsys):
    # before, a correct answer computed in float32 was refused as "not those of Eq. (32)"
    assert "correct" in ex.check_ex1_shift(lambda A, beta: _shifted(A.float(), beta.float()))
    ex.hidden_check_ex1_shift(lambda A, beta: _shifted(A.float(), beta.float()).numpy())
    with pytest.raises(AssertionError, match="only to torch.float16 precision"):
        ex.check_ex1_shift(lambda A, beta: _shifted(A, beta).half())


@pytest.mark.parametrize("low", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda A, beta: A, id="any-shift-cancels"),
        pytest.param(lambda A, beta: A * beta.exp(), id="not-renormalised"),
        pytest.param(lambda A, beta: (A * beta.exp()) / (A * beta.exp()).sum(-1, keepdim=True), id="over-features"),
    ],
)
def test_ex1_shift_wrong_answers_in_lower_precision_still_fail(wrong, low):
    # in float16 "any-shift-cancels" is right on the first case (a per-feature shift) and is refused for its precision
    refusal = "Eq. \\(32\\) for the shifted scores" if low == torch.float32 else "Eq. \\(32\\)"
    with pytest.raises(AssertionError, match=refusal):
        ex.check_ex1_shift(lambda A, beta: wrong(A.to(low), beta.to(low)))
    with pytest.raises(AssertionError, match=refusal):
        ex.hidden_check_ex1_shift(lambda A, beta: wrong(A.to(low), beta.to(low)))


def test_ex1_shift_message_names_neither_the_formula_nor_a_value():
    from .helpers import refused_without_the_answer

    A, beta, want = ex._shift_cases(5, ((5, 3),))[1]
    refused_without_the_answer(
        ex.check_ex1_shift, lambda A, beta: A, answers=["exp(beta)", "e^beta", "renormal", float(want[0, 0])]
    )
