"""CONTRIBUTING matches the code: its worked examples apply and pass, its layer table lists every module.

Each ``### Worked example`` section of CONTRIBUTING.md shows its change as ``diff`` blocks. The test copies
``src/`` and ``tests/`` into a temporary tree, applies each section's patch with ``git apply``, then runs, in a
fresh interpreter that imports the patched copy, what ``make lint`` and ``make test`` would: ruff (lint and
format) on the files the patch touches, mypy on its source files, and pytest on its test files,
``test_catalog.py`` and ``test_architecture.py``. A worked example the code has moved away from fails here
instead of misleading a contributor. Both patches go into one copy (they touch different files), so mypy runs
once; and it starts from the cache that ``make lint``'s mypy left in ``.mypy_cache`` (hard-linked into the
copy, see :func:`reuse_mypy_cache`), so only the patched modules are checked again instead of the whole
package and torch's stubs (cold: about 100 s of CPU on the 2-core CI machine; warm: about 20 s).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tools import architecture as arch

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


def worked_examples(text: str) -> dict[str, str]:
    """Heading -> the concatenated ``diff`` blocks of each ``### Worked example`` section of ``text``."""
    examples = {}
    for section in re.split(r"^#{2,3} ", text, flags=re.M):
        title, _, body = section.partition("\n")
        if title.startswith("Worked example"):
            examples[title] = "".join(re.findall(r"^```diff\n(.*?)^```", body, flags=re.M | re.S))
    return examples


EXAMPLES = worked_examples(CONTRIBUTING)


def touched(patch: str) -> list[str]:
    """The files a patch creates or changes (its ``+++ b/...`` lines)."""
    return re.findall(r"^\+\+\+ b/(\S+)$", patch, flags=re.M)


def test_contributing_shows_both_worked_examples_as_patches():
    assert set(EXAMPLES) == {
        "Worked example: adding a score function",
        "Worked example: adding a Transformer variant",
    }
    for title, patch in EXAMPLES.items():
        files = touched(patch)
        assert any(f.startswith("src/") for f in files) and any(f.startswith("tests/") for f in files), title


def test_worked_examples_parser_keeps_only_the_diff_blocks():
    text = "## A\n### Worked example: x\nprose\n```diff\n+a\n```\n```python\nb\n```\n```diff\n+c\n```\n## B\n"
    assert worked_examples(text) == {"Worked example: x": "+a\n+c\n"}


def reuse_mypy_cache(source: Path, target: Path) -> int:
    """Hard-link the mypy cache at ``source`` into ``target`` (a fresh folder); returns the files linked.

    mypy trusts a cached module whose source has the same hash, whatever its path, and writes a changed
    entry (``*.meta.json``, ``*.data.json``) to a new file that it then renames over the old name: the
    copy's writes never reach ``source``, which stays ``make lint``'s. The few other files (mypy rewrites
    ``missing_stubs`` in place) are copied. Nothing is linked when ``source`` is absent (mypy then starts
    cold); on another file system everything is copied.
    """
    if not source.is_dir():
        return 0

    def link(src: str, dst: str) -> None:
        try:
            if not src.endswith(".json"):
                raise OSError("written in place: copy")
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)
    return sum(1 for p in target.rglob("*") if p.is_file())


def test_reused_mypy_cache_is_never_written_through(tmp_path):
    """The hard links are safe: a rewrite in the copy (as mypy does it: new file, then rename) leaves the source."""
    (tmp_path / "lint" / "3.11").mkdir(parents=True)
    (tmp_path / "lint" / "3.11" / "m.meta.json").write_text("lint")
    (tmp_path / "lint" / "missing_stubs").write_text("lint")
    assert reuse_mypy_cache(tmp_path / "lint", tmp_path / "copy") == 2
    assert (tmp_path / "copy" / "3.11" / "m.meta.json").stat().st_nlink == 2  # linked, not copied
    (tmp_path / "copy" / "3.11" / "new").write_text("patched")
    os.replace(tmp_path / "copy" / "3.11" / "new", tmp_path / "copy" / "3.11" / "m.meta.json")
    (tmp_path / "copy" / "missing_stubs").write_text("patched")
    assert (tmp_path / "lint" / "3.11" / "m.meta.json").read_text() == "lint"
    assert (tmp_path / "lint" / "missing_stubs").read_text() == "lint"
    assert reuse_mypy_cache(tmp_path / "absent", tmp_path / "other") == 0


