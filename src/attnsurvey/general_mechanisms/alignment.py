"""§3.2.2 Attention alignment: Eq. (24)-(29), with sparse and stochastic relatives.

The alignment function ``align()`` turns the score vector ``e`` (one score per
feature vector, ``(..., n_f)``) into attention weights ``a`` of the same shape,
and the context vector is their weighted sum of values, Eq. (24). This module
implements every alignment the survey names and the ones the other sources add:

* Eq. (24) ``c = sum_l a_l v_l``                        :func:`context_vector`
* Eq. (25) soft / global alignment (softmax)           :func:`soft_align`
* Eq. (26) hard alignment ``c = v_m``, ``m`` the arg-max
  or a sample from ``a``                                :func:`hard_align`, :func:`hard_attend`
* Eq. (27) local alignment: softmax inside ``[p-D, p+D]`` :func:`local_align`, :func:`window_mask`
* monotonic position ``p = t``                          :func:`monotonic_position`
* Eq. (28) predictive position ``p = S sigmoid(w_p^T tanh(W_p q))`` :func:`predictive_position`
* Eq. (29) Gaussian emphasis ``exp(-(l-p)^2 / (2 sigma^2))``, ``sigma = D/2`` :func:`gaussian_emphasis`
* reinforced alignment: a Bernoulli policy picks a subset, soft alignment over it
  (:func:`bernoulli_subset`, :func:`reinforced_align`, :class:`ReinforcedAlignment`)
* the score-function (REINFORCE) gradient estimator that trains the two
  stochastic alignments (:func:`score_function_surrogate`,
  :func:`reinforce_gradient_samples`, :class:`MovingAverageBaseline`)
* sparsemax (NLP review eq. 6) and entmax-1.5, sort-based (:func:`sparsemax`, :func:`entmax15`)

Positions are 0-based in code: feature vector ``l`` sits at position
``l = 0, ..., n_f - 1``. Masks are boolean, broadcastable to ``e``, ``True`` =
may attend (as in ``F.scaled_dot_product_attention``). A row with nothing to
attend to (fully masked, or an empty local window) gets all-zero weights and a
zero context vector, never NaN.

Shapes: B batch, n_f feature vectors (keys), n_q queries, d_q query size, d_k key size,
d_v value size, d_p hidden size of Eq. (28), N samples.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

import torch
from torch import Tensor, nn

from .._checks import (
    as_tensor,
    check_dim_equal,
    check_index_range,
    check_integers,
    check_min_rank,
    check_nonempty,
    check_nonnegative,
    check_same_shape,
    check_scored,
    mean_or_zero,
)
from ..attention import context as _context
from ..catalog import catalogued, declare
from ..masking import check_mask, masked_softmax, zero_masked
from .scoring import make_score
from .sparse_maps import _valid
from .sparse_maps import entmax15 as entmax15  # re-exported: taught with the alignments
from .sparse_maps import sparsemax as sparsemax  # re-exported: taught with the alignments

CHAPTER = "chapters/ch03_2_2_attention_alignment.ipynb"

#: The alignment kinds of §3.2.2 that this module implements (Eq. 24-29 and the relatives it adds).
ALIGNMENT_KINDS = ("uniform", "soft", "sparsemax", "entmax15", "hard", "local-m", "local-p", "reinforced", "structured")


# --------------------------------------------------------------------------- helpers
def _check_scores(e: Tensor, symbol: str = "e") -> None:
    as_tensor(e, symbol)
    check_min_rank(e, 1, symbol, "(..., n_f)")
    check_nonempty(e, -1, symbol, "n_f")


# --------------------------------------------------------------------------- Eq. (24), (25)
@catalogued("eq24", title="Context vector as the weighted sum of value vectors, c = sum_l a_l v_l")
def context_vector(a: Tensor, V: Tensor) -> Tensor:
    """Context vector, Eq. (24): ``c = sum_{l=1}^{n_f} a_l v_l``.

    The weights need not sum to 1 (local alignment with Eq. (29) and structured
    attention give weights that do not).

    Args:
        a: attention weights, one query per example or ``n_q`` queries.
        V: value vectors ``v_l``, of the same rank as a plus one (one query) or the same rank (``n_q`` queries).

    Shape:
        a: ``(..., n_f)`` or ``(..., n_q, n_f)``; V: ``(..., n_f, d_v)``; returns ``(..., d_v)`` or ``(..., n_q, d_v)``.

    Returns:
        The context vector(s) c.

    Raises:
        ValueError: if the two ``n_f`` differ or a tensor is not floating point or has too few dimensions.
        TypeError: if a or V is not a tensor.
    """
    as_tensor(a, "a")
    as_tensor(V, "V")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_min_rank(a, 1, "a", "(..., n_f)")
    check_dim_equal(a.shape[-1], V.shape[-2], "context (Eq. 24)", "n_f of a", "n_f of V")
    if a.dim() == V.dim() - 1:  # one query per example
        return _context(a.unsqueeze(-2), V).squeeze(-2)
    return _context(a, V)


@catalogued("eq25", title="Soft / global alignment, a_l = exp(e_l) / sum_j exp(e_j)")
def soft_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Soft (global) alignment, Eq. (25): ``a_l = exp(e_l) / sum_j exp(e_j)``.

    Every row lies on the probability simplex; a fully-masked row is all zeros.
    Stable for scores of any magnitude.

    Args:
        e: scores.
        mask: optional boolean mask broadcastable to e, ``True`` = may attend.

    Shape:
        e: ``(..., n_f)``; returns ``(..., n_f)``.

    Returns:
        The weights a.

    Raises:
        ValueError: for empty or non-float scores or a bad mask.
        TypeError: if e is not a tensor.
    """
    _check_scores(e)
    return masked_softmax(e, mask, dim=-1)


