"""The attention step of the taxonomy builder: one general attention module (Fig. 2) per configuration.

:class:`AttentionStep` is Eq. (1) keys and values, Eq. (2) scores (any registered
score, :data:`attnsurvey.general_mechanisms.scoring.SCORES`), an alignment
(soft/global, hard, local, reinforced; :mod:`attnsurvey.general_mechanisms.alignment`)
and Eq. (4) the context, or multi-dimensional attention (Eq. 30-32). ``Heads`` runs
``h`` such steps on projected queries (Eq. 38-40). :mod:`attnsurvey.builder`
assembles them into a :class:`~attnsurvey.builder.TaxonomyModel`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .general_mechanisms import alignment as _alignment
from .general_mechanisms import dimensionality as _dimensionality
from .general_mechanisms.scoring import ScoreModule, make_score
from .general_model import align, keys_values
from .query_related import multihead as _multihead
from .taxonomy import TAXONOMY

_SOFT = ("global", "soft")


def _bad(dim: str, value: str, why: str) -> ValueError:
    return ValueError(f"{dim}={value!r}: {why}")


def _score(name: str, d_q: int, d_k: int, n_max: int) -> ScoreModule:
    try:
        return make_score(name, d_q, d_k, n_max=n_max)
    except ValueError as err:
        raise _bad("scoring", name, str(err)) from None


# ----------------------------------------------------------------------------- one attention step
class AttentionStep(nn.Module):
    """The general attention module (Fig. 2, Eq. 1-4) with a chosen score, alignment, dimensionality.

    ``forward(Q, F, generator=None)`` with queries Q ``(B, n_q, d_q)`` and features
    F ``(B, n_f, d_f)`` returns ``(c, a, log_prob)``: contexts ``(B, n_q, d_k)``,
    weights ``(B, n_q, n_f)`` (for multi-dimensional attention: averaged over the
    features) and the log-probability of the sampled choice (hard, reinforced;
    ``None`` otherwise), summed over queries ``(B,)``.
    Raises ``ValueError`` for combinations without a component (multi-dimensional
    attention with a non-additive score or a non-soft alignment).
    """

    def __init__(
        self,
        d_q: int,
        d_f: int,
        d_k: int,
        scoring: str,
        alignment: str,
        dimensionality: str,
        n_max: int,
        window: float = 2.0,
    ) -> None:
        super().__init__()
        self.alignment, self.dimensionality, self.window = alignment, dimensionality, window
        self.W_K = nn.Linear(d_f, d_k, bias=False)
        self.W_V = nn.Linear(d_f, d_k, bias=False)
        if dimensionality == "multi-dimensional":
            if scoring != "additive":
                raise _bad(
                    "dimensionality", dimensionality, f"Eq. (31) widens the additive score; got scoring={scoring!r}"
                )
            if alignment not in _SOFT:
                raise _bad(
                    "dimensionality", dimensionality, f"Eq. (32) is a softmax per feature; got alignment={alignment!r}"
                )
            self._md = _dimensionality.multidimensional_attend
            self.W1 = nn.Linear(d_q, d_k, bias=False)
            self.W2 = nn.Linear(d_k, d_k, bias=True)
            self.W_d = nn.Parameter(torch.randn(d_k, d_k) / math.sqrt(d_k))
            return
        self.score = _score(scoring, d_q, d_k, n_max)
        if alignment in _SOFT:  # Eq. (25) is the softmax of Eq. (3)
            self._soft = align
        elif alignment == "hard":
            self._hard = _alignment.hard_align
        elif alignment == "local":
            self._local = _alignment.local_align
            self.position = _alignment.PredictivePosition(d_q, d_k)
        elif alignment == "reinforced":
            self._subset = _alignment.bernoulli_subset
            self._reinforced = _alignment.reinforced_align
            self.policy = make_score("general", d_q, d_k)
            self.policy_bias = nn.Parameter(torch.tensor(1.0))  # start by keeping most positions
        else:
            raise _bad("alignment", alignment, f"choose from {TAXONOMY['general']['alignment']}")

    def forward(
        self, Q: Tensor, F: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        K, V = keys_values(F, self.W_K.weight, self.W_V.weight)  # Eq. (1)
        if self.dimensionality == "multi-dimensional":  # Eq. (30)-(32)
            c, A = self._md(Q, K, V, self.W1.weight, self.W2.weight, self.W_d, self.W2.bias)
            return c, A.mean(-1), None
        e = self.score(Q, K)  # Eq. (2)
        log_prob = None
        if self.alignment in _SOFT:  # Eq. (25)
            a = self._soft(e)
        elif self.alignment == "hard":  # Eq. (26)
            h = self._hard(e, "sample" if self.training else "argmax", generator)
            a, log_prob = h.a, h.log_prob.sum(-1)
        elif self.alignment == "local":  # Eq. (27)-(29), predictive position
            p = self.position(Q, K.shape[-2])
            a = self._local(e, p, self.window)
        else:  # reinforced: a Bernoulli policy picks a subset, soft alignment over it
            logits = self.policy(Q, K) + self.policy_bias
            z, lp = self._subset(logits, generator, greedy=not self.training)
            a, log_prob = self._reinforced(e, z), lp.sum(-1)
        return a @ V, a, log_prob  # Eq. (4)


class Heads(nn.Module):
    """Multi-head attention (Eq. 38-40) made of ``h`` attention steps, or one step when ``h == 1``."""

    def __init__(self, d: int, h: int, **step: Any) -> None:
        super().__init__()
        self.h = h
        if h == 1:
            self.steps = nn.ModuleList([AttentionStep(d, d, d, **step)])
            return
        split = _multihead.split_heads
        merge = _multihead.merge_heads
        self._split, self._merge = split, merge
        self.W_Q = nn.Linear(d, d, bias=False)  # Eq. (38): h query projections, stacked
        self.steps = nn.ModuleList(AttentionStep(d // h, d, d // h, **step) for _ in range(h))  # Eq. (39)
        self.W_O = nn.Linear(d, d, bias=False)  # Eq. (40)

    def forward(self, Q: Tensor, F: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor | None]:
        if self.h == 1:
            return self.steps[0](Q, F, generator)
        Qh = self._split(self.W_Q(Q), self.h)  # (B, h, n_q, d/h)
        outs = [step(Qh[..., j, :, :], F, generator) for j, step in enumerate(self.steps)]
        c = self._merge(torch.stack([o[0] for o in outs], dim=-3))
        a = torch.stack([o[1] for o in outs], dim=-3).mean(-3)  # average of the head weights
        lps = [o[2] for o in outs if o[2] is not None]
        return self.W_O(c), a, (sum(lps) if lps else None)


_Heads = Heads  # the former private name
