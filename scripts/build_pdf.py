"""Build the whole book as one PDF, offline: ``make pdf`` -> ``_build/pdf/book.pdf``.

    python scripts/build_pdf.py              # singlehtml build + print with chromium
    python scripts/build_pdf.py --no-build   # print the existing _build/singlehtml

1. ``jupyter-book build . --builder singlehtml``: every page of ``_toc.yml`` in one
   HTML page, with the same extensions as the HTML book (the survey's equation
   numbers, the bibliography, figures, offline MathJax).
2. The page is served from 127.0.0.1 and opened in the Debian chromium; once
   MathJax has typeset everything (its startup promise) and every image has
   loaded, a table of contents is inserted (part
   captions from ``_toc.yml``, chapter titles linked to their pages in the PDF),
   each chapter starts on a new page, and chromium prints it (A4, page numbers,
   PDF outline). Chinese text (the glossary) needs a CJK font: ``fonts-noto-cjk``
   (installed by ``.ci/run``). Widgets are printed as they first appear (each
   notebook's widget state is embedded in the single page by
   ``book/_ext/offline_assets.py``).

No LaTeX is involved. Prints the seconds each step took.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from site_browser import chromium, serve  # noqa: E402

SINGLE = ROOT / "_build" / "singlehtml"
PDF = ROOT / "_build" / "pdf" / "book.pdf"
WAIT_MS = 180_000

PRINT_CSS = """
.bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer,
.bd-footer-article, .prev-next-area, .headerlink, #pst-back-to-top,
.header-article-items, .sidebar-toggle, .bd-search, .skip-link, .copybtn, .onlyprint { display: none !important; }
.bd-main .bd-content .bd-article-container { max-width: 100% !important; }
.bd-page-width, .bd-container__inner { max-width: 100% !important; }
article.bd-article section > h2 { break-before: page; }
#pdf-toc { break-after: page; }
#pdf-toc h2 { break-before: avoid; }
#pdf-toc li { list-style: none; margin: .15em 0; }
#pdf-toc .part { font-weight: bold; margin-top: .8em; }
details.hide > summary { display: none; }
"""

# Every chapter of the toc is a level-2 section of the single page; its title
# links to it. Part captions come from _toc.yml, in the same order.
TOC_JS = """(parts) => {
  const article = document.querySelector('article.bd-article');
  // singlehtml puts each toc page where the root page's toctree is
  const heads = Array.from(article.querySelectorAll('section > h2'));
  const toc = document.createElement('nav');
  toc.id = 'pdf-toc';
  const title = document.createElement('h2');
  title.textContent = 'Contents';
  toc.appendChild(title);
  const list = document.createElement('ul');
  let i = 0;
  for (const [caption, n] of parts) {
    if (caption) {
      const li = document.createElement('li'); li.className = 'part'; li.textContent = caption;
      list.appendChild(li);
    }
    for (let k = 0; k < n && i < heads.length; k++, i++) {
      const h = heads[i], li = document.createElement('li'), a = document.createElement('a');
      a.href = '#' + h.parentElement.id;
      a.textContent = h.textContent.replace(/#$/, '').trim();
      li.appendChild(a); list.appendChild(li);
    }
  }
  toc.appendChild(list);
  const first = article.querySelector('section > h2');
  const intro = first ? first.parentElement : article.firstChild;
  intro.parentElement.insertBefore(toc, intro);
  return heads.length;
}"""


def toc_parts(toc_file: Path = ROOT / "_toc.yml") -> list[tuple[str, int]]:
    """[(part caption, number of chapters)] of ``_toc.yml``, sections counted as chapters."""
    toc = yaml.safe_load(toc_file.read_text())
    parts = []
    for part in toc.get("parts", []):
        n = sum(1 + len(ch.get("sections", [])) for ch in part.get("chapters", []))
        parts.append((part.get("caption", ""), n))
    return parts


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


def print_pdf(page_file: Path, out: Path = PDF) -> int:
    """Print the single page to ``out``; returns the number of chapters found."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with serve(page_file.parent) as url, chromium() as browser:
        page = browser.new_page()
        page.set_default_timeout(WAIT_MS)
        foreign: list[str] = []
        page.on("request", lambda r: foreign.append(r.url) if not r.url.startswith((url, "data:", "blob:")) else None)
        t0 = time.perf_counter()
        page.goto(f"{url}/{page_file.name}", wait_until="load")
        t1 = time.perf_counter()
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
        _wait_for_widgets(page)
        t2 = time.perf_counter()
        page.add_style_tag(content=PRINT_CSS)
        chapters = page.evaluate(TOC_JS, [list(p) for p in toc_parts()])
        page.emulate_media(media="print")
        page.pdf(
            path=str(out),
            format="A4",
            print_background=True,
            outline=True,
            margin={"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
            display_header_footer=True,
            header_template="<span></span>",
            footer_template=(
                "<div style='font-size:8px;width:100%;text-align:center'>"
                "<span class='pageNumber'></span> / <span class='totalPages'></span></div>"
            ),
        )
        print(
            f"{t1 - t0:6.1f} s  load page\n{t2 - t1:6.1f} s  typeset math\n"
            f"{time.perf_counter() - t2:6.1f} s  print to PDF",
            flush=True,
        )
        if foreign:
            raise RuntimeError(f"the single page requested other hosts: {foreign[:5]}")
    return chapters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-build", action="store_true", help="print the existing _build/singlehtml")
    parser.add_argument("--out", type=Path, default=PDF)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    page = single_index() if args.no_build else build_singlehtml()
    t1 = time.perf_counter()
    chapters = print_pdf(page, args.out)
    t2 = time.perf_counter()
    print(
        f"{t1 - t0:6.1f} s  singlehtml build\n{t2 - t1:6.1f} s  print ({chapters} chapters)\n"
        f"PDF: {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
