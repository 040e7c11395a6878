"""Build the book as a PDF, offline: ``make pdf`` -> ``_build/pdf/book.pdf`` and one PDF per page
of ``_toc.yml`` in ``_build/pdf/chapters/<name>.pdf``.

    python scripts/build_pdf.py              # singlehtml build + print with chromium
    python scripts/build_pdf.py --no-build   # print the existing _build/singlehtml

1. ``jupyter-book build . --builder singlehtml``: every page of ``_toc.yml`` in one
   HTML page, with the same extensions as the HTML book (the survey's equation
   numbers, the bibliography, figures, offline MathJax), so equations and figures
   carry the numbers the HTML shows.
2. The page is served from 127.0.0.1 and opened in the Debian chromium. Once MathJax
   has typeset everything and every image and stored widget view is drawn, the page is
   made printable (``PREPARE_JS``, ``PRINT_CSS``): code and output wrap instead of
   running past the margin, display equations and tables too wide for the page are
   set smaller, the "Show code cell source" toggles and the code they hide are left
   out (as the HTML shows them at first), a widget's slider or menu is replaced by
   the value it shows, each chapter's collapsed solutions move to a "Solutions"
   section at the chapter's end, links inside the book become links inside the PDF,
   and a contents list (parts from ``_toc.yml``) is put in front.
3. Two prints: the first finds the page on which each chapter starts (the PDF's
   named destinations); the contents list then gets these page numbers and only its
   own pages are printed again and put in place of the first print's.
4. pypdf adds the title page (title and authors from ``CITATION.cff``, version from
   the package, licences), the outline (bookmarks: part > chapter > section), page
   labels that match the printed numbers, and cuts one PDF per chapter.

Chinese text (the glossary) needs a CJK font: ``fonts-noto-cjk`` (installed by
``.ci/run``). No LaTeX is involved. Prints the seconds each step took.
"""

from __future__ import annotations

import argparse
import html
import io
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from pypdf import PdfReader, PdfWriter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from site_browser import chromium, serve  # noqa: E402

SINGLE = ROOT / "_build" / "singlehtml"
PDF = ROOT / "_build" / "pdf" / "book.pdf"
#: What the print saw (layout width, clipped boxes, chapters and their first pages); tests/test_pdf.py reads it.
REPORT = ROOT / "_build" / "pdf" / "book.json"
WAIT_MS = 180_000
DEBUG = False
#: Page margins (also read by tests/test_pdf.py: no text may run into the right one).
MARGIN_MM = {"top": 18, "bottom": 18, "left": 16, "right": 16}

PRINT_CSS = """
/* a book's type size on A4 (the HTML's 16px base would need some 760 pages) */
html { font-size: 84% !important; }
.bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer,
.bd-footer-article, .prev-next-area, .headerlink, #pst-back-to-top,
.header-article-items, .sidebar-toggle, .bd-search, .skip-link, .copybtn, .onlyprint,
.toggle-button, details.hide.above-input, .pdf-anchor, mjx-assistive-mml { display: none !important; }
.bd-main .bd-content .bd-article-container { max-width: 100% !important; }
.bd-page-width, .bd-container__inner { max-width: 100% !important; }
/* every page of the toc starts on a new page */
article.bd-article section.pdf-chapter { break-before: page; }
/* code and output wrap at the margin instead of being cut */
pre, .highlight pre, div.cell_output pre, .output pre {
  white-space: pre-wrap !important; overflow-wrap: anywhere !important; overflow: visible !important;
}
pre, div.highlight, div.cell_input, div.cell_output { break-inside: auto !important; }
div.cell_output pre { font-size: .8em !important; }  /* printed tables of numbers fit a line */
code, a, td, th, .math, h1, h2, h3, h4, h5, h6, p, li, dt, dd { overflow-wrap: anywhere; }
div.cell_output, .highlight, div.output, .bd-article, div.math, span.math { overflow: visible !important; }
img { max-width: 100% !important; height: auto; }
table { max-width: 100%; }
/* collapsed solutions are printed open, at the end of their chapter */
.toggle-hidden > :not(.admonition-title) { display: revert !important; }
.pdf-solutions h3 { break-before: avoid; }
/* a widget prints the value it shows, not its control */
.widget-slider .slider-container { display: none !important; }
.pdf-widget-value { font-weight: 600; margin-left: .4em; }
/* contents */
#pdf-toc { break-after: page; }
#pdf-toc h2 { margin-top: 0; }
#pdf-toc ul { padding-left: 0; }
#pdf-toc li { list-style: none; margin: .05em 0; display: flex; align-items: baseline; }
#pdf-toc li.part { font-weight: bold; margin-top: .5em; break-after: avoid; }
#pdf-toc a { color: inherit; text-decoration: none; }
#pdf-toc li.chapter { padding-left: 1.2em; }
#pdf-toc .leader { flex: 1; border-bottom: 1px dotted #888; margin: 0 .4em; min-width: 2em; }
#pdf-toc .pageno { min-width: 2.2em; text-align: right; font-variant-numeric: tabular-nums; }
"""

