"""§3.3.2 Multiplicity of queries: multi-hop attention, Eq. (41)-(42).

Multi-head attention (Eq. 38-40, :mod:`attnsurvey.query_related.multihead`)
asks several versions of one question *in parallel*. Multi-hop attention asks
them *in sequence*: after each hop the query is rewritten using what was just
read, so the next hop can look for something the first could not know about.

* Eq. (41)  ``q^(s+1) = transform(q^(s), c^(s))``
* Eq. (42)  ``e_l^(s) = score(concat(q^(s+1), c^(s)), k_l)``, then align and
  average the values into ``c^(s+1)``.

The initial context ``c^(0)`` defaults to the unweighted average of the values.

End-to-end memory networks (Sukhbaatar et al., 2015) are the special case
``transform(q, c) = q + c`` (or ``H q + c``) with a score that looks at the
updated query only; :func:`memory_network_read` and
:class:`EndToEndMemoryNetwork` implement that form with one input and one
output embedding per hop ("adjacent" weight tying).

Shapes are batch-first rows; masks are boolean with ``True`` = may attend.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_same_dtype, check_weight
from ..attention import attend_scores
from ..catalog import catalogued
from ..general_mechanisms.scoring import GeneralScore
from ..masking import finite_rows, zero_masked

CHAPTER = "chapters/ch03_3_2_query_multiplicity.ipynb"

ScoreFn = Callable[[Tensor, Tensor], Tensor]
Transform = Callable[[Tensor, Tensor], Tensor]


# ----------------------------------------------------------------------------------
# Eq. (41): query transforms
# ----------------------------------------------------------------------------------
@catalogued("eq41", title="Multi-hop query update q^(s+1) = transform(q^(s), c^(s))")
def add_transform(q: Tensor, c: Tensor) -> Tensor:
    """Eq. (41) with ``transform(q, c) = q + c`` (the memory-network update).

    Args:
        q: the query ``q^(s)``.
        c: the context ``c^(s)``.

    Shape:
        q: ``(..., d_q)``; c: ``(..., d_v)`` with ``d_v = d_q``. Returns ``(..., d_q)``.

    Returns:
        The next query ``q^(s+1)``.

    Raises:
        TypeError: if q or c is not a floating-point tensor.
        ValueError: unless ``d_q == d_v``.
    """
    as_tensor(q, "q")
    as_tensor(c, "c")
    check_dim_equal(q.shape[-1], c.shape[-1], "the additive query update q + c", "d_q", "d_v")
    return q + c


@catalogued("eq41")
def linear_transform(q: Tensor, c: Tensor, H: Tensor) -> Tensor:
    """Eq. (41) with ``transform(q, c) = H q + c`` (Sukhbaatar et al.'s layer-wise form).

    Args:
        q: the query ``q^(s)``.
        c: the context ``c^(s)``.
        H: the query map.

    Shape:
        q: ``(..., d_q)``; c: ``(..., d_q)``; H: ``(d_q, d_q)``. Returns ``(..., d_q)``.

    Returns:
        The next query ``q^(s+1)``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    as_tensor(q, "q")
    check_weight(H, (q.shape[-1], q.shape[-1]), "H", "(d_q, d_q)")
    return add_transform(q @ H.T, c)


# ----------------------------------------------------------------------------------
# Eq. (42): the score of a hop, and the general multi-hop loop
# ----------------------------------------------------------------------------------
@catalogued("eq42", title="Hop score on the concatenated query and context, score(concat(q^(s+1), c^(s)), k_l)")
def hop_scores(q_next: Tensor, c: Tensor, K: Tensor, score: ScoreFn) -> Tensor:
    """Scores of one hop, Eq. (42): ``e_l = score(concat(q^(s+1), c^(s)), k_l)``.

    Args:
        q_next: the updated query ``q^(s+1)``.
        c: the context ``c^(s)``.
        K: keys.
        score: any Table II function taking queries of size ``d_q + d_v``.

    Shape:
        q_next: ``(..., d_q)``; c: ``(..., d_v)``; K: ``(..., n_f, d_k)``.
        Returns e: ``(..., n_f)``.

    Returns:
        The scores ``e^(s)``.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    as_tensor(q_next, "q^(s+1)")
    as_tensor(c, "c^(s)")
    as_tensor(K, "K")
    check_min_rank(K, 2, "K", "(..., n_f, d_k)")
    if q_next.shape[:-1] != c.shape[:-1]:
        raise ValueError(f"q^(s+1) {tuple(q_next.shape)} and c^(s) {tuple(c.shape)} must share their batch dimensions")
    query = torch.cat([q_next, c], dim=-1).unsqueeze(-2)  # (..., 1, d_q + d_v)
    return score(query, K).squeeze(-2)


def _initial_context(V: Tensor, mask: Tensor | None) -> Tensor:
    e = torch.zeros(V.shape[:-1], dtype=V.dtype, device=V.device)
    return attend_scores(e, V, mask, "uniform")[0]  # the unweighted average over allowed positions


def _refuse_overflowing_scores(c: Tensor, e: Tensor, q: Tensor, K: Tensor, mask: Tensor | None) -> None:
    """Raise if the context is not finite because a finite query and key gave an infinite score
    (``attnsurvey.attention.refuse_overflowing_scores`` for the hops, whose scores are computed here)."""
    if c.is_meta or bool(torch.isfinite(c.detach()).all()):  # detached: isfinite would save c for backward
        return
    over = torch.isinf(e) & finite_rows(q)[..., None] & finite_rows(K)
    if mask is not None:
        over = over & mask
    if bool(over.any()):
        raise ValueError(
            f"multi-hop attention: the scores e of q {tuple(q.shape)} and K {tuple(K.shape)} overflow {e.dtype}, "
            "so the weights would be NaN; compute in float64 or scale the inputs down"
        )


@catalogued("eq41", "eq42")
def multi_hop_attention(
    q0: Tensor,
    K: Tensor,
    V: Tensor,
    score: ScoreFn | list[ScoreFn],
    n_hops: int,
    transform: Transform | list[Transform] = add_transform,
    c0: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The survey's general multi-hop attention, Eq. (41)-(42), for ``n_hops`` steps.

    Args:
        q0: the initial query ``q^(0)``.
        K: keys.
        V: values.
        score: ``score(Q, K)`` taking queries of size ``d_q + d_v``: a single
            function, or a list with one per hop for unshared weights.
        n_hops: the number of hops.
        transform: ``transform(q, c)`` of Eq. (41): one function or a list with
            one per hop.
        c0: the initial context, default the unweighted average of the values.
        mask: boolean ``(..., n_f)``, ``True`` = may attend.

    Shape:
        q0: ``(..., d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``;
        c0: ``(..., d_v)``. Returns c: ``(..., d_v)``, q: ``(..., d_q)``,
        A: ``(..., n_hops, n_f)``.

    Returns:
        ``(c, q, A)``: the last context, the last query and the weights of every hop.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: if ``n_hops < 1``, a per-hop list has the wrong length, shapes do not
            match, or a finite query and key give a score beyond the dtype's range (the
            weights would be NaN).
    """
    if n_hops < 1:
        raise ValueError(f"the number of hops must be >= 1, got n_hops={n_hops}")
    for sym, t, layout in (("K", K, "(..., n_f, d_k)"), ("V", V, "(..., n_f, d_v)")):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, layout)
    check_dim_equal(K.shape[-2], V.shape[-2], "multi-hop attention", "n_f of K", "n_f of V")
    as_tensor(q0, "q^(0)")
    scores = score if isinstance(score, (list, tuple, nn.ModuleList)) else [score] * n_hops
    transforms = transform if isinstance(transform, (list, tuple)) else [transform] * n_hops
    if len(scores) != n_hops or len(transforms) != n_hops:
        raise ValueError(
            f"per-hop lists need one entry per hop: n_hops={n_hops}, got {len(scores)} scores, "
            f"{len(transforms)} transforms"
        )
    c = _initial_context(V, mask) if c0 is None else as_tensor(c0, "c^(0)")
    check_dim_equal(c.shape[-1], V.shape[-1], "multi-hop attention", "d_v of c^(0)", "d_v of V")
    q, weights = q0, []
    for s in range(n_hops):
        q = transforms[s](q, c)  # Eq. (41)
        e = hop_scores(q, c, zero_masked(K, mask), scores[s])  # Eq. (42); padded keys inert in gradients
        c, a = attend_scores(e, V, mask)  # Eq. (3)-(4): c^(s+1)
        _refuse_overflowing_scores(c, e, q, K, mask)
        weights.append(a)
    return c, q, torch.stack(weights, dim=-2)


