"""Sparse alignment maps: sparsemax (NLP review eq. 6), 1.5-entmax and alpha-entmax, and their losses.

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

Options as in the ``entmax`` package (tested against it): ``k`` (sparsemax,
1.5-entmax) sorts only the ``k`` largest scores (a partial sort) and falls
back to the full sort when the support may be larger, so the result never
depends on ``k``; :func:`entmax_bisect` computes alpha-entmax for any
``alpha > 0`` by bisection on the threshold; :func:`sparsemax_loss`,
:func:`entmax15_loss` and :func:`entmax_bisect_loss` are the Fenchel-Young
losses whose gradient is ``a - onehot(y)``.

Shapes: scores ``e`` ``(..., n_f)``, normalised over ``dim`` (the last by default);
``...`` any batch dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._checks import InputTypeError, as_tensor, check_integers, check_min_rank, check_nonempty
from ..masking import check_attn_mask, masked_softmax
from ..numeric_env import portable_sqrt


def _valid(e: Tensor, mask: Tensor | None) -> Tensor:
    """The mask broadcast to ``e``'s shape (all True when ``mask`` is None)."""
    if mask is None:
        return torch.ones_like(e, dtype=torch.bool)
    check_attn_mask(mask, e.shape)
    return mask.expand(e.shape)


def _compute_dtype(e: Tensor) -> torch.dtype:
    # cumulative sums in float16/bfloat16 lose too much precision; work in float32
    return torch.float32 if e.dtype in (torch.float16, torch.bfloat16) else e.dtype


def _sorted_valid(z: Tensor, valid: Tensor, k: int | None = None) -> tuple[Tensor, Tensor]:
    """Sort each row descending with masked entries last; return values (0 where masked) and validity.

    With ``k`` only the ``k`` largest entries are returned (a partial sort, ``torch.topk``).
    """
    keyed = z.masked_fill(~valid, float("-inf"))
    if k is None or k >= z.shape[-1]:
        zs, idx = torch.sort(keyed, dim=-1, descending=True)
    else:
        zs, idx = torch.topk(keyed, k, dim=-1)
    vs = valid.gather(-1, idx)
    return torch.where(vs, zs, torch.zeros_like(zs)), vs


def _check_k(k: int | None, n: int) -> int | None:
    if k is None:
        return None
    check_integers("the top-k sort", minimum=1, k=k)  # k: the number of largest scores to sort
    return k if k < n else None


def _partial(
    threshold: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], z: Tensor, valid: Tensor, k: int | None
) -> Tensor:
    """``tau`` from the ``k`` largest scores; rows whose support may exceed ``k`` redo the full sort."""
    if k is None:
        return threshold(*_sorted_valid(z, valid))[0]
    tau, k_star = threshold(*_sorted_valid(z, valid, k))
    full = (k_star >= k) & (valid.sum(-1, keepdim=True) > k)  # the support may be larger than k
    if bool(full.any()):
        tau = torch.where(full, threshold(*_sorted_valid(z, valid))[0], tau)
    return tau


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


def _sparsemax_threshold(zs: Tensor, vs: Tensor) -> tuple[Tensor, Tensor]:
    """``(tau, support size)`` of sparsemax from descending scores ``zs`` (validity ``vs``)."""
    k = torch.arange(1, zs.shape[-1] + 1, dtype=zs.dtype, device=zs.device)
    cums = zs.cumsum(-1)
    support = vs & (1 + k * zs > cums)
    k_star = support.sum(-1, keepdim=True).clamp_min(1)
    return (cums.gather(-1, k_star - 1) - 1) / k_star.to(zs.dtype), k_star


