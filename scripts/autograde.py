"""Autograde a student notebook against its released version: restore what is locked, run, score each test cell.

    python scripts/autograde.py _build/student/ch02_general_attention_model.ipynb
    python scripts/autograde.py submission.ipynb --source chapters/ch02_general_attention_model.ipynb --json

The rules are nbgrader's ``autograde`` (0.9.x), applied by the project's own script:

* **Overwrite** (nbgrader's ``OverwriteCells``). The notebook that runs is rebuilt from the released
  (instructor) version: every cell that is not an answer cell (``nbgrader.solution``) comes from the
  released version - test cells with their hidden tests, the setup cell, the given code and prose. The
  student's part is the answer cells, matched by ``grade_id``. In this book every cell except the answer
  cells is given (the released design), so the rule covers more than nbgrader's ``locked`` flag: an edited
  setup cell is replaced like a locked one. A locked cell whose nbgrader checksum (md5 of source, cell type,
  flags, ``grade_id`` and points, as ``nbgrader.utils.compute_checksum``) differs from the released cell's
  is listed in the report as restored. A code cell the student added after the first answer cell runs
  where it stands, as nbgrader runs it (it can do no more than an answer cell); edits to given cells and
  cells added before the first answer are not run.
* **Deleted or renamed test cell**: its points are 0, as in nbgrader (no cell, no grade) - restoring it
  would give points for a test the student removed.
* **Hidden tests** (``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``): the student version has none
  (``scripts/student.py``); the restored test cell has them, so they run.
* **Score**: a test cell earns its ``points`` if it ran without an error (error output or an ``error``
  execute reply), else 0. Its message is the error's text (the checker's hint) or, on success, what it
  printed. A kernel that dies (``os._exit`` in an answer) ends the run: the test cells not yet run score 0.

Beyond nbgrader: an answer runs in the same kernel as the tests, so it could patch the checker
(``import attnsurvey.exercises.x as m; m.check = lambda *a: None``), swap its ``sys.modules`` entry, rebind
the notebook's ``ex``, or hide the error of a failing test (IPython's custom exception handler, a patched
``showtraceback``, an input transformer that rewrites the next cell). Before the first untrusted cell runs
(answer or added cell), the grader imports every module of the checker packages (``--guard``, default
``attnsurvey.exercises``) and takes a snapshot inside the kernel: each module's namespace, the code and
defaults of its functions, its ``sys.modules`` entry, the notebook names bound to it or its functions, the
builtins and IPython's hooks. Before each test cell it restores that snapshot and prints a fresh random
nonce; a test cell whose restore did not print the nonce scores 0. The snapshot keeps the module objects,
so answers that use the checkers' helpers keep working (a fresh ``importlib.reload`` would create new
functions and classes, and would pick up a patched dependency again). What this does not stop: an answer
written against the grader itself (its snapshot lives in the kernel too) or one that patches a library the
checker calls (torch): nbgrader has the same limit, since no in-kernel grader can stop code that owns the
kernel. The report flags answer cells that touch the machinery (``sys.modules``, ``get_ipython``,
``builtins``, ``__code__``, the checker package...) for the instructor to read; the feedback page shows them.

Why not nbgrader itself: nbgrader 0.9.6 installs beside torch 2.13 (``pip install -c constraints.txt
nbgrader --dry-run``: no other torch) but brings about 45 packages (JupyterLab, Notebook 7, Jupyter Server,
nbconvert) and wants a course directory and a gradebook database for each run; it would still restore only
cells marked ``locked`` (not the setup cell), and would not stop the answer-side tampering above.

Prints one line per test cell (points, ``grade_id``, message) and the total; ``--json`` prints the report
as JSON (``score``, ``max_score``, ``grades`` with ``grade_id``, ``points``, ``max_points``, ``message``,
``status``). Exit status 0 whatever the score (1 only if the released notebook has no test cells).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import re
import secrets
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from attnsurvey.numeric_env import KERNEL_NAME, notebook_client  # noqa: E402


def _load_student():
    spec = importlib.util.spec_from_file_location("student", Path(__file__).with_name("student.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules.setdefault("student", module)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


student = sys.modules.get("student") or _load_student()

TIMEOUT_PER_CELL = 600
GUARD = ("attnsurvey.exercises",)
CHAPTERS = ROOT / "chapters"
#: Text in an answer cell that reaches for the grading machinery: flagged for the instructor, not scored.
SUSPICIOUS = re.compile(
    r"sys\.modules|get_ipython|builtins|__code__|__globals__|__dict__|importlib|setattr|attnsurvey\.exercises"
    r"|_exit|SystemExit|set_custom_exc|showtraceback|input_transformers|__attnsurvey_grader__"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Runs in the kernel before the first untrusted cell: import the guarded packages whole and snapshot them.
_GUARD_INSTALL = r"""
def _install(prefixes):
    import builtins, importlib, pkgutil, sys, types
    ip = get_ipython()
    guarded = lambda name: any(name == p or name.startswith(p + ".") for p in prefixes)
    for p in prefixes:
        pkg = sys.modules.get(p)
        for info in pkgutil.walk_packages(getattr(pkg, "__path__", None) or [], p + "."):
            importlib.import_module(info.name)
    mods = {n: m for n, m in list(sys.modules.items()) if guarded(n) and isinstance(m, types.ModuleType)}
    spaces = {n: dict(vars(m)) for n, m in mods.items()}
    funcs = [(f, f.__code__, f.__defaults__, f.__kwdefaults__)
             for m in mods.values() for f in vars(m).values() if isinstance(f, types.FunctionType)]
    genuine = {id(m) for m in mods.values()} | {id(f[0]) for f in funcs}
    names = {}
    def refresh():  # after each given cell: the notebook's names for the genuine checker objects
        names.update({k: v for k, v in ip.user_ns.items() if id(v) in genuine})
    refresh()
    built = dict(vars(builtins))
    lists = {a: list(getattr(ip, a)) for a in ("input_transformers_cleanup", "input_transformers_post",
                                             "ast_transformers")}
    own = set(vars(ip))
    def reset(nonce):
        vars(builtins).update(built)
        for n, m in mods.items():
            sys.modules[n] = m
            d = vars(m)
            d.clear()
            d.update(spaces[n])
        for f, code, defaults, kwdefaults in funcs:
            f.__code__, f.__defaults__, f.__kwdefaults__ = code, defaults, kwdefaults
        ip.user_ns.update(names)
        for a, saved in lists.items():
            getattr(ip, a)[:] = saved
        ip.custom_exceptions = ()
        for a in [a for a in vars(ip) if a not in own and callable(getattr(type(ip), a, None))]:
            delattr(ip, a)
        print(nonce)
    mod = types.ModuleType("__attnsurvey_grader__")
    mod.reset, mod.refresh = reset, refresh
    sys.modules[mod.__name__] = mod
