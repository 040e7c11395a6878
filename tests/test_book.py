"""Structure of the book: the TOC, the notebooks and their stored outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from attnsurvey.numeric_env import KERNEL_NAME

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc["parts"]:
        files += [c["file"] for c in part["chapters"]]
    return files


def test_every_chapter_is_in_the_toc_and_every_toc_entry_exists():
    toc = _toc_files()
    chapters_in_toc = {f for f in toc if f.startswith("chapters/")}
    assert chapters_in_toc == {f"chapters/{p.stem}" for p in NOTEBOOKS}
    for f in toc:
        assert (ROOT / f"{f}.ipynb").is_file() or (ROOT / f"{f}.md").is_file(), f


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_outputs_are_stored_and_clean(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == KERNEL_NAME, "execute it with `make execute` (pinned kernel)"
    cells = nb["cells"]
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith(
        "# "
    ), "first cell is the title"
    code = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    counts = [c["execution_count"] for c in code]
    assert all(n is not None for n in counts), "stored outputs missing: run `make execute NB=...`"
    assert counts == sorted(counts), "cells were executed out of order"
    for c in code:
        for out in c.get("outputs", []):
            assert out["output_type"] != "error", f"stored error output in {path.name}"
            if out["output_type"] == "display_data" or out["output_type"] == "execute_result":
                assert "image/svg+xml" not in out.get("data", {}), "figures are stored as PNG, not SVG"


def test_bibliography_parses_and_every_entry_is_complete():
    from pybtex.database import parse_file

    text = (ROOT / "book" / "references.bib").read_text()
    keys = [line.split("{", 1)[1].rstrip(",") for line in text.splitlines() if line.startswith("@")]
    assert len(keys) == len(set(keys)), "duplicate bibliography keys"
    db = parse_file(str(ROOT / "book" / "references.bib"))
    assert len(db.entries) == len(keys)
    for key, entry in db.entries.items():
        assert "title" in entry.fields and "year" in entry.fields and entry.persons.get("author"), key


def test_every_bibliography_entry_is_cited():
    """The Bibliography page says it lists the works cited in the book (it uses ``:all:``)."""
    import re

    text = (ROOT / "book" / "references.bib").read_text()
    keys = {line.split("{", 1)[1].rstrip(",") for line in text.splitlines() if line.startswith("@")}
    pages = [*(ROOT / "chapters").glob("*.ipynb"), *(ROOT / "book").glob("*.ipynb"), *(ROOT / "book").glob("*.md")]
    cited: set[str] = set()
    for page in pages:
        for keylist in re.findall(r"\{cite(?::[a-z]+)?\}`([^`]+)`", page.read_text(encoding="utf-8")):
            cited.update(k.strip() for k in keylist.split(","))
    assert not cited - keys, f"cited but not in references.bib: {sorted(cited - keys)}"
    assert not keys - cited, f"in references.bib but cited nowhere: {sorted(keys - cited)}"


def test_glossary_terms_are_separated_unique_and_alphabetical_under_their_letter():
    text = (ROOT / "book" / "glossary.md").read_text()
    sections = re.findall(r"^## (\S+)\n\n```\{glossary\}\n(.*?)\n```", text, flags=re.M | re.S)
    assert sections and len(sections) == text.count("```{glossary}"), "each glossary block sits under a letter heading"
    all_terms: list[str] = []
    for letter, body in sections:
        block = body.split("\n")
        terms = [line for line in block if line and not line.startswith(" ")]
        for i, line in enumerate(block):
            if line and not line.startswith(" ") and i > 0:
                assert block[i - 1] == "", f"glossary term {line!r} must follow a blank line"
        assert all(t[0].upper() == letter for t in terms), f"a term under {letter} starts with another letter: {terms}"
        all_terms += terms
    keys = [re.sub(r"[^a-z0-9 ]", "", t.lower()) for t in all_terms]
    assert keys == sorted(keys), "glossary terms are not in alphabetical order"
    assert len(all_terms) == len(set(all_terms)), "a glossary term is defined twice"
