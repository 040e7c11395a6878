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


def test_ex1_rejects_using_both_coordinates():
    with pytest.raises(AssertionError):
        ex.check_ex1(1 / (1 + math.exp(-9)))


def test_ex1_accepts_the_solution():
    assert "correct" in ex.check_ex1(1 / (1 + math.exp(-1)))


def _weights(mask_e34: bool):
    tables = make_embedding_tables(100, 4, PARTIAL, generator=torch.Generator().manual_seed(0), offset=1.0)
    torch.manual_seed(0)
    meta = rp.MetaEmbedding(tables.dims, 8, "attention")
    words = torch.arange(100)
    cov = tables.known[words].clone()
    cov[:, 2:] = not mask_e34
    with torch.no_grad():
        a = rp.multi_representational_attention(
            tables.lookup(words), [p.weight for p in meta.proj], [p.bias for p in meta.proj], meta.w, mask=cov
        ).a
    return a, tables.known[words]


def test_ex2_rejects_weights_that_keep_e3_and_e4():
    with pytest.raises(AssertionError, match="e3, e4"):
        ex.check_ex2(*_weights(mask_e34=False))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(*_weights(mask_e34=True))


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
