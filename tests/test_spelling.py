"""The spelling check (``tools/spelling.py``, part of ``make lint``) finds what it is there to find."""

from __future__ import annotations

import json

from tools import spelling

# Misspellings built from parts, so that this file itself stays clean.
RECEIVE_WRONG = "rec" + "ieve"
THE_WRONG = "t" + "eh"


def _notebook(path, markdown: str, code: str, output: str) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": markdown},
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": 1,
            "source": code,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": output}],
        },
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_a_misspelling_in_a_cell_source_is_reported_with_its_cell_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(spelling, "ROOT", tmp_path)
    nb = tmp_path / "chapter.ipynb"
    _notebook(nb, "An ordinary sentence.\nThe weights " + RECEIVE_WRONG + " a mask.", "x = 1  # fine", "out")
    assert spelling.notebook_findings([nb]) == [f"chapter.ipynb, cell 0, line 2: {RECEIVE_WRONG} ==> receive"]


def test_outputs_are_not_checked_and_the_survey_symbols_are_accepted(tmp_path, monkeypatch):
    monkeypatch.setattr(spelling, "ROOT", tmp_path)
    nb = tmp_path / "chapter.ipynb"
    # an output that holds a "misspelling" (base64 images do, by chance) and the project's accepted words
    _notebook(nb, "The AER of $3nd$ reads.", "te = abl = 0", "iVBORw0 " + RECEIVE_WRONG)
    assert spelling.notebook_findings([nb]) == []


def test_a_misspelling_in_a_text_file_is_reported(tmp_path):
    (tmp_path / "page.md").write_text(f"Attention is {THE_WRONG} answer.\n")
    assert spelling.codespell(["page.md"], tmp_path) == [f"page.md:1: {THE_WRONG} ==> the"]