# Run on the typeset page, before the first print. Returns [{doc, id, title, sections}]
# for every page of the toc after the root (docname, section id, title, h3 sections).
PREPARE_JS = """([parts, solutionsTitle]) => {
  const article = document.querySelector('article.bd-article');
  // links into the single page itself become links inside the PDF
  for (const a of document.querySelectorAll('a[href]')) {
    const u = new URL(a.href, location.href);
    if (u.hash && u.origin === location.origin &&
        (u.pathname === location.pathname || u.pathname.endsWith('/book/index.html'))) {
      a.setAttribute('href', u.hash);
    } else if (u.origin === location.origin) {
      a.removeAttribute('href');  // e.g. an image linked to its own file: no such file in the PDF
    }
  }
  // the code of hidden-input cells is left out, as the HTML shows it at first
  for (const d of document.querySelectorAll('details.hide.above-input')) d.remove();
  // widgets: a menu prints its selected option, a slider its readout
  for (const s of document.querySelectorAll('.jupyter-widgets select, .widget-dropdown select')) {
    const span = document.createElement('span');
    span.className = 'pdf-widget-value';
    span.textContent = s.selectedOptions.length ? s.selectedOptions[0].textContent : '';
    s.replaceWith(span);
  }
  for (const r of document.querySelectorAll('.widget-readout')) {
    r.removeAttribute('contenteditable'); r.classList.add('pdf-widget-value');
  }
  // the chapters: each toc page is a section after a span#document-<docname>
  const chapters = [];
  let nAnchors = 0;
  for (const span of article.querySelectorAll('span[id^="document-"]')) {
    const sec = span.nextElementSibling;
    if (!sec || sec.tagName !== 'SECTION') continue;
    const h = sec.querySelector(':scope > h1, :scope > h2');
    if (!h) continue;
    sec.classList.add('pdf-chapter');
    // collapsed solutions move to the chapter's end, each named after its exercise
    const sols = Array.from(sec.querySelectorAll('.dropdown.admonition'));
    if (sols.length) {
      const box = document.createElement('section');
      box.className = 'pdf-solutions';
      box.id = 'pdf-solutions-' + chapters.length;
      const t = document.createElement('h3');
      t.textContent = solutionsTitle;
      box.appendChild(t);
      for (const s of sols) {
        let ex = s.closest('section');
        const eh = ex && ex.querySelector(':scope > h3, :scope > h4');
        const title = s.querySelector('.admonition-title');
        if (eh && title) {
          title.textContent = (title.textContent.trim() || 'Solution') + ' — ' +
            eh.textContent.replace(/#$/, '').trim();
        }
        s.classList.remove('toggle-hidden');
        box.appendChild(s);
      }
      sec.appendChild(box);
    }
    // named destinations for the outline: chromium writes one for each id a link points to;
    // section ids repeat across pages ("summary"), so every heading gets its own
    const anchor = (el) => {
      el.id = 'pdf-h-' + (++nAnchors);
      const a = document.createElement('a');
      a.href = '#' + el.id; a.className = 'pdf-anchor'; a.setAttribute('aria-hidden', 'true');
      el.appendChild(a);
      return el.id;
    };
    const sections = Array.from(sec.querySelectorAll(':scope > section > h3'))
      .map(x => [anchor(x), x.textContent.replace(/#$/, '').trim()]);
    chapters.push({doc: span.id.slice('document-'.length), id: anchor(h),
                   title: h.textContent.replace(/#$/, '').trim(), sections});
  }
  // the contents list, in front of the root page's text
  const toc = document.createElement('nav');
  toc.id = 'pdf-toc';
  const head = document.createElement('h2');
  head.textContent = 'Contents';
  toc.appendChild(head);
  const list = document.createElement('ul');
  let i = 0;
  for (const [caption, docs] of parts) {
    const li = document.createElement('li'); li.className = 'part'; li.textContent = caption;
    list.appendChild(li);
    for (const doc of docs) {
      const ch = chapters.find(c => c.doc === doc);
      if (!ch) continue;
      const e = document.createElement('li'), a = document.createElement('a');
      e.className = 'chapter';
      a.href = '#' + ch.id; a.textContent = ch.title;
      const lead = document.createElement('span'); lead.className = 'leader';
      const no = document.createElement('span'); no.className = 'pageno'; no.textContent = '000';
      no.dataset.doc = doc;
      e.append(a, lead, no); list.appendChild(e);
    }
  }
  toc.appendChild(list);
  article.insertBefore(toc, article.firstElementChild);
  // display equations, long inline formulas and tables too wide for the column are set smaller
  const right = article.getBoundingClientRect().right;
  const shrink = (el, width, avail) => {
    for (let k = 0; k < 4; k++) {
      const w = width();
      if (w <= avail + 0.5) break;
      const now = parseFloat(getComputedStyle(el).fontSize);
      el.style.fontSize = (now * avail / w * 0.98) + 'px';
    }
  };
  for (const el of document.querySelectorAll('mjx-container')) {
    const math = el.querySelector('mjx-math');
    if (!math) continue;
    if (el.getAttribute('display') === 'true') {
      shrink(el, () => math.getBoundingClientRect().width, el.clientWidth);
    } else if (el.getBoundingClientRect().right > right) {
      const left = el.getBoundingClientRect().left;
      shrink(el, () => el.getBoundingClientRect().width, right - left);
    }
  }
  for (const el of document.querySelectorAll('div.cell_output, .pst-scrollable-table-container, .table-wrapper')) {
    shrink(el, () => el.scrollWidth, el.clientWidth);
  }
  return chapters;
}"""

