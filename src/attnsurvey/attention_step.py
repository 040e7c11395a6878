"""The attention step of the taxonomy builder: one general attention module (Fig. 2) per configuration.

:class:`AttentionStep` is Eq. (1) keys and values, Eq. (2) scores (any registered
score, :data:`attnsurvey.general_mechanisms.scoring.SCORES`), an alignment
(soft/global, hard, local, reinforced; :mod:`attnsurvey.general_mechanisms.alignment`)
and Eq. (4) the context, or multi-dimensional attention (Eq. 30-32). ``Heads`` makes
``h`` such steps the heads of :func:`attnsurvey.query_related.multihead.multi_head_attention`
(Eq. 38-40), the package's one multi-head stack. :mod:`attnsurvey.builder`
assembles them into a :class:`~attnsurvey.builder.TaxonomyModel`.

Shapes: B batch, n_q queries, n_f feature vectors, d_q query size, d_f feature
size, d_k key and value size, h heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from ._checks import as_tensor
from .general_mechanisms import alignment as _alignment
from .general_mechanisms import dimensionality as _dimensionality
from .general_mechanisms.scoring import ScoreModule, make_score
from .general_model import align, keys_values
from .query_related import multihead as _multihead
from .taxonomy import TAXONOMY

#: The taxonomy's names of the soft (softmax) alignment.
SOFT_ALIGNMENTS = ("global", "soft")


def taxonomy_error(dim: str, value: str, why: str) -> ValueError:
    """The error for a configuration without a component: ``ValueError("dim='value': why")``.

    Args:
        dim: the taxonomy dimension.
        value: its value.
        why: the reason.

    Returns:
        The error, for the caller to raise.
    """
    return ValueError(f"{dim}={value!r}: {why}")


def add_log_prob(total: Tensor | None, lp: Tensor | None) -> Tensor | None:
    """Add a log-probability to a running total (None: nothing sampled yet).

    Args:
        total: the running total, or None.
        lp: the log-probability of one more sampled choice, or None.

    Shape:
        both ``(B,)``.

    Returns:
        The new total, or None when nothing has been sampled.

    Raises:
        TypeError: if a given total or lp is not a floating-point tensor.
    """
    for symbol, value in (("total", total), ("lp", lp)):
        if value is not None:
            as_tensor(value, symbol)
    if lp is None:
        return total
    return lp if total is None else total + lp


def step_score(name: str, d_q: int, d_k: int, n_max: int) -> ScoreModule:
    """The score module ``name`` (Table II) for one attention step.

    Args:
        name: a registered score name.
        d_q: the query size.
        d_k: the key size.
        n_max: the longest feature sequence (for the location score).

    Returns:
        The score module.

    Raises:
        ValueError: naming the scoring dimension, for an unknown score or bad sizes.
    """
    try:
        return make_score(name, d_q, d_k, n_max=n_max)
    except ValueError as err:
        raise taxonomy_error("scoring", name, str(err)) from None


# ----------------------------------------------------------------------------- one attention step
class AttentionStep(nn.Module):
    """The general attention module (Fig. 2, Eq. 1-4) with a chosen score, alignment, dimensionality.

    ``forward(Q, F, generator=None)`` returns ``(c, a, log_prob)``: contexts
    (here ``d_v = d_k``: ``W_V`` is ``nn.Linear(d_f, d_k)``, like ``W_K``),
    weights (for multi-dimensional attention: averaged over the features) and the
    log-probability of the sampled choice (hard, reinforced; ``None`` otherwise),
    summed over queries.

    Args:
        d_q: the query size.
        d_f: the feature size.
        d_k: the key (and value) size.
        scoring: a registered score name.
        alignment: a registered alignment name.
        dimensionality: ``"single-dimensional"`` or ``"multi-dimensional"``.
        n_max: the longest ``n_f`` (for the location score).
        window: the window size of local alignment.

    Shape:
        Q: ``(B, n_q, d_q)``; F: ``(B, n_f, d_f)``. Returns c: ``(B, n_q, d_k)``,
        a: ``(B, n_q, n_f)``, log_prob: ``(B,)``.

    Raises:
        ValueError: for an unknown alignment or score, or combinations without a
            component (multi-dimensional attention with a non-additive score or a
            non-soft alignment).
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
                raise taxonomy_error(
                    "dimensionality", dimensionality, f"Eq. (31) widens the additive score; got scoring={scoring!r}"
                )
            if alignment not in SOFT_ALIGNMENTS:
                raise taxonomy_error(
                    "dimensionality", dimensionality, f"Eq. (32) is a softmax per feature; got alignment={alignment!r}"
                )
            self._md = _dimensionality.multidimensional_attend
            self.W1 = nn.Linear(d_q, d_k, bias=False)
            self.W2 = nn.Linear(d_k, d_k, bias=True)
            self.W_d = nn.Parameter(torch.randn(d_k, d_k) / math.sqrt(d_k))
            return
        self.score = step_score(scoring, d_q, d_k, n_max)
        if alignment in SOFT_ALIGNMENTS:  # Eq. (25) is the softmax of Eq. (3)
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
            raise taxonomy_error("alignment", alignment, f"choose from {TAXONOMY['general']['alignment']}")

    def forward(
        self, Q: Tensor, F: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        K, V = keys_values(F, self.W_K.weight, self.W_V.weight)  # Eq. (1)
        if self.dimensionality == "multi-dimensional":  # Eq. (30)-(32)
            c, A = self._md(Q, K, V, self.W1.weight, self.W2.weight, self.W_d, self.W2.bias)
            return c, A.mean(-1), None
        e = self.score(Q, K)  # Eq. (2)
        a, log_prob = self.weights(e, Q, K, generator)
        return a @ V, a, log_prob  # Eq. (4)

    def weights(
        self, e: Tensor, Q: Tensor, K: Tensor, generator: torch.Generator | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """The alignment of this step: scores e ``(B, n_q, n_f)`` to weights, and the log-probability ``(B,)``.

        Q ``(B, n_q, d_q)`` and K ``(B, n_f, d_k)`` feed the local position and the
        reinforced policy; mask: boolean like e, ``True`` = may attend (or None).
        The log-probability of the sampled choice (hard, reinforced) is summed over
        the queries; it is None for the deterministic alignments.
        """
        if self.alignment in SOFT_ALIGNMENTS:  # Eq. (25)
            return self._soft(e, mask), None
        if self.alignment == "hard":  # Eq. (26)
            h = self._hard(e, "sample" if self.training else "argmax", generator, mask)
            return h.a, h.log_prob.sum(-1)
        if self.alignment == "local":  # Eq. (27)-(29), predictive position
            return self._local(e, self.position(Q, K.shape[-2]), self.window, mask), None
        # reinforced: a Bernoulli policy picks a subset, soft alignment over it
        z, lp = self._subset(self.policy(Q, K) + self.policy_bias, generator, mask, greedy=not self.training)
        return self._reinforced(e, z, mask), lp.sum(-1)


class _StepHooks:
    """The score and alignment hooks of one multi-head call whose heads are attention steps.

    Each head has its own step, hence its own score weights, local position
    predictor or reinforced policy: the hooks give head ``j``'s slice (axis -3) of
    the stack's per-head tensors to step ``j``. The score hook keeps the heads'
    queries and keys for the alignment hook, which collects the log-probabilities
    of sampled alignments (drawn head after head from ``generator``).
    """

    def __init__(self, steps: Sequence[AttentionStep], generator: torch.Generator | None) -> None:
        self.steps, self.generator = steps, generator
        self.q: Tensor | None = None
        self.k: Tensor | None = None
        self.log_prob: Tensor | None = None  # summed over the heads

    def score(self, q: Tensor, k: Tensor) -> Tensor:
        self.q, self.k = q, k
        return torch.stack([step.score(q[..., j, :, :], k[..., j, :, :]) for j, step in enumerate(self.steps)], -3)

    def align(self, e: Tensor, mask: Tensor | None) -> Tensor:
        assert self.q is not None and self.k is not None, "the score hook runs first"
        a = []
        for j, step in enumerate(self.steps):
            m = None if mask is None else mask.expand(e.shape)[..., j, :, :]
            a_j, lp = step.weights(e[..., j, :, :], self.q[..., j, :, :], self.k[..., j, :, :], self.generator, m)
            a.append(a_j)
            self.log_prob = add_log_prob(self.log_prob, lp)
        return torch.stack(a, -3)


class Heads(nn.Module):
    """Multi-head attention (Eq. 38-40) whose heads are attention steps, or one step when ``h == 1``.

    With ``h > 1`` it is :func:`attnsurvey.query_related.multihead.multi_head_attention`
    (the one multi-head stack): ``W_Q`` projects the queries, the steps' key and
    value matrices stacked row-wise are ``W_K`` and ``W_V``, ``W_O`` mixes the
    concatenated contexts. A parameter-free score with the softmax goes to the
    stack as it is; scores with per-head weights and the other alignments go
    through per-head hooks (each head keeps its own parameters; :class:`_StepHooks`).
    ``forward(Q, F, generator)`` returns ``(output, weights averaged over the heads,
    log-probability summed over heads and queries or None)``.

    The one exception is multi-dimensional attention (Eq. 30-32): its weights carry
    a feature axis, so a head's context is not ``a V`` and cannot go through
    :func:`attnsurvey.attention.attend`; those heads run their steps on the split
    queries, and the contexts are merged and mixed by ``W_O`` in the same way.

    Args:
        d: the model size (queries and features); each head gets ``d // h``.
        h: the number of heads.
        **step: the keyword arguments of :class:`AttentionStep` (scoring,
            alignment, dimensionality, n_max, window).

    Shape:
        Q: ``(B, n_q, d)``; F: ``(B, n_f, d)``. Returns output: ``(B, n_q, d)``,
        weights: ``(B, n_q, n_f)``, log_prob: ``(B,)``.
    """

    def __init__(self, d: int, h: int, **step: Any) -> None:
        super().__init__()
        self.h = h
        if h == 1:
            self.steps = nn.ModuleList([AttentionStep(d, d, d, **step)])
            return
        self.W_Q = nn.Linear(d, d, bias=False)  # Eq. (38): h query projections, stacked
        self.steps = nn.ModuleList(AttentionStep(d // h, d, d // h, **step) for _ in range(h))  # Eq. (39)
        self.W_O = nn.Linear(d, d, bias=False)  # Eq. (40)

    def forward(self, Q: Tensor, F: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor | None]:
        if self.h == 1:
            return self.steps[0](Q, F, generator)
        steps = cast("list[AttentionStep]", list(self.steps))
        first = steps[0]
        if first.dimensionality == "multi-dimensional":
            return self._multidimensional(Q, F, generator)
        hooks = _StepHooks(steps, generator)
        soft = first.alignment in SOFT_ALIGNMENTS
        shared_score = soft and next(first.score.parameters(), None) is None  # one parameter-free score for all heads
        out, a = _multihead.multi_head_attention(
            Q,
            F,
            F,
            self.W_Q.weight,
            torch.cat([step.W_K.weight for step in steps]),
            torch.cat([step.W_V.weight for step in steps]),
            self.W_O.weight,
            self.h,
            score=first.score if shared_score else hooks.score,
            align="softmax" if soft else hooks.align,
            average_attn_weights=True,
        )
        assert a is not None
        return out, a, hooks.log_prob

    def _multidimensional(
        self, Q: Tensor, F: Tensor, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Eq. (38)-(40) around multi-dimensional heads: split the projected queries, one step per head, merge, mix."""
        Qh = _multihead.split_heads(self.W_Q(Q), self.h)  # (B, h, n_q, d/h)
        outs = [step(Qh[..., j, :, :], F, generator) for j, step in enumerate(self.steps)]
        c = _multihead.merge_heads(torch.stack([o[0] for o in outs], dim=-3))
        return self.W_O(c), torch.stack([o[1] for o in outs], dim=-3).mean(-3), None
