"""Grade a folder of submissions and write one HTML feedback page per notebook: ``make feedback``.

    python scripts/feedback.py                               # _build/student/*.ipynb -> _build/feedback/
    python scripts/feedback.py submitted/ --out _build/feedback

Like nbgrader's ``generate_feedback``: each submission is autograded (``scripts/autograde.py``: locked cells
restored from the released version found in ``chapters/``, hidden tests run) and its executed notebook is
written as a page with the score, a table of the test cells (points and the checker's message) and every
cell with its outputs; each test cell carries its score and message. A test cell is shown as the student
saw it (without its hidden tests), so a hidden test stays usable for the next cohort; its message still
says why it failed. The page is self-contained and offline: inline CSS, images as ``data:`` URIs, no
script, no external resource; markdown is rendered with raw HTML disabled, and HTML/JavaScript outputs are
shown as their plain text. ``grades.json`` in the output folder holds every report (``--json`` of the
autograder).
"""

from __future__ import annotations

import argparse
import base64
import html
import importlib.util
import json
import sys
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


autograde = _load("autograde")
student = autograde.student

CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.5}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;font-size:.85rem;white-space:pre-wrap}
pre.out{background:#fff;border-left:3px solid #ddd}
pre.err{background:#fff5f5;border-left:3px solid #c00}
.test{border:2px solid #c00;border-radius:6px;padding:.3rem .8rem;margin:1rem 0}
.test.passed{border-color:#2a7}
.score{font-weight:bold}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}
.note{background:#fff8e1;padding:.4rem .8rem}
img{max-width:100%}
"""
_MD = MarkdownIt("commonmark", {"html": False}).enable("table")


def _output_html(out) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        return f'<pre class="out">{html.escape(autograde._ANSI.sub("", out.get("text", "")))}</pre>'
    if kind == "error":
        tb = autograde._ANSI.sub("", "\n".join(out.get("traceback", [])) or f"{out.get('ename')}: {out.get('evalue')}")
        return f'<pre class="err">{html.escape(tb)}</pre>'
    data = out.get("data", {})
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            return f'<img alt="figure" src="data:{mime};base64,{"".join(data[mime].split())}">'
    if "image/svg+xml" in data:
        svg = base64.b64encode(data["image/svg+xml"].encode()).decode()
        return f'<img alt="figure" src="data:image/svg+xml;base64,{svg}">'
    if "text/plain" in data:
        return f'<pre class="out">{html.escape(data["text/plain"])}</pre>'
    return ""


def feedback_html(report, nb) -> str:
    """The feedback page of one graded submission (``report`` from ``autograde``, ``nb`` the executed notebook)."""
    grades = {g.grade_id: g for g in report.grades}
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(g.grade_id)}</td><td>{g.points:g} / {g.max_points:g}</td><td>{esc(g.message)}</td></tr>"
        for g in report.grades
    )
    notes = [
        f"Locked cells changed in the submission were restored before grading: {', '.join(report.restored)}."
        if report.restored
        else "",
        f"Test cells missing from the submission score 0: "
        f"{', '.join(g.grade_id for g in report.grades if g.status == 'missing')}."
        if any(g.status == "missing" for g in report.grades)
        else "",
        f"Answer cells missing (graded as blank): {', '.join(report.missing_answers)}."
        if report.missing_answers
        else "",
        f"{report.ignored_cells} edited given cell(s) or cell(s) added before the first answer were not run."
        if report.ignored_cells
        else "",
        esc(report.kernel_died) + "." if report.kernel_died else "",
    ]
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Feedback: {esc(Path(report.notebook).name)}"
        f"</title><style>{CSS}</style></head><body>",
        f"<h1>Feedback: {esc(Path(report.notebook).name)}</h1>",
        f"<p class='score'>Score: {report.score:g} / {report.max_score:g}</p>",
        f"<table><tr><th>test</th><th>points</th><th>message</th></tr>{rows}</table>",
        *(f"<p class='note'>{n}</p>" for n in notes if n),
        "<hr>",
    ]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(_MD.render(cell.source))
            continue
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if student.is_grade(cell):
            g = grades.get(meta.get("grade_id"))
            shown = student.student_cell(cell).source
            if g is None:
                continue
            parts.append(
                f"<div class='test {esc(g.status)}'><p class='score'>{esc(g.grade_id)}: {g.points:g} / "
                f"{g.max_points:g}</p><pre>{esc(shown)}</pre><pre class='{'out' if g.status == 'passed' else 'err'}'>"
                f"{esc(g.message)}</pre></div>"
            )
            continue
        parts.append(f"<pre>{esc(cell.source)}</pre>")
        parts.extend(_output_html(o) for o in cell.get("outputs", []))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", nargs="?", type=Path, default=ROOT / "_build" / "student")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "feedback")
    parser.add_argument("--chapters", type=Path, default=autograde.CHAPTERS, help="where the released versions are")
    parser.add_argument("--kernel", default=autograde.KERNEL_NAME)
    args = parser.parse_args(argv)
    paths = sorted(p for p in args.submissions.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not paths:
        parser.error(f"no notebooks in {args.submissions} (run `make student` first?)")
    args.out.mkdir(parents=True, exist_ok=True)
    reports = []
    for path in paths:
        report = autograde.autograde(path, kernel_name=args.kernel, source=autograde.find_source(path, args.chapters))
        target = args.out / path.relative_to(args.submissions).with_suffix(".html")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(feedback_html(report, report.executed), encoding="utf-8")
        reports.append(report.as_dict())
        print(f"{report.score:5g} / {report.max_score:<5g} {target}")
    (args.out / "grades.json").write_text(json.dumps(reports, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
