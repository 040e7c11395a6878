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
    min_seeds: int = 5,
    low: float = 0.0,
    high: float = 1.0,
) -> Difference:
    """Assert that ``results`` hold both methods over ``min_seeds`` paired seeds and that ``verdict`` is supported.

    results: ``{name: [value per seed]}`` with the same seeds in the same order
    for ``a_name`` and ``b_name``; every value must lie in ``[low, high]``.
    verdict: ``a_name``, ``b_name`` or ``"not resolved"``.
    Returns the paired difference ``a - b``. Raises ``AssertionError`` with a hint otherwise.
    """
    for name in (a_name, b_name):
        assert name in results, f"results need the key {name!r}, got {sorted(results)}"
        vals = list(results[name])
        assert len(vals) >= min_seeds, f"{name}: {len(vals)} values; run at least {min_seeds} seeds"
        bad = [v for v in vals if not (math.isfinite(float(v)) and low <= float(v) <= high)]
        assert not bad, f"{name}: values outside [{low}, {high}]: {bad}"
    assert len(results[a_name]) == len(results[b_name]), "run both methods on the same seeds (same number of values)"
    want, d = expected_verdict(a_name, list(results[a_name]), b_name, list(results[b_name]))
    assert (
        verdict == want
    ), f"the paired difference {a_name} - {b_name} is {d}; the verdict it supports is {want!r}, not {verdict!r}"
    return d
