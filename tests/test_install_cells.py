"""Each notebook's install cell installs what the notebook imports, at the versions that made its outputs.

A reader who opens a chapter on a hosted notebook (or in a fresh environment) runs its first code cell, the
install cell: where ``attnsurvey`` or one of the chapter's libraries is missing it pip-installs the pinned
versions and the package. A library the chapter needs but the cell does not pin is either missing (the
chapter fails) or whatever version the host has (the chapter prints other numbers than the book).

What a notebook needs is read from its code, statically: the top-level names of every ``import`` in its
code cells, and, for each ``attnsurvey`` module it imports, that module's imports (at any depth in the
module, functions included, and the modules it loads by name with ``library("x.y")`` or
``importlib.import_module("x.y")``), following ``attnsurvey`` modules that load at import time. A name
from the standard library or from ``attnsurvey`` needs nothing; every other name is mapped to its
distribution (``importlib.metadata.packages_distributions``, e.g. ``skimage`` -> ``scikit-image``),
which the install cell must pin to the version of ``requirements.txt``; and the cell's condition must
look for the name, so that a reader who has the package but not the library gets it too.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.ipynb"))
#: Functions whose string argument names a module to import: importlib's and the conformance suite's.
LOADERS = {"import_module", "library"}
#: The Jupyter machinery that runs a notebook: the host's own, never pinned by an install cell (pinning
#: IPython or jupyter_client over a hosted notebook's would break its kernel). The package imports them
#: for its kernel and notebook helpers (``numeric_env``, ``widgets``), which the chapters do not call.
HOST = {"IPython", "ipykernel", "jupyter_client", "jupyter_core", "traitlets", "comm", "nbformat", "nbclient"}
#: The package's own dependencies (pyproject.toml): installed with it, so the cell need not look for them.
DEPENDENCIES = {"torch", "numpy", "scipy", "matplotlib", "ipywidgets"}


def normalise(name: str) -> str:
    """A distribution name as pip compares them (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_pins() -> dict[str, str]:
    """Distribution -> version of every ``name==version`` line of requirements.txt and constraints.txt."""
    pins = {}
    for file in ("requirements.txt", "constraints.txt"):
        for line in (ROOT / file).read_text(encoding="utf-8").splitlines():
            m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line)
            if m:
                pins[normalise(m[1])] = m[2]
    return pins


def code_cells(path: Path) -> list[str]:
    """The source of each code cell, IPython's ``%magic`` and ``!shell`` lines left out."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        "\n".join(line for line in "".join(c["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
        for c in cells
        if c["cell_type"] == "code"
    ]


def imported_modules(tree: ast.AST, package: str = "", top_only: bool = False) -> set[str]:
    """Dotted names of the modules ``tree`` imports (``from a import b``: ``a.b`` where that is an
    ``attnsurvey`` module, else ``a``; relative imports resolved against ``package``), loads by name
    (``library("x.y")``) or names in a table (a string ``"attnsurvey.x.y"``, as the conformance suite's
    targets). With ``top_only``, only the imports that run at import time (outside functions and classes)."""
    found: set[str] = set()
    if top_only:
        nodes = [n for n in ast.iter_child_nodes(tree) if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        for node in nodes:
            if isinstance(node, (ast.If, ast.Try, ast.With)) and not _type_checking(node):
                found |= imported_modules(node, package, top_only=True)  # guarded imports still run
    else:
        skipped = {id(n) for t in ast.walk(tree) if _type_checking(t) for n in ast.walk(t)}
        nodes = [n for n in ast.walk(tree) if id(n) not in skipped]
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names if module_source(f"{base}.{a.name}") is not None}
            found |= subs or {base}
            if len(subs) < len(node.names):
                found.add(base)
        elif top_only:
            continue
        elif isinstance(node, ast.Call) and node.args and _leading_text(node.args[0]):
            if getattr(node.func, "id", getattr(node.func, "attr", None)) in LOADERS:
                found.add(_leading_text(node.args[0]).split("{")[0].rstrip("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"attnsurvey(\.\w+)+", node.value) and module_source(node.value) is not None:
                found.add(node.value)
    return found


def _type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: imports for the type checker only, never run."""
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _leading_text(node: ast.AST) -> str:
    """A string literal's text, or an f-string's text before its first field (``f"x.{m}"`` -> ``x.``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _leading_text(node.values[0])
    return ""


@cache
def module_source(name: str) -> tuple[ast.AST, str] | None:
    """The parsed source of an ``attnsurvey`` module and the package its relative imports start from."""
    if name.split(".")[0] != "attnsurvey":
        return None
    path = SRC / name.replace(".", "/")
    if (path / "__init__.py").is_file():
        return ast.parse((path / "__init__.py").read_text(encoding="utf-8")), name
    if path.with_suffix(".py").is_file():
        return ast.parse(path.with_suffix(".py").read_text(encoding="utf-8")), name.rpartition(".")[0]
    return None  # a function or class imported with ``from module import name``


def package_needs(direct: set[str]) -> set[str]:
    """Top-level names of the non-``attnsurvey`` modules that the ``attnsurvey`` modules in ``direct`` need.

    A module the notebook uses (``direct``), or one such a module loads when called (an import in a
    function, a module loaded by name), is read whole; a module that is only imported on the way (a parent
    package, an import at module level) is read for what runs at import time.
    """
    needs: set[str] = set()
    seen: set[tuple[str, bool]] = set()
    todo = [(name, True) for name in direct]
    while todo:
        name, whole = todo.pop()
        parts = name.split(".")
        for module in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):  # a.b.c runs a, a.b, a.b.c
            here = whole and module == name
            found = module_source(module)
            if found is None or (module, here) in seen or (module, True) in seen:
                continue
            seen.add((module, here))
            tree, package = found
            at_import = imported_modules(tree, package, top_only=True)
            for imported in imported_modules(tree, package) if here else at_import:
                if imported.split(".")[0] == "attnsurvey":
                    todo.append((imported, here and imported not in at_import))
                else:
                    needs.add(imported.split(".")[0])
    return needs


def notebook_needs(path: Path) -> set[str]:
    """Top-level names of the third-party modules a notebook needs (see the module docstring)."""
    names: set[str] = set()
    for source in code_cells(path):
        names |= imported_modules(ast.parse(source))
    first_party = {n for n in names if n.split(".")[0] == "attnsurvey"}
    found = {n.split(".")[0] for n in names - first_party} | package_needs(first_party)
    return {n for n in found if n not in sys.stdlib_module_names | HOST | {"attnsurvey", "__future__"}}


@cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distribution(module: str) -> str:
    """The distribution that installs a top-level module name (``skimage`` -> ``scikit-image``)."""
    dists = _distributions().get(module)
    if not dists:
        raise LookupError(f"no installed distribution provides the module {module!r}")
    return normalise(dists[0])


def install_cell(path: Path) -> str:
    """The notebook's install cell: its first code cell (tagged ``remove-cell``, as every notebook's is)."""
    return code_cells(path)[0]


def cell_pins(source: str) -> dict[str, str]:
    """Distribution -> version of every ``"name==version"`` string in an install cell."""
    return {normalise(m[1]): m[2] for m in re.finditer(r"[\"']([A-Za-z0-9_.\-]+)==([^\"'\s]+)[\"']", source)}


def cell_looks_for(source: str) -> set[str]:
    """The module names the install cell's condition looks for (``find_spec`` calls and its ``NEEDS`` list)."""
    names = set(re.findall(r"find_spec\(\s*[\"'](\w+)[\"']", source))
    m = re.search(r"^\s*NEEDS\s*=\s*(\[.*?\]|\(.*?\))", source, flags=re.M | re.S)
    if m:
        names |= set(ast.literal_eval(m[1]))
    return names


