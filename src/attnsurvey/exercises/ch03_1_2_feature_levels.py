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


#: Ex. 1's document: document-normalised word weights of two chunks, and the eq. 8-9 chunk weights to match.
EX1_WORD_WEIGHTS = ((0.1, 0.1), (0.4, 0.4))
EX1_BETA = (0.25, 0.75)


def _ex1_contexts(alpha_1: float) -> tuple[Tensor, Tensor]:
    """Eq. 7 with chunk weights (alpha_1, 1 - alpha_1) and Ex. 1's word weights, and eq. 8-9 with EX1_BETA.

    Both on the same random values (4 words of size 3), in float64.
    """
    a_doc = torch.tensor(EX1_WORD_WEIGHTS, dtype=torch.float64)
    V = torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    c7, _ = lv.hierarchical_scaled_attention(a_doc, torch.tensor([alpha_1, 1 - alpha_1], dtype=torch.float64), V)
    within = a_doc / a_doc.sum(-1, keepdim=True)  # the same words, normalised within each chunk
    c89 = (torch.tensor(EX1_BETA, dtype=torch.float64)[:, None, None] * within[..., None] * V).sum((0, 1))
    return c7, c89


def check_ex1(alpha_1: float) -> str:
    """Ex. 1: the chunk weight alpha_1 for which eq. 7, with the document-normalised word weights
    [[0.1, 0.1], [0.4, 0.4]] and chunk weights (alpha_1, 1 - alpha_1), gives the eq. 8-9 context of
    chunk weights (0.25, 0.75)."""
    if alpha_1 is None:
        raise AssertionError("alpha_1 is still None: give the number you derived")
    got = float(alpha_1)
    if not 0.0 < got < 1.0:
        raise AssertionError(f"alpha_1 = {got} is a chunk weight of two chunks that sum to 1: it lies in (0, 1)")
    if math.isclose(got, EX1_BETA[0], abs_tol=1e-9):
        raise AssertionError(
            "with alpha_m = beta_m the two forms differ here: the word weights are not normalised within each "
            "chunk (see 'When do they differ?')"
        )
    if math.isclose(got, 0.2, abs_tol=1e-9):
        raise AssertionError("0.2 is the first chunk's word-level mass p_1, not a chunk weight of eq. 7")
    c7, c89 = _ex1_contexts(got)
    gap = float((c7 - c89).abs().max())
    if gap > 2.5e-4:  # three significant figures of alpha_1 stay below this; two do not
        raise AssertionError(
            f"{got} is close but too coarse: give at least three significant figures"
            if gap < 2e-3
            else "not yet: eq. 7 with these chunk weights does not give the eq. 8-9 context; write eq. 7's "
            "effective chunk weights for your (alpha_1, 1 - alpha_1) and compare them with (0.25, 0.75)"
        )
    return "correct: eq. 7 with your chunk weights gives the eq. 8-9 context"


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


def hidden_check_ex1(alpha_1: float) -> None:
    """Hidden test of Ex. 1: alpha_1 against the exact fraction 4/7, from beta_m / p_m renormalised.

    With the word-level masses p = (0.2, 0.8), the effective chunk weights of eq. 7 are
    p_m alpha_m / sum_s p_s alpha_s; they equal beta for alpha proportional to beta_m / p_m.
    Raises ``AssertionError``.
    """
    from fractions import Fraction

    p = [Fraction(1, 5), Fraction(4, 5)]
    beta = [Fraction(1, 4), Fraction(3, 4)]
    exact = (beta[0] / p[0]) / (beta[0] / p[0] + beta[1] / p[1])
    if alpha_1 is None or not math.isclose(float(alpha_1), float(exact), rel_tol=1.2e-3):
        raise AssertionError("alpha_1 is not the chunk weight that makes the two forms agree, to three figures")


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
