"""Figures of the Transformer, evaluation and beyond-the-survey chapters (§3.3.2, §4, §6).

Each function returns a ``matplotlib.figure.Figure`` (display it with
:func:`attnsurvey.plotting.show`).

* :func:`seed_curves`: a trend over seeds (accuracy against length), mean ± sd
  error bars per method.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def curve_summary(per_seed: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """Mean and sample sd (``ddof = 1``) over seeds at each x of ``per_seed`` ``[[value at each x] per seed]``.

    A NaN at some x in any seed gives NaN there (the method has no value at that x).
    Raises ``ValueError`` for fewer than two seeds or rows of unequal length.
    """
    if len(per_seed) < 2:
        raise ValueError(f"need at least two seeds to show a spread, got {len(per_seed)}")
    widths = {len(r) for r in per_seed}
    if len(widths) != 1:
        raise ValueError(f"every seed needs one value per x, got rows of lengths {sorted(widths)}")
    means, sds = [], []
    for column in zip(*per_seed):
        if any(math.isnan(v) for v in column):
            means.append(math.nan)
            sds.append(math.nan)
            continue
        m = sum(column) / len(column)
        means.append(m)
        sds.append(math.fsum((v - m) ** 2 for v in column) / (len(column) - 1))
    return means, [s**0.5 if not math.isnan(s) else s for s in sds]


def seed_curves(
    x: Sequence[float],
    curves: Mapping[str, Sequence[Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    chance: float | None = None,
    logx: bool = False,
    figsize: tuple[float, float] = (6.4, 3.6),
) -> Figure:
    """One line per method: mean over seeds at each ``x`` with ± 1 sd error bars.

    ``curves[name]`` is ``[[value at each x] per seed]`` (NaN where the method has
    no value, drawn as a gap); ``chance`` draws a dotted horizontal line. Raises
    ``ValueError`` when a row's length differs from ``len(x)``.
    """
    fig, ax = plt.subplots(figsize=figsize)
    for i, (name, per_seed) in enumerate(curves.items()):
        if any(len(r) != len(x) for r in per_seed):
            raise ValueError(f"{name!r}: every seed needs {len(x)} values, one per x")
        mean, sd = curve_summary(per_seed)
        # a small horizontal shift per method keeps overlapping error bars apart
        shift = 1 + 0.015 * (i - (len(curves) - 1) / 2) if logx else 0.0
        xs = [v * shift for v in x] if logx else list(x)
        ax.errorbar(xs, mean, yerr=sd, fmt="o-", capsize=3, label=f"{name} (n={len(per_seed)})")
    if chance is not None:
        ax.axhline(chance, color="#888", ls=":", lw=1, label="chance")
    if logx:
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(x), [f"{v:g}" for v in x])
        ax.minorticks_off()
    else:
        ax.set_xticks(list(x))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
