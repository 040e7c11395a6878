"""Issue 13: every public mechanism gives a correct result or a clear error on edge-case inputs.

Each test here failed before its fix (see ``scripts/edge_case_sweep.py`` for the sweep that found them).
"""
from __future__ import annotations

import pytest
import torch

NAN = float("nan")


def _poisoned(B: int = 2, n_f: int = 5, d: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features with NaN in the last (masked) slot, the clean features and the (B, n_f) mask."""
    g = torch.Generator().manual_seed(0)
    F = torch.randn(B, n_f, d, generator=g, dtype=torch.float64)
    bad = F.clone()
    bad[:, -1] = NAN
    mask = torch.ones(B, n_f, dtype=torch.bool)
    mask[:, -1] = False
    return bad, F, mask


def test_context_and_attend_scores_keep_masked_values_inert():
    from attnsurvey.attention import attend_scores, context
    from attnsurvey.query_related.types import mean_pool

    bad, F, mask = _poisoned()
    torch.testing.assert_close(mean_pool(bad, mask), mean_pool(F, mask))  # was all NaN
    e = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(attend_scores(e, bad, mask[:, None])[0], attend_scores(e, F, mask[:, None])[0])
    a = torch.softmax(e, -1).masked_fill(~mask[:, None], 0.0)
    torch.testing.assert_close(context(a, bad), a @ F)
    a[0, 0, -1] = 0.5  # a non-zero weight on a NaN value still gives NaN there, and only there
    c = context(a, bad)
    assert torch.isnan(c[0, 0]).all() and torch.isfinite(c[0, 1:]).all() and torch.isfinite(c[1]).all()
