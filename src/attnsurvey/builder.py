"""§3-§4: from a point of the taxonomy (Fig. 3, Table III) to a working model, and back.

:func:`build_model` turns a single-alternative :class:`~attnsurvey.taxonomy.TaxonomyPoint`
(one alternative per dimension; mechanisms joined by ``"+"`` are combined in the one
model) into a small classifier, assembled from the package's components:

* the **feature input** ``F`` ``(B, n_f, d_model)`` — a set or sequence of feature vectors;
* an optional **query input** ``G`` ``(B, n_g, d_model)`` — a question, a target
  phrase, a decoder state: whatever the query model reads.

Each dimension selects one stage of the model:

=========================  ====================================================================
dimension                  stage (the ``src`` component it uses)
=========================  ====================================================================
feature_representations    ``multi-representational``: two embeddings of every feature vector
                           combined by a meta-embedding, Eq. (21)-(22)
                           (:class:`~attnsurvey.feature_related.representations.MetaEmbedding`)
query_type                 ``basic``: ``q = W_q mean(G)``; ``specialized``: a query model that
                           attends over ``G`` with a learned query
                           (:class:`~attnsurvey.query_related.types.LearnedQueryAttention`);
                           ``self-attention`` alone: a learned query vector (Eq. 34);
                           ``self-attention + X``: first a token-to-token self-attention layer
                           over ``F`` (``Q = W_Q F``, Eq. 35, update Eq. 37), then query ``X``
feature_multiplicity       co-attention between ``F`` and ``G`` (alternating, interactive,
                           parallel, multi-grained; :mod:`~attnsurvey.feature_related.co_attention`)
                           or rotatory attention with ``G`` as the target and the two halves of
                           ``F`` as left and right context
                           (:class:`~attnsurvey.feature_related.rotatory.RotatoryAttention`);
                           their context vectors join the main one
feature_levels             ``hierarchical``: ``F`` cut into chunks, chunk contexts then a
                           document context (review eq. 8-9,
                           :func:`~attnsurvey.feature_related.levels.hierarchical_chunk_attention`);
                           ``attention-via-attention``: chunk means first, then the vectors
                           (:class:`~attnsurvey.feature_related.levels.AttentionViaAttention`)
scoring                    a Table II score (:func:`~attnsurvey.general_mechanisms.scoring.make_score`;
                           ``similarity`` is the cosine) or Luong's ``location`` score
                           (:func:`location_score`, here)
alignment                  soft/global, hard, local, reinforced
                           (:mod:`~attnsurvey.general_mechanisms.alignment`)
dimensionality             ``multi-dimensional``: a weight per feature, Eq. (30)-(32)
                           (:func:`~attnsurvey.general_mechanisms.dimensionality.multidimensional_attend`)
query_multiplicity         ``multi-head``: ``h`` attention steps on projected queries, concatenated
                           and mixed (Eq. 38-40); ``multi-hop``: ``q <- q + c`` between steps
                           (Eq. 41, :func:`~attnsurvey.query_related.multihop.add_transform`);
                           ``capsule-based``: one learned query per class and the probability
                           module of Eq. (44) (:mod:`~attnsurvey.query_related.capsule`)
=========================  ====================================================================

The *attention step* (:class:`AttentionStep`) is the general module of Fig. 2 — Eq. (1)
keys and values, Eq. (2) scores, Eq. (3) alignment, Eq. (4) context — with the chosen
score, alignment and dimensionality; multi-head, multi-hop and capsule-based attention
are built from several such steps, so that every combination of those four dimensions
builds. Some combinations have no meaning or no component that supports them (e.g. a
hard alignment inside hierarchical attention, whose component uses the softmax): they
raise ``ValueError`` naming the dimension and the value.

:func:`describe` is the reverse: the taxonomy point of a model. A model built here
records its configuration; for plain ``src`` modules (``GeneralAttention``,
``MultiHeadAttention``, the score modules, ...) a table maps module types to
dimension values (:data:`MODULE_POINTS`).

Stochastic alignments (hard, reinforced) sample in training mode (with the
``generator`` passed to ``forward``) and act greedily in eval mode; their score or
policy parameters learn through the score-function (REINFORCE) surrogate that
:meth:`TaxonomyModel.loss` adds to the cross-entropy.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ._checks import as_tensor, check_min_rank, check_weight
from .catalog import catalogued
from .feature_related import co_attention as _co_attention
from .feature_related import levels as _levels
from .feature_related import representations as _representations
from .feature_related import rotatory as _rotatory
from .general_mechanisms import alignment as _alignment
from .general_mechanisms import dimensionality as _dimensionality
from .general_mechanisms.scoring import ScoreModule, make_score
from .general_model import align, keys_values
from .query_related import capsule as _capsule
from .query_related import multihead as _multihead
from .query_related import multihop as _multihop
from .query_related import types as _types
from .taxonomy import DIMENSIONS, TABLE3, TAXONOMY, TaxonomyPoint

CHAPTER = "chapters/ch04_evaluation_taxonomy.ipynb"

#: Table III's names of scores that ``make_score`` spells differently.
SCORE_NAMES = {"similarity": "cosine"}
_SOFT = ("global", "soft")
_CO_ATTENTION = {
    "alternating-co-attention": _co_attention.AlternatingCoAttention,
    "interactive-co-attention": _co_attention.InteractiveCoAttention,
    "parallel-co-attention": _co_attention.ParallelCoAttention,
    "multi-grained-co-attention": _co_attention.MultiGrainedCoAttention,
}


def _bad(dim: str, value: str, why: str) -> ValueError:
    return ValueError(f"{dim}={value!r}: {why}")


# ----------------------------------------------------------------------------- location score
@catalogued(
    "extra:location-score",
    title="Location-based score e = W_a q (Luong et al.), from the query alone, for n_f <= n_max",
    chapter=CHAPTER,
)
def location_score(Q: Tensor, W_a: Tensor, n_f: int) -> Tensor:
    """Luong et al.'s *location-based* score: ``e = W_a q``, from the query alone.

    Luong et al. [4] tried it next to the content-based (multiplicative) score
    (Table III, row 2). The score of position ``l`` is the ``l``-th entry of
    ``W_a q``; the keys are not used, so ``W_a`` must have a row for every
    position: it is ``(n_max, d_q)`` and the model can attend to at most
    ``n_max`` feature vectors (the first ``n_f`` rows are used).

    Q: ``(..., n_q, d_q)``; W_a: ``(n_max, d_q)``. Returns e ``(..., n_q, n_f)``.
    Raises ``ValueError`` if ``n_f > n_max``, ``n_f < 1`` or W_a is not ``(n_max, d_q)``.
    """
    as_tensor(Q, "Q")
    check_min_rank(Q, 2, "Q", "(..., n_q, d_q)")
    as_tensor(W_a, "W_a")
    if W_a.dim() != 2:
        raise ValueError(f"W_a must have shape (n_max, d_q), got {tuple(W_a.shape)}")
    check_weight(W_a, (W_a.shape[0], Q.shape[-1]), "W_a", "(n_max, d_q)")
    n_max = W_a.shape[0]
    if not 1 <= n_f <= n_max:
        raise ValueError(f"location score needs 1 <= n_f <= n_max, got n_f={n_f}, n_max={n_max}")
    return Q @ W_a[:n_f].T


@catalogued("extra:location-score")
class LocationScore(ScoreModule):
    """Module form of :func:`location_score` with a learned ``W_a`` ``(n_max, d_q)``.

    ``forward(Q, K)`` reads only the number of keys ``n_f = K.shape[-2]``.
    """

    def __init__(self, d_q: int, n_max: int) -> None:
        super().__init__()
        if n_max < 1:
            raise ValueError(f"location score needs n_max >= 1, got n_max={n_max}")
        self.W_a = nn.Linear(d_q, n_max, bias=False)

    def forward(self, Q: Tensor, K: Tensor) -> Tensor:
        return location_score(Q, self.W_a.weight, K.shape[-2])


def _score(name: str, d_q: int, d_k: int, n_max: int) -> ScoreModule:
    if name == "location":
        return LocationScore(d_q, n_max)
    try:
        return make_score(SCORE_NAMES.get(name, name), d_q, d_k)
    except ValueError as err:
        raise _bad("scoring", name, str(err)) from None


# ----------------------------------------------------------------------------- one attention step
class AttentionStep(nn.Module):
    """The general attention module (Fig. 2, Eq. 1-4) with a chosen score, alignment, dimensionality.

    ``forward(Q, F, generator=None)`` with queries Q ``(B, n_q, d_q)`` and features
    F ``(B, n_f, d_f)`` returns ``(c, a, log_prob)``: contexts ``(B, n_q, d_k)``,
    weights ``(B, n_q, n_f)`` (for multi-dimensional attention: averaged over the
    features) and the log-probability of the sampled choice (hard, reinforced;
    ``None`` otherwise), summed over queries ``(B,)``.
    Raises ``ValueError`` for combinations without a component (multi-dimensional
    attention with a non-additive score or a non-soft alignment).
    """

    def __init__(
        self, d_q: int, d_f: int, d_k: int, scoring: str, alignment: str, dimensionality: str,
        n_max: int, window: float = 2.0,
    ) -> None:
        super().__init__()
        self.alignment, self.dimensionality, self.window = alignment, dimensionality, window
        self.W_K = nn.Linear(d_f, d_k, bias=False)
        self.W_V = nn.Linear(d_f, d_k, bias=False)
        if dimensionality == "multi-dimensional":
            if scoring != "additive":
                raise _bad("dimensionality", dimensionality, f"Eq. (31) widens the additive score; got scoring={scoring!r}")
            if alignment not in _SOFT:
                raise _bad("dimensionality", dimensionality, f"Eq. (32) is a softmax per feature; got alignment={alignment!r}")
            self._md = _dimensionality.multidimensional_attend
            self.W1 = nn.Linear(d_q, d_k, bias=False)
            self.W2 = nn.Linear(d_k, d_k, bias=True)
            self.W_d = nn.Parameter(torch.randn(d_k, d_k) / math.sqrt(d_k))
            return
        self.score = _score(scoring, d_q, d_k, n_max)
        if alignment in _SOFT:  # Eq. (25) is the softmax of Eq. (3)
            self._soft = align
        elif alignment == "hard":
            self._hard = _alignment.hard_align
        elif alignment == "local":
            self._local = _alignment.local_align
            self.position = _alignment.PredictivePosition(d_q, d_k)
        elif alignment == "reinforced":
            self._subset = _alignment.bernoulli_subset
            self._reinforced = _alignment.reinforced_align
            self.policy = make_score("general", d_q, d_k)
            self.policy_bias = nn.Parameter(torch.tensor(1.0))  # start by keeping most positions
        else:
            raise _bad("alignment", alignment, f"choose from {TAXONOMY['general']['alignment']}")

    def forward(self, Q: Tensor, F: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        K, V = keys_values(F, self.W_K.weight, self.W_V.weight)  # Eq. (1)
        if self.dimensionality == "multi-dimensional":  # Eq. (30)-(32)
            c, A = self._md(Q, K, V, self.W1.weight, self.W2.weight, self.W_d, self.W2.bias)
            return c, A.mean(-1), None
        e = self.score(Q, K)  # Eq. (2)
        log_prob = None
        if self.alignment in _SOFT:  # Eq. (25)
            a = self._soft(e)
        elif self.alignment == "hard":  # Eq. (26)
            h = self._hard(e, "sample" if self.training else "argmax", generator)
            a, log_prob = h.a, h.log_prob.sum(-1)
        elif self.alignment == "local":  # Eq. (27)-(29), predictive position
            p = self.position(Q, K.shape[-2])
            a = self._local(e, p, self.window)
        else:  # reinforced: a Bernoulli policy picks a subset, soft alignment over it
            logits = self.policy(Q, K) + self.policy_bias
            z, lp = self._subset(logits, generator, greedy=not self.training)
            a, log_prob = self._reinforced(e, z), lp.sum(-1)
        return a @ V, a, log_prob  # Eq. (4)


class _Heads(nn.Module):
    """Multi-head attention (Eq. 38-40) made of ``h`` attention steps, or one step when ``h == 1``."""

    def __init__(self, d: int, h: int, **step: Any) -> None:
        super().__init__()
        self.h = h
        if h == 1:
            self.steps = nn.ModuleList([AttentionStep(d, d, d, **step)])
            return
        split = _multihead.split_heads
        merge = _multihead.merge_heads
        self._split, self._merge = split, merge
        self.W_Q = nn.Linear(d, d, bias=False)  # Eq. (38): h query projections, stacked
        self.steps = nn.ModuleList(AttentionStep(d // h, d, d // h, **step) for _ in range(h))  # Eq. (39)
        self.W_O = nn.Linear(d, d, bias=False)  # Eq. (40)

    def forward(self, Q: Tensor, F: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor | None]:
        if self.h == 1:
            return self.steps[0](Q, F, generator)
        Qh = self._split(self.W_Q(Q), self.h)  # (B, h, n_q, d/h)
        outs = [step(Qh[..., j, :, :], F, generator) for j, step in enumerate(self.steps)]
        c = self._merge(torch.stack([o[0] for o in outs], dim=-3))
        a = torch.stack([o[1] for o in outs], dim=-3).mean(-3)  # average of the head weights
        lps = [o[2] for o in outs if o[2] is not None]
        return self.W_O(c), a, (sum(lps) if lps else None)


def _add_lp(total: Tensor | None, lp: Tensor | None) -> Tensor | None:
    if lp is None:
        return total
    return lp if total is None else total + lp


# ----------------------------------------------------------------------------- the model
@catalogued("extra:taxonomy-builder")
class TaxonomyModel(nn.Module):
    """A classifier assembled from one configuration of the taxonomy (see the module notes).

    ``forward(F, G=None, generator=None)`` with F ``(B, n_f, d_model)`` and the query
    input G ``(B, n_g, d_model)`` returns logits ``(B, n_classes)``; the last attention
    weights of the main attention, ``(B, n_q, n_f)``, are kept in ``last_weights`` and
    the log-probability of sampled alignments in ``last_log_prob``.
    ``point`` is the configuration it was built from.
    """

    def __init__(
        self, point: TaxonomyPoint, d_model: int, n_classes: int, n_max: int = 16,
        heads: int = 2, hops: int = 2, chunk: int = 4, window: float = 2.0,
    ) -> None:
        super().__init__()
        cfg = {d: getattr(point, d)[0] for d in DIMENSIONS}
        self.point, self.d, self.n_classes, self.n_max = point, d_model, n_classes, n_max
        self.chunk = chunk
        fm, = cfg["feature_multiplicity"]
        fl, = cfg["feature_levels"]
        fr, = cfg["feature_representations"]
        sc, = cfg["scoring"]
        al, = cfg["alignment"]
        dm, = cfg["dimensionality"]
        qt = set(cfg["query_type"])
        qm = set(cfg["query_multiplicity"])
        self.fm, self.fl, self.fr, self.qt, self.qm = fm, fl, fr, qt, qm
        step = dict(scoring=sc, alignment=al, dimensionality=dm, n_max=n_max, window=window)
        if {"capsule-based", "multi-head"} <= qm:
            raise _bad("query_multiplicity", " + ".join(sorted(qm)), "capsule-based attention with several heads is not supported")
        if "singular" in qm and len(qm) > 1:
            raise _bad("query_multiplicity", "singular", "cannot be combined with another query multiplicity")
        h = heads if "multi-head" in qm else 1
        if d_model % h:
            raise _bad("query_multiplicity", "multi-head", f"h={h} must divide d_model={d_model}")
        self.n_hops = hops if "multi-hop" in qm else 1
        if self.n_hops > 1:
            self._hop = _multihop.add_transform

        # feature representations: Eq. (21)-(22) over two embeddings of every feature vector
        if fr == "multi-representational":
            self.embed2 = nn.Sequential(nn.Linear(d_model, d_model // 2 or 1), nn.Tanh())
            meta = _representations.MetaEmbedding
            self.meta = meta([d_model, d_model // 2 or 1], d_model)

        # query type
        if qt - {"basic", "specialized", "self-attention"}:
            raise _bad("query_type", " + ".join(sorted(qt)), "unknown query type")
        if "self-attention" in qt and len(qt) > 1:  # token-to-token layer first (Eq. 35, 37)
            self._fq = _types.feature_queries
            self._update = _types.update_residual_norm
            self.W_Q_self = nn.Linear(d_model, d_model, bias=False)
            self.self_layer = _Heads(d_model, h, **step)
        if "specialized" in qt:
            lqa = _types.LearnedQueryAttention
            self.query_model = lqa(d_model, d_model)
        if qt & {"basic", "specialized"}:
            self.W_q = nn.Linear(d_model, d_model)
        else:  # self-attention alone: a learned query vector (Eq. 34)
            self.u = nn.Parameter(torch.randn(d_model) / math.sqrt(d_model))
        if len(qt & {"basic", "specialized"}) > 1:
            raise _bad("query_type", "basic + specialized", "a model here has one outside query")

        # levels and the main attention
        if fl != "single-level":
            if qm != {"singular"}:
                raise _bad("feature_levels", fl, f"its component takes one query; got query_multiplicity={' + '.join(sorted(qm))!r}")
            if al not in _SOFT or dm != "single-dimensional":
                raise _bad("feature_levels", fl, f"its component uses the softmax; got alignment={al!r}, dimensionality={dm!r}")
            if sc == "location":
                raise _bad("feature_levels", fl, "the location score needs one flat sequence of positions")
        if fl == "hierarchical":
            self._hier = _levels.hierarchical_chunk_attention
            self.W_K_h = nn.Linear(d_model, d_model, bias=False)
            self.W_V_h = nn.Linear(d_model, d_model, bias=False)
            self.score_h = _score(sc, d_model, d_model, n_max)
        elif fl == "attention-via-attention":
            ava = _levels.AttentionViaAttention
            try:
                self.ava = ava(d_model, d_model, d_model, d_v_w=d_model, d_v_c=d_model, score=SCORE_NAMES.get(sc, sc))
            except ValueError as err:
                raise _bad("scoring", sc, f"with feature_levels={fl!r}: {err}") from None
        elif "capsule-based" in qm:
            self.Q_caps = nn.Parameter(torch.randn(n_classes, d_model) / math.sqrt(d_model))
            self._caps_p = _capsule.capsule_probability
            self.W_p = nn.Parameter(torch.randn(n_classes, d_model) / math.sqrt(d_model))
            self.b_p = nn.Parameter(torch.zeros(n_classes))
            self.main = _Heads(d_model, 1, **step)
        else:
            self.main = _Heads(d_model, h, **step)
        main_width = 2 * d_model if fl == "attention-via-attention" else d_model

        # feature multiplicity: extra context vectors from F and G together
        extra = 0
        if fm in _CO_ATTENTION:
            cls = _CO_ATTENTION[fm]
            self.co = cls(d_model, d_model, d_model)
            extra = 4 * d_model if fm == "multi-grained-co-attention" else 2 * d_model
        elif fm == "rotatory":
            if sc == "location":
                raise _bad("feature_multiplicity", fm, "rotatory attention scores words against phrases, not positions")
            rot = _rotatory.RotatoryAttention
            try:
                self.rot = rot(d_model, d_model, hops=self.n_hops, score=SCORE_NAMES.get(sc, sc))
            except ValueError as err:
                raise _bad("scoring", sc, f"with feature_multiplicity='rotatory': {err}") from None
            extra = self.rot.out_dim
        elif fm != "singular":
            raise _bad("feature_multiplicity", fm, "unknown")
        self.out = nn.Linear(main_width + extra, n_classes) if ("capsule-based" not in qm or extra) else None
        self.last_weights: Tensor | None = None
        self.last_log_prob: Tensor | None = None

    # -- stages ---------------------------------------------------------------
    def _needs_G(self) -> bool:
        return bool(self.qt & {"basic", "specialized"}) or self.fm != "singular"

    def _query(self, F: Tensor, G: Tensor | None) -> Tensor:
        B = F.shape[0]
        if "specialized" in self.qt:
            g, _ = self.query_model(G)  # a query model that reads the question itself
            return self.W_q(g).unsqueeze(-2)
        if "basic" in self.qt:
            return self.W_q(G.mean(-2)).unsqueeze(-2)
        return self.u.expand(B, 1, self.d)

    def forward(self, F: Tensor, G: Tensor | None = None, generator: torch.Generator | None = None) -> Tensor:
        as_tensor(F, "F")
        if F.dim() != 3 or F.shape[-1] != self.d:
            raise ValueError(f"F must have shape (B, n_f, d_model={self.d}), got {tuple(F.shape)}")
        n_f = F.shape[1]
        if self._needs_G():
            if G is None:
                raise ValueError(
                    f"query_type={'+'.join(sorted(self.qt))!r} / feature_multiplicity={self.fm!r} needs the query input G"
                )
            as_tensor(G, "G")
            if G.dim() != 3 or G.shape[0] != F.shape[0] or G.shape[-1] != self.d:
                raise ValueError(f"G must have shape (B={F.shape[0]}, n_g, d_model={self.d}), got {tuple(G.shape)}")
        if self.main_needs_nmax() and n_f > self.n_max:
            raise ValueError(f"scoring='location' needs n_f <= n_max, got n_f={n_f}, n_max={self.n_max}")
        log_prob: Tensor | None = None
        if self.fr == "multi-representational":
            F = self.meta([F, self.embed2(F)])[0]  # the meta-embedding x^(e), Eq. (22)
        if "self-attention" in self.qt and len(self.qt) > 1:
            C, _, lp = self.self_layer(self._fq(F, self.W_Q_self.weight), F, generator)
            F, log_prob = self._update(F, C), _add_lp(log_prob, lp)
        q = self._query(F, G)  # (B, 1, d)
        parts = []
        if self.fl == "hierarchical":
            if n_f % self.chunk:
                raise ValueError(f"feature_levels='hierarchical' cuts F into chunks of {self.chunk}; n_f={n_f} is not a multiple")
            Fc = F.reshape(F.shape[0], n_f // self.chunk, self.chunk, self.d)
            res = self._hier(q.squeeze(-2), self.W_K_h(Fc), self.W_V_h(Fc), score=self.score_h)
            parts.append(res.c)
            a = (res.a_word * res.a_chunk.unsqueeze(-1)).reshape(F.shape[0], 1, n_f)
        elif self.fl == "attention-via-attention":
            if n_f % self.chunk:
                raise ValueError(f"feature_levels='attention-via-attention' groups F in chunks of {self.chunk}; n_f={n_f} is not a multiple")
            coarse = F.reshape(F.shape[0], n_f // self.chunk, self.chunk, self.d).mean(-2)
            res = self.ava(q, coarse, F)
            parts.append(res.c.squeeze(-2))
            a = res.a_c
        else:
            Q = q + self.Q_caps if "capsule-based" in self.qm else q  # (B, n_q, d)
            for _ in range(self.n_hops):  # multi-hop: Eq. (41), q <- q + c
                c, a, lp = self.main(Q, F, generator)
                log_prob = _add_lp(log_prob, lp)
                Q = self._hop(Q, c) if self.n_hops > 1 else Q
            if "capsule-based" not in self.qm:
                parts.append(c.squeeze(-2))
        self.last_weights = a
        if self.fm in _CO_ATTENTION:
            res = self.co(F, G)
            parts.append(res.c if self.fm == "multi-grained-co-attention" else torch.cat([res.c1, res.c2], -1))
        elif self.fm == "rotatory":
            half = n_f // 2
            parts.append(self.rot(G, F[:, :half], F[:, half:]).r)
        self.last_log_prob = log_prob
        logits = self.out(torch.cat(parts, -1)) if self.out is not None else 0.0
        if "capsule-based" in self.qm:  # Eq. (44): one probability per class capsule
            p = self._caps_p(c, self.W_p, self.b_p).clamp(1e-6, 1 - 1e-6)
            logits = logits + torch.log(p) - torch.log1p(-p)
        return logits

    def main_needs_nmax(self) -> bool:
        return self.point.scoring == (("location",),)

    def loss(self, F: Tensor, G: Tensor | None, y: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Cross-entropy, plus the REINFORCE surrogate ``mean((CE - mean CE) * log p)`` for sampled alignments."""
        logits = self(F, G, generator)
        ce = nn.functional.cross_entropy(logits, y, reduction="none")
        loss = ce.mean()
        if self.last_log_prob is not None:
            cost = ce.detach()
            loss = loss + ((cost - cost.mean()) * self.last_log_prob).mean()
        return loss


