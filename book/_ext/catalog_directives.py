"""Sphinx extension: build-time tables from the package itself.

* ``{catalog-table}`` renders the whole equation catalog (appendix), one
  table per chapter in the order of ``_toc.yml``, each under the chapter's
  title linked to the chapter. It is produced at build time, so it can never
  go stale.
* ``{api-reference}`` lists every public function and class of the package
  with its signature and docstring, module by module.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path

import yaml
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _toc_order(srcdir: Path) -> list[str]:
    """The files of ``_toc.yml`` in reading order, without suffix."""
    toc = yaml.safe_load((srcdir / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            files.append(chapter["file"])
            files.extend(s["file"] for s in chapter.get("sections", []))
    return [f.removesuffix(".ipynb").removesuffix(".md") for f in files]


def chapter_title(notebook: Path) -> str:
    """The title of a chapter: the first line of its first Markdown cell, without the leading ``#``."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    first = next(c for c in cells if c["cell_type"] == "markdown")
    source = "".join(first["source"])
    return source.split("\n", 1)[0].lstrip("#").strip()


def inline_nodes(text: str) -> list[nodes.Node]:
    """Text with ``$...$`` inline math as docutils nodes (math typeset by MathJax)."""
    out: list[nodes.Node] = []
    for i, piece in enumerate(text.split("$")):
        if not piece:
            continue
        out.append(nodes.math(piece, piece) if i % 2 else nodes.Text(piece))
    return out


_RST_CODE = re.compile(r"``([^`]+)``|:[a-z]+:`~?([^`]+)`|`([^`]+)`")


def rst_inline_code(text: str) -> list[nodes.Node]:
    """A docstring's text as docutils nodes, its ````code````, ```code``` and ``:role:`target``` as inline code."""
    out: list[nodes.Node] = []
    pos = 0
    for m in _RST_CODE.finditer(text):
        if m.start() > pos:
            out.append(nodes.Text(text[pos : m.start()]))
        code = next(g for g in m.groups() if g is not None)
        out.append(nodes.literal(code, code))
        pos = m.end()
    if pos < len(text):
        out.append(nodes.Text(text[pos:]))
    return out


class CatalogTable(SphinxDirective):
    """The catalog, one table per chapter in the book's reading order.

    Each chapter is a section whose heading is the chapter's title, linked to
    the chapter; its table lists item, title (equations typeset from
    ``attnsurvey.catalog.MATH_TITLES``), implementing objects and tests.
    """

    has_content = False

    def _table(self, rows: list[dict]) -> nodes.table:
        from attnsurvey.catalog import CATALOG_WIDTHS, display_title

        # colwidths-given: Sphinx writes the widths as a <colgroup> (layout.css fixes the layout)
        table = nodes.table(classes=["catalog-table", "colwidths-given"])
        headers = ["item", "what", "implemented by", "tested by"]
        tgroup = nodes.tgroup(cols=len(headers))
        table += tgroup
        for width in CATALOG_WIDTHS:
            tgroup += nodes.colspec(colwidth=width)
        thead = nodes.thead()
        tgroup += thead
        head_row = nodes.row()
        for h in headers:
            head_row += nodes.entry("", nodes.paragraph(text=h))
        thead += head_row
        tbody = nodes.tbody()
        tgroup += tbody
        for e in rows:
            row = nodes.row()
            row += nodes.entry("", nodes.paragraph(text=e["id"]))
            row += nodes.entry("", nodes.paragraph("", "", *inline_nodes(display_title(e))))
            for field in ("implemented_by", "tested_by"):
                entry = nodes.entry()
                for item in e[field]:
                    p = nodes.paragraph()
                    p += nodes.literal(text=item)
                    entry += p
                row += entry
            tbody += row
        return table

    def run(self) -> list[nodes.Node]:
        from attnsurvey.catalog import entries, summary

        srcdir = Path(self.env.srcdir)
        by_chapter: dict[str, list[dict]] = {}
        for e in entries():
            by_chapter.setdefault(e["chapter"].removesuffix(".ipynb"), []).append(e)
        order = _toc_order(srcdir)
        missing = sorted(set(by_chapter) - set(order))
        if missing:
            raise self.error(f"catalog entries name chapters that are not in _toc.yml: {missing}")
        out: list[nodes.Node] = [nodes.literal_block(text=summary())]
        for chapter in (c for c in order if c in by_chapter):
            self.env.note_dependency(str(srcdir / f"{chapter}.ipynb"))
            title = chapter_title(srcdir / f"{chapter}.ipynb")
            section = nodes.section(ids=[nodes.make_id("catalog-" + chapter.split("/")[-1])])
            heading = nodes.title()
            heading += nodes.reference(
                "", title, internal=True, refuri=self.env.app.builder.get_relative_uri(self.env.docname, chapter)
            )
            section += heading
            section += self._table(by_chapter[chapter])
            out.append(section)
        return out


def _public_members(module):
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        yield name, obj


class ApiReference(SphinxDirective):
    """Every public function and class of attnsurvey, with signature and docstring."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        import attnsurvey

        out: list[nodes.Node] = []
        names = ["attnsurvey"] + [m.name for m in pkgutil.walk_packages(attnsurvey.__path__, "attnsurvey.")]
        for modname in sorted(names):
            if modname.endswith("__main__"):
                continue
            module = importlib.import_module(modname)
            members = list(_public_members(module))
            if not members:
                continue
            section = nodes.section(ids=[nodes.make_id("api-" + modname)])
            section += nodes.title(text=modname)
            doc = inspect.getdoc(module)
            if doc:
                section += nodes.paragraph("", "", *rst_inline_code(doc.split("\n\n")[0]))
            for name, obj in members:
                try:
                    sig = str(inspect.signature(obj))
                except (TypeError, ValueError):
                    sig = "(...)"
                kind = "class " if inspect.isclass(obj) else ""
                # Plain text, not highlighted: Pygments put each token of the ~900 signatures in a span of its
                # own (19,000 of the page's 21,500), and the browser test's colour-contrast check reads every
                # one (90 s of axe on this page, 15 s without). Highlighted code is checked on the chapters.
                section += nodes.literal_block(text=f"{kind}{name}{sig}", language="text")
                objdoc = inspect.getdoc(obj) or ""
                if objdoc:  # prose: not lexed as Python either
                    section += nodes.literal_block(text=objdoc, language="text", classes=["api-doc"])
            out.append(section)
        return out


def setup(app: Sphinx) -> dict:
    app.add_directive("catalog-table", CatalogTable)
    app.add_directive("api-reference", ApiReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
