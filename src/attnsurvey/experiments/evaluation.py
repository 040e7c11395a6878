"""Task models of the evaluation chapters (§4.1, §4.2).

:class:`ProbeModel` is a small Fig. 1 task model whose attention weights can be
read and replaced; the chapters train it and then apply the evaluation methods
of :mod:`attnsurvey.evaluation` (ablation, adversarial and permuted attention).

Shapes: B batch, n_f feature vectors, n_q queries, d feature size, d_y classes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..catalog import catalogued
from ..general_model import GeneralAttention, OutputModel, context


@catalogued("extra:uniform-attention-ablation")
class ProbeModel(nn.Module):
    """A small task model (Fig. 1) whose attention weights can be read and replaced.

    Feature model: a token embedding (``vocab`` ids) or a linear map of
    continuous inputs of size ``d_in``, plus a learned position embedding.
    Query model: ``n_q`` learned query vectors (one per output position).
    Attention model: :class:`~attnsurvey.general_model.GeneralAttention`
    with score ``score``. Output model: :class:`~attnsurvey.general_model.OutputModel`.
    ``features(x)`` returns F; ``head(F, weights=None)`` returns the logits and the
    weights used; passing ``weights`` replaces the learned ones (ablation,
    adversarial and permuted attention). ``forward(x, weights=None)`` chains both.

    Args:
        d: the feature and query size.
        d_y: the number of classes.
        n_max: the longest input (positions with an embedding).
        n_q: the number of queries.
        vocab: the number of token ids (token inputs).
        d_in: the size of continuous inputs.
        score: a Table II score name.

    Shape:
        - x: ``(B, n_f)`` token ids or ``(B, n_f, d_in)``; weights: ``(B, n_q, n_f)``.
        - F: ``(B, n_f, d)``.
        - Output: ``(logits (B, n_q, d_y), weights (B, n_q, n_f))``.

    Raises:
        ValueError: unless exactly one of ``vocab`` and ``d_in`` is given.
    """

    def __init__(
        self,
        d: int,
        d_y: int,
        n_max: int,
        n_q: int = 1,
        vocab: int | None = None,
        d_in: int | None = None,
        score: str = "scaled-multiplicative",
    ) -> None:
        super().__init__()
        if (vocab is None) == (d_in is None):
            raise ValueError("give exactly one of vocab (token inputs) or d_in (continuous inputs)")
        self.embed: nn.Module
        if vocab is not None:
            self.embed = nn.Embedding(vocab, d)
        else:
            assert d_in is not None  # exactly one of the two was given (checked above)
            self.embed = nn.Linear(d_in, d)
        self.pos = nn.Parameter(torch.randn(n_max, d) * 0.1)
        self.queries = nn.Parameter(torch.randn(n_q, d) * 0.1)
        self.attention = GeneralAttention(d, d, score=score)
        self.out = OutputModel(d, d_y)

    def features(self, x: Tensor) -> Tensor:
        h = self.embed(x)
        n = h.shape[-2]
        if n > self.pos.shape[0]:
            raise ValueError(f"input has n_f={n} positions but the model holds n_max={self.pos.shape[0]}")
        return h + self.pos[:n]

    def head(self, F: Tensor, weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
        Q = self.queries.expand(F.shape[0], -1, -1)
        if weights is None:
            c, a = self.attention(Q, F)
        else:
            a = weights
            _, V = self.attention.keys_values(F)
            c = context(a, V)
        return self.out.logits(c), a

    def forward(self, x: Tensor, weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self.head(self.features(x), weights)