_install(%r)
del _install
"""
_GUARD_RESET = "__import__('sys').modules['__attnsurvey_grader__'].reset(%r)"
_GUARD_REFRESH = "__import__('sys').modules['__attnsurvey_grader__'].refresh()"


@dataclass
class Grade:
    grade_id: str
    points: float
    max_points: float
    message: str = ""
    #: "passed", "failed", "missing" (test cell deleted or renamed), "not run" (the kernel died first)
    status: str = "failed"


@dataclass
class Report:
    notebook: str
    source: str
    grades: list[Grade]
    #: grade_ids of locked cells whose checksum differed from the released cell's (restored before the run)
    restored: list[str] = field(default_factory=list)
    #: grade_ids of answer cells missing from the submission (run as the blank stub)
    missing_answers: list[str] = field(default_factory=list)
    #: cells of the submission that were not run (edited given cells, cells added before the first answer)
    ignored_cells: int = 0
    #: code cells the student added after the first answer (run where they stand)
    added_cells: int = 0
    #: answer cells that reach for the grading machinery (for the instructor to read)
    flags: list[str] = field(default_factory=list)
    kernel_died: str = ""

    @property
    def score(self) -> float:
        return sum(g.points for g in self.grades)

    @property
    def max_score(self) -> float:
        return sum(g.max_points for g in self.grades)

    def as_dict(self) -> dict:
        return {**asdict(self), "score": self.score, "max_score": self.max_score}


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _gid(cell) -> str | None:
    return _meta(cell).get("grade_id")


def is_locked(cell) -> bool:
    """nbgrader's rule: a grade cell or a ``locked`` cell that is not a solution cell."""
    m = _meta(cell)
    return bool(m) and not m.get("solution") and bool(m.get("grade") or m.get("locked"))


def compute_checksum(cell) -> str:
    """The checksum nbgrader stores for an nbgrader cell: md5 of source, type, flags, id and points."""
    m = hashlib.md5()
    meta = _meta(cell)
    for part in (cell.source, cell.cell_type, str(bool(meta.get("grade"))), str(bool(meta.get("solution")))):
        m.update(part.encode())
    m.update(str(is_locked(cell)).encode())
    m.update(str(meta.get("grade_id", "")).encode())
    if meta.get("grade"):
        m.update(str(float(meta.get("points", 0))).encode())
    return m.hexdigest()