# What the paper would not show: the page's width (chromium shrinks a page wider than the paper)
# and every box that clips what it holds (a code line cut at the margin).
LAYOUT_JS = """() => {
  const clipped = [];
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('mjx-assistive-mml')) continue;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    if (['hidden', 'auto', 'scroll', 'clip'].includes(cs.overflowX) && el.scrollWidth > el.clientWidth + 1) {
      clipped.push(el.tagName.toLowerCase() + '.' + String(el.className).split(' ')[0] + ': ' +
                   (el.textContent || '').trim().slice(0, 60));
    }
  }
  return {wide: document.documentElement.scrollWidth, clipped};
}"""

# Removes the chapters (printed already) and fills in the contents' page numbers: {docname: page number}.
NUMBERS_JS = """(numbers) => {
  document.querySelectorAll('section.pdf-chapter').forEach(s => s.remove());
  for (const no of document.querySelectorAll('#pdf-toc .pageno')) no.textContent = String(numbers[no.dataset.doc]);
  const toc = document.querySelector('#pdf-toc');
  return toc.getBoundingClientRect().height;
}"""

FOOTER = "<div style='font-size:8px;width:100%;text-align:center'><span class='pageNumber'></span></div>"

TITLE_HTML = """<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body {{ font-family: sans-serif; margin: 0; }}
.page {{ height: 250mm; display: flex; flex-direction: column; justify-content: space-between; }}
h1 {{ font-size: 30pt; line-height: 1.2; margin: 40mm 0 8mm; }}
.sub {{ font-size: 14pt; color: #333; line-height: 1.4; }}
.authors {{ font-size: 15pt; margin-top: 18mm; }}
.version {{ font-size: 12pt; color: #333; margin-top: 4mm; }}
.small {{ font-size: 9.5pt; color: #444; line-height: 1.45; }}
</style></head><body><div class="page"><div>
<h1>{title}</h1>
<div class="sub">{subtitle}</div>
<div class="authors">{authors}</div>
<div class="version">Version {version}{date}</div>
</div>
<div class="small">{licence}<br>{cite}</div>
</div></body></html>"""


