"""Self-checks for the exercises of chapter §5 Conclusion (``ch05_conclusion``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. The checks build or inspect
models themselves; they never trust a number the reader reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import cast

import torch

from .. import builder as B
from ..data.taxonomy_tasks import two_marker_task
from ..stats import DEFAULT_SEEDS
from ._answers import paired_verdict, whole_number


def _md_mh(d: int, heads: int) -> B.TaxonomyModel:
    torch.manual_seed(0)
    return B.build_model(
        B.point(dimensionality="multi-dimensional", query_multiplicity="multi-head"), d, 4, heads=heads
    )


#: Ex. 1's budget: the W_d entries of one multi-dimensional head of width 32, and the head count.
EX1_WIDTH, EX1_HEADS = 32, 4


def _wd_entries(d: int, h: int) -> int:
    """Entries of all heads' ``W_d`` in the builder's multi-dimensional + multi-head model (counted on the model)."""
    # cast: nn.ModuleList is not generic; Heads fills .steps with AttentionSteps only
    return sum(cast(B.AttentionStep, s).W_d.numel() for s in _md_mh(d, h).main.steps)


def _ex1_fits(d: int) -> bool:
    return d % EX1_HEADS == 0 and _wd_entries(d, EX1_HEADS) <= EX1_WIDTH * EX1_WIDTH


#: (d, h) pairs on which the reader's count is compared with the built models: other head counts than the chapter's
EX1_PAIRS = ((16, 2), (24, 3), (32, 8), (40, 5), (12, 1), (48, 6))


def _require_wd_total(wd_total: Callable[[int, int], int]) -> None:
    """Raise ``AssertionError`` unless ``wd_total(d, h)`` counts every head's ``W_d`` of the built model."""
    if not callable(wd_total):
        raise AssertionError("wd_total must be a function of the width d and the number of heads h")
    for d, h in EX1_PAIRS:
        got = wd_total(d, h)
        if got is None or isinstance(got, bool) or whole_number(got, "a number of entries") != _wd_entries(d, h):
            raise AssertionError(
                "wd_total disagrees with the models the builder makes for some widths and head counts: count "
                "from the widths the text says the builder gives each head, over all heads"
            )


def check_ex1(wd_total: Callable[[int, int], int], answer: int) -> str:
    """Ex. 1: all heads' ``W_d`` entries as a function of ``d`` and ``h``, and the largest width ``d`` (a multiple of
    ``h = 4``) whose multi-dimensional + multi-head model holds no more ``W_d`` entries than one multi-dimensional
    head of width 32.

    The reference counts the built models' matrices, so it follows the builder's widths.
    """
    _require_wd_total(wd_total)
    if answer is None or isinstance(answer, bool):
        raise AssertionError(f"set d_max to a number (got {answer!r})")
    d = whole_number(answer, "a width")
    if d < EX1_HEADS or d > 64 * EX1_WIDTH:
        raise AssertionError(f"got {answer}: not a width that this budget can hold")
    if d % EX1_HEADS:
        raise AssertionError(f"got {answer}: the builder needs d to be a multiple of h = {EX1_HEADS}")
    if not _ex1_fits(d):
        raise AssertionError(f"got {answer}: that model holds more W_d entries than the single head of width 32")
    if _ex1_fits(d + EX1_HEADS):
        raise AssertionError(
            f"got {answer}: a wider model still fits the budget (count how the heads' W_d grow with d, "
            "using the widths the text says the builder gives each head)"
        )
    return "correct"


def check_ex2(model: torch.nn.Module) -> str:
    """Ex. 2: a model with hard alignment, multi-head + multi-hop, and self-attention + basic queries."""
    p = B.describe(model)
    # a "+" cell names mechanisms of one model: their order is spelling, not structure (the builder takes a set)
    if p.alignment != (("hard",),):
        raise AssertionError(f"alignment must be hard, the model has {p.as_strings()['alignment']}")
    if [sorted(alt) for alt in p.query_multiplicity] != [["multi-head", "multi-hop"]]:
        raise AssertionError(
            "query multiplicity must combine multi-head and multi-hop in one model ('+'), "
            f"the model has {p.as_strings()['query_multiplicity']}"
        )
    if [sorted(alt) for alt in p.query_type] != [["basic", "self-attention"]]:
        raise AssertionError(f"query type must be self-attention + basic, the model has {p.as_strings()['query_type']}")
    return "correct: hard alignment, multi-head + multi-hop, self-attention + basic queries"


VERDICT_WORDS = ("better", "worse", "unresolved")


