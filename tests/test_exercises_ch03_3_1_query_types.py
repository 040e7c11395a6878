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


def _two_layers(F, weights, kind="pre"):
    for W_q, W_k, W_v in weights:
        if kind == "pre":  # the exercise: f + c(Normalize(f))
            C, _ = qt.self_attention(F_.layer_norm(F, F.shape[-1:]), W_q, W_k, W_v)
            F = F + C
        elif kind == "post":  # Eq. (37), displayed in the chapter
            F = qt.update_residual_norm(F, qt.self_attention(F, W_q, W_k, W_v)[0])
        elif kind == "norm-added":  # the context added to the normalised vectors
            X = F_.layer_norm(F, F.shape[-1:])
            F = X + qt.self_attention(X, W_q, W_k, W_v)[0]
        else:  # replacement, Eq. (36)
            F = qt.self_attention(F, W_q, W_k, W_v)[0]
    return F


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_two_layers)


@pytest.mark.parametrize("kind", ["post", "norm-added", "replace"])
def test_ex2_other_layer_forms_fail(kind):
    # "post" is Eq. (37), which the chapter displays and runs: pasting it must not pass
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda F, w: _two_layers(F, w, kind=kind))


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


def test_hidden_ex2_accepts_the_solution_and_rejects_the_post_norm_layer():
    ex.hidden_check_ex2(_two_layers)
    with pytest.raises(AssertionError, match="two pre-norm layers"):
        ex.hidden_check_ex2(lambda F, w: _two_layers(F, w, kind="post"))


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


def test_checks_raise_explicitly_and_survive_python_o():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(ex))
    assert not [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