@dataclass
class Chapter:
    """One page of the toc in the printed book."""

    doc: str
    title: str
    anchor: str
    part: str
    sections: list[tuple[str, str]] = field(default_factory=list)
    first: int = -1  # 0-based index of its first page in the body PDF
    #: 0-based index in the body PDF of the page where each section (by anchor) starts, where one was found
    section_pages: dict[str, int] = field(default_factory=dict)


def toc_parts(toc_file: Path = ROOT / "_toc.yml") -> list[tuple[str, list[str]]]:
    """[(part caption, [docnames of its pages, sections included])] of ``_toc.yml``."""
    toc = yaml.safe_load(toc_file.read_text())
    parts = []
    for part in toc.get("parts", []):
        docs = []
        for ch in part.get("chapters", []):
            docs.append(ch["file"])
            docs.extend(s["file"] for s in ch.get("sections", []))
        parts.append((part.get("caption", ""), [d.removesuffix(".ipynb").removesuffix(".md") for d in docs]))
    return parts


def book_metadata() -> dict[str, str]:
    """Title, authors, version, date and licences for the title page (CITATION.cff, the package)."""
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    sys.path.insert(0, str(ROOT / "src"))
    import attnsurvey

    authors = []
    for a in cff.get("authors", []):
        authors.append(a.get("name") or " ".join(x for x in (a.get("given-names"), a.get("family-names")) if x))
    survey = (cff.get("references") or [{}])[0]
    survey_authors = " and ".join(a.get("family-names", "") for a in survey.get("authors", []))
    return {
        "title": cff["title"],
        "authors": ", ".join(authors),
        "version": attnsurvey.__version__,
        "date": str(cff.get("date-released", "")),
        "subtitle": (
            f"A runnable companion to {survey_authors}, “{survey.get('title', '')}”, "
            f"{survey.get('journal', '')} {survey.get('volume', '')}({survey.get('issue', '')}), "
            f"{survey.get('year', '')}"
            if survey
            else ""
        ),
        "licence": (
            f"Code: {cff.get('license', 'MIT')} licence (LICENSE). Text, figures and the notebooks' prose: "
            "Creative Commons Attribution 4.0 International, CC BY 4.0 (LICENSE-TEXT)."
        ),
        "cite": cff.get("message", ""),
    }


def title_page_html(meta: dict[str, str]) -> str:
    """The title page as a small HTML document."""
    esc = {k: html.escape(v) for k, v in meta.items()}
    esc["date"] = f", {esc['date']}" if esc["date"] else ""
    return TITLE_HTML.format(**esc)


def build_singlehtml() -> Path:
    """Build the single-page HTML book; returns its index.html (at the site root)."""
    jb = Path(sys.executable).parent / "jupyter-book"
    subprocess.run([str(jb), "build", str(ROOT), "--builder", "singlehtml"], check=True, cwd=ROOT)
    return single_index()


def single_index() -> Path:
    # Sphinx writes the single page under the root document's folder (book/index.html)
    # but links its assets relative to the site root: put it at the root.
    page = SINGLE / "book" / "index.html"
    target = SINGLE / "book.html"
    if page.is_file():
        shutil.copyfile(page, target)
    if not target.is_file():
        raise FileNotFoundError(f"no single-page book at {page} (run without --no-build)")
    return target


def _wait_for_widgets(page) -> None:
    """Wait until html-manager has drawn every stored widget view (each page's state is embedded
    by book/_ext/offline_assets.py); a view still blank after the wait is reported, not fatal."""
    js = """() => Array.from(document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]'))
        .filter(s => !s.parentElement.querySelector('.jupyter-widgets')).length"""
    try:
        page.wait_for_function(f"() => ({js})() === 0", timeout=60_000)
    except Exception:  # playwright TimeoutError
        print(f"warning: {page.evaluate(js)} widget views not drawn; printing without them", flush=True)


