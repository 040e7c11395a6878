"""Exercise self-checks of ch03_2_2_attention_alignment: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import ast
import inspect

import pytest
import torch

from attnsurvey.exercises import ch03_2_2_attention_alignment as ex
from attnsurvey.general_mechanisms import alignment as al

from .helpers import refused_without_the_verdict


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda a, L, b: a * (L - (a * L).sum()))


def test_ex1_baseline_not_cancelled_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda a, L, b: a * (L - b))


def test_ex1_wrong_sign_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda a, L, b: -a * (L - (a * L).sum()))


def _shifted(e, p, D):
    n = e.shape[-1]
    width = min(2 * D + 1, n)
    start = min(max(p - D, 0), n - width)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[start : start + width] = True
    return al.soft_align(e, mask)


def _clipped(e, p, D):
    n = e.shape[-1]
    mask = torch.zeros(n, dtype=torch.bool)
    mask[max(p - D, 0) : min(p + D + 1, n)] = True
    return al.soft_align(e, mask)


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_shifted)


def test_ex2_clipped_window_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(_clipped)


def test_ex2_off_by_one_window_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda e, p, D: _shifted(e, p, D + 1) if D else _shifted(e, p, D))


D2 = [0.55, 0.6, 0.52, 0.58, 0.61]
D4 = [0.8, 0.85, 0.78, 0.83, 0.9]


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3({"D=4": D4, "D=2": D2}, "D=4", D2)


def test_ex3_unsupported_verdict_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3({"D=4": D4, "D=2": D2}, "not resolved", D2)


def test_ex3_d2_from_another_run_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3({"D=4": D4, "D=2": [x + 0.01 for x in D2]}, "D=4", D2)


def test_ex3_one_seed_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3({"D=4": D4[:1], "D=2": D2[:1]}, "D=4", D2[:1])


@pytest.mark.parametrize(
    "convert",
    [lambda w: w.double(), lambda w: w.numpy(), lambda w: w.tolist()],
    ids=["float64", "numpy", "list"],
)
def test_ex2_solution_of_another_type_passes(convert):
    assert "correct" in ex.check_ex2(lambda e, p, D: convert(_shifted(e, p, D)))


def test_ex3_misspelt_verdict_fails_without_naming_the_supported_one():
    refused_without_the_verdict(ex.check_ex3, {"D=4": D4, "D=2": D2}, "D4", D2, match="must be one of")


def test_checks_raise_explicitly_and_survive_python_o():
    # a bare assert disappears under python -O (PYTHONOPTIMIZE), and every check would then pass anything
    tree = ast.parse(inspect.getsource(ex))
    asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert not asserts, f"bare assert on lines {asserts}"


def test_ex3_rejects_d4_left_at_the_chapter_setting():
    # run_alignment("local-p", s, D=2) by mistake: the D=4 row repeats the chapter's local-p row
    with pytest.raises(AssertionError, match="train local-p with D=4"):
        ex.check_ex3({"D=4": list(D2), "D=2": D2}, "not resolved", D2)


def test_hidden_ex1_accepts_the_solution_and_rejects_a_baseline_that_does_not_cancel():
    ex.hidden_check_ex1(lambda a, L, b: a * (L - (a * L).sum()))
    with pytest.raises(AssertionError, match="baseline"):
        ex.hidden_check_ex1(lambda a, L, b: a * (L - b))


def test_hidden_ex2_accepts_the_solution_and_rejects_a_clipped_window():
    ex.hidden_check_ex2(_shifted)
    with pytest.raises(AssertionError, match="min"):
        ex.hidden_check_ex2(_clipped)


def test_hidden_ex3_accepts_a_repeatable_run_and_rejects_typed_in_numbers():
    def run_alignment(kind, seed, D=2):  # stands in for the chapter's training: deterministic per seed and D
        return {"accuracy": (D4 if D == 4 else D2)[seed]}

    ex.hidden_check_ex3({"D=4": D4, "D=2": D2}, run_alignment, [0, 1, 2, 3, 4])
    typed = [x - 0.05 for x in D4]
    assert "correct" in ex.check_ex3({"D=4": typed, "D=2": D2}, "D=4", D2)
    with pytest.raises(AssertionError, match="another value"):
        ex.hidden_check_ex3({"D=4": typed, "D=2": D2}, run_alignment, [0, 1, 2, 3, 4])


def test_no_check_message_states_the_answer():
    from .helpers import refused_without_the_answer

    gen = torch.Generator().manual_seed(7)  # the first case of check_ex1, recomputed: the right gradient
    e = torch.randn(2, generator=gen, dtype=torch.float64, requires_grad=True)
    L = torch.randn(2, generator=gen, dtype=torch.float64) + 2.0
    (torch.softmax(e, -1) * L).sum().backward()
    refused_without_the_answer(
        ex.check_ex1, lambda a, L, b: a * (L - b), answers=[*e.grad.tolist(), "(L_m - b)([l = m] - a_l)", "cancel"]
    )
    # ex. 2: the right weights of the first case
    e10 = torch.randn(10, generator=torch.Generator().manual_seed(3))
    right = torch.softmax(e10[3:8], -1).tolist()
    refused_without_the_answer(ex.check_ex2, lambda e, p, D: torch.softmax(e, -1), answers=right)