def test_worked_examples_apply_and_pass(tmp_path):
    """Both examples in one copy (their patches touch different files): one mypy run, one pytest run."""
    for folder in ("src", "tests", "tools"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for folder in ("chapters", "book"):  # read by test_catalog and test_architecture
        (tmp_path / folder).symlink_to(ROOT / folder)
    reuse_mypy_cache(ROOT / ".mypy_cache", tmp_path / ".mypy_cache")  # the copy's pyproject.toml: same options
    files: list[str] = []
    for title, patch in EXAMPLES.items():
        applied = subprocess.run(["git", "apply", "-"], input=patch, cwd=tmp_path, text=True, capture_output=True)
        assert applied.returncode == 0, f"{title}: the patch does not apply:\n{applied.stderr}"
        files += touched(patch)

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    # the copy, not the installed checkout, is what runs; and the core takes the new score by its name
    probe = (
        "import attnsurvey, pathlib, torch; from attnsurvey.attention import attend\n"
        "X = torch.ones(1, 4, 3); attend(X, X, X, score='manhattan')\n"
        "print(pathlib.Path(attnsurvey.__file__).resolve())"
    )
    where = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, text=True, capture_output=True)
    assert where.stdout.strip().startswith(str(tmp_path.resolve())), where.stdout + where.stderr
    for command in (
        [BIN / "ruff", "check", *files],
        [BIN / "ruff", "format", "--check", *files],
        [BIN / "mypy", *(f for f in files if f.startswith("src/"))],
        [sys.executable, "-m", "tools.catalog_index"],  # the new tests' markers, as CONTRIBUTING says
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "tests/test_catalog.py", "tests/test_architecture.py"]
        + [f for f in files if f.startswith("tests/")],
    ):
        done = subprocess.run(command, cwd=tmp_path, env=env, text=True, capture_output=True)
        assert done.returncode == 0, f"{' '.join(map(str, command[:3]))} failed:\n{done.stdout[-3000:]}"


def layer_table(text: str) -> dict[str, str]:
    """Dotted module or package name (below ``attnsurvey``) -> layer, from the layer table of ``text``.

    Cells name modules in backticks: ``name``, ``pkg/*`` (every module of ``pkg``) or ``pkg/{a,b}``;
    other backticked words in a cell (function names) map to nothing that exists and are harmless.
    """
    table = {}
    for layer, cell in re.findall(r"^\| (foundations|data|mechanisms|chapter support) \| (.*?) \|", text, flags=re.M):
        for token in re.findall(r"`([^`]+)`", cell):
            braces = re.fullmatch(r"([\w/]*)\{([\w,]+)\}", token)
            names = [braces.group(1) + n for n in braces.group(2).split(",")] if braces else [token]
            table.update({n.removesuffix("/*").replace("/", "."): layer for n in names})
    return table


def test_layer_table_places_every_module_in_its_layer():
    table = layer_table(CONTRIBUTING)
    assert set(table.values()) == {"foundations", "data", "mechanisms", "chapter support"}
    for module in arch.module_names():
        rel = module.partition(".")[2]
        if not rel or (arch.ROOT / rel.replace(".", "/")).is_dir():
            continue  # the package itself and package __init__s
        parts = rel.split(".")
        covering = next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in table), None)
        assert covering is not None, f"CONTRIBUTING's layer table does not list {module}"
        assert table[covering] == arch.layer_of(module), module


def test_layer_table_parser():
    text = "| data | `data/*` | x |\n| mechanisms | `attention` (`attend`), `fr/{a,b}` | y |\n"
    assert layer_table(text) == {"data": "data", "attention": "mechanisms", "attend": "mechanisms"} | {
        "fr.a": "mechanisms",
        "fr.b": "mechanisms",
    }
