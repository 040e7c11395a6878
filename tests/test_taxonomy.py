"""Fig. 3 and Table III as data: the encoding must match the survey exactly."""

from __future__ import annotations

import pytest

from attnsurvey import taxonomy as tx


@pytest.mark.catalog("extra:taxonomy-fig3")
def test_fig3_has_three_groups_and_eight_dimensions():
    assert list(tx.TAXONOMY) == ["feature-related", "general", "query-related"]
    assert len(tx.DIMENSIONS) == 8
    assert tx.DIMENSIONS[3:6] == ("scoring", "alignment", "dimensionality")


def test_parse_cell_keeps_plus_and_comma_apart():
    assert tx.parse_cell("self-attention + basic") == (("self-attention", "basic"),)
    assert tx.parse_cell("soft, hard") == (("soft",), ("hard",))
    assert tx.parse_cell("multi-head + multi-hop") == (("multi-head", "multi-hop"),)
    for text in ["additive", "soft, hard", "self-attention + specialized"]:
        assert tx.format_cell(tx.parse_cell(text)) == text
    with pytest.raises(ValueError, match="empty mechanism"):
        tx.parse_cell("additive + ")


def test_table3_has_seventeen_rows_in_survey_order():
    assert len(tx.TABLE3) == 17
    assert [r.id for r in tx.TABLE3] == [f"table3:row{i:02d}" for i in range(1, 18)]
    refs = [r.reference for r in tx.TABLE3]
    assert refs == [3, 4, 8, 32, 5, 47, 13, 43, 50, 64, 74, 105, 106, 62, 67, 52, 89]


@pytest.mark.catalog(
    "table3:row01",
    "table3:row02",
    "table3:row03",
    "table3:row04",
    "table3:row05",
    "table3:row06",
    "table3:row07",
    "table3:row08",
    "table3:row09",
    "table3:row10",
    "table3:row11",
    "table3:row12",
    "table3:row13",
    "table3:row14",
    "table3:row15",
    "table3:row16",
    "table3:row17",
)
def test_table3_spot_checks_against_the_survey():
    # every cell, typed by hand from the survey's Table III (columns in the order of tx.DIMENSIONS:
    # feature multiplicity, levels, representations, scoring, alignment, dimensionality, query type,
    # query multiplicity; "+" combines mechanisms in one model, "," lists alternatives)
    sg, sl, sr, sd = "singular", "single-level", "single-representational", "single-dimensional"
    pca, sa, sas = "parallel-co-attention", "self-attention", "self-attention + specialized"
    survey = [
        (sg, sl, sr, "additive", "global", sd, "basic", sg),  # Bahdanau et al. [3]
        (sg, sl, sr, "multiplicative, location", "global, local", sd, "basic", sg),  # Luong et al. [4]
        (sg, sl, sr, "additive", "soft, hard", sd, "basic", sg),  # Xu et al. [8]
        (pca, "hierarchical", sr, "additive", "global", sd, "specialized", sg),  # Lu et al. [32]
        (sg, "hierarchical", sr, "additive", "global", sd, sa, sg),  # Yang et al. [5]
        (sg, "hierarchical", sr, "additive", "global", sd, sa, sg),  # Li et al. [47]
        (sg, sl, sr, "scaled-multiplicative", "global", sd, "self-attention + basic", "multi-head + multi-hop"),  # [13]
        ("rotatory", sl, sr, "activated-general", "global", sd, "specialized", "multi-hop"),  # Wallaart, Frasincar [43]
        (sg, sl, "multi-representational", "additive", "global", sd, sa, sg),  # Kiela et al. [50]
        (sg, sl, sr, "additive", "global", "multi-dimensional", sa, sg),  # Shen et al. [64]
        (sg, sl, sr, "multiplicative", "global", sd, sa, sg),  # Zhang et al. [74]
        (pca, sl, sr, "scaled-multiplicative", "global", sd, sas, sg),  # Li et al. [105]
        (pca, sl, sr, "multiplicative", "global", sd, sas, "multi-head"),  # Yu et al. [106]
        (pca, sl, sr, "additive", "reinforced", sd, "specialized", sg),  # Wang et al. [62]
        (sg, sl, sr, "additive", "global", "multi-dimensional", sas, sg),  # Oktay et al. [67]
        (sg, sl, "multi-representational", "additive", "global", sd, sa, "multi-head"),  # Winata et al. [52]
        (sg, sl, sr, "multiplicative", "global", sd, sa, "capsule-based"),  # Wang et al. [89]
    ]
    ours = [tuple(tx.format_cell(getattr(r.point, d)) for d in tx.DIMENSIONS) for r in tx.TABLE3]
    for i, (want, got) in enumerate(zip(survey, ours, strict=True)):
        assert got == want, f"row {i + 1:02d}: {got} != {want}"
    vaswani = tx.table3_row("table3:row07").point
    assert vaswani.scoring == (("scaled-multiplicative",),)
    assert vaswani.query_type == (("self-attention", "basic"),)  # "+": one model
    assert vaswani.query_multiplicity == (("multi-head", "multi-hop"),)
    luong = tx.table3_row("table3:row02").point
    assert luong.scoring == (("multiplicative",), ("location",))  # ",": tried separately
    assert luong.alignment == (("global",), ("local",))
    assert tx.table3_row("table3:row08").point.feature_multiplicity == (("rotatory",),)
    assert tx.table3_row("table3:row10").point.dimensionality == (("multi-dimensional",),)
    assert tx.table3_row("table3:row14").point.alignment == (("reinforced",),)
    assert tx.table3_row("table3:row17").point.query_multiplicity == (("capsule-based",),)


