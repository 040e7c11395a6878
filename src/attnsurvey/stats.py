"""Honest summaries of results over seeds: mean ± sd with the digits the spread justifies.

A trained result from one seed is an anecdote. Every figure the book prints
from training is a :class:`MeanSD` over at least five seeds, with the baseline
run on the same seeds, and a difference between two methods is claimed only
when :func:`paired_difference` says the interval excludes zero.

Printing rule (:meth:`MeanSD.__str__`): the standard deviation is rounded to
one significant digit (two when that digit would be a 1, so 0.014 stays 0.014
rather than collapsing to 0.01), and the mean is printed to the same decimal
place. With no spread at all (every seed gave the same number) three decimals
are printed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

#: Seeds the chapters use unless they say otherwise (more where cheap).
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)


def _decimals_for(sd: float) -> int:
    """Decimal places that show ``sd`` to one significant digit (two if it starts with 1)."""
    if sd == 0 or not math.isfinite(sd):
        return 3
    exponent = math.floor(math.log10(abs(sd)))
    leading = abs(sd) / 10**exponent
    digits = 2 if round(leading, 6) < 2 else 1
    return max(0, digits - 1 - exponent)


@dataclass(frozen=True)
class MeanSD:
    """Mean and sample standard deviation (``ddof = 1``) of ``n`` values.

    Attributes:
        mean: the mean.
        sd: the sample standard deviation.
        n: the number of values (seeds).
    """

    mean: float
    sd: float
    n: int

    @property
    def decimals(self) -> int:
        """Decimal places justified by the spread (see the module docstring)."""
        return _decimals_for(self.sd)

    def __str__(self) -> str:
        d = self.decimals
        return f"{self.mean:.{d}f} ± {self.sd:.{d}f}"

    def with_n(self) -> str:
        """``"0.93 ± 0.02 (n=5)"``."""
        return f"{self} (n={self.n})"


def mean_sd(values: Iterable[float]) -> MeanSD:
    """Mean and sample standard deviation (``ddof = 1``) of ``values``.

    Args:
        values: one number per seed.

    Returns:
        A :class:`MeanSD`.

    Raises:
        ValueError: for fewer than two values or a non-finite value: one seed
            has no spread, and a NaN would silently poison the summary.
    """
    xs = [float(v) for v in values]
    if len(xs) < 2:
        raise ValueError(f"mean ± sd needs at least 2 values (seeds), got {len(xs)}")
    bad = [x for x in xs if not math.isfinite(x)]
    if bad:
        raise ValueError(f"values must be finite, got {bad}")
    n = len(xs)
    m = math.fsum(xs) / n
    var = math.fsum((x - m) ** 2 for x in xs) / (n - 1)
    return MeanSD(m, math.sqrt(var), n)


@dataclass(frozen=True)
class Difference:
    """A paired difference ``a - b`` over the same seeds, with a two-sided t interval.

    Attributes:
        diff: mean ± sd of the per-seed differences.
        low: the lower end of the interval.
        high: the upper end of the interval.
        confidence: the confidence level of the interval (e.g. 0.95).
    """

    diff: MeanSD
    low: float
    high: float
    confidence: float

    @property
    def resolved(self) -> bool:
        """True if the interval excludes zero: the data support a difference."""
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        d = self.diff.decimals
        verdict = "resolved" if self.resolved else "not resolved"
        pct = round(100 * self.confidence)
        return (
            f"{self.diff.mean:+.{d}f} (paired, n={self.diff.n}; {pct}% interval "
            f"[{self.low:+.{d}f}, {self.high:+.{d}f}], {verdict})"
        )


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Difference:
    """Paired difference of two methods run on the same seeds: mean ± sd and a t interval.

    The interval is ``mean ± t_{n-1} · sd / sqrt(n)``.

    Args:
        a: results of method a, one per seed.
        b: results of method b; ``a[i]`` and ``b[i]`` must come from the same seed.
        confidence: the confidence level of the interval.

    Returns:
        A :class:`Difference`.

    Raises:
        ValueError: if the lengths differ, fewer than two pairs are given, or a
            difference is not finite.
    """
    if len(a) != len(b):
        raise ValueError(f"paired difference needs equal numbers of seeds, got {len(a)} and {len(b)}")
    from scipy import stats as _stats

    diff = mean_sd(x - y for x, y in zip(a, b))
    half = float(_stats.t.ppf(0.5 + confidence / 2, diff.n - 1)) * diff.sd / math.sqrt(diff.n)
    return Difference(diff, diff.mean - half, diff.mean + half, confidence)


def over_seeds(run: Callable[[int], dict[str, float]], seeds: Sequence[int] = DEFAULT_SEEDS) -> dict[str, list[float]]:
    """Call ``run(seed)`` for every seed and collect each named result into a list.

    Args:
        run: ``seed -> {name: value}``; every call must return the same names.
        seeds: the seeds, in order.

    Returns:
        ``{name: [value per seed]}`` in the order of ``seeds``, so paired
        comparisons line up.

    Raises:
        ValueError: if two seeds return different names.
    """
    collected: dict[str, list[float]] = {}
    for i, seed in enumerate(seeds):
        result = run(seed)
        if i and set(result) != set(collected):
            raise ValueError(f"seed {seed} returned {sorted(result)}, earlier seeds {sorted(collected)}")
        for name, value in result.items():
            collected.setdefault(name, []).append(float(value))
    return collected


def table(results: dict[str, Sequence[float]], header: tuple[str, str] = ("", "mean ± sd")) -> str:
    """A plain-text table: one row per name with its :class:`MeanSD` and ``n``.

    Args:
        results: ``{name: [value per seed]}``.
        header: the titles of the name column and the value column.

    Returns:
        The table as a string.

    Raises:
        ValueError: for a name with fewer than two values or a non-finite one
            (see :func:`mean_sd`).
    """
    rows = [(name, mean_sd(vals)) for name, vals in results.items()]
    width = max([len(header[0])] + [len(n) for n, _ in rows])
    lines = [f"{header[0]:<{width}}  {header[1]} (n)"]
    lines += [f"{name:<{width}}  {ms} ({ms.n})" for name, ms in rows]
    return "\n".join(lines)
