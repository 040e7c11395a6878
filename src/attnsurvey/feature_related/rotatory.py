"""§3.1.1 Multiplicity of features, part 2: rotatory attention, Eq. (17)-(20).

Rotatory attention (LCR-Rot) serves aspect-based sentiment analysis, where
one sentence gives three feature sets: the target phrase ``F^t``, the left
context ``F^l`` before it, and the right context ``F^r`` after it. Attention
rotates between them:

* Eq. (17): the target phrase is mean-pooled into ``r^t``;
* Eq. (18): ``r^t`` queries the left and the right context, giving ``r^l`` and
  ``r^r`` (which context words matter for this target?);
* Eq. (19): ``r^l`` and ``r^r`` query the target phrase, giving the
  left-aware and right-aware target representations ``r^{l_t}`` and ``r^{r_t}``
  (which target words matter, given each context?);
* Eq. (20): ``r = concat(r^l, r^r, r^{l_t}, r^{r_t})`` goes to the output model.

The *repeated* (multi-hop) form rotates several times: hop ``s + 1`` queries
the left context with ``r^{l_t}`` of hop ``s`` (and the right context with
``r^{r_t}``), then the target again. Here every hop calls the same four score
functions, so the hops share their weights. That is this book's
simplification: the public LCR-Rot-hop code (HAABSA, and HAABSA++ after it)
creates separate attention weights for each hop.

As in the survey (and LCR-Rot), keys and values are the feature vectors
themselves (``W_K = W_V = I``); the default score is the activated general
score ``tanh(k^T W q + b)`` of Table II.

**Empty contexts.** A target at the start of a sentence has no left context
(``n_f^l = 0``), and padding can mask a whole context. Then there is nothing to
average: we define the context representation as the zero vector,
``r^l = 0`` (the empty sum of Eq. 4, and what the masked softmax gives for a
fully-masked row). Eq. (19) still runs with the zero query; with the
activated general score every target word then scores ``tanh(b)``, so
``r^{l_t}`` is the plain mean of the target phrase. The target phrase itself
must not be empty (Eq. 17 divides by ``n_f^t``).

Shapes are batch-first rows: ``F^t`` ``(..., n_f^t, d_t)``, ``F^l``
``(..., n_f^l, d_c)``, ``F^r`` ``(..., n_f^r, d_c)``; masks boolean
``(..., n_f^x)``, ``True`` = a real word (may attend).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_batch_broadcast, check_dim_equal, check_integers, check_min_rank, check_nonempty
from ..catalog import catalogued
from ..general_mechanisms.scoring import make_score
from ..masking import masked_mean
from .co_attention import _check_set_mask, attend_vector

ScoreFn = Callable[[Tensor, Tensor], Tensor]

CHAPTER = "chapters/ch03_1_1_feature_multiplicity.ipynb"


class RotatoryOutput(NamedTuple):
    """Result of rotatory attention (last hop).

    ``r`` ``(..., 2 d_c + 2 d_t)`` is Eq. (20); ``r_l, r_r`` ``(..., d_c)`` and
    ``r_lt, r_rt`` ``(..., d_t)`` its parts; ``a_l`` ``(..., n_f^l)``, ``a_r``
    ``(..., n_f^r)``, ``a_lt`` and ``a_rt`` ``(..., n_f^t)`` the weights of the
    last hop; ``hops`` a list with the weights ``(a_l, a_r, a_lt, a_rt)`` of every hop.
    """

    r: Tensor
    r_l: Tensor
    r_r: Tensor
    r_lt: Tensor
    r_rt: Tensor
    a_l: Tensor
    a_r: Tensor
    a_lt: Tensor
    a_rt: Tensor
    hops: list


def _check_words(F: Tensor, x: str, allow_empty: bool) -> None:
    as_tensor(F, f"F^{x}")
    check_min_rank(F, 2, f"F^{x}", f"(..., n_f^{x}, d_f^{x})")
    if not allow_empty:
        check_nonempty(F, -2, f"F^{x}", f"n_f^{x}")


@catalogued("eq17", title="Mean-pooled target phrase r^t (rotatory attention)")
def target_pooling(F_t: Tensor, mask_t: Tensor | None = None) -> Tensor:
    """Mean-pooled target phrase, Eq. (17): ``r^t = (1/n_f^t) sum_i f^t_i``.

    Args:
        F_t: the target phrase's feature vectors.
        mask_t: boolean ``(..., n_f^t)``, ``True`` = a real word (may attend;
            padding is left out of the mean; a fully-masked phrase gives zero).

    Shape:
        F_t: ``(..., n_f^t, d_t)``. Returns ``(..., d_t)``.

    Returns:
        The target representation ``r^t``.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: if the target phrase is empty (``n_f^t = 0``) or the mask is bad.
    """
    _check_words(F_t, "t", allow_empty=False)
    _check_set_mask(mask_t, F_t, "_t")
    return masked_mean(F_t, mask_t)


@catalogued("eq18", title="Target-to-context scores e^l_i = score(r^t, k^l_i), giving r^l and r^r")
def context_representation(
    r_t: Tensor, F_c: Tensor, score: ScoreFn, mask_c: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Target-to-context attention, Eq. (18): ``e^l_i = score(r^t, k^l_i)``, then softmax and Eq. (4).

    Keys and values are the context's feature vectors (``K = V = F^l``). An
    empty (``n_f^l = 0``) or fully-masked context gives ``r^l = 0``.

    Args:
        r_t: the target representation (the query).
        F_c: the context's feature vectors.
        score: the score function ``(Q, K) -> e``.
        mask_c: boolean ``(..., n_f^l)``, ``True`` = may attend.

    Shape:
        r_t: ``(..., d_t)``; F_c: ``(..., n_f^l, d_c)``.
        Returns r_l: ``(..., d_c)``, a_l: ``(..., n_f^l)``.

    Returns:
        ``(r^l, a^l)``: the context representation and the weights.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: on shape problems or a bad mask.
    """
    as_tensor(r_t, "r^t")
    _check_words(F_c, "l", allow_empty=True)
    _check_set_mask(mask_c, F_c, "_c")
    return attend_vector(r_t, F_c, F_c, score, mask_c)