# --------------------------------------------------------------------------- Eq. (26)
class HardAlignment(NamedTuple):
    """Result of :func:`hard_align`.

    a: one-hot weights ``(..., n_f)`` (all zero for a fully-masked row);
    m: chosen index ``(...,)`` (``-1`` where nothing could be chosen);
    log_prob: ``log a_m`` under the soft weights ``(...,)`` (0 where nothing was chosen);
    probs: the soft weights of Eq. (25) that ``m`` was drawn from.
    """

    a: Tensor
    m: Tensor
    log_prob: Tensor
    probs: Tensor


@catalogued("eq26", title="Hard alignment c = v_m, m the arg-max or drawn from Multinomial(a)")
def hard_align(
    e: Tensor,
    mode: str = "sample",
    generator: torch.Generator | None = None,
    mask: Tensor | None = None,
) -> HardAlignment:
    """Hard alignment, Eq. (26): pick one index ``m`` and put all weight on it.

    The scores go through the softmax of Eq. (25); then ``mode="sample"`` draws
    ``m ~ Multinomial(a_1, ..., a_{n_f})`` with ``generator``, and
    ``mode="argmax"`` takes ``m = argmax_l a_l`` (the first one on ties; the
    deterministic form of nndl Eq. 8.8). ``log_prob = log a_m`` is what the
    score-function estimator (:func:`score_function_surrogate`) differentiates;
    the one-hot weights themselves carry no gradient. A fully-masked row gives
    ``a = 0``, ``m = -1`` and ``log_prob = 0``.

    Args:
        e: scores.
        mode: ``"sample"`` or ``"argmax"``.
        generator: random generator for ``mode="sample"`` (global generator if None).
        mask: optional boolean mask broadcastable to e, ``True`` = may attend (never picked otherwise).

    Shape:
        e: ``(..., n_f)``; returned a and probs ``(..., n_f)``, m and log_prob ``(...,)``.

    Returns:
        A :class:`HardAlignment` ``(a, m, log_prob, probs)``.

    Raises:
        ValueError: for an unknown mode, empty or non-float scores or a bad mask.
        TypeError: if e is not a tensor.
    """
    _check_scores(e)
    if mode not in ("sample", "argmax"):
        raise ValueError(f"hard alignment mode must be 'sample' or 'argmax', got {mode!r}")
    valid = _valid(e, mask)
    probs = masked_softmax(e, valid, dim=-1)
    any_valid = valid.any(-1)
    n_f = e.shape[-1]
    flat = probs.detach().reshape(-1, n_f).float()
    # rows with nothing to attend to get a dummy uniform row so sampling works
    flat = torch.where(any_valid.reshape(-1, 1), flat, torch.full_like(flat, 1.0 / n_f))
    if mode == "sample":
        m = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    else:
        m = flat.argmax(-1)
    m = m.reshape(e.shape[:-1])
    filled = e.masked_fill(~valid, torch.finfo(e.dtype).min)
    logp_all = torch.log_softmax(filled, dim=-1)
    log_prob = logp_all.gather(-1, m.unsqueeze(-1)).squeeze(-1)
    log_prob = torch.where(any_valid, log_prob, torch.zeros_like(log_prob))
    a = torch.nn.functional.one_hot(m, n_f).to(e.dtype) * any_valid.unsqueeze(-1)
    m = torch.where(any_valid, m, torch.full_like(m, -1))
    return HardAlignment(a, m, log_prob, probs)


@catalogued("eq26")
def hard_attend(
    e: Tensor,
    V: Tensor,
    mode: str = "sample",
    generator: torch.Generator | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, HardAlignment]:
    """Hard attention, Eq. (26): ``c = v_m`` with ``m`` from :func:`hard_align`.

    The context is the selected value vector itself (a row copy, not a weighted
    sum), and zero for a fully-masked row.

    Args:
        e: scores.
        V: value vectors.
        mode: ``"sample"`` or ``"argmax"`` (as :func:`hard_align`).
        generator: random generator for ``mode="sample"``.
        mask: optional boolean mask broadcastable to e, ``True`` = may attend.

    Shape:
        e: ``(..., n_f)``; V: ``(..., n_f, d_v)``; returns c ``(..., d_v)``.

    Returns:
        ``(c, alignment)``: the context vector and the :class:`HardAlignment`.

    Raises:
        ValueError: if the ``n_f`` of e and V differ, V has fewer than 2 dimensions, or as :func:`hard_align`.
        TypeError: if e or V is not a tensor.
    """
    _check_scores(e)
    as_tensor(V, "V")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_dim_equal(e.shape[-1], V.shape[-2], "hard attention (Eq. 26)", "n_f of e", "n_f of V")
    h = hard_align(e, mode, generator, mask)
    batch = torch.broadcast_shapes(e.shape[:-1], V.shape[:-2])
    Vb = V.expand(*batch, *V.shape[-2:])
    idx = h.m.clamp_min(0).expand(batch)[..., None, None].expand(*batch, 1, V.shape[-1])
    c = Vb.gather(-2, idx).squeeze(-2)
    c = c * (h.m >= 0).expand(batch).unsqueeze(-1).to(c.dtype)
    return c, h


