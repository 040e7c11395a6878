"""The package as a user installs it: a wheel, imported and run with no checkout around it.

Builds a wheel from a copy of the project files a wheel is made of, installs it into
an empty folder and runs, from another empty folder, the first code cells of the core
chapter and the catalog (which names each item's tests from the index shipped with the
package). Nothing under the checkout may be read: ``attnsurvey`` must resolve to the
installed wheel, and the development tools (``tools/``) must not be importable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "chapters/ch02_general_attention_model.ipynb"


def first_code_cells(path: Path, count: int) -> list[str]:
    """The first ``count`` code cells a reader runs (the hidden install cell excluded)."""
    cells = nbformat.read(path, as_version=4).cells
    code = [c.source for c in cells if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", [])]
    return code[:count]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    project = work / "project"
    project.mkdir()
    shutil.copytree(ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, project)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(project)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = (work / "dist").glob("attnsurvey-*.whl")
    site = work / "site"
    done = subprocess.run(
        [*pip, "install", "--no-deps", "--no-compile", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return site


def run_outside(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


def test_wheel_ships_the_catalog_tests_index(installed: Path):
    index = json.loads((installed / "attnsurvey" / "catalog_tests.json").read_text())
    assert index["eq1"], "the installed index names no test for Eq. (1)"
    assert not (installed / "attnsurvey" / "architecture.py").exists(), "a development tool was installed"


def test_installed_wheel_runs_a_chapter_without_the_checkout(installed: Path, tmp_path: Path):
    cells = "\n\n".join(first_code_cells(ROOT / CHAPTER, 2))
    probe = f"""
import importlib.util, pathlib, sys
import attnsurvey
where = pathlib.Path(attnsurvey.__file__).resolve()
assert where.is_relative_to(pathlib.Path({str(installed)!r}).resolve()), where
assert importlib.util.find_spec("tools") is None, "the repository's tools/ is importable"
{cells}
from attnsurvey.catalog import chapter_table, for_chapter
rows = for_chapter({CHAPTER!r})
assert rows and all(r["tested_by"] for r in rows), "catalog entries without their tests"
print("rows", len(rows), "tests", sum(len(r["tested_by"]) for r in rows))
"""
    done = run_outside(installed, probe, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "rows " in done.stdout
