"""Sphinx extension: launch buttons only when the book says where its repository is.

``_config.yml`` configures launch buttons for hosted notebook services
(``launch_buttons``: Binder, Colab, JupyterLab as the interface) but they can
only point somewhere if ``repository.url`` is set. While it is empty (the
default: the book is built and read offline) this extension switches them off,
so chapter pages carry no link to an outside service and the theme does not
guess one. Set ``repository.url`` (and ``repository.branch``) to switch them on;
see book/run_it_yourself.md.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.config import Config

PROVIDER_KEYS = ("binderhub_url", "jupyterhub_url", "colab_url", "jupyterlite_url", "thebe")


def launch_enabled(theme_options: dict) -> bool:
    return bool(str(theme_options.get("repository_url") or "").strip())


def switch(app: Sphinx, config: Config) -> None:
    options = dict(config.html_theme_options or {})
    if not launch_enabled(options):
        buttons = dict(options.get("launch_buttons") or {})
        for key in PROVIDER_KEYS:
            buttons.pop(key, None)
        options["launch_buttons"] = buttons
        config.html_theme_options = options


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", switch, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