@cache
def _chapter_accuracies(heads: int) -> tuple[float, ...]:
    """The chapter's multi-dimensional + multi-head run with ``heads`` heads: its data, budget and five seeds."""
    g = torch.Generator().manual_seed(1)
    train, test = (two_marker_task(n, 8, 16, 4, g, noise=0.5) for n in (1280, 512))
    p = B.point(dimensionality="multi-dimensional", query_multiplicity="multi-head")
    return tuple(
        B.fit_and_evaluate(p, train, test, 4, epochs=6, seed=s, heads=heads)["accuracy"] for s in DEFAULT_SEEDS
    )


def _require_own_accuracies(acc4: Sequence[float], acc2: Sequence[float]) -> None:
    """Raise ``AssertionError`` unless ``acc4`` and ``acc2`` are what the chapter's run gives with four and two heads."""
    for name, got, heads in (("acc4", acc4, 4), ("acc2", acc2, 2)):
        want = _chapter_accuracies(heads)
        got = list(got)
        if len(got) != len(want) or not all(math.isclose(float(a), b, abs_tol=1e-6) for a, b in zip(got, want)):
            raise AssertionError(
                f"{name} is not what the {heads}-head model scores when trained as the chapter trains its models "
                "(same data, epochs and seeds, one accuracy per seed)"
            )


def check_ex3(model: torch.nn.Module, verdict: str, acc4: Sequence[float], acc2: Sequence[float]) -> str:
    """Ex. 3: the multi-dimensional + multi-head model with four heads (``d = 16``), and the verdict on four - two heads.

    The verdict must follow from the paired 95% interval of the reader's own accuracies
    (``acc4`` with four heads, ``acc2`` with two, on the same seeds); the check retrains both
    models on the chapter's data and seeds and compares.
    """
    steps = getattr(getattr(model, "main", None), "steps", None)
    if steps is None:
        raise AssertionError("build the model with attnsurvey.builder.build_model (multi-dimensional + multi-head)")
    if len(steps) != 4:
        raise AssertionError(f"the model has {len(steps)} heads, the exercise asks for 4 (pass heads=4)")
    shapes = {tuple(s.W_d.shape) for s in steps if hasattr(s, "W_d")}
    if shapes != {(4, 4)} or not all(hasattr(s, "W_d") for s in steps):
        raise AssertionError(
            f"each head's W_d must be (d/h) x (d/h) = (4, 4) for d = 16, got {sorted(shapes) or 'no W_d'} "
            "(is the model multi-dimensional?)"
        )
    _require_own_accuracies(acc4, acc2)
    paired_verdict(verdict, acc4, acc2, "four_vs_two", VERDICT_WORDS)
    return "correct: four heads, each with a 4 x 4 W_d, and the verdict follows from your paired interval"


def hidden_check_ex1(wd_total: Callable[[int, int], int], answer: int) -> None:
    """Hidden test of Ex. 1: ``wd_total`` counts the built models' ``W_d``; the width is a whole number (not a bool),
    the largest multiple of 4 with d^2 / 4 <= 32^2.

    Raises ``AssertionError``.
    """
    _require_wd_total(wd_total)
    h, budget = EX1_HEADS, EX1_WIDTH * EX1_WIDTH
    best = max(d for d in range(h, 64 * EX1_WIDTH, h) if h * (d // h) ** 2 <= budget)
    if isinstance(answer, bool) or whole_number(answer, "a width") != best:
        raise AssertionError("the largest width whose heads' W_d fit the budget")


def hidden_check_ex2(model: torch.nn.Module) -> None:
    """Hidden test of Ex. 2: every other dimension of the model keeps the builder's default. Raises ``AssertionError``."""
    want = B.point(alignment="hard", query_type="self-attention + basic", query_multiplicity="multi-head + multi-hop")
    got = B.describe(model)
    changed = [
        d
        for d in ("feature_multiplicity", "feature_levels", "feature_representations", "scoring", "dimensionality")
        if getattr(got, d) != getattr(want, d)
    ]
    if changed:
        raise AssertionError(
            f"change only alignment, query type and query multiplicity; the model also changes {changed}"
        )


def hidden_check_ex3(model: torch.nn.Module, verdict: str, acc4: Sequence[float], acc2: Sequence[float]) -> None:
    """Hidden test of Ex. 3: the chapter's multi-dimensional + multi-head point, nothing else changed; five seeds each.

    Raises ``AssertionError``.
    """
    if len(list(acc4)) != 5 or len(list(acc2)) != 5:
        raise AssertionError("one accuracy per seed: five with four heads and five with two")
    _require_own_accuracies(acc4, acc2)
    paired_verdict(verdict, acc4, acc2, "four_vs_two", VERDICT_WORDS)
    want = B.point(dimensionality="multi-dimensional", query_multiplicity="multi-head")
    if B.describe(model) != want:
        raise AssertionError(
            "build the chapter's multi-dimensional + multi-head point (md_mh) with heads=4, nothing else"
        )
