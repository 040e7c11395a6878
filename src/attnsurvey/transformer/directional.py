"""Directional self-attention masks (DiSAN, Shen et al., 2018; review ③).

A forward mask lets token ``i`` (the query, a row of the mask) attend only to
earlier tokens ``j < i``, the ones a forward RNN has already read; a backward
mask only to later tokens ``j > i``. This is the direction of the authors'
released code (its ``'forward'`` mask keeps row > column, the softmax runs
over the key axis); some descriptions, among them the NLP review, name the two
the other way round. DiSAN adds ``0`` / ``-inf`` matrices to the scores; here the
same masks are boolean (``True`` = may attend) and go through
:func:`attnsurvey.attention.attend` (the builders live in
:mod:`attnsurvey.masking`), which is identical and also handles the first
(forward) or last (backward) token, whose row is empty: it gets zero weights
and a zero context. The diagonal is excluded, as in DiSAN. A causal mask is
the forward mask with the diagonal allowed.
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
