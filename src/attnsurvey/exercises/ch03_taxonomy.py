"""Self-checks for the exercises of the taxonomy chapter (survey §3, Fig. 3)."""

from __future__ import annotations

import math

from torch import Tensor

from .. import taxonomy as tx
from ._answers import dimensions_changed


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
    return f"correct: {expected} points"


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
        raise AssertionError(f"your accuracy {float(accuracy):.3f} is not what this point scores here ({again:.3f})")
    if again < 0.9:
        raise AssertionError(f"accuracy {again:.3f}: with a basic query the task should be solved; check the data")
    return "correct: the score matters much less here than the query type"
