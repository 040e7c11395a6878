"""Every chapter follows the conventions that make its stored outputs a specification."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

from attnsurvey.numeric_env import KERNEL_NAME

from .helpers import vendor_dependent_calls

ROOT = Path(__file__).resolve().parent.parent


def _toc_notebooks() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [ch["file"] for part in toc["parts"] for ch in part["chapters"]]
    return [f + ".ipynb" for f in files if (ROOT / (f + ".ipynb")).is_file()]


NOTEBOOKS = _toc_notebooks()


def _code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_chapter_runs_in_the_pinned_kernel_and_checks_it_first(path):
    nb = nbformat.read(ROOT / path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL_NAME, "execute it with `make execute`"
    first = _code(nb)[0].source
    assert "numeric_env.check()" in first, "the first code cell must print numeric_env.check()"


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_chapter_avoids_vendor_dependent_kernels(path):
    """Square roots and Adam go through numeric_env, as in the package (tests/test_numeric_env.py)."""
    nb = nbformat.read(ROOT / path, as_version=4)
    found = vendor_dependent_calls("\n".join(cell.source for cell in _code(nb)))
    assert not found, f"use numeric_env.portable_sqrt / numeric_env.portable_adam instead: {found}"


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_widgets_are_precomputed_and_nothing_measured_is_compared(path):
    nb = nbformat.read(ROOT / path, as_version=4)
    for cell in _code(nb):
        src = cell.source
        assert not re.search(r"\binteract(_manual)?\(", src), "use attnsurvey.widgets.explore, not interact"
        # every cell is compared: a widget's results live in widget state, which nbval skips, so explore's
        # Explorer puts them in its plain text, which nbval compares (a bare widget's text is a truncated repr)
        assert "nbval-ignore-output" not in cell.metadata.get("tags", []), f"an uncompared cell:\n{src[:200]}"
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                assert not data.get("text/plain", "").endswith("…"), f"show explore(...)'s Explorer:\n{src[:200]}"
        assert not re.search(
            r"\b(perf_counter|time\.time|process_time|max_memory_allocated|getrusage)\b", src
        ), f"a compared cell measures time or memory:\n{src[:200]}"