def missing_pins(path: Path) -> list[str]:
    """What the notebook's install cell lacks: unpinned or wrongly pinned libraries, and libraries it does not look for."""
    cell = install_cell(path)
    pins, wanted = cell_pins(cell), requirement_pins()
    problems = []
    for module in sorted(notebook_needs(path)):
        dist = distribution(module)
        if dist not in wanted:
            problems.append(f"{module} ({dist}) is not pinned in requirements.txt")
        elif pins.get(dist) != wanted[dist]:
            problems.append(
                f"{module}: the install cell pins {dist}=={pins.get(dist)}, requirements.txt {wanted[dist]}"
            )
        if module not in cell_looks_for(cell) and module not in DEPENDENCIES:
            problems.append(f"{module}: the install cell does not look for it (a reader with attnsurvey lacks it)")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_install_cell_pins_what_the_notebook_imports(path):
    assert "find_spec" in install_cell(path), f"{path.name}: the first code cell is not an install cell"
    assert not missing_pins(path), missing_pins(path)


def test_the_two_chapters_that_need_more_than_the_package_are_seen():
    """The reading has teeth: the libraries behind the Triton chapter and the conformance appendix are found,
    though neither notebook imports them by name (the package's modules do, in functions and by name)."""
    assert "triton" in notebook_needs(ROOT / "chapters" / "ch06_tiled_attention.ipynb")
    assert {"transformers", "x_transformers"} <= notebook_needs(ROOT / "book" / "conformance.ipynb")
    assert "triton" not in notebook_needs(ROOT / "chapters" / "ch01_introduction.ipynb")


def test_an_unpinned_import_is_reported(tmp_path):
    cells = [
        {"cell_type": "code", "metadata": {"tags": ["remove-cell"]}, "source": 'PINS = ["torch==0.0"]\n'},
        {"cell_type": "code", "metadata": {}, "source": "import yaml\nfrom attnsurvey.beyond import triton_flash\n"},
    ]
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    problems = " ".join(missing_pins(nb))
    assert "pins torch==0.0, requirements.txt 2.13.0" in problems  # a wrong version (torch: imported by the module)
    assert "pyyaml==None" in problems and "triton==None" in problems and "does not look for it" in problems


def test_dependencies_are_the_packages():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert {normalise(re.split(r"[<>=!~ ;\[]", d)[0]) for d in declared} == DEPENDENCIES


def test_pins_are_read_from_the_cell_and_the_requirements():
    assert cell_pins('PINS = ["torch==2.13.0", "x-transformers==2.31.10"]') == {
        "torch": "2.13.0",
        "x-transformers": "2.31.10",
    }
    assert requirement_pins()["torch"] == "2.13.0"
    assert cell_looks_for('NEEDS = ["attnsurvey", "triton"]\nif find_spec("x") is None: pass') == {
        "attnsurvey",
        "triton",
        "x",
    }
