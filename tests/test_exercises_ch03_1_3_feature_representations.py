"""Chapter 3.1.3 exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.data.embeddings import make_embedding_tables
from attnsurvey.exercises import ch03_1_3_feature_representations as ex
from attnsurvey.experiments.feature_related import RepresentationClassifier
from attnsurvey.feature_related import representations as rp
from attnsurvey.training import accuracy

PARTIAL = [("informative", 8, 0.5, 0.5), ("informative", 8, 0.5, 0.5), ("shuffled", 8, 0.5), ("noise", 8, 0.0)]
FULL = [("informative", 8, 0.5, 1.0), ("informative", 8, 0.5, 1.0), ("shuffled", 8, 0.5), ("noise", 8, 0.0)]


@pytest.mark.parametrize(
    "answer, match",
    [
        (2 + math.log(9), "second representation"),  # the sign of the difference swapped: a_1 = 0.1
        (math.log(9), "not 0.9"),  # the score difference, not the coordinate
        (2 - 0.9, "not 0.9"),  # the weight subtracted from x^(t_1)
        (1.0, "not 0.9"),  # the exercise's old x^(t_2) left in place
        (-0.5, "not 0.9"),
        (None, "None"),
        ("a number", "one number"),
    ],
)
def test_ex1_rejects_plausible_wrong_answers(answer, match):
    with pytest.raises(AssertionError, match=match):
        ex.check_ex1(answer)


@pytest.mark.parametrize("answer", [2 - math.log(9), -0.197, -0.1972, torch.tensor(-0.1972)])
def test_ex1_accepts_the_solution(answer):
    assert "correct" in ex.check_ex1(answer)


@pytest.mark.parametrize("answer", [2 + math.log(9), math.log(9), 1.1, -0.5])
def test_ex1_hints_do_not_state_the_key_step_or_the_value(answer):
    with pytest.raises(AssertionError) as err:
        ex.check_ex1(answer)
    for giveaway in ("log", "ln", "logit", "-0.197", "2 - "):
        if giveaway in str(err.value):
            raise AssertionError(f"the hint gives the key step away: {err.value}")


def _setup():
    tables = make_embedding_tables(100, 4, PARTIAL, generator=torch.Generator().manual_seed(0), offset=1.0)
    torch.manual_seed(0)
    meta = rp.MetaEmbedding(tables.dims, 8, "attention")
    with torch.no_grad():
        meta.w.normal_()  # a model whose weights are not all equal, as a trained one
    return tables, meta, torch.arange(100)


def _weights(mask_e34: bool, meta=None):
    tables, own, words = _setup()
    meta = own if meta is None else meta
    cov = tables.known[words].clone()
    cov[:, 2:] = not mask_e34
    with torch.no_grad():
        a = rp.multi_representational_attention(
            tables.lookup(words), [p.weight for p in meta.proj], [p.bias for p in meta.proj], meta.w, mask=cov
        ).a
    return a


def test_ex2_rejects_weights_that_keep_e3_and_e4():
    tables, meta, words = _setup()
    with pytest.raises(AssertionError, match="e3, e4"):
        ex.check_ex2(_weights(mask_e34=False), meta, tables, words)


def test_ex2_rejects_uniform_weights_over_the_known_tables():
    tables, meta, words = _setup()
    k2 = tables.known[words][:, :2].float()
    uniform = torch.cat([k2 / k2.sum(-1, keepdim=True).clamp(min=1), torch.zeros(len(words), 2)], -1)
    with pytest.raises(AssertionError, match="trained model"):
        ex.check_ex2(uniform, meta, tables, words)


def test_ex2_rejects_rows_that_do_not_sum_to_one():
    tables, meta, words = _setup()
    a = _weights(mask_e34=True)
    both = tables.known[words][:, :2].all(-1)
    a[both, 0], a[both, 1] = 0.9, 0.3
    with pytest.raises(AssertionError, match="sum to 1"):
        ex.check_ex2(a, meta, tables, words)


def test_ex2_rejects_weights_of_another_model():
    tables, meta, words = _setup()
    torch.manual_seed(1)
    other = rp.MetaEmbedding(tables.dims, 8, "attention")
    with torch.no_grad():
        other.w.normal_()
    with pytest.raises(AssertionError, match="trained model"):
        ex.check_ex2(_weights(mask_e34=True, meta=other), meta, tables, words)


def test_ex2_accepts_the_solution():
    tables, meta, words = _setup()
    assert "correct" in ex.check_ex2(_weights(mask_e34=True), meta, tables, words)


def test_ex2_accepts_the_module_call_in_float64():
    tables, meta, words = _setup()
    known = tables.known[words]
    cov = torch.cat([known[:, :2], torch.zeros(len(words), 2, dtype=torch.bool)], -1)
    with torch.no_grad():
        a = meta(tables.lookup(words), mask=cov).a.double()
    holder = torch.nn.Module()
    holder.meta = meta  # the whole model may be passed as well
    assert "correct" in ex.check_ex2(a, holder, tables, words)


def _models(specs):
    tables = make_embedding_tables(200, 4, specs, generator=torch.Generator().manual_seed(0), offset=1.0)
    torch.manual_seed(0)
    m = [RepresentationClassifier(tables.dims, d_t=8, n_classes=4, combine=c) for c in ("attention", "average")]
    words = torch.arange(100, 200)
    with torch.no_grad():
        acc = [accuracy(x(tables.lookup(words))[0], tables.classes[words]) for x in m]
    return m, tables, words, acc


def test_ex3_rejects_partial_coverage():
    m, tables, words, acc = _models(PARTIAL)
    with pytest.raises(AssertionError, match="cover every word"):
        ex.check_ex3(*m, tables, words, *acc)


def test_ex3_rejects_made_up_accuracies():
    m, tables, words, acc = _models(FULL)
    with pytest.raises(AssertionError, match="not what the model scores"):
        ex.check_ex3(*m, tables, words, acc[0] + 0.1, acc[1])


def test_ex3_accepts_the_solution():
    m, tables, words, acc = _models(FULL)
    assert "correct" in ex.check_ex3(*m, tables, words, *acc)


def test_hidden_ex1_accepts_the_solution_and_rejects_a_coarse_value():
    ex.hidden_check_ex1(2 - math.log(9))
    ex.hidden_check_ex1(-0.197)
    assert "correct" in ex.check_ex1(-0.2)  # two decimals: passes the visible check ...
    with pytest.raises(AssertionError, match="three correct decimals"):
        ex.hidden_check_ex1(-0.2)  # ... not the hidden one


def test_hidden_ex2_accepts_the_solution_and_rejects_slightly_perturbed_weights():
    tables, meta, words = _setup()
    a = _weights(mask_e34=True)
    ex.hidden_check_ex2(a, meta, tables, words)
    both = tables.known[words][:, :2].all(-1)
    nudged = a.clone()
    nudged[both, 0] += 5e-6
    nudged[both, 1] -= 5e-6
    assert "correct" in ex.check_ex2(nudged, meta, tables, words)  # within the visible tolerance ...
    with pytest.raises(AssertionError, match="coverage as mask"):
        ex.hidden_check_ex2(nudged, meta, tables, words)  # ... not within the hidden one


def test_hidden_ex3_accepts_the_solution_and_rejects_another_test_split():
    tables = make_embedding_tables(600, 4, FULL, generator=torch.Generator().manual_seed(0), offset=1.0)
    ex.hidden_check_ex3(tables, torch.randperm(600, generator=torch.Generator().manual_seed(0))[300:])
    m, small_tables, words, acc = _models(FULL)
    assert "correct" in ex.check_ex3(*m, small_tables, words, *acc)  # 100 test words pass the visible check ...
    with pytest.raises(AssertionError, match="300 test words"):
        ex.hidden_check_ex3(small_tables, words)


def test_ex3_rejects_the_chapters_own_model():
    m, tables, words, acc = _models(FULL)
    with pytest.raises(AssertionError, match="chapter's own"):
        ex.check_ex3(*m, tables, words, *acc, m[0])
    torch.manual_seed(5)
    other = RepresentationClassifier(tables.dims, d_t=8, n_classes=4, combine="attention")
    assert "correct" in ex.check_ex3(*m, tables, words, *acc, other)
