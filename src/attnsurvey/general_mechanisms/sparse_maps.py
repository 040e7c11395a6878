"""Sparse alignment maps: sparsemax (NLP review eq. 6) and 1.5-entmax.

Both map scores ``e`` ``(..., n_f)`` to weights on the probability simplex
that can be exactly zero. They sit in the core layer (imported by
:mod:`attnsurvey.attention`'s alignment registry) and import nothing above it.

Conventions shared with the softmax of :func:`attnsurvey.masking.masked_softmax`:
``mask`` is boolean, broadcastable to ``e``, ``True`` = may attend; masked
entries get weight 0 and are inert (NaN there is ignored); a fully-masked row
is all zeros. Infinite scores have a defined meaning, the same whether they
come from the scores or the mask: a ``-inf`` entry is treated as masked (so a
row of ``-inf`` gives all zeros, like a fully-masked row), and a row holding
``+inf`` entries puts equal weight on those entries and 0 elsewhere (the limit
of the map as those scores grow). Gradients are finite in all these cases.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .._checks import as_tensor, check_min_rank, check_nonempty
from ..masking import check_mask


def _valid(e: Tensor, mask: Tensor | None) -> Tensor:
    """The mask broadcast to ``e``'s shape (all True when ``mask`` is None)."""
    if mask is None:
        return torch.ones_like(e, dtype=torch.bool)
    check_mask(mask, e.shape)
    return mask.expand(e.shape)


def _compute_dtype(e: Tensor) -> torch.dtype:
    # cumulative sums in float16/bfloat16 lose too much precision; work in float32
    return torch.float32 if e.dtype in (torch.float16, torch.bfloat16) else e.dtype


def _sorted_valid(z: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Sort each row descending with masked entries last; return values (0 where masked) and validity."""
    keyed = z.masked_fill(~valid, float("-inf"))
    zs, idx = torch.sort(keyed, dim=-1, descending=True)
    vs = valid.gather(-1, idx)
    return torch.where(vs, zs, torch.zeros_like(zs)), vs


def _shift(z: Tensor, valid: Tensor) -> Tensor:
    zmax = z.masked_fill(~valid, float("-inf")).amax(-1, keepdim=True)
    zmax = torch.where(torch.isfinite(zmax), zmax, torch.zeros_like(zmax))
    return z - zmax.detach()  # both maps are shift-invariant; this keeps +-1e4 scores exact


def _prepare(e: Tensor, mask: Tensor | None, dim: int, halve: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Checked scores moved to the last axis: ``(z, valid, plus_inf)`` with infinities handled."""
    as_tensor(e, "e")
    check_min_rank(e, 1, "e", "(..., n_f)")
    check_nonempty(e, dim, "e", "n_f")
    valid = _valid(e, mask).movedim(dim, -1)
    z = e.movedim(dim, -1).to(_compute_dtype(e))
    plus = valid & (z == float("inf"))
    valid = valid & (z != float("-inf"))
    z = torch.where(valid & (z.abs() != float("inf")), z, torch.zeros((), dtype=z.dtype))  # NaN stays NaN
    if halve:
        z = z / 2
    return _shift(z, valid), valid, plus


def _finish(out: Tensor, plus: Tensor, e: Tensor, dim: int) -> Tensor:
    """Rows with ``+inf`` scores: equal weight on those entries (the limit); then restore dtype/axis."""
    has_plus = plus.any(-1, keepdim=True)
    if bool(has_plus.any()):
        share = plus.to(out.dtype) / plus.sum(-1, keepdim=True).clamp_min(1).to(out.dtype)
        out = torch.where(has_plus, share, out)
    return out.to(e.dtype).movedim(-1, dim)


def sparsemax(e: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Sparsemax (NLP review eq. 6): the Euclidean projection of e onto the simplex.

    ``sparsemax(e) = argmin_{a in simplex} ||a - e||^2 = max(e - tau, 0)``, with
    the threshold ``tau`` found by sorting (Martins & Astudillo, 2016): with
    ``z_(1) >= z_(2) >= ...`` the sorted scores, the support size is the largest
    ``k`` with ``1 + k z_(k) > sum_{j<=k} z_(j)``, and
    ``tau = (sum_{j<=k} z_(j) - 1) / k``. Unlike softmax it returns exact zeros.

    e: scores, any shape, normalised over ``dim``; mask: boolean broadcastable
    to e, ``True`` = may attend (masked entries get 0; a fully-masked row is all 0).
    Infinite scores: see the module notes (``-inf`` = masked, ``+inf`` = one-hot).
    float16/bfloat16 inputs are computed in float32 and cast back.
    Raises ``ValueError`` for empty or non-float scores or a bad mask.
    """
    z, valid, plus = _prepare(e, mask, dim, halve=False)
    zs, vs = _sorted_valid(z, valid)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    cums = zs.cumsum(-1)
    support = vs & (1 + k * zs > cums)
    k_star = support.sum(-1, keepdim=True).clamp_min(1)
    tau = (cums.gather(-1, k_star - 1) - 1) / k_star.to(z.dtype)
    out = torch.where(valid, torch.clamp(z - tau, min=0), torch.zeros_like(z))
    return _finish(out, plus, e, dim)


def entmax15(e: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """1.5-entmax: ``a = [e/2 - tau]_+^2`` with tau such that the weights sum to 1.

    The alpha = 1.5 member of the entmax family (Peters et al., 2019), which
    sits between softmax (alpha = 1) and sparsemax (alpha = 2): sparse, but
    smoother. Exact sort-based threshold: with ``z = e/2`` sorted descending,
    for each ``k`` take the mean ``mu_k`` and the (biased) variance ``s_k`` of the
    top-k values, ``tau_k = mu_k - sqrt((1 - k s_k) / k)``; the support size is
    the number of ``k`` with ``tau_k <= z_(k)``.

    Arguments, infinite scores and errors as :func:`sparsemax`.
    """
    z, valid, plus = _prepare(e, mask, dim, halve=True)
    zs, vs = _sorted_valid(z, valid)
    rho = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    mean = zs.cumsum(-1) / rho
    mean_sq = (zs**2).cumsum(-1) / rho
    delta = (1 - rho * (mean_sq - mean**2)) / rho
    with torch.no_grad():
        tau_all = mean - torch.sqrt(delta.clamp_min(0))
        k_star = (vs & (tau_all <= zs)).sum(-1, keepdim=True).clamp_min(1)
    # gather before the square root, so no gradient flows through sqrt(0) elsewhere
    tau = mean.gather(-1, k_star - 1) - torch.sqrt(delta.gather(-1, k_star - 1).clamp_min(0))
    out = torch.where(valid, torch.clamp(z - tau, min=0) ** 2, torch.zeros_like(z))
    return _finish(out, plus, e, dim)
