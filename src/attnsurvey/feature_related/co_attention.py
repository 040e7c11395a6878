"""§3.1.1 Multiplicity of features, part 1: co-attention, Eq. (6)-(16).

Co-attention attends to two feature sets at once, each guided by the other.
The survey splits it into two groups:

* **coarse-grained**: a compact summary (one vector) of one set is the query
  for the other set;
  - *alternating* co-attention (Fig. 4): a query-less attention over set 1
    (Eq. 7, a variant of the additive score Eq. 6) gives ``c^(0)``, which
    queries set 2 (Eq. 8) to give ``c^(2)``, which queries set 1 again (Eq. 9)
    to give ``c^(1)``; the steps are sequential;
  - *interactive* co-attention (Fig. 5): the unweighted mean key of each set
    (Eq. 10) queries the other set (Eq. 11); both directions run in parallel;
* **fine-grained**: every vector of one set acts as a query, through an
  *affinity matrix* ``A`` of shape ``(n_f^(1), n_f^(2))``, either bilinear
  (Eq. 12) or a weighted concatenation (Eq. 13);
  - *parallel* co-attention (Fig. 6): aggregated additive scores (Eq. 14-15);
  - *max-pooled affinity* scores (Eq. 16): the best match of each row/column;
* **multi-grained**: coarse and fine together, four context vectors.

The NLP review's *bi-directional attention* (K2Q and Q2K; coarse or fine;
parallel or alternating) is the same family under another name;
:func:`bidirectional_attention` implements it and the tests show where it
coincides with the survey's forms.

Shapes are batch-first rows: a feature set ``F^(i)`` is ``(..., n_f^(i), d_f^(i))``,
its keys ``K^(i)`` ``(..., n_f^(i), d_k^(i))`` and values ``V^(i)``
``(..., n_f^(i), d_v^(i))``. A coarse-grained module returns one context vector
per example and set: ``c^(i)`` ``(..., d_v^(i))`` with weights ``a^(i)``
``(..., n_f^(i))``. The affinity matrix is ``(..., n_f^(1), n_f^(2))``, exactly
the survey's ``A`` (its rows index set 1). Weights keep the survey's shapes.

Masks are per set: boolean ``(..., n_f^(i))``, ``True`` = this feature vector is
real (may be attended), ``False`` = padding. A set that is fully masked gets
all-zero weights and a zero context vector; its mean key (Eq. 10) is zero.
Every co-attention function and module takes the two masks as the keywords
``mask1`` and ``mask2`` (:class:`CoMasks`) and hands them on unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Final, NamedTuple, TypedDict, Unpack

import torch
from torch import Tensor, nn

from .._checks import (
    Default,
    as_tensor,
    check_batch_broadcast,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_nonempty,
    check_rank,
    check_weight,
    option_defaults,
    with_defaults,
)
from ..attention import attend_scores
from ..catalog import catalogued
from ..general_mechanisms.scoring import AdditiveScore, additive_score
from ..general_model import attend, keys_values
from ..masking import check_boolean, check_one_query_mask, masked_mean, require_boolean_mask, zero_masked
from ..query_related.types import queryless_score

ScoreFn = Callable[[Tensor, Tensor], Tensor]
QuerylessScoreFn = Callable[[Tensor], Tensor]
Activation = Callable[[Tensor], Tensor]

CHAPTER = "chapters/ch03_1_1_feature_multiplicity.ipynb"


class CoAttention(NamedTuple):
    """Result of a co-attention module: a context vector and weights per feature set.

    ``c1`` ``(..., d_v^(1))``, ``c2`` ``(..., d_v^(2))``, ``a1`` ``(..., n_f^(1))``,
    ``a2`` ``(..., n_f^(2))``.
    """

    c1: Tensor
    c2: Tensor
    a1: Tensor
    a2: Tensor


class AlternatingCoAttentionOutput(NamedTuple):
    """Result of alternating co-attention (Fig. 4).

    ``c1, c2, a1, a2`` as :class:`CoAttention`; ``c0`` ``(..., d_v^(1))`` and
    ``a0`` ``(..., n_f^(1))`` are the query-less first step (Eq. 7).
    """

    c1: Tensor
    c2: Tensor
    a1: Tensor
    a2: Tensor
    c0: Tensor
    a0: Tensor


class MultiGrainedOutput(NamedTuple):
    """Result of multi-grained co-attention.

    ``c`` ``(..., 2 d_v^(1) + 2 d_v^(2))`` is ``concat(c1_coarse, c2_coarse,
    c1_fine, c2_fine)``; ``coarse`` and ``fine`` are the two :class:`CoAttention`
    results it is made of.
    """

    c: Tensor
    coarse: CoAttention
    fine: CoAttention


class CoMasks(TypedDict, total=False):
    """The per-set masks, keywords of every co-attention function and module (``**masks``).

    ``mask1``: boolean ``(..., n_f^(1))``; ``mask2``: boolean ``(..., n_f^(2))``;
    ``True`` = may attend (a real feature vector), ``False`` = padding.
    Each defaults to None (no padding). A module hands them to its function, and
    a function to its steps, unchanged; any other keyword raises ``TypeError``.
    """

    mask1: Annotated[Tensor | None, Default(None)]
    mask2: Annotated[Tensor | None, Default(None)]


class TwoSetOptions(TypedDict, total=False):
    """Options of the two feature sets, keywords of every co-attention module (``**sets``).

    ``d_k1``, ``d_k2``: key sizes ``d_k^(i)`` (the value sizes are the same),
    default ``d_f^(i)``; ``plain``: if True, ``K^(i) = V^(i) = F^(i)`` with no
    projections (then ``d_k^(i)`` must be ``d_f^(i)``), default False. Every module
    hands them to the shared base that builds the projections of Eq. (1).
    """

    d_k1: int | None
    d_k2: int | None
    plain: bool


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _sup(i: str) -> str:
    """The set superscript of a symbol: ``^(1)`` for set ``"1"``, nothing for a lone set ``""``."""
    return f"^({i})" if i else ""


def _check_set(K: Tensor, V: Tensor | None, i: str, allow_empty: bool = False) -> None:
    """Validate one feature set's keys ``K^(i)`` and values ``V^(i)`` (``i=""``: a lone set, ``K``, ``V``)."""
    s = _sup(i)
    as_tensor(K, f"K{s}")
    check_min_rank(K, 2, f"K{s}", f"(..., n_f{s}, d_k{s})")
    if not allow_empty:
        check_nonempty(K, -2, f"K{s}", f"n_f{s}")
    if V is not None:
        as_tensor(V, f"V{s}")
        check_min_rank(V, 2, f"V{s}", f"(..., n_f{s}, d_v{s})")
        check_dim_equal(K.shape[-2], V.shape[-2], f"feature set {i}", f"n_f{s} of K{s}", f"n_f{s} of V{s}")
        check_batch_broadcast(K, V, f"K{s}", f"V{s}")


