"""The landing page's version and citation come from the package and CITATION.cff, and they agree."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

import attnsurvey

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import book_meta  # noqa: E402


def test_package_pyproject_and_citation_agree_on_the_version():
    pyproject = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert pyproject is not None
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert attnsurvey.__version__ == pyproject.group(1) == str(cff["version"]) == book_meta.package_version()


def test_the_citation_is_rendered_from_the_cff_file(tmp_path):
    cff = tmp_path / "CITATION.cff"
    cff.write_text(
        "cff-version: 1.2.0\nmessage: Cite it.\ntitle: A Book\nauthors:\n  - family-names: Doe\n    given-names: Jane\n"
        "  - name: The Team\nversion: 9.9.9\ndate-released: 2031-02-03\nlicense: MIT\n"
    )
    c = book_meta.citation(cff)
    assert c["authors"] == ["Jane Doe", "The Team"]
    assert (c["version"], c["year"], c["license"]) == ("9.9.9", "2031", "MIT")
    assert "author  = {{Jane Doe and The Team}}" in c["bibtex"] and "version = {9.9.9}" in c["bibtex"]


def test_the_landing_page_and_the_errata_page_use_them():
    index = (ROOT / "book" / "index.md").read_text()
    assert "```{book-cite}" in index
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert "book/errata" in files
