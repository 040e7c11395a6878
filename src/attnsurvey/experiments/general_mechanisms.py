"""Task models of the general-mechanism chapters (§3.2): one model per chapter
whose only varying part is the score (§3.2.1), the alignment (§3.2.2) or the
dimensionality (§3.2.3) of its attention.

Shapes: B batch, n_f feature vectors, d_q query size, d_f feature size, d_k key size, d_v value
size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_integers, mean_or_zero
from ..attention import AlignFn, attend_scores
from ..catalog import catalogued
from ..general_mechanisms.alignment import (
    ALIGNMENT_KINDS,
    HardAlignHook,
    MovingAverageBaseline,
    PredictivePosition,
    _check_D,
    bernoulli_subset,
    local_align,
    monotonic_position,
    reinforced_align,
    score_function_surrogate,
)
from ..general_mechanisms.dimensionality import multidimensional_attend
from ..general_mechanisms.scoring import ScoreModule, make_score
from ..general_mechanisms.structured import crf_marginals
from ..general_model import GeneralAttention


@catalogued(
    "extra:score-comparison-model",
    title="One attention task model whose score function is any row of Table II",
    chapter="chapters/ch03_2_1_attention_scoring.ipynb",
)
class ScoreComparisonModel(nn.Module):
    """Task model for comparing score functions: ``y = W_c c + b_c`` with ``c`` from attention.

    The query model is a linear map ``W_q`` ``(d_k, d_in)`` of the query input;
    keys and values come from the features with ``W_K``, ``W_V`` (Eq. 1); the
    score is ``make_score(score, d_k, d_k)``; the alignment is the softmax
    (Eq. 3) and the output model is a linear layer (the logits of Eq. 5).

    Args:
        score: a Table II score name.
        d_in: the size of the query input.
        d_f: the feature size.
        d_k: the key (and query) size.
        n_classes: the number of classes.

    Shape:
        - x_q: ``(..., d_in)``; F: ``(..., n_f, d_f)``.
        - mask: boolean ``(..., n_f)``, ``True`` = may attend (as :class:`GeneralAttention`).
        - Output: ``(logits (..., n_classes), weights (..., n_f))``.
    """

    def __init__(self, score: str, d_in: int, d_f: int, d_k: int, n_classes: int) -> None:
        super().__init__()
        self.W_q = nn.Linear(d_in, d_k, bias=False)
        self.attention = GeneralAttention(d_q=d_k, d_f=d_f, d_k=d_k, d_v=d_k, score=make_score(score, d_k, d_k))
        self.out = nn.Linear(d_k, n_classes)

    def forward(self, x_q: Tensor, F: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        c, a = self.attention(self.W_q(x_q), F, mask)
        return self.out(c), a


class AlignmentClassifier(nn.Module):
    """A task model whose only varying part is the alignment function (the chapter's experiment).

    Feature vectors ``F`` give keys and values (Eq. 1); one query ``q`` per example
    scores the keys with the general score (Table II); ``align`` (one of
    :data:`ALIGNMENT_KINDS`) turns the scores into
    weights; the context (Eq. 24 or 26) feeds a linear output layer. Hard and
    reinforced alignments sample in training mode and act greedily in eval mode.
    forward returns ``(logits, a, log_prob)``, where ``log_prob`` is the
    log-probability of the sampled hard choice or subset (``None`` for deterministic
    alignments).

    Args:
        d_q: the query size.
        d_f: the feature size.
        n_classes: the number of classes.
        align: one of :data:`ALIGNMENT_KINDS`.
        d_k: the key size.
        D: the window half-width of the local alignments (>= 0).

    Shape:
        - q: ``(B, d_q)``; F: ``(B, n_f, d_f)``.
        - t: ``(B,)`` the output steps used as monotonic positions (``local-m``: the
          window softmax of Eq. 27 alone, while ``local-p`` adds the Gaussian of Eq. 29,
          as in Luong et al.).
        - Output: ``(logits (B, n_classes), a (B, n_f), log_prob or None)``.

    Raises:
        ValueError: for an unknown alignment, a ``D`` that is not a finite number >= 0,
            or ``local-m`` without ``t``.
    """

    def __init__(self, d_q: int, d_f: int, n_classes: int, align: str = "soft", d_k: int = 16, D: float = 2.0) -> None:
        super().__init__()
        check_integers("AlignmentClassifier", minimum=1, d_q=d_q, d_f=d_f, n_classes=n_classes, d_k=d_k)
        if align not in ALIGNMENT_KINDS:
            raise ValueError(f"unknown alignment {align!r}; choose one of {ALIGNMENT_KINDS}")
        self.align, self.D = align, _check_D(D)
        self.W_K = nn.Linear(d_f, d_k, bias=False)
        self.W_V = nn.Linear(d_f, d_k, bias=False)
        self.score: ScoreModule = make_score("general", d_q, d_k)
        self.out = nn.Linear(d_k, n_classes)
        self.baseline = MovingAverageBaseline()
        self.position = PredictivePosition(d_q, 16) if align == "local-p" else None
        if align == "reinforced":
            self.policy = make_score("general", d_q, d_k)
            self.policy_bias = nn.Parameter(torch.tensor(1.0))
        if align == "structured":
            self.transition = nn.Parameter(torch.zeros(2, 2))

    def forward(
        self, q: Tensor, F: Tensor, t: Tensor | None = None, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        as_tensor(F, "F")
        as_tensor(q, "q")
        K, V = self.W_K(F), self.W_V(F)
        n_f = F.shape[-2]
        e = self.score(q.unsqueeze(-2), K).squeeze(-2)  # (B, n_f)
        log_prob = None
        kind = self.align
        hard = HardAlignHook("sample" if self.training else "argmax", generator)
        align: str | AlignFn = "softmax" if kind == "soft" else kind  # uniform, sparsemax, entmax15: the core's names
        if kind == "hard":
            align = hard
        elif kind in ("local-m", "local-p"):
            if kind == "local-p":
                assert self.position is not None  # built for local-p in __init__
                p = self.position(q, n_f)
            elif t is None:
                raise ValueError("local-m alignment needs the output steps t (B,) as monotonic positions")
            else:
                p = monotonic_position(t, n_f).to(e.dtype)
            # Luong et al. apply the Gaussian of Eq. (29) to the predicted centre only: local-m is the bare window
            gaussian = kind == "local-p"
            align = lambda s, m: local_align(s, p, self.D, m, gaussian=gaussian)  # noqa: E731
        elif kind == "reinforced":
            logits = self.policy(q.unsqueeze(-2), K).squeeze(-2) + self.policy_bias
            z, log_prob = bernoulli_subset(logits, generator, greedy=not self.training)
            align = lambda s, m: reinforced_align(s, z, m)  # noqa: E731
        elif kind == "structured":
            align = lambda s, m: crf_marginals(s, self.transition)  # noqa: E731
        c, a = attend_scores(e, V, align=align)  # Eq. (3)-(4) (Eq. 24) through the core
        if kind == "hard":
            assert hard.last is not None  # set by the call above
            log_prob = hard.last.log_prob
        return self.out(c), a, log_prob


def classifier_loss(
    model: AlignmentClassifier,
    batch: tuple[Tensor, ...],
    generator: torch.Generator | None = None,
    subset_cost: float = 0.02,
) -> Tensor:
    """Training loss for :class:`AlignmentClassifier` on a batch ``(F, q, t, y)``.

    Cross-entropy, plus for the stochastic alignments (hard, reinforced) the
    REINFORCE surrogate with a moving-average baseline, whose gradient trains
    the scores (hard) or the policy (reinforced). An empty batch gives a loss of 0
    (still on the graph, so a step on it changes nothing), the package's convention for losses.

    Args:
        model: the classifier.
        batch: ``(F, q, t, y)``: feature vectors, queries, output steps and labels.
        generator: the random generator of the sampled alignments.
        subset_cost: for reinforced alignment, the cost charged per chosen position, so
            the policy learns to keep few positions.

    Shape:
        - Output: a scalar ``()``.

    Returns:
        The loss to minimise.
    """
    F, q, t, y = batch
    logits, a, log_prob = model(q, F, t, generator)
    ce = nn.functional.cross_entropy(logits, y, reduction="none")
    loss = mean_or_zero(ce)
    if log_prob is not None:
        cost = ce.detach()
        if model.align == "reinforced":
            cost = cost + subset_cost * (a > 0).sum(-1).to(cost.dtype)
        b = model.baseline.update(cost)
        loss = loss + score_function_surrogate(log_prob, cost, b)
    return loss


@catalogued(
    "extra:multidimensional-task",
    title="Feature-wise look-up: single-dimensional attention fails, multi-dimensional succeeds",
    chapter="chapters/ch03_2_3_attention_dimensionality.ipynb",
)
class FeatureLookupModel(nn.Module):
    """Task model for :func:`attnsurvey.data.lookup.featurewise_lookup`: attention + per-feature readout.

    With ``multi_dimensional=True`` the attention is Eq. (30)-(32) with a learned
    ``W_d`` ``(d_w, d_v)``. Otherwise it is single-dimensional additive attention
    (Table II, row 1, then Eq. 3-4): a learned vector ``w`` ``(d_w,)`` takes the
    place of ``W_d``, which is the same as ``W_d`` with ``d_v`` equal columns
    ``w`` (every feature then gets the same weight). Both share the form of
    ``W_1``, ``W_2`` and ``b``. The output model is one affine logit per feature,
    ``y_i = s_i c_i + t_i``, so the answer for feature ``i`` can only use
    feature ``i`` of the context.

    Args:
        d_q: the query size.
        d_k: the key size.
        d_v: the value size (the number of features).
        d_w: the hidden size of the additive score.
        multi_dimensional: one weight per item and feature (True) or per item (False).

    Shape:
        - q: ``(..., d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``.
        - Output: ``(logits (..., d_v), weights (..., n_f, d_v))``.

    Raises:
        ValueError: for a size that is not an integer >= 1.
    """

    def __init__(self, d_q: int, d_k: int, d_v: int, d_w: int, multi_dimensional: bool = True) -> None:
        super().__init__()
        check_integers("FeatureLookupModel", minimum=1, d_q=d_q, d_k=d_k, d_v=d_v, d_w=d_w)
        self.multi_dimensional = multi_dimensional
        self.d_v = d_v
        self.W1 = nn.Linear(d_q, d_w, bias=False)
        self.W2 = nn.Linear(d_k, d_w, bias=True)
        cols = d_v if multi_dimensional else 1
        self.W_d = nn.Parameter(torch.randn(d_w, cols) / math.sqrt(d_w))
        self.scale = nn.Parameter(torch.ones(d_v))
        self.shift = nn.Parameter(torch.zeros(d_v))

    def forward(self, q: Tensor, K: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
        # single-dimensional: one column w, repeated for every feature
        as_tensor(V, "V")
        as_tensor(K, "K")
        as_tensor(q, "q")
        W_d = self.W_d if self.multi_dimensional else self.W_d.expand(-1, self.d_v)
        c, A = multidimensional_attend(q.unsqueeze(-2), K, V, self.W1.weight, self.W2.weight, W_d, self.W2.bias)
        return c.squeeze(-2) * self.scale + self.shift, A.squeeze(-3)
