"""Exercise self-checks of ch03_3_1_query_types: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F_

from attnsurvey.data.sentiment import keyword_features
from attnsurvey.exercises import ch03_3_1_query_types as ex
from attnsurvey.query_related import types as qt


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda r, n: r * (1 - 1 / n) ** 2 + r * (r - 1) / n**2)


@pytest.mark.parametrize(
    "penalty",
    [
        lambda r, n: torch.tensor(r * (1 - 1 / n) ** 2 + r * (r - 1) / n**2),  # a float32 tensor
        lambda r, n: qt.redundancy_penalty(torch.full((r, n), 1.0 / n)),  # computed numerically in float32
    ],
)
def test_ex1_float32_answers_pass(penalty):
    assert "correct" in ex.check_ex1(penalty)


def test_ex1_forgotten_off_diagonal_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda r, n: r * (1 - 1 / n) ** 2)


def _ln(x):
    return F_.layer_norm(x, x.shape[-1:])


def _identical_stack(f, W_Vs):
    """The solution: every copy's context is W_V f, and Eq. (37) keeps the copies equal."""
    for W_V in W_Vs:
        f = _ln(f + W_V @ f)
    return f


def _through_the_layers(f, W_Vs):
    """A student who runs the chapter's layers on one token (any W_Q, W_K): right, since copies act as one token."""
    F = f[None]
    for W_V in W_Vs:
        F = qt.update_residual_norm(F, qt.self_attention(F, W_V, W_V, W_V)[0])
    return F[0]


def _loop(update):
    def stack(f, W_Vs):
        for W_V in W_Vs:
            f = update(f, W_V)
        return f

    return stack


@pytest.mark.parametrize(
    "answer",
    [_identical_stack, _through_the_layers, lambda f, W_Vs: _identical_stack(f.float(), [W.float() for W in W_Vs])],
    ids=["formula", "one-token layers", "float32"],
)
def test_ex2_solutions_pass(answer):
    assert "correct" in ex.check_ex2(answer)
    ex.hidden_check_ex2(answer)


EX2_WRONG = {
    "no residual (Normalize(W_V f), replace + norm)": _loop(lambda f, W: _ln(W @ f)),
    "W_V transposed (f @ W_V, the row/column slip)": _loop(lambda f, W: _ln(f + f @ W)),
    "context scaled by 1/sqrt(d_f) like the scores": _loop(lambda f, W: _ln(f + W @ f / f.shape[-1] ** 0.5)),
    "residual without the normalisation": _loop(lambda f, W: f + W @ f),
    "pre-norm (the old exercise's layer)": _loop(lambda f, W: f + W @ _ln(f)),
    "replacement, Eq. (36)": _loop(lambda f, W: W @ f),
    "only the first layer": lambda f, W_Vs: _ln(f + W_Vs[0] @ f),
}


@pytest.mark.parametrize("name", EX2_WRONG)
def test_ex2_plausible_wrong_answers_fail(name):
    with pytest.raises(AssertionError):
        ex.check_ex2(EX2_WRONG[name])


def test_ex2_pasting_eq37_on_the_input_fails():
    # Eq. (37) as displayed needs a context; reading the vector itself as its context (c = f) is what is left
    with pytest.raises(AssertionError):
        ex.check_ex2(_loop(lambda f, W: qt.update_residual_norm(f[None], f[None])[0]))


RESULTS = {"learned query": [0.9, 0.92, 0.88, 0.91, 0.9], "mean pooling": [0.5, 0.52, 0.49, 0.55, 0.5]}


def _noisy(n, g):
    return keyword_features(n, 12, 4, noise=0.4, generator=g)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_noisy, RESULTS, "learned query")


def test_ex3_default_noise_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda n, g: keyword_features(n, 12, 4, generator=g), RESULTS, "learned query")


def test_ex3_unsupported_verdict_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_noisy, RESULTS, "mean pooling")


DEFAULT = {"learned query": [0.97, 0.98, 0.96, 0.97, 0.99], "mean pooling": [0.6, 0.62, 0.58, 0.61, 0.6]}


def test_ex3_rejects_the_chapters_own_run():
    assert "correct" in ex.check_ex3(_noisy, RESULTS, "learned query", DEFAULT)
    with pytest.raises(AssertionError, match="make_data=noisy_data"):
        ex.check_ex3(_noisy, DEFAULT, "learned query", DEFAULT)  # the default-noise run handed in unchanged


def test_hidden_ex1_accepts_the_solution_and_rejects_a_penalty_without_the_off_diagonal():
    ex.hidden_check_ex1(lambda r, n: r * (1 - 1 / n) ** 2 + r * (r - 1) / n**2)
    with pytest.raises(AssertionError, match="not right"):
        ex.hidden_check_ex1(lambda r, n: r * (1 - 1 / n) ** 2 + (r - 1) / n**2)


def test_hidden_ex2_accepts_the_solution_and_rejects_a_size_typed_in():
    ex.hidden_check_ex2(_identical_stack)
    typed = _loop(lambda f, W: F_.layer_norm(f + W @ f, (5,)))  # the visible check's d_f written in
    assert "correct" in ex.check_ex2(typed)
    with pytest.raises(AssertionError, match="d_f=3"):
        ex.hidden_check_ex2(typed)


def test_hidden_ex3_accepts_a_repeatable_run_and_rejects_typed_in_numbers():
    def run(seed, make_data=None):  # stands in for the chapter's training: deterministic per seed
        return {name: vals[seed] for name, vals in RESULTS.items()}

    ex.hidden_check_ex3(RESULTS, run, [0, 1, 2, 3, 4], _noisy)
    typed = {n: [v - 0.02 for v in vals] for n, vals in RESULTS.items()}
    assert "correct" in ex.check_ex3(_noisy, typed, "learned query")
    with pytest.raises(AssertionError, match="another value"):
        ex.hidden_check_ex3(typed, run, [0, 1, 2, 3, 4], _noisy)


def test_no_check_message_states_the_answer():
    from .helpers import refused_without_the_answer

    # ex. 1: without the off-diagonal entries the first case that fails is r = 2, n = 1 (right answer 2); the
    # message must state neither that value nor the entries of A A^T, the key step of the derivation
    forgot_off_diagonal = lambda r, n: r * (1 - 1 / n) ** 2
    message = refused_without_the_answer(ex.check_ex1, forgot_off_diagonal, answers=[2.0, "1/n", "holds"])
    assert "A A^T" in message  # it points to where to look
    # ex. 2: the hint points to the scores of one query, never to the weights or the context it leads to
    message = refused_without_the_answer(
        ex.check_ex2, EX2_WRONG["no residual (Normalize(W_V f), replace + norm)"], answers=["1/n", "uniform", "W_V f"]
    )
    assert "scores" in message


def test_checks_raise_explicitly_and_survive_python_o():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(ex))
    assert not [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
