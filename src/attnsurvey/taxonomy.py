"""§3 (Fig. 3) and §4 (Table III): the taxonomy of attention as data.

The survey sorts attention mechanisms into three categories, each with its
sub-aspects (Fig. 3, reproduced exactly in :data:`FIG3`):

* feature-related: multiplicity, levels, representations of the features;
* general: scoring, alignment, dimensionality;
* query-related: type and multiplicity of the queries.

The eight sub-aspects are the orthogonal dimensions of a model: any attention
model is a point in this eight-dimensional space, one value (or a combination
of values) per dimension. Table III of the survey places 17 published models in
it. In the table, ``"+"`` between two mechanisms means they are *combined in
one model*, ``","`` means the paper *tried them separately*. We keep that
distinction: a :class:`Cell` is a tuple of alternatives, each alternative a
tuple of mechanisms used together.

Two vocabularies, one mapping between them:

* :data:`FIG3` holds the survey's figure: the mechanisms it names under each
  sub-aspect (e.g. coarse-grained co-attention, soft/global alignment).
  :func:`taxonomy_figure` draws exactly this.
* :data:`TAXONOMY` holds the values a :class:`TaxonomyPoint` (and the builder)
  accepts, as Table III and the survey's text name them: the specific
  co-attention mechanisms of §3.1.1 (alternating and interactive are
  coarse-grained, parallel is fine-grained), "global" and "soft" for the one
  soft/global alignment (Table III writes both), and Luong's "location" score,
  which Table III lists but Fig. 3 and Table II do not.
  :data:`FIG3_LEAF` maps every such value to the mechanism of Fig. 3 it
  belongs to (``None`` for "location").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from .catalog import catalogued, declare
from .general_mechanisms.scoring import SCORES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Fig. 3 of the survey, exactly: category -> sub-aspect -> the mechanisms named there.
FIG3: dict[str, dict[str, tuple[str, ...]]] = {
    "feature-related": {
        "multiplicity": (
            "singular features",
            "coarse-grained co-attention",
            "fine-grained co-attention",
            "multi-grained co-attention",
            "rotatory attention",
        ),
        "levels": ("single-level", "attention-via-attention", "hierarchical"),
        "representations": ("single-representational", "multi-representational"),
    },
    "general": {
        "scoring": (
            "additive",
            "multiplicative",
            "scaled multiplicative",
            "general",
            "biased general",
            "activated general",
            "similarity",
        ),
        "alignment": ("soft/global", "hard", "local", "reinforced"),
        "dimensionality": ("single-dimensional", "multi-dimensional"),
    },
    "query-related": {
        "type": ("basic queries", "specialized queries", "self-attention"),
        "multiplicity": ("singular query", "multi-head", "multi-hop", "capsule-based"),
    },
}

#: group -> dimension -> the values a TaxonomyPoint accepts (Fig. 3's own names taken from FIG3 where they agree).
TAXONOMY: dict[str, dict[str, tuple[str, ...]]] = {
    "feature-related": {
        "feature_multiplicity": (
            "singular",
            "alternating-co-attention",
            "interactive-co-attention",
            "parallel-co-attention",
            "multi-grained-co-attention",
            "rotatory",
        ),
        "feature_levels": FIG3["feature-related"]["levels"],  # Fig. 3's own names
        "feature_representations": FIG3["feature-related"]["representations"],
    },
    "general": {
        "scoring": tuple(dict.fromkeys(spec.taxonomy for _, spec in SCORES.items())),  # from the score registry
        "alignment": ("global", "soft", "hard", "local", "reinforced"),
        "dimensionality": FIG3["general"]["dimensionality"],
    },
    "query-related": {
        "query_type": ("basic", "specialized", "self-attention"),
        "query_multiplicity": ("singular", "multi-head", "multi-hop", "capsule-based"),
    },
}
declare(f"{__name__}.TAXONOMY", "extra:taxonomy-fig3")

DIMENSIONS: tuple[str, ...] = tuple(d for group in TAXONOMY.values() for d in group)

#: Each dimension of a :class:`TaxonomyPoint` -> its (category, sub-aspect) in Fig. 3.
DIMENSION_IN_FIG3: dict[str, tuple[str, str]] = {
    "feature_multiplicity": ("feature-related", "multiplicity"),
    "feature_levels": ("feature-related", "levels"),
    "feature_representations": ("feature-related", "representations"),
    "scoring": ("general", "scoring"),
    "alignment": ("general", "alignment"),
    "dimensionality": ("general", "dimensionality"),
    "query_type": ("query-related", "type"),
    "query_multiplicity": ("query-related", "multiplicity"),
}


def _same_name(dim: str, value: str) -> str | None:
    """The Fig. 3 mechanism spelled like ``value`` (up to "-" for " ") under ``dim``'s sub-aspect."""
    category, aspect = DIMENSION_IN_FIG3[dim]
    for name in (value, value.replace("-", " ")):
        if name in FIG3[category][aspect]:
            return name
    return None


