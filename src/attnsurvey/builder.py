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
query_multiplicity         ``multi-head``: ``h`` attention steps as the heads of the one stack,
                           :func:`~attnsurvey.query_related.multihead.multi_head_attention`
                           (Eq. 38-40); ``multi-hop``: ``q <- q + c`` between steps
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

Shapes: B batch, n_f feature vectors, n_g query-input vectors, n_q queries, d_model feature and
query size, h heads, n_classes classes.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Final, TypedDict, Unpack, cast

import torch
from torch import Tensor, nn

from ._checks import Default, as_tensor, check_integers, option_defaults, with_defaults
from .attention_step import SOFT_ALIGNMENTS, AttentionStep, Heads, add_log_prob, step_score, taxonomy_error
from .catalog import catalogued, declare
from .describe import MODULE_POINTS, SCORE_POINTS, describe, point, score_point
from .feature_related import co_attention as _co_attention
from .feature_related import levels as _levels
from .feature_related import representations as _representations
from .feature_related import rotatory as _rotatory
from .general_mechanisms.scoring import SCORE_ALIASES, LocationScore, location_score
from .masking import masked_mean
from .query_related import capsule as _capsule
from .query_related import multihop as _multihop
from .query_related import types as _types
from .taxonomy import DIMENSIONS, TABLE3, TaxonomyPoint
from .training import accuracy, minibatches, seed_everything
from .training import train as _train

#: Re-exported: the attention step, the describer, Luong's location score (now in the score registry).
__all__ = [
    "AttentionStep",
    "BUILD_DEFAULTS",
    "BuildOptions",
    "Heads",
    "MODULE_POINTS",
    "SCORE_POINTS",
    "LocationScore",
    "TaxonomyModel",
    "build_model",
    "count_parameters",
    "describe",
    "fit_and_evaluate",
    "location_score",
    "point",
    "score_point",
    "summary",
]

CHAPTER = "chapters/ch04_evaluation_taxonomy.ipynb"

#: Table III's names of scores that ``make_score`` spells differently (from the score registry).
SCORE_NAMES = SCORE_ALIASES
_CO_ATTENTION = {
    "alternating-co-attention": _co_attention.AlternatingCoAttention,
    "interactive-co-attention": _co_attention.InteractiveCoAttention,
    "parallel-co-attention": _co_attention.ParallelCoAttention,
    "multi-grained-co-attention": _co_attention.MultiGrainedCoAttention,
}


# Luong's location score is defined in the score registry (general_mechanisms.scoring); the builder teaches it.
declare(
    "attnsurvey.builder.location_score",
    "extra:location-score",
    title="Location-based score e = W_a q (Luong et al.), from the query alone, for n_f <= n_max",
)
declare("attnsurvey.builder.LocationScore", "extra:location-score")


def _marked(module: nn.Module, markers: dict[str, str], default: str) -> str:
    """The value of the first marker attribute that ``module`` has (in order), else ``default``."""
    return next((value for attr, value in markers.items() if hasattr(module, attr)), default)


# ----------------------------------------------------------------------------- the model
class BuildOptions(TypedDict, total=False):
    """The keyword options of :func:`build_model` and :class:`TaxonomyModel` (defaults: :data:`BUILD_DEFAULTS`).

    :func:`build_model`'s docstring explains each of them.
    """

    n_max: Annotated[int, Default(16)]
    heads: Annotated[int, Default(2)]
    hops: Annotated[int, Default(2)]
    chunk: Annotated[int, Default(4)]
    window: Annotated[float, Default(2.0)]
    hop_form: Annotated[str, Default("memory")]


#: The value of every :class:`BuildOptions` option that a call leaves out.
BUILD_DEFAULTS: Final[BuildOptions] = option_defaults(BuildOptions)


