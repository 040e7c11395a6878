"""Summaries of multi-seed results: mean ± sd to the digits the spread justifies."""
from __future__ import annotations

import math
import statistics
from typing import Sequence


def spread_digits(sd: float, max_digits: int = 3) -> int:
    """Decimal places that keep one significant digit of ``sd`` (``max_digits`` when sd is 0)."""
    if sd <= 0 or not math.isfinite(sd):
        return max_digits
    return max(0, min(max_digits, -math.floor(math.log10(sd))))


def mean_sd(values: Sequence[float], max_digits: int = 3) -> str:
    """``"mean ± sd"`` (sample sd, n - 1) rounded to one significant digit of the sd.

    NaN values (a model that cannot run at all) give ``"n/a"``. Raises
    ``ValueError`` for fewer than two values.
    """
    vals = [float(v) for v in values]
    if len(vals) < 2:
        raise ValueError(f"mean ± sd needs at least 2 values, got {len(vals)}")
    if any(math.isnan(v) for v in vals):
        return "n/a"
    m, s = statistics.mean(vals), statistics.stdev(vals)
    d = spread_digits(s, max_digits)
    return f"{m:.{d}f} ± {s:.{d}f}"
