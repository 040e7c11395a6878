"""Every figure carries an alternative text that says what it shows (issue 39, accessibility).

:func:`attnsurvey.plotting.describe_figure` derives it from the figure (or returns the one set
with :func:`~attnsurvey.plotting.set_alt`), :func:`~attnsurvey.plotting.show` stores it with the
image, ``scripts/execute_notebooks.py`` copies it to the cell's ``mystnb.image.alt``, and myst-nb
writes it as the image's ``alt`` attribute in the book.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import nbformat
import pytest
import torch

from attnsurvey.plotting import attention_heatmap, describe_figure, set_alt, show, trend_plot

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from execute_notebooks import copy_alt_texts  # noqa: E402

NOTEBOOKS = sorted(ROOT.glob("chapters/*.ipynb")) + sorted(ROOT.glob("book/*.ipynb"))


def test_a_heat_map_is_described_by_its_title_panels_and_axes():
    w = torch.softmax(torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)), -1)
    fig = attention_heatmap(w, titles=["head 1", "head 2"], xlabel="key", ylabel="query", suptitle="two heads")
    assert describe_figure(fig) == (
        "Figure 'two heads' with 2 panels: (1) heat map 'head 1', rows: query, columns: key; "
        "(2) heat map 'head 2', columns: key."
    )
    plt.close(fig)


def test_a_trend_plot_names_its_axes_and_series():
    fig, ax = plt.subplots()
    trend_plot(
        [1, 2, 3],
        {"attention": [[0.9, 0.8], [0.8, 0.7], [0.7, 0.6]], "none": [[0.5, 0.4], [0.4, 0.3], [0.3, 0.2]]},
        ax=ax,
        xlabel="length",
        ylabel="accuracy",
    )
    text = describe_figure(fig)
    assert text.startswith("Figure: line chart of accuracy against length; series: "), text
    assert "attention" in text and "none" in text
    plt.close(fig)


def test_a_diagram_lists_its_labels_and_an_author_text_wins():
    fig, ax = plt.subplots()
    ax.axis("off")
    ax.text(0.1, 0.5, "query q")
    ax.text(0.6, 0.5, "keys K")
    assert describe_figure(fig) == "Figure: diagram with the labels query q; keys K."
    set_alt(fig, "The query is compared with every key.")
    assert describe_figure(fig) == "The query is compared with every key."
    with pytest.raises(ValueError, match="must not be empty"):
        set_alt(fig, "  ")
    plt.close(fig)


def test_show_stores_the_text_with_the_image(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append((a, k)))
    fig, ax = plt.subplots()
    ax.bar([0, 1], [0.3, 0.7])
    ax.set_title("weights")
    show(fig)
    ((data,), kwargs) = shown[0]
    assert data["text/plain"] == "Figure: bar chart 'weights'."
    assert kwargs == {"raw": True, "metadata": {"image/png": {"alt": "Figure: bar chart 'weights'."}}}
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")


def test_execution_copies_the_texts_to_the_cells_and_drops_stale_ones():
    png = {"output_type": "display_data", "data": {"image/png": "AA==", "text/plain": "a"}, "metadata": {}}
    one = dict(png, metadata={"image/png": {"alt": "first"}})
    two = dict(png, metadata={"image/png": {"alt": "second"}})
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("show(a); show(b)", outputs=[nbformat.from_dict(one), nbformat.from_dict(two)]),
        nbformat.v4.new_code_cell("print(1)", metadata={"mystnb": {"image": {"alt": "stale"}}}),
        nbformat.v4.new_markdown_cell("text"),
    ]
    assert copy_alt_texts(nb) == 1
    assert nb.cells[0].metadata["mystnb"]["image"]["alt"] == "first Next figure: second"
    assert "mystnb" not in nb.cells[1].metadata


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_stored_figure_has_its_alternative_text(path):
    """Every PNG a chapter shows has an alternative text in its output and in its cell's metadata
    (a chapter executed before ``show`` stored them, or by another route, fails here)."""
    missing = []
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        pngs = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        if not pngs:
            continue
        texts = [o.get("metadata", {}).get("image/png", {}).get("alt", "") for o in pngs]
        if not all(len(t.split()) >= 3 for t in texts):
            missing.append(f"cell {i}: an image without an alternative text of three words or more")
        elif cell["metadata"].get("mystnb", {}).get("image", {}).get("alt") != " Next figure: ".join(texts):
            missing.append(f"cell {i}: mystnb.image.alt differs from its images' texts (re-execute the chapter)")
    assert not missing, missing


def test_math_in_labels_is_read_as_words():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_title("$\\hat y = \\sum_i a_i y_i$, size $\\propto a_i$,\n$F = [f_1, \\dots, f_{n_f}]$")
    ax.set_xlabel("$\\mathrm{score}(q, k_l)$")
    assert describe_figure(fig) == (
        "Figure: line chart 'y-hat = sum of _i a_i y_i, size proportional to a_i, F = [f_1, ... , f_n_f]', "
        "axis: score(q, k_l)."
    )
    plt.close(fig)