def _entmax15_threshold(zs: Tensor, vs: Tensor) -> tuple[Tensor, Tensor]:
    """``(tau, support size)`` of 1.5-entmax from descending halved scores ``zs`` (validity ``vs``)."""
    rho = torch.arange(1, zs.shape[-1] + 1, dtype=zs.dtype, device=zs.device)
    mean = zs.cumsum(-1) / rho
    mean_sq = (zs**2).cumsum(-1) / rho
    delta = (1 - rho * (mean_sq - mean**2)) / rho
    with torch.no_grad():
        tau_all = mean - portable_sqrt(delta.clamp_min(0))
        k_star = (vs & (tau_all <= zs)).sum(-1, keepdim=True).clamp_min(1)
    # gather before the square root, so no gradient flows through sqrt(0) elsewhere
    return mean.gather(-1, k_star - 1) - portable_sqrt(delta.gather(-1, k_star - 1).clamp_min(0)), k_star


def sparsemax(e: Tensor, mask: Tensor | None = None, dim: int = -1, k: int | None = None) -> Tensor:
    """Sparsemax (NLP review eq. 6): the Euclidean projection of e onto the simplex.

    ``sparsemax(e) = argmin_{a in simplex} ||a - e||^2 = max(e - tau, 0)``, with
    the threshold ``tau`` found by sorting (Martins & Astudillo, 2016): with
    ``z_(1) >= z_(2) >= ...`` the sorted scores, the support size is the largest
    ``k`` with ``1 + k z_(k) > sum_{j<=k} z_(j)``, and
    ``tau = (sum_{j<=k} z_(j) - 1) / k``. Unlike softmax it returns exact zeros.
    Infinite scores: see the module notes (``-inf`` = masked, ``+inf`` = one-hot).
    float16/bfloat16 inputs are computed in float32 and cast back.

    Args:
        e: scores, normalised over ``dim``.
        mask: boolean broadcastable to e, ``True`` = may attend (masked entries
            get 0; a fully-masked row is all 0).
        dim: the axis to normalise over.
        k: sort only the ``k`` largest scores (as the ``entmax`` package's ``k``);
            the result is the same for every ``k``.

    Shape:
        e: any shape, ``(..., n_f)`` along ``dim``. Returns the shape of e.

    Returns:
        The weights, summing to 1 over ``dim`` (0 for a fully-masked row).

    Raises:
        TypeError: for non-float scores.
        ValueError: for empty scores, a bad mask or ``k < 1``.
    """
    z, valid, plus = _prepare(e, mask, dim, halve=False)
    tau = _partial(_sparsemax_threshold, z, valid, _check_k(k, z.shape[-1]))
    out = torch.where(valid, torch.clamp(z - tau, min=0), torch.zeros_like(z))
    return _finish(out, plus, e, dim)


def entmax15(e: Tensor, mask: Tensor | None = None, dim: int = -1, k: int | None = None) -> Tensor:
    """1.5-entmax: ``a = [e/2 - tau]_+^2`` with tau such that the weights sum to 1.

    The alpha = 1.5 member of the entmax family (Peters et al., 2019), which
    sits between softmax (alpha = 1) and sparsemax (alpha = 2): sparse, but
    smoother. Exact sort-based threshold: with ``z = e/2`` sorted descending,
    for each ``k`` take the mean ``mu_k`` and the (biased) variance ``s_k`` of the
    top-k values, ``tau_k = mu_k - sqrt((1 - k s_k) / k)``; the support size is
    the number of ``k`` with ``tau_k <= z_(k)``. Infinite scores and dtypes as
    :func:`sparsemax`.

    Args:
        e: scores, normalised over ``dim``.
        mask: boolean broadcastable to e, ``True`` = may attend; a fully-masked
            row is all 0.
        dim: the axis to normalise over.
        k: sort only the ``k`` largest scores; the result is the same for every ``k``.

    Shape:
        e: any shape, ``(..., n_f)`` along ``dim``. Returns the shape of e.

    Returns:
        The weights, summing to 1 over ``dim`` (0 for a fully-masked row).

    Raises:
        TypeError: for non-float scores.
        ValueError: for empty scores, a bad mask or ``k < 1``.
    """
    z, valid, plus = _prepare(e, mask, dim, halve=True)
    tau = _partial(_entmax15_threshold, z, valid, _check_k(k, z.shape[-1]))
    out = torch.where(valid, torch.clamp(z - tau, min=0) ** 2, torch.zeros_like(z))
    return _finish(out, plus, e, dim)


