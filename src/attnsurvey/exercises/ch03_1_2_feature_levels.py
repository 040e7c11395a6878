"""Self-checks for the exercises of Chapter 3.1.2 (survey §3.1.2, feature levels)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..feature_related import levels as lv
from ._answers import not_the_same_model, run_answer

if TYPE_CHECKING:
    from ..data.documents import Documents


def check_ex1(first_word_weight: float) -> str:
    """Ex. 1: the scaled weight (review eq. 7) of the first word for chunk weights (0.25, 0.75)
    and document-normalised word weights [[0.1, 0.1], [0.4, 0.4]]."""
    if first_word_weight is None:
        raise AssertionError("first_word_weight is still None: give the number you computed")
    expected = float(lv.scaled_word_weights(torch.tensor([[0.1, 0.1], [0.4, 0.4]]), torch.tensor([0.25, 0.75]))[0, 0])
    got = float(first_word_weight)
    if math.isclose(got, 0.025, abs_tol=1e-9):
        raise AssertionError("0.025 is the product, not yet eq. 7's weight: read eq. 7 to the end")
    if math.isclose(got, 0.1, abs_tol=1e-9):
        raise AssertionError(
            "0.1 is the word's own weight: eq. 7 multiplies it by its chunk's weight and then renormalises"
        )
    if not math.isclose(got, expected, rel_tol=2e-3):  # three significant figures are enough
        if math.isclose(got, expected, rel_tol=3e-2):
            raise AssertionError(f"{got} is close but too coarse: give at least three significant figures")
        raise AssertionError(
            "not yet: apply eq. 7 to every word of the example, with the weights as given (not renormalised per chunk)"
        )
    return "correct"


def check_ex2(two_level: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> str:
    """Ex. 2: ``two_level(q, K, V, word_mask)`` is the eq. 8-9 document context, empty sentences masked."""
    gen = torch.Generator().manual_seed(5)
    q, K = torch.randn(3, 4, generator=gen), torch.randn(3, 4, 5, 4, generator=gen)
    m = torch.rand(3, 4, 5, generator=gen) > 0.4
    m[0, 1] = False  # an empty sentence
    m[:, 0, 0] = True
    V = torch.randn(3, 4, 5, 4, generator=gen)  # values differ from the keys, so that swapping them shows
    want = lv.hierarchical_chunk_attention(q, K, V, m).c
    got = torch.as_tensor(two_level(q, K, V, m), dtype=want.dtype)
    if got.shape != want.shape:
        raise AssertionError(
            f"expected one document context per query, shape {tuple(want.shape)}, got {tuple(got.shape)}"
        )
    if not torch.allclose(got, want, atol=1e-5):
        bad = (got - want).abs().amax(-1) > 1e-5
        swapped = lv.hierarchical_chunk_attention(q, V, K, m).c
        if bad.tolist() == [True, False, False]:
            hint = " (only the document with an empty sentence differs: mask it out)"
        elif torch.allclose(got, swapped, atol=1e-5):
            hint = " (at the word level, K scores the words and V is what gets averaged)"
        else:
            hint = ""
        raise AssertionError("document context differs from eq. 8-9" + hint)
    return "correct: chunk contexts as keys and values, empty sentences masked"


def check_ex3(
    model_flat: torch.nn.Module,
    model_hier: torch.nn.Module,
    test_docs: Documents,
    flat_acc: float,
    hier_acc: float,
    chapter_models: Mapping[str, object] | None = None,
) -> str:
    """Ex. 3: flat and hierarchical models trained and tested on two-sentence documents.

    The check verifies that ``test_docs`` have exactly two sentences, re-evaluates
    both models on them and compares with your accuracies. ``chapter_models`` is
    the chapter's own seed-0 run (``{"flat": model, "hierarchical": model}``):
    handing in those models, trained on five-sentence documents, fails.
    """
    from ..training import accuracy

    if getattr(model_flat, "kind", None) != "flat" or getattr(model_hier, "kind", None) != "hierarchical":
        raise AssertionError("pass the flat model first and the hierarchical model second")
    for kind, model in (("flat", model_flat), ("hierarchical", model_hier)):
        other = (chapter_models or {}).get(kind)
        not_the_same_model(
            model,
            other if isinstance(other, torch.nn.Module) else None,
            f"the {kind} model is the chapter's own (trained on five-sentence documents): train a new one on 'easy'",
        )
    n_real = test_docs.word_mask.any(-1).sum(-1)
    if not bool((n_real == 2).all()):
        raise AssertionError(
            f"the test documents have {int(n_real.min())}-{int(n_real.max())} sentences; "
            "make them with n_sentences=2, min_sentences=2"
        )
    with torch.no_grad():
        got = [
            accuracy(m(test_docs.tokens, test_docs.word_mask).logits, test_docs.labels)
            for m in (model_flat, model_hier)
        ]
    for name, given, g in zip(("flat", "hierarchical"), (flat_acc, hier_acc), got):
        if not math.isclose(float(given), g, abs_tol=1e-6):
            raise AssertionError(f"your {name} accuracy is not what the model scores on test_docs")
    return "correct: both accuracies are what the models score on your two-sentence test documents"


def hidden_check_ex1(first_word_weight: float) -> None:
    """Hidden test of Ex. 1: the weight against the exact fraction 1/26 (0.025 / 0.65), rounded correctly.

    Three significant figures must be the right ones (0.0385), so a value rounded
    the wrong way fails. Raises ``AssertionError``.
    """
    from fractions import Fraction

    exact = Fraction(1, 40) / (Fraction(1, 40) * 2 + Fraction(3, 10) * 2)
    if first_word_weight is None or not math.isclose(float(first_word_weight), float(exact), rel_tol=1.2e-3):
        raise AssertionError("round the weight correctly: three significant figures of the exact value")


def hidden_check_ex2(two_level: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> None:
    """Hidden test of Ex. 2: other sizes (2 documents, 3 sentences, 6 words, d = 6), one document with one real sentence.

    Raises ``AssertionError``.
    """
    gen = torch.Generator().manual_seed(55)
    q, K, V = (
        torch.randn(2, 6, generator=gen),
        torch.randn(2, 3, 6, 6, generator=gen),
        torch.randn(2, 3, 6, 6, generator=gen),
    )
    m = torch.rand(2, 3, 6, generator=gen) > 0.3
    m[:, :, 0] = True
    m[1, :2] = False  # the second document: only its last sentence has words
    want = lv.hierarchical_chunk_attention(q, K, V, m).c
    got = torch.as_tensor(
        run_answer(two_level, q, K, V, m, what="2 documents of 3 sentences of 6 words"), dtype=want.dtype
    )
    if got.shape != want.shape or not torch.allclose(got, want, atol=1e-5):
        raise AssertionError("2 documents of 3 sentences of 6 words, one with a single real sentence: contexts differ")


def hidden_check_ex3(test_docs: Documents) -> None:
    """Hidden test of Ex. 3: the test set holds the 300 documents the exercise asks for. Raises ``AssertionError``."""
    if len(test_docs.labels) != 300:
        raise AssertionError("test the models on 300 documents, as the exercise asks")
