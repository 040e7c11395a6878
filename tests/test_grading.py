"""Exercises in nbgrader format: the student version and the autograder.

On the fixture ``tests/fixtures/nbgrader_exercises.ipynb`` and on every chapter
that has nbgrader cells: the student version (``scripts/student.py``, what
``make student`` writes) contains no solution - no ``### BEGIN SOLUTION``, none
of the solution's code lines, no hidden tests, no dropdown solution block, no
outputs - and keeps every test cell; autograding (``scripts/autograde.py``) the
instructor version gives full marks and the blank student version zero.

Grading a submission, on the fixture ``tests/fixtures/nbgrader_checker.ipynb`` whose test cells
call a checker module with hidden tests (``tests/fixtures/grading_checks.py``) and on one real chapter
(ch06_1_decoding): a tampered submission earns nothing for what it tampered with (rewritten, deleted or
renamed test cell, changed setup cell, answers that patch or swap the checker, hide errors, rewrite later
cells, exit or kill the kernel); a hidden test fails an answer that passes the visible check; each test
cell's message reaches the report and the offline feedback page; the book hides hidden tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "nbgrader_exercises.ipynb"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


student = _load("student")
autograde = _load("autograde")
feedback = _load("feedback")

GRADED_CHAPTERS = [
    p for p in sorted((ROOT / "chapters").glob("*.ipynb")) if student.has_nbgrader_cells(nbformat.read(p, as_version=4))
]


def _split_lines(nb) -> tuple[list[str], set[str]]:
    """Non-blank lines inside solution and hidden-test regions of the instructor version, and
    every line outside them (the scaffold a student also sees, in any cell), stripped."""
    found: list[str] = []
    outside: set[str] = set()
    inside = False
    for cell in nb.cells:
        for line in cell.source.split("\n"):
            s = line.strip()
            if s in (student.BEGIN, student.BEGIN_HIDDEN):
                inside = True
            elif s in (student.END, student.END_HIDDEN):
                inside = False
            elif inside and s and not s.startswith("#"):
                found.append(s)
            elif not inside:
                outside.add(s)
    return found, outside


def _assert_no_solution(instructor, stud) -> None:
    text = "\n".join(c.source for c in stud.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "{admonition} Solution"):
        assert marker not in text, f"student version still contains {marker!r}"
    solution, shared = _split_lines(instructor)
    # a solution line that also appears outside every solution region (the scaffold around
    # it, e.g. ``with torch.no_grad():``) gives nothing away
    leaked = [line for line in solution if line in text and line not in shared]
    assert not leaked, f"solution lines left in the student version: {leaked[:5]}"
    assert all(not c.get("outputs") for c in stud.cells if c.cell_type == "code"), "outputs not cleared"
    assert "widgets" not in stud.metadata
    tests_i = [c.metadata["nbgrader"]["grade_id"] for c in instructor.cells if student.is_grade(c)]
    tests_s = [c.metadata["nbgrader"]["grade_id"] for c in stud.cells if student.is_grade(c)]
    assert tests_s == tests_i, "test cells must survive"
    for c in stud.cells:
        if student.is_solution(c) and c.cell_type == "code":
            assert "raise NotImplementedError()" in c.source
            assert "hide-input" not in c.metadata.get("tags", [])


def test_fixture_student_version_has_no_solution(tmp_path):
    instructor = nbformat.read(FIXTURE, as_version=4)
    assert student.main([str(FIXTURE), "--out", str(tmp_path)]) == 0
    stud = nbformat.read(tmp_path / FIXTURE.name, as_version=4)
    _assert_no_solution(instructor, stud)
    text = "\n".join(c.source for c in stud.cells)
    assert "SECRET_DERIVATION" not in text and "hidden-test-line" not in text
    assert "### Exercise 2" in text, "the text around a removed solution block stays"
    assert stud.cells[6].source == "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert stud.cells[4].metadata["editable"] is False and stud.cells[4].metadata["deletable"] is False


def test_solution_region_outside_a_solution_cell_is_an_error():
    cell = nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")
    with pytest.raises(ValueError, match="not marked as an nbgrader solution"):
        student.student_cell(cell)


@pytest.mark.parametrize(
    "text",
    [
        ":::{admonition} Solution\n:class: dropdown\nsecret\n:::\nkept",
        "::::{admonition} Solution to (a)\n:::{math}\nsecret\n:::\n::::\nkept",
        "```{solution} ex-1\nsecret\n```\nkept",
    ],
)
def test_markdown_solution_blocks_are_removed(text):
    assert student.remove_solution_blocks(text) == "kept"


def test_unclosed_solution_block_is_an_error():
    with pytest.raises(ValueError, match="never closed"):
        student.remove_solution_blocks(":::{admonition} Solution\nsecret")


def test_fixture_autograde_full_marks_and_zero(tmp_path):
    student.main([str(FIXTURE), "--out", str(tmp_path)])
    full = autograde.autograde(FIXTURE, kernel_name="python3")
    blank = autograde.autograde(tmp_path / FIXTURE.name, kernel_name="python3", source=FIXTURE)
    assert (full.score, full.max_score) == (3, 3)
    assert (blank.score, blank.max_score) == (0, 3)


def test_autograde_gives_partial_marks(tmp_path):
    nb = student.student_notebook(nbformat.read(FIXTURE, as_version=4))
    nb.cells[6].source = "def double(x):\n    return x + x"  # exercise 2 answered, exercise 1 blank
    path = tmp_path / "partial.ipynb"
    nbformat.write(nb, path)
    report = autograde.autograde(path, kernel_name="python3", source=FIXTURE)
    assert [(g.grade_id, g.points) for g in report.grades] == [("fixture-ex1-test", 0), ("fixture-ex2-test", 2)]


@pytest.mark.parametrize("chapter", GRADED_CHAPTERS, ids=lambda p: p.stem)
def test_chapter_student_version_has_no_solution(chapter, tmp_path):
    instructor = nbformat.read(chapter, as_version=4)
    student.main([str(chapter), "--out", str(tmp_path)])
    _assert_no_solution(instructor, nbformat.read(tmp_path / chapter.name, as_version=4))


#: Chapters whose instructor and student versions are executed and graded in every
#: ``make test`` (two executions each, so the cheapest graded chapters by their stored
#: execution times: 3.4, 4.4 and 4.7 s; chapter 4.1, 13.6 s, was one until it outgrew them); set
#: ``ATTNSURVEY_GRADE_ALL=1`` (``make test-grading``) to grade every chapter this way.
#: For all chapters, nbval re-executes the instructor version and compares the
#: test cells' stored outputs, which ``test_chapter_test_cells_pass_in_the_stored_run``
#: requires to be passing confirmations: that is full marks without a second run (what the
#: sample adds: the guard's restores before each test cell leave a right answer passing, and
#: the blank student version scores zero).
SAMPLE = {"ch03_taxonomy", "ch03_1_3_feature_representations", "ch06_5_latent_and_shared_caches"}
GRADE_ALL = os.environ.get("ATTNSURVEY_GRADE_ALL", "") == "1"
AUTOGRADED = [p for p in GRADED_CHAPTERS if GRADE_ALL or p.stem in SAMPLE]


@pytest.mark.parametrize("chapter", GRADED_CHAPTERS, ids=lambda p: p.stem)
def test_chapter_test_cells_pass_in_the_stored_run(chapter):
    nb = nbformat.read(chapter, as_version=4)
    tests = [c for c in nb.cells if student.is_grade(c) and c.cell_type == "code"]
    assert tests, "a graded chapter without test cells"
    for c in tests:
        gid = c.metadata["nbgrader"]["grade_id"]
        assert c.get("outputs"), f"{gid}: no stored output (execute the chapter)"
        assert all(o["output_type"] != "error" for o in c.outputs), f"{gid}: the stored run fails its test"


def test_sample_of_autograded_chapters_exists():
    assert {p.stem for p in GRADED_CHAPTERS} >= SAMPLE


@pytest.mark.parametrize("chapter", AUTOGRADED, ids=lambda p: p.stem)
def test_chapter_autograde_full_marks_and_zero(chapter, tmp_path):
    student.main([str(chapter), "--out", str(tmp_path)])
    full = autograde.autograde(chapter)
    blank = autograde.autograde(tmp_path / chapter.name, cwd=chapter.parent)
    assert full.max_score > 0
    assert full.score == full.max_score, [g for g in full.grades if g.points < g.max_points]
    assert blank.score == 0, [g for g in blank.grades if g.points > 0]


# --- tampering, hidden tests and messages: the fixture whose tests call a checker module -----------------

CHECKER = ROOT / "tests" / "fixtures" / "nbgrader_checker.ipynb"
GOOD = {"checker-ex1": "answer = 6 * 7", "checker-ex2": "def double(x):\n    return 2 * x"}


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _submit(tmp_path, answers=None, edit=None):
    """Grade a student copy of the checker fixture with ``answers`` (grade_id -> source) put in and ``edit``
    (a function changing the notebook) applied; returns ``{grade_id: (points, message)}`` and the report."""
    nb = student.student_notebook(nbformat.read(CHECKER, as_version=4))
    for gid, src in {**GOOD, **(answers or {})}.items():
        _cell(nb, gid).source = src
    if edit:
        edit(nb)
    path = tmp_path / "submission.ipynb"
    nbformat.write(nb, path)
    report = autograde.autograde(path, kernel_name="python3", source=CHECKER, guard=("grading_checks",), timeout=30)
    return {g.grade_id: (g.points, g.message) for g in report.grades}, report


def test_checker_fixture_full_marks_zero_and_messages(tmp_path):
    full = autograde.autograde(CHECKER, kernel_name="python3", guard=("grading_checks",))
    assert (full.score, full.max_score) == (3, 3) and not full.restored
    assert [g.message for g in full.grades] == ["correct: 42", "correct: double(3) == 6"]
    student.main([str(CHECKER), "--out", str(tmp_path)])
    blank = autograde.autograde(tmp_path / CHECKER.name, kernel_name="python3", source=CHECKER)
    assert (blank.score, blank.max_score) == (0, 3)
    assert blank.grades[1].message == "NotImplementedError"


def test_student_version_has_no_trace_of_hidden_tests(tmp_path):
    student.main([str(CHECKER), "--out", str(tmp_path)])
    stud = nbformat.read(tmp_path / CHECKER.name, as_version=4)
    assert _cell(stud, "checker-ex1-test").source == "ex.check_answer(answer)"
    assert _cell(stud, "checker-ex2-test").source == "ex.check_double(double)"
    text = nbformat.writes(stud)
    assert "hidden_check" not in text and "HIDDEN TESTS" not in text


def test_hidden_region_outside_a_test_cell_is_an_error():
    cell = nbformat.v4.new_code_cell("x = 1\n### BEGIN HIDDEN TESTS\nassert x\n### END HIDDEN TESTS")
    with pytest.raises(ValueError, match="not an nbgrader test cell"):
        student.student_cell(cell)


def test_book_extension_hides_hidden_tests_like_the_student_version():
    spec = importlib.util.spec_from_file_location("hidden_tests", ROOT / "book" / "_ext" / "hidden_tests.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    from docutils import nodes
    from docutils.utils import new_document

    cell = _cell(nbformat.read(CHECKER, as_version=4), "checker-ex2-test")
    doc = new_document("page")
    doc += nodes.literal_block(cell.source, cell.source)
    doc += nodes.literal_block("x = 1", "x = 1")
    ext.hide_hidden_tests(None, doc)
    shown = [b.astext() for b in doc.findall(nodes.literal_block)]
    assert shown == [student.student_cell(cell).source, "x = 1"] == ["ex.check_double(double)", "x = 1"]
    with pytest.raises(ValueError, match="without"):
        ext.strip_hidden_tests("### BEGIN HIDDEN TESTS\nx")


def test_hidden_test_fails_an_answer_that_passes_the_visible_check(tmp_path):
    grades, _ = _submit(tmp_path, {"checker-ex2": "def double(x):\n    return abs(2 * x)"})
    assert grades["checker-ex1-test"][0] == 1
    assert grades["checker-ex2-test"] == (0, "AssertionError: double(-1.5) should be -3.0: negative numbers too")


def test_answer_that_fools_the_visible_check_by_equality_fails_the_hidden_one(tmp_path):
    trick = "class Always(int):\n    def __ne__(self, other):\n        return False\nanswer = Always(0)"
    grades, _ = _submit(tmp_path, {"checker-ex1": trick})
    assert grades["checker-ex1-test"][0] == 0 and "whole number" in grades["checker-ex1-test"][1]


def _rewrite_test(nb):
    _cell(nb, "checker-ex1-test").source = "print('correct')"


def _delete_test(nb):
    nb.cells.remove(_cell(nb, "checker-ex1-test"))


def _rename_test(nb):
    _cell(nb, "checker-ex1-test").metadata["nbgrader"]["grade_id"] = "checker-ex1-test-mine"


def _fake_setup(nb):
    nb.cells[1].source = "class ex:\n    def __getattr__(self, name):\n        return print\nex = ex()"


@pytest.mark.parametrize(
    ("answer", "edit", "restored"),
    [
        ("pass", _rewrite_test, ["checker-ex1-test"]),
        (GOOD["checker-ex1"], _delete_test, []),
        (GOOD["checker-ex1"], _rename_test, []),
        ("answer = 0", _fake_setup, []),
    ],
    ids=["rewritten-test", "deleted-test", "renamed-grade-id", "changed-setup"],
)
def test_tampered_cells_earn_nothing(tmp_path, answer, edit, restored):
    grades, report = _submit(tmp_path, {"checker-ex1": answer}, edit)
    assert grades["checker-ex1-test"][0] == 0, grades
    assert grades["checker-ex2-test"][0] == 2, "an untouched exercise keeps its points"
    assert report.restored == restored


#: Answers to exercise 1 (all wrong: ``answer = 0``) that try to make its test pass anyway.
ATTACKS = {
    "patch-checker": "import grading_checks as m\nm.check_answer = m.hidden_check_answer = lambda a: print('correct')",
    "patch-code": "ex.check_answer.__code__ = ex.hidden_check_answer.__code__ = (lambda a: None).__code__",
    "rebind-name": "class ex:\n    check_answer = hidden_check_answer = staticmethod(print)",
    "swap-sys-modules": (
        "import sys, types\nfake = types.ModuleType('grading_checks')\n"
        "fake.check_answer = fake.hidden_check_answer = print\nsys.modules['grading_checks'] = fake\n"
        "import grading_checks as ex"
    ),
    "swallow-errors": "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)",
    "hide-traceback": "get_ipython().showtraceback = lambda *a, **k: None",
    "system-exit": "raise SystemExit",
}


@pytest.mark.parametrize("attack", ATTACKS, ids=list(ATTACKS))
def test_answer_that_attacks_the_checker_earns_nothing(tmp_path, attack):
    grades, _ = _submit(tmp_path, {"checker-ex1": ATTACKS[attack] + "\nanswer = 0"})
    assert grades["checker-ex1-test"][0] == 0, grades
    assert grades["checker-ex2-test"][0] == 2, "the grader carries on after the attack"


def test_answer_that_rewrites_later_cells_earns_nothing(tmp_path):
    attack = "get_ipython().input_transformers_cleanup.append(lambda lines: ['print(\"correct\")\\n'])\nanswer = 0"
    grades, _ = _submit(tmp_path, {"checker-ex1": attack})
    assert grades["checker-ex1-test"][0] == 0 and "could not restore" in grades["checker-ex1-test"][1]


def test_answer_that_kills_the_kernel_ends_the_run_with_zero(tmp_path):
    grades, report = _submit(tmp_path, {"checker-ex1": "import os\nos._exit(0)"})
    assert report.score == 0 and "kernel died" in report.kernel_died
    assert "kernel died" in grades["checker-ex2-test"][1]


def test_code_cell_added_after_an_answer_runs(tmp_path):
    def add(nb):
        i = nb.cells.index(_cell(nb, "checker-ex1"))
        nb.cells.insert(i + 1, nbformat.v4.new_code_cell("answer = 6 * 7"))

    grades, report = _submit(tmp_path, {"checker-ex1": "pass"}, add)
    assert report.added_cells == 1 and grades["checker-ex1-test"][0] == 1


def test_feedback_page_shows_scores_and_messages_offline(tmp_path):
    subs, out = tmp_path / "submitted" / "alice", tmp_path / "feedback"
    subs.mkdir(parents=True)
    nb = student.student_notebook(nbformat.read(CHECKER, as_version=4))
    _cell(nb, "checker-ex1").source = GOOD["checker-ex1"]
    _cell(nb, "checker-ex2").source = "def double(x):\n    return abs(2 * x)"
    nbformat.write(nb, subs / CHECKER.name)
    args = [str(tmp_path / "submitted"), "--out", str(out), "--chapters", str(CHECKER.parent), "--kernel", "python3"]
    assert feedback.main(args) == 0
    page = (out / "alice" / "nbgrader_checker.html").read_text()
    assert "Score: 1 / 3" in page and "correct: 42" in page
    assert "double(-1.5) should be -3.0: negative numbers too" in page
    assert "hidden_check" not in page, "the feedback shows test cells as the student saw them"
    assert "<script" not in page and "http" not in page
    grades = json.loads((out / "grades.json").read_text())
    assert [(g["grade_id"], g["points"]) for g in grades[0]["grades"]] == [
        ("checker-ex1-test", 1),
        ("checker-ex2-test", 0),
    ]


def test_find_source_by_name_and_by_grade_ids(tmp_path):
    nb = nbformat.read(ROOT / "chapters" / "ch06_1_decoding.ipynb", as_version=4)
    nbformat.write(nb, tmp_path / "renamed.ipynb")
    assert autograde.find_source(tmp_path / "renamed.ipynb") == ROOT / "chapters" / "ch06_1_decoding.ipynb"
    with pytest.raises(FileNotFoundError, match="--source"):
        autograde.find_source(CHECKER)


def test_ch06_1_tampered_submission_end_to_end(tmp_path):
    """The attack of the issue (test cell of exercise 3 rewritten, answer ``pass``) and a patched checker
    (exercise 2) earn nothing; the honest answer to exercise 1 keeps its point; the report names each."""
    chapter = ROOT / "chapters" / "ch06_1_decoding.ipynb"
    nb = student.student_notebook(nbformat.read(chapter, as_version=4))
    _cell(nb, "ch06_1_decoding-ex1").source = "answer_gib = 1.875"
    _cell(nb, "ch06_1_decoding-ex2").source = (
        "import attnsurvey.exercises.beyond_decoding as m\n"
        "m.check_expand_kv = lambda *a: print('correct')\n"
        "def expand_kv(k, h):\n    return k"
    )
    _cell(nb, "ch06_1_decoding-ex3").source = "pass"
    _cell(nb, "ch06_1_decoding-ex3-test").source = "print('correct')"
    path = tmp_path / chapter.name
    nbformat.write(nb, path)
    report = autograde.autograde(path)
    assert report.source == str(chapter)
    assert [(g.grade_id, g.points) for g in report.grades] == [
        ("ch06_1_decoding-ex1-test", 1),
        ("ch06_1_decoding-ex2-test", 0),
        ("ch06_1_decoding-ex3-test", 0),
        ("ch06_1_decoding-ex4-test", 0),  # the student's copy has no solution: position raises NotImplementedError
    ]
    assert report.grades[0].message.startswith("correct")
    assert report.grades[2].message.startswith("NameError")
    assert report.restored == ["ch06_1_decoding-ex3-test"] and report.flags == ["ch06_1_decoding-ex2"]


def test_leak_check_catches_a_solution_line_left_behind(tmp_path):
    instructor = nbformat.read(FIXTURE, as_version=4)
    student.main([str(FIXTURE), "--out", str(tmp_path)])
    stud = nbformat.read(tmp_path / FIXTURE.name, as_version=4)
    solution, shared = _split_lines(instructor)
    secret = next(line for line in solution if line not in shared)
    stud.cells.append(nbformat.v4.new_code_cell(secret))
    with pytest.raises(AssertionError, match="solution lines left"):
        _assert_no_solution(instructor, stud)