def find_source(path: Path, chapters: Path = CHAPTERS) -> Path:
    """The released version of ``path``: the notebook of that name in ``chapters``, else the one sharing
    the most ``grade_id``s with it. Raises ``FileNotFoundError`` if none shares one."""
    same = chapters / path.name
    ids = {_gid(c) for c in nbformat.read(path, as_version=4).cells} - {None}
    if same.exists() and ids & {_gid(c) for c in nbformat.read(same, as_version=4).cells}:
        return same
    best, best_n = None, 0
    for cand in sorted(chapters.glob("*.ipynb")):
        n = len(ids & {_gid(c) for c in nbformat.read(cand, as_version=4).cells})
        if n > best_n:
            best, best_n = cand, n
    if best is None:
        raise FileNotFoundError(f"no released notebook in {chapters} shares a grade_id with {path}; use --source")
    return best


def graded_notebook(submission, source) -> tuple[nbformat.NotebookNode, list[bool], Report]:
    """The notebook to run: ``source`` with the answers of ``submission`` put in by ``grade_id``.

    Returns it, a per-cell flag "untrusted" (answer or added cell) and a report without grades yet.
    """
    report = Report("", "", [])
    released = [student.student_cell(c) for c in source.cells]
    sub_by_id = {_gid(c): c for c in submission.cells if _gid(c)}
    for src, rel in zip(source.cells, released):
        gid = _gid(rel)
        sub = sub_by_id.get(gid)
        if gid and is_locked(rel) and sub is not None:
            if compute_checksum(sub) not in (compute_checksum(rel), compute_checksum(src)):
                report.restored.append(gid)
    # cells the student added: unmatched code cells after the first answer, anchored at the matched cell before
    known = {c.source for c in released} | {c.source for c in source.cells}
    first_answer = next((i for i, c in enumerate(source.cells) if student.is_solution(c)), len(source.cells))
    pos = {_gid(c): i for i, c in enumerate(source.cells) if _gid(c)}
    added: dict[int, list] = {}
    anchor = -1
    for cell in submission.cells:
        gid = _gid(cell)
        if gid in pos:
            anchor = pos[gid]
        elif not gid and cell.source in known:
            anchor = next(
                (
                    i
                    for i, (c, r) in enumerate(zip(source.cells, released))
                    if i > anchor and cell.source in (c.source, r.source)
                ),
                anchor,
            )
        elif cell.cell_type == "code" and anchor >= first_answer and not gid and cell.source.strip():
            added.setdefault(anchor, []).append(cell)
        elif cell.source.strip():
            report.ignored_cells += 1
    out = copy.deepcopy(source)
    out.metadata.pop("widgets", None)
    out.cells, untrusted = [], []
    for i, (src, rel) in enumerate(zip(source.cells, released)):
        cell = copy.deepcopy(src)
        gid = _gid(src)
        if student.is_solution(src):
            if gid in sub_by_id:
                cell.source = sub_by_id[gid].source
            else:
                cell.source = rel.source
                report.missing_answers.append(str(gid))
            if cell.cell_type == "code" and SUSPICIOUS.search(cell.source):
                report.flags.append(str(gid))
        out.cells.append(cell)
        untrusted.append(student.is_solution(src) and cell.cell_type == "code")
        for extra in added.get(i, []):
            new = nbformat.v4.new_code_cell(extra.source)
            out.cells.append(new)
            untrusted.append(True)
            report.added_cells += 1
            if SUSPICIOUS.search(extra.source):
                report.flags.append(f"added cell after {gid or f'cell {i}'}")
    for cell in out.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return out, untrusted, report


def _error_text(cell) -> str:
    errs = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errs:
        return ""
    e = errs[-1]
    text = f"{e.get('ename', '')}: {e.get('evalue', '')}" if e.get("evalue") else e.get("ename", "")
    return _ANSI.sub("", text).strip()


