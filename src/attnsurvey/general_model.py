"""§2 The general attention model: Eq. (1)-(5).

The task model (Fig. 1) is feature model + query model + attention model +
output model. The general attention module (Fig. 2) turns a query and a set
of feature vectors into a context vector in three steps:

* Eq. (1)  keys and values from the features:  ``K = F W_K^T``, ``V = F W_V^T``
* Eq. (2)  a score per key:                   ``e_l = score(q, k_l)``
* Eq. (3)  alignment of the scores:           ``a = align(e)`` (softmax here)
* Eq. (4)  the context vector:                ``c = sum_l a_l v_l``
* Eq. (5)  an output model on the context:    ``y = softmax(W_c c + b_c)``

Shapes are batch-first rows (see the Notation page): ``F`` is ``(..., n_f, d_f)``,
queries ``(..., n_q, d_q)``, scores and weights ``(..., n_q, n_f)``, context
``(..., n_q, d_v)``. Weight matrices keep the survey's shapes: ``W_K`` is
``(d_k, d_f)``, exactly ``nn.Linear(d_f, d_k).weight``.

Masks are boolean, ``True`` = may attend (as in
``F.scaled_dot_product_attention``); fully-masked query rows give all-zero
weights and therefore a zero context vector.

The core of Eq. (2)-(4) lives in :mod:`attnsurvey.attention` (see its notes for
the full API of :func:`attend`: score and alignment hooks, attention and
key-padding masks, additive bias, causality, dropout, grouped-query attention,
``need_weights`` and the dispatch to ``F.scaled_dot_product_attention``);
``attend``, ``attention_scores`` and ``context`` are re-exported here.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_weight
from .attention import ScoreFn, align_scores, attend, attention_scores, context
from .catalog import catalogued, declare
from .general_mechanisms.scoring import ScoreModule, make_score, scaled_dot_score
from .masking import attended_keys, check_one_query_mask, require_boolean_mask, zero_masked

CHAPTER = "chapters/ch02_general_attention_model.ipynb"


@catalogued("eq1", title="Keys and values from the feature matrix, K = W_K F, V = W_V F")
def keys_values(F: Tensor, W_K: Tensor, W_V: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values from the feature vectors, Eq. (1): ``K = W_K F``, ``V = W_V F``.

    Args:
        F: feature vectors, one per row.
        W_K: key weight matrix (``nn.Linear(d_f, d_k).weight``).
        W_V: value weight matrix (``nn.Linear(d_f, d_v).weight``).

    Shape:
        F: ``(..., n_f, d_f)``; W_K: ``(d_k, d_f)``; W_V: ``(d_v, d_f)``; returns K ``(..., n_f, d_k)``
        and V ``(..., n_f, d_v)``.

    Returns:
        ``(K, V)``.

    Raises:
        ValueError: if F has fewer than 2 dimensions, a weight is not 2-D with second dimension ``d_f``,
            or a tensor is not floating point.
        TypeError: if F, W_K or W_V is not a tensor.
    """
    as_tensor(F, "F")
    check_min_rank(F, 2, "F", "(..., n_f, d_f)")
    d_f = F.shape[-1]
    as_tensor(W_K, "W_K")
    as_tensor(W_V, "W_V")
    check_weight(W_K, (W_K.shape[0], d_f), "W_K", "(d_k, d_f)")
    check_weight(W_V, (W_V.shape[0], d_f), "W_V", "(d_v, d_f)")
    return F @ W_K.T, F @ W_V.T


# Eq. (2) and (4) are computed by the core (attnsurvey.attention) and re-exported here, where the book teaches them.
declare("attnsurvey.general_model.attention_scores", "eq2", title="Attention score per key, e_l = score(q, k_l)")


