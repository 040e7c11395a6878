"""The equation catalog: which code implements each survey item, which tests check it.

Every module of the package may define a module-level ``CATALOG`` list of
entries (dicts) with the fields ``id``, ``title``, ``chapter`` (notebook path),
``implemented_by`` (dotted import paths) and ``tested_by`` (pytest node ids).
This module collects them.

Ids: ``eq1`` ... ``eq46`` for the survey's numbered equations; ``table2:<row>``
for the score functions of Table II; ``table3:row01`` ... ``table3:row17`` for
Table III; ``extra:<name>`` for material from the other sources.

Command line::

    python -m attnsurvey.catalog           # coverage summary
    python -m attnsurvey.catalog --json    # the catalog as a JSON array
"""
from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from typing import Iterable

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
EXPECTED_IDS = (
    [f"eq{i}" for i in range(1, 47)] + TABLE2_IDS + [f"table3:row{i:02d}" for i in range(1, 18)]
)


def _sort_key(entry_id: str) -> tuple:
    if entry_id.startswith("eq"):
        return (0, int(entry_id[2:]), "")
    if entry_id.startswith("table2:"):
        return (1, TABLE2_IDS.index(entry_id) if entry_id in TABLE2_IDS else 99, entry_id)
    if entry_id.startswith("table3:"):
        return (2, 0, entry_id)
    return (3, 0, entry_id)


def _iter_modules() -> Iterable[str]:
    import attnsurvey

    yield "attnsurvey"
    for info in pkgutil.walk_packages(attnsurvey.__path__, prefix="attnsurvey."):
        if info.name.split(".")[-1] in {"__main__", "catalog"}:
            continue
        yield info.name


def entries() -> list[dict]:
    """All catalog entries of the package, sorted in survey order.

    Raises ``ValueError`` if an entry lacks a field or an id is defined twice.
    """
    found: dict[str, dict] = {}
    for name in _iter_modules():
        module = importlib.import_module(name)
        for entry in getattr(module, "CATALOG", []):
            missing = [f for f in FIELDS if f not in entry]
            if missing:
                raise ValueError(f"catalog entry {entry.get('id')!r} in {name} lacks {missing}")
            if entry["id"] in found:
                raise ValueError(f"catalog id {entry['id']!r} defined twice (again in {name})")
            found[entry["id"]] = {**{f: entry[f] for f in FIELDS}, "module": name}
    return sorted(found.values(), key=lambda e: _sort_key(e["id"]))


def for_chapter(chapter: str) -> list[dict]:
    """Entries whose ``chapter`` is the given notebook path (e.g. ``chapters/ch02_...ipynb``)."""
    return [e for e in entries() if e["chapter"] == chapter]


def _markdown_table(rows: list[dict]) -> str:
    lines = ["| item | what | implemented by | tested by |", "| --- | --- | --- | --- |"]
    for e in rows:
        impl = "<br>".join(f"`{p}`" for p in e["implemented_by"])
        tests = "<br>".join(f"`{t}`" for t in e["tested_by"])
        lines.append(f"| {e['id']} | {e['title']} | {impl} | {tests} |")
    return "\n".join(lines)


def chapter_table(chapter: str):
    """Display the "where is this implemented" table of one chapter (for notebooks)."""
    from IPython.display import Markdown

    rows = for_chapter(chapter)
    if not rows:
        raise ValueError(f"no catalog entries for chapter {chapter!r}")
    return Markdown(_markdown_table(rows))


def full_table():
    """Display the whole catalog as a Markdown table (for the appendix)."""
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
    parser = argparse.ArgumentParser(prog="python -m attnsurvey.catalog", description=__doc__.split("\n")[0])
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
    raise SystemExit(main())