def _printed(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif "data" in o and "text/plain" in o["data"]:
            parts.append(o["data"]["text/plain"])
    return _ANSI.sub("", "\n".join(p.rstrip("\n") for p in parts)).strip()


def run_graded(
    nb, untrusted: list[bool], cwd: Path, kernel_name: str, guard: tuple[str, ...], timeout: int = TIMEOUT_PER_CELL
) -> dict:
    """Execute ``nb`` in place (errors allowed) with the guard; per test cell index: (passed, message)."""
    replies: dict[int, dict] = {}
    client = notebook_client(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={
            "ename": "TimeoutError",
            "evalue": f"the cell ran past {timeout} s",
            "traceback": [],
        },
        resources={"metadata": {"path": str(cwd)}},
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(cell_index, execute_reply),
    )
    results: dict[int, tuple[str, str]] = {}
    guarded = False
    from nbclient.exceptions import DeadKernelError

    def helper(code: str) -> str:
        cell = nbformat.v4.new_code_cell(code)
        client.execute_cell(cell, -1, store_history=False)
        return _printed(cell) + _error_text(cell)

    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            test = student.is_grade(cell)
            try:
                if untrusted[i] and not guarded:
                    out = helper(_GUARD_INSTALL % (tuple(guard),))
                    if out:
                        raise RuntimeError(f"the grader's guard could not be installed: {out}")
                    guarded = True
                if test and guarded:
                    nonce = secrets.token_hex(8)
                    out = helper(_GUARD_RESET % nonce)
                    if out != nonce:
                        results[i] = ("failed", f"the grader could not restore the checker before this test: {out!r}")
                        continue
                client.execute_cell(cell, i)
                if guarded and not untrusted[i] and not test:
                    helper(_GUARD_REFRESH)
            except DeadKernelError:
                died = f"the kernel died while running cell {i}" + (f" ({_gid(cell)})" if _gid(cell) else "")
                results[-1] = ("died", died)
                if test:
                    results[i] = ("failed", died)
                break
            if test:
                reply = replies.get(i) or {}
                err = _error_text(cell)
                ok = not err and reply.get("content", {}).get("status") == "ok"
                msg = _printed(cell) if ok else (err or "the test cell failed (error reply without an error output)")
                results[i] = ("passed" if ok else "failed", msg)
    return results


def autograde(
    path: Path,
    cwd: Path | None = None,
    kernel_name: str = KERNEL_NAME,
    source: Path | None = None,
    guard: tuple[str, ...] = GUARD,
    timeout: int = TIMEOUT_PER_CELL,
) -> Report:
    """Grade the submission ``path`` against its released version ``source`` (default :func:`find_source`).

    The kernel runs in ``cwd`` (default: the released notebook's folder); a cell that runs past ``timeout``
    seconds is interrupted (an error). The executed notebook is kept
    on the report as ``report.executed`` (for the feedback page).
    """
    submission = nbformat.read(path, as_version=4)
    if source is None:
        try:
            source = find_source(path)
        except FileNotFoundError:
            if not any(student.BEGIN in c.source for c in submission.cells):
                raise
            source = path  # a released version graded against itself
    released = nbformat.read(source, as_version=4)
    nb, untrusted, report = graded_notebook(submission, released)
    report.notebook, report.source = str(path), str(source)
    present = {_gid(c) for c in submission.cells if student.is_grade(c)}
    results = run_graded(nb, untrusted, cwd or source.parent, kernel_name, guard, timeout)
    if -1 in results:
        report.kernel_died = results[-1][1]
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not student.is_grade(cell):
            continue
        gid, max_points = str(_gid(cell)), float(_meta(cell).get("points", 0))
        if gid not in present:
            grade = Grade(gid, 0.0, max_points, "test cell missing from the submission (deleted or renamed)", "missing")
        elif i not in results:
            grade = Grade(gid, 0.0, max_points, report.kernel_died or "not run", "not run")
        else:
            status, msg = results[i]
            grade = Grade(gid, max_points if status == "passed" else 0.0, max_points, msg, status)
        report.grades.append(grade)
    report.executed = nb  # type: ignore[attr-defined]
    return report


def format_report(report: Report) -> str:
    """The plain-text report: one line per test cell with its message, then the total and notes."""
    lines = []
    for g in report.grades:
        msg = g.message.replace("\n", "\n" + " " * 16)
        lines.append(f"{g.points:5g} / {g.max_points:<5g} {g.grade_id}\n{'':16}{msg}")
    lines.append(f"{report.score:5g} / {report.max_score:<5g} total  {report.notebook}")
    for label, items in (
        ("restored locked cells (changed in the submission)", report.restored),
        ("answer cells missing (graded as blank)", report.missing_answers),
        ("answer cells flagged for review", report.flags),
    ):
        if items:
            lines.append(f"{label}: {', '.join(items)}")
    if report.ignored_cells:
        lines.append(f"cells not run (edited given cells, or added before the first answer): {report.ignored_cells}")
    if report.kernel_died:
        lines.append(report.kernel_died)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--source", type=Path, help="the released (instructor) version (default: found in chapters/)")
    parser.add_argument("--cwd", type=Path, help="working directory of the kernel (default: the source's folder)")
    parser.add_argument("--kernel", default=KERNEL_NAME)
    parser.add_argument("--guard", action="append", help=f"checker package to protect (default {GUARD[0]})")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = autograde(args.notebook, args.cwd, args.kernel, args.source, tuple(args.guard or GUARD))
    print(json.dumps(report.as_dict(), indent=1) if args.json else format_report(report))
    return 0 if report.grades else 1


if __name__ == "__main__":
    sys.exit(main())
