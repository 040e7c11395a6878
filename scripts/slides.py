"""One offline reveal.js deck per chapter: ``make slides`` -> ``_build/slides/<chapter>.html``.

    python scripts/slides.py                       # every chapter of _toc.yml
    python scripts/slides.py chapters/ch01_introduction.ipynb

A deck is made from the chapter notebook itself: cells carry slide tags in their
metadata, and each tag names what its cell gives to the deck (nothing is written twice):

=====================  ===============================================================
tag                    slides
=====================  ===============================================================
``slide-objectives``   the "Learning objectives" part of a markdown cell
``slide-equations``    the display equations of a markdown cell, one slide per heading
                       (at most ``EQUATIONS_PER_SLIDE`` each), with the numbers the book
                       shows: (k) for the survey's Eq. k, (R7), (N2), (a), ...
``slide-figure``       the images a code cell printed (never its code), under the
                       heading they sit in
``slide-summary``      the "Summary" part of a markdown cell (the takeaways)
=====================  ===============================================================

A title slide (the notebook's first heading) opens each deck. Nothing after a chapter's
"Exercises" heading is shown. The MyST roles of the book become plain text: a term its
words, a citation "Author (Year)", an equation reference its number.

The decks are written with nbconvert's reveal.js exporter and are offline: reveal.js
(``book/_vendor/slides``) and MathJax 3 (``book/_vendor/site/vendor/mathjax``), both
fetched from npm by ``make assets``, are copied into ``_build/slides/vendor``; no
jQuery, require.js or other script from a CDN is loaded.
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_build" / "slides"
REVEAL = ROOT / "book" / "_vendor" / "slides" / "reveal.js"
MATHJAX = ROOT / "book" / "_vendor" / "site" / "vendor" / "mathjax"
BIB = ROOT / "book" / "references.bib"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from equation_numbers import display_numbers  # noqa: E402

TAGS = ("slide-objectives", "slide-equations", "slide-figure", "slide-summary")
EQUATIONS_PER_SLIDE = 3
IMAGE_TYPES = ("image/png", "image/svg+xml", "image/jpeg")

HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$", re.M)
# a display equation: $$ ... $$ with an optional (label) after the closing $$
DISPLAY = re.compile(r"^\$\$\s*\n?(?P<body>.*?)\n?\s*\$\$(?:[ \t]*\((?P<label>[^)\s]+)\))?[ \t]*$", re.M | re.S)
ROLE = re.compile(r"\{(?P<role>[a-z:]+)\}`(?P<text>[^`]*)`")

TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{# offline: no jQuery, require.js or mermaid from a CDN; MathJax 3 and reveal.js from ./vendor #}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true, tags: 'none'},
  options: {ignoreHtmlClass: 'tex2jax_ignore', processHtmlClass: 'tex2jax_process'}
};
</script>
<link rel="icon" href="data:,">
<script id="MathJax-script" src="{{ resources.mathjax_url }}"></script>
<style>
.reveal .slides section { text-align: left; }
.reveal h1, .reveal h2 { text-transform: none !important; }
.reveal h1 { font-size: 64px !important; margin-top: 160px !important; }
.reveal h2 { font-size: 44px !important; margin-bottom: 16px !important; }
.reveal .slides p, .reveal .slides li { font-size: 30px !important; line-height: 1.4 !important; }
.reveal .slides code { font-size: 26px !important; }
.reveal ol, .reveal ul { display: block; margin-left: 1.2em; }
.reveal .jp-RenderedImage { text-align: center; }
.reveal .jp-RenderedImage img { height: 540px; width: auto; max-width: 1180px; object-fit: contain; }
.reveal mjx-container[display="true"] { font-size: 160% !important; margin: .5em 0 !important; }
.reveal .deck-subtitle { font-size: 30px !important; color: #555; }
</style>
{%- endblock html_head_js_mathjax -%}
{% block footer_js %}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script src="{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"></script>
<script>
// a slide whose formulas or text do not fit is set smaller (measured once it is shown)
function fit(slide) {
  if (!slide) return;
  for (const m of slide.querySelectorAll('mjx-container[display="true"]')) {
    const need = () => Math.max(m.scrollWidth, ...Array.from(m.querySelectorAll('mjx-math, mjx-mtable, mjx-itable')).map(e => e.scrollWidth));
    const room = slide.clientWidth * 0.96;  // a formula's box grows with it: compare with the slide
    for (let k = 0; k < 4 && need() > room + 1; k++) {
      m.style.setProperty('font-size', parseFloat(getComputedStyle(m).fontSize) * room / need() * 0.98 + 'px', 'important');
    }
  }
  const room = Reveal.getConfig().height - 30;
  if (!slide.style.zoom && slide.scrollHeight > room) slide.style.zoom = (room / slide.scrollHeight).toFixed(3);
}
Reveal.initialize({controls: true, progress: true, hash: true, slideNumber: 'c/t', center: false,
                   transition: 'none', width: 1280, height: 720, plugins: [RevealNotes]});
Reveal.on('ready', e => MathJax.startup.promise.then(() => fit(e.currentSlide)));
Reveal.on('slidechanged', e => MathJax.startup.promise.then(() => fit(e.currentSlide)));
</script>
{% endblock footer_js %}
"""


