"""Autograde a notebook the way nbgrader does: run it, sum the points of the test cells that pass.

    python scripts/autograde.py _build/student/ch02_general_attention_model.ipynb --cwd chapters
    python scripts/autograde.py chapters/ch02_general_attention_model.ipynb --json

The notebook runs top to bottom in a fresh kernel (default ``attnsurvey``, the
pinned kernel installed by ``make env``), errors allowed, so a failing cell does
not stop the cells after it. A test cell (``metadata.nbgrader.grade = true``)
earns its ``points`` if it ran without an error output, and zero otherwise - as
nbgrader's ``autograde`` scores code test cells. A student version straight from
``make student`` therefore scores zero: every solution cell raises
``NotImplementedError`` and the checks that depend on it fail.

Prints one line per test cell and the total; ``--json`` prints the same as JSON.
Exit status 0 whatever the score (1 only if the notebook has no test cells).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from attnsurvey.numeric_env import KERNEL_NAME, notebook_client  # noqa: E402

TIMEOUT_PER_CELL = 600


@dataclass
class Grade:
    grade_id: str
    points: float
    max_points: float


@dataclass
class Report:
    notebook: str
    grades: list[Grade]

    @property
    def score(self) -> float:
        return sum(g.points for g in self.grades)

    @property
    def max_score(self) -> float:
        return sum(g.max_points for g in self.grades)


def _failed(cell) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def autograde(path: Path, cwd: Path | None = None, kernel_name: str = KERNEL_NAME) -> Report:
    """Execute ``path`` (not written back) and score its nbgrader test cells."""
    nb = nbformat.read(path, as_version=4)
    client = notebook_client(
        nb,
        timeout=TIMEOUT_PER_CELL,
        kernel_name=kernel_name,
        allow_errors=True,
        resources={"metadata": {"path": str(cwd or path.parent)}},
    )
    client.execute()
    grades = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        max_points = float(meta.get("points", 0))
        grades.append(Grade(meta.get("grade_id", "?"), 0.0 if _failed(cell) else max_points, max_points))
    return Report(str(path), grades)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--cwd", type=Path, help="working directory of the kernel (default: the notebook's folder)")
    parser.add_argument("--kernel", default=KERNEL_NAME)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = autograde(args.notebook, args.cwd, args.kernel)
    if args.json:
        print(json.dumps({**asdict(report), "score": report.score, "max_score": report.max_score}, indent=1))
    else:
        for g in report.grades:
            print(f"{g.points:5g} / {g.max_points:<5g} {g.grade_id}")
        print(f"{report.score:5g} / {report.max_score:<5g} total  {report.notebook}")
    return 0 if report.grades else 1


if __name__ == "__main__":
    sys.exit(main())