def _bisect(
    X: Tensor, valid: Tensor, above_one: Tensor | bool, power: Tensor | float, alpha: Tensor | float, n_iter: int
) -> Tensor:
    """The weights ``[X - tau]_+^power`` (``X = (alpha - 1) z``) with ``tau`` found by ``n_iter`` halvings."""
    n = valid.sum(-1, keepdim=True).clamp_min(1).to(X.dtype)
    # the weight grows with X for alpha > 1 and shrinks with it for alpha < 1 (X = (alpha - 1) z):
    # either way the bracket starts at the X of the largest score z
    top_max = X.masked_fill(~valid, float("-inf")).amax(-1, keepdim=True)
    if isinstance(above_one, bool):
        top = top_max if above_one else X.masked_fill(~valid, float("inf")).amin(-1, keepdim=True)
    else:
        top = torch.where(above_one, top_max, X.masked_fill(~valid, float("inf")).amin(-1, keepdim=True))
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    lo, hi = top - 1.0, top - n.pow(1.0 - alpha)  # sum(p) >= 1 at lo, <= 1 at hi (hi < lo when alpha < 1)

    def weights(tau: Tensor) -> Tensor:
        return torch.where(valid, torch.clamp(X - tau, min=0) ** power, torch.zeros((), dtype=X.dtype))

    for _ in range(n_iter):
        mid = (lo + hi) / 2
        over = weights(mid).sum(-1, keepdim=True) >= 1
        lo, hi = torch.where(over, mid, lo), torch.where(over, hi, mid)
    p = weights((lo + hi) / 2)
    return p / p.sum(-1, keepdim=True).clamp_min(torch.finfo(X.dtype).tiny)  # the sum is 1 up to bisection error


def _entmax_grad(p: Tensor, alpha: Tensor | float, grad: Tensor) -> tuple[Tensor, Tensor]:
    """``(dz, g)``: the closed-form gradient in the scores ``g o dY - g (g . dY) / sum g``, ``g = a^(2 - alpha)``."""
    g = torch.where(p > 0, p ** (2.0 - alpha), torch.zeros((), dtype=p.dtype))
    gY = g * grad
    return gY - g * gY.sum(-1, keepdim=True) / g.sum(-1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny), g


class _EntmaxBisect(torch.autograd.Function):
    """alpha-entmax of ``X = (alpha - 1) z`` by bisection (a number alpha), with its closed-form backward."""

    @staticmethod
    def forward(ctx: Any, X: Tensor, valid: Tensor, alpha: float, n_iter: int) -> Tensor:
        p = _bisect(X, valid, alpha > 1, 1.0 / (alpha - 1.0), alpha, n_iter)
        ctx.save_for_backward(p)
        ctx.alpha, ctx.alpha_minus_1 = alpha, alpha - 1.0
        return p

    @staticmethod
    # ignore: torch declares backward(ctx, *grad_outputs); this Function has one output, hence one grad
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        (p,) = ctx.saved_tensors
        dz, _ = _entmax_grad(p, ctx.alpha, grad)
        return dz / ctx.alpha_minus_1, None, None, None  # dz is the gradient in z = X / (alpha - 1)