def _check_set_mask(mask: Tensor | None, K: Tensor, i: str) -> None:
    """Validate a per-set mask ``(..., n_f^(i))`` against keys ``K^(i)`` (``i=""``: ``mask`` against ``K``;
    ``i="_t"`` and the like: rotatory attention's ``mask_t`` against ``F_t``, sizes ``n_f^t``)."""
    if mask is None:
        return
    if i.startswith("_"):  # rotatory attention's subscripted sets
        size, keys = f"n_f^{i[1:]}", f"F{i}"
    else:
        size, keys = f"n_f{_sup(i)}", f"K{_sup(i)}"
    check_boolean(mask, f"mask{i}")
    if mask.dim() < 1 or mask.shape[-1] != K.shape[-2]:
        raise ValueError(f"mask{i} must have shape (..., {size}) with {size}={K.shape[-2]}, got {tuple(mask.shape)}")
    if mask.dim() - 1 > K.dim() - 2:
        raise ValueError(
            f"mask{i} of shape {tuple(mask.shape)} has more batch axes than {keys} {tuple(K.shape)}: "
            f"it must have shape (..., {size})"
        )
    try:
        torch.broadcast_shapes(mask.shape[:-1], K.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"batch dimensions of mask{i} {tuple(mask.shape)} and {keys} {tuple(K.shape)} do not broadcast"
        ) from None


#: No padding in either set: the value of every :class:`CoMasks` mask a call leaves out.
_NO_MASKS: Final[CoMasks] = option_defaults(CoMasks)


def _masks(masks: CoMasks) -> tuple[Tensor | None, Tensor | None]:
    """``(mask1, mask2)`` from the keyword masks; ``TypeError`` for any other keyword."""
    full = with_defaults(masks, _NO_MASKS, "CoMasks")
    return full["mask1"], full["mask2"]


def _check_pair(K1: Tensor, K2: Tensor) -> None:
    check_batch_broadcast(K1, K2, "K^(1)", "K^(2)")
    if K1.dtype != K2.dtype:
        raise ValueError(f"K^(1) and K^(2) must share a dtype, got {K1.dtype} and {K2.dtype}")


def _check_sets(
    K1: Tensor,
    V1: Tensor | None,
    K2: Tensor,
    V2: Tensor | None,
    mask1: Tensor | None = None,
    mask2: Tensor | None = None,
    sets: tuple[str, str] = ("1", "2"),
    masks: tuple[str, str] = ("1", "2"),
) -> None:
    """Validate both feature sets, that they pair up, and their masks (``sets``/``masks`` name them in errors)."""
    _check_set(K1, V1, sets[0])
    _check_set(K2, V2, sets[1])
    _check_pair(K1, K2)
    _check_set_mask(mask1, K1, masks[0])
    _check_set_mask(mask2, K2, masks[1])


