"""What the browser tests share: the site and its pages, a local server, chromium, opening a page, skip-or-fail."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

from tests.browser.mathjax import MATHJAX_MS, wait_typeset
from tests.browser.widgets import VIEW, WAIT_MS
from tests.helpers import toc_files

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Every page of the book, and the widths of ``book/_static/layout.css`` that the page tests open them at.
PAGES = [f + ".html" for f in toc_files(ROOT)]
WIDTHS = {"desktop": 1280, "phone": 390}

sys.path.insert(0, str(ROOT / "scripts"))
from site_browser import CHROMIUM, serve  # noqa: E402
from site_browser import chromium as _chromium  # noqa: E402


def need(condition: bool, why: str) -> None:
    """Skip (outside CI) or fail (with CI=true) when a prerequisite is missing."""
    if not condition:
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


@contextlib.contextmanager
def chromium():
    need(Path(CHROMIUM).is_file(), f"{CHROMIUM} not found (apt-get install chromium)")
    with _chromium() as ctx:
        yield ctx


def settle(page) -> None:
    """Wait until what changes the layout has happened: MathJax typeset, fonts and images loaded, widgets drawn."""
    if page.locator(".math").count():
        wait_typeset(page)
    page.evaluate("() => document.fonts.ready.then(() => true)")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=MATHJAX_MS)
    views = page.locator(VIEW).count()
    if views:
        page.wait_for_function(
            f"() => document.querySelectorAll('{VIEW}').length <= document.querySelectorAll('.widget-subarea').length",
            timeout=MATHJAX_MS,
        )


def every_page_and_width(test):
    """Parametrize ``test`` over every page of the book (``page_path``) and every width of :data:`WIDTHS` (``width``)."""
    test = pytest.mark.parametrize("page_path", PAGES)(test)
    return pytest.mark.parametrize("width", list(WIDTHS.values()), ids=list(WIDTHS))(test)


@contextlib.contextmanager
def opened(browser, url: str, width: int):
    """A new page of ``browser`` ``width`` px wide, loaded from ``url`` and settled; closed on leaving."""
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(url, wait_until="load", timeout=MATHJAX_MS)
        settle(page)
        yield page
    finally:
        page.close()


__all__ = [
    "IN_CI",
    "PAGES",
    "ROOT",
    "SITE",
    "WIDTHS",
    "chromium",
    "every_page_and_width",
    "need",
    "opened",
    "serve",
    "settle",
]
