"""§3.1.3 Feature representations: multi-representational attention, Eq. (21)-(22).

A word (or any input) may have ``E`` representations ``x^(e_1), ..., x^(e_E)``
from different embedding models, of different sizes ``d_{e_i}``. Attention
builds a *meta-embedding* from them (Kiela et al., 2018):

* Eq. (21): each representation is mapped to a common size ``d_t`` with its
  own weights, ``x^(t_i) = W_{e_i} x^(e_i) + b_{e_i}``;
* Eq. (22): the meta-embedding is their attention-weighted sum,
  ``x^(e) = sum_i a_i x^(t_i)``.

The weights ``a_i`` come from the general attention model with the
transformed representations as feature vectors and no query (the query is
the same for every input, so it is absorbed into a learned score vector):
``e_i = w^T x^(t_i)``, ``a = softmax(e)``. A bias shared by all ``i`` would
cancel in the softmax, so there is none.

Shapes are batch-first: each ``x^(e_i)`` is ``(..., d_{e_i})``; the stacked
transformed representations ``X_t`` are ``(..., E, d_t)``; weights ``(..., E)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_min_rank, check_rank, check_weight
from ..attention import align_scores
from ..catalog import catalogued
from ..masking import nonfinite_rows, zero_masked

CHAPTER = "chapters/ch03_1_3_feature_representations.ipynb"


def _check_lists(xs: Sequence[Tensor], Ws: Sequence[Tensor], bs: Sequence[Tensor] | None) -> None:
    if len(xs) == 0:
        raise ValueError("need at least one representation x^(e_i), got E=0")
    if len(Ws) != len(xs) or (bs is not None and len(bs) != len(xs)):
        nb = "None" if bs is None else len(bs)
        raise ValueError(f"need one W_e_i and b_e_i per representation: E={len(xs)}, got {len(Ws)} W and {nb} b")


@catalogued("eq21", title="Size-normalised representations x^(t_i) = W_{e_i} x^(e_i) + b_{e_i}")
def transform_representations(xs: Sequence[Tensor], Ws: Sequence[Tensor], bs: Sequence[Tensor] | None = None) -> Tensor:
    """Size-normalised representations, Eq. (21): ``x^(t_i) = W_{e_i} x^(e_i) + b_{e_i}``.

    Args:
        xs: the ``E`` representations, with the same leading shape.
        Ws: one map ``W_{e_i}`` per representation.
        bs: one bias ``b_{e_i}`` per representation, or None for no bias.

    Shape:
        each x: ``(..., d_{e_i})``; each W: ``(d_t, d_{e_i})``; each b: ``(d_t,)``.
        Returns X_t: ``(..., E, d_t)``.

    Returns:
        The stacked transformed representations ``X_t``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if there is no representation, the lists differ in length, a
            representation does not have the width its weight expects, the
            ``d_t`` differ, or the leading shapes differ.
    """
    _check_lists(xs, Ws, bs)
    d_t = None
    out = []
    for i, (x, W) in enumerate(zip(xs, Ws), start=1):
        as_tensor(x, f"x^(e_{i})")
        check_min_rank(x, 1, f"x^(e_{i})", f"(..., d_e{i})")
        check_rank(W, 2, f"W_e{i}", f"(d_t, d_e{i})")
        d_t = W.shape[0] if d_t is None else d_t
        if W.shape[0] != d_t:
            raise ValueError(f"every W_e_i must map to the same d_t: W_e1 gives d_t={d_t}, W_e{i} gives {W.shape[0]}")
        if x.shape[-1] != W.shape[1]:
            raise ValueError(
                f"representation x^(e_{i}) of shape {tuple(x.shape)} has width d_e{i}={x.shape[-1]}, "
                f"but W_e{i} of shape (d_t, d_e{i}) = {tuple(W.shape)} expects d_e{i}={W.shape[1]}"
            )
        if x.shape[:-1] != xs[0].shape[:-1]:
            raise ValueError(
                f"all representations must describe the same inputs: x^(e_1) is {tuple(xs[0].shape)}, "
                f"x^(e_{i}) is {tuple(x.shape)} (leading dimensions differ)"
            )
        t = x @ W.T
        if bs is not None:
            check_weight(bs[i - 1], (d_t,), f"b_e{i}", "(d_t,)")
            t = t + bs[i - 1]
        out.append(t)
    return torch.stack(out, dim=-2)


@catalogued("eq22")
def representation_scores(X_t: Tensor, w: Tensor) -> Tensor:
    """Query-less (self-attention) scores of the representations: ``e_i = w^T x^(t_i)``.

    Args:
        X_t: the transformed representations.
        w: the score vector.

    Shape:
        X_t: ``(..., E, d_t)``; w: ``(d_t,)``. Returns ``(..., E)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``w`` is not ``(d_t,)`` or X_t has fewer than 2 dims.
    """
    as_tensor(X_t, "X_t")
    check_min_rank(X_t, 2, "X_t", "(..., E, d_t)")
    check_weight(w, (X_t.shape[-1],), "w", "(d_t,)")
    return X_t @ w


@catalogued("eq22", title="Meta-embedding as attention-weighted sum x^(e) = sum_i a_i x^(t_i) (self-attention scores)")
def meta_embedding(X_t: Tensor, a: Tensor) -> Tensor:
    """The meta-embedding, Eq. (22): ``x^(e) = sum_i a_i x^(t_i)``.

    A weight of 0 (a missing representation) is inert, as in
    :func:`~attnsurvey.attention.context`: NaN/Inf in its ``x^(t_i)`` reaches
    neither ``x^(e)`` nor a gradient.

    Args:
        X_t: the transformed representations.
        a: one weight per representation.

    Shape:
        X_t: ``(..., E, d_t)``; a: ``(..., E)``. Returns ``(..., d_t)``.

    Returns:
        The meta-embedding ``x^(e)``.

    Raises:
        TypeError: if X_t or a is not a floating-point tensor.
        ValueError: if the two ``E`` differ or X_t has fewer than 2 dims.
    """
    as_tensor(X_t, "X_t")
    as_tensor(a, "a")
    check_min_rank(X_t, 2, "X_t", "(..., E, d_t)")
    if a.shape[-1] != X_t.shape[-2]:
        raise ValueError(
            f"Eq. (22) needs one weight per representation: a has E={a.shape[-1]}, X_t has E={X_t.shape[-2]}"
        )
    bad = nonfinite_rows(X_t)
    if bad is not None:  # selected, not multiplied: 0 * NaN would be NaN
        X_t = torch.where((bad & (a == 0))[..., None], torch.zeros((), dtype=X_t.dtype, device=X_t.device), X_t)
    return (a.unsqueeze(-1) * X_t).sum(-2)


def _zero_missing(xs: Sequence[Tensor], mask: Tensor | None) -> list[Tensor]:
    """The representations with NaN/Inf zeroed where ``mask`` ``(..., E)`` says they are missing.

    Done before Eq. (21), so a missing representation reaches no gradient of
    ``W_{e_i}``; finite inputs are returned unchanged (:func:`~attnsurvey.masking.zero_masked`).
    """
    if not isinstance(mask, Tensor) or mask.dim() < 1 or mask.shape[-1] != len(xs):
        return list(xs)  # no mask, or one that align_scores will report
    return [zero_masked(x.unsqueeze(-2), mask[..., i, None]).squeeze(-2) for i, x in enumerate(xs)]


class MultiRepresentationResult(NamedTuple):
    """``x_e`` the meta-embedding ``(..., d_t)``, ``a`` the weights ``(..., E)``,
    ``X_t`` the transformed representations ``(..., E, d_t)``."""

    x_e: Tensor
    a: Tensor
    X_t: Tensor


@catalogued("eq22")
def multi_representational_attention(
    xs: Sequence[Tensor],
    Ws: Sequence[Tensor],
    bs: Sequence[Tensor] | None,
    w: Tensor,
    mask: Tensor | None = None,
) -> MultiRepresentationResult:
    """Multi-representational attention: Eq. (21), self-attention scores, softmax, Eq. (22).

    Weights sum to 1 over the available representations (all zero, and
    ``x^(e) = 0``, if none is available). A missing representation is inert:
    NaN/Inf stored there reaches no output and no gradient.

    Args:
        xs: the ``E`` representations, as in :func:`transform_representations`.
        Ws: one map ``W_{e_i}`` per representation.
        bs: one bias per representation, or None.
        w: the score vector.
        mask: optional boolean ``(..., E)``, ``True`` = may attend (this
            representation is available; e.g. a word missing from one embedding
            table is ``False`` there).

    Shape:
        each x: ``(..., d_{e_i})``; w: ``(d_t,)``. Returns x_e: ``(..., d_t)``,
        a: ``(..., E)``, X_t: ``(..., E, d_t)``.

    Returns:
        :class:`MultiRepresentationResult`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches or a bad mask.
    """
    X_t = transform_representations(_zero_missing(xs, mask), Ws, bs)
    e = representation_scores(X_t, w)
    a = align_scores(e, mask)  # Eq. (3) over the E representations
    return MultiRepresentationResult(meta_embedding(X_t, a), a, X_t)


@catalogued("eq21", "eq22")
class MetaEmbedding(nn.Module):
    """Module form of :func:`multi_representational_attention` (dynamic meta-embeddings).

    ``forward(xs, mask=None)`` returns a :class:`MultiRepresentationResult`; mask:
    boolean ``(..., E)``, ``True`` = may attend (the representation is available).

    Args:
        dims: the widths ``d_{e_1}, ..., d_{e_E}``.
        d_t: the common width.
        combine: ``"attention"`` (Eq. 22 with learned weights) or ``"average"``
            (the unweighted baseline ``a_i = 1/E``).

    Shape:
        each x: ``(..., d_{e_i})``. Returns x_e: ``(..., d_t)``, a: ``(..., E)``.

    Raises:
        ValueError: for an unknown ``combine``; in ``forward``, for a number of
            representations other than ``len(dims)`` or a shape mismatch.
    """

    def __init__(self, dims: Sequence[int], d_t: int, combine: str = "attention") -> None:
        super().__init__()
        if combine not in ("attention", "average"):
            raise ValueError(f"combine must be 'attention' or 'average', got {combine!r}")
        self.dims, self.d_t, self.combine = list(dims), d_t, combine
        self.proj = nn.ModuleList(nn.Linear(d, d_t) for d in dims)
        self.w = nn.Parameter(torch.zeros(d_t)) if combine == "attention" else None

    def forward(self, xs: Sequence[Tensor], mask: Tensor | None = None) -> MultiRepresentationResult:
        if len(xs) != len(self.proj):
            raise ValueError(f"MetaEmbedding was built for E={len(self.proj)} representations, got {len(xs)}")
        proj = cast(list[nn.Linear], list(self.proj))  # ModuleList is not generic: these are the Linears of __init__
        Ws = [p.weight for p in proj]
        bs = [p.bias for p in proj]
        if self.w is not None:  # combine == "attention"
            return multi_representational_attention(xs, Ws, bs, self.w, mask)
        X_t = transform_representations(_zero_missing(xs, mask), Ws, bs)
        a = align_scores(torch.zeros(X_t.shape[:-1], dtype=X_t.dtype, device=X_t.device), mask, "uniform")
        return MultiRepresentationResult(meta_embedding(X_t, a), a, X_t)
