"""Write the catalog's tests index: which tests check each catalog id (a development tool).

The package's catalog (:mod:`attnsurvey.catalog`) names, for each survey item, the
tests that check it. Those tests live in the repository, not in the installed
package, so this tool reads ``tests/`` with :mod:`ast` (nothing is imported or
run), collects every ``@pytest.mark.catalog(...)`` marker and writes the index
``src/attnsurvey/catalog_tests.json``, which is installed with the package.
``tests/test_catalog.py`` fails when the index no longer matches the tests.

    .venv/bin/python -m tools.catalog_index          # rewrite the index
    .venv/bin/python -m tools.catalog_index --check  # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = ROOT / "tests"
INDEX = ROOT / "src" / "attnsurvey" / "catalog_tests.json"


def _marker_ids(decorator: ast.expr) -> tuple[list[str], bool] | None:
    """The ids of a ``@pytest.mark.catalog(...)`` decorator, and its ``by_param`` flag."""
    if not isinstance(decorator, ast.Call):
        return None
    func = decorator.func
    if not (isinstance(func, ast.Attribute) and func.attr == "catalog"):
        return None
    if not (isinstance(func.value, ast.Attribute) and func.value.attr == "mark"):
        return None
    ids = [a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    by_param = any(
        k.arg == "by_param" and isinstance(k.value, ast.Constant) and k.value.value for k in decorator.keywords
    )
    return ids, by_param


def _marked_tests(tree: ast.Module) -> Iterator[tuple[str, list[str], bool]]:
    for node in tree.body:
        functions = [(node.name, node)] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else []
        if isinstance(node, ast.ClassDef):
            functions = [
                (f"{node.name}::{sub.name}", sub)
                for sub in node.body
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
        for name, fn in functions:
            for decorator in fn.decorator_list:
                found = _marker_ids(decorator)
                if found is not None:
                    yield name, found[0], found[1]


def tested_by(tests_dir: Path = TESTS_DIR) -> dict[str, list[str]]:
    """id -> pytest node ids of the tests marked ``@pytest.mark.catalog(id)``, in file order.

    Reads the test files with :mod:`ast`; nothing is imported or run. Returns
    an empty mapping when ``tests_dir`` does not exist (an installed package).
    """
    found: dict[str, list[str]] = {}
    if not tests_dir.is_dir():
        return found
    for path in sorted(tests_dir.rglob("test_*.py")):
        rel = path.relative_to(tests_dir.parent).as_posix()
        for name, ids, by_param in _marked_tests(ast.parse(path.read_text(), filename=str(path))):
            for id_ in ids:
                found.setdefault(id_, []).append(f"{rel}::{name}[{id_}]" if by_param else f"{rel}::{name}")
    return found


def render(index: dict[str, list[str]]) -> str:
    """The index as the JSON text stored in the package (ids sorted, one line per id)."""
    return json.dumps(dict(sorted(index.items())), indent=0) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the stored index is stale")
    args = parser.parse_args(argv)
    text = render(tested_by())
    if args.check:
        stale = not INDEX.exists() or INDEX.read_text() != text
        print(f"{INDEX.relative_to(ROOT)} is {'stale: run python -m tools.catalog_index' if stale else 'up to date'}")
        return int(stale)
    INDEX.write_text(text)
    print(f"wrote {INDEX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
