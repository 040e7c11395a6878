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


@pytest.mark.parametrize(
    "answer, match",
    [
        (0.25, "not normalised within each chunk"),  # beta itself: eq. 7 with alpha = beta
        (0.2, "mass"),  # the word-level mass p_1
        (0.05 / 0.65, "effective chunk weights"),  # beta re-weighted by the mass once more (the wrong direction)
        (0.5, "effective chunk weights"),
        (0.57, "significant"),  # two figures
        (None, "None"),
        (1.25, "lies in"),  # beta_1 / p_1, not renormalised
    ],
)
def test_ex1_rejects_plausible_wrong_answers(answer, match):
    with pytest.raises(AssertionError, match=match):
        ex.check_ex1(answer)


@pytest.mark.parametrize("answer", [4 / 7, 0.571, 0.5714, torch.tensor(0.5714)])
def test_ex1_accepts_the_solution(answer):
    assert "correct" in ex.check_ex1(answer)


def test_ex1_the_answer_makes_eq7_and_eq89_agree():
    c7, c89 = ex._ex1_contexts(4 / 7)
    torch.testing.assert_close(c7, c89)


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


def test_hidden_ex1_accepts_the_solution_and_rejects_a_coarse_value():
    ex.hidden_check_ex1(4 / 7)
    ex.hidden_check_ex1(0.5714)
    with pytest.raises(AssertionError, match="three figures"):
        ex.hidden_check_ex1(0.57)


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


@pytest.mark.parametrize("answer", [0.25, 0.2, 0.05 / 0.65, 0.5, 0.57, 1.25])
def test_ex1_hints_do_not_state_the_key_step_or_the_value(answer):
    with pytest.raises(AssertionError) as err:
        ex.check_ex1(answer)
    for giveaway in ("divide", "/ p", "proportional", "4/7", "0.571", "0.9375"):
        if giveaway in str(err.value):
            raise AssertionError(f"the hint gives the key step away: {err.value}")
