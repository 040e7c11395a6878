"""The equation catalog: which code implements each survey item, which tests check it.

The catalog is declared where the code is, never in a separate table:

* **Code** carries a decorator naming the survey items it implements. The
  object that *defines* an item also gives its title and the chapter that
  teaches it (by default the ``CHAPTER`` constant of its module; ``chapter=``
  overrides it); every other object implementing the same item names the id only::

      from ..catalog import catalogued

      CHAPTER = "chapters/ch03_2_1_attention_scoring.ipynb"  # once per module

      @catalogued("table2:additive", title="Additive score w^T act(W_1 q + W_2 k_l + b)")
      def additive_score(...): ...

      @catalogued("table2:additive")
      class AdditiveScore(nn.Module): ...

  Decorators stack (one per titled id) and one decorator may list several ids
  without a title. The decorator only records ``obj.__module__`` and
  ``obj.__qualname__`` in this module's registry and returns the object
  unchanged. Objects a decorator cannot reach (a module constant, an alias)
  are declared with :func:`declare` right after their definition.
* **Tests** carry a pytest marker, ``@pytest.mark.catalog("table2:additive")``
  (registered in ``pyproject.toml``). ``tested_by`` is collected by reading
  ``tests/`` with :mod:`ast`, so the catalog is complete without running pytest.
  A parametrised test whose parameter ids are catalog ids marks itself with
  ``by_param=True``; its node ids then carry the parameter, ``test_x[table3:row01]``.

:func:`entries` imports every module of the package (which runs the
decorators) and joins the declarations with the markers.

Ids: ``eq1`` ... ``eq46`` for the survey's numbered equations; ``table2:<row>``
for the score functions of Table II; ``table3:row01`` ... ``table3:row17`` for
Table III; ``extra:<name>`` for material from the other sources.

Command line::

    python -m attnsurvey.catalog           # coverage summary
    python -m attnsurvey.catalog --json    # the catalog as a JSON array
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import pkgutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

FIELDS = ("id", "title", "chapter", "implemented_by", "tested_by")

TABLE2_IDS = [
    "table2:additive",
    "table2:multiplicative",
    "table2:scaled-multiplicative",
    "table2:general",
    "table2:biased-general",
    "table2:activated-general",
    "table2:similarity",
]
#: Every survey item the book promises to cover, in survey order.
EXPECTED_IDS = [f"eq{i}" for i in range(1, 47)] + TABLE2_IDS + [f"table3:row{i:02d}" for i in range(1, 18)]

#: Where the tests live when the package is used from a checkout (``src/`` layout).
TESTS_DIR = Path(__file__).resolve().parents[2] / "tests"

T = TypeVar("T")


@dataclass(frozen=True)
class _Declaration:
    title: str
    chapter: str
    target: str  # the dotted path that declared the title


#: id -> title and chapter, given once per id.
_DECLARED: dict[str, _Declaration] = {}
#: id -> dotted paths implementing it, in registration order (the declaring one first).
_IMPLEMENTED: dict[str, list[str]] = {}


def _check_arguments(target: str, ids: tuple[str, ...], title: str | None, chapter: str | None) -> None:
    if not ids:
        raise ValueError(f"catalog declaration for {target} names no id")
    if (title is not None or chapter is not None) and (len(ids) != 1 or not title or chapter == ""):
        raise ValueError(f"{target}: a title and a chapter go with exactly one id, got ids={ids}")


def _module_chapter(target: str) -> str:
    """The ``CHAPTER`` constant of the module that defines the dotted path ``target``."""
    module = target
    while "." in module:
        module = module.rpartition(".")[0]
        if module in sys.modules:
            chapter = getattr(sys.modules[module], "CHAPTER", None)
            if isinstance(chapter, str) and chapter:
                return chapter
            raise ValueError(f"{target}: a title needs a chapter; pass chapter= or define CHAPTER in {module}")
    raise ValueError(f"{target}: a title needs a chapter, and no imported module defines it")


def declare(target: str, *ids: str, title: str | None = None, chapter: str | None = None) -> None:
    """Record that the object at dotted path ``target`` implements the catalog items ``ids``.

    With ``title`` exactly one id is allowed and ``target`` becomes the item's
    defining object; its ``chapter`` (a notebook path) defaults to the
    ``CHAPTER`` constant of the module that defines ``target``. Declaring the
    same pair again (a module reloaded) is a no-op.

    Raises ``ValueError`` for no ids, a title or chapter with several ids, a
    title with no chapter (none given and the module has no ``CHAPTER``), and
    an id given a title by two different objects.
    """
    _check_arguments(target, ids, title, chapter)
    if title is not None:
        chapter = _module_chapter(target) if chapter is None else chapter
        previous = _DECLARED.get(ids[0])
        if previous is not None and previous.target != target:
            raise ValueError(f"catalog id {ids[0]!r} defined twice: by {previous.target} and by {target}")
        _DECLARED[ids[0]] = _Declaration(title, chapter, target)
    for id_ in ids:
        paths = _IMPLEMENTED.setdefault(id_, [])
        if target not in paths:
            paths.append(target)


def catalogued(*ids: str, title: str | None = None, chapter: str | None = None) -> Callable[[T], T]:
    """Decorator: the decorated function or class implements the catalog items ``ids``.

    See :func:`declare` for ``title`` and ``chapter`` (by default the ``CHAPTER``
    of the object's module). Returns the object unchanged.
    """
    _check_arguments("@catalogued", ids, title, chapter)

    def register(obj: T) -> T:
        named: Any = obj  # a function or class: it has __module__ and __qualname__
        declare(f"{named.__module__}.{named.__qualname__}", *ids, title=title, chapter=chapter)
        return obj

    return register


# --------------------------------------------------------------------------- tests


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


# --------------------------------------------------------------------------- the catalog


def _iter_modules() -> Iterable[str]:
    package = importlib.import_module(__package__ or "attnsurvey")
    yield package.__name__
    for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
        if info.name.split(".")[-1] != "__main__":
            yield info.name


def _sort_key(entry_id: str) -> tuple[int, int, str]:
    if entry_id.startswith("eq"):
        return (0, int(entry_id[2:]), "")
    if entry_id.startswith("table2:"):
        return (1, TABLE2_IDS.index(entry_id) if entry_id in TABLE2_IDS else 99, entry_id)
    if entry_id.startswith("table3:"):
        return (2, 0, entry_id)
    return (3, 0, entry_id)


def entries() -> list[dict[str, Any]]:
    """All catalog entries of the package, sorted in survey order.

    Each entry is a dict with the fields of ``FIELDS`` and ``module`` (the
    module of the defining object). Imports every module of the package.
    Raises ``ValueError`` if an id is implemented somewhere but never given a
    title and chapter.
    """
    for name in _iter_modules():
        importlib.import_module(name)
    untitled = sorted(set(_IMPLEMENTED) - set(_DECLARED))
    if untitled:
        raise ValueError(
            f"catalog ids without a title and chapter: {untitled} (implemented by {[_IMPLEMENTED[i] for i in untitled]})"
        )
    tests = tested_by()
    rows = []
    for id_, decl in _DECLARED.items():
        impl = _IMPLEMENTED[id_]
        rows.append(
            {
                "id": id_,
                "title": decl.title,
                "chapter": decl.chapter,
                "implemented_by": [decl.target] + [p for p in impl if p != decl.target],
                "tested_by": tests.get(id_, []),
                "module": decl.target.rsplit(".", 1)[0],
            }
        )
    return sorted(rows, key=lambda e: _sort_key(e["id"]))


def for_chapter(chapter: str) -> list[dict[str, Any]]:
    """Entries whose ``chapter`` is the given notebook path (e.g. ``chapters/ch02_...ipynb``)."""
    return [e for e in entries() if e["chapter"] == chapter]


def _markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| item | what | implemented by | tested by |", "| --- | --- | --- | --- |"]
    for e in rows:
        impl = "<br>".join(f"`{p}`" for p in e["implemented_by"])
        tests = "<br>".join(f"`{t}`" for t in e["tested_by"])
        lines.append(f"| {e['id']} | {e['title']} | {impl} | {tests} |")
    return "\n".join(lines)


def chapter_table(chapter: str) -> Any:
    """Display the "where is this implemented" table of one chapter (for notebooks).

    Returns an ``IPython.display.Markdown``; raises ``ValueError`` for a chapter without entries.
    """
    from IPython.display import Markdown

    rows = for_chapter(chapter)
    if not rows:
        raise ValueError(f"no catalog entries for chapter {chapter!r}")
    return Markdown(_markdown_table(rows))


def full_table() -> Any:
    """Display the whole catalog as a Markdown table (an ``IPython.display.Markdown``, for the appendix)."""
    from IPython.display import Markdown

    return Markdown(_markdown_table(entries()))


def summary() -> str:
    """A coverage summary: how many expected items are catalogued, and which are not."""
    ids = {e["id"] for e in entries()}
    missing = [i for i in EXPECTED_IDS if i not in ids]
    extras = sorted(i for i in ids if i.startswith("extra:"))
    lines = [
        f"catalogued survey items: {len(EXPECTED_IDS) - len(missing)}/{len(EXPECTED_IDS)}",
        f"extra items from other sources: {len(extras)}",
        f"total entries: {len(ids)}",
    ]
    if missing:
        lines.append("not yet catalogued: " + ", ".join(missing))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line: a coverage summary, or the catalog as JSON with ``--json``."""
    parser = argparse.ArgumentParser(prog="python -m attnsurvey.catalog", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the catalog as a JSON array")
    args = parser.parse_args(argv)
    if args.json:
        rows = [{f: e[f] for f in FIELDS} for e in entries()]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(summary())
    return 0


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: the decorators
    # register into ``attnsurvey.catalog``'s registry.
    from attnsurvey.catalog import main as _main

    raise SystemExit(_main())
