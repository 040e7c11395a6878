"""Describe a model by its point of the taxonomy (Fig. 3, Table III), by inspecting it.

:func:`describe` is the reverse of :func:`attnsurvey.builder.build_model`; :func:`point`
builds a point from keyword values. The scoring value of a score module comes from the
score registry (:data:`attnsurvey.general_mechanisms.scoring.SCORES`), so a new score
is described as soon as it is registered, and an unknown score type is an error.
"""

from __future__ import annotations

from torch import nn

from .general_mechanisms.scoring import SCORES
from .taxonomy import DIMENSIONS, TAXONOMY, TaxonomyPoint


def point(**values: str) -> TaxonomyPoint:
    """A taxonomy point from keyword values, every dimension not given at its plain default.

    Defaults: singular, single-level, single-representational, additive, global,
    single-dimensional, basic, singular. ``point(scoring="general")``.

    Args:
        **values: a Table III cell per dimension, by dimension name.

    Returns:
        The :class:`~attnsurvey.taxonomy.TaxonomyPoint`.

    Raises:
        ValueError: an unknown dimension or value.
    """
    base = dict(
        feature_multiplicity="singular",
        feature_levels="single-level",
        feature_representations="single-representational",
        scoring="additive",
        alignment="global",
        dimensionality="single-dimensional",
        query_type="basic",
        query_multiplicity="singular",
    )
    unknown = set(values) - set(base)
    if unknown:
        raise ValueError(f"unknown dimension(s) {sorted(unknown)}; the dimensions are {DIMENSIONS}")
    return TaxonomyPoint.from_strings(**{**base, **values})


#: Module class name -> the Table III values its type fixes, one row per class. Every value
#: other than "singular" belongs to exactly one dimension of :data:`~attnsurvey.taxonomy.TAXONOMY`,
#: so a row names values only, as a row of Table III does; :data:`MODULE_POINTS` adds the dimensions.
_FIXED_VALUES: dict[str, tuple[str, ...]] = {
    "MultiHeadAttention": ("scaled-multiplicative", "self-attention", "multi-head"),
    "MultiHopAttention": ("general", "multi-hop"),
    "CapsuleAttention": ("multiplicative", "self-attention", "capsule-based"),
    "MultiDimensionalAttention": ("multi-dimensional",),
    "LocalAttention": ("local",),
    "ReinforcedAlignment": ("reinforced",),
    "RotatoryAttention": ("rotatory", "activated-general", "specialized"),
    "AlternatingCoAttention": ("alternating-co-attention",),
    "InteractiveCoAttention": ("interactive-co-attention",),
    "ParallelCoAttention": ("parallel-co-attention",),
    "MultiGrainedCoAttention": ("multi-grained-co-attention",),
    "HierarchicalAttention": ("hierarchical", "self-attention"),
    "AttentionViaAttention": ("attention-via-attention",),
    "MetaEmbedding": ("multi-representational", "self-attention"),
    "LearnedQueryAttention": ("multiplicative", "self-attention"),
    "SelfAttention": ("scaled-multiplicative", "self-attention"),
    "GeneralAttention": (),
}


def _dimension_of(value: str) -> str:
    """The one dimension of :data:`~attnsurvey.taxonomy.TAXONOMY` that has ``value``.

    Raises ``ValueError`` for a value of no dimension or of several (``"singular"``).
    """
    dims = [d for group in TAXONOMY.values() for d, values in group.items() if value in values]
    if len(dims) != 1:
        raise ValueError(f"{value!r} must be a value of exactly one dimension to stand alone, found in {dims}")
    return dims[0]


#: Module class name -> dimension values, for :func:`describe` of plain ``src`` modules.
MODULE_POINTS: dict[str, dict[str, str]] = {
    name: {_dimension_of(v): v for v in values} for name, values in _FIXED_VALUES.items()
}

#: Score module class name -> Table III scoring value (read from the score registry).
SCORE_POINTS: dict[str, str] = {spec.module.__name__: spec.taxonomy for _, spec in SCORES.items()}


def score_point(score: nn.Module) -> str:
    """The Table III scoring value of a score module, from the score registry.

    Args:
        score: a score module (``AdditiveScore``, ...).

    Returns:
        Its scoring value (``"additive"``, ...).

    Raises:
        ValueError: a score module type the registry does not know (never a silent default).
    """
    name = type(score).__name__
    if name not in SCORE_POINTS:
        raise ValueError(f"describe() does not know score module type {name!r}; registered: {sorted(SCORE_POINTS)}")
    return SCORE_POINTS[name]


def _in_order(found: tuple[str, ...], recorded: tuple[str, ...] | None) -> tuple[str, ...]:
    """The inspected mechanisms, spelled in the recorded order when they are the same set."""
    if recorded is not None and set(recorded) == set(found) and len(recorded) == len(found):
        return recorded
    return found


def describe(model: nn.Module) -> TaxonomyPoint:
    """The taxonomy point of a model, found by inspecting it (the reverse of ``build_model``).

    A model that knows how to inspect itself (a ``taxonomy_values()`` method
    returning ``{dimension: tuple of mechanisms}``, as
    :class:`~attnsurvey.builder.TaxonomyModel` does from its modules, not from
    the configuration it was built with) is described by that; a combined cell
    is spelled in the order of the model's recorded ``point`` when the
    mechanisms are the same. For a plain ``src`` module the point is read from
    :data:`MODULE_POINTS` (what the module's type fixes), its heads (``h = 1`` is
    singular) and its ``score`` module (:data:`SCORE_POINTS`); every other
    dimension takes its plain default (see :func:`point`).

    Args:
        model: a model of :func:`~attnsurvey.builder.build_model` or a plain mechanism module.

    Returns:
        Its :class:`~attnsurvey.taxonomy.TaxonomyPoint`.

    Raises:
        ValueError: a module or score type the taxonomy does not know.
    """
    inspect = getattr(model, "taxonomy_values", None)
    if callable(inspect):
        found = inspect()
        recorded = getattr(model, "point", None)
        cells = {
            d: (
                _in_order(
                    tuple(found[d]),
                    getattr(recorded, d)[0] if recorded is not None and len(getattr(recorded, d)) == 1 else None,
                ),
            )
            for d in DIMENSIONS
        }
        return TaxonomyPoint(**cells)
    name = type(model).__name__
    if name in SCORE_POINTS:
        return point(scoring=SCORE_POINTS[name])
    if name not in MODULE_POINTS:
        raise ValueError(f"describe() does not know module type {name!r}; known: {sorted(MODULE_POINTS)}")
    values = dict(MODULE_POINTS[name])
    score = getattr(model, "score", None)
    if isinstance(score, nn.Module):
        values["scoring"] = score_point(score)
    if values.get("query_multiplicity") == "multi-head" and getattr(model, "h", 2) == 1:
        values["query_multiplicity"] = "singular"
    return point(**values)