class HardAlignHook:
    """Eq. (26) as an alignment hook ``(e, mask) -> a`` for the core (``attend(..., align=hook)``).

    Each call picks one position per row with :func:`hard_align` and returns the
    one-hot weights ``(..., n_f)`` for scores ``(..., n_f)``; the whole
    :class:`HardAlignment` of the last call (its ``log_prob`` is what REINFORCE
    differentiates) stays in ``last``. A call raises ``ValueError`` as
    :func:`hard_align` does.

    Args:
        mode: ``"sample"`` draws the position with ``generator``, ``"argmax"`` takes the largest weight.
        generator: random generator for ``mode="sample"`` (global generator if None).
    """

    def __init__(self, mode: str = "sample", generator: torch.Generator | None = None) -> None:
        self.mode, self.generator = mode, generator
        self.last: HardAlignment | None = None

    def __call__(self, e: Tensor, mask: Tensor | None = None) -> Tensor:
        self.last = hard_align(e, self.mode, self.generator, mask)
        return self.last.a


# --------------------------------------------------------------------------- REINFORCE
@catalogued("extra:reinforce-estimator", title="Score-function (REINFORCE) gradient estimator with a baseline")
def score_function_surrogate(log_prob: Tensor, loss: Tensor, baseline: Tensor | float = 0.0) -> Tensor:
    """Surrogate whose gradient is the score-function (REINFORCE) estimator.

    For a discrete choice ``m ~ p_theta`` and a loss ``L(m)``,
    ``grad_theta E[L] = E[(L(m) - b) grad_theta log p_theta(m)]`` for any baseline
    ``b`` that does not depend on ``m`` (Williams, 1992). Back-propagating the
    result gives the Monte-Carlo average of that estimator over the samples in
    the batch.

    Args:
        log_prob: log-probabilities of the sampled choices (with grad).
        loss: per-sample losses (their gradient is cut).
        baseline: a scalar or a tensor broadcastable to loss.

    Shape:
        log_prob and loss: ``(...,)``, the same shape; returns a scalar ``()``.

    Returns:
        ``mean((L - b).detach() * log_prob)``; 0 (zero gradient) when there are no samples.

    Raises:
        ValueError: if log_prob and loss differ in shape or are not floating point.
        TypeError: if log_prob or loss is not a tensor.
    """
    as_tensor(log_prob, "log_prob")
    as_tensor(loss, "loss")
    check_same_shape(log_prob, loss, "log_prob", "loss", "log_prob and loss need the same shape (one per sample)")
    b = torch.as_tensor(baseline, dtype=loss.dtype)
    advantage = (loss - b).detach()
    return mean_or_zero(advantage * log_prob)


@catalogued("extra:reinforce-estimator")
def reinforce_gradient_samples(e: Tensor, losses: Tensor, m: Tensor, baseline: float | Tensor = 0.0) -> Tensor:
    """Per-sample score-function gradients ``(L_m - b)(onehot(m) - a)`` w.r.t. the scores e.

    For the softmax of Eq. (25), ``d log a_m / d e = onehot(m) - a``, so each
    sample's REINFORCE gradient has this closed form; their mean estimates
    ``d/de sum_l a_l L_l``.

    Args:
        e: scores of one row.
        losses: the loss ``L_l`` of every choice.
        m: sampled indices (integer tensor).
        baseline: the baseline b, a float or a scalar tensor.

    Shape:
        e: ``(n_f,)``; losses: ``(n_f,)``; m: ``(N,)``; returns ``(N, n_f)``.

    Returns:
        One gradient row per sample.

    Raises:
        ValueError: if e or losses is not ``(n_f,)``, or e is empty or not floating point; if
            m is not ``(N,)`` or holds a position outside ``[0, n_f)``.
        TypeError: if e or losses is not a tensor, or m not an integer tensor.
    """
    _check_scores(e)
    as_tensor(losses, "losses")
    if e.dim() != 1 or losses.shape != e.shape:
        raise ValueError(f"e and losses must both be (n_f,), got e={tuple(e.shape)}, losses={tuple(losses.shape)}")
    check_index_range(m, e.shape[-1], "m", "reinforce_gradient_samples (sampled positions, n_f)")
    if m.dim() != 1:
        raise ValueError(f"m (the sampled positions) must have shape (N,), got {tuple(m.shape)}")
    a = torch.softmax(e.detach(), -1)
    onehot = torch.nn.functional.one_hot(m.long(), e.shape[-1]).to(e.dtype)
    adv = losses.detach()[m] - torch.as_tensor(baseline, dtype=e.dtype)
    return adv[:, None] * (onehot - a)


