"""Sphinx extension: one setting, ``repository.url``, switches every link to the book's repository on or off.

While ``repository.url`` in ``_config.yml`` is empty (the default: the book is
built and read offline) chapter pages carry no link to an outside service: the
launch buttons for hosted notebook services (``launch_buttons``: Binder, Colab)
are removed, and so are the repository, issue and edit-this-page buttons. Set
the URL (and ``repository.branch``) and rebuild, and all of them appear:

* the launch buttons (a rocket icon; JupyterLab as the interface);
* the repository, "open an issue" and "suggest edit" buttons;
* the install cell of every notebook (the first code cell, tagged
  ``remove-cell``: hidden in the book, present in the ``.ipynb`` download) is
  given the URL (its ``REPOSITORY = "..."`` line), so a downloaded notebook,
  or one opened in Colab, installs the package from the repository. The build
  rewrites that line in the notebook sources where it differs; commit them
  with the setting (hosted services open the committed notebooks).

See book/run_it_yourself.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

PROVIDER_KEYS = ("binderhub_url", "jupyterhub_url", "colab_url", "jupyterlite_url", "thebe")
#: Theme options of the buttons that link to the repository (sphinx-book-theme).
REPOSITORY_BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button")
#: The line of a notebook's install cell that names the repository.
REPOSITORY_LINE = re.compile(r'^(    REPOSITORY = )"([^"\n]*)"', re.MULTILINE)

logger = logging.getLogger(__name__)


def repository_url(theme_options: dict) -> str:
    """The repository URL the book is configured with ('' when none)."""
    return str(theme_options.get("repository_url") or "").strip()


def launch_enabled(theme_options: dict) -> bool:
    return bool(repository_url(theme_options))


def book_settings(srcdir: str | Path) -> dict:
    """The theme options that ``_config.yml``'s ``repository`` and ``launch_buttons`` sections give.

    jupyter-book derives them, but its (shallow) merge of ``sphinx.config.html_theme_options`` from
    ``_config.yml`` replaces them, so they never reach the theme otherwise; read them from the file.
    """
    import yaml

    path = Path(srcdir) / "_config.yml"
    book = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    repository = book.get("repository") or {}
    settings = {"launch_buttons": dict(book.get("launch_buttons") or {})}
    for option, key in (("repository_url", "url"), ("repository_branch", "branch"), ("path_to_docs", "path_to_book")):
        if key in repository:
            settings[option] = repository[key]
    return settings


def switch(app: Sphinx | None, config: Config) -> None:
    """Turn the launch and repository buttons on if ``repository_url`` is set, off (all of them) if not.

    With an ``app``, the repository and launch settings of its ``_config.yml`` fill in what the theme
    options lack (:func:`book_settings`).
    """
    options = dict(config.html_theme_options or {})
    if app is not None:
        for key, value in book_settings(app.srcdir).items():
            options.setdefault(key, value)
    enabled = launch_enabled(options)
    if not enabled:
        buttons = dict(options.get("launch_buttons") or {})
        for key in PROVIDER_KEYS:
            buttons.pop(key, None)
        options["launch_buttons"] = buttons
    for key in REPOSITORY_BUTTONS:
        options[key] = enabled
    config.html_theme_options = options


def install_cell_repository(source: str) -> str | None:
    """The URL an install cell's ``REPOSITORY = "..."`` line holds, or None if ``source`` has no such line."""
    match = REPOSITORY_LINE.search(source)
    return None if match is None else match.group(2)


def sync_install_cells(notebooks: list[Path], url: str) -> list[Path]:
    """Write ``url`` into the install cell of each notebook whose cell holds another; return the notebooks changed.

    Only that line of that cell changes (the notebooks are in nbformat's own formatting, so every other
    cell stays byte-identical). Raises ``ValueError`` for a URL with a double quote or a line break.
    """
    import nbformat

    if '"' in url or "\n" in url:
        raise ValueError(f"repository.url {url!r} cannot stand in a Python string literal")
    changed = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        if not code or "remove-cell" not in code[0].metadata.get("tags", []):
            continue
        current = install_cell_repository(code[0].source)
        if current is None or current == url:
            continue
        code[0].source = REPOSITORY_LINE.sub(lambda m: f'{m.group(1)}"{url}"', code[0].source, count=1)
        nbformat.write(nb, path)
        changed.append(path)
    return changed


def sync(app: Sphinx, config: Config) -> None:
    notebooks = sorted(Path(app.srcdir).glob("chapters/*.ipynb")) + sorted(Path(app.srcdir).glob("book/*.ipynb"))
    changed = sync_install_cells(notebooks, repository_url(config.html_theme_options or {}))
    if changed:
        logger.info(
            "launch_switch: wrote repository.url into the install cell of %d notebooks (commit them): %s",
            len(changed),
            ", ".join(p.name for p in changed),
        )


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", switch, priority=900)
    app.connect("config-inited", sync, priority=910)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
