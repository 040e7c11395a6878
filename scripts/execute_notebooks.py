"""Execute chapter notebooks in place and store their outputs (and widget state).

This is the project's one way of producing the stored outputs that nbval
compares in CI:

    python scripts/execute_notebooks.py                 # every chapter
    python scripts/execute_notebooks.py chapters/ch02_general_attention_model.ipynb

Each notebook runs in a fresh ``attnsurvey`` kernel (installed by ``make env``;
its kernel spec pins the numeric environment of ``attnsurvey.numeric_env``,
exactly as nbval's kernels are pinned in ``make test``) with its own folder as
working directory (as nbval does). It records that kernel in the notebook's
metadata and prints the seconds each notebook took.

Each figure's alternative text, which ``attnsurvey.plotting.show`` stores in the
image output's metadata, is copied to its cell's ``mystnb.image.alt``, where
the book's builder (myst-nb) reads the ``alt`` attribute of the image
(:func:`copy_alt_texts`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_PER_CELL = 600

sys.path.insert(0, str(ROOT / "src"))
from attnsurvey.numeric_env import KERNEL_DISPLAY_NAME, KERNEL_NAME, notebook_client  # noqa: E402

KERNELSPEC = {"name": KERNEL_NAME, "display_name": KERNEL_DISPLAY_NAME, "language": "python"}


def copy_alt_texts(nb: nbformat.NotebookNode) -> int:
    """Set each code cell's ``mystnb.image.alt`` to the alternative texts of its PNG outputs
    (joined with " Next figure: " where a cell shows several; myst-nb gives one ``alt`` to every
    image of a cell) and remove a stale one from a cell that shows none. Returns the number of
    cells with images."""
    n = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        alts = [
            str(out.get("metadata", {}).get("image/png", {}).get("alt", "")).strip()
            for out in cell.get("outputs", [])
            if "image/png" in out.get("data", {})
        ]
        image = cell.metadata.get("mystnb", {}).get("image", {})
        if alts:
            n += 1
            cell.metadata.setdefault("mystnb", {}).setdefault("image", {})["alt"] = " Next figure: ".join(alts)
        elif "alt" in image:
            del image["alt"]
            if not image:
                del cell.metadata["mystnb"]["image"]
            if not cell.metadata["mystnb"]:
                del cell.metadata["mystnb"]
    return n


def execute(path: Path, write: bool = True) -> float:
    """Execute ``path`` in a fresh kernel; store the outputs unless ``write`` is False.

    Returns the seconds the execution took (kernel start included)."""
    nb = nbformat.read(path, as_version=4)
    client = notebook_client(
        nb,
        timeout=TIMEOUT_PER_CELL,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    if write:
        nb.metadata["kernelspec"] = dict(KERNELSPEC)
        copy_alt_texts(nb)
        nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.ipynb"))
    total = 0.0
    for path in paths:
        seconds = execute(path)
        total += seconds
        print(f"{seconds:7.1f} s  {path}", flush=True)
    print(f"{total:7.1f} s  total ({len(paths)} notebooks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