@catalogued("extra:reinforce-estimator")
class MovingAverageBaseline(nn.Module):
    """An exponential moving average of the loss, used as the REINFORCE baseline ``b``.

    ``update(loss)`` returns the current ``b`` (before the update, so it never
    depends on the samples it is used with) and then moves ``b`` towards the
    batch mean: ``b <- momentum * b + (1 - momentum) * mean(loss)``; the first
    call uses the batch mean. An empty batch leaves ``b`` unchanged (it has no mean).

    Args:
        momentum: the decay, in ``[0, 1)``.

    Raises:
        ValueError: if momentum lies outside ``[0, 1)``.
    """

    value: Tensor  # buffers (register_buffer): the running b, and whether it has a value yet
    started: Tensor

    def __init__(self, momentum: float = 0.9) -> None:
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
        self.momentum = momentum
        self.register_buffer("value", torch.zeros(()))
        self.register_buffer("started", torch.zeros((), dtype=torch.bool))

    def update(self, loss: Tensor) -> Tensor:
        """The baseline ``b`` for this batch's losses, then the average moved towards their mean.

        Raises:
            TypeError: if loss is not a floating-point tensor.
        """
        as_tensor(loss, "loss")
        b = self.value.clone()
        if loss.numel() == 0:
            return b
        mean = loss.detach().float().mean()
        if not bool(self.started):
            b = mean.clone()  # first call: use the batch mean (no history yet)
            self.value.copy_(mean)
            self.started.fill_(True)
        else:
            self.value.mul_(self.momentum).add_((1 - self.momentum) * mean)
        return b


# --------------------------------------------------------------------------- Eq. (27)-(29)
def _as_position(p: Tensor | float, n_f: int, dtype: torch.dtype, symbol: str = "p") -> Tensor:
    # a Python number or an integer tensor takes the given dtype (the scores' precision), never float32 by default
    p = torch.as_tensor(p, dtype=dtype) if not isinstance(p, Tensor) else p
    if not p.is_floating_point():
        p = p.to(dtype)
    if p.numel() == 0:  # an empty batch: nothing to check
        return p
    if not torch.isfinite(p.detach()).all():
        raise ValueError(f"position {symbol} must be finite, got {p.detach().tolist()}")
    lo, hi = float(p.detach().min()), float(p.detach().max())
    if lo < 0 or hi > n_f - 1:
        raise ValueError(
            f"position {symbol} must lie inside the sequence, [0, n_f - 1] = [0, {n_f - 1}] "
            f"(0-based positions), got values in [{lo:g}, {hi:g}]"
        )
    return p


def _check_D(D: float) -> float:
    D = float(D)
    if not math.isfinite(D) or D < 0:
        raise ValueError(f"window half-width D must be a finite number >= 0, got D={D}")
    return D


@catalogued("eq27")
def window_mask(n_f: int, p: Tensor | float, D: float) -> Tensor:
    """The local window of Eq. (27): ``True`` at positions ``l`` with ``|l - round(p)| <= D``.

    The window holds the ``2D + 1`` positions around the position nearest to
    ``p`` (``round(p) = floor(p + 1/2)``, halves round up), also when ``p`` is
    fractional (Eq. 28 predicts a real ``p``; the Gaussian of Eq. 29 still uses
    the real ``p``). Luong et al. (2015) do not say how a real ``p`` is turned
    into a window centre; their released code takes ``floor(p)`` (in these
    0-based positions), so the two choices differ for a fractional part of 1/2
    or more. A non-integer ``D`` keeps ``floor(D)`` positions on each side.
    The window always holds ``round(p)``, so it is never empty.

    Clipping at the ends: the window is intersected with the sequence, so near
    an end it simply holds fewer positions (``p = 0, D = 2`` keeps ``{0, 1, 2}``);
    it is not shifted inwards and nothing is padded.

    Args:
        n_f: sequence length.
        p: position(s), a float or a tensor with values in ``[0, n_f - 1]``.
        D: half-width ``>= 0``.

    Shape:
        p: ``(...,)`` or a float; returns ``(..., n_f)``.

    Returns:
        The boolean window mask, ``True`` = may attend.

    Raises:
        ValueError: if ``D < 0`` or not finite, ``n_f < 1``, or p is not finite or lies outside the sequence.
    """
    check_integers("window_mask", minimum=0, n_f=n_f)
    if n_f < 1:
        raise ValueError(f"local alignment needs n_f >= 1, got n_f={n_f}")
    D = _check_D(D)
    p = _as_position(p, n_f, torch.get_default_dtype())
    pos = torch.arange(n_f, dtype=p.dtype, device=p.device)
    centre = torch.floor(p.detach() + 0.5).unsqueeze(-1)  # round(p), halves up
    return (pos - centre).abs() <= D


