"""One setting, repository.url, switches the launch buttons, the repository buttons and the install cells'
repository on; empty, the book links nowhere outside (book/_ext/launch_switch.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import yaml

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
def test_no_repository_url_switches_every_outside_link_off(url):
    config = SimpleNamespace(html_theme_options={"repository_url": url, "launch_buttons": dict(BUTTONS)})
    launch_switch.switch(None, config)
    assert config.html_theme_options["launch_buttons"] == {"notebook_interface": "jupyterlab"}
    assert [config.html_theme_options[k] for k in launch_switch.REPOSITORY_BUTTONS] == [False, False, False]


def test_repository_url_turns_on_launch_and_repository_buttons():
    config = SimpleNamespace(
        html_theme_options={"repository_url": "https://github.com/o/r", "launch_buttons": dict(BUTTONS)}
    )
    launch_switch.switch(None, config)
    assert config.html_theme_options["launch_buttons"] == BUTTONS
    assert [config.html_theme_options[k] for k in launch_switch.REPOSITORY_BUTTONS] == [True, True, True]


def test_the_switch_reads_the_books_settings(tmp_path):
    """jupyter-book's shallow merge drops repository and launch_buttons from the theme options; the switch
    reads them from _config.yml (here a copy with the URL set) and only fills in what is missing."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["repository"]["url"] = "https://github.com/o/r"
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    theme = SimpleNamespace(html_theme_options={"search_bar_text": "Search this book..."})
    launch_switch.switch(SimpleNamespace(srcdir=str(tmp_path)), theme)
    options = theme.html_theme_options
    assert options["repository_url"] == "https://github.com/o/r" and options["repository_branch"] == "main"
    assert options["launch_buttons"] == config["launch_buttons"] and options["use_issues_button"] is True
    assert options["search_bar_text"] == "Search this book..."
    off = SimpleNamespace(html_theme_options={})
    launch_switch.switch(SimpleNamespace(srcdir=str(ROOT)), off)
    assert off.html_theme_options["launch_buttons"] == {"notebook_interface": "jupyterlab"}
    assert not any(off.html_theme_options[k] for k in launch_switch.REPOSITORY_BUTTONS)


def test_config_has_one_switch_and_it_is_off():
    """No button is set by hand in _config.yml (jupyter-book would refuse one without a URL): the URL decides."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == ""
    assert not set(config.get("html", {})) & set(launch_switch.REPOSITORY_BUTTONS)


def _notebooks() -> list[Path]:
    return sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.ipynb"))


def test_every_install_cell_holds_the_configured_repository():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    for path in _notebooks():
        install = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert launch_switch.install_cell_repository(install.source) == config["repository"]["url"], path.name


def test_sync_writes_the_url_into_the_install_cell_only(tmp_path):
    source = ROOT / "chapters" / "ch02_general_attention_model.ipynb"
    copy = tmp_path / source.name
    shutil.copy(source, copy)
    url = "https://github.com/o/r"
    assert launch_switch.sync_install_cells([copy], url) == [copy]
    before, after = source.read_text().splitlines(), copy.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and changed == [(a, a.replace('\\"\\"', f'\\"{url}\\"')) for a, _ in changed]
    assert len(changed) == 1 and launch_switch.install_cell_repository(nbformat.read(copy, 4).cells[1].source) == url
    assert launch_switch.sync_install_cells([copy], url) == []  # already in place: nothing written
    assert launch_switch.sync_install_cells([copy], "") == [copy] and copy.read_text() == source.read_text()
    with pytest.raises(ValueError, match="string literal"):
        launch_switch.sync_install_cells([copy], 'https://x/"y')


def test_built_chapter_pages_offer_the_notebook_and_no_launch_link():
    page = ROOT / "_build" / "html" / "chapters" / "ch02_general_attention_model.html"
    if not page.is_file():
        pytest.skip("no built book (make book)")
    html = page.read_text(encoding="utf-8")
    assert "_sources/chapters/ch02_general_attention_model.ipynb" in html, "no .ipynb download link"
    assert (ROOT / "_build" / "html" / "_sources" / "chapters" / "ch02_general_attention_model.ipynb").is_file()
    assert "mybinder.org" not in html and "colab.research.google.com" not in html
    assert "github.com" not in html and "edit this page" not in html.lower()