def printable_width_px() -> int:
    """The width of an A4 page between the margins, in CSS pixels (96 per inch)."""
    return int((210 - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96)


def _pdf_options(**extra) -> dict:
    return {
        "format": "A4",
        "print_background": True,
        "margin": {k: f"{v}mm" for k, v in MARGIN_MM.items()},
        **extra,
    }


def first_pages(reader: PdfReader, anchors: list[str]) -> dict[str, int]:
    """{anchor id: 0-based page index} of the named destinations chromium wrote for ``anchors`` (``reader``: the
    printed PDF)."""
    dests = reader.named_destinations
    out = {}
    for a in anchors:
        d = dests.get("/" + a) or dests.get(a)
        if d is not None:
            out[a] = reader.get_destination_page_number(d)
    return out


def print_body(page_file: Path, browser: Any) -> tuple[PdfReader, bytes, list[Chapter]]:
    """Print the single page (two passes) in ``browser``; returns the body PDF (the first print, read), the front
    matter printed again with the contents' page numbers (see :func:`assemble`) and the chapters with the pages
    where they and their sections start."""
    from pypdf import PdfReader

    parts = toc_parts()
    part_of = {doc: caption for caption, docs in parts for doc in docs}
    with serve(page_file.parent) as url:
        page = browser.new_page()
        # lay the page out at the printable width, so that what fits here fits on paper
        page.set_viewport_size({"width": printable_width_px(), "height": 1100})
        page.set_default_timeout(WAIT_MS)
        foreign: list[str] = []
        page.on("request", lambda r: foreign.append(r.url) if not r.url.startswith((url, "data:", "blob:")) else None)
        t0 = time.perf_counter()
        page.goto(f"{url}/{page_file.name}", wait_until="load")
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
        _wait_for_widgets(page)
        t1 = time.perf_counter()
        page.add_style_tag(content=PRINT_CSS)
        page.emulate_media(media="print")
        found = page.evaluate(PREPARE_JS, [[[c, d] for c, d in parts], "Solutions"])
        layout = page.evaluate(LAYOUT_JS)
        if layout["wide"] > printable_width_px() + 1:
            print(
                f"warning: the page is {layout['wide']} px wide, the paper {printable_width_px()} px: chromium shrinks it"
            )
        for box in layout["clipped"][:10]:
            print(f"warning: cut at the margin: {box}")
        chapters = [
            Chapter(c["doc"], c["title"], c["id"], part_of.get(c["doc"], ""), [tuple(s) for s in c["sections"]])
            for c in found
            if c["doc"] in part_of
        ]
        options = _pdf_options(display_header_footer=True, header_template="<span></span>", footer_template=FOOTER)
        body = PdfReader(io.BytesIO(page.pdf(**options)))
        t2 = time.perf_counter()
        pages = first_pages(body, [a for c in chapters for a in (c.anchor, *(s for s, _ in c.sections))])
        for c in chapters:
            c.first = pages.get(c.anchor, -1)
            c.section_pages = {a: pages[a] for a, _ in c.sections if a in pages}
        missing = [c.doc for c in chapters if c.first < 0]
        if missing:
            raise RuntimeError(f"no page found for {missing} in the first print")
        # The contents and the root page's text come before the first chapter; they are printed
        # again, alone (quick), with the page numbers filled in, and put in place of the first print's.
        page.evaluate(NUMBERS_JS, {c.doc: c.first + 1 for c in chapters})
        front = page.pdf(**options)
        if DEBUG:
            body.stream.seek(0)
            (PDF.parent / "debug-body.pdf").write_bytes(body.stream.read())
            (PDF.parent / "debug-front.pdf").write_bytes(front)
        t3 = time.perf_counter()
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(
            json.dumps(
                {"printable_px": printable_width_px(), **layout, "chapters": [vars(c) for c in chapters]}, indent=1
            )
        )
        print(
            f"{t1 - t0:6.1f} s  load page, typeset math, draw widgets\n"
            f"{t2 - t1:6.1f} s  first print\n{t3 - t2:6.1f} s  contents with page numbers",
            flush=True,
        )
        if foreign:
            raise RuntimeError(f"the single page requested other hosts: {foreign[:5]}")
    return body, front, chapters


def _replace_front(writer: PdfWriter, front: bytes, n: int) -> None:
    """Replace the first ``n`` pages of ``writer`` (the body) by ``front``'s, which were printed from the same
    page with the chapters removed: same layout, but links to the chapters were dropped, so each
    new page takes the links of the page it replaces."""
    from pypdf import PdfReader
    from pypdf.generic import NameObject

    new = PdfReader(io.BytesIO(front))
    if len(new.pages) != n:
        raise RuntimeError(f"the contents took {len(new.pages)} pages in the second print, {n} in the first")
    for i, p in enumerate(new.pages):
        writer.insert_page(p, i)
        old = writer.pages[i + 1]
        if "/Annots" in old:
            writer.pages[i][NameObject("/Annots")] = old["/Annots"]
        writer.remove_page(i + 1)


def print_title(meta: dict[str, str], browser: Any) -> bytes:
    """The title page as a one-page PDF without page number, printed in ``browser``."""
    page = browser.new_page()
    page.set_content(title_page_html(meta))
    return page.pdf(**_pdf_options())


def assemble(
    title: bytes, body: PdfReader, front: bytes, chapters: list[Chapter], meta: dict[str, str], out: Path
) -> int:
    """Title page + body with its front matter replaced by ``front`` (the contents with page numbers), with
    outline, page labels and metadata, to ``out``; returns the page count."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import Fit

    writer = PdfWriter(clone_from=body)
    _replace_front(writer, front, chapters[0].first)
    writer.insert_page(PdfReader(io.BytesIO(title)).pages[0], 0)
    n = len(writer.pages)
    writer.set_page_label(0, 0, style="/r")
    writer.set_page_label(1, n - 1, style="/D", start=1)
    writer.add_metadata({"/Title": meta["title"], "/Author": meta["authors"], "/Subject": meta["subtitle"]})
    writer.add_outline_item(title="Title page", page_number=0, fit=Fit.fit())
    writer.add_outline_item(title="Contents", page_number=1, fit=Fit.fit())
    part_item = None
    part_name = None
    for c in chapters:
        if c.part != part_name:
            part_name = c.part
            part_item = writer.add_outline_item(title=c.part, page_number=c.first + 1, fit=Fit.fit())
        item = writer.add_outline_item(title=c.title, page_number=c.first + 1, parent=part_item, fit=Fit.fit())
        for anchor, heading in c.sections:
            if anchor in c.section_pages:
                writer.add_outline_item(
                    title=heading, page_number=c.section_pages[anchor] + 1, parent=item, fit=Fit.fit()
                )
    writer.page_mode = "/UseOutlines"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        writer.write(f)
    return n


def split_chapters(reader: PdfReader, chapters: list[Chapter], folder: Path, meta: dict[str, str]) -> None:
    """One PDF per chapter (its pages of the body ``reader``, with the book's page numbers and its sections as
    outline; the front matter, which :func:`assemble` replaces, comes before the first chapter)."""
    from pypdf import PdfWriter
    from pypdf.generic import Fit

    folder.mkdir(parents=True, exist_ok=True)
    for k, c in enumerate(chapters):
        end = chapters[k + 1].first if k + 1 < len(chapters) else len(reader.pages)
        writer = PdfWriter()
        for i in range(c.first, end):
            writer.add_page(reader.pages[i])
        writer.set_page_label(0, end - c.first - 1, style="/D", start=c.first + 1)
        writer.add_metadata({"/Title": f"{c.title} — {meta['title']}", "/Author": meta["authors"]})
        writer.add_outline_item(title=c.title, page_number=0, fit=Fit.fit())
        for anchor, heading in c.sections:
            if c.first <= c.section_pages.get(anchor, -1) < end:
                writer.add_outline_item(title=heading, page_number=c.section_pages[anchor] - c.first, fit=Fit.fit())
        with (folder / f"{Path(c.doc).name}.pdf").open("wb") as f:
            writer.write(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-build", action="store_true", help="print the existing _build/singlehtml")
    parser.add_argument("--out", type=Path, default=PDF)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    page = single_index() if args.no_build else build_singlehtml()
    t1 = time.perf_counter()
    meta = book_metadata()
    with chromium() as browser:
        body, front, chapters = print_body(page, browser)
        title = print_title(meta, browser)
    t2 = time.perf_counter()
    n = assemble(title, body, front, chapters, meta, args.out)
    split_chapters(body, chapters, args.out.parent / "chapters", meta)
    t3 = time.perf_counter()
    print(
        f"{t1 - t0:6.1f} s  singlehtml build\n{t2 - t1:6.1f} s  print ({len(chapters)} chapters)\n"
        f"{t3 - t2:6.1f} s  outline, title page, one PDF per chapter\n"
        f"PDF: {args.out} ({n} pages, {args.out.stat().st_size / 1e6:.1f} MB); "
        f"chapters in {args.out.parent / 'chapters'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