@catalogued("eq27")
def monotonic_position(t: int | Tensor, n_f: int) -> Tensor:
    """Monotonic alignment: the window centre is the output step itself, ``p = t``.

    Monotonic alignment assumes the output is no longer than the input; rescale
    t first if it is.

    Args:
        t: output position(s), an int or an integer-valued tensor, 0-based.
        n_f: sequence length.

    Shape:
        t: ``(...,)`` or an int; returns ``(...,)``.

    Returns:
        p as a float tensor of the default dtype.

    Raises:
        ValueError: if t is not an integer step or lies outside ``[0, n_f - 1]``.
    """
    t = torch.as_tensor(t)
    if t.is_floating_point() and not torch.equal(t, t.round()):
        raise ValueError(f"monotonic position t must be an integer step, got {t.tolist()}")
    return _as_position(t.to(torch.get_default_dtype()), n_f, torch.get_default_dtype(), "p = t")


@catalogued("eq28", title="Predictive position p = S sigmoid(w_p^T tanh(W_p q))")
def predictive_position(q: Tensor, W_p: Tensor, w_p: Tensor, S: float) -> Tensor:
    """Predictive alignment, Eq. (28): ``p = S * sigmoid(w_p^T tanh(W_p q))``.

    With 0-based positions pass ``S = n_f - 1`` so that p always lies inside the
    sequence (this is what :class:`PredictivePosition` does).

    Args:
        q: query.
        W_p: projection matrix.
        w_p: projection vector.
        S: the scale (the survey's sequence length), ``>= 0``.

    Shape:
        q: ``(..., d_q)``; W_p: ``(d_p, d_q)``; w_p: ``(d_p,)``; returns ``(...,)``.

    Returns:
        The position p, in ``(0, S)``.

    Raises:
        ValueError: on shape mismatches, non-float tensors or ``S < 0``.
        TypeError: if q, W_p or w_p is not a tensor.
    """
    as_tensor(q, "q")
    as_tensor(W_p, "W_p")
    as_tensor(w_p, "w_p")
    check_min_rank(q, 1, "q", "(..., d_q)")
    if W_p.dim() != 2 or W_p.shape[1] != q.shape[-1]:
        raise ValueError(f"W_p must have shape (d_p, d_q) with d_q={q.shape[-1]}, got {tuple(W_p.shape)}")
    if w_p.shape != (W_p.shape[0],):
        raise ValueError(f"w_p must have shape (d_p,) = ({W_p.shape[0]},), got {tuple(w_p.shape)}")
    if not S >= 0:
        raise ValueError(f"S (sequence length scale) must be >= 0, got S={S}")
    return S * torch.sigmoid(torch.tanh(q @ W_p.T) @ w_p)


@catalogued("eq28")
class PredictivePosition(nn.Module):
    """Eq. (28) with learned ``W_p`` ``(d_p, d_q)`` and ``w_p`` ``(d_p,)``.

    ``forward(q, n_f)`` returns p in ``(0, n_f - 1)`` (0-based, so S = n_f - 1).

    Args:
        d_q: query size.
        d_p: hidden size of Eq. (28).

    Shape:
        q: ``(..., d_q)``; returns p ``(...,)``.

    Raises:
        ValueError: ``d_q`` or ``d_p`` (in ``__init__``) or ``n_f`` (in ``forward``) is not an integer >= 1.
    """

    def __init__(self, d_q: int, d_p: int) -> None:
        super().__init__()
        check_integers("PredictivePosition", minimum=1, d_q=d_q, d_p=d_p)
        self.W_p = nn.Linear(d_q, d_p, bias=False)
        self.w_p = nn.Parameter(torch.randn(d_p) / math.sqrt(d_p))

    def forward(self, q: Tensor, n_f: int) -> Tensor:
        check_integers("PredictivePosition", minimum=1, n_f=n_f)
        return predictive_position(q, self.W_p.weight, self.w_p, float(n_f - 1))


@catalogued("eq29", title="Gaussian emphasis around p, exp(-(l - p)^2 / (2 sigma^2)), sigma = D/2 (not renormalised)")
def gaussian_emphasis(n_f: int, p: Tensor | float, sigma: float) -> Tensor:
    """The Gaussian factor of Eq. (29): ``exp(-(l - p)^2 / (2 sigma^2))`` for ``l = 0..n_f-1``.

    For ``sigma = 0`` the factor is 1 at ``l = p`` and 0 elsewhere (the limit).

    Args:
        n_f: sequence length.
        p: position(s) in ``[0, n_f - 1]`` (may carry a gradient: this factor is how p of Eq. (28) is trained).
        sigma: the width (the survey sets ``sigma = D / 2``).

    Shape:
        p: ``(...,)`` or a float; returns ``(..., n_f)``.

    Returns:
        The (not renormalised) Gaussian factor.

    Raises:
        ValueError: for ``sigma < 0`` or not finite, or p not finite or outside the sequence.
    """
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be a finite number >= 0, got sigma={sigma}")
    check_integers("gaussian_emphasis", minimum=0, n_f=n_f)
    p = _as_position(p, n_f, torch.get_default_dtype())
    pos = torch.arange(n_f, dtype=p.dtype, device=p.device)
    diff = pos - p.unsqueeze(-1)
    coef = math.inf if sigma**2 == 0 else 1.0 / (2.0 * sigma**2)
    if coef > torch.finfo(p.dtype).max:  # sigma = 0, or so small that 1/(2 sigma^2) overflows
        return (diff == 0).to(p.dtype)
    return torch.exp(-(diff**2) * coef)