def chapters(toc_file: Path = ROOT / "_toc.yml") -> list[Path]:
    """The chapter notebooks of ``_toc.yml`` (``chapters/*.ipynb``), in reading order."""
    toc = yaml.safe_load(toc_file.read_text())
    out = []
    for part in toc.get("parts", []):
        for ch in part.get("chapters", []):
            for f in [ch["file"], *(s["file"] for s in ch.get("sections", []))]:
                path = ROOT / (f.removesuffix(".ipynb") + ".ipynb")
                if f.startswith("chapters/") and path.is_file():
                    out.append(path)
    return out


def _citations() -> dict[str, tuple[str, str]]:
    """{bibtex key: (author label, year)} of ``book/references.bib``."""
    from pybtex.database import parse_file

    out = {}
    for key, entry in parse_file(str(BIB)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [" ".join(p.last_names) for p in people]
        label = (
            names[0] if len(names) == 1 else f"{names[0]} and {names[1]}" if len(names) == 2 else f"{names[0]} et al."
        )
        out[key] = (re.sub(r"[{}]", "", label), entry.fields.get("year", ""))
    return out


def plain_roles(text: str, numbers: dict[str, str], cites: dict[str, tuple[str, str]]) -> str:
    """MyST roles as the slides show them: {term}, {doc}, {ref}: their text; {eq}: the equation's
    number; {cite:t}: Author (Year); {cite:p}: (Author Year; ...)."""

    def one(m: re.Match) -> str:
        role, body = m["role"], m["text"]
        shown = re.match(r"^(.*?)\s*<([^>]+)>$", body, re.S)
        if role == "eq":
            return f"({numbers.get(body, body)})"
        if role.startswith("cite"):
            keys = [k.strip() for k in body.split(",")]
            found = [cites.get(k, (k, "")) for k in keys]
            if role in ("cite:t", "cite:ts"):
                return "; ".join(f"{a} ({y})" for a, y in found)
            return "(" + "; ".join(f"{a} {y}".strip() for a, y in found) + ")"
        return shown[1] if shown else body

    return ROLE.sub(one, text)


def equation_numbers(nb) -> dict[str, str]:
    """{label: shown number} of the notebook's labelled display equations, as the book numbers them."""
    labels = [
        m["label"] for c in nb.cells if c.cell_type == "markdown" for m in DISPLAY.finditer(c.source) if m["label"]
    ]
    return display_numbers(labels)


def before_exercises(source: str) -> str:
    """The part of a cell before a chapter's "Exercises" heading."""
    m = re.search(r"^#{1,3}\s+Exercises\b", source, re.M)
    return source[: m.start()] if m else source


def section(source: str, name: str) -> str:
    """The part of ``source`` from the heading or bold lead-in naming ``name`` to the next heading."""
    m = re.search(rf"^(?:#+\s+{name}\b.*|\*\*{name}\b[^\n]*)$", source, re.M | re.I)
    if not m:
        return ""
    rest = source[m.end() :]
    lead = re.sub(r"^\*\*[^*]+\*\*\s*", "", m.group(0)) if m.group(0).startswith("**") else ""
    nxt = HEADING.search(rest)
    return (lead + rest[: nxt.start()] if nxt else lead + rest).strip()


def _slide(source: str, kind: str = "slide") -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(source)
    cell.metadata["slideshow"] = {"slide_type": kind}
    return cell


def _equation(m: re.Match, numbers: dict[str, str]) -> str:
    body = m["body"].strip()
    label = m["label"]
    tag = f" \\tag{{{numbers[label]}}}" if label and label in numbers else ""
    return f"$$\n{body}{tag}\n$$"


def deck(nb) -> nbformat.NotebookNode:
    """The slides notebook of a chapter notebook (its tagged cells, cut into slides)."""
    numbers = equation_numbers(nb)
    cites = _citations()
    cells = [c for c in nb.cells]
    title = next((m[2] for c in cells if c.cell_type == "markdown" for m in HEADING.finditer(c.source)), "Slides")
    out = [
        _slide(
            f"# {plain_roles(title, numbers, cites)}\n\n<p class='deck-subtitle'>Attention in Deep Learning — a runnable survey</p>"
        )
    ]
    heading = title
    exercises = False
    for cell in cells:
        tags = set(cell.metadata.get("tags", []))
        source = cell.source if cell.cell_type == "markdown" else ""
        if exercises:
            break
        if re.search(r"^#{1,3}\s+Exercises\b", source, re.M):
            exercises = True
        source = before_exercises(source)
        if "slide-objectives" in tags:
            text = section(source, "Learning objectives")
            if text:
                out.append(_slide("## Learning objectives\n\n" + plain_roles(text, numbers, cites)))
        if "slide-equations" in tags:
            # one slide per heading that has display equations under it
            pieces = HEADING.split(source)
            chunks = [(heading, pieces[0])] + [(pieces[i + 1], pieces[i + 2]) for i in range(1, len(pieces), 3)]
            for name, text in chunks:
                eqs = [_equation(m, numbers) for m in DISPLAY.finditer(text)]
                for k in range(0, len(eqs), EQUATIONS_PER_SLIDE):
                    more = " (continued)" if k else ""
                    shown = "\n\n".join(eqs[k : k + EQUATIONS_PER_SLIDE])
                    out.append(_slide(f"## {plain_roles(name, numbers, cites)}{more}\n\n{shown}"))
        if "slide-figure" in tags and cell.cell_type == "code":
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                image = next((t for t in IMAGE_TYPES if t in data), None)
                if image:
                    out.append(_slide(f"## {plain_roles(heading, numbers, cites)}"))
                    fig = nbformat.v4.new_code_cell("")
                    fig.outputs = [nbformat.v4.new_output("display_data", data={image: data[image]})]
                    fig.metadata["slideshow"] = {"slide_type": "-"}
                    out.append(fig)
        if "slide-summary" in tags:
            text = section(source, "Summary")
            if text:
                out.append(_slide("## Summary\n\n" + plain_roles(text, numbers, cites)))
        found = [m[2] for m in HEADING.finditer(source) if len(m[1]) >= 2]
        if found:
            heading = found[-1]
    slides = nbformat.v4.new_notebook(cells=out)
    slides.metadata = {k: copy.deepcopy(v) for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    slides.metadata["title"] = plain_roles(title, numbers, cites)
    return slides


def exporter():
    """nbconvert's reveal.js exporter, set up for offline decks (code never shown)."""
    from jinja2 import DictLoader
    from nbconvert.exporters import SlidesExporter

    return SlidesExporter(
        template_file="offline_deck.html.j2",
        extra_loaders=[DictLoader({"offline_deck.html.j2": TEMPLATE})],
        reveal_url_prefix="vendor/reveal.js",
        mathjax_url="vendor/mathjax/tex-chtml.js",
        exclude_input=True,
        exclude_anchor_links=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        reveal_theme="white",
    )


def copy_vendor(out: Path) -> None:
    """reveal.js and MathJax next to the decks (``make assets`` fetches both from npm)."""
    for src, name in ((REVEAL, "reveal.js"), (MATHJAX, "mathjax")):
        if not src.is_dir():
            raise FileNotFoundError(f"{src} missing: run `make assets` (needs npm)")
        dest = out / "vendor" / name
        if not dest.is_dir():
            shutil.copytree(src, dest)


def build(notebooks: list[Path], out: Path = OUT) -> list[Path]:
    """Write one deck per notebook into ``out``; returns the deck files."""
    out.mkdir(parents=True, exist_ok=True)
    copy_vendor(out)
    exp = exporter()
    written = []
    for path in notebooks:
        slides = deck(nbformat.read(path, as_version=4))
        body, _ = exp.from_notebook_node(slides, resources={"metadata": {"name": path.stem}})
        target = out / f"{path.stem}.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
        n = sum(1 for c in slides.cells if c.metadata["slideshow"]["slide_type"] == "slide")
        print(f"{target.name}: {n} slides", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapter notebooks (default: every chapter)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    written = build([p.resolve() for p in args.notebooks] or chapters(), args.out)
    print(f"{len(written)} decks in {args.out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
