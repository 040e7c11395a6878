"""Write the student version of chapter notebooks (no solutions, no outputs): ``make student``.

    python scripts/student.py                         # every chapter -> _build/student/
    python scripts/student.py chapters/ch02_*.ipynb --out /tmp/student

The chapters are authored in nbgrader's format (see CONTRIBUTING/CONVENTIONS:
"Exercises"). This script applies the steps of nbgrader's ``generate_assignment``
that matter for a notebook on its own, as nbgrader documents them, without a
course directory or gradebook database (nbgrader itself needs a Jupyter server
stack that the book's environment does not carry):

* ClearSolutions: in a cell with ``metadata.nbgrader.solution = true`` the lines
  from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` become the stub
  ``# YOUR CODE HERE`` + ``raise NotImplementedError()`` (code) or
  ``YOUR ANSWER HERE`` (markdown); a solution cell without the delimiters is
  replaced whole. A solution region in a cell not marked as a solution is an
  error, as in nbgrader.
* ClearHiddenTests: ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS`` regions
  of test cells are removed (delimiters included, and the blank lines the removal
  leaves at the end of the cell); such a region outside a test cell is an error.
  The autograder (``scripts/autograde.py``) restores the full test cell from the
  released version, so the hidden tests run when a submission is graded.
* ClearOutput: outputs and execution counts are cleared; stored widget state is
  dropped.
* LockCells: test cells (``grade: true``) and ``locked`` cells are made
  non-editable and non-deletable, solution cells non-deletable.

On the fixture ``tests/fixtures/nbgrader_exercises.ipynb`` the code cells come
out identical to what nbgrader 0.9.6's ClearSolutions, ClearHiddenTests,
ClearOutput and LockCells preprocessors produce (checked by hand in a separate
environment).

Two steps are the book's own: a markdown solution written as a MyST dropdown
(``:::{admonition} Solution`` ... ``:::``) or a ``{solution}`` directive is
removed, and a solution cell loses its ``hide-input`` tag (the stub is meant to
be seen).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CODE_STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]
TEXT_STUB = ["YOUR ANSWER HERE"]
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_FENCE_OPEN = re.compile(r"^\s*(?P<fence>:{3,}|`{3,})\s*\{(?:admonition\}\s*solution\b|solution\})", re.IGNORECASE)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_solution(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_grade(cell) -> bool:
    return bool(nbgrader_meta(cell).get("grade"))


def _replace_regions(lines: list[str], begin: str, end: str, stub: list[str] | None) -> tuple[list[str], bool]:
    """Replace each begin..end region (delimiter lines included) by ``stub`` at the region's indent."""
    out: list[str] = []
    inside, found = False, False
    for line in lines:
        if line.strip() == begin:
            if inside:
                raise ValueError(f"nested {begin!r}")
            inside, found = True, True
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + s for s in stub or [])
        elif line.strip() == end:
            if not inside:
                raise ValueError(f"{end!r} without {begin!r}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{begin!r} without {end!r}")
    return out, found


def strip_hidden_tests(text: str) -> str:
    """``text`` without its hidden-test regions (delimiter lines included) and without the blank lines
    a removal leaves at its end; raises ``ValueError`` on unbalanced delimiters."""
    lines, found = _replace_regions(text.split("\n"), BEGIN_HIDDEN, END_HIDDEN, None)
    while found and lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def remove_solution_blocks(text: str) -> str:
    """Drop MyST ``{admonition} Solution`` / ``{solution}`` blocks (fence lines included)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        fence = m.group("fence")
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        if j == len(lines):
            raise ValueError(f"solution block opened by {lines[i]!r} is never closed")
        i = j + 1
        while i < len(lines) and not lines[i].strip() and (not out or not out[-1].strip()):
            i += 1  # leave no blank line at the top, nor two where the block was
    return "\n".join(out)


def student_cell(cell):
    """The student version of one cell (a new cell; the argument is not modified)."""
    cell = copy.deepcopy(cell)
    lines = cell.source.split("\n")
    stub = CODE_STUB if cell.cell_type == "code" else TEXT_STUB
    lines, had_region = _replace_regions(lines, BEGIN, END, stub)
    if had_region and not is_solution(cell):
        raise ValueError(f"solution region in a cell not marked as an nbgrader solution: {cell.source[:80]!r}")
    if is_solution(cell) and not had_region:
        lines = list(stub)
    if is_grade(cell):
        lines = strip_hidden_tests("\n".join(lines)).split("\n")
    elif any(line.strip() in (BEGIN_HIDDEN, END_HIDDEN) for line in lines):
        raise ValueError(f"hidden tests in a cell that is not an nbgrader test cell: {cell.source[:80]!r}")
    source = "\n".join(lines)
    if cell.cell_type == "markdown":
        source = remove_solution_blocks(source)
    cell.source = source
    meta = cell.setdefault("metadata", {})
    if is_solution(cell) and "tags" in meta:
        meta["tags"] = [t for t in meta["tags"] if t != "hide-input"]
        if not meta["tags"]:
            del meta["tags"]
    if is_grade(cell) or nbgrader_meta(cell).get("locked"):
        meta["editable"] = False
        meta["deletable"] = False
    elif is_solution(cell):
        meta["deletable"] = False
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
        meta.pop("execution", None)
    return cell


def student_notebook(nb):
    """The student version of a notebook (new object)."""
    out = copy.deepcopy(nb)
    out.cells = [student_cell(c) for c in nb.cells]
    out.metadata.pop("widgets", None)
    return out


def has_nbgrader_cells(nb) -> bool:
    return any(nbgrader_meta(c) for c in nb.cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "student")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    args.out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        student = student_notebook(nb)
        nbformat.validate(student)
        target = args.out / path.name
        nbformat.write(student, target)
        n = sum(is_solution(c) for c in nb.cells)
        print(f"{target}  ({n} solution cells cleared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
