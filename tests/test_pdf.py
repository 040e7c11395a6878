"""The book as a PDF (``make pdf``): ``_build/pdf/book.pdf`` and one PDF per chapter.

Uses ``_build/pdf/book.pdf`` when it is newer than the single-page build, and
builds it otherwise (``scripts/build_pdf.py``: singlehtml + chromium; CI has
chromium). Checks the PDF's text: the title page (CITATION.cff, the package's
version, the licences), the outline (part > chapter, from ``_toc.yml``), the
contents' page numbers against the outline and the footers, every page title
of ``_toc.yml``, the survey's equation numbers where the HTML shows them, the
bibliography, no printed toggles, no word past the right margin, the
per-chapter PDFs, and - where a CJK font is installed (``fonts-noto-cjk``, as
in CI) - the glossary's Chinese column. Text and word boxes come from
``pdftotext`` (poppler-utils, installed by ``.ci/run``; seconds); the outline
from pypdf.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.helpers import load_script, toc_files

ROOT = Path(__file__).resolve().parents[1]
PDF = ROOT / "_build" / "pdf" / "book.pdf"
SINGLE = ROOT / "_build" / "singlehtml" / "book" / "index.html"


def _load_build_pdf():
    return load_script("build_pdf")


#: The page margins in points, as build_pdf prints them.
MARGIN_PT = {side: mm / 25.4 * 72 for side, mm in _load_build_pdf().MARGIN_MM.items()}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def _title(source: Path) -> str:
    """The first level-1 heading of a page's source (.md or .ipynb)."""
    if source.suffix == ".ipynb":
        text = "\n".join(
            "".join(c["source"]) for c in json.loads(source.read_text())["cells"] if c["cell_type"] == "markdown"
        )
    else:
        text = source.read_text(encoding="utf-8")
    m = re.search(r"^# (.+)$", text, flags=re.M)
    assert m, f"{source} has no title"
    return m.group(1).strip()


def _toc_sources() -> list[Path]:
    out = []
    for f in toc_files(ROOT)[1:]:  # the root page's title is the book's
        for suffix in (".ipynb", ".md"):
            if (ROOT / (f + suffix)).is_file():
                out.append(ROOT / (f + suffix))
                break
    return out


@pytest.fixture(scope="module")
def built_pdf() -> Path:
    fresh = PDF.is_file() and (not SINGLE.is_file() or PDF.stat().st_mtime >= SINGLE.stat().st_mtime)
    if not fresh:
        if not Path("/usr/bin/chromium").is_file():
            pytest.skip("no _build/pdf/book.pdf and no chromium to build it (make pdf)")
        _load_build_pdf().main([])
    return PDF


@pytest.fixture(scope="module")
def pdf_text(built_pdf) -> str:
    if shutil.which("pdftotext"):
        text = subprocess.run(
            ["pdftotext", "-enc", "UTF-8", str(PDF), "-"], capture_output=True, text=True, check=True
        ).stdout
    else:
        pypdf = pytest.importorskip("pypdf", reason="neither pdftotext (poppler-utils) nor pypdf installed")
        text = "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(str(PDF)).pages)
    return _norm(text)


def test_pdf_has_contents_and_every_page_title(pdf_text):
    assert pdf_text.count("Contents") >= 1
    missing = [_title(src) for src in _toc_sources() if _norm(_title(src)) not in pdf_text]
    assert not missing, f"page titles missing from the PDF: {missing}"


def test_pdf_shows_the_survey_equation_numbers(pdf_text):
    bs4 = pytest.importorskip("bs4")
    if not SINGLE.is_file():
        pytest.skip(f"{SINGLE} not built: the numbers to look for are read from it")
    # only the survey equations' blocks are built into a tree (the whole 8 MB page took 8 s to parse)
    survey = bs4.SoupStrainer("div", id=re.compile("^equation-eq-survey-"))
    soup = bs4.BeautifulSoup(SINGLE.read_text(encoding="utf-8"), "html.parser", parse_only=survey)
    shown = []
    for div in soup.select("div.math[id^=equation-eq-survey-]"):
        eqno = div.select_one("span.eqno")
        if eqno:
            shown.append("".join(eqno.find_all(string=True, recursive=False)).strip())
    assert len(shown) == 46, f"the single-page book shows {len(shown)} survey equation numbers, not 46"
    for number in shown:
        assert number in pdf_text, f"equation number {number} not in the PDF"