class _EntmaxBisectRows(torch.autograd.Function):
    """alpha-entmax of scores ``z`` with a tensor alpha ``(..., 1)`` (one per row), differentiable in z and alpha.

    Rows with ``alpha = 1`` are softmax rows.
    """

    @staticmethod
    def forward(ctx: Any, z: Tensor, valid: Tensor, alpha: Tensor, n_iter: int) -> Tensor:
        softmax_rows = alpha == 1
        a = torch.where(softmax_rows, torch.full_like(alpha, 2.0), alpha)  # a stand-in where the exponent is 1 / 0
        p = _bisect(z * (a - 1.0), valid, a > 1, 1.0 / (a - 1.0), a, n_iter)
        if bool(softmax_rows.any()):
            p = torch.where(softmax_rows, masked_softmax(z, valid, dim=-1), p)
        ctx.save_for_backward(p, alpha)
        return p

    @staticmethod
    # ignore: torch declares backward(ctx, *grad_outputs); this Function has one output, hence one grad
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, Tensor | None, None]:  # type: ignore[override]
        p, alpha = ctx.saved_tensors
        dz, g = _entmax_grad(p, alpha, grad)
        if not ctx.needs_input_grad[2]:
            return dz, None, None, None
        # d a / d alpha by implicit differentiation (Correia et al., 2019):
        # (a - g~) / (alpha - 1)^2 - (S - g~ sum S) / (alpha - 1), with g~ = g / sum g and S = a log a.
        # Both terms diverge at alpha = 1; their sum tends to -a (log^2 a - sum a log^2 a) / 2 (a second-order
        # expansion of g~ in alpha - 1), used where |alpha - 1| < eps^(1/3) (there the first form loses more digits
        # to cancellation, ~eps / (alpha - 1)^2, than the limit's error, ~|alpha - 1|).
        zero = torch.zeros((), dtype=p.dtype)
        log_p = torch.where(p > 0, torch.log(torch.where(p > 0, p, torch.ones((), dtype=p.dtype))), zero)
        S = p * log_p
        u = alpha - 1.0
        near = u.abs() < torch.finfo(p.dtype).eps ** (1 / 3)
        u_safe = torch.where(near, torch.ones_like(u), u)
        skew = g / g.sum(-1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny)
        general = (p - skew) / u_safe**2 - (S - skew * S.sum(-1, keepdim=True)) / u_safe
        limit = -p * (log_p**2 - (p * log_p**2).sum(-1, keepdim=True)) / 2
        d_alpha = (grad * torch.where(near, limit, general)).sum(-1, keepdim=True)
        return dz, None, d_alpha.sum_to_size(alpha.shape), None


def _check_alpha(alpha: float | Tensor) -> float | Tensor:
    """A finite ``alpha > 0``: a Python number, or a floating-point tensor (learned alpha, one per row)."""
    if isinstance(alpha, Tensor):
        if not alpha.is_floating_point():
            raise InputTypeError(
                f"alpha must be a Python number or a floating-point tensor, got a tensor of dtype={alpha.dtype}; "
                "convert it with alpha.float()"
            )
        if alpha.numel() and not bool((torch.isfinite(alpha) & (alpha > 0)).all()):
            bad = alpha.detach()[~(torch.isfinite(alpha) & (alpha > 0))]
            raise ValueError(
                f"entmax needs every alpha finite and > 0 (1 = softmax, 2 = sparsemax), got alpha of shape "
                f"{tuple(alpha.shape)} holding {bad.flatten()[0].item()!r}"
            )
        return alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise InputTypeError(
            f"alpha must be a Python number or a floating-point torch.Tensor, got {type(alpha).__module__}."
            f"{type(alpha).__name__}"
        )
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(
            f"entmax needs a finite alpha > 0 (1 = softmax, 2 = sparsemax, below 1 denser than softmax), got alpha={alpha!r}"
        )
    return float(alpha)


def _alpha_rows(alpha: Tensor, e: Tensor, dim: int, z: Tensor) -> Tensor:
    """A tensor alpha laid out as ``(..., 1)`` against the scores ``z`` (``e`` with ``dim`` moved last)."""
    rows = tuple(z.shape[:-1])
    if alpha.dim() == e.dim() and e.dim() > 0:  # the entmax package's layout: e's shape with size 1 along dim
        if alpha.shape[dim] != 1:
            raise ValueError(
                f"alpha with e's rank must have size 1 along dim={dim}, got alpha {tuple(alpha.shape)} for e "
                f"{tuple(e.shape)}"
            )
        lay = alpha.movedim(dim, -1)
    elif alpha.dim() < e.dim():
        lay = alpha.unsqueeze(-1)  # one alpha per row: broadcastable to e's shape without dim
    else:
        lay = alpha
    try:
        fits = torch.broadcast_shapes(lay.shape, rows + (1,)) == rows + (1,)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"alpha must be a scalar, one alpha per row (broadcastable to e's shape without dim, {rows}) or e's "
            f"shape with size 1 along dim; got alpha {tuple(alpha.shape)} for e {tuple(e.shape)}"
        )
    return lay.to(dtype=z.dtype, device=z.device)