@catalogued("eq27", title="Local alignment: softmax restricted to the window [p - D, p + D]")
@catalogued("eq29")
def local_align(
    e: Tensor,
    p: Tensor | float,
    D: float,
    mask: Tensor | None = None,
    gaussian: bool = True,
    sigma: float | None = None,
    renormalise: bool = False,
) -> Tensor:
    """Local alignment, Eq. (27), optionally with the Gaussian emphasis of Eq. (29).

    Eq. (27) is the softmax of the scores restricted to the window
    ``[p - D, p + D]`` (see :func:`window_mask` for how it is clipped at the
    sequence ends: intersected with ``0..n_f-1``, not shifted); weights outside
    the window are exactly zero. With ``gaussian=True`` each weight is then
    multiplied by ``exp(-(l - p)^2 / (2 sigma^2))`` with ``sigma = D / 2`` unless
    given, Eq. (29). Faithful to the survey (and to Luong et al.), the result is
    NOT renormalised, so the weights sum to less than 1 whenever the window has
    more than one position; pass ``renormalise=True`` to divide by their sum.
    A row whose window holds no allowed position gets all-zero weights.

    Args:
        e: scores.
        p: position(s) broadcastable to ``e.shape[:-1]``, in ``[0, n_f - 1]``.
        D: half-width ``>= 0``.
        mask: optional boolean mask broadcastable to e, ``True`` = may attend (combined with the window).
        gaussian: whether to multiply by the Gaussian of Eq. (29).
        sigma: the Gaussian's width; ``D / 2`` if None.
        renormalise: whether to divide each row by its sum.

    Shape:
        e: ``(..., n_f)``; p: ``e.shape[:-1]`` or broadcastable to it; returns ``(..., n_f)``.

    Returns:
        The local weights a.

    Raises:
        ValueError: for ``D < 0``, p outside the sequence, p not matching e's batch shape, empty or
            non-float scores or a bad mask.
        TypeError: if e is not a tensor.
    """
    _check_scores(e)
    n_f = e.shape[-1]
    D = _check_D(D)
    p = _as_position(p, n_f, e.dtype)
    try:
        ok = torch.broadcast_shapes(p.shape, e.shape[:-1]) == e.shape[:-1]
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"p of shape {tuple(p.shape)} must broadcast to the scores' batch shape "
            f"e.shape[:-1] = {tuple(e.shape[:-1])} (one position per score row)"
        )
    p = p.to(e.dtype)
    win = window_mask(n_f, p, D)
    allowed = win if mask is None else win & _valid(e, mask)
    a = masked_softmax(e, allowed.expand(e.shape), dim=-1)  # Eq. (27)
    if gaussian:
        s = D / 2.0 if sigma is None else float(sigma)
        a = a * gaussian_emphasis(n_f, p, s).to(e.dtype)  # Eq. (29)
    if renormalise:
        total = a.sum(-1, keepdim=True)
        # divide by the sum itself, even when it is subnormal (a Gaussian factor far out in its tail):
        # clamping it to finfo.tiny would leave such a row summing to far less than 1
        a = a / torch.where(total > 0, total, torch.ones_like(total))
    return a


