"""Self-checks for the exercises of chapter §4 Evaluation of attention models (``ch04_evaluation_taxonomy``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. References come from
:mod:`attnsurvey.taxonomy` (Table III as data), never from the reader.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from torch import Tensor

from .. import taxonomy as tx
from ._answers import dimensions_changed, whole_number


def check_ex1(answer: int) -> str:
    """Ex. 1: configurations of Luong et al.'s row with four alignments (global, local, soft, hard) tried separately."""
    row = tx.table3_row("table3:row02").point
    sizes = {d: len(getattr(row, d)) for d in tx.DIMENSIONS}
    sizes["alignment"] = 4
    want = math.prod(sizes.values())
    if whole_number(answer, "a number of configurations") != want:
        raise AssertionError(
            f"got {answer}: count the alternatives of every dimension in the row (alignment now has 4) and "
            "multiply them; alternatives multiply, they do not add"
        )
    return "correct"


def check_ex2(ids: Iterable[str]) -> str:
    """Ex. 2: the ids of the Table III rows whose query-type cell combines two types with "+"."""
    want = sorted(r.id for r in tx.TABLE3 if any(len(alt) > 1 for alt in r.point.query_type))
    got = sorted(ids)
    if got != want:
        raise AssertionError(
            f"got {got}: look for query-type cells with one alternative made of two mechanisms ('+'), "
            "not for cells listing alternatives (',')"
        )
    return "correct"


def check_ex3(point: tx.TaxonomyPoint) -> str:
    """Ex. 3: Zhang et al.'s configuration (row 11) with a basic query instead of self-attention, nothing else changed."""
    changed = dimensions_changed(point, tx.table3_row("table3:row11").point)
    if changed != ["query_type"]:
        raise AssertionError(
            f"the point differs from row 11 in {changed or 'no dimension'}; change the query type only"
        )
    if point.query_type != (("basic",),):
        raise AssertionError(f"the query type must be basic alone, got {point.as_strings()['query_type']}")
    return "correct: the point changes only the query type, as asked"


def hidden_check_ex1(answer: int) -> None:
    """Hidden test of Ex. 1: the count against an enumeration of the row's configurations with four alignments.

    Raises ``AssertionError``.
    """
    from itertools import product

    row = tx.table3_row("table3:row02").point
    options = [getattr(row, d) if d != "alignment" else ("global", "local", "soft", "hard") for d in tx.DIMENSIONS]
    if isinstance(answer, bool) or whole_number(answer, "a number of configurations") != sum(
        1 for _ in product(*options)
    ):
        raise AssertionError("list the configurations one by one and count them")


def hidden_check_ex2(ids: Iterable[str]) -> None:
    """Hidden test of Ex. 2: the ids against the rows whose printed query-type cell holds a "+".

    Raises ``AssertionError``.
    """
    got = list(ids)
    want = [r.id for r in tx.TABLE3 if "+" in str(r.point.as_strings()["query_type"])]
    if len(got) != len(set(got)) or sorted(got) != sorted(want):
        raise AssertionError("each row that combines query types with '+' once, and no other row")


def hidden_check_ex3(point: tx.TaxonomyPoint, train: dict[str, Tensor], test: dict[str, Tensor]) -> None:
    """Hidden test of Ex. 3: trained once (seed 0, 6 epochs) on the chapter's data, the point beats row 11 unchanged.

    Row 11's self-attention query cannot read the task's markers, a basic query
    can: on the chapter's data the change lifts seed 0 by far more than the
    margin of 0.15 required here, whatever the task's difficulty. Raises ``AssertionError``.
    """
    from .. import builder as B

    def acc(p: tx.TaxonomyPoint) -> float:
        return float(B.fit_and_evaluate(p, train, test, 4, epochs=6, seed=0)["accuracy"])

    if acc(point) - acc(tx.table3_row("table3:row11").point) < 0.15:
        raise AssertionError(
            "trained on the chapter's task, your point does no better than row 11: the query must be basic"
        )
