"""Directional self-attention masks (DiSAN, Shen et al., 2018; review ③).

A forward mask lets token ``i`` attend only to later tokens ``j > i``; a
backward mask only to earlier tokens ``j < i``. DiSAN adds ``0`` / ``-inf``
matrices to the scores; here the same masks are boolean (``True`` = may attend)
and go through :func:`attnsurvey.attention.attend` (the builders live in
:mod:`attnsurvey.masking`), which is identical
and also handles the first (backward) or last (forward) token, whose row is
empty: it gets zero weights and a zero context. The diagonal is excluded,
as in DiSAN. A causal mask is the backward mask with the diagonal allowed.
"""

from __future__ import annotations

from ..catalog import declare
from ..masking import additive_mask, backward_mask, forward_mask

CHAPTER = "chapters/ch03_3_3_transformer.ipynb"

__all__ = ["additive_mask", "backward_mask", "forward_mask"]  # defined in attnsurvey.masking, the one masking module

declare(
    "attnsurvey.transformer.directional.forward_mask",
    "extra:directional-masks",
    title="Forward and backward directional self-attention masks (DiSAN, Shen et al. 2018)",
)
declare("attnsurvey.transformer.directional.backward_mask", "extra:directional-masks")
declare("attnsurvey.transformer.directional.additive_mask", "extra:directional-masks")