def attend_vector(q: Tensor, K: Tensor, V: Tensor, score: ScoreFn, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One query vector attends to one feature set: Eq. (2)-(4) for a single ``q``.

    An empty set (``n_f = 0``) or a fully-masked one gives ``c = 0``.

    Args:
        q: the query.
        K: keys.
        V: values.
        score: the score function ``(Q, K) -> e`` of Table II.
        mask: boolean ``(..., n_f)``, ``True`` = may attend; None attends everywhere.

    Shape:
        q: ``(..., d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``.
        Returns c: ``(..., d_v)``, a: ``(..., n_f)``.

    Returns:
        ``(c, a)``: the context and the weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape problems or a mask that is not boolean (a float 0/1
            mask would shift the scores, not select).
    """
    as_tensor(q, "q")
    require_boolean_mask(mask, "attend_vector")
    m = None if mask is None else check_one_query_mask(mask, q.shape[:-1], K)
    c, a = attend(q.unsqueeze(-2), K, V, m, score)
    return c.squeeze(-2), a.squeeze(-2)


# --------------------------------------------------------------------------
# Coarse-grained co-attention
# --------------------------------------------------------------------------


@catalogued("eq7", title="Query-less additive score e^(0)_l = w^(1)T act(W^(1) k^(1)_l + b^(1))")
def queryless_additive_score(
    K: Tensor, W: Tensor, w: Tensor, b: Tensor | None = None, act: Activation = torch.tanh
) -> Tensor:
    """Query-less additive score, Eq. (7): ``e_l^(0) = w^(1)T act(W^(1) k_l^(1) + b^(1))``.

    It is the additive score of Eq. (6) without the ``W_1 q`` term: the "query"
    is learned into the bias (see :func:`absorbed_query_bias`), so it asks the
    generic question "which feature vectors matter most?".

    Args:
        K: keys of set 1.
        W: the key map ``W^(1)``.
        w: the output vector ``w^(1)``.
        b: the bias ``b^(1)``, or None for zero.
        act: the activation (``tanh`` by default).

    Shape:
        K: ``(..., n_f, d_k)``; W: ``(d_w, d_k)``; w: ``(d_w,)``; b: ``(d_w,)``.
        Returns e: ``(..., n_f)``.

    Returns:
        The scores ``e^(0)``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    as_tensor(K, "K^(1)")
    check_min_rank(K, 2, "K^(1)", "(..., n_f^(1), d_k^(1))")
    check_rank(w, 1, "w^(1)", "(d_w,)")
    check_weight(W, (w.shape[0], K.shape[-1]), "W^(1)", "(d_w, d_k^(1))")
    if b is None:
        b = K.new_zeros(w.shape[0])
    check_weight(b, (w.shape[0],), "b^(1)", "(d_w,)")
    # Eq. (7) is the query-less self-attention score of Eq. (33), applied to the first feature set.
    return queryless_score(K, W, b, w, act)


def absorbed_query_bias(q: Tensor, W1: Tensor, b: Tensor) -> Tensor:
    """The bias that turns Eq. (6) with a fixed query ``q`` into Eq. (7): ``W_1 q + b``.

    ``additive_score(q, K, W1, W2, w, b) == queryless_additive_score(K, W2, w, W1 q + b)``.

    Args:
        q: the fixed query.
        W1: the query map ``W_1``.
        b: the bias ``b``.

    Shape:
        q: ``(d_q,)``; W1: ``(d_w, d_q)``; b: ``(d_w,)``. Returns ``(d_w,)``.

    Returns:
        The absorbed bias.

    Raises:
        TypeError: if q, W1 or b is not a floating-point tensor.
        ValueError: if W1 is not ``(d_w, d_q)``.
    """
    as_tensor(q, "q"), as_tensor(W1, "W1"), as_tensor(b, "b")
    check_weight(W1, (b.shape[0], q.shape[-1]), "W_1", "(d_w, d_q)")
    return W1 @ q + b


@catalogued("eq8", title="Alternating co-attention, step 2: c^(0) queries the second feature set")
@catalogued("eq9", title="Alternating co-attention, step 3: c^(2) queries the first feature set again")
def alternating_co_attention(
    K1: Tensor,
    V1: Tensor,
    K2: Tensor,
    V2: Tensor,
    score0: QuerylessScoreFn,
    score2: ScoreFn,
    score1: ScoreFn,
    **masks: Unpack[CoMasks],
) -> AlternatingCoAttentionOutput:
    """Alternating co-attention (Fig. 4), Eq. (7)-(9).

    1. ``e^(0) = score0(K^(1))`` (Eq. 7, no query), ``c^(0) = sum a^(0)_l v^(1)_l``;
    2. ``e^(2)_l = score2(c^(0), k^(2)_l)`` (Eq. 8), ``c^(2) = sum a^(2)_l v^(2)_l``;
    3. ``e^(1)_l = score1(c^(2), k^(1)_l)`` (Eq. 9), ``c^(1) = sum a^(1)_l v^(1)_l``.

    The steps are sequential: each needs the previous context vector.

    Args:
        K1: keys of set 1.
        V1: values of set 1.
        K2: keys of set 2.
        V2: values of set 2.
        score0: maps ``K^(1)`` to scores ``(..., n_f^(1))``.
        score2: ``score(Q, K)`` with queries of size ``d_v^(1)`` and keys of size ``d_k^(2)``.
        score1: ``score(Q, K)`` with queries of size ``d_v^(2)`` and keys of size ``d_k^(1)``.
        **masks: ``mask1`` ``(..., n_f^(1))`` and ``mask2`` ``(..., n_f^(2))``
            (:class:`CoMasks`), boolean, ``True`` = may attend; a fully-masked
            set gets zero weights and a zero context.

    Shape:
        K1: ``(..., n_f^(1), d_k^(1))``; V1: ``(..., n_f^(1), d_v^(1))``;
        K2: ``(..., n_f^(2), d_k^(2))``; V2: ``(..., n_f^(2), d_v^(2))``.
        Returns c1: ``(..., d_v^(1))``, c2: ``(..., d_v^(2))``, a1: ``(..., n_f^(1))``,
        a2: ``(..., n_f^(2))``. c0: ``(..., d_v^(1))``, a0: ``(..., n_f^(1))``.

    Returns:
        :class:`AlternatingCoAttentionOutput`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        TypeError: for a keyword other than ``mask1``/``mask2``.
        ValueError: on empty or mismatched feature sets, a bad mask, or a
            ``score0`` result of the wrong shape.
    """
    mask1, mask2 = _masks(masks)
    _check_sets(K1, V1, K2, V2, mask1, mask2)
    e0 = score0(K1)
    if e0.shape[-1] != K1.shape[-2]:
        raise ValueError(f"score0 must return (..., n_f^(1)={K1.shape[-2]}), got {tuple(e0.shape)}")
    c0, a0 = attend_scores(e0, V1, mask1)
    c2, a2 = attend_vector(c0, K2, V2, score2, mask2)
    c1, a1 = attend_vector(c2, K1, V1, score1, mask1)
    return AlternatingCoAttentionOutput(c1, c2, a1, a2, c0, a0)


@catalogued("eq10", title="Unweighted mean key of each feature set (interactive co-attention)")
def mean_key(K: Tensor, mask: Tensor | None = None) -> Tensor:
    """Unweighted average key, Eq. (10): ``k_bar = (1/n_f) sum_l k_l``.

    Args:
        K: keys.
        mask: boolean ``(..., n_f)``, ``True`` = may attend (only those rows are averaged).

    Shape:
        K: ``(..., n_f, d_k)``. Returns ``(..., d_k)``.

    Returns:
        The mean key; zero for a fully-masked set.

    Raises:
        TypeError: if K is not a floating-point tensor.
        ValueError: for an empty set or a bad mask.
    """
    _check_set(K, None, "")
    _check_set_mask(mask, K, "")
    return masked_mean(K, mask)


@catalogued("eq11", title="Interactive co-attention: each mean key queries the other feature set")
def interactive_co_attention(
    K1: Tensor, V1: Tensor, K2: Tensor, V2: Tensor, score1: ScoreFn, score2: ScoreFn, **masks: Unpack[CoMasks]
) -> CoAttention:
    """Interactive co-attention (Fig. 5), Eq. (10)-(11).

    ``e^(1)_l = score1(k_bar^(2), k^(1)_l)`` and ``e^(2)_l = score2(k_bar^(1), k^(2)_l)``,
    with the mean keys of Eq. (10); both directions are independent, so they
    can run in parallel.

    Args:
        K1: keys of set 1.
        V1: values of set 1.
        K2: keys of set 2.
        V2: values of set 2.
        score1: ``score(Q, K)`` with queries of size ``d_k^(2)`` and keys of size ``d_k^(1)``.
        score2: ``score(Q, K)`` with queries of size ``d_k^(1)`` and keys of size ``d_k^(2)``.
        **masks: ``mask1`` ``(..., n_f^(1))`` and ``mask2`` ``(..., n_f^(2))``
            (:class:`CoMasks`), boolean, ``True`` = may attend; a fully-masked
            set gets zero weights and a zero context. A fully-masked set has mean key 0.

    Shape:
        K1: ``(..., n_f^(1), d_k^(1))``; V1: ``(..., n_f^(1), d_v^(1))``;
        K2: ``(..., n_f^(2), d_k^(2))``; V2: ``(..., n_f^(2), d_v^(2))``.
        Returns c1: ``(..., d_v^(1))``, c2: ``(..., d_v^(2))``, a1: ``(..., n_f^(1))``,
        a2: ``(..., n_f^(2))``.

    Returns:
        :class:`CoAttention`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        TypeError: for a keyword other than ``mask1``/``mask2``.
        ValueError: on empty or mismatched feature sets or a bad mask.
    """
    mask1, mask2 = _masks(masks)
    _check_sets(K1, V1, K2, V2, mask1, mask2)
    k1_bar, k2_bar = mean_key(K1, mask1), mean_key(K2, mask2)
    c1, a1 = attend_vector(k2_bar, K1, V1, score1, mask1)
    c2, a2 = attend_vector(k1_bar, K2, V2, score2, mask2)
    return CoAttention(c1, c2, a1, a2)


# --------------------------------------------------------------------------
# Fine-grained co-attention
# --------------------------------------------------------------------------


@catalogued("eq12", title="Bilinear affinity matrix A = act(K^(1)T W_A K^(2))")
def affinity_matrix(K1: Tensor, K2: Tensor, W_A: Tensor, act: Activation = torch.tanh) -> Tensor:
    """Bilinear affinity matrix, Eq. (12): ``A = act(K^(1)T W_A K^(2))``.

    ``A_ij = act(k_i^(1)T W_A k_j^(2))`` compares every vector of set 1 with
    every vector of set 2, even when ``d_k^(1) != d_k^(2)``.

    Args:
        K1: keys of set 1.
        K2: keys of set 2.
        W_A: the bilinear map.
        act: the activation (``tanh`` by default).

    Shape:
        K1: ``(..., n_f^(1), d_k^(1))``; K2: ``(..., n_f^(2), d_k^(2))``;
        W_A: ``(d_k^(1), d_k^(2))``. Returns A: ``(..., n_f^(1), n_f^(2))``.

    Returns:
        The affinity matrix ``A``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    _check_sets(K1, None, K2, None)
    check_weight(W_A, (K1.shape[-1], K2.shape[-1]), "W_A", "(d_k^(1), d_k^(2))")
    return act(K1 @ W_A @ K2.transpose(-1, -2))


@catalogued("eq13", title="Concatenation affinity A_ij = w_A^T concat(k_i, k_j, k_i o k_j)")
def concat_affinity_matrix(K1: Tensor, K2: Tensor, w_A: Tensor) -> Tensor:
    """Concatenation affinity matrix, Eq. (13): ``A_ij = w_A^T concat(k_i^(1), k_j^(2), k_i^(1) o k_j^(2))``.

    The Hadamard product ``o`` needs both key sets to have the same size
    ``d_k``. Splitting ``w_A = [w_a; w_b; w_c]`` gives the same numbers without
    building the ``(n_f^(1), n_f^(2), 3 d_k)`` tensor:
    ``A_ij = w_a.k_i + w_b.k_j + (k_i o w_c).k_j``.

    Args:
        K1: keys of set 1.
        K2: keys of set 2.
        w_A: the weight vector of the concatenation.

    Shape:
        K1: ``(..., n_f^(1), d_k)``; K2: ``(..., n_f^(2), d_k)``; w_A: ``(3 d_k,)``.
        Returns A: ``(..., n_f^(1), n_f^(2))``.

    Returns:
        The affinity matrix ``A``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``d_k^(1) != d_k^(2)``, w_A is not ``(3 d_k,)`` or on
            another shape mismatch.
    """
    _check_sets(K1, None, K2, None)
    check_dim_equal(K1.shape[-1], K2.shape[-1], "the concatenation affinity (Eq. 13)", "d_k^(1)", "d_k^(2)")
    d_k = K1.shape[-1]
    check_weight(w_A, (3 * d_k,), "w_A", "(3 d_k,)")
    w_a, w_b, w_c = w_A[:d_k], w_A[d_k : 2 * d_k], w_A[2 * d_k :]
    return (K1 @ w_a).unsqueeze(-1) + (K2 @ w_b).unsqueeze(-2) + (K1 * w_c) @ K2.transpose(-1, -2)


def _pair_mask(mask1: Tensor | None, mask2: Tensor | None) -> Tensor | None:
    """Boolean ``(..., n_f^(1), n_f^(2))`` mask of real pairs, or None."""
    if mask1 is None:
        return None if mask2 is None else mask2.unsqueeze(-2)
    if mask2 is None:
        return mask1.unsqueeze(-1)
    return mask1.unsqueeze(-1) & mask2.unsqueeze(-2)


def _check_affinity(A: Tensor, K1: Tensor, K2: Tensor) -> None:
    as_tensor(A, "A")
    if A.dim() < 2 or A.shape[-2:] != (K1.shape[-2], K2.shape[-2]):
        raise ValueError(
            f"the affinity matrix A must have shape (..., n_f^(1), n_f^(2)) = (..., {K1.shape[-2]}, "
            f"{K2.shape[-2]}), got {tuple(A.shape)}"
        )


@catalogued("eq14", title="Parallel co-attention scores of set 1, e^(1) = w_1 act(W_2 K^(2) A^T + W_1 K^(1))")
@catalogued("eq15", title="Parallel co-attention scores of set 2, e^(2) = w_2 act(W_1 K^(1) A + W_2 K^(2))")
def parallel_co_attention_scores(
    K1: Tensor,
    K2: Tensor,
    A: Tensor,
    W1: Tensor,
    W2: Tensor,
    w1: Tensor,
    w2: Tensor,
    act: Activation = torch.tanh,
    **masks: Unpack[CoMasks],
) -> tuple[Tensor, Tensor]:
    """Aggregated additive scores of parallel co-attention, Eq. (14) and (15).

    ``e^(1) = w_1 act(W_2 K^(2) A^T + W_1 K^(1))`` and
    ``e^(2) = w_2 act(W_1 K^(1) A + W_2 K^(2))`` (survey, column form). In rows:
    ``e^(1) = act(A K2 W_2^T + K1 W_1^T) w_1``: the affinity matrix carries set
    2's projected keys into set 1's positions (and ``A^T`` the reverse).
    Padding (mask False) is removed from ``A`` and from the keys before the
    products (selected, so NaN/Inf stored in a padded slot reaches neither a
    real position's score nor a gradient).

    Args:
        K1: keys of set 1.
        K2: keys of set 2.
        A: the affinity matrix.
        W1: the map of set 1's keys.
        W2: the map of set 2's keys.
        w1: the output vector of set 1.
        w2: the output vector of set 2.
        act: the activation (``tanh`` by default).
        **masks: ``mask1`` ``(..., n_f^(1))`` and ``mask2`` ``(..., n_f^(2))``
            (:class:`CoMasks`), boolean, ``True`` = may attend.

    Shape:
        K1: ``(..., n_f^(1), d_k^(1))``; K2: ``(..., n_f^(2), d_k^(2))``;
        A: ``(..., n_f^(1), n_f^(2))``; W1: ``(d_w, d_k^(1))``; W2: ``(d_w, d_k^(2))``;
        w1, w2: ``(d_w,)``. Returns e1: ``(..., n_f^(1))``, e2: ``(..., n_f^(2))``.

    Returns:
        ``(e^(1), e^(2))``: the scores of both sets.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        TypeError: for a keyword other than ``mask1``/``mask2``.
        ValueError: on shape mismatches or a bad mask.
    """
    mask1, mask2 = _masks(masks)
    _check_sets(K1, None, K2, None, mask1, mask2)
    _check_affinity(A, K1, K2)
    check_rank(w1, 1, "w_1", "(d_w,)")
    d_w = w1.shape[0]
    check_weight(w2, (d_w,), "w_2", "(d_w,)")
    check_weight(W1, (d_w, K1.shape[-1]), "W_1", "(d_w, d_k^(1))")
    check_weight(W2, (d_w, K2.shape[-1]), "W_2", "(d_w, d_k^(2))")
    pm = _pair_mask(mask1, mask2)
    if pm is not None:  # selected, not multiplied: NaN/Inf in a padded pair or padded key is inert
        A = torch.where(pm, A, torch.zeros((), dtype=A.dtype, device=A.device))
        K1, K2 = zero_masked(K1, mask1), zero_masked(K2, mask2)
    P1, P2 = K1 @ W1.T, K2 @ W2.T  # (..., n_f^(1), d_w), (..., n_f^(2), d_w)
    e1 = act(A @ P2 + P1) @ w1
    e2 = act(A.transpose(-1, -2) @ P1 + P2) @ w2
    return e1, e2


@catalogued("eq16", title="Max-pooled affinity scores e^(1)_i = max_j A_ij, e^(2)_j = max_i A_ij")
def max_pooled_affinity_scores(A: Tensor, **masks: Unpack[CoMasks]) -> tuple[Tensor, Tensor]:
    """Scores as the best match in the affinity matrix, Eq. (16).

    ``e^(1)_i = max_j A_ij`` (row maxima) and ``e^(2)_j = max_i A_ij`` (column maxima).
    The masks exclude padding from the maxima (a row with no real partner, or an
    empty other set, gets the lowest finite score).

    Args:
        A: the affinity matrix.
        **masks: ``mask1`` ``(..., n_f^(1))`` and ``mask2`` ``(..., n_f^(2))``
            (:class:`CoMasks`), boolean, ``True`` = may attend.

    Shape:
        A: ``(..., n_f^(1), n_f^(2))``. Returns e1: ``(..., n_f^(1))``, e2: ``(..., n_f^(2))``.

    Returns:
        ``(e^(1), e^(2))``: the scores of both sets.

    Raises:
        TypeError: if A is not a floating-point tensor, or for a keyword other
            than ``mask1``/``mask2``.
        ValueError: for a bad A or mask.
    """
    mask1, mask2 = _masks(masks)
    as_tensor(A, "A")
    check_min_rank(A, 2, "A", "(..., n_f^(1), n_f^(2))")
    fake1 = A.new_empty(*A.shape[:-1], 0)  # shape carrier (..., n_f^(1), 0)
    fake2 = A.transpose(-1, -2).new_empty(*A.transpose(-1, -2).shape[:-1], 0)
    _check_set_mask(mask1, fake1, "1")
    _check_set_mask(mask2, fake2, "2")
    pm = _pair_mask(mask1, mask2)
    if pm is not None:
        A = A.masked_fill(~pm, torch.finfo(A.dtype).min)
    lowest = torch.finfo(A.dtype).min  # an empty other set: no partner, the lowest finite score
    e1 = A.amax(-1) if A.shape[-1] else A.new_full(A.shape[:-1], lowest)
    e2 = A.amax(-2) if A.shape[-2] else A.new_full((*A.shape[:-2], A.shape[-1]), lowest)
    return e1, e2


def co_attention_contexts(e1: Tensor, e2: Tensor, V1: Tensor, V2: Tensor, **masks: Unpack[CoMasks]) -> CoAttention:
    """Align both score vectors (softmax, Eq. 3) and form both context vectors (Eq. 4).

    Args:
        e1: scores of set 1.
        e2: scores of set 2.
        V1: values of set 1.
        V2: values of set 2.
        **masks: ``mask1`` ``(..., n_f^(1))`` and ``mask2`` ``(..., n_f^(2))``
            (:class:`CoMasks`), boolean, ``True`` = may attend; a fully-masked
            set gets zero weights and a zero context.

    Shape:
        e1: ``(..., n_f^(1))``; e2: ``(..., n_f^(2))``; V1: ``(..., n_f^(1), d_v^(1))``;
        V2: ``(..., n_f^(2), d_v^(2))``. Returns c1: ``(..., d_v^(1))``, c2: ``(..., d_v^(2))``, a1: ``(..., n_f^(1))``,
        a2: ``(..., n_f^(2))``.

    Returns:
        :class:`CoAttention`.

    Raises:
        TypeError: if a score vector or values tensor is not a floating-point tensor,
            or for a keyword other than ``mask1``/``mask2``.
        ValueError: if a score vector and its values disagree on ``n_f``.
    """
    as_tensor(e1, "e1"), as_tensor(e2, "e2"), as_tensor(V1, "V1"), as_tensor(V2, "V2")
    mask1, mask2 = _masks(masks)
    for e, V, i in ((e1, V1, 1), (e2, V2, 2)):
        check_dim_equal(
            e.shape[-1], V.shape[-2], "co-attention context", f"n_f^({i}) of e^({i})", f"n_f^({i}) of V^({i})"
        )
    (c1, a1), (c2, a2) = attend_scores(e1, V1, mask1), attend_scores(e2, V2, mask2)
    return CoAttention(c1, c2, a1, a2)


@catalogued("eq14", "eq15")
def parallel_co_attention(
    K1: Tensor,
    V1: Tensor,
    K2: Tensor,
    V2: Tensor,
    A: Tensor,
    W1: Tensor,
    W2: Tensor,
    w1: Tensor,
    w2: Tensor,
    act: Activation = torch.tanh,
    **masks: Unpack[CoMasks],
) -> CoAttention:
    """Parallel co-attention (Fig. 6): Eq. (14)-(15) scores, softmax, two contexts.

    Args:
        K1: keys of set 1.
        V1: values of set 1.
        K2: keys of set 2.
        V2: values of set 2.
        A: an affinity matrix from Eq. (12) or (13).
        W1: the map of set 1's keys.
        W2: the map of set 2's keys.
        w1: the output vector of set 1.
        w2: the output vector of set 2.
        act: the activation (``tanh`` by default).
        **masks: ``mask1`` ``(..., n_f^(1))`` and ``mask2`` ``(..., n_f^(2))``
            (:class:`CoMasks`), boolean, ``True`` = may attend; a fully-masked
            set gets zero weights and a zero context.

    Shape:
        K1: ``(..., n_f^(1), d_k^(1))``; V1: ``(..., n_f^(1), d_v^(1))``;
        K2: ``(..., n_f^(2), d_k^(2))``; V2: ``(..., n_f^(2), d_v^(2))``.
        A and the weights as in :func:`parallel_co_attention_scores`.
        Returns c1: ``(..., d_v^(1))``, c2: ``(..., d_v^(2))``, a1: ``(..., n_f^(1))``,
        a2: ``(..., n_f^(2))``.

    Returns:
        :class:`CoAttention`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        TypeError: for a keyword other than ``mask1``/``mask2``.
        ValueError: on shape mismatches or a bad mask.
    """
    _check_set(K1, V1, "1")
    _check_set(K2, V2, "2")
    e1, e2 = parallel_co_attention_scores(K1, K2, A, W1, W2, w1, w2, act, **masks)
    return co_attention_contexts(e1, e2, V1, V2, **masks)


@catalogued("eq16")
def max_pooled_co_attention(V1: Tensor, V2: Tensor, A: Tensor, **masks: Unpack[CoMasks]) -> CoAttention:
    """Co-attention with the max-pooled affinity scores of Eq. (16), then softmax and contexts.

    Args:
        V1: values of set 1.
        V2: values of set 2.
        A: the affinity matrix.
        **masks: ``mask1`` ``(..., n_f^(1))`` and ``mask2`` ``(..., n_f^(2))``
            (:class:`CoMasks`), boolean, ``True`` = may attend; a fully-masked
            set gets zero weights and a zero context.

    Shape:
        V1: ``(..., n_f^(1), d_v^(1))``; V2: ``(..., n_f^(2), d_v^(2))``;
        A: ``(..., n_f^(1), n_f^(2))``. Returns c1: ``(..., d_v^(1))``, c2: ``(..., d_v^(2))``, a1: ``(..., n_f^(1))``,
        a2: ``(..., n_f^(2))``.

    Returns:
        :class:`CoAttention`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        TypeError: for a keyword other than ``mask1``/``mask2``.
        ValueError: on shape mismatches or a bad mask.
    """
    _check_set(V1, None, "1")
    _check_set(V2, None, "2")
    _check_affinity(A, V1, V2)
    e1, e2 = max_pooled_affinity_scores(A, **masks)
    return co_attention_contexts(e1, e2, V1, V2, **masks)


@catalogued(
    "extra:multi-grained-co-attention",
    title="Multi-grained co-attention: coarse and fine co-attention, four context vectors",
)
def multi_grained_co_attention(
    K1: Tensor,
    V1: Tensor,
    K2: Tensor,
    V2: Tensor,
    score1: ScoreFn,
    score2: ScoreFn,
    A: Tensor,
    **masks: Unpack[CoMasks],
) -> MultiGrainedOutput:
    """Multi-grained co-attention: coarse (Eq. 10-11) and fine (Eq. 16) together.

    This is the survey's description of Fan et al. (2018). Their own model takes the
    row maximum only for aspect-to-context; for context-to-aspect it averages
    per-row softmax summaries of the aspect words, its affinity is the Eq. (13)
    form and its coarse scores are bilinear.

    The coarse part is :func:`interactive_co_attention` with score1 and score2;
    the fine part is :func:`max_pooled_co_attention` on the affinity matrix A.
    The four context vectors are concatenated:
    ``c = concat(c1_coarse, c2_coarse, c1_fine, c2_fine)``.

    Args:
        K1: keys of set 1.
        V1: values of set 1.
        K2: keys of set 2.
        V2: values of set 2.
        score1: the coarse score of set 1 (queries of size ``d_k^(2)``).
        score2: the coarse score of set 2 (queries of size ``d_k^(1)``).
        A: the affinity matrix.
        **masks: ``mask1``, ``mask2`` (:class:`CoMasks`, boolean ``(..., n_f^(i))``,
            ``True`` = may attend), shared by both parts.

    Shape:
        K1: ``(..., n_f^(1), d_k^(1))``; V1: ``(..., n_f^(1), d_v^(1))``;
        K2: ``(..., n_f^(2), d_k^(2))``; V2: ``(..., n_f^(2), d_v^(2))``.
        A: ``(..., n_f^(1), n_f^(2))``. Returns c: ``(..., 2 d_v^(1) + 2 d_v^(2))``.

    Returns:
        :class:`MultiGrainedOutput`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        TypeError: for a keyword other than ``mask1``/``mask2``.
        ValueError: on empty or mismatched feature sets, a bad A or a bad mask.
    """
    coarse = interactive_co_attention(K1, V1, K2, V2, score1, score2, **masks)
    _check_affinity(A, K1, K2)
    fine = max_pooled_co_attention(V1, V2, A, **masks)
    c = torch.cat([coarse.c1, coarse.c2, fine.c1, fine.c2], dim=-1)
    return MultiGrainedOutput(c, coarse, fine)


# --------------------------------------------------------------------------
# Bi-directional attention (NLP review, section 4.2 (2))
# --------------------------------------------------------------------------


class BidirectionalOutput(NamedTuple):
    """Result of bi-directional attention.

    ``c_k`` ``(..., d_v^K)`` and ``a_k`` ``(..., n_K)``: the K2Q direction
    (attention over K, guided by Q); ``c_q`` ``(..., d_v^Q)`` and ``a_q``
    ``(..., n_Q)``: the Q2K direction (attention over Q, guided by K).
    """

    c_k: Tensor
    c_q: Tensor
    a_k: Tensor
    a_q: Tensor


Compress = Callable[[Tensor, "Tensor | None"], Tensor]


def _default_compress(X: Tensor, mask: Tensor | None) -> Tensor:
    return mean_key(X, mask)


@catalogued(
    "extra:bidirectional-attention",
    title="Bi-directional attention (K2Q + Q2K; coarse/fine; parallel/alternating), NLP review 4.2",
)
def bidirectional_attention(
    Q: Tensor,
    K: Tensor,
    score: ScoreFn,
    *,
    V_q: Tensor | None = None,
    V_k: Tensor | None = None,
    granularity: str = "coarse",
    order: str = "parallel",
    score_q2k: ScoreFn | None = None,
    compress_q: Compress | None = None,
    compress_k: Compress | None = None,
    pool: str = "max",
    mask_q: Tensor | None = None,
    mask_k: Tensor | None = None,
) -> BidirectionalOutput:
    """Bi-directional attention as the NLP review defines it: K2Q and Q2K together.

    Ordinary attention weighs the elements of K by their relevance to Q (K2Q);
    when Q is itself a sequence one can also weigh the elements of Q by their
    relevance to K (Q2K). Values default to the keys (``K = V``, as in the review).

    * ``granularity="coarse"``: one sequence is compressed to a vector
      (``compress_q`` / ``compress_k``, default the mean of Eq. 10) that queries
      the other, as in global attention.
      ``order="parallel"``: both directions at once (``score(q_bar, K)`` and
      ``score_q2k(k_bar, Q)``) -- this is the survey's interactive co-attention,
      Eq. (10)-(11). ``order="alternating"``: first K2Q with ``q_bar``, then Q2K
      with the K2Q context ``c_k`` as the query -- with ``compress_q`` the
      query-less attention of Eq. (7), these are Eq. (8) and (9) of the survey's
      alternating co-attention.
    * ``granularity="fine"``: all pairs are scored, ``S = score(Q, K)``
      ``(..., n_Q, n_K)``; pooling the columns of S gives K's score vector, pooling
      its rows gives Q's (``pool="max"`` or ``"mean"``); then softmax and
      weighted sums. With ``pool="max"`` and an affinity matrix as ``score``
      this is the survey's Eq. (16). Only ``order="parallel"`` is defined.

    Args:
        Q: the query sequence.
        K: the key sequence.
        score: the score function ``(Q, K) -> e`` (K2Q; fine: the pair scores S).
        V_q: values of Q (defaults to Q).
        V_k: values of K (defaults to K).
        granularity: ``"coarse"`` or ``"fine"``.
        order: ``"parallel"`` or ``"alternating"`` (coarse only).
        score_q2k: scores keys of Q against a query from K (default ``score``).
        compress_q: ``(X, mask) -> (..., d)`` summary of Q (default the masked mean).
        compress_k: ``(X, mask) -> (..., d)`` summary of K (default the masked mean).
        pool: ``"max"`` or ``"mean"`` pooling of S (fine only).
        mask_q: boolean ``(..., n_Q)``, ``True`` = may attend (a real element of Q).
        mask_k: boolean ``(..., n_K)``, ``True`` = may attend (a real element of K).

    Shape:
        Q: ``(..., n_Q, d_q)``; K: ``(..., n_K, d_k)``; V_q: ``(..., n_Q, d_v^Q)``;
        V_k: ``(..., n_K, d_v^K)``. Returns c_k: ``(..., d_v^K)``, c_q: ``(..., d_v^Q)``,
        a_k: ``(..., n_K)``, a_q: ``(..., n_Q)``.

    Returns:
        :class:`BidirectionalOutput`.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: for unknown options, fine + alternating, a bad mask, or
            shape problems.
    """
    if granularity not in ("coarse", "fine"):
        raise ValueError(f"granularity must be 'coarse' or 'fine', got {granularity!r}")
    if order not in ("parallel", "alternating"):
        raise ValueError(f"order must be 'parallel' or 'alternating', got {order!r}")
    V_q = Q if V_q is None else V_q
    V_k = K if V_k is None else V_k
    _check_sets(Q, V_q, K, V_k, mask_q, mask_k, sets=("Q", "K"), masks=("_q", "_k"))
    score_q2k = score if score_q2k is None else score_q2k
    if granularity == "fine":
        if order != "parallel":
            raise ValueError("fine-grained bi-directional attention is defined for order='parallel' only")
        if pool not in ("max", "mean"):
            raise ValueError(f"pool must be 'max' or 'mean', got {pool!r}")
        S = score(zero_masked(Q, mask_q), zero_masked(K, mask_k))  # a NaN in a padded slot reaches no gradient
        _check_affinity(S, Q, K)
        if pool == "max":
            e_q, e_k = max_pooled_affinity_scores(S, mask1=mask_q, mask2=mask_k)
        else:
            pm = _pair_mask(mask_q, mask_k)
            w = torch.ones_like(S, dtype=torch.bool) if pm is None else pm.expand(S.shape)
            e_q, e_k = masked_mean(S, w, dim=-1), masked_mean(S, w, dim=-2)
        out = co_attention_contexts(e_q, e_k, V_q, V_k, mask1=mask_q, mask2=mask_k)
        return BidirectionalOutput(out.c2, out.c1, out.a2, out.a1)
    compress_q = _default_compress if compress_q is None else compress_q
    q_bar = compress_q(Q, mask_q)
    c_k, a_k = attend_vector(q_bar, K, V_k, score, mask_k)
    if order == "parallel":
        compress_k = _default_compress if compress_k is None else compress_k
        query_for_q = compress_k(K, mask_k)
    else:
        query_for_q = c_k
    c_q, a_q = attend_vector(query_for_q, Q, V_q, score_q2k, mask_q)
    return BidirectionalOutput(c_k, c_q, a_k, a_q)


# --------------------------------------------------------------------------
# Modules: each owns its weights and calls the functional forms above.
# --------------------------------------------------------------------------


@catalogued("eq7")
class QuerylessAdditiveScore(nn.Module):
    """Eq. (7) with learned ``W^(1)`` ``(d_w, d_k)``, ``b^(1)`` ``(d_w,)``, ``w^(1)`` ``(d_w,)``.

    Args:
        d_k: the key size.
        d_w: the hidden size.
        act: the activation (``tanh`` by default).

    Shape:
        ``forward(K)``: K ``(..., n_f, d_k)``. Returns e: ``(..., n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as
            :func:`queryless_additive_score`.
    """

    def __init__(self, d_k: int, d_w: int, act: Activation = torch.tanh) -> None:
        check_integers("QuerylessAdditiveScore", minimum=1, d_k=d_k, d_w=d_w)
        super().__init__()
        self.W = nn.Linear(d_k, d_w, bias=True)  # its bias is the survey's b^(1)
        self.w = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))
        self.act = act

    def forward(self, K: Tensor) -> Tensor:
        return queryless_additive_score(K, self.W.weight, self.w, self.W.bias, self.act)


class _TwoSets(nn.Module):
    """Keys and values of two feature sets, Eq. (1): the base of every co-attention module.

    It owns the :class:`TwoSetOptions` and their defaults (``d_k^(i) = d_f^(i)``,
    ``plain=False``; ``plain=True`` means ``K = V = F``).
    """

    def __init__(
        self, d_f1: int, d_f2: int, d_k1: int | None = None, d_k2: int | None = None, plain: bool = False
    ) -> None:
        super().__init__()
        self.plain = plain
        if plain:
            if (d_k1 not in (None, d_f1)) or (d_k2 not in (None, d_f2)):
                raise ValueError(
                    f"plain co-attention uses K = V = F, so d_k^(i) = d_f^(i); got d_k^(1)={d_k1}, "
                    f"d_f^(1)={d_f1}, d_k^(2)={d_k2}, d_f^(2)={d_f2}"
                )
            self.d_k1, self.d_k2, self.d_v1, self.d_v2 = d_f1, d_f2, d_f1, d_f2
        else:
            self.d_k1 = d_f1 if d_k1 is None else d_k1
            self.d_k2 = d_f2 if d_k2 is None else d_k2
            self.d_v1, self.d_v2 = self.d_k1, self.d_k2
            self.W_K1 = nn.Linear(d_f1, self.d_k1, bias=False)
            self.W_V1 = nn.Linear(d_f1, self.d_v1, bias=False)
            self.W_K2 = nn.Linear(d_f2, self.d_k2, bias=False)
            self.W_V2 = nn.Linear(d_f2, self.d_v2, bias=False)
        self.d_f1, self.d_f2 = d_f1, d_f2

    def kv(self, F1: Tensor, F2: Tensor, masks: CoMasks | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Eq. (1) for both sets: ``(K1, V1, K2, V2)``; raises ``ValueError`` for a bad ``F^(i)``.

        masks (:class:`CoMasks`): padded feature vectors holding NaN/Inf are zeroed
        before the projections (:func:`~attnsurvey.masking.zero_masked`), so they
        reach no output and no gradient, the projections' included.
        """
        for F, d_f, i in ((F1, self.d_f1, 1), (F2, self.d_f2, 2)):
            as_tensor(F, f"F^({i})")
            check_min_rank(F, 2, f"F^({i})", f"(..., n_f^({i}), d_f^({i}))")
            check_dim_equal(F.shape[-1], d_f, "co-attention", f"d_f^({i}) of F^({i})", f"d_f^({i}) of the module")
        if masks:
            F1, F2 = zero_masked(F1, masks.get("mask1")), zero_masked(F2, masks.get("mask2"))
        if self.plain:
            return F1, F1, F2, F2
        K1, V1 = keys_values(F1, self.W_K1.weight, self.W_V1.weight)
        K2, V2 = keys_values(F2, self.W_K2.weight, self.W_V2.weight)
        return K1, V1, K2, V2


@catalogued("eq6", "eq8")
class AlternatingCoAttention(_TwoSets):
    """Alternating co-attention (Fig. 4, Eq. 6-9) with learned weights.

    Eq. (7) owns ``W^(1)``, ``b^(1)``, ``w^(1)``; Eq. (9) reuses them and adds a
    query weight ``W_q^(1)`` ``(d_w, d_v^(2))``, which makes it the general
    additive score of Eq. (6). This sharing follows the survey's description of
    Lu et al.; their released code gives each of the three steps its own
    weights. Eq. (8) is an additive score with its own weights.
    ``forward(F1, F2, mask1=None, mask2=None)`` (masks
    boolean ``(..., n_f^(i))``, ``True`` = may attend) returns
    :class:`AlternatingCoAttentionOutput`.

    Args:
        d_f1: the feature size of set 1.
        d_f2: the feature size of set 2.
        d_w: the hidden size of the additive scores.
        **sets: ``d_k1``, ``d_k2``, ``plain`` (:class:`TwoSetOptions`).

    Shape:
        F1: ``(..., n_f^(1), d_f^(1))``; F2: ``(..., n_f^(2), d_f^(2))``;
        masks ``(..., n_f^(i))``.
        Outputs as in :func:`alternating_co_attention`.

    Raises:
        ValueError: if a size is not an integer >= 1, or ``plain`` with ``d_k^(i) != d_f^(i)``;
            in ``forward``, as :func:`alternating_co_attention`.
    """

    def __init__(self, d_f1: int, d_f2: int, d_w: int, **sets: Unpack[TwoSetOptions]) -> None:
        check_integers("AlternatingCoAttention", minimum=1, d_f1=d_f1, d_f2=d_f2, d_w=d_w)
        super().__init__(d_f1, d_f2, **sets)
        self.score0 = QuerylessAdditiveScore(self.d_k1, d_w)
        self.score2 = AdditiveScore(self.d_v1, self.d_k2, d_w)
        self.W_q1 = nn.Linear(self.d_v2, d_w, bias=False)

    @catalogued("eq9")
    def score1(self, Q: Tensor, K: Tensor) -> Tensor:
        """Eq. (9): Eq. (6) with Eq. (7)'s ``W^(1), b^(1), w^(1)`` plus ``W_q^(1) c^(2)``."""
        s0 = self.score0
        return additive_score(Q, K, self.W_q1.weight, s0.W.weight, s0.w, s0.W.bias, s0.act)

    def forward(self, F1: Tensor, F2: Tensor, **masks: Unpack[CoMasks]) -> AlternatingCoAttentionOutput:
        K1, V1, K2, V2 = self.kv(F1, F2, masks)
        return alternating_co_attention(K1, V1, K2, V2, self.score0, self.score2, self.score1, **masks)


@catalogued("eq11")
class InteractiveCoAttention(_TwoSets):
    """Interactive co-attention (Fig. 5, Eq. 10-11) with two learned additive scores.

    Additive scores are the survey's choice; IAN (Ma et al.) itself uses the
    activated general score ``tanh(k^T W q + b)`` of Table II.
    ``forward(F1, F2, mask1=None, mask2=None)`` (masks
    boolean ``(..., n_f^(i))``, ``True`` = may attend) returns :class:`CoAttention`.

    Args:
        d_f1: the feature size of set 1.
        d_f2: the feature size of set 2.
        d_w: the hidden size of the additive scores.
        **sets: ``d_k1``, ``d_k2``, ``plain`` (:class:`TwoSetOptions`).

    Shape:
        F1: ``(..., n_f^(1), d_f^(1))``; F2: ``(..., n_f^(2), d_f^(2))``;
        masks ``(..., n_f^(i))``.
        Outputs as in :func:`interactive_co_attention`.

    Raises:
        ValueError: if a size is not an integer >= 1, or ``plain`` with ``d_k^(i) != d_f^(i)``;
            in ``forward``, as :func:`interactive_co_attention`.
    """

    def __init__(self, d_f1: int, d_f2: int, d_w: int, **sets: Unpack[TwoSetOptions]) -> None:
        check_integers("InteractiveCoAttention", minimum=1, d_f1=d_f1, d_f2=d_f2, d_w=d_w)
        super().__init__(d_f1, d_f2, **sets)
        self.score1 = AdditiveScore(self.d_k2, self.d_k1, d_w)
        self.score2 = AdditiveScore(self.d_k1, self.d_k2, d_w)

    def forward(self, F1: Tensor, F2: Tensor, **masks: Unpack[CoMasks]) -> CoAttention:
        K1, V1, K2, V2 = self.kv(F1, F2, masks)
        return interactive_co_attention(K1, V1, K2, V2, self.score1, self.score2, **masks)


@catalogued("eq12", "eq13")
class Affinity(nn.Module):
    """A learned affinity matrix: bilinear (Eq. 12) or concatenation (Eq. 13).

    ``kind="bilinear"``: ``W_A`` ``(d_k1, d_k2)``, with ``act``; ``kind="concat"``:
    ``w_A`` ``(3 d_k,)``, needs ``d_k1 == d_k2``.

    Args:
        d_k1: the key size of set 1.
        d_k2: the key size of set 2.
        kind: ``"bilinear"`` or ``"concat"``.
        act: the activation of the bilinear form (``tanh`` by default).

    Shape:
        ``forward(K1, K2)``: K1 ``(..., n_f^(1), d_k^(1))``, K2 ``(..., n_f^(2), d_k^(2))``.
        Returns A: ``(..., n_f^(1), n_f^(2))``.

    Raises:
        ValueError: if a size is not an integer >= 1, for an unknown kind, or
            ``kind="concat"`` with ``d_k1 != d_k2``.
    """

    def __init__(self, d_k1: int, d_k2: int, kind: str = "bilinear", act: Activation = torch.tanh) -> None:
        check_integers("Affinity", minimum=1, d_k1=d_k1, d_k2=d_k2)
        super().__init__()
        if kind == "bilinear":
            self.W_A = nn.Parameter(torch.randn(d_k1, d_k2) / math.sqrt(math.sqrt(d_k1 * d_k2)))
        elif kind == "concat":
            check_dim_equal(d_k1, d_k2, "the concatenation affinity (Eq. 13)", "d_k^(1)", "d_k^(2)")
            self.w_A = nn.Parameter(torch.randn(3 * d_k1) / math.sqrt(3 * d_k1))
        else:
            raise ValueError(f"affinity kind must be 'bilinear' (Eq. 12) or 'concat' (Eq. 13), got {kind!r}")
        self.kind, self.act = kind, act

    def forward(self, K1: Tensor, K2: Tensor) -> Tensor:
        if self.kind == "bilinear":
            return affinity_matrix(K1, K2, self.W_A, self.act)
        return concat_affinity_matrix(K1, K2, self.w_A)


@catalogued("eq14", "eq15")
class ParallelCoAttention(_TwoSets):
    """Fine-grained parallel co-attention (Fig. 6) with learned weights.

    ``forward(F1, F2, mask1=None, mask2=None)`` (masks boolean ``(..., n_f^(i))``,
    ``True`` = may attend) returns :class:`CoAttention`; the last affinity
    matrix is kept in ``self.last_A`` for plotting.

    Args:
        d_f1: the feature size of set 1.
        d_f2: the feature size of set 2.
        d_w: the hidden size of the additive scores.
        affinity: ``"bilinear"`` (Eq. 12) or ``"concat"`` (Eq. 13).
        scores: ``"additive"`` (Eq. 14-15, own ``W_1, W_2, w_1, w_2``) or
            ``"max"`` (Eq. 16, no extra weights).
        **sets: ``d_k1``, ``d_k2``, ``plain`` (:class:`TwoSetOptions`).

    Shape:
        F1: ``(..., n_f^(1), d_f^(1))``; F2: ``(..., n_f^(2), d_f^(2))``;
        masks ``(..., n_f^(i))``.
        Outputs as in :func:`parallel_co_attention`.

    Raises:
        ValueError: if a size is not an integer >= 1, for an unknown ``scores`` or
            ``affinity`` name, or ``plain``
            with ``d_k^(i) != d_f^(i)``.
    """

    def __init__(
        self,
        d_f1: int,
        d_f2: int,
        d_w: int,
        affinity: str = "bilinear",
        scores: str = "additive",
        **sets: Unpack[TwoSetOptions],
    ) -> None:
        check_integers("ParallelCoAttention", minimum=1, d_f1=d_f1, d_f2=d_f2, d_w=d_w)
        super().__init__(d_f1, d_f2, **sets)
        if scores not in ("additive", "max"):
            raise ValueError(f"scores must be 'additive' (Eq. 14-15) or 'max' (Eq. 16), got {scores!r}")
        self.affinity = Affinity(self.d_k1, self.d_k2, affinity)
        self.scores = scores
        if scores == "additive":
            self.W1 = nn.Linear(self.d_k1, d_w, bias=False)
            self.W2 = nn.Linear(self.d_k2, d_w, bias=False)
            self.w1 = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))
            self.w2 = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))
        self.last_A: Tensor | None = None

    def forward(self, F1: Tensor, F2: Tensor, **masks: Unpack[CoMasks]) -> CoAttention:
        K1, V1, K2, V2 = self.kv(F1, F2, masks)
        A = self.affinity(K1, K2)
        self.last_A = A.detach()
        if self.scores == "max":
            return max_pooled_co_attention(V1, V2, A, **masks)
        return parallel_co_attention(K1, V1, K2, V2, A, self.W1.weight, self.W2.weight, self.w1, self.w2, **masks)