def entmax_bisect(
    e: Tensor, alpha: float | Tensor = 1.5, mask: Tensor | None = None, dim: int = -1, n_iter: int = 50
) -> Tensor:
    """alpha-entmax (Peters et al., 2019) for any ``alpha > 0``, by bisection on the threshold.

    ``a_l = [(alpha - 1) e_l - tau]_+^{1 / (alpha - 1)}`` with ``tau`` such that the
    weights sum to 1; ``alpha = 1`` is the softmax, ``alpha = 2`` sparsemax and
    ``alpha = 1.5`` :func:`entmax15`. For ``0 < alpha < 1`` the map is defined too and
    denser than the softmax (every allowed position keeps a positive weight; the
    exponent ``1 / (alpha - 1)`` is negative). ``n_iter`` halvings of the bracket
    ``[max - 1, max - n^(1 - alpha)]`` locate tau (50 reach float64 precision);
    the weights are then renormalised. The gradient is the closed form
    ``g o dY - g (g . dY) / sum g`` with ``g = a^(2 - alpha)`` on the support.
    Infinite scores and dtypes as :func:`sparsemax`.

    ``alpha`` may be a tensor, as in the ``entmax`` package: a scalar tensor (a learned
    alpha, ``requires_grad=True``), one alpha per row (a shape broadcastable to ``e``'s
    shape without ``dim``, e.g. one per head as in adaptively sparse attention) or
    ``e``'s shape with size 1 along ``dim`` (the ``entmax`` package's layout). The
    gradient in alpha is the implicit-function one of Correia et al. (2019), with its
    limit at ``alpha = 1`` (where the softmax is used).

    Args:
        e: scores, normalised over ``dim``.
        alpha: the entmax parameter, ``> 0``: a number or a floating-point tensor.
        mask: boolean broadcastable to e, ``True`` = may attend; a fully-masked
            row is all 0.
        dim: the axis to normalise over.
        n_iter: the number of bisection steps.

    Shape:
        e: any shape, ``(..., n_f)`` along ``dim``. Returns the shape of e.

    Returns:
        The weights, summing to 1 over ``dim`` (0 for a fully-masked row).

    Raises:
        TypeError: for non-float scores, or an alpha that is neither a number nor a floating-point tensor.
        ValueError: unless every alpha is finite and > 0, a tensor alpha has one of the shapes above and
            ``n_iter >= 1``; for empty scores or a bad mask.
    """
    alpha = _check_alpha(alpha)
    check_integers("entmax_bisect", minimum=1, n_iter=n_iter)  # n_iter: bisection steps
    z, valid, plus = _prepare(e, mask, dim, halve=False)
    if isinstance(alpha, Tensor):
        out = _EntmaxBisectRows.apply(z, valid, _alpha_rows(alpha, e, dim, z), n_iter)
    elif alpha == 1.0:
        out = masked_softmax(z, valid, dim=-1)
    else:
        out = _EntmaxBisect.apply(z * (alpha - 1.0), valid, alpha, n_iter)
    return _finish(out, plus, e, dim)


