"""Exercise self-checks of ch03_2_1_attention_scoring: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import ast
import inspect
import math

import pytest

from attnsurvey.data.lookup import key_lookup
from attnsurvey.exercises import _verdict as verdict_module
from attnsurvey.exercises import ch03_2_1_attention_scoring as ex
from attnsurvey.general_mechanisms import scoring as sc

from .helpers import refused_without_the_answer, refused_without_the_verdict


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda d, s: d * s**4, lambda d, s: s**2 * math.sqrt(d))


def test_ex1_sigma_squared_instead_of_fourth_power_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda d, s: d * s**2, lambda d, s: s * math.sqrt(d))


def _unit_variance_general(Q, K, W):
    return sc.general_score(Q, K, W) / W.norm()


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_unit_variance_general)


def test_ex2_the_transformers_sqrt_dk_fails():
    # the scale the chapter displays (right only for W = I) must not pass
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda Q, K, W: sc.general_score(Q, K, W) / math.sqrt(K.shape[-1]))


def test_ex2_forgotten_scaling_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda Q, K, W: sc.general_score(Q, K, W))


def test_ex2_scaling_by_query_size_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda Q, K, W: sc.general_score(Q, K, W) / math.sqrt(Q.shape[-1]))


RESULTS = {"scaled-multiplicative": [0.61, 0.63, 0.60, 0.64, 0.62], "additive": [0.41, 0.45, 0.40, 0.47, 0.43]}
# the chapter's first experiment, on the default task (made-up numbers of the same kind)
FIRST = {"scaled-multiplicative": [0.88, 0.87, 0.89, 0.88, 0.87], "additive": [0.6, 0.55, 0.66, 0.62, 0.58]}


def _harder(n, g):
    return key_lookup(n, n_f=16, noise=0.8, generator=g)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_harder, RESULTS, "scaled-multiplicative", FIRST)


def test_ex3_default_task_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda n, g: key_lookup(n, generator=g), RESULTS, "scaled-multiplicative", FIRST)


def test_ex3_wrong_noise_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda n, g: key_lookup(n, n_f=16, generator=g), RESULTS, "scaled-multiplicative", FIRST)


def test_ex3_unsupported_verdict_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_harder, RESULTS, "not resolved", FIRST)


def test_ex3_claiming_a_winner_on_noise_fails():
    tied = {"scaled-multiplicative": [0.6, 0.5, 0.7, 0.55, 0.62], "additive": [0.58, 0.6, 0.61, 0.57, 0.6]}
    with pytest.raises(AssertionError):
        ex.check_ex3(_harder, tied, "scaled-multiplicative", FIRST)


def test_ex3_one_seed_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(_harder, {k: v[:1] for k, v in RESULTS.items()}, "scaled-multiplicative", FIRST)


def test_ex3_results_of_the_first_experiment_fail():
    with pytest.raises(AssertionError, match="task=harder_task"):
        ex.check_ex3(_harder, FIRST, "scaled-multiplicative", FIRST)


def test_ex3_a_misspelt_verdict_fails_without_naming_the_supported_one():
    refused_without_the_verdict(ex.check_ex3, _harder, RESULTS, "scaled multiplicative", FIRST, match="must be one of")


def test_ex3_an_unsupported_verdict_fails_without_naming_the_supported_one():
    message = refused_without_the_verdict(
        ex.check_ex3, _harder, RESULTS, "additive", FIRST, match="does not follow", hidden="verdict it supports"
    )
    assert "[+0.1" not in message  # nor the interval, which gives the verdict away


def test_ex2_transposed_weight_matrix_fails_with_a_hint():
    with pytest.raises(AssertionError, match="order of the factors"):
        ex.check_ex2(lambda Q, K, W: Q @ W @ K.T / math.sqrt(K.shape[1]))


def test_ex2_numpy_and_transposed_forms_pass():
    assert "correct" in ex.check_ex2(lambda Q, K, W: (Q @ W.T @ K.T / float((W * W).sum()) ** 0.5).numpy())


@pytest.mark.parametrize("module", [ex, verdict_module], ids=["ch03_2_1", "_verdict"])
def test_checks_raise_explicitly_and_survive_python_o(module):
    # a bare assert disappears under python -O (PYTHONOPTIMIZE), and every check would then pass anything
    tree = ast.parse(inspect.getsource(module))
    asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert not asserts, f"bare assert on lines {asserts}"


def test_hidden_ex1_accepts_the_solution_and_rejects_a_variance_within_the_simulation_tolerance():
    right = (lambda d, s: d * s**4, lambda d, s: s**2 * math.sqrt(d))
    ex.hidden_check_ex1(*right)
    close = (lambda d, s: 1.05 * d * s**4, lambda d, s: s**2 * math.sqrt(d))  # 5 % off
    assert "correct" in ex.check_ex1(*close)  # the simulation cannot see it ...
    with pytest.raises(AssertionError, match="not exact"):
        ex.hidden_check_ex1(*close)  # ... the exact moments can


def test_hidden_ex2_accepts_the_solution_and_rejects_a_scale_from_the_largest_entry():
    ex.hidden_check_ex2(_unit_variance_general)
    with pytest.raises(AssertionError, match="unit variance"):
        ex.hidden_check_ex2(lambda Q, K, W: sc.general_score(Q, K, W) / W.abs().max())


def test_hidden_ex3_accepts_a_repeatable_run_and_rejects_typed_in_numbers():
    def train_scores(seed, names, task, steps=80):  # stands in for the chapter's training: deterministic per seed
        return {n: (None, RESULTS[n][seed] + (0.0 if steps == 320 else 0.05)) for n in names}

    ex.hidden_check_ex3(RESULTS, train_scores, _harder, [0, 1, 2, 3, 4])
    typed = {n: [v + 0.01 for v in vals] for n, vals in RESULTS.items()}
    assert "correct" in ex.check_ex3(_harder, typed, "scaled-multiplicative", FIRST)  # consistent, so visible passes
    with pytest.raises(AssertionError, match="another value") as err:
        ex.hidden_check_ex3(typed, train_scores, _harder, [0, 1, 2, 3, 4])
    assert "0.6" not in str(err.value)


def test_hidden_ex3_rejects_results_after_the_first_tables_80_steps():
    # the exercise asks for 320 steps: 80 steps rank training speed (the chapter's own finding)
    def train_scores(seed, names, task, steps=80):
        return {n: (None, RESULTS[n][seed] + (0.0 if steps == 320 else 0.05)) for n in names}

    ex.hidden_check_ex3(RESULTS, train_scores, _harder, [0, 1, 2, 3, 4], steps=320)
    after80 = {n: [v + 0.05 for v in vals] for n, vals in RESULTS.items()}
    with pytest.raises(AssertionError, match="another value"):
        ex.hidden_check_ex3(after80, train_scores, _harder, [0, 1, 2, 3, 4], steps=320)


def test_no_check_message_states_the_answer():
    import torch

    from attnsurvey.exercises.ch03_2_1_attention_scoring import _VARIANCE_CASES

    d, s = _VARIANCE_CASES[0]
    refused_without_the_answer(
        ex.check_ex1, lambda d, s: d * s**2, lambda d, s: s * math.sqrt(d), answers=[d * s**4, s**2 * math.sqrt(d)]
    )
    # ex. 2: the first pair the check compares, recomputed here; the message must not print it
    gen = torch.Generator().manual_seed(7)
    Qx, Kx, Wx = torch.randn(3, 5, generator=gen), torch.randn(4, 6, generator=gen), torch.randn(6, 5, generator=gen)
    right = float(Kx[0] @ Wx @ Qx[0]) / float(Wx.norm())
    refused_without_the_answer(
        ex.check_ex2, lambda Q, K, W: sc.general_score(Q, K, W), answers=[right, "Frobenius", "||W||", "norm"]
    )
