"""Self-checks for the exercises of Chapter 3.1.3 (survey §3.1.3, feature representations)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..feature_related import representations as rp
from ._answers import not_the_same_model

if TYPE_CHECKING:
    from ..data.embeddings import EmbeddingTables


def _ex1_weight(x2_first: float) -> float:
    """Eq. (22)'s a_1 for w = (1, 0), x^(t_1) = (2, 5) and x^(t_2) = (x2_first, 0), computed with the library."""
    X_t = torch.tensor([[2.0, 5.0], [float(x2_first), 0.0]], dtype=torch.float64)
    return float(torch.softmax(rp.representation_scores(X_t, torch.tensor([1.0, 0.0], dtype=torch.float64)), -1)[0])


def check_ex1(x2_first: float) -> str:
    """Ex. 1: the first coordinate of x^(t_2) that gives a_1 = 0.9 for w = (1, 0) and x^(t_1) = (2, 5).

    The answer is run forward through Eq. (22) (softmax of the library's scores) and
    the weight it gives is compared with 0.9.
    """
    if x2_first is None:
        raise AssertionError("x2_first is still None: give the number you derived")
    try:
        z = float(x2_first)
    except (TypeError, ValueError):
        raise AssertionError(f"x2_first is one number, the first coordinate of x^(t_2); got {x2_first!r}") from None
    a1 = _ex1_weight(z)
    if abs(a1 - 0.9) > 5e-4:
        raise AssertionError(
            f"with x^(t_2) = ({z:g}, ...), Eq. (22) gives a_1 = {a1:.4f}, not 0.9: "
            + (
                "that value makes the second representation the heavier one"
                if a1 < 0.5
                else "invert the relation you derived in the first part"
            )
        )
    return "correct: with your x^(t_2), Eq. (22) gives the first representation the weight asked for"


def check_ex2(a_masked: Tensor, meta: torch.nn.Module, tables: EmbeddingTables, test_words: Tensor) -> str:
    """Ex. 2: the weights over the 4 tables with the true coverage of e1, e2 as the mask (e3, e4 masked out).

    ``meta`` is the trained model's :class:`~attnsurvey.feature_related.representations.MetaEmbedding`
    (or the model that holds it as ``.meta``); ``tables`` and ``test_words`` are
    the tables and the words the weights were computed for. The check recomputes
    the masked weights with ``meta``'s parameters and compares.
    """
    meta = getattr(meta, "meta", meta)
    if getattr(meta, "combine", None) != "attention":
        raise AssertionError("pass the trained meta-embedding (first['model'].meta), whose weights are learned")
    known = tables.known[test_words]
    a = torch.as_tensor(a_masked)
    if a.shape != known.shape:
        raise AssertionError(
            f"expected one weight per word and table, shape {tuple(known.shape)}, got {tuple(a.shape)}"
        )
    a = a.to(torch.float64)
    if not bool((a[:, 2:] == 0).all()):
        raise AssertionError("the shuffled and noise tables (e3, e4) must be masked out: they cover no word")
    k = known[:, :2]
    if not bool((a[:, :2][~k] == 0).all()):
        raise AssertionError("a table that does not know a word must get weight 0 for it")
    some = k.any(-1)
    if not torch.allclose(a[some].sum(-1), torch.ones(int(some.sum()), dtype=a.dtype), atol=1e-5):
        raise AssertionError("the weights of a word known by at least one table must sum to 1 over those tables")
    coverage = torch.cat([k, torch.zeros_like(k)], -1)
    with torch.no_grad():
        want = meta(tables.lookup(test_words), mask=coverage).a.to(torch.float64)
    if not torch.allclose(a, want, atol=1e-5):
        raise AssertionError(
            "the weights of words known by both tables differ from the trained model's: "
            "score the tables with first['model'].meta's projections and score vector"
        )
    return "correct: with the coverage as mask, each word reads only the tables that know it"


def check_ex3(
    model_attention: torch.nn.Module,
    model_average: torch.nn.Module,
    tables: EmbeddingTables,
    test_words: Tensor,
    acc_attention: float,
    acc_average: float,
    chapter_model: torch.nn.Module | None = None,
) -> str:
    """Ex. 3: both models trained on tables where e1 and e2 cover every word; the check re-evaluates them.

    ``chapter_model`` is the chapter's own seed-0 meta-embedding model (trained on
    partial coverage): handing it in as the attention model fails.
    """
    from ..training import accuracy

    if getattr(model_attention, "combine", None) != "attention" or getattr(model_average, "combine", None) != "average":
        raise AssertionError("pass the meta-embedding model first and the averaging model second")
    not_the_same_model(
        model_attention,
        chapter_model,
        "the attention model is the chapter's own (trained with partial coverage): train a new one on full_tables",
    )
    if not bool(tables.known[:, :2].all()):
        raise AssertionError("e1 and e2 must cover every word: use coverage 1.0 in their specs")
    with torch.no_grad():
        got = [
            accuracy(m(tables.lookup(test_words))[0], tables.classes[test_words])
            for m in (model_attention, model_average)
        ]
    for name, given, g in zip(("attention", "average"), (acc_attention, acc_average), got):
        if not math.isclose(float(given), g, abs_tol=1e-6):
            raise AssertionError(f"your {name} accuracy is not what the model scores on the test words")
    return "correct: both accuracies are what the models score with full coverage"


def hidden_check_ex1(x2_first: float) -> None:
    """Hidden test of Ex. 1: x2_first to three decimals against 2 - ln 9, from a_1 = sigma(2 - z) = 0.9.

    Raises ``AssertionError``.
    """
    if x2_first is None or not math.isclose(float(x2_first), 2 - math.log(9), abs_tol=1e-3):
        raise AssertionError("give the coordinate to at least three correct decimals")


def hidden_check_ex2(a_masked: Tensor, meta: torch.nn.Module, tables: EmbeddingTables, test_words: Tensor) -> None:
    """Hidden test of Ex. 2: the masked weights against :func:`rp.multi_representational_attention`, to 1e-6.

    The reference calls the function with ``meta``'s projections and score vector
    directly (not through the module). Raises ``AssertionError``.
    """
    module: Any = getattr(meta, "meta", meta)  # a MetaEmbedding: its proj layers and score vector w are read
    k = tables.known[test_words][:, :2]
    coverage = torch.cat([k, torch.zeros_like(k)], -1)
    proj = list(module.proj)  # the Eq. (21) linear layers, one per table
    with torch.no_grad():
        want = rp.multi_representational_attention(
            tables.lookup(test_words),
            [p.weight for p in proj],
            [p.bias for p in proj],
            module.w,
            mask=coverage,
        ).a
    a = torch.as_tensor(a_masked)
    if a.shape != want.shape or not torch.allclose(a.to(torch.float64), want.to(torch.float64), atol=1e-6):
        raise AssertionError("the weights differ from multi_representational_attention with the coverage as mask")


def hidden_check_ex3(tables: EmbeddingTables, test_words: Tensor) -> None:
    """Hidden test of Ex. 3: the four tables of the chapter, and the 300 test words of seed 0's split.

    Raises ``AssertionError``.
    """
    if len(tables.tables) != 4 or tables.kinds[2:] != ["shuffled", "noise"]:
        raise AssertionError("keep the chapter's four tables; change only the coverage of e1 and e2")
    if len(test_words) != 300 or len(set(test_words.tolist())) != 300:
        raise AssertionError("evaluate on seed 0's 300 test words")
