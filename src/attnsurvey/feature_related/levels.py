"""§3.1.2 Feature levels: attention-via-attention and hierarchical attention.

Some inputs can be read at several levels: a document is sentences of words,
a word is a sequence of characters. Two families of mechanisms use this:

* **Attention-via-attention** (Fig. 7): every level has its own feature
  matrix. A query first attends over the word-level features ``F^(w)``; the
  resulting word context ``c^(w)`` is concatenated to the query, and this
  longer query attends over the character-level features ``F^(c)``. The
  output is ``[c^(w); c^(c)]``.
* **Hierarchical attention** (Fig. 8): only the lowest level has features;
  each higher level is *built* by attention. Sentence vectors ``c^(s)`` are
  contexts of self-attention (a learned, constant query) over the words of
  sentence ``s``; the document vector ``c^(D)`` is attention over the
  matrix ``C = [c^(1), ..., c^(n_S)]``. The NLP review gives two ways to
  combine the levels: scale each word weight by its chunk (sentence) weight
  and renormalise (review eq. 7), or use the chunk contexts as keys and
  values of a document-level attention (review eq. 8-9).

Documents are padded tensors: features ``F`` of shape ``(..., n_S, n_w, d_f)``
(``n_S`` sentences of at most ``n_w`` words) with a boolean ``word_mask`` of
shape ``(..., n_S, n_w)``, ``True`` = a real word (may attend), ``False`` =
padding. A sentence without any real word gets zero weight and a zero
sentence vector; a document without any real word gets a zero document vector.

Shapes: n_S sentences, n_w words per sentence, d_f feature size, d_k key size, d_v
value size; for attention-via-attention n_q queries, n_f^(w) words, n_f^(c) characters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_weight
from ..attention import context
from ..catalog import catalogued
from ..general_mechanisms.scoring import ScoreModule, make_score, scaled_dot_score
from ..general_model import attend, keys_values
from ..masking import attended_keys, check_boolean, nonfinite_rows, require_boolean_mask, zero_masked

ScoreFn = Callable[[Tensor, Tensor], Tensor]

CHAPTER = "chapters/ch03_1_2_feature_levels.ipynb"


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _check_document(X: Tensor, symbol: str, last: str) -> None:
    as_tensor(X, symbol)
    check_min_rank(X, 3, symbol, f"(..., n_S, n_w, {last})")


def _check_word_mask(word_mask: Tensor | None, X: Tensor, symbol: str) -> Tensor:
    """Return a boolean ``(..., n_S, n_w)`` mask (all True when None), checked against ``X``."""
    expected = tuple(X.shape[:-1])
    if word_mask is None:
        return torch.ones(expected, dtype=torch.bool, device=X.device)
    check_boolean(word_mask, "word_mask", "real word")
    if tuple(word_mask.shape) != expected:
        raise ValueError(
            f"word_mask must have shape (..., n_S, n_w) = {expected} to match {symbol} of shape "
            f"{tuple(X.shape)}, got {tuple(word_mask.shape)}"
        )
    return word_mask


def _check_same_layout(K: Tensor, V: Tensor) -> None:
    if K.shape[:-1] != V.shape[:-1]:
        raise ValueError(
            "K and V must hold the same documents: (..., n_S, n_w) of K is "
            f"{tuple(K.shape[:-1])}, of V is {tuple(V.shape[:-1])}"
        )


def _check_query(q: Tensor, symbol: str) -> None:
    as_tensor(q, symbol)
    check_min_rank(q, 1, symbol, "(..., d_q)")


def _check_documents(q: Tensor, K: Tensor, V: Tensor, word_mask: Tensor | None) -> Tensor:
    """Check a query and the keys and values of the same documents; return the word mask (all True when None)."""
    _check_query(q, "q")
    _check_document(K, "K", "d_k")
    _check_document(V, "V", "d_v")
    _check_same_layout(K, V)
    return _check_word_mask(word_mask, K, "K")


# --------------------------------------------------------------------------
# Attention-via-attention (Fig. 7)
# --------------------------------------------------------------------------


class AttentionViaAttentionResult(NamedTuple):
    """Output of :func:`attention_via_attention`.

    ``c = [c^(w); c^(c)]`` ``(..., n_q, d_v^(w) + d_v^(c))``; the two level
    contexts; word weights ``a_w`` ``(..., n_q, n_f^(w))`` and character
    weights ``a_c`` ``(..., n_q, n_f^(c))``.
    """

    c: Tensor
    c_w: Tensor
    c_c: Tensor
    a_w: Tensor
    a_c: Tensor


@catalogued(
    "extra:attention-via-attention",
    title="Attention-via-attention: word-level context, then character attention with [q; c^(w)] (Fig. 7)",
)
def attention_via_attention(
    q: Tensor,
    F_w: Tensor,
    F_c: Tensor,
    W_K_w: Tensor,
    W_V_w: Tensor,
    W_K_c: Tensor,
    W_V_c: Tensor,
    mask_w: Tensor | None = None,
    mask_c: Tensor | None = None,
    score_w: ScoreFn = scaled_dot_score,
    score_c: ScoreFn = scaled_dot_score,
) -> AttentionViaAttentionResult:
    """Attention-via-attention (§3.1.2, Fig. 7): word level first, then characters.

    1. ``c^(w), a^(w) = attend(q, K^(w), V^(w))`` with ``K^(w) = W_K^(w) F^(w)``.
    2. The character-level query is the concatenation ``[q; c^(w)]``;
       ``c^(c), a^(c) = attend([q; c^(w)], K^(c), V^(c))``.
    3. The output context is ``[c^(w); c^(c)]``.

    A feature vector no query may attend is inert (NaN/Inf stored there reaches
    no output and no gradient, the projections' included).

    Args:
        q: the query of the character-level query model.
        F_w: word-level features.
        F_c: character-level features.
        W_K_w: word-level key map.
        W_V_w: word-level value map.
        W_K_c: character-level key map.
        W_V_c: character-level value map.
        mask_w: boolean, broadcastable to ``(..., n_q, n_f^(w))``, ``True`` = may attend.
        mask_c: boolean, broadcastable to ``(..., n_q, n_f^(c))``, ``True`` = may attend.
        score_w: the word-level score function.
        score_c: the character-level score function; it receives queries of
            width ``d_q + d_v^(w)``.

    Shape:
        q: ``(..., n_q, d_q)``; F_w: ``(..., n_f^(w), d_f^(w))``; F_c: ``(..., n_f^(c), d_f^(c))``;
        W_K_w ``(d_k^(w), d_f^(w))``, W_V_w ``(d_v^(w), d_f^(w))``,
        W_K_c ``(d_k^(c), d_f^(c))``, W_V_c ``(d_v^(c), d_f^(c))``.
        Returns c: ``(..., n_q, d_v^(w) + d_v^(c))``.

    Returns:
        :class:`AttentionViaAttentionResult`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches (e.g. a dot score needs
            ``d_q + d_v^(w) == d_k^(c)``) or a mask that is not boolean.
    """
    require_boolean_mask(mask_w, "attention_via_attention", "mask_w")
    require_boolean_mask(mask_c, "attention_via_attention", "mask_c")
    _check_query(q, "q")
    check_min_rank(q, 2, "q", "(..., n_q, d_q)")
    F_w, F_c = zero_masked(F_w, attended_keys(mask_w)), zero_masked(F_c, attended_keys(mask_c))
    K_w, V_w = keys_values(F_w, W_K_w, W_V_w)
    K_c, V_c = keys_values(F_c, W_K_c, W_V_c)
    c_w, a_w = attend(q, K_w, V_w, mask_w, score_w)
    q_c = torch.cat([q.expand(*c_w.shape[:-1], q.shape[-1]), c_w], dim=-1)
    c_c, a_c = attend(q_c, K_c, V_c, mask_c, score_c)
    return AttentionViaAttentionResult(torch.cat([c_w, c_c], dim=-1), c_w, c_c, a_w, a_c)


@catalogued("extra:attention-via-attention")
class AttentionViaAttention(nn.Module):
    """Module form of :func:`attention_via_attention` with learned projections and scores.

    ``forward(q, F_w, F_c, mask_w=None, mask_c=None)`` takes one query per
    example ``(..., d_q)`` or many ``(..., n_q, d_q)`` and returns an
    :class:`AttentionViaAttentionResult` shaped like the query. mask_w, mask_c:
    boolean, ``True`` = may attend, broadcastable to the scores of their level,
    ``(..., n_f^(w))`` / ``(..., n_f^(c))`` with one query, ``(..., n_q, n_f)``
    with many; a fully-masked row gives zero weights and a zero context.

    Args:
        d_q: the query size.
        d_f_w: the word feature size.
        d_f_c: the character feature size.
        d_k_w: the word key size (default ``d_f_w``).
        d_v_w: the word value size (default ``d_f_w``).
        d_k_c: the character key size (default ``d_f_c``).
        d_v_c: the character value size (default ``d_f_c``).
        score: a Table II name for both levels (default ``"additive"``, which
            allows ``d_q != d_k``).

    Shape:
        q: ``(..., d_q)`` or ``(..., n_q, d_q)``; F_w: ``(..., n_f^(w), d_f^(w))``;
        F_c: ``(..., n_f^(c), d_f^(c))``. Returns c: ``(..., [n_q,] d_v^(w) + d_v^(c))``.

    Raises:
        ValueError: if a size is not an integer >= 1 or for an unknown score name; in
            ``forward``, if q's size is not
            ``d_q`` or on the errors of :func:`attention_via_attention`.
        TypeError: in ``forward``, if q or F_w is not a floating-point tensor.
    """

    def __init__(
        self,
        d_q: int,
        d_f_w: int,
        d_f_c: int,
        d_k_w: int | None = None,
        d_v_w: int | None = None,
        d_k_c: int | None = None,
        d_v_c: int | None = None,
        score: str = "additive",
    ) -> None:
        check_integers("AttentionViaAttention", minimum=1, d_q=d_q, d_f_w=d_f_w, d_f_c=d_f_c)
        check_integers(
            "AttentionViaAttention", minimum=1, allow_none=True, d_k_w=d_k_w, d_v_w=d_v_w, d_k_c=d_k_c, d_v_c=d_v_c
        )
        super().__init__()
        d_k_w = d_f_w if d_k_w is None else d_k_w
        d_v_w = d_f_w if d_v_w is None else d_v_w
        d_k_c = d_f_c if d_k_c is None else d_k_c
        d_v_c = d_f_c if d_v_c is None else d_v_c
        self.d_q, self.d_f_w, self.d_f_c = d_q, d_f_w, d_f_c
        self.W_K_w = nn.Linear(d_f_w, d_k_w, bias=False)
        self.W_V_w = nn.Linear(d_f_w, d_v_w, bias=False)
        self.W_K_c = nn.Linear(d_f_c, d_k_c, bias=False)
        self.W_V_c = nn.Linear(d_f_c, d_v_c, bias=False)
        self.score_w: ScoreModule = make_score(score, d_q, d_k_w)
        self.score_c: ScoreModule = make_score(score, d_q + d_v_w, d_k_c)

    def forward(
        self, q: Tensor, F_w: Tensor, F_c: Tensor, mask_w: Tensor | None = None, mask_c: Tensor | None = None
    ) -> AttentionViaAttentionResult:
        as_tensor(q, "q")
        as_tensor(F_w, "F_w")
        check_min_rank(F_w, 2, "F_w", "(..., n_f^(w), d_f^(w))")
        check_dim_equal(q.shape[-1], self.d_q, "AttentionViaAttention", "d_q of q", "d_q of the module")
        single = q.dim() == F_w.dim() - 1
        if single:
            q = q.unsqueeze(-2)
            mask_w = None if mask_w is None else mask_w.unsqueeze(-2)
            mask_c = None if mask_c is None else mask_c.unsqueeze(-2)
        out = attention_via_attention(
            q,
            F_w,
            F_c,
            self.W_K_w.weight,
            self.W_V_w.weight,
            self.W_K_c.weight,
            self.W_V_c.weight,
            mask_w,
            mask_c,
            self.score_w,
            self.score_c,
        )
        if single:
            return AttentionViaAttentionResult(*(t.squeeze(-2) for t in out))
        return out


# --------------------------------------------------------------------------
# Hierarchical attention (Fig. 8) and the two forms of the NLP review
# --------------------------------------------------------------------------


class HierarchicalResult(NamedTuple):
    """Output of the hierarchical functions.

    ``c``: document vector ``c^(D)`` ``(..., d_v)``; ``a_chunk``: sentence
    weights ``(..., n_S)``; ``a_word``: word weights inside each sentence
    ``(..., n_S, n_w)`` (each row sums to 1, or 0 for an empty sentence);
    ``C``: the sentence vectors ``c^(s)`` stacked as rows ``(..., n_S, d_v^(S))``.
    """

    c: Tensor
    a_chunk: Tensor
    a_word: Tensor
    C: Tensor


def sentence_mask(word_mask: Tensor) -> Tensor:
    """Which sentences hold at least one real word.

    Args:
        word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may attend).

    Shape:
        word_mask: ``(..., n_S, n_w)``. Returns ``(..., n_S)``.

    Returns:
        Boolean, True for sentences with a real word.
    """
    return word_mask.any(-1)


@catalogued(
    "extra:hierarchical-chunk-contexts",
    title="Chunk contexts as keys and values of a document-level attention (review eq. 8-9)",
)
def chunk_contexts(
    q: Tensor, K: Tensor, V: Tensor, word_mask: Tensor | None = None, score: ScoreFn = scaled_dot_score
) -> tuple[Tensor, Tensor]:
    """Chunk (sentence) contexts, review eq. 8: ``c_m^chunk = Attention(q, K_m, V_m)`` for every m.

    Each sentence is attended separately with the same query, so word weights
    are normalised *within* each sentence; an all-padding sentence has zero
    weights and ``c = 0``.

    Args:
        q: one query per document, or one shared by all (a learned query, as in
            self-attention).
        K: keys.
        V: values.
        word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may attend); None: all words real.
        score: the score function (scaled dot product by default).

    Shape:
        q: ``(..., d_q)`` or ``(d_q,)``; K: ``(..., n_S, n_w, d_k)``; V: ``(..., n_S, n_w, d_v)``.
        Returns C: ``(..., n_S, d_v)``, a: ``(..., n_S, n_w)``.

    Returns:
        ``(C, a)``: the chunk contexts and the word weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if K and V describe different documents or the mask does
            not match them.
    """
    word_mask = _check_documents(q, K, V, word_mask)
    Q = q.unsqueeze(-2).unsqueeze(-3)  # (..., 1, 1, d_q): the same query for every sentence
    C, a = attend(Q, K, V, word_mask.unsqueeze(-2), score)  # (..., n_S, 1, d_v), (..., n_S, 1, n_w)
    return C.squeeze(-2), a.squeeze(-2)


@catalogued(
    "extra:hierarchical-attention",
    title="Hierarchical attention: self-attention over words -> sentence vectors -> document vector (Fig. 8)",
)
def hierarchical_attention(
    F: Tensor,
    q_S: Tensor,
    W_K_S: Tensor,
    W_V_S: Tensor,
    q_D: Tensor,
    W_K_D: Tensor,
    W_V_D: Tensor,
    word_mask: Tensor | None = None,
    score: ScoreFn = scaled_dot_score,
) -> HierarchicalResult:
    """Hierarchical attention (§3.1.2, Fig. 8): words -> sentence vectors -> document vector.

    Attention Module[S]: for each sentence ``s``, keys and values
    ``K^(s) = W_K^(S) F^(s)``, ``V^(s) = W_V^(S) F^(s)`` (Eq. 1) are attended
    with the constant (learned) query ``q_S``, giving ``c^(s)``. Attention
    Module[D]: the matrix ``C = [c^(1), ..., c^(n_S)]`` is the feature matrix
    of a second attention with keys ``W_K^(D) C``, values ``W_V^(D) C`` and
    query ``q_D``, giving the document vector ``c^(D)``. Empty sentences get
    zero weight and ``c^(s) = 0``; padding is inert (NaN/Inf stored in a padded
    word reaches no output and no gradient, the projections' included).

    Args:
        F: word features of the documents.
        q_S: the sentence-level query.
        W_K_S: the sentence-level key map.
        W_V_S: the sentence-level value map.
        q_D: the document-level query.
        W_K_D: the document-level key map.
        W_V_D: the document-level value map.
        word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may attend); None: all words real.
        score: the score function of both levels (scaled dot product by default).

    Shape:
        F: ``(..., n_S, n_w, d_f^(S))``; q_S: ``(d_q^(S),)`` or ``(..., d_q^(S))``;
        W_K_S ``(d_k^(S), d_f^(S))``; W_V_S ``(d_v^(S), d_f^(S))``; q_D:
        ``(d_q^(D),)`` or ``(..., d_q^(D))``; W_K_D ``(d_k^(D), d_v^(S))``;
        W_V_D ``(d_v^(D), d_v^(S))``. Returns c: ``(..., d_v^(D))``.

    Returns:
        :class:`HierarchicalResult`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches or a bad mask.
    """
    for symbol, x in {
        "F": F,
        "q_S": q_S,
        "W_K_S": W_K_S,
        "W_V_S": W_V_S,
        "q_D": q_D,
        "W_K_D": W_K_D,
        "W_V_D": W_V_D,
    }.items():
        as_tensor(x, symbol)
    _check_document(F, "F", "d_f^(S)")
    word_mask = _check_word_mask(word_mask, F, "F")
    F = zero_masked(F, word_mask)  # (..., n_S, n_w, d_f) with a (..., n_S, n_w) key mask
    K, V = keys_values(F, W_K_S, W_V_S)
    C, a_word = chunk_contexts(q_S, K, V, word_mask, score)
    check_weight(W_K_D, (W_K_D.shape[0], C.shape[-1]), "W_K^(D)", "(d_k^(D), d_v^(S))")
    check_weight(W_V_D, (W_V_D.shape[0], C.shape[-1]), "W_V^(D)", "(d_v^(D), d_v^(S))")
    K_D, V_D = keys_values(C, W_K_D, W_V_D)
    _check_query(q_D, "q_D")
    c, a_chunk = attend(q_D.unsqueeze(-2), K_D, V_D, sentence_mask(word_mask).unsqueeze(-2), score)
    return HierarchicalResult(c.squeeze(-2), a_chunk.squeeze(-2), a_word, C)


@catalogued("extra:hierarchical-chunk-contexts")
def hierarchical_chunk_attention(
    q: Tensor,
    K: Tensor,
    V: Tensor,
    word_mask: Tensor | None = None,
    score: ScoreFn = scaled_dot_score,
    value_map: Callable[[Tensor], Tensor] | None = None,
) -> HierarchicalResult:
    """Hierarchical attention with chunk contexts as keys and values, review eq. 8-9.

    Eq. 8: ``C_m^chunk = Attention(q, K_m, V_m)`` (see :func:`chunk_contexts`);
    eq. 9: ``c^doc = Attention(q, C^chunk, C^chunk)``: the same query attends
    over the chunk contexts, which serve as both keys and values. An empty
    sentence gets zero weight.

    Args:
        q: the query, one per document or shared.
        K: keys.
        V: values.
        word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may attend); None: all words real.
        score: the score function of both levels (scaled dot product by default).
        value_map: optional map applied to ``C^chunk`` to make the document-level
            values (default: none, ``V^doc = C^chunk`` as in eq. 9); a linear map
            keeps the equivalence with eq. 7, a non-linear one breaks it.

    Shape:
        q: ``(..., d_q)`` or ``(d_q,)``; K: ``(..., n_S, n_w, d_k)``;
        V: ``(..., n_S, n_w, d_v)``. Returns c: ``(..., d_v)``.

    Returns:
        :class:`HierarchicalResult`.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches (a dot score needs ``d_q == d_v`` at the
            document level, because the chunk contexts are the keys there).
    """
    C, a_word = chunk_contexts(q, K, V, word_mask, score)
    word_mask = _check_word_mask(word_mask, K, "K")
    V_doc = C if value_map is None else value_map(C)
    c, a_chunk = attend(q.unsqueeze(-2), C, V_doc, sentence_mask(word_mask).unsqueeze(-2), score)
    return HierarchicalResult(c.squeeze(-2), a_chunk.squeeze(-2), a_word, C)


@catalogued(
    "extra:hierarchical-scaled-weights", title="Word weights scaled by chunk weights and renormalised (review eq. 7)"
)
def scaled_word_weights(a_word: Tensor, a_chunk: Tensor, word_mask: Tensor | None = None) -> Tensor:
    """Word weights scaled by chunk weights, review eq. 7.

    ``a^scale_{mi} = a_{mi} a_m / sum_{s,w} a_{sw} a_s``: the weight of word
    ``i`` of chunk ``m`` times the weight of its chunk, renormalised over the
    whole document.

    Args:
        a_word: non-negative word weights (normalised per chunk or over the
            document: both occur).
        a_chunk: non-negative chunk weights.
        word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may
            attend); a ``False`` word gets weight 0 (selected, so a NaN weight
            there is inert: finite output and finite gradients), and so does
            the weight of a chunk with no real word.

    Shape:
        a_word: ``(..., n_S, n_w)``; a_chunk: ``(..., n_S)``. Returns ``(..., n_S, n_w)``.

    Returns:
        The scaled weights, summing to 1 over each document (all zeros if every
        product is zero).

    Raises:
        TypeError: if a weight is not a floating-point tensor.
        ValueError: on shape mismatches or negative weights.
    """
    as_tensor(a_word, "a_word")
    as_tensor(a_chunk, "a_chunk")
    check_min_rank(a_word, 2, "a_word", "(..., n_S, n_w)")
    if tuple(a_chunk.shape) != tuple(a_word.shape[:-1]):
        raise ValueError(
            f"a_chunk must have shape (..., n_S) = {tuple(a_word.shape[:-1])} to match a_word of shape "
            f"{tuple(a_word.shape)}, got {tuple(a_chunk.shape)}"
        )
    if word_mask is not None:
        # selected before the product, not after: a NaN weight at padding must reach neither the output nor,
        # through the product's other factor, a gradient (NaN * 0 = NaN); a chunk of padding only is inert too
        keep = _check_word_mask(word_mask, a_word.unsqueeze(-1), "a_word")
        zero = torch.zeros((), dtype=a_word.dtype, device=a_word.device)
        a_word = torch.where(keep, a_word, zero)
        a_chunk = torch.where(keep.any(-1), a_chunk, zero)
    if (a_word < 0).any() or (a_chunk < 0).any():
        raise ValueError("attention weights a_word and a_chunk must be non-negative")
    num = a_word * a_chunk.unsqueeze(-1)
    den = num.sum((-2, -1), keepdim=True)
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(num))


@catalogued("extra:hierarchical-scaled-weights")
def hierarchical_scaled_attention(
    a_word: Tensor, a_chunk: Tensor, V: Tensor, word_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Document context from the scaled word weights of review eq. 7.

    ``c = sum_{m,i} a^scale_{mi} v_{mi}`` over all words of the document. A word
    of weight 0 (padding) is inert, as in :func:`~attnsurvey.attention.context`:
    NaN/Inf in its value reaches no output and no gradient.

    Args:
        a_word: non-negative word weights.
        a_chunk: non-negative chunk weights.
        V: values.
        word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may
            attend), as in :func:`scaled_word_weights`.

    Shape:
        a_word: ``(..., n_S, n_w)``; a_chunk: ``(..., n_S)``; V: ``(..., n_S, n_w, d_v)``.
        Returns c: ``(..., d_v)``, a_scale: ``(..., n_S, n_w)``.

    Returns:
        ``(c, a_scale)``: the document context and the scaled weights.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: if V does not match the weights, or on the errors of
            :func:`scaled_word_weights`.
    """
    as_tensor(a_word, "a_word"), as_tensor(a_chunk, "a_chunk"), as_tensor(V, "V")
    _check_document(V, "V", "d_v")
    if tuple(V.shape[:-1]) != tuple(a_word.shape):
        raise ValueError(
            f"V must have shape (..., n_S, n_w, d_v) with (..., n_S, n_w) = {tuple(a_word.shape)} "
            f"as in a_word, got {tuple(V.shape)}"
        )
    a = scaled_word_weights(a_word, a_chunk, word_mask)
    if nonfinite_rows(V) is None:  # the usual case, unchanged
        return torch.einsum("...mi,...mid->...d", a, V), a
    flat_a = a.reshape(*a.shape[:-2], 1, -1)  # (..., 1, n_S n_w): one query over every word
    return context(flat_a, V.reshape(*V.shape[:-3], -1, V.shape[-1])).squeeze(-2), a