@catalogued("eq19", title="Context-to-target scores e^{l_t}_i = score(r^l, k^t_i), giving r^{l_t} and r^{r_t}")
def target_representation(
    r_c: Tensor, F_t: Tensor, score: ScoreFn, mask_t: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Context-to-target attention, Eq. (19): ``e^{l_t}_i = score(r^l, k^t_i)``, softmax, Eq. (4).

    Keys and values are the target's feature vectors (``K = V = F^t``).

    Args:
        r_c: the context representation ``r^l`` or ``r^r`` (the query).
        F_t: the target phrase's feature vectors.
        score: the score function ``(Q, K) -> e``.
        mask_t: boolean ``(..., n_f^t)``, ``True`` = may attend (a fully-masked
            phrase gives 0).

    Shape:
        r_c: ``(..., d_c)``; F_t: ``(..., n_f^t, d_t)``.
        Returns r_lt: ``(..., d_t)``, a_lt: ``(..., n_f^t)``.

    Returns:
        ``(r^{l_t}, a^{l_t})``: the target representation and the weights.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: on an empty target phrase, shape problems or a bad mask.
    """
    as_tensor(r_c, "r^l")
    _check_words(F_t, "t", allow_empty=False)
    _check_set_mask(mask_t, F_t, "_t")
    return attend_vector(r_c, F_t, F_t, score, mask_t)


@catalogued("eq20", title="Final representation r = concat(r^l, r^r, r^{l_t}, r^{r_t})")
def rotatory_representation(r_l: Tensor, r_r: Tensor, r_lt: Tensor, r_rt: Tensor) -> Tensor:
    """The final representation, Eq. (20): ``r = concat(r^l, r^r, r^{l_t}, r^{r_t})``.

    Args:
        r_l: the left context representation.
        r_r: the right context representation.
        r_lt: the left-aware target representation.
        r_rt: the right-aware target representation.

    Shape:
        r_l: ``(..., d_v^l)``; r_r: ``(..., d_v^r)``; r_lt, r_rt: ``(..., d_v^t)``.
        Returns ``(..., d_v^l + d_v^r + 2 d_v^t)``.

    Returns:
        The concatenation ``r``.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: if the two target representations differ in size or the
            batch shapes differ.
    """
    for name, x in (("r^l", r_l), ("r^r", r_r), ("r^{l_t}", r_lt), ("r^{r_t}", r_rt)):
        as_tensor(x, name)
    check_dim_equal(r_lt.shape[-1], r_rt.shape[-1], "Eq. (20)", "d_v^t of r^{l_t}", "d_v^t of r^{r_t}")
    shapes = {tuple(x.shape[:-1]) for x in (r_l, r_r, r_lt, r_rt)}
    if len(shapes) != 1:
        raise ValueError(f"Eq. (20) needs equal batch shapes, got {sorted(shapes)}")
    return torch.cat([r_l, r_r, r_lt, r_rt], dim=-1)


@catalogued(
    "extra:rotatory-multi-hop",
    title="Repeated (multi-hop) rotatory attention: r^{l_t}, r^{r_t} query the contexts again",
)
@catalogued("eq20")
def rotatory_attention(
    F_t: Tensor,
    F_l: Tensor,
    F_r: Tensor,
    score_l: ScoreFn,
    score_lt: ScoreFn,
    score_r: ScoreFn | None = None,
    score_rt: ScoreFn | None = None,
    hops: int = 1,
    mask_t: Tensor | None = None,
    mask_l: Tensor | None = None,
    mask_r: Tensor | None = None,
) -> RotatoryOutput:
    """Rotatory attention, Eq. (17)-(20), optionally repeated ``hops`` times.

    Hop 1: ``r^t`` (Eq. 17) queries both contexts (Eq. 18), the results query
    the target (Eq. 19). Hop ``s > 1``: ``r^{l_t}`` and ``r^{r_t}`` of hop
    ``s - 1`` query the left and right contexts, then the target again.
    Contexts may be empty (``n_f^l = 0``) or fully masked: then ``r^l = 0``
    (see the module notes).

    Args:
        F_t: the target phrase's feature vectors.
        F_l: the left context's feature vectors.
        F_r: the right context's feature vectors.
        score_l: ``score(Q (..., 1, d_t), K (..., n, d_c))`` of the left context (Eq. 18).
        score_lt: ``score(Q (..., 1, d_c), K (..., n_f^t, d_t))`` of the target
            from the left (Eq. 19).
        score_r: as score_l for the right context (default score_l).
        score_rt: as score_lt from the right (default score_lt).
        hops: the number of rotations.
        mask_t: boolean ``(..., n_f^t)``, ``True`` = may attend (a real word).
        mask_l: boolean ``(..., n_f^l)``, ``True`` = may attend (a real word).
        mask_r: boolean ``(..., n_f^r)``, ``True`` = may attend (a real word).

    Shape:
        F_t: ``(..., n_f^t, d_t)``; F_l: ``(..., n_f^l, d_c)``; F_r: ``(..., n_f^r, d_c)``.
        Returns r: ``(..., 2 d_c + 2 d_t)``.

    Returns:
        :class:`RotatoryOutput`: Eq. (20) of the last hop and all weights.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: for ``hops < 1``, an empty target, shape problems or a bad mask.
    """
    if not isinstance(hops, int) or hops < 1:
        raise ValueError(f"hops must be a positive integer, got {hops!r}")
    _check_words(F_t, "t", allow_empty=False)
    _check_words(F_l, "l", allow_empty=True)
    _check_words(F_r, "r", allow_empty=True)
    check_dim_equal(F_l.shape[-1], F_r.shape[-1], "rotatory attention", "d_c of F^l", "d_c of F^r")
    check_batch_broadcast(F_t, F_l, "F^t", "F^l")
    check_batch_broadcast(F_t, F_r, "F^t", "F^r")
    score_r = score_l if score_r is None else score_r
    score_rt = score_lt if score_rt is None else score_rt
    r_t = target_pooling(F_t, mask_t)
    q_l = q_r = r_t
    history = []
    for _ in range(hops):
        r_l, a_l = context_representation(q_l, F_l, score_l, mask_l)
        r_r, a_r = context_representation(q_r, F_r, score_r, mask_r)
        r_lt, a_lt = target_representation(r_l, F_t, score_lt, mask_t)
        r_rt, a_rt = target_representation(r_r, F_t, score_rt, mask_t)
        history.append((a_l, a_r, a_lt, a_rt))
        q_l, q_r = r_lt, r_rt
    r = rotatory_representation(r_l, r_r, r_lt, r_rt)
    return RotatoryOutput(r, r_l, r_r, r_lt, r_rt, a_l, a_r, a_lt, a_rt, history)


@catalogued("eq18", "eq19", "extra:rotatory-multi-hop")
class RotatoryAttention(nn.Module):
    """Rotatory attention (LCR-Rot, Eq. 17-20) with four learned score functions.

    ``forward(F_t, F_l, F_r, mask_t=None, mask_l=None, mask_r=None, hops=None)`` (masks
    boolean ``(..., n_f^x)``, ``True`` = may attend) returns :class:`RotatoryOutput`;
    ``r`` has size ``out_dim = 2 d_c + 2 d_t``.

    Args:
        d_t: target feature size.
        d_c: context feature size.
        hops: number of rotations (1 = LCR-Rot, more = the repeated form; all
            hops share the four score functions, a simplification, see the
            module notes).
        score: a Table II name (default ``"activated-general"``, as in the survey).

    Shape:
        F_t: ``(..., n_f^t, d_t)``; F_l: ``(..., n_f^l, d_c)``; F_r: ``(..., n_f^r, d_c)``.
        Returns r: ``(..., 2 d_c + 2 d_t)``.

    Raises:
        ValueError: if a size is not an integer >= 1, for ``hops < 1`` or an unknown
            score; in ``forward``, if a
            feature size differs from the module's or on the errors of
            :func:`rotatory_attention`.
    """

    def __init__(self, d_t: int, d_c: int, hops: int = 1, score: str = "activated-general") -> None:
        check_integers("RotatoryAttention", minimum=1, d_t=d_t, d_c=d_c)
        if not isinstance(hops, int) or hops < 1:
            raise ValueError(f"hops must be a positive integer, got {hops!r}")
        super().__init__()
        if hops < 1:
            raise ValueError(f"hops must be a positive integer, got {hops}")
        self.d_t, self.d_c, self.hops = d_t, d_c, hops
        self.score_l = make_score(score, d_t, d_c)
        self.score_r = make_score(score, d_t, d_c)
        self.score_lt = make_score(score, d_c, d_t)
        self.score_rt = make_score(score, d_c, d_t)
        self.out_dim = 2 * d_c + 2 * d_t

    def forward(
        self,
        F_t: Tensor,
        F_l: Tensor,
        F_r: Tensor,
        mask_t: Tensor | None = None,
        mask_l: Tensor | None = None,
        mask_r: Tensor | None = None,
        hops: int | None = None,
    ) -> RotatoryOutput:
        as_tensor(F_t, "F_t"), as_tensor(F_l, "F_l"), as_tensor(F_r, "F_r")
        check_dim_equal(F_t.shape[-1], self.d_t, "RotatoryAttention", "d_t of F^t", "d_t of the module")
        check_dim_equal(F_l.shape[-1], self.d_c, "RotatoryAttention", "d_c of F^l", "d_c of the module")
        return rotatory_attention(
            F_t,
            F_l,
            F_r,
            self.score_l,
            self.score_lt,
            self.score_r,
            self.score_rt,
            self.hops if hops is None else hops,
            mask_t,
            mask_l,
            mask_r,
        )


_M = "attnsurvey.feature_related.rotatory."
