"""Sphinx extension: the book's HTML does not show nbgrader's hidden tests.

A test cell of an exercise may end with an instructor-only region::

    ex.check_something(answer)
    ### BEGIN HIDDEN TESTS
    ex.hidden_check_something(answer)
    ### END HIDDEN TESTS

``scripts/student.py`` removes the region from the student version and ``scripts/autograde.py`` puts it
back before grading. The book shows the chapter notebooks themselves, so without this extension a
reader would see the region. On ``doctree-read`` every literal block (a code cell's input, as myst-nb
writes it) loses the region, delimiters included, by the same rule as the student version. The
notebook behind the page's download button, and the package's checker modules, still hold the hidden
tests: this hides them from the page, not from a reader of the sources.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from docutils import nodes

_spec = importlib.util.spec_from_file_location(
    "_student_for_book", Path(__file__).resolve().parents[2] / "scripts" / "student.py"
)
_student = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(_student)  # type: ignore[union-attr]
#: the rule of the student version (``scripts/student.py``), so book and student version hide the same lines
strip_hidden_tests = _student.strip_hidden_tests
BEGIN = _student.BEGIN_HIDDEN


def hide_hidden_tests(app: Any, doctree: nodes.document) -> None:
    """Remove the hidden-test regions from every literal block of ``doctree`` (in place)."""
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        if BEGIN in text:
            stripped = strip_hidden_tests(text)
            block.children = []
            block += nodes.Text(stripped)
            block.rawsource = stripped


def setup(app: Any) -> dict[str, Any]:
    app.connect("doctree-read", hide_hidden_tests)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
