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
from .. import taxonomy as tx
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


#: Ex. 2's model, told in words in the exercise: a token-to-token layer, then a query from G through several heads
#: and a second round, every step picking one feature vector; the other dimensions keep the builder's defaults.
EX2_POINT = B.point(alignment="hard", query_type="self-attention + basic", query_multiplicity="multi-head + multi-hop")
#: Ex. 2's sizes: the chapter's width and classes (heads, hops and hop form stay at the builder's defaults).
EX2_D, EX2_CLASSES = 16, 4


def _ex2_reference() -> B.TaxonomyModel:
    return B.build_model(EX2_POINT, EX2_D, EX2_CLASSES)


def _require_ex2_model(model: torch.nn.Module) -> None:
    """Raise ``AssertionError`` unless ``model`` is the builder's model of Ex. 2's point, sizes and default options."""
    if not isinstance(model, B.TaxonomyModel):
        raise AssertionError(f"build `three` with attnsurvey.builder.build_model, got {type(model).__name__}")
    got, want = B.describe(model), EX2_POINT
    for dim in tx.DIMENSIONS:
        # a "+" cell names mechanisms of one model: their order is spelling, not structure (the builder takes a set)
        if [set(alt) for alt in getattr(got, dim)] != [set(alt) for alt in getattr(want, dim)]:
            raise AssertionError(
                f"{dim} = {got.as_strings()[dim]!r} does not fit the description (read which part of the model "
                "that dimension covers; the dimensions the description does not mention keep the builder's defaults)"
            )
    ref = _ex2_reference()
    sizes = (model.d, model.n_classes, model.main.h, model.n_hops, model.hop_form)
    if sizes != (ref.d, ref.n_classes, ref.main.h, ref.n_hops, ref.hop_form) or B.count_parameters(
        model
    ) != B.count_parameters(ref):
        raise AssertionError(
            f"build it with the chapter's sizes (d = {EX2_D}, {EX2_CLASSES} classes) and the builder's default "
            "heads, hops and hop form"
        )


def check_ex2(model: torch.nn.Module, n_params: int) -> str:
    """Ex. 2: the model of the description (a token-to-token layer, then a query from ``G`` through several heads and
    a second round, every step picking one feature vector), and its number of trainable parameters, predicted.

    The reference builds the described point itself and counts its parameters, so it follows the builder.
    """
    _require_ex2_model(model)
    if n_params is None or isinstance(n_params, bool):
        raise AssertionError(f"set n_params to a number (got {n_params!r})")
    if whole_number(n_params, "a number of parameters") != B.count_parameters(_ex2_reference()):
        raise AssertionError(
            f"got {n_params}: not the number of trainable parameters of this model. Which of its parts have a row "
            "in the experiment's params column, what does each add, and what is the token-to-token layer made of?"
        )
    return "correct: the model fits the description, and your count is its number of trainable parameters"


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


def hidden_check_ex2(model: torch.nn.Module, n_params: int) -> None:
    """Hidden test of Ex. 2: the described point with every other dimension at the builder's default, the chapter's
    sizes and default options, and the parameter count as a whole number (not a bool) equal to the built model's.

    Raises ``AssertionError``.
    """
    _require_ex2_model(model)
    if isinstance(n_params, bool) or whole_number(n_params, "a number of parameters") != B.count_parameters(model):
        raise AssertionError("n_params: the number of trainable parameters of the described model")


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
