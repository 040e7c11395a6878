"""Self-checks for the exercises of the taxonomy chapter (survey §3, Fig. 3)."""

from __future__ import annotations

import math

from torch import Tensor

from .. import taxonomy as tx
from ._answers import dimensions_changed, whole_number


def check_ex1(n_points: int) -> str:
    """Ex. 1: the number of points when every sub-aspect of Fig. 3 takes any non-empty set of its mechanisms."""
    sizes = [len(m) for aspects in tx.FIG3.values() for m in aspects.values()]
    expected = math.prod(2**k - 1 for k in sizes)
    if n_points == math.prod(sizes):
        raise AssertionError("that counts single mechanisms only; a sub-aspect may hold any non-empty set of them")
    if n_points == math.prod(2**k for k in sizes):
        raise AssertionError("close: but the empty set is not allowed (every sub-aspect has at least one value)")
    if n_points != expected:
        raise AssertionError("not yet: count the non-empty subsets of each sub-aspect and multiply")
    return "correct"


def check_ex2(point: tx.TaxonomyPoint) -> str:
    """Ex. 2: the point of Shen et al.'s DiSAN, as Table III gives it (row 10)."""
    wrong = dimensions_changed(point, tx.table3_row("table3:row10").point)
    if wrong:
        raise AssertionError(f"compare with Table III row 10: these dimensions differ: {wrong}")
    return "correct: DiSAN as in Table III"


def check_ex3(point: tx.TaxonomyPoint, accuracy: float, train: dict[str, Tensor], test: dict[str, Tensor]) -> str:
    """Ex. 3: the point that changes only the score (general -> additive) of the basic-query model, and its accuracy.

    The check retrains ``point`` with ``fit_and_evaluate(point, train, test, 4, epochs=8, seed=0)``.
    """
    from .. import builder as B

    changed = dimensions_changed(point, B.point(scoring="general", query_type="basic"))
    if changed != ["scoring"] or point.scoring != (("additive",),):
        raise AssertionError(
            f"change the score only (general -> additive) and keep the basic query; your point changes {changed}"
        )
    again = B.fit_and_evaluate(point, train, test, 4, epochs=8, seed=0)["accuracy"]
    if not math.isclose(float(accuracy), again, abs_tol=1e-6):
        raise AssertionError("your accuracy is not what this point scores on ex3_train/ex3_test with seed 0")
    if again < 0.9:
        raise AssertionError("with a basic query the task should be solved: check the data")
    return "correct: your point changes the score only, and your accuracy is what it scores"


def hidden_check_ex1(n_points: int) -> None:
    """Hidden test of Ex. 1: the count against an enumeration of every non-empty subset, sub-aspect by sub-aspect.

    Raises ``AssertionError``.
    """
    from itertools import combinations

    total = 1
    for aspects in tx.FIG3.values():
        for mechanisms in aspects.values():
            total *= sum(1 for r in range(1, len(mechanisms) + 1) for _ in combinations(mechanisms, r))
    if isinstance(n_points, bool) or whole_number(n_points, "a number of points") != total:
        raise AssertionError("count the non-empty subsets of each sub-aspect and multiply")


def hidden_check_ex2(point: tx.TaxonomyPoint) -> None:
    """Hidden test of Ex. 2: the point builds a model whose ``describe`` gives the point back. Raises ``AssertionError``."""
    from .. import builder as B

    if not isinstance(point, tx.TaxonomyPoint):
        raise AssertionError("build the point with B.point(...)")
    if B.describe(B.build_model(point, 16, 4)) != point:
        raise AssertionError("the model built from your point does not describe itself as that point")


def hidden_check_ex3(point: tx.TaxonomyPoint, train: dict[str, Tensor], test: dict[str, Tensor]) -> None:
    """Hidden test of Ex. 3: the point also solves the task with another training seed (seed 1).

    Raises ``AssertionError``.
    """
    from .. import builder as B

    if B.fit_and_evaluate(point, train, test, 4, epochs=8, seed=1)["accuracy"] < 0.9:
        raise AssertionError("with another training seed your point does not solve the task: keep the basic query")
