"""Launch buttons are configured but switched on only with a repository URL (book/_ext/launch_switch.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import launch_switch  # noqa: E402

BUTTONS = {
    "notebook_interface": "jupyterlab",
    "binderhub_url": "https://mybinder.org",
    "colab_url": "https://colab.research.google.com",
    "thebe": False,
}


@pytest.mark.parametrize("url", ["", "   ", None])
def test_no_repository_url_switches_launch_buttons_off(url):
    config = SimpleNamespace(html_theme_options={"repository_url": url, "launch_buttons": dict(BUTTONS)})
    launch_switch.switch(None, config)
    assert config.html_theme_options["launch_buttons"] == {"notebook_interface": "jupyterlab"}


def test_repository_url_keeps_launch_buttons():
    config = SimpleNamespace(
        html_theme_options={"repository_url": "https://github.com/o/r", "launch_buttons": dict(BUTTONS)}
    )
    launch_switch.switch(None, config)
    assert config.html_theme_options["launch_buttons"] == BUTTONS


def test_built_chapter_pages_offer_the_notebook_and_no_launch_link():
    page = ROOT / "_build" / "html" / "chapters" / "ch02_general_attention_model.html"
    if not page.is_file():
        pytest.skip("no built book (make book)")
    html = page.read_text(encoding="utf-8")
    assert "_sources/chapters/ch02_general_attention_model.ipynb" in html, "no .ipynb download link"
    assert (ROOT / "_build" / "html" / "_sources" / "chapters" / "ch02_general_attention_model.ipynb").is_file()
    assert "mybinder.org" not in html and "colab.research.google.com" not in html