@catalogued("extra:multi-grained-co-attention")
class MultiGrainedCoAttention(_TwoSets):
    """Multi-grained co-attention: interactive (coarse) + max-pooled affinity (fine), as the survey describes it.

    (Fan et al.'s own fine-grained context-to-aspect step differs: see
    :func:`multi_grained_co_attention`.)
    ``forward(F1, F2, mask1=None, mask2=None)`` (masks boolean ``(..., n_f^(i))``,
    ``True`` = may attend) returns :class:`MultiGrainedOutput`.

    Args:
        d_f1: the feature size of set 1.
        d_f2: the feature size of set 2.
        d_w: the hidden size of the additive scores.
        affinity: as in :class:`ParallelCoAttention`.
        **sets: ``d_k1``, ``d_k2``, ``plain`` (:class:`TwoSetOptions`).

    Shape:
        F1: ``(..., n_f^(1), d_f^(1))``; F2: ``(..., n_f^(2), d_f^(2))``;
        masks ``(..., n_f^(i))``.
        Returns c: ``(..., 2 d_v^(1) + 2 d_v^(2))``.

    Raises:
        ValueError: if a size is not an integer >= 1, for an unknown ``affinity``, or ``plain``
            with ``d_k^(i) != d_f^(i)``; in ``forward``, as :func:`multi_grained_co_attention`.
    """

    def __init__(
        self, d_f1: int, d_f2: int, d_w: int, affinity: str = "bilinear", **sets: Unpack[TwoSetOptions]
    ) -> None:
        check_integers("MultiGrainedCoAttention", minimum=1, d_f1=d_f1, d_f2=d_f2, d_w=d_w)
        super().__init__(d_f1, d_f2, **sets)
        self.score1 = AdditiveScore(self.d_k2, self.d_k1, d_w)
        self.score2 = AdditiveScore(self.d_k1, self.d_k2, d_w)
        self.affinity = Affinity(self.d_k1, self.d_k2, affinity)

    def forward(self, F1: Tensor, F2: Tensor, **masks: Unpack[CoMasks]) -> MultiGrainedOutput:
        K1, V1, K2, V2 = self.kv(F1, F2, masks)
        A = self.affinity(K1, K2)
        return multi_grained_co_attention(K1, V1, K2, V2, self.score1, self.score2, A, **masks)


_M = "attnsurvey.feature_related.co_attention."