@catalogued("eq27")
class LocalAttention(nn.Module):
    """Local attention, Eq. (27)-(29), with a learned score and (predictive mode) position.

    ``forward(q, K, V, t=None, mask=None)`` returns ``(c, a, p)``; t holds the
    output steps for the monotonic mode; the mask is combined with the window (a
    window without an allowed key gives zero weights); a masked key holding
    NaN/Inf reaches no output and no gradient (the score's included).

    Args:
        d_q: query size.
        d_k: key size.
        D: window half-width ``>= 0``.
        mode: ``"monotonic"`` (p = t, given to forward) or ``"predictive"`` (Eq. 28).
        d_p: hidden size of Eq. (28).
        score: a Table II score name.
        gaussian: whether to multiply by the Gaussian of Eq. (29); the default ``None`` follows Luong et
            al. (2015), who use it for the predicted centre only: on in predictive mode (local-p), off in
            monotonic mode (local-m); pass True or False to choose explicitly.
        renormalise: as in :func:`local_align`.

    Shape:
        q: ``(..., d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``; t: ``(...,)``;
        mask: boolean ``(..., n_f)``, ``True`` = may attend; returns c ``(..., d_v)``,
        a ``(..., n_f)``, p ``(...,)``.

    Raises:
        ValueError: for an unknown mode or ``D < 0`` (construction); in forward, when the monotonic
            mode gets no t, or as :func:`local_align` and :func:`context_vector`.
    """

    def __init__(
        self,
        d_q: int,
        d_k: int,
        D: float,
        mode: str = "predictive",
        d_p: int = 16,
        score: str = "general",
        gaussian: bool | None = None,
        renormalise: bool = False,
    ) -> None:
        super().__init__()
        if mode not in ("monotonic", "predictive"):
            raise ValueError(f"local attention mode must be 'monotonic' or 'predictive', got {mode!r}")
        if gaussian is None:  # Luong et al.: the Gaussian of Eq. (29) belongs to local-p only
            gaussian = mode == "predictive"
        check_integers("LocalAttention", minimum=1, d_q=d_q, d_k=d_k, d_p=d_p)
        self.D, self.mode, self.gaussian, self.renormalise = _check_D(D), mode, gaussian, renormalise
        self.score = make_score(score, d_q, d_k)
        self.position = PredictivePosition(d_q, d_p) if mode == "predictive" else None

    def forward(
        self, q: Tensor, K: Tensor, V: Tensor, t: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        as_tensor(q, "q")
        as_tensor(K, "K")
        as_tensor(V, "V")
        check_min_rank(K, 2, "K", "(..., n_f, d_k)")
        n_f = K.shape[-2]
        if self.mode == "monotonic":
            if t is None:
                raise ValueError("monotonic local attention needs the output step t (p = t)")
            p = monotonic_position(t, n_f).to(q.dtype)
        else:
            p = cast(PredictivePosition, self.position)(q, n_f)  # built when mode == "predictive"
        e = self.score(q.unsqueeze(-2), zero_masked(K, mask)).squeeze(-2)  # padded keys inert in gradients too
        a = local_align(e, p, self.D, mask, self.gaussian, None, self.renormalise)
        return context_vector(a, V), a, p


# --------------------------------------------------------------------------- reinforced alignment
@catalogued(
    "extra:reinforced-alignment",
    title="Reinforced alignment: a Bernoulli policy picks a subset, soft alignment over it",
)
def bernoulli_subset(
    logits: Tensor, generator: torch.Generator | None = None, mask: Tensor | None = None, greedy: bool = False
) -> tuple[Tensor, Tensor]:
    """Sample a subset of feature vectors: ``z_l ~ Bernoulli(sigmoid(logits_l))`` independently.

    This is the policy of reinforced alignment. Masked-out positions are never
    chosen and add nothing to the log-probability, even when their logit is NaN/Inf.

    Args:
        logits: policy logits.
        generator: the draws come from it (on its device), else from the global generator of the logits' device.
        mask: optional boolean mask broadcastable to the logits, ``True`` = may attend.
        greedy: take ``z_l = [pi_l > 1/2]`` instead of sampling.

    Shape:
        logits: ``(..., n_f)``; returns z ``(..., n_f)`` and log_prob ``(...,)``.

    Returns:
        ``(z, log_prob)``: the boolean selection and
        ``sum_l [z_l log pi_l + (1 - z_l) log(1 - pi_l)]``.

    Raises:
        ValueError: for empty or non-float logits or a bad mask.
        TypeError: if logits is not a tensor.
    """
    _check_scores(logits, "policy logits")
    valid = _valid(logits, mask)
    pi = torch.sigmoid(logits.detach()).float()
    if greedy:
        z = pi > 0.5
    else:
        # drawn on the generator's device (the logits' without one), compared on the logits' device
        draw_on = pi.device if generator is None else generator.device
        u = torch.rand(pi.shape, generator=generator, dtype=torch.float32, device=draw_on)
        z = u.to(pi.device) < pi
    z = z & valid
    # log pi = logsigmoid(x), log(1 - pi) = logsigmoid(-x): stable for large |x|
    lp = torch.where(z, nn.functional.logsigmoid(logits), nn.functional.logsigmoid(-logits))
    log_prob = torch.where(valid, lp, torch.zeros((), dtype=lp.dtype, device=lp.device)).sum(-1)
    return z, log_prob


@catalogued("extra:reinforced-alignment")
def reinforced_align(e: Tensor, z: Tensor, mask: Tensor | None = None) -> Tensor:
    """Reinforced alignment: soft alignment (Eq. 25) over the chosen subset ``z`` only.

    Unchosen or masked positions get zero weight; an empty subset gives all-zero weights.

    Args:
        e: scores.
        z: boolean selection broadcastable to e (from :func:`bernoulli_subset`).
        mask: optional boolean mask broadcastable to e, ``True`` = may attend, ANDed with z.

    Shape:
        e: ``(..., n_f)``; z: broadcastable to ``(..., n_f)``; returns ``(..., n_f)``.

    Returns:
        The weights a.

    Raises:
        ValueError: if z is not boolean or does not match e, the scores are empty or not floating point, or the mask is bad.
        TypeError: if e is not a tensor.
    """
    _check_scores(e)
    check_mask(z, e.shape, symbol="z (selected subset)")
    allowed = z if mask is None else z & _valid(e, mask)
    return masked_softmax(e, allowed, dim=-1)


@catalogued("extra:reinforced-alignment")
class ReinforcedAlignment(nn.Module):
    """Reinforced alignment: a learned Bernoulli policy picks a subset, soft alignment over it.

    The policy's logits are a second Table II score between the query and the
    keys, ``logit_l = score_pi(q, k_l)``; the attention scores ``e`` come from
    ``score``. Conditioning the policy on the query is this book's choice, to
    fit one-query attention; ReSAN (Shen et al., 2018) scores each token from
    the token and the mean of its sequence, with no query, and selects heads
    and dependents with two separate policies.
    ``forward(q, K, V, generator=None, mask=None)`` samples in training mode
    and takes ``pi > 1/2`` in eval mode, and returns ``(c, a, z, log_prob)``;
    a masked key (never chosen) holding NaN/Inf reaches no output,
    log-probability or gradient. Train the policy with :func:`score_function_surrogate`.

    Args:
        d_q: query size.
        d_k: key size.
        score: Table II score name for the attention scores.
        policy_score: Table II score name for the policy logits.

    Shape:
        q: ``(..., d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``; mask: boolean
        ``(..., n_f)``, ``True`` = may attend; returns c ``(..., d_v)``, a and z ``(..., n_f)``,
        log_prob ``(...,)``.

    Raises:
        TypeError: in ``forward``, ``q``, ``K`` or ``V`` is not a floating-point tensor.
    """

    def __init__(self, d_q: int, d_k: int, score: str = "general", policy_score: str = "general") -> None:
        super().__init__()
        self.score = make_score(score, d_q, d_k)
        self.policy = make_score(policy_score, d_q, d_k)
        self.policy_bias = nn.Parameter(torch.tensor(1.0))  # start by keeping most positions

    def forward(
        self, q: Tensor, K: Tensor, V: Tensor, generator: torch.Generator | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        as_tensor(q, "q")
        as_tensor(K, "K")
        as_tensor(V, "V")
        K = zero_masked(K, mask)  # a padded key holding NaN/Inf is inert in the gradients too
        logits = self.policy(q.unsqueeze(-2), K).squeeze(-2) + self.policy_bias
        z, log_prob = bernoulli_subset(logits, generator, mask, greedy=not self.training)
        e = self.score(q.unsqueeze(-2), K).squeeze(-2)
        a = reinforced_align(e, z, mask)
        return context_vector(a, V), a, z, log_prob


# --------------------------------------------------------------------------- sparsemax, entmax-1.5
# Defined in the core layer (sparse_maps, used by the alignment registry of attnsurvey.attention);
# taught here, so the catalog names them here.
declare(
    "attnsurvey.general_mechanisms.alignment.sparsemax",
    "extra:sparsemax",
    title="Sparsemax, the Euclidean projection onto the simplex (NLP review eq. 6)",
)
declare(
    "attnsurvey.general_mechanisms.alignment.entmax15",
    "extra:entmax15",
    title="1.5-entmax, between softmax and sparsemax",
)


# --------------------------------------------------------------------------- diagnostics
def weight_entropy(a: Tensor) -> Tensor:
    """Shannon entropy (nats) of each weight row, with ``0 log 0 = 0``.

    Rows that do not sum to 1 (Eq. 29 without renormalising, structured
    attention) are normalised first; an all-zero row has entropy 0.

    Args:
        a: attention weights.

    Shape:
        a: ``(..., n_f)``; returns ``(...,)``.

    Returns:
        The entropy of each row.

    Raises:
        ValueError: if a is not floating point.
        TypeError: if a is not a tensor.
    """
    as_tensor(a, "a")
    total = a.sum(-1, keepdim=True)
    p = torch.where(total > 0, a / total.clamp_min(torch.finfo(a.dtype).tiny), a)
    plogp = torch.where(p > 0, p * torch.log(p.clamp_min(torch.finfo(a.dtype).tiny)), torch.zeros_like(p))
    return -plogp.sum(-1)


def concentration(a: Tensor, target: Tensor | None = None, eps: float = 1e-6) -> dict[str, float]:
    """Summary of how focused weight rows are.

    Args:
        a: attention weights.
        target: optional index of the position that matters, per row.
        eps: threshold above which a weight counts as nonzero.

    Shape:
        a: ``(B, n_f)``; target: ``(B,)``.

    Returns:
        A dict with the mean ``"entropy"``, the mean ``"max_weight"``, the mean number of weights above
        eps ``"nonzero"`` and (with target) ``"on_target"``, the mean weight on the target position.

    Raises:
        TypeError: if ``a`` is not a floating-point tensor.
        ValueError: for no row or no position to summarise (``B = 0`` or ``n_f = 0``: a
            metric over nothing is undefined) or an ``eps`` that is not a finite number >= 0.
    """
    as_tensor(a, "a")
    check_min_rank(a, 1, "a", "(B, n_f)")
    check_nonnegative("concentration", eps=eps)
    check_nonempty(a, -1, "a", "n_f")
    check_scored(a[..., 0].numel(), "concentration", "a")
    out = {
        "entropy": float(weight_entropy(a).mean()),
        "max_weight": float(a.max(-1).values.mean()),
        "nonzero": float((a > eps).sum(-1).float().mean()),
    }
    if target is not None:
        out["on_target"] = float(a.gather(-1, target.unsqueeze(-1)).mean())
    return out
