"""A shared check for experiment exercises: results over seeds and the verdict they support.

An experiment exercise asks the reader to run two methods on the same seeds and
to say which one is better, or that the difference is not resolved. The check
recomputes the paired difference itself (:func:`attnsurvey.stats.paired_difference`)
and compares the reader's verdict with it, so an answer that claims a winner the
intervals do not show fails, and so does one that ignores a resolved difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..stats import Difference, paired_difference

NOT_RESOLVED = "not resolved"
#: The fewest seeds a trained result may rest on (the project's rule for trained results).
MIN_SEEDS = 5


def expected_verdict(a_name: str, a: Sequence[float], b_name: str, b: Sequence[float]) -> tuple[str, Difference]:
    """The verdict the paired difference ``a - b`` supports: ``a_name``, ``b_name`` or ``"not resolved"``."""
    d = paired_difference(a, b)
    if not d.resolved:
        return NOT_RESOLVED, d
    return (a_name if d.diff.mean > 0 else b_name), d


def check_results_and_verdict(
    results: Mapping[str, Sequence[float]],
    a_name: str,
    b_name: str,
    verdict: str,
    not_from: Mapping[str, Sequence[float]] | None = None,
    not_from_hint: str = "",
    varies: bool = False,
) -> Difference:
    """Assert that ``results`` hold both methods' accuracies over paired seeds and that ``verdict`` is supported.

    results: ``{name: [accuracy per seed]}`` with the same seeds in the same order
    for ``a_name`` and ``b_name``, at least :data:`MIN_SEEDS` of them; every value
    must be an accuracy, a finite number in ``[0, 1]``.
    verdict: ``a_name``, ``b_name`` or ``"not resolved"``.
    not_from: optional results of another experiment (the chapter's own run, say)
    that ``results`` must not repeat: a row of ``results`` equal to the row of
    the same name there (to 6 decimals) fails with ``not_from_hint``. It catches
    an exercise run that forgot the setting the exercise changes.
    varies: require each row to differ between seeds (to 6 decimals, not all equal):
    for a measure that seeds always move, a row with no spread is one seed's value
    repeated, and its zero-width interval would resolve any difference.
    Returns the paired difference ``a - b``. Raises ``AssertionError`` with a hint
    otherwise; the hint names neither the interval nor the supported verdict.
    """
    if not isinstance(results, Mapping):
        raise AssertionError(f"results must map each method's name to its accuracies, got {type(results).__name__}")
    for name in (a_name, b_name):
        if name not in results:
            raise AssertionError(f"results need the key {name!r}, got {sorted(results)}")
        vals = list(results[name])
        if len(vals) < MIN_SEEDS:
            raise AssertionError(f"{name}: {len(vals)} values; run at least {MIN_SEEDS} seeds")
        bad = [v for v in vals if not (math.isfinite(float(v)) and 0.0 <= float(v) <= 1.0)]
        if bad:
            raise AssertionError(f"{name}: values outside [0.0, 1.0]: {bad}")
    if len(results[a_name]) != len(results[b_name]):
        raise AssertionError("run both methods on the same seeds (same number of values)")
    if not_from is not None:
        for name in (a_name, b_name):
            if name in not_from and _same(results[name], not_from[name]):
                raise AssertionError(f"results[{name!r}] repeats the chapter's own run: {not_from_hint}")
    if varies:
        for name in (a_name, b_name):
            if len({round(float(v), 6) for v in results[name]}) == 1:
                raise AssertionError(
                    f"results[{name!r}]: every seed gives the same value; give one value per seed, each from "
                    "that seed's own run"
                )
    allowed = (a_name, b_name, NOT_RESOLVED)
    if verdict not in allowed:
        raise AssertionError(f"the verdict must be one of {', '.join(repr(x) for x in allowed)}; got {verdict!r}")
    want, d = expected_verdict(a_name, list(results[a_name]), b_name, list(results[b_name]))
    if verdict != want:
        raise AssertionError(
            f"the verdict {verdict!r} does not follow from the paired difference {a_name} - {b_name} of your "
            "results: print stats.paired_difference of the two rows and read it again "
            "(a winner needs an interval that excludes 0, and its sign says which)"
        )
    return d


def _same(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(round(float(x), 6) == round(float(y), 6) for x, y in zip(a, b))


def check_rerun(given: Sequence[float], index: int, rerun: float, what: str) -> None:
    """Assert that ``given[index]`` equals ``rerun`` (to 6 decimals): one seed of the reader's run, repeated by a check.

    A hidden check trains one seed again with the exercise's setting and compares,
    so results typed in by hand, or run with another setting, fail. A negative
    ``index`` counts from the end (``-1``: the last seed). The hint names
    ``what`` was repeated, never the value. Raises ``AssertionError``.
    """
    vals = list(given)
    if not -len(vals) <= index < len(vals):
        raise AssertionError(f"{what}: run every seed; the values stop before seed number {max(index + 1, 1)}")
    number = index + 1 if index >= 0 else len(vals) + index + 1  # index -1: the last seed
    if round(float(vals[index]), 6) != round(float(rerun), 6):
        raise AssertionError(f"{what}: repeating seed number {number} with the exercise's setting gives another value")