#: Compatibility mapping: (dimension, value of :data:`TAXONOMY`) -> the mechanism of Fig. 3 it is
#: (``None``: Luong's location score, listed in Table III but not in Fig. 3).
FIG3_LEAF: dict[tuple[str, str], str | None] = {
    **{(d, v): _same_name(d, v) for group in TAXONOMY.values() for d, values in group.items() for v in values},
    ("feature_multiplicity", "singular"): "singular features",
    ("feature_multiplicity", "alternating-co-attention"): "coarse-grained co-attention",
    ("feature_multiplicity", "interactive-co-attention"): "coarse-grained co-attention",
    ("feature_multiplicity", "parallel-co-attention"): "fine-grained co-attention",
    ("feature_multiplicity", "multi-grained-co-attention"): "multi-grained co-attention",
    ("feature_multiplicity", "rotatory"): "rotatory attention",
    ("scoring", "location"): None,
    ("alignment", "global"): "soft/global",
    ("alignment", "soft"): "soft/global",
    ("query_type", "basic"): "basic queries",
    ("query_type", "specialized"): "specialized queries",
    ("query_multiplicity", "singular"): "singular query",
}


declare(f"{__name__}.FIG3", "extra:taxonomy-fig3")
declare(f"{__name__}.FIG3_LEAF", "extra:taxonomy-fig3")


def fig3_leaves(point: TaxonomyPoint) -> set[tuple[str, str, str]]:
    """The mechanisms of Fig. 3 a point uses, as ``(category, sub-aspect, mechanism)`` triples.

    Values without a place in Fig. 3 (Luong's "location" score) are left out.

    Args:
        point: a taxonomy point.

    Returns:
        The set of ``(category, sub-aspect, mechanism)`` triples.
    """
    out = set()
    for d in DIMENSIONS:
        for alt in getattr(point, d):
            for mech in alt:
                leaf = FIG3_LEAF[d, mech]
                if leaf is not None:
                    out.add((*DIMENSION_IN_FIG3[d], leaf))
    return out


#: A cell of Table III: alternatives (",") of combinations ("+") of mechanisms.
Cell = tuple[tuple[str, ...], ...]


def parse_cell(text: str) -> Cell:
    """Parse a Table III cell such as ``"self-attention + basic"`` or ``"soft, hard"``.

    Args:
        text: the cell: alternatives separated by ``,``, combined mechanisms by ``+``.

    Returns:
        A tuple of alternatives, each a tuple of combined mechanisms.

    Raises:
        ValueError: an empty cell or an empty alternative.
    """
    alternatives = []
    for alt in text.split(","):
        parts = tuple(p.strip() for p in alt.split("+"))
        if not all(parts):
            raise ValueError(f"empty mechanism in Table III cell {text!r}")
        alternatives.append(parts)
    if not alternatives:
        raise ValueError("empty Table III cell")
    return tuple(alternatives)


def format_cell(cell: Cell) -> str:
    """The text of a Table III cell: the inverse of :func:`parse_cell`.

    Args:
        cell: a tuple of alternatives, each a tuple of combined mechanisms.

    Returns:
        The cell's text.
    """
    return ", ".join(" + ".join(alt) for alt in cell)