def flat_attention(
    q: Tensor, K: Tensor, V: Tensor, word_mask: Tensor | None = None, score: ScoreFn = scaled_dot_score
) -> tuple[Tensor, Tensor]:
    """Single-level (flat) attention over all words of a document, ignoring sentences.

    The baseline of the chapter: the document is read as one long sequence of
    ``n_S * n_w`` words.

    Args:
        q: the query, one per document or shared.
        K: keys.
        V: values.
        word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may attend); None: all words real.
        score: the score function (scaled dot product by default).

    Shape:
        q: ``(..., d_q)`` or ``(d_q,)``; K ``(..., n_S, n_w, d_k)``; V ``(..., n_S, n_w, d_v)``.
        Returns c: ``(..., d_v)``, a: ``(..., n_S, n_w)``.

    Returns:
        ``(c, a)``: the context and word weights that sum to 1 over the whole
        document (0 and a zero context for a document without words).

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    word_mask = _check_documents(q, K, V, word_mask)
    n_S, n_w = K.shape[-3], K.shape[-2]
    Kf = K.reshape(*K.shape[:-3], n_S * n_w, K.shape[-1])
    Vf = V.reshape(*V.shape[:-3], n_S * n_w, V.shape[-1])
    mf = word_mask.reshape(*word_mask.shape[:-2], 1, n_S * n_w)
    c, a = attend(q.unsqueeze(-2), Kf, Vf, mf, score)
    return c.squeeze(-2), a.reshape(*a.shape[:-2], n_S, n_w)


@catalogued("extra:hierarchical-attention")
class HierarchicalAttention(nn.Module):
    """Module form of :func:`hierarchical_attention` (Fig. 8) with learned queries.

    The constant queries ``q_S`` and ``q_D`` (``(d_k,)`` each) are parameters,
    so both levels are self-attention in the survey's sense.
    ``forward(F, word_mask=None)`` with word_mask boolean ``(..., n_S, n_w)``,
    ``True`` = a real word (may attend), returns a :class:`HierarchicalResult`.

    Args:
        d_f: the word feature size ``d_f^(S)``.
        d_k: the key size at both levels.
        d_v_S: the sentence vector size (default ``d_f``).
        d_v_D: the document vector size (default ``d_v_S``).

    Shape:
        F: ``(..., n_S, n_w, d_f)``. Returns c: ``(..., d_v_D)``.

    Raises:
        TypeError: in ``forward``, if F is not a floating-point tensor.
        ValueError: if a size is not an integer >= 1; in ``forward``, if F's feature
            size is not ``d_f`` or on the
            errors of :func:`hierarchical_attention`.
    """

    def __init__(self, d_f: int, d_k: int, d_v_S: int | None = None, d_v_D: int | None = None) -> None:
        check_integers("HierarchicalAttention", minimum=1, d_f=d_f, d_k=d_k)
        check_integers("HierarchicalAttention", minimum=1, allow_none=True, d_v_S=d_v_S, d_v_D=d_v_D)
        super().__init__()
        d_v_S = d_f if d_v_S is None else d_v_S
        d_v_D = d_v_S if d_v_D is None else d_v_D
        self.d_f = d_f
        self.W_K_S = nn.Linear(d_f, d_k, bias=False)
        self.W_V_S = nn.Linear(d_f, d_v_S, bias=False)
        self.W_K_D = nn.Linear(d_v_S, d_k, bias=False)
        self.W_V_D = nn.Linear(d_v_S, d_v_D, bias=False)
        self.q_S = nn.Parameter(torch.randn(d_k) / d_k**0.5)
        self.q_D = nn.Parameter(torch.randn(d_k) / d_k**0.5)

    def forward(self, F: Tensor, word_mask: Tensor | None = None) -> HierarchicalResult:
        _check_document(F, "F", "d_f^(S)")
        check_dim_equal(F.shape[-1], self.d_f, "HierarchicalAttention", "d_f of F", "d_f of the module")
        return hierarchical_attention(
            F,
            self.q_S,
            self.W_K_S.weight,
            self.W_V_S.weight,
            self.q_D,
            self.W_K_D.weight,
            self.W_V_D.weight,
            word_mask,
        )
