"""Sphinx extension: the book's version and a "How to cite" box, from their one source each.

The version shown is the installed ``attnsurvey`` package's (``importlib.metadata``,
which reads ``pyproject.toml``); the citation is rendered from ``CITATION.cff``,
the file GitHub and reference managers read. Neither is typed into a page, so
they cannot drift apart. ``tests/test_book_meta.py`` checks that the package,
``pyproject.toml`` and ``CITATION.cff`` agree on the version.

Use on a page::

    ```{book-cite}
    ```
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
CFF = ROOT / "CITATION.cff"


def package_version() -> str:
    """The installed package's version (the one ``pip`` and ``attnsurvey.__version__`` report)."""
    return version("attnsurvey")


def citation(cff_path: Path = CFF) -> dict[str, Any]:
    """The fields of ``CITATION.cff`` the box shows: title, authors, version, year, licence, bibtex."""
    cff = yaml.safe_load(cff_path.read_text(encoding="utf-8"))
    authors = [
        a.get("name") or f"{a.get('given-names', '')} {a.get('family-names', '')}".strip() for a in cff["authors"]
    ]
    year = str(cff["date-released"])[:4]
    key = "attnsurvey" + year
    bibtex = "\n".join(
        [
            f"@software{{{key},",
            f"  title   = {{{cff['title']}}},",
            f"  author  = {{{{{' and '.join(authors)}}}}},",
            f"  version = {{{cff['version']}}},",
            f"  year    = {{{year}}},",
            f"  license = {{{cff['license']}}},",
            "}",
        ]
    )
    return {
        "title": cff["title"],
        "authors": authors,
        "version": str(cff["version"]),
        "year": year,
        "license": cff["license"],
        "message": cff.get("message", ""),
        "bibtex": bibtex,
    }


class BookCite(SphinxDirective):
    """A note with the version and the citation (plain text and BibTeX)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(CFF))
        c = citation()
        box = nodes.admonition(classes=["note", "book-cite"])
        box += nodes.title(text="Version and how to cite")
        box += nodes.paragraph(
            text=f"This is version {package_version()} of the book and its attnsurvey package "
            f"(released {c['year']}; code {c['license']}, text CC BY 4.0). {c['message']}"
        )
        box += nodes.paragraph(text=f"{', '.join(c['authors'])} ({c['year']}). {c['title']}. Version {c['version']}.")
        box += nodes.literal_block(c["bibtex"], c["bibtex"], language="bibtex")
        return [box]


def setup(app: Sphinx) -> dict:
    app.add_directive("book-cite", BookCite)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
