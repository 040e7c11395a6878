"""The whole book as one PDF (``make pdf``, issue 14).

Uses ``_build/pdf/book.pdf`` when it is newer than the single-page build, and
builds it otherwise (``scripts/build_pdf.py``: singlehtml + chromium; CI has
chromium). Checks the PDF's text (pypdf): the table of contents, every page
title of ``_toc.yml``, the survey's equation numbers where the HTML shows them,
the bibliography, and - where a CJK font is installed (``fonts-noto-cjk``, as
in CI) - the glossary's Chinese column. Text comes from ``pdftotext``
(poppler-utils, installed by ``.ci/run``; about a second) or else from pypdf
(pure Python; about a minute for the whole book).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from tests.helpers import toc_files

ROOT = Path(__file__).resolve().parents[1]
PDF = ROOT / "_build" / "pdf" / "book.pdf"
SINGLE = ROOT / "_build" / "singlehtml" / "book" / "index.html"


def _load_build_pdf():
    spec = importlib.util.spec_from_file_location("build_pdf", ROOT / "scripts" / "build_pdf.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_pdf"] = module
    spec.loader.exec_module(module)
    return module


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
def pdf_text() -> str:
    fresh = PDF.is_file() and (not SINGLE.is_file() or PDF.stat().st_mtime >= SINGLE.stat().st_mtime)
    if not fresh:
        if not Path("/usr/bin/chromium").is_file():
            pytest.skip("no _build/pdf/book.pdf and no chromium to build it (make pdf)")
        _load_build_pdf().main([])
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
    soup = bs4.BeautifulSoup(SINGLE.read_text(encoding="utf-8"), "html.parser")
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
