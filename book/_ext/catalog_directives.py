"""Sphinx extension: build-time tables from the package itself.

* ``{catalog-table}`` renders the whole equation catalog (appendix). It is
  produced at build time, so it can never go stale.
* ``{api-reference}`` lists every public function and class of the package
  with its signature and docstring, module by module.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class CatalogTable(SphinxDirective):
    """Render the catalog as a table: id, title, chapter, implementation, tests."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from attnsurvey.catalog import entries, summary

        rows = entries()
        table = nodes.table(classes=["catalog-table"])
        headers = ["item", "what", "chapter", "implemented by", "tested by"]
        tgroup = nodes.tgroup(cols=len(headers))
        table += tgroup
        for width in (10, 30, 18, 21, 21):
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
            row += nodes.entry("", nodes.paragraph(text=e["title"]))
            chapter = e["chapter"].removesuffix(".ipynb")
            para = nodes.paragraph()
            ref = nodes.reference(
                "",
                chapter.split("/")[-1],
                internal=True,
                refuri=self.env.app.builder.get_relative_uri(self.env.docname, chapter),
            )
            para += ref
            row += nodes.entry("", para)
            for field in ("implemented_by", "tested_by"):
                entry = nodes.entry()
                for item in e[field]:
                    p = nodes.paragraph()
                    p += nodes.literal(text=item)
                    entry += p
                row += entry
            tbody += row
        summary_block = nodes.literal_block(text=summary())
        return [summary_block, table]


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
                section += nodes.paragraph(text=doc.split("\n\n")[0])
            for name, obj in members:
                try:
                    sig = str(inspect.signature(obj))
                except (TypeError, ValueError):
                    sig = "(...)"
                kind = "class " if inspect.isclass(obj) else ""
                section += nodes.literal_block(text=f"{kind}{name}{sig}", language="python")
                objdoc = inspect.getdoc(obj) or ""
                if objdoc:
                    section += nodes.literal_block(text=objdoc, classes=["api-doc"])
            out.append(section)
        return out


def setup(app: Sphinx) -> dict:
    app.add_directive("catalog-table", CatalogTable)
    app.add_directive("api-reference", ApiReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