@catalogued("extra:taxonomy-builder")
class TaxonomyModel(nn.Module):
    """A classifier assembled from one configuration of the taxonomy (see the module notes).

    ``forward(F, G=None, generator=None)`` returns logits; the last attention
    weights of the main attention are kept in ``last_weights`` and the
    log-probability of sampled alignments in ``last_log_prob``.

    Args:
        point: the configuration it is built from (one alternative per dimension).
        d_model: the feature and query size ``d_f = d_q``.
        n_classes: the number of classes ``d_y``.
        **options: the keyword options :class:`BuildOptions` (defaults in :data:`BUILD_DEFAULTS`;
            :func:`build_model`'s docstring explains them).

    Shape:
        F: ``(B, n_f, d_model)``; G: ``(B, n_g, d_model)``; returns logits ``(B, n_classes)``;
        ``last_weights``: ``(B, n_q, n_f)``.

    Raises:
        ValueError: for sizes below 1 and for configurations or sizes that no component supports;
            in forward, for F or G of the wrong shape or dtype, a missing G that the configuration
            needs, or ``n_f > n_max`` with the location score.
        TypeError: for an option that :class:`BuildOptions` does not declare; in forward, if F or G
            is not a tensor.
    """

    def __init__(self, point: TaxonomyPoint, d_model: int, n_classes: int, **options: Unpack[BuildOptions]) -> None:
        super().__init__()
        full = with_defaults(options, BUILD_DEFAULTS, "BuildOptions")
        heads, hops, chunk = full["heads"], full["hops"], full["chunk"]
        check_integers(
            "TaxonomyModel", minimum=1, d_model=d_model, n_classes=n_classes, heads=heads, hops=hops, chunk=chunk
        )
        if full["hop_form"] not in HOP_FORMS:
            raise taxonomy_error(
                "query_multiplicity", "multi-hop", f"hop_form must be one of {HOP_FORMS}, got {full['hop_form']!r}"
            )
        self.hop_form = full["hop_form"]
        self.point, self.d, self.n_classes, self.n_max = point, d_model, n_classes, full["n_max"]
        self.chunk = full["chunk"]
        alternative = {d: getattr(point, d)[0] for d in DIMENSIONS}
        (self.fm,) = alternative["feature_multiplicity"]
        (self.fl,) = alternative["feature_levels"]
        (self.fr,) = alternative["feature_representations"]
        self.qt, self.qm = set(alternative["query_type"]), set(alternative["query_multiplicity"])
        (scoring,) = alternative["scoring"]
        (alignment,) = alternative["alignment"]
        (dimensionality,) = alternative["dimensionality"]
        step = dict(
            scoring=scoring,
            alignment=alignment,
            dimensionality=dimensionality,
            n_max=full["n_max"],
            window=full["window"],
        )
        # one step per dimension, in this order (the order in which the parameters are drawn)
        h = self._build_query_multiplicity(full["heads"], full["hops"])
        self._build_feature_representations()
        self._build_query_type(h, step)
        self._build_levels_and_main_attention(h, step)
        extra = self._build_feature_multiplicity(scoring)
        main_width = 2 * d_model if self.fl == "attention-via-attention" else d_model
        self.out = nn.Linear(main_width + extra, n_classes) if ("capsule-based" not in self.qm or extra) else None
        self.last_weights: Tensor | None = None
        self.last_log_prob: Tensor | None = None

    # -- construction, one step per dimension ----------------------------------
    def _build_query_multiplicity(self, heads: int, hops: int) -> int:
        """Check the query multiplicity; the hop transform of multi-hop attention. Returns the head count h."""
        qm, d_model = self.qm, self.d
        if {"capsule-based", "multi-head"} <= qm:
            raise taxonomy_error(
                "query_multiplicity",
                " + ".join(sorted(qm)),
                "capsule-based attention with several heads is not supported",
            )
        if "singular" in qm and len(qm) > 1:
            raise taxonomy_error("query_multiplicity", "singular", "cannot be combined with another query multiplicity")
        h = heads if "multi-head" in qm else 1
        if d_model % h:
            raise taxonomy_error("query_multiplicity", "multi-head", f"h={h} must divide d_model={d_model}")
        self.n_hops = hops if "multi-hop" in qm else 1
        if self.n_hops > 1:
            self._hop = _multihop.add_transform
            if self.hop_form == "eq41":  # Eq. (41) with transform H q + c; Eq. (42) scores concat(q, c) through W_42
                self.H = nn.Linear(d_model, d_model, bias=False)
                self.W_42 = nn.Linear(2 * d_model, d_model, bias=False)
        return h

    def _build_feature_representations(self) -> None:
        """Eq. (21)-(22): a second embedding of every feature vector and the meta-embedding of the two."""
        if self.fr == "multi-representational":
            d_model = self.d
            self.embed2 = nn.Sequential(nn.Linear(d_model, d_model // 2 or 1), nn.Tanh())
            meta = _representations.MetaEmbedding
            self.meta = meta([d_model, d_model // 2 or 1], d_model)

    def _build_query_type(self, h: int, step: dict[str, Any]) -> None:
        """The query: from G (basic), a query model (specialized) or a learned vector (self-attention, Eq. 34)."""
        qt, d_model = self.qt, self.d
        if qt - {"basic", "specialized", "self-attention"}:
            raise taxonomy_error("query_type", " + ".join(sorted(qt)), "unknown query type")
        if "self-attention" in qt and len(qt) > 1:  # token-to-token layer first (Eq. 35, 37)
            self._fq = _types.feature_queries
            self._update = _types.update_residual_norm
            self.W_Q_self = nn.Linear(d_model, d_model, bias=False)
            self.self_layer = Heads(d_model, h, **step)
        if "specialized" in qt:
            lqa = _types.LearnedQueryAttention
            self.query_model = lqa(d_model, d_model)
        if qt & {"basic", "specialized"}:
            self.W_q = nn.Linear(d_model, d_model)
        else:  # self-attention alone: a learned query vector (Eq. 34)
            self.u = nn.Parameter(torch.randn(d_model) / math.sqrt(d_model))
        if len(qt & {"basic", "specialized"}) > 1:
            raise taxonomy_error("query_type", "basic + specialized", "a model here has one outside query")

    def _build_levels_and_main_attention(self, h: int, step: dict[str, Any]) -> None:
        """The feature levels (hierarchical, attention-via-attention) or the main attention (capsules, heads)."""
        fl, qm, d_model, n_max = self.fl, self.qm, self.d, self.n_max
        scoring, alignment, dimensionality = step["scoring"], step["alignment"], step["dimensionality"]
        if fl != "single-level":
            if qm != {"singular"}:
                raise taxonomy_error(
                    "feature_levels",
                    fl,
                    f"its component takes one query; got query_multiplicity={' + '.join(sorted(qm))!r}",
                )
            if alignment not in SOFT_ALIGNMENTS or dimensionality != "single-dimensional":
                raise taxonomy_error(
                    "feature_levels",
                    fl,
                    f"its component uses the softmax; got alignment={alignment!r}, dimensionality={dimensionality!r}",
                )
            if scoring == "location":
                raise taxonomy_error("feature_levels", fl, "the location score needs one flat sequence of positions")
        if fl == "hierarchical":
            self._hier = _levels.hierarchical_chunk_attention
            self.W_K_h = nn.Linear(d_model, d_model, bias=False)
            self.W_V_h = nn.Linear(d_model, d_model, bias=False)
            self.score_h = step_score(scoring, d_model, d_model, n_max)
        elif fl == "attention-via-attention":
            ava = _levels.AttentionViaAttention
            try:
                self.ava = ava(d_model, d_model, d_model, d_v_w=d_model, d_v_c=d_model, score=scoring)
            except ValueError as err:
                raise taxonomy_error("scoring", scoring, f"with feature_levels={fl!r}: {err}") from None
        elif "capsule-based" in qm:
            self.Q_caps = nn.Parameter(torch.randn(self.n_classes, d_model) / math.sqrt(d_model))
            self._caps_p = _capsule.capsule_probability
            self.W_p = nn.Parameter(torch.randn(self.n_classes, d_model) / math.sqrt(d_model))
            self.b_p = nn.Parameter(torch.zeros(self.n_classes))
            self.main = Heads(d_model, 1, **step)
        else:
            self.main = Heads(d_model, h, **step)

    def _build_feature_multiplicity(self, scoring: str) -> int:
        """Co-attention or rotatory attention over F and G; returns the width of the extra context vectors."""
        fm, d_model = self.fm, self.d
        if fm in _CO_ATTENTION:
            self.co = _CO_ATTENTION[fm](d_model, d_model, d_model)
            return 4 * d_model if fm == "multi-grained-co-attention" else 2 * d_model
        if fm == "rotatory":
            if scoring == "location":
                raise taxonomy_error(
                    "feature_multiplicity", fm, "rotatory attention scores words against phrases, not positions"
                )
            rot = _rotatory.RotatoryAttention
            try:
                self.rot = rot(d_model, d_model, hops=self.n_hops, score=scoring)
            except ValueError as err:
                raise taxonomy_error("scoring", scoring, f"with feature_multiplicity='rotatory': {err}") from None
            return self.rot.out_dim
        if fm != "singular":
            raise taxonomy_error("feature_multiplicity", fm, "unknown")
        return 0

    # -- stages ---------------------------------------------------------------
    def _needs_G(self) -> bool:
        return bool(self.qt & {"basic", "specialized"}) or self.fm != "singular"

    def _query(self, F: Tensor, G: Tensor | None) -> Tensor:
        B = F.shape[0]
        if "specialized" in self.qt:
            g, _ = self.query_model(G)  # a query model that reads the question itself
            return self.W_q(g).unsqueeze(-2)
        if "basic" in self.qt:
            return self.W_q(cast(Tensor, G).mean(-2)).unsqueeze(-2)  # forward checked G is given (_needs_G)
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
            F, log_prob = self._update(F, C), add_log_prob(log_prob, lp)
        q = self._query(F, G)  # (B, 1, d)
        parts = []
        if self.fl == "hierarchical":
            if n_f % self.chunk:
                raise ValueError(
                    f"feature_levels='hierarchical' cuts F into chunks of {self.chunk}; n_f={n_f} is not a multiple"
                )
            Fc = F.reshape(F.shape[0], n_f // self.chunk, self.chunk, self.d)
            res = self._hier(q.squeeze(-2), self.W_K_h(Fc), self.W_V_h(Fc), score=self.score_h)
            parts.append(res.c)
            a = (res.a_word * res.a_chunk.unsqueeze(-1)).reshape(F.shape[0], 1, n_f)
        elif self.fl == "attention-via-attention":
            if n_f % self.chunk:
                raise ValueError(
                    f"feature_levels='attention-via-attention' groups F in chunks of {self.chunk}; n_f={n_f} is not a multiple"
                )
            coarse = F.reshape(F.shape[0], n_f // self.chunk, self.chunk, self.d).mean(-2)
            ava = self.ava(q, coarse, F)
            parts.append(ava.c.squeeze(-2))
            a = ava.a_c
        else:
            Q = q + self.Q_caps if "capsule-based" in self.qm else q  # (B, n_q, d)
            eq41 = self.n_hops > 1 and self.hop_form == "eq41"
            if eq41:  # c^(0): the unweighted average of the feature vectors (the survey averages the values)
                c = masked_mean(F).unsqueeze(-2).expand_as(Q)
            for _ in range(self.n_hops):
                if eq41:  # Eq. (41) q^(s+1) = H q^(s) + c^(s), then Eq. (42) attends with [q^(s+1); c^(s)]
                    Q = _multihop.linear_transform(Q, c, self.H.weight)
                    c, a, lp = self.main(self.W_42(torch.cat([Q, c], -1)), F, generator)
                else:  # the memory-network form: attend with q^(s), then q^(s+1) = q^(s) + c^(s)
                    c, a, lp = self.main(Q, F, generator)
                    Q = self._hop(Q, c) if self.n_hops > 1 else Q
                log_prob = add_log_prob(log_prob, lp)
            if "capsule-based" not in self.qm:
                parts.append(c.squeeze(-2))
        self.last_weights = a
        if self.fm in _CO_ATTENTION:
            co = self.co(F, G)
            parts.append(co.c if self.fm == "multi-grained-co-attention" else torch.cat([co.c1, co.c2], -1))
        elif self.fm == "rotatory":
            half = n_f // 2
            parts.append(self.rot(G, F[:, :half], F[:, half:]).r)
        self.last_log_prob = log_prob
        logits = self.out(torch.cat(parts, -1)) if self.out is not None else 0.0
        if "capsule-based" in self.qm:  # Eq. (44): one probability per class capsule
            p = self._caps_p(c, self.W_p, self.b_p).clamp(1e-6, 1 - 1e-6)
            logits = logits + torch.log(p) - torch.log1p(-p)
        return cast(Tensor, logits)  # out is None only for capsule models, whose term above is a Tensor

    def main_needs_nmax(self) -> bool:
        return isinstance(getattr(self, "main", None), Heads) and isinstance(
            getattr(self.main.steps[0], "score", None), LocationScore
        )

    def taxonomy_values(self) -> dict[str, tuple[str, ...]]:
        """The mechanisms of every dimension, read from this model's modules (used by :func:`describe`)."""
        step = self.main.steps[0] if hasattr(self, "main") else None
        if hasattr(self, "co"):
            fm = next(name for name, cls in _CO_ATTENTION.items() if isinstance(self.co, cls))
        else:
            fm = _marked(self, {"rot": "rotatory"}, "singular")
        fl = _marked(self, {"_hier": "hierarchical", "ava": "attention-via-attention"}, "single-level")
        fr = "multi-representational" if hasattr(self, "meta") else "single-representational"
        if step is None:
            scorer: nn.Module | None = self.score_h if hasattr(self, "score_h") else self.ava.score_w
            al, dm = "global", "single-dimensional"
        else:
            scorer = getattr(step, "score", None)
            dm = "multi-dimensional" if hasattr(step, "W_d") else "single-dimensional"
            named = self.point.alignment[0][0]  # "soft" and "global" are one mechanism: keep the point's word
            markers = {"position": "local", "policy": "reinforced", "_hard": "hard"}
            al = _marked(step, markers, named if named in SOFT_ALIGNMENTS else "global")
        sc = "additive" if scorer is None else score_point(scorer)
        qt: tuple[str, ...] = ()
        if hasattr(self, "self_layer"):
            qt += ("self-attention",)
        qt += ("specialized",) if hasattr(self, "query_model") else ("basic",) if hasattr(self, "W_q") else ()
        qt = qt or ("self-attention",)
        qm: tuple[str, ...] = ()
        if step is not None and self.main.h > 1:
            qm += ("multi-head",)
        if hasattr(self, "Q_caps"):
            qm += ("capsule-based",)
        if self.n_hops > 1:
            qm += ("multi-hop",)
        values = dict(
            feature_multiplicity=(fm,),
            feature_levels=(fl,),
            feature_representations=(fr,),
            scoring=(sc,),
            alignment=(al,),
            dimensionality=(dm,),
            query_type=qt,
            query_multiplicity=qm or ("singular",),
        )
        return values

    def loss(self, F: Tensor, G: Tensor | None, y: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Cross-entropy, plus the REINFORCE surrogate ``mean((CE - mean CE) * log p)`` for sampled alignments."""
        logits = self(F, G, generator)
        ce = nn.functional.cross_entropy(logits, y, reduction="none")
        loss = ce.mean()
        if self.last_log_prob is not None:
            cost = ce.detach()
            loss = loss + ((cost - cost.mean()) * self.last_log_prob).mean()
        return loss


HOP_FORMS = ("memory", "eq41")


@catalogued(
    "extra:combined-mechanisms",
    title="§5 suggestions: multi-dimensional + multi-head, rotatory + multi-hop, capsule + multi-hop in one model",
    chapter="chapters/ch05_conclusion.ipynb",
)
@catalogued(
    "extra:taxonomy-builder",
    title="Build a working attention model from a point of the taxonomy, and describe a model by its point",
)
@catalogued(*(row.id for row in TABLE3))
def build_model(point: TaxonomyPoint, d_model: int, n_classes: int, **options: Unpack[BuildOptions]) -> TaxonomyModel:
    """Assemble a working attention classifier for one configuration of the taxonomy (§3, Table III).

    Mechanisms combined with ``"+"`` go into one model.

    Args:
        point: a :class:`~attnsurvey.taxonomy.TaxonomyPoint` with exactly one alternative per
            dimension (use ``point.configurations()`` to expand a Table III row whose cells list
            alternatives with ``","``).
        d_model: the feature and query size ``d_f = d_q``.
        n_classes: ``d_y``.
        **options: keyword-only options (:class:`BuildOptions`; the defaults are :data:`BUILD_DEFAULTS`):
            n_max (16): the longest ``n_f`` for the location score; heads, hops (2, 2): ``h`` and the
            number of hops; chunk (4): the chunk length of the two feature-level mechanisms; window
            (2.0): the half-width ``D`` of local alignment; hop_form (multi-hop, ``"memory"``):
            ``"memory"``, the memory-network form (attend with ``q^(s)``, then
            ``q^(s+1) = q^(s) + c^(s)``), or ``"eq41"``: Eq. (41) with the transform
            ``q^(s+1) = H q^(s) + c^(s)`` (a learned ``H``; the layer-wise update of Sukhbaatar et al.,
            one instance of the survey's transform) and Eq. (42) scores of the concatenation
            ``[q^(s+1); c^(s)]`` (mapped back to ``d_model`` by a learned ``W_42``, which the bilinear
            scores absorb); ``c^(0)`` is the mean feature vector, a stand-in for the survey's mean of
            the value vectors, which live inside the attention step.

    Returns:
        A :class:`TaxonomyModel` (``forward(F, G=None, generator=None)``).

    Raises:
        ValueError: naming the dimension and the value for: a point that is not a ``TaxonomyPoint``,
            more than one alternative in a dimension, an unknown mechanism, a component that is not
            available, incompatible combinations or sizes.
        TypeError: for an option that :class:`BuildOptions` does not declare.
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
    return TaxonomyModel(point, d_model, n_classes, **options)


declare("attnsurvey.builder.describe", "extra:taxonomy-builder")  # defined in attnsurvey.describe


# ----------------------------------------------------------------------------- experiments
def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars of ``model``.

    Args:
        model: any module.

    Returns:
        The total number of elements of the parameters that require a gradient.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def summary(model: TaxonomyModel) -> str:
    """A short text summary: the model's point, one line per dimension, and its size.

    Args:
        model: a built taxonomy model.

    Returns:
        The summary, one line per dimension and a last line with the trainable parameter count.
    """
    lines = [f"{d:24s} {v}" for d, v in model.point.as_strings().items()]
    lines.append(f"{'trainable parameters':24s} {count_parameters(model)}")
    return "\n".join(lines)


@catalogued("extra:combined-mechanisms")
def fit_and_evaluate(
    p: TaxonomyPoint,
    train: dict[str, Tensor],
    test: dict[str, Tensor],
    n_classes: int,
    *,
    epochs: int = 15,
    batch_size: int = 64,
    lr: float = 0.02,
    seed: int = 0,
    **build_kw: Any,
) -> dict[str, float]:
    """Build ``p``, train it on ``train``, score it on ``test``.

    Uses :func:`attnsurvey.training.train` with shuffled mini-batches; the
    seed fixes the initial weights, the batch order and the alignment samples.

    Args:
        p: the configuration to build (as :func:`build_model`).
        train: a dict with the tensors ``F``, ``G`` and ``y``.
        test: a dict with ``F``, ``G``, ``y`` and optionally ``pos``, the gold position per example, and
            ``other``, a second position per example whose weight is also reported (a distractor).
        n_classes: number of classes.
        epochs: passes over the training set.
        batch_size: mini-batch size.
        lr: learning rate.
        seed: seed of the weights, batch order and samples.
        **build_kw: options passed to :func:`build_model`.

    Shape:
        F: ``(B, n_f, d_model)``; G: ``(B, n_g, d_model)``; y: ``(B,)`` class indices; pos, other: ``(B,)``.

    Returns:
        ``{"accuracy", "attention_on_gold", "parameters"}``, where ``attention_on_gold`` is the mean
        weight of the main attention on the gold position ``test["pos"]`` (Eq. 46 with a single gold
        region), present only when ``pos`` is given; ``attention_on_other``, the same mean on
        ``test["other"]``, is added when ``other`` is given too.
    """

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
        for key, name in (("pos", "attention_on_gold"), ("other", "attention_on_other")):
            if key in test:
                out[name] = float(a.gather(-1, test[key][:, None]).mean())
    return out