@catalogued(
    "extra:taxonomy-fig3",
    title="Fig. 3: three categories, eight sub-aspects and the mechanisms under each, as data and as a drawn tree",
    chapter="chapters/ch03_taxonomy.ipynb",
)
@dataclass(frozen=True)
class TaxonomyPoint:
    """One model's position in the taxonomy: a :data:`Cell` per dimension.

    Attributes:
        feature_multiplicity: §3.1.1 (singular, alternating-co-attention, ..., rotatory).
        feature_levels: §3.1.2 (the values of Fig. 3's levels).
        feature_representations: §3.1.3 (the values of Fig. 3's representations).
        scoring: §3.2.1 (a score of the score registry: additive, multiplicative, ...).
        alignment: §3.2.2 (global, soft, hard, local, reinforced).
        dimensionality: §3.2.3 (the values of Fig. 3's dimensionality).
        query_type: §3.3.1 (basic, specialized, self-attention).
        query_multiplicity: §3.3.2 (singular, multi-head, multi-hop, capsule-based).

    Raises:
        ValueError: a mechanism is not a value of its dimension in Fig. 3.
    """

    feature_multiplicity: Cell
    feature_levels: Cell
    feature_representations: Cell
    scoring: Cell
    alignment: Cell
    dimensionality: Cell
    query_type: Cell
    query_multiplicity: Cell

    def __post_init__(self) -> None:
        allowed = {d: v for group in TAXONOMY.values() for d, v in group.items()}
        for f in fields(self):
            cell = getattr(self, f.name)
            for alt in cell:
                for mech in alt:
                    if mech not in allowed[f.name]:
                        raise ValueError(
                            f"{mech!r} is not a value of dimension {f.name!r}; choose from {allowed[f.name]}"
                        )

    @classmethod
    def from_strings(cls, **cells: str) -> TaxonomyPoint:
        """Build a point from Table III style strings, one keyword per dimension."""
        missing = set(DIMENSIONS) - set(cells)
        if missing:
            raise ValueError(f"missing dimensions: {sorted(missing)}")
        return cls(**{d: parse_cell(cells[d]) for d in DIMENSIONS})

    def configurations(self) -> list[TaxonomyPoint]:
        """Every single-alternative configuration this point describes.

        A row that tried ``"multiplicative, location"`` scoring and ``"global,
        local"`` alignment separately yields the 4 combinations; mechanisms
        joined by ``"+"`` stay together in each.
        """
        per_dim = [[(alt,) for alt in getattr(self, d)] for d in DIMENSIONS]
        return [TaxonomyPoint(**dict(zip(DIMENSIONS, combo))) for combo in itertools.product(*per_dim)]

    def as_strings(self) -> dict[str, str]:
        """The point as Table III style strings, one per dimension."""
        return {d: format_cell(getattr(self, d)) for d in DIMENSIONS}


@dataclass(frozen=True)
class Table3Row:
    """A row of Table III: the model's reference and its taxonomy point.

    Attributes:
        id: its catalog id, ``"table3:row01"`` ... ``"table3:row17"``.
        model: the model's name.
        reference: the survey's reference number for the model.
        point: its :class:`TaxonomyPoint`.
    """

    id: str
    model: str
    reference: int
    point: TaxonomyPoint


def _row(i: int, model: str, ref: int, *cells: str) -> Table3Row:
    """Row ``i`` of Table III; ``cells`` are its eight Table III strings, in the order of :data:`DIMENSIONS`."""
    if len(cells) != len(DIMENSIONS):
        raise ValueError(f"a Table III row has {len(DIMENSIONS)} cells ({DIMENSIONS}), got {len(cells)}")
    return Table3Row(
        id=f"table3:row{i:02d}",
        model=model,
        reference=ref,
        point=TaxonomyPoint.from_strings(**dict(zip(DIMENSIONS, cells))),
    )


S, SL, SR, SD = "singular", "single-level", "single-representational", "single-dimensional"
PAR, HIER, MR, MD = "parallel-co-attention", "hierarchical", "multi-representational", "multi-dimensional"

#: Table III of the survey, in its row order. ``reference`` is the survey's citation number.
TABLE3: tuple[Table3Row, ...] = (
    _row(1, "Bahdanau et al.", 3, S, SL, SR, "additive", "global", SD, "basic", S),
    _row(2, "Luong et al.", 4, S, SL, SR, "multiplicative, location", "global, local", SD, "basic", S),
    _row(3, "Xu et al.", 8, S, SL, SR, "additive", "soft, hard", SD, "basic", S),
    _row(4, "Lu et al.", 32, PAR, HIER, SR, "additive", "global", SD, "specialized", S),
    _row(5, "Yang et al.", 5, S, HIER, SR, "additive", "global", SD, "self-attention", S),
    _row(6, "Li et al.", 47, S, HIER, SR, "additive", "global", SD, "self-attention", S),
    _row(
        7,
        "Vaswani et al.",
        13,
        S,
        SL,
        SR,
        "scaled-multiplicative",
        "global",
        SD,
        "self-attention + basic",
        "multi-head + multi-hop",
    ),
    _row(
        8,
        "Wallaart and Frasincar",
        43,
        "rotatory",
        SL,
        SR,
        "activated-general",
        "global",
        SD,
        "specialized",
        "multi-hop",
    ),
    _row(9, "Kiela et al.", 50, S, SL, MR, "additive", "global", SD, "self-attention", S),
    _row(10, "Shen et al.", 64, S, SL, SR, "additive", "global", MD, "self-attention", S),
    _row(11, "Zhang et al.", 74, S, SL, SR, "multiplicative", "global", SD, "self-attention", S),
    _row(12, "Li et al.", 105, PAR, SL, SR, "scaled-multiplicative", "global", SD, "self-attention + specialized", S),
    _row(
        13, "Yu et al.", 106, PAR, SL, SR, "multiplicative", "global", SD, "self-attention + specialized", "multi-head"
    ),
    _row(14, "Wang et al.", 62, PAR, SL, SR, "additive", "reinforced", SD, "specialized", S),
    _row(15, "Oktay et al.", 67, S, SL, SR, "additive", "global", MD, "self-attention + specialized", S),
    _row(16, "Winata et al.", 52, S, SL, MR, "additive", "global", SD, "self-attention", "multi-head"),
    _row(17, "Wang et al.", 89, S, SL, SR, "multiplicative", "global", SD, "self-attention", "capsule-based"),
)
for _r in TABLE3:
    declare(
        f"{__name__}.TABLE3",
        _r.id,
        title=f"Table III: {_r.model} [{_r.reference}] — "
        + "; ".join(f"{d.replace('_', ' ')}: {v}" for d, v in _r.point.as_strings().items()),
        chapter="chapters/ch04_evaluation_taxonomy.ipynb",
    )
