"""Equation numbers in the built HTML book.

Parses ``_build/html`` (``make book``; in CI the build runs before the tests)
and checks that (i) each of the survey's 46 equations is displayed exactly once
in the book, labelled ``eq-survey-k`` and showing (k); (ii) no other displayed
equation shows a bare integer (only (R6), (N3), (a), ...), and MathJax is not
told to number environments; (iii) every reference to ``eq-survey-k`` shows (k).
The extension that produces the numbers is tested on a fixture book in
``test_equation_extension.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import toc_files

bs4 = pytest.importorskip("bs4")

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SURVEY_EQUATIONS = 46
SURVEY_ID = re.compile(r"^equation-eq-survey-(\d+)$")
BARE_INTEGER = re.compile(r"^\(\d+\)$")


def _pages() -> list[Path]:
    return [SITE / (f + ".html") for f in toc_files(ROOT)]


@pytest.fixture(scope="module")
def soups() -> dict[str, bs4.BeautifulSoup]:
    if not (SITE / "index.html").is_file():
        pytest.skip(f"no built book at {SITE}: run `make book` (CI builds it before the tests)")
    return {
        p.relative_to(SITE).as_posix(): bs4.BeautifulSoup(p.read_text(encoding="utf-8"), "html.parser")
        for p in _pages()
        if p.is_file()
    }


def _equations(soup) -> list[tuple[str, str | None]]:
    """(anchor id, shown number or None) of every displayed equation of a page."""
    out = []
    for div in soup.select("div.math"):
        eqno = div.select_one("span.eqno")
        shown = "".join(eqno.find_all(string=True, recursive=False)).strip() if eqno else None
        out.append((div.get("id", ""), shown))
    return out


def test_every_survey_equation_shown_once_with_its_number(soups):
    seen: Counter[int] = Counter()
    wrong = []
    for page, soup in soups.items():
        for anchor, shown in _equations(soup):
            m = SURVEY_ID.match(anchor)
            if m:
                k = int(m.group(1))
                seen[k] += 1
                if shown != f"({k})":
                    wrong.append(f"{page}: eq-survey-{k} shows {shown}")
    assert not wrong, "survey equations showing another number: " + "; ".join(wrong)
    missing = [k for k in range(1, SURVEY_EQUATIONS + 1) if seen[k] == 0]
    repeated = {k: n for k, n in seen.items() if n > 1}
    extra = sorted(k for k in seen if not 1 <= k <= SURVEY_EQUATIONS)
    assert not repeated, f"survey equations displayed more than once: {repeated}"
    assert not extra, f"labels beyond the survey's {SURVEY_EQUATIONS} equations: {extra}"
    assert not missing, f"survey equations not displayed (label eq-survey-k): {missing}"


def test_no_other_equation_shows_a_bare_integer(soups):
    bad = []
    for page, soup in soups.items():
        for anchor, shown in _equations(soup):
            if shown and BARE_INTEGER.match(shown) and not SURVEY_ID.match(anchor):
                bad.append(f"{page}: {anchor or '(no label)'} shows {shown}")
        for div in soup.select("div.math"):
            if "\\tag{" in div.get_text():
                bad.append(f"{page}: a \\tag{{}} in {div.get_text()[:60]!r}")
    assert not bad, "equations numbered like the survey's but not the survey's: " + "; ".join(bad)


def test_mathjax_does_not_number_environments(soups):
    configured = 0
    for page, soup in soups.items():
        for script in soup.find_all("script"):
            text = script.get_text()
            if "MathJax" in text and "tags" in text:
                assert '"tags": "none"' in text, page  # not "ams"/"all": the extension numbers equations
                configured += 1
    assert configured, "no page carries a MathJax configuration with 'tags' (the check above would be empty)"


def test_references_to_survey_equations_show_their_number(soups):
    wrong = []
    for page, soup in soups.items():
        for a in soup.select("a.reference"):
            m = re.search(r"#equation-eq-survey-(\d+)$", a.get("href", ""))
            if m:
                if a.get_text().strip() != f"({m.group(1)})":
                    wrong.append(f"{page}: link to eq-survey-{m.group(1)} shows {a.get_text()!r}")
    assert not wrong, "; ".join(wrong)
