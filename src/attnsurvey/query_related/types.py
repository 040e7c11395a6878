"""§3.3.1 Types of queries: self-attention queries, Eq. (33)-(37).

A *basic* query comes straight from the task model (a decoder state, a vector
of side information); a *specialized* query is built by another attention
mechanism (co-attention, rotatory attention, attention-via-attention, §3.1).
This module covers the third type, the *self-attention* query, in its three
readings:

* Eq. (33)  no query at all: ``score(k_l) = w^T act(W k_l + b)``
* Eq. (34)  a learned constant query: ``score(k_l) = q^T k_l``
* Eq. (35)  one query per feature vector: ``Q = W_Q F`` (rows: ``F @ W_Q.T``)

and the two ways the survey gives to turn self-attention contexts into new
feature vectors:

* Eq. (36)  replacement: ``f_new = c``
* Eq. (37)  residual + normalisation: ``f_new = Normalize(f_old + c)``

Extras from the NLP review: the structured self-attentive sentence embedding
(``A = softmax(W_s2 tanh(W_s1 H^T))``, ``M = A H``, with the redundancy penalty
``||A A^T - I||_F^2``), and the Token2Token / Source2Token split of
self-attention by what plays the query (DiSAN's names; ``source2token``
follows the review's description, not DiSAN's query-free form).

Shapes are batch-first rows: ``F`` is ``(..., n_f, d_f)``. Masks are boolean,
``True`` = may attend; a fully-masked row gives zero weights and a zero context.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .._checks import (
    as_tensor,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_positive,
    check_rank,
    check_same_shape,
    check_weight,
)
from ..attention import attend_scores
from ..catalog import catalogued, declare
from ..general_mechanisms.scoring import ScoreModule, additive_score, make_score, scaled_dot_score
from ..general_model import attend
from ..masking import require_boolean_mask, zero_masked
from ..numeric_env import portable_sqrt

CHAPTER = "chapters/ch03_3_1_query_types.ipynb"

Activation = Callable[[Tensor], Tensor]
ScoreFn = Callable[[Tensor, Tensor], Tensor]


def _check_features(X: Tensor, symbol: str, layout: str) -> None:
    as_tensor(X, symbol)
    check_min_rank(X, 2, symbol, layout)


def _pool(e: Tensor, V: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Align scores ``e`` ``(..., n_f)`` (Eq. 3) and average ``V`` (Eq. 4)."""
    if mask is not None and mask.dim() > e.dim():  # a (..., 1, n_f) mask; (n_f,) and (..., n_f) broadcast
        mask = mask.squeeze(-2)
    return attend_scores(e, V, mask)


# ----------------------------------------------------------------------------------
# Eq. (33): self-attention without a query
# ----------------------------------------------------------------------------------
@catalogued("eq33", title="Self-attention score without a query, w^T act(W k_l + b)")
def queryless_score(K: Tensor, W: Tensor, b: Tensor, w: Tensor, act: Activation = torch.tanh) -> Tensor:
    """Query-free score, Eq. (33): ``e_l = w^T act(W k_l + b)``.

    One score per key and no query axis. The bias ``b`` plays the role of a
    (constant) query.

    Args:
        K: keys.
        W: the key map ``W``.
        b: the bias ``b``.
        w: the output vector ``w``.
        act: the activation (``tanh`` by default).

    Shape:
        K: ``(..., n_f, d_k)``; W: ``(d_w, d_k)``; b: ``(d_w,)``; w: ``(d_w,)``.
        Returns e: ``(..., n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if K has fewer than 2 dims or a weight does not match ``d_k`` or ``d_w``.
    """
    _check_features(K, "K", "(..., n_f, d_k)")
    check_rank(w, 1, "w", "(d_w,)")
    d_w, d_k = w.shape[0], K.shape[-1]
    check_weight(W, (d_w, d_k), "W", "(d_w, d_k)")
    check_weight(b, (d_w,), "b", "(d_w,)")
    return act(K @ W.T + b) @ w