def _fenchel_young(e: Tensor, target: Tensor, a: Tensor, omega: Tensor) -> Tensor:
    """``(a - onehot(y)) . e + Omega(a)`` per row, with ``a`` detached so the gradient is ``a - onehot(y)``."""
    if target.dtype not in (torch.int64, torch.int32) or target.shape != e.shape[:-1]:
        raise ValueError(
            f"target must be integer class indices of shape {tuple(e.shape[:-1])}, got {target.dtype} {tuple(target.shape)}"
        )
    if bool(((target < 0) | (target >= e.shape[-1])).any()):
        raise ValueError(
            f"target must lie in [0, n_f={e.shape[-1]}), got values in [{int(target.min())}, {int(target.max())}]"
        )
    z = e.to(a.dtype)
    y = torch.nn.functional.one_hot(target.long(), e.shape[-1]).to(a.dtype)
    finite = torch.where(torch.isfinite(z), z, torch.zeros((), dtype=z.dtype))
    return ((a.detach() - y) * finite).sum(-1) + omega


def _tsallis(a: Tensor, alpha: float) -> Tensor:
    """Tsallis alpha-entropy ``(1 - sum a^alpha) / (alpha (alpha - 1))`` (Shannon entropy at alpha = 1)."""
    a = a.detach()
    if alpha == 1.0:
        return -torch.where(a > 0, a * torch.log(a), torch.zeros((), dtype=a.dtype)).sum(-1)
    return (1 - (a**alpha).sum(-1)) / (alpha * (alpha - 1))


def sparsemax_loss(e: Tensor, target: Tensor, k: int | None = None) -> Tensor:
    """The sparsemax loss (Martins & Astudillo, 2016): the Fenchel-Young loss of sparsemax.

    ``L(e; y) = (a - onehot(y)) . e + (1 - ||a||^2) / 2`` with ``a = sparsemax(e)``;
    ``L >= 0``, 0 exactly when ``a`` is one-hot on ``y``; its gradient in ``e`` is
    ``a - onehot(y)``.

    Args:
        e: scores.
        target: integer class of every row.
        k: as in :func:`sparsemax`.

    Shape:
        e: ``(..., n_f)``; target: ``(...)``. Returns ``(...)``.

    Returns:
        The per-row losses (as the ``entmax`` package).

    Raises:
        TypeError: for non-float scores.
        ValueError: for bad scores or targets out of range.
    """
    a = sparsemax(e, k=k)
    return _fenchel_young(e, target, a, _tsallis(a, 2.0))


def entmax15_loss(e: Tensor, target: Tensor, k: int | None = None) -> Tensor:
    """The 1.5-entmax loss: the Fenchel-Young loss of :func:`entmax15`.

    Args:
        e: scores.
        target: integer class of every row.
        k: as in :func:`entmax15`.

    Shape:
        e: ``(..., n_f)``; target: ``(...)``. Returns ``(...)``.

    Returns:
        The per-row losses.

    Raises:
        TypeError: for non-float scores.
        ValueError: for bad scores or targets out of range.
    """
    a = entmax15(e, k=k)
    return _fenchel_young(e, target, a, _tsallis(a, 1.5))


def entmax_bisect_loss(e: Tensor, target: Tensor, alpha: float = 1.5, n_iter: int = 50) -> Tensor:
    """The alpha-entmax loss: the Fenchel-Young loss of :func:`entmax_bisect`.

    ``alpha = 1`` gives the cross-entropy of the softmax.

    Args:
        e: scores.
        target: integer class of every row.
        alpha: as in :func:`entmax_bisect`.
        n_iter: as in :func:`entmax_bisect`.

    Shape:
        e: ``(..., n_f)``; target: ``(...)``. Returns ``(...)``.

    Returns:
        The per-row losses.

    Raises:
        TypeError: for non-float scores.
        TypeError: for a tensor alpha (the loss takes a number).
        ValueError: for a bad ``alpha`` or ``n_iter``, bad scores or targets out of range.
    """
    if isinstance(alpha, Tensor):
        raise InputTypeError(
            "entmax_bisect_loss takes alpha as a Python number (the loss of a learned alpha is not defined here), "
            f"got a tensor of shape {tuple(alpha.shape)}; pass float(alpha)"
        )
    number = float(_check_alpha(alpha))
    a = entmax_bisect(e, number, n_iter=n_iter)
    return _fenchel_young(e, target, a, _tsallis(a, number))