def test_pdf_has_the_bibliography(pdf_text):
    assert "Bibliography" in pdf_text
    assert "Frasincar" in pdf_text


def _has_cjk_font() -> bool:
    if not shutil.which("fc-list"):
        return False
    out = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout
    return bool(out.strip())


def test_pdf_prints_the_glossary_chinese_column(pdf_text):
    if not _has_cjk_font():
        pytest.skip("no CJK font installed (apt-get install fonts-noto-cjk; .ci/run does)")
    glossary = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    terms = re.findall(r"^\s+([\u4e00-\u9fff]{2,})", glossary, flags=re.M)
    assert terms, "no Chinese terms found in book/glossary.md"
    missing = [t for t in terms[:10] if t not in pdf_text]
    assert not missing, f"Chinese glossary terms not in the PDF: {missing}"


# --- the book's structure: title page, outline, contents, page numbers, margins -------------------


@dataclass
class Word:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass
class Page:
    width: float
    height: float
    words: list[Word]

    def text(self) -> str:
        return " ".join(w.text for w in self.words)


def _pages(pdf: Path) -> list[Page]:
    """Every page's words with their boxes (points, origin top left), from ``pdftotext -bbox``."""
    out = subprocess.run(
        ["pdftotext", "-bbox", "-enc", "UTF-8", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    pages = []
    for chunk in out.split("<page ")[1:]:
        size = re.match(r'width="([\d.]+)" height="([\d.]+)"', chunk)
        words = [
            Word(html.unescape(m[5]), *map(float, m.groups()[:4]))
            for m in re.finditer(
                r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>', chunk
            )
        ]
        pages.append(Page(float(size[1]), float(size[2]), words))
    return pages


def _past_right_margin(pages: list[Page], slack: float = 1.0) -> list[tuple[int, str, float]]:
    """(page number, word, points past) of every word that ends in the right margin or beyond."""
    return [
        (i + 1, w.text, round(w.x1 - (p.width - MARGIN_PT["right"]), 1))
        for i, p in enumerate(pages)
        for w in p.words
        if w.x1 > p.width - MARGIN_PT["right"] + slack
    ]


@pytest.fixture(scope="module")
def pdf_pages(built_pdf) -> list[Page]:
    if not shutil.which("pdftotext"):
        pytest.skip("pdftotext (poppler-utils) not installed")
    return _pages(built_pdf)


@pytest.fixture(scope="module")
def outline(built_pdf):
    """[(level, title, 0-based page index)] of the PDF's bookmarks, and the page labels."""
    pypdf = pytest.importorskip("pypdf")
    reader = pypdf.PdfReader(str(built_pdf))
    items = []

    def walk(entries, level):
        for e in entries:
            if isinstance(e, list):
                walk(e, level + 1)
            else:
                items.append((level, e.title, reader.get_destination_page_number(e)))

    walk(reader.outline, 0)
    return items, list(reader.page_labels)


def _toc_parts() -> list[tuple[str, list[str]]]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [(p["caption"], [c["file"] for c in p["chapters"]]) for p in toc["parts"]]


def test_title_page_names_the_book_its_authors_version_and_licences(pdf_pages, outline):
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    version = re.search(r'__version__ = "([^"]+)"', (ROOT / "src/attnsurvey/__init__.py").read_text())[1]
    title = _norm(pdf_pages[0].text())
    assert _norm(cff["title"]) in title
    for author in cff["authors"]:
        assert _norm(author["name"]) in title
    assert f"Version {version}" in title
    assert "MIT" in title and "CC BY 4.0" in title
    _, labels = outline
    assert labels[0] == "i", "the title page carries no page number"
    page = pdf_pages[0]
    assert not [w for w in page.words if w.y0 > page.height - MARGIN_PT["bottom"]], "no footer on the title page"


def test_outline_has_every_part_and_chapter_in_toc_order(outline):
    items, _ = outline
    parts = _toc_parts()
    top = [title for level, title, _ in items if level == 0]
    assert [p for p, _ in parts] == [t for t in top if t not in ("Title page", "Contents")]
    chapters = [(title, page) for level, title, page in items if level == 1]
    assert len(chapters) >= 22, f"only {len(chapters)} chapter entries in the outline"
    sources = _toc_sources()
    assert [_norm(t) for t, _ in chapters] == [_norm(_title(s)) for s in sources]
    pages = [p for _, p in chapters]
    assert pages == sorted(pages) and len(set(pages)) == len(pages), "chapters in order, each on its own page"
    assert sum(1 for level, *_ in items if level == 2) >= 100, "chapter sections are in the outline too"


def test_contents_page_numbers_match_the_outline_and_the_footers(pdf_pages, outline):
    items, labels = outline
    chapters = [(title, page) for level, title, page in items if level == 1]
    contents = next(page for level, title, page in items if level == 0 and title == "Contents")
    front = pdf_pages[contents : chapters[0][1]]
    column = [
        w.text
        for p in front
        for w in p.words
        if w.x1 > p.width * 0.8 and w.y1 < p.height - MARGIN_PT["bottom"] and w.text.isdigit()
    ]
    assert column == [labels[page] for _, page in chapters], "the contents' page numbers are the chapters' pages"
    # the footer of every numbered page prints its label
    for i, page in enumerate(pdf_pages[1:], start=1):
        footer = [w.text for w in page.words if w.y0 > page.height - MARGIN_PT["bottom"]]
        assert footer == [labels[i]], f"page {i + 1}: footer {footer}, label {labels[i]}"


def test_no_word_runs_past_the_right_margin(pdf_pages):
    past = _past_right_margin(pdf_pages)
    assert not past, f"{len(past)} words past the right margin (page, word, points): {past[:10]}"


def test_nothing_is_cut_at_the_margin_or_shrunk_to_fit(built_pdf):
    """A box that clips its content (a code line cut at the margin) prints only what it shows, and
    a page wider than the paper is shrunk whole by chromium: neither is seen by the word boxes
    above, so the print's layout report (``build_pdf.LAYOUT_JS``) is checked as well."""
    report = json.loads(_load_build_pdf().REPORT.read_text())
    assert report["wide"] <= report["printable_px"] + 1, f"the page is {report['wide']} px wide"
    assert report["clipped"] == [], report["clipped"][:10]


def test_the_layout_check_sees_a_line_cut_at_the_margin():
    """The check above has teeth: a long code line in a scrolling box (as the HTML prints it) is
    reported; with the print stylesheet it wraps and nothing is reported."""
    if not Path("/usr/bin/chromium").is_file():
        pytest.skip("needs chromium")
    build = _load_build_pdf()
    line = " ".join(f"word{i}" for i in range(60))
    with build.chromium() as browser:
        page = browser.new_page()
        page.set_viewport_size({"width": build.printable_width_px(), "height": 800})
        page.set_content(f"<div class='highlight'><pre style='overflow:auto'>{line}</pre></div>")
        cut = page.evaluate(build.LAYOUT_JS)
        page.add_style_tag(content=build.PRINT_CSS)
        wrapped = page.evaluate(build.LAYOUT_JS)
    assert [c for c in cut["clipped"] if c.startswith("pre")], cut
    assert wrapped["clipped"] == [] and wrapped["wide"] <= build.printable_width_px() + 1, wrapped


def test_links_stay_inside_the_pdf(outline, built_pdf):
    """Links within the book are links within the PDF, never to the local server that printed it."""
    pypdf = pytest.importorskip("pypdf")
    local = []
    for i, page in enumerate(pypdf.PdfReader(str(built_pdf)).pages):
        for annot in page.get("/Annots") or []:
            action = annot.get_object().get("/A") or {}
            if action.get("/S") == "/URI" and re.match(r"https?://(127\.0\.0\.1|localhost)", action["/URI"]):
                local.append((i + 1, action["/URI"]))
    assert not local, local[:5]


def test_no_interactive_toggles_are_printed(pdf_text):
    for toggle in ("Show code cell source", "Hide code cell source", "Click to show"):
        assert toggle not in pdf_text


def test_one_pdf_per_chapter_with_the_chapters_pages(outline, built_pdf):
    pypdf = pytest.importorskip("pypdf")
    items, labels = outline
    folder = built_pdf.parent / "chapters"
    sources = _toc_sources()
    total = 0
    for source in sources:
        part = pypdf.PdfReader(str(folder / f"{source.stem}.pdf"))
        total += len(part.pages)
        first = part.page_labels[0]
        assert (1, _title(source), labels.index(first)) in [(lv, t, p) for lv, t, p in items], source.stem
    first_chapter = next(page for level, _, page in items if level == 1)
    assert total == len(labels) - first_chapter, "the chapters' PDFs together hold every chapter page once"