@catalogued("eq33")
def queryless_attention(
    K: Tensor,
    V: Tensor,
    W: Tensor,
    b: Tensor,
    w: Tensor,
    mask: Tensor | None = None,
    act: Activation = torch.tanh,
) -> tuple[Tensor, Tensor]:
    """Self-attention pooling without a query: Eq. (33), then Eq. (3)-(4).

    Args:
        K: keys.
        V: values.
        W: the key map ``W`` of :func:`queryless_score`.
        b: the bias ``b``.
        w: the output vector ``w``.
        mask: boolean ``(..., n_f)``, ``True`` = may attend; None attends everywhere.
        act: the activation (``tanh`` by default).

    Shape:
        K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``; weights as in
        :func:`queryless_score`. Returns c: ``(..., d_v)``, a: ``(..., n_f)``.

    Returns:
        ``(c, a)``: the context and the weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if K and V hold different numbers of vectors or a weight
            shape does not match.
    """
    _check_features(V, "V", "(..., n_f, d_v)")
    e = queryless_score(zero_masked(K, mask), W, b, w, act)  # padded keys inert in gradients too
    check_dim_equal(K.shape[-2], V.shape[-2], "self-attention pooling", "n_f of K", "n_f of V")
    return _pool(e, V, mask)


@catalogued("eq33")
class QuerylessAttention(nn.Module):
    """Eq. (33) with learned ``W`` ``(d_w, d_f)``, ``b`` ``(d_w,)`` and ``w`` ``(d_w,)``.

    Keys and values are the feature vectors themselves (``K = V = F``).
    ``forward(F, mask=None)`` with mask boolean ``(..., n_f)``, ``True`` = may
    attend, returns ``(c, a)``.

    Args:
        d_f: the feature size.
        d_w: the hidden size of the score.

    Shape:
        F: ``(..., n_f, d_f)``; mask: ``(..., n_f)``.
        Returns c: ``(..., d_f)``, a: ``(..., n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as
            :func:`queryless_attention`.
    """

    def __init__(self, d_f: int, d_w: int) -> None:
        check_integers("QuerylessAttention", minimum=1, d_f=d_f, d_w=d_w)
        super().__init__()
        self.W = nn.Linear(d_f, d_w)  # W and b of Eq. (33)
        self.w = nn.Parameter(torch.randn(d_w) / d_w**0.5)

    def forward(self, F: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return queryless_attention(F, F, self.W.weight, self.W.bias, self.w, mask)


# ----------------------------------------------------------------------------------
# Eq. (34): a learned query
# ----------------------------------------------------------------------------------
@catalogued("eq34", title="Self-attention with a learned query vector, q^T k_l")
def learned_query_score(K: Tensor, q: Tensor) -> Tensor:
    """Score with a trainable constant query, Eq. (34): ``e_l = q^T k_l``.

    Args:
        K: keys.
        q: the learned query (one question for every input, e.g. "which words
            decide the class?").

    Shape:
        K: ``(..., n_f, d_k)``; q: ``(d_k,)``. Returns e: ``(..., n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: unless ``q`` is a vector of size ``d_k`` and K has at least 2 dims.
    """
    _check_features(K, "K", "(..., n_f, d_k)")
    as_tensor(q, "q")
    if q.dim() != 1 or q.shape[0] != K.shape[-1]:
        raise ValueError(f"learned query q must have shape (d_k,) = ({K.shape[-1]},), got {tuple(q.shape)}")
    return K @ q


@catalogued("eq34")
def learned_query_attention(K: Tensor, V: Tensor, q: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Attention pooling with a learned query: Eq. (34), then Eq. (3)-(4).

    Args:
        K: keys.
        V: values.
        q: the learned query.
        mask: boolean ``(..., n_f)``, ``True`` = may attend; None attends everywhere.

    Shape:
        K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``; q: ``(d_k,)``.
        Returns c: ``(..., d_v)``, a: ``(..., n_f)``.

    Returns:
        ``(c, a)``: the context and the weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    _check_features(V, "V", "(..., n_f, d_v)")
    e = learned_query_score(zero_masked(K, mask), q)
    check_dim_equal(K.shape[-2], V.shape[-2], "learned-query attention", "n_f of K", "n_f of V")
    return _pool(e, V, mask)


@catalogued("eq34")
class LearnedQueryAttention(nn.Module):
    """Eq. (34) with a trainable query ``q`` ``(d_k,)`` and keys ``K = F W_K^T``.

    Values are the features. ``forward(F, mask=None)`` with mask boolean
    ``(..., n_f)``, ``True`` = may attend, returns ``(c, a)``.

    Args:
        d_f: the feature size.
        d_k: the key size; None uses the features themselves as keys (``W_K = I``).

    Shape:
        F: ``(..., n_f, d_f)``; mask: ``(..., n_f)``.
        Returns c: ``(..., d_f)``, a: ``(..., n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as
            :func:`learned_query_attention`.
    """

    def __init__(self, d_f: int, d_k: int | None = None) -> None:
        check_integers("LearnedQueryAttention", minimum=1, d_f=d_f)
        check_integers("LearnedQueryAttention", minimum=1, allow_none=True, d_k=d_k)
        super().__init__()
        self.W_K = None if d_k is None else nn.Linear(d_f, d_k, bias=False)
        self.q = nn.Parameter(torch.zeros(d_f if d_k is None else d_k))

    def forward(self, F: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        F = zero_masked(as_tensor(F, "F"), mask)  # a NaN in a padded slot reaches no W_K gradient
        K = F if self.W_K is None else self.W_K(F)
        return learned_query_attention(K, F, self.q, mask)


def mean_pool(F: Tensor, mask: Tensor | None = None) -> Tensor:
    """Unweighted (masked) average of the feature vectors: the no-attention baseline.

    Equal to attention with all scores equal (uniform weights).

    Args:
        F: feature vectors.
        mask: boolean ``(..., n_f)``, ``True`` = may attend (counted in the
            mean); None averages all.

    Shape:
        F: ``(..., n_f, d_f)``. Returns ``(..., d_f)``.

    Returns:
        The mean; zero for an example with no allowed position.

    Raises:
        TypeError: if F is not a floating-point tensor.
        ValueError: if F has fewer than 2 dims.
    """
    _check_features(F, "F", "(..., n_f, d_f)")
    e = torch.zeros(F.shape[:-1], dtype=F.dtype, device=F.device)
    return _pool(e, F, mask)[0]


# ----------------------------------------------------------------------------------
# Eq. (35): queries from the features; the QKV self-attention layer (Token2Token)
# ----------------------------------------------------------------------------------
@catalogued("eq35", title="Queries from the feature vectors, Q = W_Q F")
def feature_queries(F: Tensor, W_Q: Tensor) -> Tensor:
    """Queries from the feature vectors, Eq. (35): ``Q = W_Q F``.

    Args:
        F: feature vectors.
        W_Q: the query map.

    Shape:
        F: ``(..., n_f, d_f)``; W_Q: ``(d_q, d_f)``. Returns Q: ``(..., n_f, d_q)``.

    Returns:
        One query per feature vector.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if ``W_Q`` is not ``(d_q, d_f)`` or F has fewer than 2 dims.
    """
    as_tensor(F, "F"), as_tensor(W_Q, "W_Q")
    _check_features(F, "F", "(..., n_f, d_f)")
    check_weight(W_Q, (W_Q.shape[0], F.shape[-1]), "W_Q", "(d_q, d_f)")
    return F @ W_Q.T


@catalogued(
    "extra:qkv-self-attention",
    title="QKV self-attention layer; without positions it is permutation-equivariant (nndl 8.3)",
)
@catalogued("eq35")
def self_attention(
    F: Tensor,
    W_Q: Tensor,
    W_K: Tensor,
    W_V: Tensor,
    mask: Tensor | None = None,
    score: ScoreFn = scaled_dot_score,
) -> tuple[Tensor, Tensor]:
    """The query-key-value self-attention layer: Eq. (35) and Eq. (1)-(4).

    Every feature vector asks its own question: ``Q = W_Q F``, ``K = W_K F``,
    ``V = W_V F``; row ``i`` of the result is the context for query ``q_i``.
    The weights depend on the contents only, so permuting the rows of ``F``
    permutes the rows of ``C`` the same way (positions must be added to ``F``
    if order matters).

    Args:
        F: feature vectors.
        W_Q: the query map.
        W_K: the key map.
        W_V: the value map.
        mask: boolean, broadcastable to ``(..., n_f, n_f)``, ``True`` = may attend.
        score: the score function ``(Q, K) -> e`` (scaled dot product by default).

    Shape:
        F: ``(..., n_f, d_f)``; W_Q, W_K: ``(d_k, d_f)``; W_V: ``(d_v, d_f)``.
        Returns C: ``(..., n_f, d_v)``, A: ``(..., n_f, n_f)``.

    Returns:
        ``(C, A)``: the contexts and the weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on weight shape mismatches or a mask that is not boolean (a
            float 0/1 mask would shift the scores, not select).
    """
    as_tensor(F, "F"), as_tensor(W_Q, "W_Q"), as_tensor(W_K, "W_K"), as_tensor(W_V, "W_V")
    require_boolean_mask(mask, "self_attention")
    F = zero_masked(F, mask)  # a padded token holding NaN is inert in the gradients too
    Q = feature_queries(F, W_Q)
    check_weight(W_K, (W_K.shape[0], F.shape[-1]), "W_K", "(d_k, d_f)")
    check_weight(W_V, (W_V.shape[0], F.shape[-1]), "W_V", "(d_v, d_f)")
    return attend(Q, F @ W_K.T, F @ W_V.T, mask, score)


token2token = self_attention
declare(f"{__name__}.token2token", "extra:token2token-source2token")
"""Token2Token self-attention: the QKV layer, one instance of DiSAN's Token2Token family.

One query per token, a matrix ``(..., n_f, d_v)`` out.
"""


@catalogued("extra:qkv-self-attention")
class SelfAttention(nn.Module):
    """Module form of :func:`self_attention` with learned ``W_Q``, ``W_K`` ``(d_k, d_f)``, ``W_V`` ``(d_v, d_f)``.

    ``forward(F, mask=None)`` with mask boolean broadcastable to ``(..., n_f, n_f)``,
    ``True`` = may attend, returns ``(C, A)``.

    Args:
        d_f: the feature size.
        d_k: the query/key size (defaults to ``d_f``).
        d_v: the value size (defaults to ``d_f``).
        score: a Table II name (default ``scaled-multiplicative``).

    Shape:
        F: ``(..., n_f, d_f)``. Returns C: ``(..., n_f, d_v)``, A: ``(..., n_f, n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1 or ``score`` is unknown;
            in ``forward``, as :func:`self_attention`.
    """

    def __init__(
        self, d_f: int, d_k: int | None = None, d_v: int | None = None, score: str = "scaled-multiplicative"
    ) -> None:
        super().__init__()
        d_k = d_f if d_k is None else d_k
        d_v = d_f if d_v is None else d_v
        check_integers("SelfAttention", minimum=1, d_f=d_f, d_k=d_k, d_v=d_v)
        self.W_Q = nn.Linear(d_f, d_k, bias=False)
        self.W_K = nn.Linear(d_f, d_k, bias=False)
        self.W_V = nn.Linear(d_f, d_v, bias=False)
        self.score: ScoreModule = make_score(score, d_k, d_k)

    def forward(self, F: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self_attention(F, self.W_Q.weight, self.W_K.weight, self.W_V.weight, mask, self.score)


@catalogued(
    "extra:token2token-source2token",
    title="Token2Token (matrix out) vs Source2Token (vector out) self-attention (DiSAN's names; Source2Token as the review describes it)",
)
def source2token(
    F: Tensor,
    W1: Tensor,
    W2: Tensor,
    w: Tensor,
    b: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Source2Token self-attention as the NLP review describes it: the source as the query, a vector out.

    The source is compressed into one query ``s = mean(F)``; every token is
    scored against it with the additive score ``w^T tanh(W1 s + W2 f_l + b)``,
    and the tokens are averaged into one vector. DiSAN's own Source2Token
    (Shen et al., 2018) has no query: each token is scored on its own with a
    vector of scores, one per feature, and the softmax over positions runs per
    feature (Eq. (33) in multi-dimensional form). With ``W1 = 0`` the query
    drops out here and this is exactly Eq. (33), the single-dimensional form.

    Args:
        F: feature vectors (the tokens).
        W1: the map of the source query ``s``.
        W2: the map of the tokens.
        w: the output vector of the additive score.
        b: the bias of the additive score, or None.
        mask: boolean ``(..., n_f)``, ``True`` = may attend (it also restricts
            the mean ``s``).

    Shape:
        F: ``(..., n_f, d_f)``; W1, W2: ``(d_w, d_f)``; w, b: ``(d_w,)``.
        Returns c: ``(..., d_f)``, a: ``(..., n_f)``.

    Returns:
        ``(c, a)``: the context and the weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches (from :func:`mean_pool` and
            :func:`~attnsurvey.general_mechanisms.scoring.additive_score`).
    """
    s = mean_pool(F, mask)  # (..., d_f): the source as one query
    e = additive_score(s.unsqueeze(-2), zero_masked(F, mask), W1, W2, w, b).squeeze(-2)
    return _pool(e, F, mask)


# ----------------------------------------------------------------------------------
# Eq. (36)-(37): updating the feature vectors with the self-attention contexts
# ----------------------------------------------------------------------------------
def _check_update(F_old: Tensor, C: Tensor) -> None:
    as_tensor(F_old, "f_old")
    as_tensor(C, "c")
    check_same_shape(F_old, C, "f_old", "c", "feature update needs c with the shape of f_old (d_v == d_f)")


@catalogued("eq36", title="Feature update by replacement, f_new = c")
def update_replace(F_old: Tensor, C: Tensor) -> Tensor:
    """Feature update by replacement, Eq. (36): ``f_new = c``.

    Args:
        F_old: the old feature vectors (they only fix the expected shape).
        C: the self-attention contexts.

    Shape:
        F_old, C: ``(..., n_f, d_f)``. Returns ``(..., n_f, d_f)``.

    Returns:
        ``C`` itself.

    Raises:
        TypeError: if F_old or C is not a floating-point tensor.
        ValueError: unless the shapes are equal.
    """
    _check_update(F_old, C)
    return C


def normalize_rows(x: Tensor, eps: float = 1e-5) -> Tensor:
    """Layer normalisation without scale and shift: ``(x - mean) / sqrt(var + eps)`` over the last axis.

    Rows whose largest magnitude ``s`` exceeds ``max ** (1/4)`` of the dtype are scaled
    before squaring: divided by ``s`` first (the ratio is unchanged:
    ``dev / sqrt(var_s + eps / s^2)`` with the scaled row's deviation and variance), so
    rows near ``1e20`` in float32, whose variance (``1e40``) overflows, give the float64
    result. Every other row gets the textbook formula, unchanged.

    Args:
        x: the rows.
        eps: added to the (biased) variance, a finite number > 0.

    Shape:
        x: ``(..., d)``; returns ``(..., d)``.

    Returns:
        The normalised rows (all zeros for a constant row).

    Raises:
        TypeError: if x is not a floating-point tensor.
        ValueError: if x has rank 0, or for a bad ``eps``.
    """
    as_tensor(x, "x")
    check_min_rank(x, 1, "x", "(..., d)")
    check_positive("normalize_rows", eps=eps)
    plain = (x - x.mean(-1, keepdim=True)) / portable_sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    if not x.numel() or not x.shape[-1]:
        return plain
    s = x.detach().abs().amax(-1, keepdim=True)
    big = s > torch.finfo(x.dtype).max ** 0.25  # the variance, ~s^2, could come near the dtype's range
    if not bool(big.any()):
        return plain  # ordinary rows: the textbook formula, unchanged
    s = torch.where(big & torch.isfinite(s), s, torch.ones_like(s))
    xs = x / s
    dev = xs - xs.mean(-1, keepdim=True)
    return torch.where(big, dev / portable_sqrt(dev.pow(2).mean(-1, keepdim=True) + eps / s**2), plain)


@catalogued("eq37", title="Feature update by residual and normalisation, f_new = Normalize(f_old + c)")
def update_residual_norm(
    F_old: Tensor, C: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Feature update by residual and normalisation, Eq. (37): ``f_new = Normalize(f_old + c)``.

    Normalize is layer normalisation over ``d_f``: subtract the mean, divide by
    ``sqrt(var + eps)`` (biased variance), then scale by ``gamma`` and shift by
    ``beta`` (default 1 and 0). Each row is divided by its largest magnitude
    before squaring, so entries near ``1e20`` in float32 give the float64 result
    (the variance itself, ``1e40``, would overflow).

    Args:
        F_old: the old feature vectors.
        C: the self-attention contexts.
        gamma: the scale of the normalisation, or None for 1.
        beta: the shift of the normalisation, or None for 0.
        eps: added to the variance.

    Shape:
        F_old, C: ``(..., n_f, d_f)``; gamma, beta: ``(d_f,)``.
        Returns ``(..., n_f, d_f)``.

    Returns:
        The new feature vectors.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches, or if ``eps`` is not a finite number > 0.
    """
    check_positive("update_residual_norm", eps=eps)
    _check_update(F_old, C)
    d_f = F_old.shape[-1]
    y = normalize_rows(F_old + C, eps)
    if gamma is not None:
        check_weight(gamma, (d_f,), "gamma", "(d_f,)")
        y = y * gamma
    if beta is not None:
        check_weight(beta, (d_f,), "beta", "(d_f,)")
        y = y + beta
    return y


@catalogued("eq36", "eq37")
class SelfAttentionUpdate(nn.Module):
    """A self-attention layer followed by a feature update, Eq. (35)-(37).

    ``update="replace"`` applies Eq. (36), ``update="residual"`` Eq. (37) with a
    learned normalisation (``gamma``, ``beta``). ``d_v`` equals ``d_f`` so the
    context can replace or be added to the feature vector.
    ``forward(F, mask=None)`` with mask boolean broadcastable to ``(..., n_f, n_f)``,
    ``True`` = may attend, returns ``(F_new, A)``; a token no query may attend
    that holds NaN/Inf is zeroed first (:func:`~attnsurvey.masking.zero_masked`), so it
    reaches no real token's output and no gradient (the normalisation's included).

    Args:
        d_f: the feature size.
        d_k: the query/key size (defaults to ``d_f``).
        update: ``"replace"`` (Eq. 36) or ``"residual"`` (Eq. 37).

    Shape:
        F: ``(..., n_f, d_f)``. Returns F_new: ``(..., n_f, d_f)``, A: ``(..., n_f, n_f)``.

    Raises:
        ValueError: for an unknown update name.
    """

    def __init__(self, d_f: int, d_k: int | None = None, update: str = "residual") -> None:
        super().__init__()
        if update not in ("replace", "residual"):
            raise ValueError(f"update must be 'replace' (Eq. 36) or 'residual' (Eq. 37), got {update!r}")
        self.update = update
        self.attn = SelfAttention(d_f, d_k, d_f)
        self.norm = nn.LayerNorm(d_f) if update == "residual" else None

    def forward(self, F: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        F = zero_masked(F, mask)  # its own row too: the update reads F, not only the context
        C, A = self.attn(F, mask)
        if self.norm is None:
            return update_replace(F, C), A
        return update_residual_norm(F, C, self.norm.weight, self.norm.bias, self.norm.eps), A


# ----------------------------------------------------------------------------------
# Structured self-attentive sentence embedding (review eq. 12)
# ----------------------------------------------------------------------------------
@catalogued(
    "extra:structured-self-attention",
    title="Structured self-attentive sentence embedding A = softmax(W_s2 tanh(W_s1 H^T)), M = AH, penalty ||AA^T - I||_F^2 (review eq. 12)",
)
def structured_self_attention(
    H: Tensor, W_s1: Tensor, W_s2: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Structured self-attentive sentence embedding (review eq. 12): ``A = softmax(W_s2 tanh(W_s1 H^T))``, ``M = A H``.

    ``r`` learned queries (the rows of ``W_s2``) each read the sentence:
    every row of ``A`` is one attention distribution over the ``n`` tokens.
    Each row is Eq. (33) with its own ``w`` and a zero bias.

    Args:
        H: token states.
        W_s1: the first map.
        W_s2: the second map, one row per hop.
        mask: boolean ``(..., n)`` or ``(..., 1, n)``, ``True`` = may attend (a real token).

    Shape:
        H: ``(..., n, d)``; W_s1: ``(d_a, d)``; W_s2: ``(r, d_a)``.
        Returns M: ``(..., r, d)``, A: ``(..., r, n)``.

    Returns:
        ``(M, A)``: the matrix embedding and the weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on weight shape mismatches or H of fewer than 2 dims.
    """
    as_tensor(H, "H"), as_tensor(W_s1, "W_s1"), as_tensor(W_s2, "W_s2")
    _check_features(H, "H", "(..., n, d)")
    check_weight(W_s1, (W_s1.shape[0], H.shape[-1]), "W_s1", "(d_a, d)")
    check_weight(W_s2, (W_s2.shape[0], W_s1.shape[0]), "W_s2", "(r, d_a)")
    e = torch.tanh(zero_masked(H, mask) @ W_s1.T) @ W_s2.T  # (..., n, r); padded rows inert
    e = e.transpose(-1, -2)  # (..., r, n)
    if mask is not None and mask.dim() == e.dim() - 1:
        mask = mask.unsqueeze(-2)
    return attend_scores(e, H, mask)


@catalogued("extra:structured-self-attention")
def redundancy_penalty(A: Tensor) -> Tensor:
    """The redundancy penalty ``P = ||A A^T - I||_F^2`` of the structured embedding.

    It is zero exactly when the ``r`` rows are one-hot on distinct tokens (or,
    for spread rows, orthogonal with unit norm), and it grows when two rows look
    at the same tokens.

    Args:
        A: rows of attention weights.

    Shape:
        A: ``(..., r, n)``. Returns ``(...)``.

    Returns:
        The penalty per example.

    Raises:
        TypeError: if A is not a floating-point tensor.
        ValueError: for a tensor of rank < 2.
    """
    as_tensor(A, "A")
    check_min_rank(A, 2, "A", "(..., r, n)")
    r = A.shape[-2]
    eye = torch.eye(r, dtype=A.dtype, device=A.device)
    return ((A @ A.transpose(-1, -2) - eye) ** 2).sum((-1, -2))


@catalogued("extra:structured-self-attention")
class StructuredSelfAttention(nn.Module):
    """Module form of :func:`structured_self_attention` with ``r`` hops (rows of A).

    W_s1: ``nn.Linear(d, d_a, bias=False)``; W_s2: ``nn.Linear(d_a, r, bias=False)``.
    ``forward(H, mask=None)`` with mask boolean ``(..., n)``, ``True`` = may attend,
    returns ``(M, A)``; ``penalty(A)`` the mean redundancy penalty of a batch.

    Args:
        d: the token state size.
        d_a: the hidden size.
        r: the number of hops (rows of A).

    Shape:
        H: ``(..., n, d)``. Returns M: ``(..., r, d)``, A: ``(..., r, n)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as
            :func:`structured_self_attention`.
    """

    def __init__(self, d: int, d_a: int, r: int) -> None:
        check_integers("StructuredSelfAttention", minimum=1, d=d, d_a=d_a)
        super().__init__()
        self.W_s1 = nn.Linear(d, d_a, bias=False)
        self.W_s2 = nn.Linear(d_a, r, bias=False)

    def forward(self, H: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return structured_self_attention(H, self.W_s1.weight, self.W_s2.weight, mask)

    @staticmethod
    def penalty(A: Tensor) -> Tensor:
        return redundancy_penalty(A).mean()
