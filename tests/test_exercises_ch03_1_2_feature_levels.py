"""Chapter 3.1.2 exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data.documents import make_documents
from attnsurvey.exercises import ch03_1_2_feature_levels as ex
from attnsurvey.experiments.feature_related import DocumentClassifier
from attnsurvey.feature_related import levels as lv
from attnsurvey.general_model import attend
from attnsurvey.training import accuracy


def two_level(q, K, V, word_mask, mask_empty=True):
    C, _ = lv.chunk_contexts(q, K, V, word_mask)
    ok = word_mask.any(-1) if mask_empty else torch.ones(word_mask.shape[:-1], dtype=torch.bool)
    c, _ = attend(q.unsqueeze(-2), C, C, ok.unsqueeze(-2))
    return c.squeeze(-2)


def test_ex1_rejects_the_product_before_renormalising():
    with pytest.raises(AssertionError):
        ex.check_ex1(0.05)


def test_ex1_rejects_the_word_weight_without_rescaling():
    with pytest.raises(AssertionError, match="chunk's weight"):
        ex.check_ex1(0.1)  # alpha_11 alone: eq. 7 was not applied


def test_ex1_rejects_the_new_product_before_renormalising():
    with pytest.raises(AssertionError, match="0.025 is the product, not yet"):
        ex.check_ex1(0.025)


def test_ex1_rejects_a_two_figure_rounding():
    with pytest.raises(AssertionError, match="significant"):
        ex.check_ex1(0.038)


@pytest.mark.parametrize("answer", [0.025 / 0.65, 1 / 26, 0.0385, torch.tensor(0.0385)])
def test_ex1_accepts_the_solution(answer):
    assert "correct" in ex.check_ex1(answer)


def test_ex2_rejects_unmasked_empty_sentences():
    with pytest.raises(AssertionError, match="empty sentence"):
        ex.check_ex2(lambda q, K, V, m: two_level(q, K, V, m, mask_empty=False))


def test_ex2_rejects_keys_and_values_swapped():
    with pytest.raises(AssertionError, match="K scores the words"):
        ex.check_ex2(lambda q, K, V, m: two_level(q, V, K, m))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(two_level)


@pytest.fixture(scope="module")
def easy_models():
    docs = make_documents(200, n_sentences=2, n_words=6, min_sentences=2, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    return (
        DocumentClassifier(len(docs.vocab), d_e=8, n_classes=2, kind="flat"),
        DocumentClassifier(len(docs.vocab), d_e=8, n_classes=2, kind="hierarchical"),
        docs,
    )


def _acc(models, docs):
    with torch.no_grad():
        return [accuracy(m(docs.tokens, docs.word_mask).logits, docs.labels) for m in models]


def test_ex3_rejects_the_original_documents(easy_models):
    flat, hier, _ = easy_models
    orig = make_documents(100, n_sentences=5, n_words=6, min_sentences=4, generator=torch.Generator().manual_seed(1))
    with pytest.raises(AssertionError, match="sentences"):
        ex.check_ex3(flat, hier, orig, *_acc((flat, hier), orig))


def test_ex3_rejects_swapped_accuracies(easy_models):
    flat, hier, docs = easy_models
    a = _acc((flat, hier), docs)
    if abs(a[0] - a[1]) < 1e-6:
        a[1] += 0.1
    with pytest.raises(AssertionError):
        ex.check_ex3(flat, hier, docs, a[1], a[0])


def test_ex3_accepts_the_solution(easy_models):
    flat, hier, docs = easy_models
    assert "correct" in ex.check_ex3(flat, hier, docs, *_acc((flat, hier), docs))


def test_hidden_ex1_accepts_the_solution_and_rejects_a_value_rounded_the_wrong_way():
    ex.hidden_check_ex1(0.025 / (0.025 + 0.025 + 0.3 + 0.3))
    ex.hidden_check_ex1(0.0385)
    assert "correct" in ex.check_ex1(0.0384)  # three figures, rounded down: passes the visible check ...
    with pytest.raises(AssertionError, match="round"):
        ex.hidden_check_ex1(0.0384)  # ... not the hidden one


def test_hidden_ex2_accepts_the_solution_and_rejects_unmasked_empty_sentences():
    ex.hidden_check_ex2(two_level)
    with pytest.raises(AssertionError, match="single real sentence"):
        ex.hidden_check_ex2(lambda q, K, V, m: two_level(q, K, V, m, mask_empty=False))


def test_hidden_ex3_accepts_300_documents_and_rejects_another_size(easy_models):
    ex.hidden_check_ex3(
        make_documents(300, n_sentences=2, n_words=6, min_sentences=2, generator=torch.Generator().manual_seed(2))
    )
    flat, hier, docs = easy_models
    assert "correct" in ex.check_ex3(
        flat, hier, docs, *_acc((flat, hier), docs)
    )  # 200 documents pass the visible check
    with pytest.raises(AssertionError, match="300 documents"):
        ex.hidden_check_ex3(docs)


def test_ex3_rejects_the_chapters_own_models(easy_models):
    flat, hier, docs = easy_models
    acc = _acc((flat, hier), docs)
    chapter = {"flat": flat, "hierarchical": hier, "test": docs}  # the chapter's run, handed in unchanged
    with pytest.raises(AssertionError, match="chapter's own"):
        ex.check_ex3(flat, hier, docs, *acc, chapter)
    torch.manual_seed(1)
    new_flat = DocumentClassifier(len(docs.vocab), d_e=8, n_classes=2, kind="flat")
    new_flat.load_state_dict(flat.state_dict())
    with pytest.raises(AssertionError, match="chapter's own"):  # a copy with the same parameters is the same model
        ex.check_ex3(new_flat, hier, docs, *acc, chapter)
    torch.manual_seed(2)
    other = {k: DocumentClassifier(len(docs.vocab), d_e=8, n_classes=2, kind=k) for k in ("flat", "hierarchical")}
    assert "correct" in ex.check_ex3(flat, hier, docs, *acc, other)


@pytest.mark.parametrize("answer", [0.025, 0.05, 0.1])
def test_ex1_hints_do_not_state_the_renormalisation(answer):
    with pytest.raises(AssertionError) as err:
        ex.check_ex1(answer)
    for giveaway in ("divide", "sum of all", "0.65", "1/26"):
        if giveaway in str(err.value):
            raise AssertionError(f"the hint gives the key step away: {err.value}")