def test_table3_row_needs_one_cell_per_dimension():
    cells = ["singular", "single-level", "single-representational", "additive", "global", "single-dimensional"]
    row = tx._row(99, "Test", 1, *cells, "basic", "multi-head")  # in the order of tx.DIMENSIONS
    assert row.id == "table3:row99" and row.point.query_multiplicity == (("multi-head",),)
    assert row.point.query_type == (("basic",),) and row.point.scoring == (("additive",),)
    with pytest.raises(ValueError, match="a Table III row has 8 cells"):
        tx._row(99, "Test", 1, *cells)


def test_configurations_expand_alternatives_only():
    luong = tx.table3_row("table3:row02").point
    configs = luong.configurations()
    assert len(configs) == 4
    assert {(c.scoring, c.alignment) for c in configs} == {
        ((("multiplicative",),), (("global",),)),
        ((("multiplicative",),), (("local",),)),
        ((("location",),), (("global",),)),
        ((("location",),), (("local",),)),
    }
    assert len(tx.table3_row("table3:row07").point.configurations()) == 1
    assert sum(len(r.point.configurations()) for r in tx.TABLE3) == 17 + 3 + 1


@pytest.mark.catalog("extra:taxonomy-fig3")
def test_unknown_values_are_rejected():
    with pytest.raises(ValueError, match="'quadratic' is not a value of dimension 'scoring'"):
        tx.TaxonomyPoint.from_strings(
            feature_multiplicity="singular",
            feature_levels="single-level",
            feature_representations="single-representational",
            scoring="quadratic",
            alignment="global",
            dimensionality="single-dimensional",
            query_type="basic",
            query_multiplicity="singular",
        )
    with pytest.raises(ValueError, match="missing dimensions"):
        tx.TaxonomyPoint.from_strings(scoring="additive")
    with pytest.raises(ValueError, match="no Table III row"):
        tx.table3_row("table3:row18")