@catalogued(
    "extra:combined-mechanisms",
    title="§5 suggestions: multi-dimensional + multi-head, rotatory + multi-hop, capsule + multi-hop in one model",
    chapter="chapters/ch05_conclusion.ipynb",
)
@catalogued(
    "extra:taxonomy-builder",
    title="Build a working attention model from a point of the taxonomy, and describe a model by its point",
    chapter=CHAPTER,
)
@catalogued(*(row.id for row in TABLE3))
def build_model(
    point: TaxonomyPoint, d_model: int, n_classes: int, *, n_max: int = 16, heads: int = 2, hops: int = 2,
    chunk: int = 4, window: float = 2.0,
) -> TaxonomyModel:
    """Assemble a working attention classifier for one configuration of the taxonomy (§3, Table III).

    point: a :class:`~attnsurvey.taxonomy.TaxonomyPoint` with exactly one
    alternative per dimension (use ``point.configurations()`` to expand a Table III
    row whose cells list alternatives with ``","``); mechanisms combined with
    ``"+"`` go into one model. d_model: the feature and query size ``d_f = d_q``;
    n_classes: ``d_y``. n_max: the longest ``n_f`` for the location score; heads,
    hops: ``h`` and the number of hops; chunk: the chunk length of the two
    feature-level mechanisms; window: the half-width ``D`` of local alignment.
    Returns a :class:`TaxonomyModel` (``forward(F, G=None, generator=None)``).
    Raises ``ValueError`` naming the dimension and the value for: more than one
    alternative in a dimension, an unknown mechanism, a component that is not
    available, incompatible combinations or sizes.
    """
    if not isinstance(point, TaxonomyPoint):
        raise ValueError(f"point must be a TaxonomyPoint, got {type(point).__name__}")
    for dim in DIMENSIONS:
        cell = getattr(point, dim)
        if len(cell) != 1:
            alts = ", ".join(" + ".join(a) for a in cell)
            raise ValueError(
                f"{dim} lists {len(cell)} alternatives ({alts}); build one configuration at a time "
                "(see TaxonomyPoint.configurations())"
            )
    for name, v in (("d_model", d_model), ("n_classes", n_classes), ("heads", heads), ("hops", hops), ("chunk", chunk)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {name}={v}")
    return TaxonomyModel(point, d_model, n_classes, n_max=n_max, heads=heads, hops=hops, chunk=chunk, window=window)


# ----------------------------------------------------------------------------- describe
def point(**values: str) -> TaxonomyPoint:
    """A point from keyword values, every dimension not given at its plain default.

    Defaults: singular, single-level, single-representational, additive, global,
    single-dimensional, basic, singular. ``point(scoring="general")``.
    Raises ``ValueError`` for an unknown dimension or value.
    """
    base = dict(
        feature_multiplicity="singular", feature_levels="single-level",
        feature_representations="single-representational", scoring="additive", alignment="global",
        dimensionality="single-dimensional", query_type="basic", query_multiplicity="singular",
    )
    unknown = set(values) - set(base)
    if unknown:
        raise ValueError(f"unknown dimension(s) {sorted(unknown)}; the dimensions are {DIMENSIONS}")
    return TaxonomyPoint.from_strings(**{**base, **values})


def _module_points() -> dict[str, dict[str, str]]:
    """Module class name -> the dimension values it fixes (see :data:`MODULE_POINTS`)."""
    return {
        "MultiHeadAttention": {"scoring": "scaled-multiplicative", "query_type": "self-attention", "query_multiplicity": "multi-head"},
        "MultiHopAttention": {"scoring": "general", "query_multiplicity": "multi-hop"},
        "CapsuleAttention": {"scoring": "multiplicative", "query_type": "self-attention", "query_multiplicity": "capsule-based"},
        "MultiDimensionalAttention": {"dimensionality": "multi-dimensional"},
        "LocalAttention": {"alignment": "local"},
        "ReinforcedAlignment": {"alignment": "reinforced"},
        "RotatoryAttention": {"feature_multiplicity": "rotatory", "scoring": "activated-general", "query_type": "specialized"},
        "AlternatingCoAttention": {"feature_multiplicity": "alternating-co-attention"},
        "InteractiveCoAttention": {"feature_multiplicity": "interactive-co-attention"},
        "ParallelCoAttention": {"feature_multiplicity": "parallel-co-attention"},
        "MultiGrainedCoAttention": {"feature_multiplicity": "multi-grained-co-attention"},
        "HierarchicalAttention": {"feature_levels": "hierarchical", "query_type": "self-attention"},
        "AttentionViaAttention": {"feature_levels": "attention-via-attention"},
        "MetaEmbedding": {"feature_representations": "multi-representational", "query_type": "self-attention"},
        "LearnedQueryAttention": {"scoring": "multiplicative", "query_type": "self-attention"},
        "SelfAttention": {"scoring": "scaled-multiplicative", "query_type": "self-attention"},
        "GeneralAttention": {},
    }


#: Module class name -> dimension values, for :func:`describe` of plain ``src`` modules.
MODULE_POINTS: dict[str, dict[str, str]] = _module_points()

#: Score module class name -> Table III scoring value.
SCORE_POINTS: dict[str, str] = {
    "AdditiveScore": "additive", "ConcatScore": "additive", "DotScore": "multiplicative",
    "ScaledDotScore": "scaled-multiplicative", "GeneralScore": "general", "BilinearScore": "general",
    "BiasedGeneralScore": "biased-general", "ActivatedGeneralScore": "activated-general",
    "CosineScore": "similarity", "EuclideanScore": "similarity", "LocationScore": "location",
}


@catalogued("extra:taxonomy-builder")
def describe(model: nn.Module) -> TaxonomyPoint:
    """The taxonomy point of a model (the reverse of :func:`build_model`).

    A :class:`TaxonomyModel` returns the configuration it was built from. For a
    plain ``src`` module the point is read from :data:`MODULE_POINTS` (what the
    module's type fixes) and its ``score`` attribute (:data:`SCORE_POINTS`); every
    other dimension takes its plain default (see :func:`point`).
    Raises ``ValueError`` for a module type the taxonomy does not know.
    """
    if isinstance(model, TaxonomyModel):
        return model.point
    name = type(model).__name__
    if name in SCORE_POINTS:
        return point(scoring=SCORE_POINTS[name])
    if name not in MODULE_POINTS:
        raise ValueError(f"describe() does not know module type {name!r}; known: {sorted(MODULE_POINTS)}")
    values = dict(MODULE_POINTS[name])
    score = getattr(model, "score", None)
    if isinstance(score, nn.Module) and type(score).__name__ in SCORE_POINTS:
        values["scoring"] = SCORE_POINTS[type(score).__name__]
    return point(**values)


# ----------------------------------------------------------------------------- experiments
def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def summary(model: TaxonomyModel) -> str:
    """A short text summary: the model's point, one line per dimension, and its size."""
    lines = [f"{d:24s} {v}" for d, v in model.point.as_strings().items()]
    lines.append(f"{'trainable parameters':24s} {count_parameters(model)}")
    return "\n".join(lines)


@catalogued("extra:combined-mechanisms")
def fit_and_evaluate(
    p: TaxonomyPoint, train: dict[str, Tensor], test: dict[str, Tensor], n_classes: int, *, epochs: int = 15,
    batch_size: int = 64, lr: float = 0.02, seed: int = 0, **build_kw: Any,
) -> dict[str, float]:
    """Build ``p``, train it on ``train`` (a dict with ``F``, ``G``, ``y``), score it on ``test``.

    Uses :func:`attnsurvey.training.train` with shuffled mini-batches; the
    seed fixes the initial weights, the batch order and the alignment samples.
    Returns ``{"accuracy", "attention_on_gold", "parameters"}``, where
    ``attention_on_gold`` is the mean weight of the main attention on the gold
    position ``test["pos"]`` (Eq. 46 with a single gold region), when present.
    """
    from .training import accuracy, minibatches, seed_everything
    from .training import train as _train

    g = seed_everything(seed)
    model = build_model(p, train["F"].shape[-1], n_classes, **build_kw)
    batches = minibatches((train["F"], train["G"], train["y"]), epochs, batch_size, generator=g)
    _train(model, lambda m, b: m.loss(b[0], b[1], b[2], generator=g), batches, lr=lr)
    model.eval()
    with torch.no_grad():
        logits = model(test["F"], test["G"])
    out = {"accuracy": accuracy(logits, test["y"]), "parameters": float(count_parameters(model))}
    if "pos" in test and model.last_weights is not None:
        a = model.last_weights.reshape(len(test["y"]), -1, test["F"].shape[1]).mean(1)
        out["attention_on_gold"] = float(a.gather(-1, test["pos"][:, None]).mean())
    return out
