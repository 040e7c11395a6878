"""The equation-number extension (book/_ext/equation_numbers.py) on a tiny fixture book.

Builds a two-page Sphinx + MyST project in a temporary folder with the same
settings the book uses (dollarmath, amsmath, numfig on, MathJax tags off) and
checks what the HTML shows: survey labels show the survey's number, review and
nndl labels their prefixed numbers, other labels a letter per page, unlabelled
equations nothing, and ``{eq}`` references the same strings as their targets.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import equation_numbers as en  # noqa: E402

bs4 = pytest.importorskip("bs4")
pytest.importorskip("myst_parser")

PAGE_A = """# Page A

$$
y = W x
$$ (eq-a-first)

$$
\\mathbf{c} = \\sum_l a_l \\mathbf{v}_l
$$ (eq-survey-4)

$$
e = q^\\top k
$$

$$
s = \\tanh(x)
$$ (eq-review-6)

$$
p = \\mathrm{softmax}(e)
$$ (eq-a-second)

$$
h = f(x)
$$ (eq-nndl-12)

\\begin{align}
u &= v
\\end{align}

See {eq}`eq-survey-4`, {eq}`eq-review-6`, {eq}`eq-nndl-12`, {eq}`eq-a-second` and {eq}`eq-survey-33`.
"""

PAGE_B = """# Page B

$$
z = 1
$$ (eq-b-only)

$$
a = \\mathrm{align}(e)
$$ (eq-survey-33)

Back to {eq}`eq-survey-4` and {eq}`eq-a-first`.
"""

CONF = f"""
import sys
sys.path.insert(0, {str(ROOT / "book" / "_ext")!r})
extensions = ["myst_parser", "sphinx.ext.mathjax", "equation_numbers"]
myst_enable_extensions = ["dollarmath", "amsmath"]
# explicit: an in-process myst-nb build earlier in the same worker (tests/browser/test_widgets_static.py)
# leaves Sphinx's default suffix map pointing .md at "myst-nb", which this project does not load
source_suffix = {{".md": "markdown"}}
numfig = True
mathjax3_config = {{"tex": {{"tags": "none"}}}}
master_doc = "index"
"""

INDEX = """# Fixture

```{toctree}
a
b
```
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, bs4.BeautifulSoup]:
    from sphinx.application import Sphinx

    src = tmp_path_factory.mktemp("book")
    (src / "conf.py").write_text(CONF)
    (src / "index.md").write_text(INDEX)
    (src / "a.md").write_text(PAGE_A)
    (src / "b.md").write_text(PAGE_B)
    out = src / "_build"
    pages = {}
    for builder in ("html", "singlehtml"):
        app = Sphinx(
            str(src),
            str(src),
            str(out / builder),
            str(out / "doctrees" / builder),
            builder,
            status=None,
            warning=None,
            freshenv=True,
        )
        app.build()
        assert app.statuscode == 0
    for name in ("a", "b"):
        pages[name] = bs4.BeautifulSoup((out / "html" / f"{name}.html").read_text(), "html.parser")
    pages["single"] = bs4.BeautifulSoup((out / "singlehtml" / "index.html").read_text(), "html.parser")
    return pages


def shown_numbers(soup) -> dict[str, str]:
    """{equation anchor id: shown number} for every numbered display equation."""
    found = {}
    for eqno in soup.select("div.math span.eqno"):
        div = eqno.find_parent("div")
        found[div.get("id", "")] = "".join(eqno.find_all(string=True, recursive=False)).strip()
    return found


def ref_texts(soup) -> list[str]:
    return [a.get_text() for a in soup.select("a.reference") if "#equation-" in a.get("href", "")]


def test_labels_show_their_numbers(built):
    assert shown_numbers(built["a"]) == {
        "equation-eq-a-first": "(a)",
        "equation-eq-survey-4": "(4)",
        "equation-eq-review-6": "(R6)",
        "equation-eq-a-second": "(b)",
        "equation-eq-nndl-12": "(N12)",
    }
    # Letters restart on every page.
    assert shown_numbers(built["b"]) == {"equation-eq-b-only": "(a)", "equation-eq-survey-33": "(33)"}


def test_unlabelled_and_amsmath_equations_show_no_number(built):
    divs = built["a"].select("div.math")
    assert len(divs) == 7
    assert sum(1 for d in divs if d.select_one("span.eqno")) == 5


def test_references_show_the_same_numbers(built):
    assert ref_texts(built["a"]) == ["(4)", "(R6)", "(N12)", "(b)", "(33)"]
    assert ref_texts(built["b"]) == ["(4)", "(a)"]


def test_singlehtml_for_the_pdf_shows_the_same_numbers(built):
    shown = shown_numbers(built["single"])
    assert shown["equation-eq-survey-4"] == "(4)"
    assert shown["equation-eq-survey-33"] == "(33)"
    assert shown["equation-eq-a-first"] == "(a)" and shown["equation-eq-b-only"] == "(a)"
    assert "(33)" in ref_texts(built["single"])
    assert not [v for v in shown.values() if re.fullmatch(r"\(\d+\)", v) and v not in {"(4)", "(33)"}]


def test_mathjax_does_not_number_environments(built):
    html = str(built["a"])
    assert '"tags": "none"' in html


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["eq-survey-1", "x", "y"], {"eq-survey-1": "1", "x": "a", "y": "b"}),
        (["eq-review-2", "eq-nndl-3"], {"eq-review-2": "R2", "eq-nndl-3": "N3"}),
        (["0123456789abcdef0123456789abcdef", "f4941e80-b1cf-4701-9d0d-35e0b144b6a4", "z"], {"z": "a"}),
        (["eq-survey-x"], {"eq-survey-x": "a"}),
    ],
)
def test_display_numbers(labels, expected):
    assert en.display_numbers(labels) == expected


def test_letters_go_past_z():
    assert [en.letter(i) for i in (0, 25, 26, 27, 51, 52)] == ["a", "z", "aa", "ab", "az", "ba"]
    with pytest.raises(ValueError):
        en.letter(-1)
