"""Sphinx extension: serve MathJax 3 and the ipywidgets embed bundle from the site.

``make assets`` (scripts/fetch_assets.sh) installs both from the npm registry
into ``book/_vendor/site/vendor`` (ignored by git, never committed). If that
folder is there, the built pages load everything from the site itself and
make no request to another host. If it is not (a reader without npm), the
book falls back to the public CDN copies and says so once.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
BOOK = HERE.parent
VENDOR_SITE = BOOK / "_vendor" / "site"
MATHJAX = VENDOR_SITE / "vendor" / "mathjax" / "tex-chtml.js"
EMBED = VENDOR_SITE / "vendor" / "html-manager" / "embed.js"

CDN_MATHJAX = "https://cdn.jsdelivr.net/npm/mathjax@3.2.2/es5/tex-chtml.js"
CDN_REQUIRE = "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.4/require.min.js"
CDN_EMBED = "https://cdn.jsdelivr.net/npm/@jupyter-widgets/html-manager@1.0.15/dist/embed-amd.js"


def configure(app: Sphinx, config: Config) -> None:
    config.html_static_path = list(config.html_static_path) + [str(BOOK / "_static")]
    config.html_favicon = str(BOOK / "_static" / "favicon.png")
    shim = {"mathjax2-shim.js": {}}
    if MATHJAX.is_file() and EMBED.is_file():
        config.html_extra_path = list(config.html_extra_path) + [str(VENDOR_SITE)]
        # Relative paths are taken relative to _static; the vendor folder sits
        # at the site root, next to _static.
        config.mathjax_path = "../vendor/mathjax/tex-chtml.js"
        config.nb_ipywidgets_js = {**shim, "../vendor/html-manager/embed.js": {}}
    else:
        logger.info(
            "offline_assets: no local MathJax/ipywidgets copies in %s (run `make assets` "
            "with npm); the built pages will load them from public CDNs.",
            VENDOR_SITE,
        )
        config.mathjax_path = CDN_MATHJAX
        config.nb_ipywidgets_js = {
            **shim,
            CDN_REQUIRE: {"crossorigin": "anonymous"},
            CDN_EMBED: {"data-jupyter-widgets-cdn": "https://cdn.jsdelivr.net/npm/", "crossorigin": "anonymous"},
        }


def dedupe_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Drop repeated <script> entries (Jupyter Book 1 registers sphinx-thebe's
    inline configuration twice, which is a JavaScript redeclaration error)."""
    seen, unique = set(), []
    render = context.get("js_tag", str)
    for js in context.get("script_files", []):
        key = render(js)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def singlehtml_widgets(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """In the single-page build (the PDF), embed the widget state of every page.

    myst-nb adds a notebook's widget state and the widget scripts to that
    notebook's own page only; the single page is the root document's, so it
    would carry none and every widget would be blank. html-manager renders each
    stored view from whichever state script holds its model, so one state script
    per notebook is enough.
    """
    if app.builder.name != "singlehtml":
        return
    from myst_nb.sphinx_ import NbMetadataCollector

    data = NbMetadataCollector.get_doc_data(app.env)
    for docname in sorted(app.env.found_docs):
        if docname == pagename or docname not in data:
            continue
        for path, kwargs in NbMetadataCollector.get_js_files(app.env, docname).values():
            app.add_js_file(path, **kwargs)


def setup(app: Sphinx) -> dict:
    # priority > 500 so that we run after myst-nb has registered its config values
    app.connect("config-inited", configure, priority=900)
    app.connect("html-page-context", singlehtml_widgets, priority=800)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
