"""Tables that notebooks display (attnsurvey.display_table) and the catalog's typeset titles."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from attnsurvey import catalog
from attnsurvey.display_table import Table, inline_html, table
from attnsurvey.figures import architectures as A


class _Cells(HTMLParser):
    """The text of every <th>/<td> (as a browser would show it, tags dropped) and the math spans."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.math: list[str] = []
        self._in_cell = False
        self._in_math = False

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th"):
            self.cells.append("")
            self._in_cell = True
        if tag == "span" and ("class", "math notranslate nohighlight") in attrs:
            self._in_math = True
            self.math.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False
        if tag == "span":
            self._in_math = False

    def handle_data(self, data):
        if self._in_cell:
            self.cells[-1] += data
        if self._in_math:
            self.math[-1] += data


def _parse(markup: str) -> _Cells:
    p = _Cells()
    p.feed(markup)
    return p


def test_html_has_one_cell_per_header_and_row_with_text_escaped_and_math_kept():
    t = table(["item", "what"], [["a<b", r"score $q^T k_l < 1$ & more"], ["x", "`pkg.mod.fn`\n`tests/t.py::test_a`"]])
    parsed = _parse(t._repr_html_())
    assert parsed.cells == ["item", "what", "a<b", r"score \(q^T k_l < 1\) & more", "x", "pkg.mod.fntests/t.py::test_a"]
    assert parsed.math == [r"\(q^T k_l < 1\)"]
    assert "a&lt;b" in t._repr_html_() and "&amp; more" in t._repr_html_()
    assert "<br>" in t._repr_html_() and "pkg.<wbr>mod.<wbr>fn" in t._repr_html_()


def test_plain_text_is_one_record_per_row_without_markup():
    t = table(["item", "what", "by"], [["eq1", "$K$", "`a`\n`b`"]], plain=[["eq1", "K = W_K F", "a\nb"]])
    assert repr(t) == "eq1\n  what: K = W_K F\n  by:   a\n        b"
    assert "<" not in repr(t) and "$" not in repr(t)


@pytest.mark.parametrize("cell", ["an open $x", "an open `code", "$a$ and $b"])
def test_unmatched_math_or_code_is_refused(cell):
    with pytest.raises(ValueError, match="unmatched"):
        inline_html(cell)


def test_rows_and_widths_must_match_the_header():
    with pytest.raises(ValueError, match="n_c = 2"):
        Table(("a", "b"), (("1",),))
    with pytest.raises(ValueError, match="plain has 0 rows"):
        Table(("a",), (("1",),), plain=())
    with pytest.raises(ValueError, match="widths"):
        Table(("a", "b"), (("1", "2"),), widths=(100,))
    assert '<col style="width: 30%">' in Table(("a", "b"), (("1", "2"),), widths=(30, 70))._repr_html_()


def test_chapter_table_shows_every_entry_of_the_chapter_with_its_code_and_tests():
    chapter = "chapters/ch02_general_attention_model.ipynb"
    rows = catalog.for_chapter(chapter)
    t = catalog.chapter_table(chapter)
    parsed = _parse(t._repr_html_())
    assert len(parsed.cells) == 4 * (len(rows) + 1)
    for i, e in enumerate(rows, start=1):
        item, _, impl, tests = parsed.cells[4 * i : 4 * i + 4]
        assert item == e["id"]
        assert impl == "".join(e["implemented_by"]) and tests == "".join(e["tested_by"])
    assert "|" not in "".join(parsed.cells[:4]) and "---" not in t._repr_html_()
    for e in rows:
        assert e["title"] in repr(t)
    with pytest.raises(ValueError, match="no catalog entries"):
        catalog.chapter_table("chapters/none.ipynb")


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]{3,}", text)


def test_math_titles_keep_the_prose_of_their_plain_titles():
    """A typeset title may only turn the plain title's formulas into LaTeX: its prose stays the plain title's."""
    titles = {e["id"]: e["title"] for e in catalog.entries()}
    assert set(catalog.MATH_TITLES) <= set(titles), "MATH_TITLES names an id the catalog does not have"
    for id_, math_title in catalog.MATH_TITLES.items():
        assert math_title.count("$") % 2 == 0 and math_title.count("$") >= 2, id_
        prose = re.sub(r"\$[^$]+\$", " ", math_title)
        plain_words = set(_words(titles[id_]))
        assert set(_words(prose)) <= plain_words, f"{id_}: prose not in the plain title {titles[id_]!r}"
        inline_html(math_title)  # well formed


def test_complexity_table_typesets_the_costs_and_keeps_plain_text():
    t = A.complexity_table()
    parsed = _parse(t._repr_html_())
    assert len(parsed.cells) == 4 * (len(A.COMPLEXITY) + 1)
    assert r"\(O(n \log n + n m d)\)" in parsed.cells
    assert "O(n log n + n m d)" in repr(t) and "$" not in repr(t)
    assert r"Multi-head, \(h\) heads (Eq. 38-40)" in parsed.cells
