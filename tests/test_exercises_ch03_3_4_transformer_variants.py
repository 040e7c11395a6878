"""Exercise self-checks of ch03_3_4_transformer_variants: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.exercises import ch03_3_4_transformer_variants as ex
from attnsurvey.transformer import reformer
from attnsurvey.transformer.relative import clipped_relative_positions


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(lambda n, k, d: (2 * n * n * d, 2 * k * n * d + 2 * n * k * d))


def test_ex1_forgetting_the_projections_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda n, k, d: (2 * n * n * d, 2 * n * k * d))


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(lambda n, w: clipped_relative_positions(n, n, w + 1).abs() <= w)


def test_ex2_exclusive_bound_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda n, w: clipped_relative_positions(n, n, w + 1).abs() < w)


def _lsh_error(X, V, n_buckets, chunk, shared=True):
    full = (
        reformer.shared_qk_attention(X, V)[0]
        if shared
        else torch.softmax(X @ X.transpose(-1, -2) / X.shape[-1] ** 0.5, -1) @ V
    )
    errs = []
    for s in range(5):
        R = reformer.random_rotations(X.shape[-1], n_buckets, torch.Generator().manual_seed(s))
        c, _ = reformer.lsh_attention(X, V, n_buckets, chunk, R=R)
        errs.append(float((c - full).norm() / full.norm()))
    return sum(errs) / len(errs)


def test_ex3_solution_passes():
    assert "correct" in ex.check_ex3(_lsh_error, True)


def test_ex3_unshared_reference_fails():
    with pytest.raises(AssertionError):
        ex.check_ex3(lambda X, V, b, m: _lsh_error(X, V, b, m, shared=False), True)


def test_ex3_wrong_verdict_fails():
    with pytest.raises(AssertionError) as err:
        ex.check_ex3(_lsh_error, False)
    assert "answer" not in str(err.value) and "True" not in str(err.value)  # the numbers suffice


def test_hidden_ex1_accepts_the_solution_and_rejects_forgotten_projections():
    ex.hidden_check_ex1(lambda n, k, d: (2 * n * n * d, 4 * n * k * d))
    with pytest.raises(AssertionError, match="not right"):
        ex.hidden_check_ex1(lambda n, k, d: (2 * n * n * d, 2 * n * k * d))


def test_hidden_ex2_accepts_the_solution_and_rejects_an_exclusive_bound():
    ex.hidden_check_ex2(lambda n, w: clipped_relative_positions(n, n, w + 1).abs() <= w)
    with pytest.raises(AssertionError, match="band"):
        ex.hidden_check_ex2(lambda n, w: clipped_relative_positions(n, n, w + 1).abs() < w)


def test_hidden_ex3_accepts_the_solution_and_rejects_a_verdict_that_is_not_a_bool():
    ex.hidden_check_ex3(_lsh_error, True)
    with pytest.raises(AssertionError, match="True or False"):
        ex.hidden_check_ex3(_lsh_error, 1)
    with pytest.raises(AssertionError, match="not right"):
        ex.hidden_check_ex3(lambda X, V, b, m: _lsh_error(X, V, b, m, shared=False), True)


def test_ex2_clipping_at_w_fails():
    """Clipping at b = w (not above it) keeps every pair: both checks reject it."""
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda n, w: clipped_relative_positions(n, n, w).abs() <= w)
    with pytest.raises(AssertionError, match="band"):
        ex.hidden_check_ex2(lambda n, w: clipped_relative_positions(n, n, w).abs() <= w)
