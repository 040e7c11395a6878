"""Spell-check the book's prose and code with codespell (``make lint`` runs it).

    python -m tools.spelling            # every checked file; exit 1 on a misspelling

codespell reads text files as they are, but a notebook is JSON whose stored outputs hold base64
images and SVG paths, where any two letters can look like a misspelt word. So each notebook's
cell *sources* (Markdown and code, never outputs) are written to a temporary folder, one file a
cell, checked there, and every finding is reported as ``notebook.ipynb, cell N, line L``.

The words codespell must accept are the survey's symbols and names, kept in one list in
``pyproject.toml`` (``[tool.codespell] ignore-words-list``); a deliberate misspelling in test
data is marked on its line with ``codespell:ignore``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The project's codespell configuration (``[tool.codespell]``).
CONFIG = ROOT / "pyproject.toml"
#: Text files and folders checked as they are (``.py``, ``.md``, ``.yml``, ``.cfg``, ``.bib`` ...).
TEXT = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "Makefile", "_config.yml", "_toc.yml", "book", "src"]
TEXT += ["tests", "scripts", "tools", "benchmarks", "conftest.py", ".ci"]
#: Notebooks checked cell by cell (sources only).
NOTEBOOKS = ["chapters/*.ipynb", "book/*.ipynb"]
#: Never checked: generated, vendored or binary.
SKIP = "*.ipynb,*.png,*.svg,*.pdf,*.json,_vendor,_build,figures,*.pyc"
_FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+): (?P<rest>.*)$")


def codespell(paths: list[str], cwd: Path) -> list[str]:
    """codespell's findings (``path:line: word ==> suggestion``) over ``paths``, run from ``cwd``
    with the project's configuration (``pyproject.toml``)."""
    cmd = [sys.executable, "-m", "codespell_lib", "--toml", str(CONFIG), "--skip", SKIP, *paths]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode not in (0, 65):  # 65: misspellings found
        raise RuntimeError(f"codespell failed ({done.returncode}): {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def notebook_findings(notebooks: list[Path]) -> list[str]:
    """Findings in the cell sources of ``notebooks``, as ``path, cell N, line L: ...``."""
    with tempfile.TemporaryDirectory(prefix="spelling-") as tmp:
        where: dict[str, tuple[str, int]] = {}
        for nb in notebooks:
            cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
            for i, cell in enumerate(cells):
                name = f"{len(where):05d}.{'md' if cell['cell_type'] == 'markdown' else 'py'}"
                source = cell["source"]
                Path(tmp, name).write_text(source if isinstance(source, str) else "".join(source), encoding="utf-8")
                where[name] = (nb.relative_to(ROOT).as_posix(), i)
        out = []
        for line in codespell(sorted(where), Path(tmp)):
            m = _FINDING.match(line)
            if m is None:
                out.append(line)
                continue
            nb_path, cell = where[Path(m["path"]).name]
            out.append(f"{nb_path}, cell {cell}, line {m['line']}: {m['rest']}")
        return out


def main() -> int:
    text = [p for p in TEXT if (ROOT / p).exists()]
    notebooks = sorted(p for pattern in NOTEBOOKS for p in ROOT.glob(pattern))
    findings = codespell(text, ROOT) + notebook_findings(notebooks)
    for line in findings:
        print(line)
    print(f"spelling: {len(findings)} finding(s) in {len(text)} paths and {len(notebooks)} notebooks")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
