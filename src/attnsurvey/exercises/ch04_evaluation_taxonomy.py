"""Self-checks for the exercises of chapter §4 Evaluation of attention models (``ch04_evaluation_taxonomy``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. References come from
:mod:`attnsurvey.taxonomy` (Table III as data), never from the reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import Tensor

from .. import taxonomy as tx
from ._answers import dimensions_changed, run_answer, whole_number


def _fewest_models() -> int:
    """The fewest trained configurations that use every alternative of every Table III row at least once."""
    return sum(max(len(getattr(r.point, d)) for d in tx.DIMENSIONS) for r in tx.TABLE3)


def check_ex1(answer: int) -> str:
    """Ex. 1: the fewest trained models with which the 17 papers could cover every alternative their rows list."""
    if answer is None or isinstance(answer, bool):
        raise AssertionError(f"set n_fewest to a number (got {answer!r})")
    got = whole_number(answer, "a number of trained models")
    if got != _fewest_models():
        raise AssertionError(
            f"got {got}: not the fewest number of models; derive the fewest for one row first, "
            "then add the rows up (a row with no alternatives still needs one model)"
        )
    return "correct"


def _uses(value: str) -> list[str]:
    """The ids of the rows in which ``value`` is one of the mechanisms of some alternative, in some dimension."""
    return sorted(r.id for r in tx.TABLE3 if any(value in alt for d in tx.DIMENSIONS for alt in getattr(r.point, d)))


def _compare_rows(rows_fn: Callable[[str], Iterable[str]], values: Iterable[str]) -> None:
    for value in values:
        got = run_answer(rows_fn, value, what=f"rows_using({value!r})")
        try:
            got = list(got)
        except TypeError:
            raise AssertionError(f"rows_using({value!r}) must return a list of row ids, got {got!r}") from None
        want = _uses(value)
        if len(got) != len(set(got)):
            raise AssertionError(f"rows_using({value!r}) lists a row more than once")
        missing, extra = set(want) - set(got), set(got) - set(want)
        if missing or extra:
            raise AssertionError(
                f"rows_using({value!r}): {len(missing)} row(s) that use it are missing and {len(extra)} row(s) "
                "that do not use it are listed"
            )


def check_ex2(rows_fn: Callable[[str], Iterable[str]]) -> str:
    """Ex. 2: ``rows_using(value)``, the rows in which a taxonomy value occurs alone, in a "+" group or as an alternative."""
    _compare_rows(rows_fn, ("self-attention", "multiplicative", "local", "multi-head", "hierarchical"))
    return "correct: rows_using finds every row that uses the value, and no other"


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
    """Hidden test of Ex. 1: the count against a search, row by row, for the fewest covering configurations.

    For each row, the smallest ``m`` such that ``m`` configurations, taken from the
    product of the row's alternatives, use every alternative of every dimension.
    Raises ``AssertionError``.
    """
    from itertools import combinations, product

    def fewest(row: tx.TaxonomyPoint) -> int:
        options = [getattr(row, d) for d in tx.DIMENSIONS]
        configs = list(product(*options))
        for m in range(1, len(configs) + 1):
            for chosen in combinations(configs, m):
                if all({c[i] for c in chosen} == set(opts) for i, opts in enumerate(options)):
                    return m
        raise RuntimeError("internal: no covering set")

    if isinstance(answer, bool) or whole_number(answer, "a number of trained models") != sum(
        fewest(r.point) for r in tx.TABLE3
    ):
        raise AssertionError("count the fewest covering models row by row and add them up")


def hidden_check_ex2(rows_fn: Callable[[str], Iterable[str]]) -> None:
    """Hidden test of Ex. 2: other values ("hard", "multi-hop", "specialized", "additive", "rotatory").

    Raises ``AssertionError``.
    """
    _compare_rows(rows_fn, ("hard", "multi-hop", "specialized", "additive", "rotatory"))


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