del _r


def table3_row(entry_id: str) -> Table3Row:
    """Look up a Table III row by its catalog id.

    Args:
        entry_id: ``"table3:row01"`` ... ``"table3:row17"``.

    Returns:
        The :class:`Table3Row`.

    Raises:
        ValueError: no such row.
    """
    for row in TABLE3:
        if row.id == entry_id:
            return row
    raise ValueError(f"no Table III row {entry_id!r}; ids run from table3:row01 to table3:row{len(TABLE3):02d}")


@catalogued("extra:taxonomy-fig3")
def taxonomy_figure(highlight: TaxonomyPoint | None = None) -> Figure:
    """Draw Fig. 3 (:data:`FIG3`) as a tree: root -> 3 categories -> 8 sub-aspects -> mechanisms.

    Args:
        highlight: a model's point; the mechanisms it uses (through :data:`FIG3_LEAF`)
            are drawn in bold on a coloured background, so the figure shows the
            model as a point of the space.

    Returns:
        The ``matplotlib.figure.Figure``.
    """
    import matplotlib.pyplot as plt

    used = fig3_leaves(highlight) if highlight is not None else set()
    n_values = sum(len(v) for g in FIG3.values() for v in g.values())
    fig, ax = plt.subplots(figsize=(11, 0.32 * n_values + 1))
    ax.set_axis_off()
    y = 0.0
    box = dict(boxstyle="round,pad=0.25", fc="white", ec="0.5")
    edges = []  # (parent text, child text, grey level, line width), joined once the boxes' sizes are known
    groups = []
    for group, aspects in FIG3.items():
        aspect_texts = []
        for aspect, values in aspects.items():
            leaves = []
            for v in values:
                on = (group, aspect, v) in used
                leaves.append(
                    ax.text(
                        3.0,
                        y,
                        v,
                        va="center",
                        fontsize=8,
                        fontweight="bold" if on else "normal",
                        bbox=dict(boxstyle="round,pad=0.2", fc="#ffd27f" if on else "white", ec="0.7"),
                    )
                )
                y -= 1.0
            dy = sum(t.get_position()[1] for t in leaves) / len(leaves)
            aspect_text = ax.text(1.9, dy, aspect, va="center", ha="center", fontsize=9, bbox=box)
            edges += [(aspect_text, t, "0.6", 0.8) for t in leaves]
            aspect_texts.append(aspect_text)
            y -= 0.4
        gy = sum(t.get_position()[1] for t in aspect_texts) / len(aspect_texts)
        group_text = ax.text(0.7, gy, group, va="center", ha="center", fontsize=10, fontweight="bold", bbox=box)
        edges += [(group_text, t, "0.4", 1.0) for t in aspect_texts]
        groups.append(group_text)
    ry = sum(t.get_position()[1] for t in groups) / len(groups)
    root = ax.text(-0.3, ry, "attention\nmechanisms", va="center", ha="center", fontsize=10, bbox=box)
    edges += [(root, t, "0.3", 1.2) for t in groups]
    ax.set_xlim(-0.8, 4.4)
    ax.set_ylim(y, 1.0)
    # each connector runs from the right edge of the parent's box to the left edge of the child's
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg and the inline backend both have it
    to_data = ax.transData.inverted()

    def x_edges(t: Any) -> tuple[float, float]:
        (x0, _), (x1, _) = to_data.transform(t.get_bbox_patch().get_window_extent(renderer).get_points())
        return x0, x1

    for parent, child, grey, lw in edges:
        ax.plot(
            [x_edges(parent)[1], x_edges(child)[0]],
            [parent.get_position()[1], child.get_position()[1]],
            color=grey,
            lw=lw,
        )
    return fig