@catalogued("eq41")
class MultiHopAttention(nn.Module):
    """Module form of :func:`multi_hop_attention` with learned keys, values and scores.

    Keys ``K = F W_K^T`` (``W_K`` ``(d_k, d_f)``), values ``V = F W_V^T`` with
    ``d_v = d_q`` (so the query can absorb the context); the score of every hop
    is the general score ``concat(q, c)^T W k`` (Table II).
    ``forward(q0, F, mask=None)`` returns ``(c, q, A)``; mask boolean
    ``(..., n_f)``, ``True`` = may attend; a masked feature vector holding NaN/Inf
    reaches no output and no gradient (``W_K``'s and ``W_V``'s included).

    Args:
        d_q: the query size (and value size).
        d_f: the feature size.
        n_hops: the number of hops.
        d_k: the key size (default ``d_f``).
        transform: ``"add"`` (``q + c``) or ``"linear"`` (``H q + c`` with a learned ``H``).
        share: share the score across hops (one score per hop if False).

    Shape:
        q0: ``(..., d_q)``; F: ``(..., n_f, d_f)``. Returns c: ``(..., d_q)``,
        q: ``(..., d_q)``, A: ``(..., n_hops, n_f)``.

    Raises:
        ValueError: for an unknown transform or a size that is not an integer
            >= 1; in ``forward``, as :func:`multi_hop_attention`.
    """

    def __init__(
        self, d_q: int, d_f: int, n_hops: int, d_k: int | None = None, transform: str = "add", share: bool = True
    ) -> None:
        check_integers("MultiHopAttention", minimum=1, d_q=d_q, d_f=d_f, n_hops=n_hops)
        check_integers("MultiHopAttention", minimum=1, allow_none=True, d_k=d_k)
        super().__init__()
        if transform not in ("add", "linear"):
            raise ValueError(f"transform must be 'add' or 'linear', got {transform!r}")
        d_k = d_f if d_k is None else d_k
        check_integers("MultiHopAttention (Eq. 41-42)", minimum=1, d_q=d_q, d_f=d_f, d_k=d_k, n_hops=n_hops)
        self.n_hops = n_hops
        self.W_K = nn.Linear(d_f, d_k, bias=False)
        self.W_V = nn.Linear(d_f, d_q, bias=False)
        n_scores = 1 if share else n_hops
        self.scores = nn.ModuleList(GeneralScore(2 * d_q, d_k) for _ in range(n_scores))
        self.H = nn.Linear(d_q, d_q, bias=False) if transform == "linear" else None

    def _transform(self, q: Tensor, c: Tensor) -> Tensor:
        return add_transform(q, c) if self.H is None else linear_transform(q, c, self.H.weight)

    def forward(self, q0: Tensor, F: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        as_tensor(q0, "q0"), as_tensor(F, "F")
        scores: ScoreFn | list[ScoreFn] = self.scores[0]  # shared by every hop
        if len(self.scores) > 1:
            scores = list(self.scores)  # one per hop
        F = zero_masked(F, mask)  # a padded feature vector holding NaN is inert in the gradients too
        return multi_hop_attention(q0, self.W_K(F), self.W_V(F), scores, self.n_hops, self._transform, mask=mask)


# ----------------------------------------------------------------------------------
# End-to-end memory networks: q_{s+1} = q_s + c_s
# ----------------------------------------------------------------------------------
@catalogued("extra:memory-network-hops", title="End-to-end memory network hops, q_{s+1} = q_s + c_s (article 4.3)")
def memory_hop(u: Tensor, M: Tensor, C: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One memory-network hop: address with ``p = softmax(M u)``, read ``o = sum_i p_i c_i``.

    A fully-masked memory gives ``p = 0`` and ``o = 0``.

    Args:
        u: the controller state (the query).
        M: the input memory (keys).
        C: the output memory (values).
        mask: boolean ``(..., n)``, ``True`` = may attend (a real memory slot).

    Shape:
        u: ``(..., d)``; M: ``(..., n, d)``; C: ``(..., n, d_v)``.
        Returns o: ``(..., d_v)``, p: ``(..., n)``.

    Returns:
        ``(o, p)``: the read vector and the addressing weights.

    Raises:
        TypeError: if an input is not a floating-point tensor or u, M and C do
            not share a dtype.
        ValueError: on shape mismatches.
    """
    for sym, t, layout in (("M", M, "(..., n, d)"), ("C", C, "(..., n, d_v)")):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, layout)
    as_tensor(u, "u")
    check_same_dtype(u=u, M=M, C=C)
    check_dim_equal(u.shape[-1], M.shape[-1], "memory addressing u^T m_i", "d of u", "d of M")
    check_dim_equal(M.shape[-2], C.shape[-2], "memory read", "n of M", "n of C")
    return attend_scores((zero_masked(M, mask) @ u.unsqueeze(-1)).squeeze(-1), C, mask)


@catalogued("extra:memory-network-hops")
def memory_network_read(
    u: Tensor,
    M_hops: list[Tensor],
    C_hops: list[Tensor],
    mask: Tensor | None = None,
    H: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Several memory hops with the query update ``u^(s+1) = u^(s) + o^(s)`` (article 4.3).

    This is Eq. (41) with ``transform(q, c) = q + c`` (``H q + c`` if ``H`` is
    given) and a score that ignores the ``c`` half of Eq. (42).

    Args:
        u: the initial controller state.
        M_hops: the input memory of every hop (S hops).
        C_hops: the output memory of every hop.
        mask: boolean ``(..., n)``, ``True`` = may attend (a real memory slot).
        H: the optional query map of :func:`linear_transform`.

    Shape:
        u: ``(..., d)``; each of M_hops, C_hops: ``(..., n, d)``; H: ``(d, d)``.
        Returns u_final: ``(..., d)``, P: ``(..., S, n)``.

    Returns:
        ``(u_final, P)``: ``u^(S+1)`` (the input of the answer layer) and the
        addressing weights.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: if the lists are empty or of different lengths, or on the
            shape errors of :func:`memory_hop`.
    """
    if not M_hops or len(M_hops) != len(C_hops):
        raise ValueError(f"need one input and one output memory per hop, got {len(M_hops)} and {len(C_hops)}")
    ps = []
    for M, C in zip(M_hops, C_hops):
        o, p = memory_hop(u, M, C, mask)
        u = add_transform(u, o) if H is None else linear_transform(u, o, H)
        ps.append(p)
    return u, torch.stack(ps, dim=-2)


@catalogued("extra:memory-network-hops")
class EndToEndMemoryNetwork(nn.Module):
    """An end-to-end memory network for story question answering (Sukhbaatar et al., 2015).

    Sentences and the question are bags of words. There are ``n_hops + 1``
    embedding tables ``E_0 .. E_S`` with ``S = n_hops`` ("adjacent" tying): the
    question is embedded with ``E_0``; hop ``s`` (``s = 0 .. S-1``) uses ``E_s`` for its
    input memory ``M`` and ``E_{s+1}`` for its output memory ``C``. The answer layer
    reads the query after the last hop, ``u^(S+1)``. Token 0 is padding; an
    all-padding sentence is masked out.

    Args:
        vocab_size: the number of token ids.
        d: the embedding size.
        n_hops: the number of hops ``S``.
        n_answers: the number of answer classes.

    Shape:
        ``forward(story, question)``: story ``(B, n, L)`` and question ``(B, L_q)``
        token ids. Returns logits: ``(B, n_answers)``, P: ``(B, S, n)``.

    Raises:
        ValueError: if ``n_hops < 1``; in ``forward``, if story is not
            ``(B, n, L)`` or question not ``(B, L_q)`` with the same ``B``.
    """

    def __init__(self, vocab_size: int, d: int, n_hops: int, n_answers: int) -> None:
        super().__init__()
        if n_hops < 1:
            raise ValueError(f"the number of hops must be >= 1, got n_hops={n_hops}")
        self.n_hops = n_hops
        tables = [nn.Embedding(vocab_size, d, padding_idx=0) for _ in range(n_hops + 1)]
        for e in tables:
            nn.init.normal_(e.weight, std=0.1)
            with torch.no_grad():
                e.weight[0].zero_()
        self.embed = nn.ModuleList(tables)
        self.answer = nn.Linear(d, n_answers, bias=False)

    def forward(self, story: Tensor, question: Tensor) -> tuple[Tensor, Tensor]:
        if story.dim() != 3 or question.dim() != 2 or story.shape[0] != question.shape[0]:
            raise ValueError(
                f"story must be (B, n, L) and question (B, L_q) with the same B, got "
                f"{tuple(story.shape)} and {tuple(question.shape)}"
            )
        mask = (story != 0).any(-1)  # (B, n)
        u = self.embed[0](question).sum(-2)
        bags = [e(story).sum(-2) for e in self.embed]  # (B, n, d) per table
        u, P = memory_network_read(u, bags[:-1], bags[1:], mask)
        return self.answer(u), P
