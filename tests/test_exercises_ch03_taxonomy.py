"""Taxonomy chapter exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey import builder as B
from attnsurvey import taxonomy as tx
from attnsurvey.data.taxonomy_tasks import question_in_features, two_marker_task
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


LCR_ROT = dict(feature_multiplicity="rotatory", scoring="activated-general", query_type="specialized")


def test_ex2_rejects_the_table3_row_of_the_repeated_form():
    """Pasting LCR-Rot-hop's row of Table III (shown in the Explore control) keeps its multi-hop."""
    hop = tx.table3_row("table3:row08").point
    with pytest.raises(AssertionError, match="query_multiplicity"):
        ex.check_ex2(hop)


@pytest.mark.parametrize(
    "change, dimension",
    [
        ({"scoring": "general"}, "scoring"),
        ({"query_type": "basic"}, "query_type"),
        ({"query_type": "self-attention"}, "query_type"),
    ],
)
def test_ex2_rejects_a_near_miss(change, dimension):
    with pytest.raises(AssertionError, match=dimension):
        ex.check_ex2(B.point(**{**LCR_ROT, **change}))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(B.point(**LCR_ROT))


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    return tuple(question_in_features(two_marker_task(512, 8, 16, 4, g)) for _ in range(2))


EX3 = B.point(scoring="activated-general", query_type="self-attention")


def test_ex3_rejects_a_point_that_also_changes_the_query(data):
    with pytest.raises(AssertionError, match="score only"):
        ex.check_ex3(B.point(scoring="activated-general"), 0.6, False, *data)


def test_ex3_rejects_the_additive_score(data):
    with pytest.raises(AssertionError, match="score only"):
        ex.check_ex3(B.point(scoring="additive", query_type="self-attention"), 0.9, False, *data)


@pytest.mark.parametrize("prediction", [True, None, "no"])
def test_ex3_rejects_a_wrong_or_missing_prediction(data, prediction):
    with pytest.raises(AssertionError, match="ex3_question_can_reorder"):
        ex.check_ex3(EX3, 0.5, prediction, *data)


def test_ex3_rejects_the_data_without_the_question(data):
    g = torch.Generator().manual_seed(0)
    plain = two_marker_task(512, 8, 16, 4, g), two_marker_task(512, 8, 16, 4, g)
    with pytest.raises(AssertionError, match="ex3_train"):
        ex.check_ex3(EX3, 0.5, False, *plain)


def test_ex3_rejects_an_accuracy_that_was_not_measured(data):
    with pytest.raises(AssertionError, match="not what this point scores"):
        ex.check_ex3(EX3, 0.625, False, *data)


def test_ex3_accepts_the_solution(data):
    acc = B.fit_and_evaluate(EX3, *data, 4, epochs=8, seed=0)["accuracy"]
    assert "correct" in ex.check_ex3(EX3, acc, False, *data)


def test_hidden_ex1_accepts_the_solution_and_rejects_the_count_with_empty_sets():
    ex.hidden_check_ex1(31 * 7 * 3 * 127 * 15 * 3 * 7 * 15)
    with pytest.raises(AssertionError, match="non-empty subsets"):
        ex.hidden_check_ex1(math.prod(2**k for k in SIZES))


def test_hidden_ex2_accepts_the_solution_and_rejects_a_string():
    ex.hidden_check_ex2(B.point(**LCR_ROT))
    with pytest.raises(AssertionError, match="B.point"):
        ex.hidden_check_ex2("rotatory, activated general, specialized")


def test_hidden_ex3_accepts_the_solution_and_rejects_a_model_that_uses_the_question(data):
    ex.hidden_check_ex3(EX3, *data)
    with pytest.raises(AssertionError, match="blind ceiling"):
        ex.hidden_check_ex3(B.point(scoring="additive", query_type="self-attention"), *data)


def test_ex3_the_question_changes_the_weights_of_the_activated_score_but_not_their_order():
    """The solution's derivation: tanh(s_l + c + b) moves with the question c but keeps the order of s_l."""
    probe = two_marker_task(64, 8, 16, 4, torch.Generator().manual_seed(99))
    torch.manual_seed(0)
    model = B.build_model(EX3, d_model=16, n_classes=4)
    with torch.no_grad():
        model(probe["F"])
        without = model.last_weights.clone()
        model(question_in_features(probe)["F"])
    with_question = model.last_weights
    assert (with_question - without).abs().max() > 1e-4  # unlike the general score, the question moves the weights
    assert torch.equal(with_question.argsort(-1), without.argsort(-1))  # but never reorders the items
