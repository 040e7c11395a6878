"""The catalog is the book's index from survey items to code and tests: check it."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import types
from functools import cache
from pathlib import Path

import pytest
from tools import catalog_index

from attnsurvey import catalog

ROOT = Path(__file__).resolve().parent.parent


@cache
def _test_names(path: Path) -> frozenset[str]:
    """Names of test functions and Class::method pairs defined in a test file."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}::{sub.name}")
    return frozenset(names)


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


ENTRIES = catalog.entries()


def test_catalog_is_not_empty_and_ids_are_well_formed():
    assert len(ENTRIES) >= 5
    for e in ENTRIES:
        i = e["id"]
        assert (
            (i.startswith("eq") and i[2:].isdigit() and 1 <= int(i[2:]) <= 46)
            or i in catalog.TABLE2_IDS
            or (i.startswith("table3:row") and 1 <= int(i[10:]) <= 17)
            or (i.startswith("extra:") and len(i) > 6)
        ), f"malformed catalog id {i!r}"


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_entry_points_at_real_code_tests_and_chapter(entry):
    assert entry["title"].strip(), "empty title"
    assert (ROOT / entry["chapter"]).is_file(), f"chapter {entry['chapter']} does not exist"
    assert entry["implemented_by"], "no implementation listed"
    for dotted in entry["implemented_by"]:
        assert dotted.startswith("attnsurvey."), dotted
        _resolve(dotted)  # raises if it does not import
    assert entry["tested_by"], "catalogued item without a test"
    for node_id in entry["tested_by"]:
        file_part, _, name = node_id.partition("::")
        path = ROOT / file_part
        assert path.is_file(), f"{node_id}: no file {file_part}"
        name = name.split("[")[0]
        assert name in _test_names(path), f"{node_id}: no such test in {file_part}"


def test_every_catalogued_chapter_shows_its_implementation_table():
    chapters = {e["chapter"] for e in ENTRIES}
    for chapter in chapters:
        nb = json.loads((ROOT / chapter).read_text())
        sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        assert any(
            f'chapter_table("{chapter}")' in s for s in sources
        ), f'{chapter} has catalog entries but no chapter_table("{chapter}") cell'


def test_cli_json_and_summary(capsys):
    """``python -m attnsurvey.catalog --json`` in a fresh interpreter (the module run as ``__main__`` fills the
    imported module's registry); the summary from the same ``main`` in this process (one package-wide import is
    enough to show the command runs)."""
    out = subprocess.run(
        [sys.executable, "-m", "attnsurvey.catalog", "--json"], capture_output=True, text=True, check=True
    ).stdout
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [e["id"] for e in ENTRIES]
    assert set(rows[0]) == set(catalog.FIELDS)
    assert catalog.main([]) == 0
    assert capsys.readouterr().out.startswith("catalogued survey items: ")


def test_duplicate_ids_are_rejected(monkeypatch):
    """Two different objects may not both give an id its title; the same object again is a no-op."""
    monkeypatch.setattr(catalog, "_DECLARED", dict(catalog._DECLARED))
    monkeypatch.setattr(catalog, "_IMPLEMENTED", {k: list(v) for k, v in catalog._IMPLEMENTED.items()})

    def first():
        pass

    def second():
        pass

    assert catalog.catalogued("extra:fake", title="t", chapter="c")(first) is first  # returned unchanged
    catalog.catalogued("extra:fake", title="t", chapter="c")(first)  # a reload: no error
    with pytest.raises(ValueError, match="defined twice"):
        catalog.catalogued("extra:fake", title="t", chapter="c")(second)
    with pytest.raises(ValueError, match="exactly one id"):
        catalog.catalogued("eq1", "eq2", title="t", chapter="c")
    with pytest.raises(ValueError, match="names no id"):
        catalog.catalogued()(first)