@pytest.mark.catalog("extra:taxonomy-fig3")
def test_taxonomy_figure_draws_every_value_and_highlights_a_point():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = tx.table3_row("table3:row07").point
    fig = tx.taxonomy_figure(highlight=p)
    texts = {t.get_text(): t for t in fig.axes[0].texts}
    for group, aspects in tx.FIG3.items():
        assert group in texts
        for aspect, mechanisms in aspects.items():
            assert aspect in texts
            assert set(mechanisms) <= set(texts)
    n_values = sum(len(v) for g in tx.FIG3.values() for v in g.values())
    assert len(fig.axes[0].texts) == n_values + 8 + 3 + 1
    assert "location" not in texts and "global" not in texts and "soft" not in texts
    bold = {t.get_text() for t in fig.axes[0].texts if t.get_fontweight() == "bold" and t.get_text() not in tx.FIG3}
    # the Transformer's mechanisms: scaled multiplicative, self-attention + basic queries, multi-head + multi-hop
    assert {
        "scaled multiplicative",
        "self-attention",
        "basic queries",
        "multi-head",
        "multi-hop",
        "soft/global",
    } <= bold
    assert "additive" not in bold and "singular query" not in bold
    # every connector runs from the right edge of one box to the left edge of another (no gaps)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    to_data = ax.transData.inverted()
    boxes = [to_data.transform(t.get_bbox_patch().get_window_extent(renderer).get_points()) for t in ax.texts]
    lines = ax.get_lines()
    assert len(lines) == n_values + 8 + 3  # one connector per box but the root's
    for line in lines:
        (x0, y0), (x1, y1) = line.get_xydata()
        assert any(abs(x0 - b[1][0]) < 1e-6 and b[0][1] <= y0 <= b[1][1] for b in boxes), (x0, y0)
        assert any(abs(x1 - b[0][0]) < 1e-6 and b[0][1] <= y1 <= b[1][1] for b in boxes), (x1, y1)
    plt.close(fig)


@pytest.mark.catalog("extra:taxonomy-fig3")
def test_fig3_matches_the_survey_exactly():
    # Fig. 3 of the survey: three categories, their sub-aspects, the mechanisms named under each
    assert {c: list(a) for c, a in tx.FIG3.items()} == {
        "feature-related": ["multiplicity", "levels", "representations"],
        "general": ["scoring", "alignment", "dimensionality"],
        "query-related": ["type", "multiplicity"],
    }
    assert tx.FIG3["general"]["alignment"] == ("soft/global", "hard", "local", "reinforced")
    assert "location" not in tx.FIG3["general"]["scoring"]
    assert len(tx.FIG3["general"]["scoring"]) == 7  # the rows of Table II
    assert tx.FIG3["feature-related"]["multiplicity"] == (
        "singular features",
        "coarse-grained co-attention",
        "fine-grained co-attention",
        "multi-grained co-attention",
        "rotatory attention",
    )
    assert sum(len(v) for a in tx.FIG3.values() for v in a.values()) == 30


@pytest.mark.catalog("extra:taxonomy-fig3")
def test_every_value_maps_to_a_fig3_mechanism_of_its_sub_aspect():
    for group in tx.TAXONOMY.values():
        for dim, values in group.items():
            category, aspect = tx.DIMENSION_IN_FIG3[dim]
            for v in values:
                leaf = tx.FIG3_LEAF[dim, v]
                if (dim, v) == ("scoring", "location"):
                    assert leaf is None  # Table III only
                else:
                    assert leaf in tx.FIG3[category][aspect], (dim, v, leaf)
    # every mechanism of Fig. 3 is reachable from some value the builder accepts
    reached = {leaf for leaf in tx.FIG3_LEAF.values() if leaf is not None}
    assert reached == {m for a in tx.FIG3.values() for ms in a.values() for m in ms}
    assert tx.FIG3_LEAF["alignment", "global"] == tx.FIG3_LEAF["alignment", "soft"] == "soft/global"
    assert tx.FIG3_LEAF["feature_multiplicity", "alternating-co-attention"] == "coarse-grained co-attention"