@catalogued("eq3", title="Alignment of the scores into weights, a = align(e) (softmax)")
def align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention weights, Eq. (3), with the softmax alignment: ``a = softmax(e)``.

    Each row of the result sums to 1, except fully-masked rows, which are all
    zero. Stable for scores of any magnitude.

    Args:
        e: scores.
        mask: optional boolean mask broadcastable to e, ``True`` = may attend.

    Shape:
        e: ``(..., n_q, n_f)``; returns ``(..., n_q, n_f)``.

    Returns:
        The weights a.

    Raises:
        ValueError: for non-float scores or a mask of the wrong dtype or shape.
        TypeError: if e is not a tensor.
    """
    as_tensor(e, "e")
    return align_scores(e, mask)


declare(
    "attnsurvey.general_model.context",
    "eq4",
    title="Context vector as the weighted average of values, c = sum_l a_l v_l",
)
declare("attnsurvey.general_model.context", "eq24")


@catalogued("eq5", title="Output model y = softmax(W_c c + b_c)")
def output_model(c: Tensor, W_c: Tensor, b_c: Tensor) -> Tensor:
    """Output model, Eq. (5): ``y_hat = softmax(W_c c + b_c)``.

    Args:
        c: context vector(s).
        W_c: output weight matrix.
        b_c: output bias.

    Shape:
        c: ``(..., d_v)``; W_c: ``(d_y, d_v)``; b_c: ``(d_y,)``; returns ``(..., d_y)``.

    Returns:
        Class probabilities y_hat.

    Raises:
        ValueError: on shape mismatches or non-float tensors.
        TypeError: if c (or a weight) is not a tensor.
    """
    as_tensor(c, "c")
    as_tensor(W_c, "W_c")
    as_tensor(b_c, "b_c")
    check_weight(W_c, (W_c.shape[0], c.shape[-1]), "W_c", "(d_y, d_v)")
    check_weight(b_c, (W_c.shape[0],), "b_c", "(d_y,)")
    return torch.softmax(c @ W_c.T + b_c, dim=-1)


declare("attnsurvey.general_model.attend", "eq4")


@catalogued("extra:key-value-vs-plain", title="Key-value attention vs plain attention (K = V = F)")
def plain_attend(
    Q: Tensor, F: Tensor, mask: Tensor | None = None, score: ScoreFn = scaled_dot_score
) -> tuple[Tensor, Tensor]:
    """Plain (key = value) attention: ``K = V = F``, i.e. ``W_K = W_V = I`` in Eq. (1).

    A fully-masked row gives zero weights and a zero context.

    Args:
        Q: queries.
        F: feature vectors, used as both keys and values.
        mask: boolean mask broadcastable to the scores, ``True`` = may attend (a float mask is added
            to the scores, as in :func:`attend`).
        score: the score function of Eq. (2).

    Shape:
        Q: ``(..., n_q, d_q)``; F: ``(..., n_f, d_f)``; mask: broadcastable to ``(..., n_q, n_f)``;
        returns c ``(..., n_q, d_f)`` and a ``(..., n_q, n_f)``.

    Returns:
        ``(c, a)`` as :func:`attend` (which raises ``ValueError``/``TypeError`` on bad input).
    """
    return attend(Q, F, F, mask, score)


@catalogued(
    "extra:attention-as-expectation",
    title="Attention as the expectation of a selection variable z ~ p(z | X, q) (nndl 8.2, Eq. 8.1 and 8.7)",
)
def sample_selection(a: Tensor, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
    """Draw the selection variable ``z ~ p(z = l | F, q) = a_l`` (nndl 8.2, Eq. 8.1).

    The context vector is the expectation ``E[v_z]``, so the mean of ``V[z]``
    over many samples approaches ``c``.

    Args:
        a: rows of attention weights, each summing to 1.
        num_samples: number of draws per row (with replacement).
        generator: random generator (global generator if None).

    Shape:
        a: ``(..., n_f)``; returns ``(..., num_samples)``.

    Returns:
        Integer indices z.

    Raises:
        ValueError: if a row does not sum to 1, a is not floating point or ``num_samples``
            is not an integer >= 1.
        TypeError: if a is not a tensor.
    """
    as_tensor(a, "a")
    check_integers("sample_selection", minimum=1, num_samples=num_samples)
    sums = a.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        raise ValueError("every row of a must sum to 1 to define p(z | F, q)")
    flat = a.reshape(-1, a.shape[-1])
    idx = torch.multinomial(flat, num_samples, replacement=True, generator=generator)
    return idx.reshape(*a.shape[:-1], num_samples)


@catalogued("extra:data-organisation", title="One module over a sequence, an image grid and graph nodes (§2.3)")
@catalogued("eq1", "extra:key-value-vs-plain")
class GeneralAttention(nn.Module):
    """The general attention module of Fig. 2 with learned ``W_K`` and ``W_V``, Eq. (1)-(4).

    ``forward(q, F, mask=None)`` takes one query per example or many queries
    (same rank as F) and returns ``(c, a)`` shaped like the query. A feature
    vector no query may attend is inert (NaN/Inf stored there reaches no output
    and no gradient, ``W_K``'s and ``W_V``'s included).

    Args:
        d_q: query size.
        d_f: feature size.
        d_k: key size (default ``d_f``).
        d_v: value size (default ``d_f``).
        score: a Table II name (see :func:`attnsurvey.general_mechanisms.scoring.make_score`) or a ``ScoreModule``.
        plain: if True, ``K = V = F`` (no ``W_K``, ``W_V``).

    Shape:
        q: ``(..., d_q)`` (one query) or ``(..., n_q, d_q)``; F: ``(..., n_f, d_f)``; mask: boolean
        ``(..., n_f)`` for one query, ``(..., n_q, n_f)`` for many, ``True`` = may attend; returns
        c ``(..., d_v)`` and a ``(..., n_f)`` for one query, ``(..., n_q, d_v)`` and ``(..., n_q, n_f)`` for many.

    Raises:
        ValueError: at construction if ``plain`` and ``d_k`` or ``d_v`` differs from ``d_f``; in forward,
            on a size that does not match the module, a non-float input, or a mask that is not boolean or
            does not broadcast (a float 0/1 mask would shift the scores, not select).
        TypeError: in forward, if q or F is not a tensor.
    """

    def __init__(
        self,
        d_q: int,
        d_f: int,
        d_k: int | None = None,
        d_v: int | None = None,
        score: str | ScoreModule = "scaled-multiplicative",
        plain: bool = False,
    ) -> None:
        super().__init__()
        d_k = d_f if d_k is None else d_k
        d_v = d_f if d_v is None else d_v
        check_integers("GeneralAttention", minimum=1, d_q=d_q, d_f=d_f, d_k=d_k, d_v=d_v)
        if plain and (d_k != d_f or d_v != d_f):
            raise ValueError(f"plain attention uses K = V = F, so d_k = d_v = d_f; got d_k={d_k}, d_v={d_v}, d_f={d_f}")
        self.d_q, self.d_f, self.d_k, self.d_v, self.plain = d_q, d_f, d_k, d_v, plain
        self.W_K = None if plain else nn.Linear(d_f, d_k, bias=False)
        self.W_V = None if plain else nn.Linear(d_f, d_v, bias=False)
        self.score = make_score(score, d_q, d_k) if isinstance(score, str) else score

    def keys_values(self, F: Tensor) -> tuple[Tensor, Tensor]:
        """Eq. (1) with this module's weights (identity when ``plain``)."""
        if self.W_K is None or self.W_V is None:  # plain (both None exactly then)
            return F, F
        return keys_values(F, self.W_K.weight, self.W_V.weight)

    def forward(self, q: Tensor, F: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        as_tensor(q, "q")
        as_tensor(F, "F")
        check_min_rank(F, 2, "F", "(..., n_f, d_f)")
        check_dim_equal(F.shape[-1], self.d_f, "GeneralAttention", "d_f of F", "d_f of the module")
        check_dim_equal(q.shape[-1], self.d_q, "GeneralAttention", "d_q of q", "d_q of the module")
        require_boolean_mask(mask, "GeneralAttention")
        single = q.dim() == F.dim() - 1
        Q = q.unsqueeze(-2) if single else q
        if mask is not None and single:  # checked before its query axis is added: errors show the caller's shape
            mask = check_one_query_mask(mask, Q.shape[:-2], F)
        F = zero_masked(F, attended_keys(mask))  # a key no query may attend is inert, in the gradients too
        K, V = self.keys_values(F)
        c, a = attend(Q, K, V, mask, self.score)
        if single:
            return c.squeeze(-2), a.squeeze(-2)
        return c, a


@catalogued("eq5")
class OutputModel(nn.Module):
    """Eq. (5) with learned ``W_c`` ``(d_y, d_v)`` and ``b_c`` ``(d_y,)``.

    ``forward(c)`` returns class probabilities; ``logits(c)`` the pre-softmax
    values, which training losses such as ``F.cross_entropy`` expect.

    Args:
        d_v: context size.
        d_y: number of classes.

    Shape:
        c: ``(..., d_v)``; returns ``(..., d_y)``.

    Raises:
        ValueError: ``d_v`` or ``d_y`` is not an integer >= 1.
    """

    def __init__(self, d_v: int, d_y: int) -> None:
        super().__init__()
        check_integers("OutputModel", minimum=1, d_v=d_v, d_y=d_y)
        self.linear = nn.Linear(d_v, d_y)

    def logits(self, c: Tensor) -> Tensor:
        return self.linear(c)

    def forward(self, c: Tensor) -> Tensor:
        return output_model(c, self.linear.weight, self.linear.bias)


@catalogued(
    "extra:memory-addressing", title="Attention as soft memory addressing: address, normalise, read (article 4.3)"
)
class KeyValueMemory(nn.Module):
    """Attention as memory addressing (address, normalise, read).

    The memory holds key vectors (addresses) and value vectors (contents). A
    read with query ``q``: scores every address (Eq. 2), normalises the scores
    into a soft address (Eq. 3), and returns the weighted read (Eq. 4). A hard
    memory would return ``v`` of the single best address; the soft read is its
    differentiable relaxation. ``forward(Q, mask=None)`` is :meth:`read`.

    Args:
        keys: the addresses.
        values: the contents.
        score: the score function of Eq. (2).

    Shape:
        keys: ``(..., n_f, d_k)``; values: ``(..., n_f, d_v)``; Q: ``(..., n_q, d_k)``; mask: boolean
        broadcastable to ``(..., n_q, n_f)``, ``True`` = may attend; returns the read ``(..., n_q, d_v)``
        and the soft address ``(..., n_q, n_f)``.

    Raises:
        ValueError: if keys and values hold different numbers ``n_f`` of entries.
    """

    keys: Tensor  # buffers (register_buffer)
    values: Tensor

    def __init__(self, keys: Tensor, values: Tensor, score: ScoreFn = scaled_dot_score) -> None:
        super().__init__()
        check_dim_equal(keys.shape[-2], values.shape[-2], "KeyValueMemory", "n_f of keys", "n_f of values")
        self.register_buffer("keys", keys)
        self.register_buffer("values", values)
        self.score_fn = score

    def address(self, Q: Tensor) -> Tensor:
        """Scores of every query against every address, ``(..., n_q, n_f)``."""
        return attention_scores(Q, self.keys, self.score_fn)

    def normalise(self, e: Tensor, mask: Tensor | None = None) -> Tensor:
        """Soft address: the softmax of the scores (Eq. 3).

        e: ``(..., n_q, n_f)``; mask: boolean broadcastable to e, ``True`` = may
        attend (a fully-masked row gives all-zero weights).
        """
        return align_scores(e, mask)

    def read(self, Q: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Returns ``(read vector, soft address)`` for queries ``Q`` ``(..., n_q, d_k)``.

        mask: boolean broadcastable to ``(..., n_q, n_f)``, ``True`` = may attend.
        """
        a = self.normalise(self.address(Q), mask)
        return context(a, self.values), a

    def forward(self, Q: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self.read(Q, mask)


@catalogued("extra:task-model", title="The task model of Fig. 1: feature, query, attention and output models composed")
class TaskModel(nn.Module):
    """The task model of Fig. 1: feature model -> (query model, attention model) -> output model.

    feature model: ``f_l -> W_F f_l`` (linear); query model: ``q -> W_Q q``
    (linear); attention model: :class:`attnsurvey.general_model.GeneralAttention`
    (Eq. 1-4), or with ``pool="mean"`` uniform weights over the allowed items;
    output model: Eq. (5). ``forward(F, q, mask)`` returns logits and weights; a
    masked item holding NaN/Inf reaches no output and no gradient (the feature
    model's included).

    Args:
        d_f: feature size.
        d_u: size of the raw query.
        n_classes: number of classes C.
        d: hidden size of the feature and query models.
        pool: ``"attention"`` or ``"mean"``.
        score: Table II score name of the attention model.

    Shape:
        F: ``(B, n, d_f)``; q: ``(B, d_u)``; mask: boolean ``(B, n)``, ``True`` = may attend (a real
        item); returns logits ``(B, C)`` and weights ``(B, n)``.

    Raises:
        ValueError: for an unknown ``pool``; in forward, as :class:`GeneralAttention`.
    """

    def __init__(
        self,
        d_f: int,
        d_u: int,
        n_classes: int,
        d: int = 32,
        pool: str = "attention",
        score: str = "scaled-multiplicative",
    ):
        super().__init__()
        if pool not in ("attention", "mean"):
            raise ValueError(f"pool must be 'attention' or 'mean', got {pool!r}")
        check_integers("TaskModel", minimum=1, d_f=d_f, d_u=d_u, n_classes=n_classes, d=d)
        self.pool = pool
        self.feature_model = nn.Linear(d_f, d)
        self.query_model = nn.Linear(d_u, d)
        self.attention = GeneralAttention(d_q=d, d_f=d, score=score)
        self.output = OutputModel(d, n_classes)

    def forward(self, F: Tensor, q: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        as_tensor(F, "F")
        as_tensor(q, "q")
        feats = self.feature_model(zero_masked(F, mask))  # a padded item holding NaN is inert in gradients too
        if self.pool == "attention":
            c, a = self.attention(self.query_model(q), feats, mask=mask)
        else:
            _, V = self.attention.keys_values(feats)
            e = torch.zeros(V.shape[:-1], dtype=V.dtype, device=V.device)  # a constant score: every item alike
            a = align_scores(e, mask)
            c = context(a.unsqueeze(-2), V).squeeze(-2)
        return self.output.logits(c), a
