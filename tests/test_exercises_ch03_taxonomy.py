"""Taxonomy chapter exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey import builder as B
from attnsurvey import taxonomy as tx
from attnsurvey.data.taxonomy_tasks import two_marker_task
from attnsurvey.exercises import ch03_taxonomy as ex

SIZES = [len(m) for aspects in tx.FIG3.values() for m in aspects.values()]


def test_ex1_rejects_single_value_count():
    with pytest.raises(AssertionError):
        ex.check_ex1(math.prod(SIZES))


def test_ex1_rejects_counting_the_empty_set():
    with pytest.raises(AssertionError):
        ex.check_ex1(math.prod(2**k for k in SIZES))


def test_ex1_rejects_the_finer_vocabulary():
    sizes = [len(v) for g in tx.TAXONOMY.values() for v in g.values()]
    with pytest.raises(AssertionError):
        ex.check_ex1(math.prod(2**k - 1 for k in sizes))


def test_ex1_accepts_the_solution():
    assert "correct" in ex.check_ex1(31 * 7 * 3 * 127 * 15 * 3 * 7 * 15)


def test_ex2_rejects_a_point_without_multi_dimensional_weights():
    with pytest.raises(AssertionError, match="dimensionality"):
        ex.check_ex2(B.point(scoring="additive", query_type="self-attention"))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(
        B.point(scoring="additive", dimensionality="multi-dimensional", query_type="self-attention")
    )


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    return two_marker_task(512, 8, 16, 4, g), two_marker_task(512, 8, 16, 4, g)


def test_ex3_rejects_a_point_that_also_changes_the_query(data):
    with pytest.raises(AssertionError, match="score only"):
        ex.check_ex3(B.point(scoring="additive", query_type="self-attention"), 0.6, *data)


def test_ex3_rejects_an_accuracy_that_was_not_measured(data):
    with pytest.raises(AssertionError, match="not what this point scores"):
        ex.check_ex3(B.point(scoring="additive"), 0.5, *data)


def test_ex3_accepts_the_solution(data):
    p = B.point(scoring="additive")
    acc = B.fit_and_evaluate(p, *data, 4, epochs=8, seed=0)["accuracy"]
    assert "correct" in ex.check_ex3(p, acc, *data)


def test_hidden_ex1_accepts_the_solution_and_rejects_the_count_with_empty_sets():
    ex.hidden_check_ex1(31 * 7 * 3 * 127 * 15 * 3 * 7 * 15)
    with pytest.raises(AssertionError, match="non-empty subsets"):
        ex.hidden_check_ex1(math.prod(2**k for k in SIZES))


def test_hidden_ex2_accepts_the_solution_and_rejects_a_string():
    ex.hidden_check_ex2(B.point(scoring="additive", dimensionality="multi-dimensional", query_type="self-attention"))
    with pytest.raises(AssertionError, match="B.point"):
        ex.hidden_check_ex2("additive, multi-dimensional, self-attention")


def test_hidden_ex3_accepts_the_solution_and_rejects_a_self_attention_query(data):
    ex.hidden_check_ex3(B.point(scoring="additive"), *data)
    with pytest.raises(AssertionError, match="basic query"):
        ex.hidden_check_ex3(B.point(scoring="additive", query_type="self-attention"), *data)