def test_chapter_defaults_to_the_modules_chapter(monkeypatch):
    """A title without ``chapter=`` takes the defining module's ``CHAPTER``; no ``CHAPTER`` is an error."""
    monkeypatch.setattr(catalog, "_DECLARED", dict(catalog._DECLARED))
    monkeypatch.setattr(catalog, "_IMPLEMENTED", {k: list(v) for k, v in catalog._IMPLEMENTED.items()})
    module = types.ModuleType("attnsurvey_fake_chapter_module")
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def defined_here():
        pass

    defined_here.__module__ = module.__name__
    with pytest.raises(ValueError, match="define CHAPTER in attnsurvey_fake_chapter_module"):
        catalog.catalogued("extra:fake", title="t")(defined_here)
    module.CHAPTER = "chapters/fake.ipynb"  # type: ignore[attr-defined]
    catalog.catalogued("extra:fake", title="t")(defined_here)
    assert catalog._DECLARED["extra:fake"].chapter == "chapters/fake.ipynb"
    catalog.catalogued("extra:other", title="t", chapter="chapters/other.ipynb")(defined_here)
    assert catalog._DECLARED["extra:other"].chapter == "chapters/other.ipynb"  # an explicit chapter wins


def test_implemented_but_untitled_ids_are_rejected(monkeypatch):
    monkeypatch.setattr(catalog, "_IMPLEMENTED", {**catalog._IMPLEMENTED, "extra:orphan": ["attnsurvey.x.y"]})
    with pytest.raises(ValueError, match="without a title"):
        catalog.entries()


def test_test_markers_name_catalogued_ids_and_exist():
    """Every ``@pytest.mark.catalog`` id is an entry of the catalog (no typo goes unnoticed)."""
    ids = {e["id"] for e in ENTRIES}
    marked = catalog.tested_by()
    assert marked, "no test carries a catalog marker"
    unknown = sorted(set(marked) - ids)
    assert not unknown, f"tests are marked with ids the catalog does not have: {unknown}"


def test_markers_are_read_from_source(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n"
        "@pytest.mark.catalog('eq1', 'eq2')\n"
        "def test_a():\n    pass\n"
        "class TestB:\n"
        "    @pytest.mark.catalog('eq2')\n"
        "    def test_b(self):\n        pass\n"
        "@pytest.mark.catalog('table3:row01', by_param=True)\n"
        "@pytest.mark.parametrize('r', [1])\n"
        "def test_c(r):\n    pass\n"
        "def test_unmarked():\n    pass\n"
    )
    found = catalog_index.tested_by(tmp_path / "tests")
    assert found == {
        "eq1": ["tests/test_x.py::test_a"],
        "eq2": ["tests/test_x.py::test_a", "tests/test_x.py::TestB::test_b"],
        "table3:row01": ["tests/test_x.py::test_c[table3:row01]"],
    }
    assert catalog_index.tested_by(tmp_path / "missing") == {}


def test_installed_tests_index_is_up_to_date():
    """The index shipped with the package equals a fresh read of tests/ (else: python -m tools.catalog_index)."""
    fresh = catalog_index.tested_by()  # reads every test file
    assert catalog_index.INDEX.read_text() == catalog_index.render(
        fresh
    ), "src/attnsurvey/catalog_tests.json is stale: run .venv/bin/python -m tools.catalog_index"
    assert catalog.tested_by() == fresh


def test_every_survey_item_is_catalogued():
    """Eq. (1)-(46), every row of Table II and every row of Table III has an entry."""
    ids = {e["id"] for e in ENTRIES}
    missing = [i for i in catalog.EXPECTED_IDS if i not in ids]
    assert not missing, f"survey items without code and tests: {missing}"


def test_the_modules_the_catalog_skips_declare_nothing_and_skipping_them_keeps_triton_out():
    """NOT_WALKED: importing such a module adds no catalog entry or implementer (so skipping it loses nothing), and
    a fresh process that builds a chapter's table has not imported Triton (the reason for the skip)."""
    before = {i: list(paths) for i, paths in catalog._IMPLEMENTED.items()}
    declared = dict(catalog._DECLARED)
    for name in catalog.NOT_WALKED:
        importlib.import_module(f"attnsurvey.{name}")
    assert catalog._IMPLEMENTED == before and catalog._DECLARED == declared
    probe = (
        "import sys; from attnsurvey.catalog import chapter_table; "
        "chapter_table('chapters/ch06_tiled_attention.ipynb'); print('triton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
